import Dispatch
import Testing

@testable import Future

/// A timeout races its work against the clock once the work waits (`timeout(_:orFailWith:)`, and
/// Cancellation.md: "The alarm is set once the work waits"): work that settles without waiting
/// settles so, however long its steps took; a review found the docs promised the deadline would be
/// noticed as such work ends. Each test's control, the same step after a wait, fails the timeout.
struct TimeoutOfWorkThatNeverWaits {
    /// Dispatch's clock: a synchronous step spins six times the interval, then the work
    /// succeeds, and wins. The control: the same step after a wait fails the timeout.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func workThatNeverWaitsWinsItsTimeoutOnDispatchsClock() {
        let late = TestError("late")
        // The control's work waits for its resolver: `run` returns once it waits, its alarm set.
        // It is resolved on a thread of its own, where the step spins: not one of Dispatch's
        // global threads, which the alarm needs.
        let pending = Pending<Int>()
        let control = Delivery<Result<Int, TestError>>()
        pending.promise
            .map { value -> Int in
                // Past the deadline, until the alarm has cancelled the work (the run this thread
                // drives): on a loaded machine the alarm came after a spin of 30 ms.
                let work = Engine.Nesting.drivenRun
                spin(until: { work?.isCancelledOrInsideOne == true })
                return value
            }
            .timeout(.milliseconds(5), orFailWith: late)
            .run { control.send($0) }
        let resolver = pending.resolvers.wait()
        detachThread { resolver?.fulfill(1) }
        #expect(control.wait() == .failure(late))

        let bounded = Promise<Int, TestError>(value: 1)
            .map { value -> Int in
                spin(microseconds: 30_000)  // past the deadline, as in the control
                return value
            }
            .timeout(.milliseconds(5), orFailWith: late)
        #expect(outcome(of: bounded) == .success(1), "work that never waited was timed")
    }

    /// A manual clock, with no wall time in it: the work's step moves the clock past the
    /// deadline, then the work succeeds. The control: the same step after a wait.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func workThatNeverWaitsWinsItsTimeoutOnAManualClock() {
        let late = TestError("late")
        let clock = ManualClock()
        let pending = Pending<Int>()
        let control = Delivery<Result<Int, TestError>>()
        pending.promise
            .map { value -> Int in
                clock.advance(by: .seconds(2))  // past the deadline, one second away
                return value
            }
            .timeout(.seconds(1), orFailWith: late, clock: clock)
            .run { control.send($0) }
        #expect(clock.timerCount == 1)  // the work waits: its alarm is set
        let resolver = pending.resolvers.wait()
        detachThread { resolver?.fulfill(1) }
        #expect(control.wait() == .failure(late))

        let other = ManualClock()
        let neverWaits = Promise<Int, TestError>(value: 1)
            .map { value -> Int in
                other.advance(by: .seconds(2))  // past the deadline, as in the control
                return value
            }
            .timeout(.seconds(1), orFailWith: late, clock: other)
        #expect(outcome(of: neverWaits) == .success(1), "work that never waited was timed")
        #expect(other.now.offset == .seconds(2))
    }
}
