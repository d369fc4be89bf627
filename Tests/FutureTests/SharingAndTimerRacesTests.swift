import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// From a review of `share()`, `pending()` and the timers.
@Suite(.serialized) struct SharingAndTimerRaces {
    /// `share()`: "runs that come while it is under way wait and go on in turn (but for work that
    /// settles on the first run's thread before that run's call of the shared promise has
    /// returned: the first run goes on as that call returns, after the others)". The first run
    /// starts the work inside its call of the shared promise, on its own thread, where the work's
    /// first step runs; a second run joins from this thread as that step runs, and waits; the step
    /// then returns, and the work settles on the first run's thread, still inside its call: the
    /// second goes on there at once, the first as its call returns. (The review found this order
    /// against the doc's "in turn". Keeping the order needs the settle to know which level of runs
    /// is the first run's, which the nesting does not record: the doc says so instead.)
    @Test func runsThatWaitForWorkThatSettlesInTheFirstRunsCallGoOnFirst() {
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
        #expect(order.all == ["second", "first"])
    }
}
