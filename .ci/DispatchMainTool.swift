// Compiled by .ci/run with CopyIn/Future.swift, and run with the Swift runtime's legacy
// executor checks (SWIFT_IS_CURRENT_EXECUTOR_LEGACY_MODE_OVERRIDE=legacy), those of macOS 13 and
// 14, where "on the main actor" is "on the main thread". A command-line tool calls
// `dispatchMain()`, after which the main queue is drained by another thread; the main-actor steps
// must still run there, as the main actor's, and not trap.

import Dispatch

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@main enum Tool {
    @MainActor static var shown: [String] = []

    static func main() {
        Promise<Int, Never>(value: 41)
            .map(on: .main) { $0 + 1 }
            .done(on: .main) { shown.append("\($0)") }
            .flatMap { Promise<Void, PromiseError>(error: .timedOut) }
            .catch(on: .main) { _ in shown.append("failed") }
            .done(on: .main) { check() }
            .run()
        dispatchMain()
    }

    @MainActor static func check() {
        precondition(shown == ["42", "failed"], "unexpected: \(shown)")
        print("main-actor steps after dispatchMain(): \(shown)")
        exit(0)
    }
}
