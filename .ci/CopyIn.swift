// Compiled by .ci/run together with CopyIn/Future.swift, as one module, the way an app
// that copies the file in compiles it. This module declares its own `Result`, `Error` and `Lock`,
// as a reader of the tutorial Future grew from has (seed 004), so the library must not rely on
// those names meaning the standard library's; and, at the end, types with the names of the
// library's internals, which must therefore live inside the library's own types.

import Synchronization

// swift-format-ignore: AlwaysUseLowerCamelCase
// The tutorial's own case names.
enum Result<T, E> {
    case Some(T)
    case None(E)
}

// swift-format-ignore: AlwaysUseLowerCamelCase
// The tutorial's own case names.
enum Error: String, Swift.Error {
    case NoUrl
    case RequestFailed
}

struct Lock {
    func lock() {}
    func unlock() {}
}

func lookUp(id: String) -> Promise<Int, Error> {
    Promise { callback in
        guard let number = Int(id) else { return callback(.failure(.NoUrl)) }
        callback(.success(number))
    }
}

func describe(_ outcome: Result<Int, Error>) -> String {
    switch outcome {
    case .Some(let value): "some \(value)"
    case .None(let error): "none \(error.rawValue)"
    }
}

/// What the runs saw. Their completions may run on any thread, so it is guarded.
final class Seen: Sendable {
    let names = Mutex<[String]>([])
    func record(_ outcome: Result<Int, Error>) { names.withLock { $0.append(describe(outcome)) } }
}

@main enum CopyIn {
    static func main() {
        Lock().lock()
        let seen = Seen()
        lookUp(id: "41").then { $0 + 1 }.run(
            some: { seen.record(.Some($0)) }, none: { seen.record(.None($0)) })
        lookUp(id: "x").run(some: { seen.record(.Some($0)) }, none: { seen.record(.None($0)) })
        let names = seen.names.withLock { $0 }
        precondition(names == ["some 42", "none NoUrl"], "unexpected: \(names)")
        print("copy-in: \(names)")
    }
}

// Names a module is likely to have too; the library's internals must not clash with them.
struct Node {}
struct Stage {}
struct Source {}
struct Slot {}
struct Plan {}
enum Next {}
enum Box {}
protocol Outcome {}
enum Diagnostics {}
