import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Found by a review of `share()`, `pending()` and the timers: each test shows a documented
/// promise that the engine breaks.
@Suite(.serialized) struct SharingAndTimerRaces {
    /// `share()`: "runs that come while it is under way wait and go on in turn" (the model
    /// checker's rule: in the order they came). The first run starts the work inside its call of
    /// the shared promise, on its own thread, where the work's first step runs; a second run
    /// joins from this thread as that step runs, and waits; the step then returns, and the work
    /// settles on the first run's thread, still inside the first run's call. The first run must
    /// go on first; the settle resumes the second at once, on that thread, and the first only
    /// once its call has returned, after the second went on.
    @Test func runsThatWaitForSharedWorkGoOnInTheOrderTheyCame() {
        let order = Log()
        let stepRuns = DispatchSemaphore(value: 0)
        let secondJoined = DispatchSemaphore(value: 0)
        let shared = Guarantee(value: ()).map { () -> Int in
            stepRuns.signal()
            _ = secondJoined.wait(timeout: .now() + timeout)
            return 1
        }.share()
        let bothDone = DispatchGroup()
        bothDone.enter()
        bothDone.enter()
        detachThread {
            shared.run { _ in
                order.record("first")
                bothDone.leave()
            }
        }
        #expect(stepRuns.wait(timeout: .now() + timeout) == .success)
        shared.run { _ in
            order.record("second")
            bothDone.leave()
        }
        secondJoined.signal()  // the second run waits: `run` returned
        #expect(bothDone.wait(timeout: .now() + timeout) == .success)
        #expect(order.all == ["first", "second"])
    }

}
