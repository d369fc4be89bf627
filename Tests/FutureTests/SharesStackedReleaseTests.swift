import Dispatch
import Testing

@testable import Future

/// The README: "Combinations nested in combinations (`when`, …) and `share()`s stacked on
/// `share()`s run, complete, cancel and are released on a 512 KiB stack at any depth (tested
/// 10,000 deep in debug and release builds)". (`Nesting`'s tests build and drop theirs on a large
/// stack.) A shared promise is an operation alone, which keeps its `Shared`, which keeps its work
/// while no run of it is under way: ten thousand `share()`s stacked were released one inside the
/// other, with no level of releases (`Nesting.release`) between them, and overflowed the stack.
/// In a child process, where a stack overflow fails the test instead of ending the test run.
@Suite struct SharesStackedRelease {
    static let depth = 10_000

    enum Use: String, CaseIterable, Codable, Sendable { case neverRun, runAndCancelled }

    #if os(macOS) || os(Linux)
        @Test(arguments: Use.allCases)
        func tenThousandStackedSharesAreReleasedOnASmallStack(use: Use) async {
            await #expect(processExitsWith: .success) { [use] in
                exitTestWatchdog(expectsSuccess: true)
                let ended = Delivery<Void>()
                onThread(stackSize: smallStack) {
                    let innermost = Promise<Int, TestError> { _ in }  // never settles
                    var promise = innermost
                    for _ in 0..<Self.depth { promise = promise.share() }
                    if use == .runAndCancelled {
                        // Every level's work cancelled as abandoned: each is idle again, and keeps
                        // its work.
                        promise.ensure { ended.send(()) }.run { _ in }.cancel()
                    }
                }
                if use == .runAndCancelled { #expect(ended.wait() != nil) }
            }
        }
    #endif
}
