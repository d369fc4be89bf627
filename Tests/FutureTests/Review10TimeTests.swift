import Dispatch
import Testing

@testable import Future

/// Review 10 (time): work that never waits and whose synchronous steps run past a timeout's
/// deadline. The docs say the deadline is noticed "at the work's next operation, hop or entered
/// promise, or as the work ends: synchronous steps that run past it finish first, and the promise
/// fails once they have" (Future.docc/Cancellation.md, "Giving up after a while"), and
/// `timeout(_:orFailWith:)`: "Fails with `error()` unless the promise settles within `interval`
/// ... When the deadline passes first, the work is cancelled ... or as it ends. Synchronous steps
/// that run past the deadline finish first ...; the promise then fails". The alarm is set only
/// once the work waits (Engine/Timeout.swift: `if timeout.waits`), so work that never waits
/// settles with its own outcome however long it ran: the deadline is never noticed.
@Suite("Review 10: a timeout whose work runs past its deadline without waiting")
struct Review10TimeoutOfWorkThatNeverWaits {
    /// Dispatch's clock: a synchronous step spins six times the interval, then the work
    /// succeeds. The control: the same step after a wait fails the timeout.
    @Test func aSynchronousStepPastTheDeadlineFailsTheTimeoutOnDispatchsClock() {
        let late = TestError("late")
        // The control's work waits for its resolver: `run` returns once it waits, its alarm set.
        // It is resolved on a thread of its own, where the step spins: not one of Dispatch's
        // global threads, which the alarm needs.
        let pending = Pending<Int>()
        let control = Delivery<Result<Int, TestError>>()
        pending.promise
            .map { value -> Int in
                spin(microseconds: 30_000)  // past the deadline
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
        #expect(
            outcome(of: bounded) == .failure(late),
            "work that ran 30 ms without waiting won a 5 ms timeout")
    }

    /// A manual clock, with no wall time in it: the work's step moves the clock past the
    /// deadline, then the work succeeds. The control: the same step after a wait.
    @Test func aStepThatMovesAManualClockPastTheDeadlineFailsTheTimeout() {
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
        #expect(
            outcome(of: neverWaits) == .failure(late),
            "work that moved the clock 2 s without waiting won a 1 s timeout")
        #expect(other.now.offset == .seconds(2))
    }
}
