import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Waits whose deadline has passed as they are set, on every clock: each test failed before its
/// fix (found by a review of the time operators), and says which documented sentence it pins.
@Suite("Waits already due") struct WaitsAlreadyDue {
    /// `ManualClock.sleep(until:)`: "Suspends until the clock reaches `deadline`". A deadline the
    /// clock has already reached (its `now`) is reached: the sleep returns without waiting for an
    /// advance, as `ContinuousClock`'s and every `Clock`'s does. It sets a timer that waits for
    /// the next advance instead.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func aSleepUntilADeadlineAlreadyReachedReturnsWithoutAnAdvance() async {
        let clock = ManualClock(now: .init(offset: .seconds(5)))
        let woke = Delivery<Void>()
        let sleeper = Task {
            try? await clock.sleep(until: clock.now)
            woke.send(())
        }
        // Either it returned, or it set a timer and waits on it (the timer is set before the
        // sleep suspends, and only an advance fires it); or neither, for `timeout` at most.
        let deadline = DispatchTime.now() + timeout
        while woke.all.isEmpty && clock.timerCount == 0 && DispatchTime.now() < deadline {
            await Task.yield()
        }
        #expect(!woke.all.isEmpty, "sleep(until: now) waits for an advance")
        #expect(clock.timerCount == 0)
        await clock.advance(by: .zero)  // lets a sleeper that waits go
        #expect(await bounded { await sleeper.value } != nil, "the sleeper did not return")
    }

    /// `after(_:clock:)`: "A guarantee that succeeds after `interval` on `clock`", and a
    /// `timeout` of zero or less "fails the work as soon as it waits ... as on every clock"
    /// (Time.swift; CHANGELOG: "A `timeout` of zero or less means what it means on every
    /// clock"). On a `ContinuousClock` both happen as the run starts; on a `ManualClock`, whose
    /// time is already at the deadline, they wait for the next advance.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func aWaitOfZeroOnAManualClockEndsWithoutAnAdvanceAsOnEveryClock() {
        let clocks: [(String, any Clock<Duration>)] = [
            ("continuous", ContinuousClock()), ("manual", ManualClock()),
        ]
        for (name, clock) in clocks {
            let fired = Delivery<Void>()
            let pause = after(.zero, clock: clock).run { fired.send(()) }
            let kept = Delivery<Resolver<Int, TestError>>()  // work that never answers
            let outcomes = Delivery<Result<Int, TestError>>()
            let timeout = Promise<Int, TestError> { kept.send($0) }
                .timeout(.zero, orFailWith: TestError("slow"), clock: clock)
                .run { outcomes.send($0) }
            if name == "continuous" {  // which may go on on another thread
                _ = fired.wait()
                _ = outcomes.wait()
            }
            #expect(!fired.all.isEmpty, "after(.zero, clock: \(name)) waits for an advance")
            #expect(
                outcomes.all == [.failure(TestError("slow"))],
                "timeout(.zero, clock: \(name)) lets work that waits go on waiting")
            if let manual = clock as? ManualClock { #expect(manual.timerCount == 0) }
            pause.cancel()
            timeout.cancel()
        }
    }

    /// `delay(_:clock:)`: "The steps after it run where the clock woke the run: ... on a global
    /// queue for `ContinuousClock` and `SuspendingClock`, which wait on Dispatch's timers as
    /// ``delay(_:)`` does"; `after(_:clock:)`: they "wait on Dispatch's timers, as ``after(_:)``
    /// does", whose zero is "a hop to a global queue, which lets the caller's work go on first".
    /// With an interval of zero or less, the steps after run at once on the caller's thread,
    /// inside its `run`.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test(arguments: [0, -1])
    func aWaitOfZeroOrLessOnAStandardClockGoesOnOnAGlobalQueue(milliseconds: Int) async {
        let interval = Duration.milliseconds(milliseconds)
        // Each wait's steps, and whether they ran on the caller's thread; checked here, as an
        // expectation on a thread of its own is no test's.
        let ranHere = Log()
        await onThread(stackSize: 1 << 20) {
            let caller = pthread_self()
            let clocks: [(String, any Clock<Duration>)] = [
                ("none", ContinuousClock()), ("continuous", ContinuousClock()),
                ("suspending", SuspendingClock()),
            ]
            for (name, clock) in clocks {
                let afterRan = Delivery<Bool>()
                let delayRan = Delivery<Bool>()
                let pause = name == "none" ? after(interval) : after(interval, clock: clock)
                let delayed =
                    name == "none"
                    ? Guarantee(value: 1).delay(interval)
                    : Guarantee(value: 1).delay(interval, clock: clock)
                pause.run { afterRan.send(pthread_equal(pthread_self(), caller) != 0) }
                delayed.run { _ in delayRan.send(pthread_equal(pthread_self(), caller) != 0) }
                ranHere.record("after, \(name): \(afterRan.wait().map { "\($0)" } ?? "never")")
                ranHere.record("delay, \(name): \(delayRan.wait().map { "\($0)" } ?? "never")")
            }
        }
        #expect(
            ranHere.all
                == ["none", "continuous", "suspending"].flatMap {
                    ["after, \($0): false", "delay, \($0): false"]
                })
    }
}
