// Compiled by .ci/run with CopyIn/Future.swift in a release build (the tests run in a
// debug one): combinations and shares nested 10,000 deep are built, run, completed and released
// on a thread with a 512 KiB stack, Apple's Dispatch worker size, with the right value; and so
// is a fallback list of 2,500 promises nested through closures, each `recover` closure keeping
// the promise before it.

import Dispatch

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

struct Failed: Error {}

final class Work: Sendable {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
}

/// Runs `body` on a new thread with a 512 KiB stack and waits for it.
func onSmallStack(_ body: @escaping @Sendable () -> Void) {
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    pthread_attr_setstacksize(&attributes, 512 << 10)
    #if canImport(Darwin)
        var thread: pthread_t?
    #else
        var thread = pthread_t()
    #endif
    let work = Unmanaged.passRetained(Work(body)).toOpaque()
    let created = pthread_create(
        &thread, &attributes,
        { raw in
            #if canImport(Darwin)
                Unmanaged<Work>.fromOpaque(raw).takeRetainedValue().body()
            #else
                Unmanaged<Work>.fromOpaque(raw!).takeRetainedValue().body()
            #endif
            return nil
        }, work)
    precondition(created == 0)
    #if canImport(Darwin)
        pthread_join(thread!, nil)
    #else
        pthread_join(thread, nil)
    #endif
}

/// One level of nesting around `promise`, which adds 1 to its value.
func nest(_ kind: String, _ promise: Guarantee<Int>) -> Guarantee<Int> {
    switch kind {
    case "when": return when(fulfilled: [promise]).map { $0[0] + 1 }
    case "when(resolved:)": return when(resolved: [promise]).map { $0[0].get() + 1 }
    case "race": return race([promise]).map { $0 + 1 }
    case "any": return any([promise]).map { $0[0].get() + 1 }.recover { _ in -1 }
    case "timeout":
        return promise.setFailureType(to: PromiseError.self)
            .timeout(.seconds(3600), orFailWith: .timedOut).map { $0 + 1 }.recover { _ in -1 }
    default: return promise.map { $0 + 1 }.share()
    }
}

@main enum NestingInRelease {
    nonisolated static func main() {
        let depth = 10_000
        for kind in ["when", "when(resolved:)", "race", "any", "timeout", "share"] {
            for settlesLater in [false, true] {
                let done = DispatchSemaphore(value: 0)
                nonisolated(unsafe) var value: Int?
                onSmallStack {
                    let innermost =
                        settlesLater
                        ? Guarantee<Int> { resolver in
                            DispatchQueue.global().async { resolver(.success(0)) }
                        }
                        : Guarantee(value: 0)
                    let promise = (0..<depth).reduce(innermost) { promise, _ in nest(kind, promise)
                    }
                    promise.run {
                        value = $0.get()
                        done.signal()
                    }
                    precondition(done.wait(timeout: .now() + 60) == .success, "\(kind): no outcome")
                }
                precondition(
                    value == depth, "\(kind) nested \(depth) deep: \(String(describing: value))")
                print(
                    "\(kind) nested \(depth) deep, settling \(settlesLater ? "later" : "at once"): \(depth)"
                )
            }
        }
        for runs in [false, true] {
            // `share()`s stacked with no step between them, each keeping the next as its work:
            // built, run and cancelled (each level idle again) or never run, then let go of.
            onSmallStack {
                let innermost = Guarantee<Int> { _ in }  // never settles
                let promise = (0..<depth).reduce(innermost) { promise, _ in promise.share() }
                if runs { promise.run { _ in }.cancel() }
            }
            let use = runs ? "run and cancelled" : "never run"
            print("share()s stacked \(depth) deep, \(use): released")
        }
        for firstSucceeds in [false, true] {
            let levels = 2_500
            let done = DispatchSemaphore(value: 0)
            nonisolated(unsafe) var value: Int?
            onSmallStack {
                var promise = Guarantee<Int>(value: 0)
                for level in 1...levels {
                    let previous = promise
                    let attempt =
                        firstSucceeds
                        ? Promise<Int, Failed>(value: level) : Promise(error: Failed())
                    promise = attempt.recover { _ in previous }
                }
                promise.run {
                    value = $0.get()
                    done.signal()
                }
                precondition(done.wait(timeout: .now() + 60) == .success, "closures: no outcome")
            }
            let expected = firstSucceeds ? levels : 0
            precondition(value == expected, "closures: \(String(describing: value))")
            print(
                "\(levels) promises nested through closures, \(firstSucceeds ? "the first" : "the last") succeeding: \(expected)"
            )
        }
    }
}
