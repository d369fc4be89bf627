import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// Time at its edges: intervals too long for Dispatch, timeouts of zero or less, and the error of
// a timeout that did not fire. Each test names the documented sentence it pins.

/// A clock of the app's own, which keeps `ContinuousClock`'s time and sleeps on it, and tells
/// when a sleep has returned or thrown.
@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
struct SleepReportingClock: Clock {
    let sleepsStarted = Delivery<Void>()
    let sleepsEnded = Delivery<Void>()
    var now: ContinuousClock.Instant { ContinuousClock.now }
    var minimumResolution: Duration { ContinuousClock().minimumResolution }
    func sleep(until deadline: ContinuousClock.Instant, tolerance: Duration?) async throws {
        sleepsStarted.send(())
        defer { sleepsEnded.send(()) }
        try await ContinuousClock().sleep(until: deadline, tolerance: tolerance)
    }
}

/// Intervals past `Int64.max` seconds: a `Duration` holds them (`.seconds(Int64.max) * 2`), and
/// `after`, `delay`, `retry(_:delay:)` and `timeout` (with no clock, or on `ContinuousClock` and
/// `SuspendingClock`) take them as a very long wait, as they take `.seconds(Int64.max)`, and a
/// `ManualClock` does. (`Promise.nanoseconds` read their seconds, which trapped; the tests run in a
/// child process, where a trap fails the test.)
@Suite("Intervals past Int64.max seconds") struct HugeIntervals {
    /// Runs `promise`, whose work waits for `pending`'s resolver, answers 1 once the run has
    /// called it, and waits for the outcome.
    static func outcome(
        of promise: Promise<Int, TestError>, answeredBy pending: Pending<Int>
    ) -> Result<Int, TestError>? {
        let delivered = Delivery<Result<Int, TestError>>()
        promise.run { delivered.send($0) }
        guard let resolver = pending.resolvers.wait() else { return nil }
        pending.resolvers.clear()
        resolver.fulfill(1)
        return delivered.wait()
    }

    #if os(macOS) || os(Linux)
        /// `after(_:)`: "A guarantee that succeeds after `interval`"; `delay(_:)`: "Passes the
        /// outcome ... on after `interval`"; cancelling the run cancels the timer.
        @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
        @Test
        func afterAndDelayOfAHugeIntervalWaitAndCancel() async {
            await #expect(processExitsWith: .success) {
                exitTestWatchdog(expectsSuccess: true)
                let huge = Duration.seconds(Int64.max) * 2
                let ensured = Counter()
                after(huge).ensure { ensured.increment() }.run { _ in }.cancel()
                Promise<Int, TestError>(value: 1).delay(huge).ensure { ensured.increment() }
                    .run { _ in }.cancel()
                #expect(ensured.value == 2)
            }
        }

        /// `timeout(_:orFailWith:)`: "Fails with `error()` unless the promise settles within
        /// `interval`": work that settles in a moment wins against a huge interval.
        @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
        @Test
        func aTimeoutOfAHugeIntervalLetsTheWorkWin() async {
            await #expect(processExitsWith: .success) {
                exitTestWatchdog(expectsSuccess: true)
                let huge = Duration.seconds(Int64.max) * 2
                let pending = Pending<Int>()
                let bounded = pending.promise.timeout(huge, orFailWith: TestError("late"))
                #expect(
                    HugeIntervals.outcome(of: bounded, answeredBy: pending) == .success(1))
            }
        }

        /// The same on `ContinuousClock`, which "set[s] their timer on Dispatch's, as
        /// `timeout(_:orFailWith:)` does"; a `ManualClock` takes the interval (the control).
        @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
        @Test
        func aTimeoutOfAHugeIntervalOnAContinuousClockLetsTheWorkWin() async {
            await #expect(processExitsWith: .success) {
                exitTestWatchdog(expectsSuccess: true)
                let huge = Duration.seconds(Int64.max) * 2
                let pending = Pending<Int>()
                let manual = pending.promise.timeout(
                    huge, orFailWith: TestError("late"), clock: ManualClock())
                #expect(
                    HugeIntervals.outcome(of: manual, answeredBy: pending) == .success(1))
                let continuous = pending.promise.timeout(
                    huge, orFailWith: TestError("late"), clock: ContinuousClock())
                #expect(
                    HugeIntervals.outcome(of: continuous, answeredBy: pending) == .success(1)
                )
            }
        }
    #endif
}

/// `timeout(_:orFailWith:)`: an interval of zero or less "fails the work as soon as it waits
/// [...]: the chain then goes on on the thread that waited, not a global queue". The alarm's
/// deadline has passed as it is set, so it rings at once, inside `run` here (the doc said the
/// alarm's thread, a global queue's, for all work that waits). The same on `ContinuousClock`,
/// whose timer is Dispatch's.
@Suite("Timeouts of zero or less") struct ZeroTimeouts {
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func theStepsAfterATimeoutOfZeroOrLessThatFailsWorkThatWaitsRunOnTheThreadThatWaited() async {
        let ranHere = Log()
        await onThread(stackSize: 1 << 20) {
            let caller = pthread_self()
            for interval in [Duration.zero, .seconds(-1)] {
                for clock in ["none", "continuous"] {
                    let pending = Pending<Int>()  // work that waits, and never answers
                    let bounded =
                        clock == "none"
                        ? pending.promise.timeout(interval, orFailWith: TestError("late"))
                        : pending.promise.timeout(
                            interval, orFailWith: TestError("late"), clock: ContinuousClock())
                    let here = Delivery<Bool>()
                    bounded.run { _ in here.send(pthread_equal(pthread_self(), caller) != 0) }
                    let ran = here.wait().map { "\($0)" } ?? "never"
                    ranHere.record("\(interval), \(clock): on the caller's thread \(ran)")
                }
            }
        }
        #expect(
            ranHere.all
                == [
                    "0.0 seconds, none: on the caller's thread true",
                    "0.0 seconds, continuous: on the caller's thread true",
                    "-1.0 seconds, none: on the caller's thread true",
                    "-1.0 seconds, continuous: on the caller's thread true",
                ])
    }
}

/// `timeout(_:orFailWith:clock:)`: "Fails with `error()` unless the promise settles within
/// `interval`": a timeout whose work wins never makes its error. On a clock of the app's own, the
/// alarm's task calls the alarm however its sleep ends (`Engine.setAlarm`, Timeline.swift), late,
/// once the timeout has ended: the alarm made the error before it checked (fixed). On Dispatch's
/// clock and a `ManualClock`, a cancelled alarm is never called (the controls).
@Suite("The error of a timeout that did not fire") struct TimeoutErrors {
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func aTimeoutWhoseWorkWinsNeverMakesItsError() async {
        let own = SleepReportingClock()
        let made = Log()
        // On a thread of its own: the waits below would otherwise hold up a thread of the pool
        // that the clock's task needs.
        await onThread(stackSize: 1 << 20) {
            let clocks: [(String, any Clock<Duration>)] = [
                ("continuous", ContinuousClock()), ("manual", ManualClock()), ("own", own),
            ]
            for (name, clock) in clocks {
                @Sendable func late() -> TestError {
                    made.record(name)
                    return TestError("late")
                }
                // Work that waits until the alarm is set (for the clock of the app's own, until
                // its task sleeps), then wins.
                let pending = Pending<Int>()
                let bounded = pending.promise
                    .timeout(.seconds(3600), orFailWith: late(), clock: clock)
                let delivered = Delivery<Result<Int, TestError>>()
                bounded.run { delivered.send($0) }
                if name == "own" { #expect(own.sleepsStarted.wait() != nil) }
                pending.resolvers.wait()?.fulfill(1)
                #expect(delivered.wait() == .success(1))
                if name == "own" {
                    // The alarm's sleep ended, cancelled as the work won: a moment after, the
                    // task calls the alarm.
                    #expect(own.sleepsEnded.wait() != nil)
                    _ = holds(within: .seconds(2)) { !made.all.isEmpty }
                }
            }
        }
        #expect(made.all.isEmpty, "error() made for a timeout that did not fire")
    }
}

/// `timeout(_:orFailWith:)`: "the promise then fails, and the chain goes on, on the thread that
/// lets go of the work last": for work that runs as the alarm rings, the work's own, unless the
/// alarm's cancel has not returned as the work stops. The doc said the work's own for all work
/// that runs: hunt64's probe (work resolved on a global queue, a 3 ms step that the deadline
/// passes) saw the steps after the timeout on the alarm's thread in 1 to 3 of about 350 such
/// timeouts, in 7 of 10 runs, when the alarm's thread was held up between its cancel and its
/// release. Here, on a manual clock, whose alarm rings on the thread that advances it, each order
/// is made to happen: the work's step outlives the alarm's cancel, or the work's cancel handler,
/// which the alarm's thread runs, outlives the work's call.
@Suite("Where a timeout that fired goes on") struct WhereAFiredTimeoutGoesOn {
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test(arguments: ["the work's step", "the alarm's cancel"])
    func aTimeoutThatFiresAsItsWorkRunsGoesOnOnTheThreadThatLetsGoOfTheWorkLast(
        _ last: String
    ) async {
        let wentOn = Delivery<String>()
        // The alarm's thread: it advances the clock.
        await onThread(stackSize: 1 << 20) {
            let alarms = pthread_self()
            let clock = ManualClock()
            let pending = Pending<Int>()
            let working = DispatchSemaphore(value: 0)
            let advanced = DispatchSemaphore(value: 0)
            let workLetGo = DispatchSemaphore(value: 0)
            let handling = DispatchSemaphore(value: 0)
            let kept = Delivery<Resolver<Int, TestError>>()
            let work =
                last == "the work's step"
                ? pending.promise.map { value in
                    working.signal()
                    _ = advanced.wait(timeout: .now() + timeout)  // the alarm rang meanwhile
                    return value
                }
                : pending.promise.then { _ in
                    Promise<Int, TestError> { resolver in
                        // Runs on the alarm's thread, until the work's thread let go of the work.
                        resolver.onCancel { _ in
                            handling.signal()
                            _ = workLetGo.wait(timeout: .now() + timeout)
                        }
                        kept.send(resolver)
                        working.signal()
                        _ = handling.wait(timeout: .now() + timeout)  // the alarm rang meanwhile
                    }
                }
            let works = Delivery<pthread_t>()
            work.timeout(.seconds(1), orFailWith: TestError("late"), clock: clock)
                .run { result in
                    let here = pthread_self()
                    let place =
                        pthread_equal(here, alarms) != 0
                        ? "the alarm's thread"
                        : works.wait().map { pthread_equal(here, $0) != 0 } == true
                            ? "the work's thread" : "another thread"
                    wentOn.send("\(result == .failure(TestError("late"))) on \(place)")
                }
            detachThread {
                works.send(pthread_self())
                pending.resolvers.wait()?.fulfill(1)  // the work goes on on this thread
                workLetGo.signal()
            }
            _ = working.wait(timeout: .now() + timeout)
            clock.advance(by: .seconds(2))
            advanced.signal()
            _ = wentOn.wait()  // the run's completion
        }
        #expect(
            wentOn.all
                == [
                    last == "the work's step"
                        ? "true on the work's thread" : "true on the alarm's thread"
                ])
    }
}
