import Dispatch
import Future
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// The manual clock's advances from two threads, and documented behaviour of the time operators
// that no other test pinned: a cancelled task's sleep, `timerCount` as `cancel()` returns, nested
// timeouts, a retry cancelled between attempts, zero waits on a clock of one's own.

@Suite struct ManualClockAdvancesFromTwoThreads {
    /// `ManualClock.advance(by:)`: "Moves time forward by `duration`, firing the timers that fall
    /// due on the way, in order. Advances from several threads at once add up: two threads that
    /// each advance by a second move the clock by two"; and the clock "fire[s] the timers that
    /// fall due, earliest deadline first". So two threads that each advance by 500 ms move the
    /// clock by a second, as one advance of a second does, and a poll every 10 ms ticks 100
    /// times on the way, each tick at its deadline.
    ///
    /// But an advance that finds no timer due moves time to its target at once, even while
    /// another thread's advance is still firing an earlier timer: that timer's steps then read a
    /// time past its deadline, and set the poll's next timer from it, so the ticks between are
    /// never due. Here the first tick (10 ms) fires on one thread; the other thread's advance,
    /// started meanwhile, returns at once with the clock at 1 s; the tick reads 1 s, and the poll
    /// ticks once instead of 100 times. (Unforced, two plain `concurrentPerform` advances lost
    /// ticks in 8 of 200 rounds while another test ran, 10 to 50 ticks instead of 100; in none
    /// of 200 on an idle machine. The bounded wait below only makes the interleaving certain.)
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func advancesFromTwoThreadsFireAPollsTicksAsOneAdvanceDoes() async {
        let clock = ManualClock()
        let ticks = Log()
        let firstTickFiring = Delivery<Void>()
        @Sendable func poll() -> Guarantee<Void> {
            after(.milliseconds(10), clock: clock).then { () -> Guarantee<Void> in
                let now = clock.now.offset
                if now <= .milliseconds(10) {
                    // The first tick, on the first thread's advance: the second thread advances
                    // meanwhile. Its advance may move time on (the fault), or wait for this tick;
                    // the wait here is bounded, so that a fixed clock passes in a second.
                    firstTickFiring.send(())
                    _ = spin(until: { clock.now.offset != now }, for: .seconds(1))
                }
                ticks.record("\(clock.now.offset)")
                return poll()
            }
        }
        let handle = poll().run()
        await concurrentlyOnThreads(iterations: 2, threads: 2) { index in
            if index == 1 { _ = firstTickFiring.wait() }
            clock.advance(by: .milliseconds(500))
        }
        #expect(clock.now.offset == .seconds(1))
        #expect(ticks.all.count == 100, "ticks seen: \(ticks.all.prefix(5))")
        #expect(ticks.all.first == "\(Duration.milliseconds(10))")
        #expect(ticks.all == (1...100).map { "\(Duration.milliseconds(10 * $0))" })
        handle.cancel()
        #expect(clock.timerCount == 0)
    }
}

/// A clock of the app's own, which keeps `ContinuousClock`'s time and sleeps on it.
@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
private struct WrappingClock: Clock {
    var now: ContinuousClock.Instant { ContinuousClock.now }
    var minimumResolution: Duration { ContinuousClock().minimumResolution }
    func sleep(until deadline: ContinuousClock.Instant, tolerance: Duration?) async throws {
        try await ContinuousClock().sleep(until: deadline, tolerance: tolerance)
    }
}

@Suite struct TimeAsDocumented {
    /// `ManualClock.sleep(until:)`: it "throws `CancellationError` if the task is cancelled
    /// first (which removes the timer)". A task cancelled before it sleeps throws, even for a
    /// deadline the clock has reached, as `ContinuousClock`'s and `SuspendingClock`'s sleeps do
    /// (checked here too), and leaves no timer.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func aSleepInACancelledTaskThrowsEvenForADeadlineReachedAsTheStandardClocksDo() async {
        let manual = ManualClock(now: .init(offset: .seconds(5)))
        let (gate, opener) = Guarantee<Void>.pending()
        let sleeper = Task { () -> [String] in
            _ = await gate.value
            var outcomes: [String] = []
            func sleep(_ name: String, _ body: () async throws -> Void) async {
                do {
                    try await body()
                    outcomes.append("\(name): returned")
                } catch {
                    outcomes.append(
                        "\(name): \(error is CancellationError ? "cancelled" : "\(error)")")
                }
            }
            await sleep("continuous") {
                try await ContinuousClock().sleep(until: .now - .seconds(1))
            }
            await sleep("suspending") { try await SuspendingClock().sleep(until: .now) }
            await sleep("manual, now") { try await manual.sleep(until: manual.now) }
            await sleep("manual, past") {
                try await manual.sleep(until: .init(offset: .seconds(1)))
            }
            await sleep("manual, later") { try await manual.sleep(for: .seconds(1)) }
            return outcomes
        }
        sleeper.cancel()
        opener.fulfill(())
        #expect(
            await awaited("the sleeper") { await sleeper.value } == [
                "continuous: cancelled", "suspending: cancelled", "manual, now: cancelled",
                "manual, past: cancelled", "manual, later: cancelled",
            ])
        #expect(manual.timerCount == 0)
    }

    /// `ManualClock`: "cancelling a run removes its timers at once: ``timerCount`` shows it as
    /// `cancel()` returns"; for a sleep, the task's cancel is the run's. Checked right after
    /// `cancel()`, not after the sleep has thrown.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test func cancellingASleepingTaskRemovesItsTimerAsCancelReturns() async {
        let clock = ManualClock()
        let sleeper = Task { try await clock.sleep(for: .seconds(1)) }
        #expect(await timersSet(1, on: clock))
        sleeper.cancel()
        #expect(clock.timerCount == 0)
        await #expect(throws: CancellationError.self) {
            try await awaited("the sleeper") { try await sleeper.value }
        }
    }

    /// The same, for every time operator and the combinations and shared promises built on them
    /// (TestingTime.md: "Cancelling a run removes its timers from the clock at once").
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test func cancellingEachKindOfRunRemovesItsTimersAsCancelReturns() {
        let clock = ManualClock()
        let (never, resolver) = Promise<Int, TestError>.pending()
        let runs: [(String, Int, RunHandle)] = [
            ("after", 1, after(.seconds(1), clock: clock).run()),
            ("delay", 1, Guarantee(value: 1).delay(.seconds(1), clock: clock).run()),
            (
                "timeout", 1,
                never.timeout(.seconds(1), orFailWith: TestError("t"), clock: clock).run { _ in }
            ),
            (
                "when", 2,
                when(fulfilled: [
                    after(.seconds(1), clock: clock), after(.seconds(2), clock: clock),
                ])
                .run()
            ),
            (
                "race", 2,
                race([after(.seconds(1), clock: clock), after(.seconds(2), clock: clock)]).run()
            ),
            ("shared", 1, after(.seconds(1), clock: clock).share().run()),
            (
                "timeout of an after", 2,
                after(.seconds(1), clock: clock).setFailureType(to: TestError.self)
                    .timeout(.seconds(2), orFailWith: TestError("t"), clock: clock).run { _ in }
            ),
            (
                "nested timeouts", 2,
                never.timeout(.seconds(1), orFailWith: TestError("i"), clock: clock)
                    .timeout(.seconds(2), orFailWith: TestError("o"), clock: clock).run { _ in }
            ),
        ]
        var left = clock.timerCount
        #expect(left == runs.map(\.1).reduce(0, +))
        for (name, timers, handle) in runs {
            handle.cancel()
            #expect(clock.timerCount == left - timers, "\(name)")
            left = clock.timerCount
        }
        withExtendedLifetime(resolver) {}
    }

    /// A timer that decides a run cancels the others' work, whose timers go before the advance
    /// returns: a timeout's work, a race's loser, a failed `when`'s other member.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test func aTimerThatDecidesARunRemovesTheTimersOfTheWorkItCancels() {
        let clock = ManualClock()
        let outcomes = Log()
        after(.seconds(10), clock: clock).setFailureType(to: TestError.self)
            .timeout(.seconds(5), orFailWith: TestError("slow"), clock: clock)
            .run { outcomes.record("timeout: \($0)") }
        race([
            after(.seconds(1), clock: clock).map { 1 }, after(.seconds(2), clock: clock).map { 2 },
        ])
        .run { outcomes.record("race: \($0)") }
        when(fulfilled: [
            after(.seconds(1), clock: clock).setFailureType(to: TestError.self)
                .flatMap { Promise<Int, TestError>(error: TestError("down")) },
            after(.seconds(3), clock: clock).setFailureType(to: TestError.self).map { 3 },
        ]).run { outcomes.record("when: \($0)") }
        #expect(clock.timerCount == 6)
        clock.advance(by: .seconds(1))
        #expect(
            outcomes.all == [
                "race: \(Result<Int, Never>.success(1))",
                "when: \(Result<[Int], TestError>.failure(TestError("down")))",
            ])
        #expect(clock.timerCount == 2)
        clock.advance(by: .seconds(4))
        #expect(
            outcomes.all.last == "timeout: \(Result<Void, TestError>.failure(TestError("slow")))")
        #expect(clock.timerCount == 0)
    }

    /// Nested timeouts on one manual clock: the earlier deadline decides; at the same deadline
    /// the inner one, whose timer was set first (timers "set for the same moment [fire] in the
    /// order they were set"), as with Dispatch's ("the innermost of nested ones first"). The work
    /// is cancelled once, and no timer is left.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test(arguments: [(5, 3, "outer"), (3, 5, "inner"), (3, 3, "inner")])
    func nestedTimeoutsOnOneManualClock(inner: Int, outer: Int, fails: String) {
        let clock = ManualClock()
        let cancelled = Counter()
        let kept = Delivery<Resolver<Int, TestError>>()
        let work = Promise<Int, TestError> { resolver in
            resolver.onCancel { _ in cancelled.increment() }
            kept.send(resolver)
        }
        let outcomes = Delivery<Result<Int, TestError>>()
        let handle = work.timeout(.seconds(inner), orFailWith: TestError("inner"), clock: clock)
            .timeout(.seconds(outer), orFailWith: TestError("outer"), clock: clock)
            .run { outcomes.send($0) }
        #expect(clock.timerCount == 2)
        clock.advance(by: .seconds(min(inner, outer)))
        #expect(outcomes.all == [.failure(TestError(fails))])
        #expect(cancelled.value == 1)
        #expect(clock.timerCount == 0)
        clock.advance(by: .seconds(10))
        #expect(outcomes.all.count == 1)
        handle.cancel()
    }

    /// Nested timeouts on two manual clocks advanced from two threads at once, the work sometimes
    /// settled from one of them as well: one outcome each time, and no timer left on either
    /// clock once both advances have returned.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test func nestedTimeoutsOnTwoClocksAdvancedTogetherEndOnce() async {
        let rounds = 500
        let wrong = Log()
        let done = Counter()
        await concurrentlyOnThreads(iterations: rounds, threads: 1) { round in
            defer { done.increment() }
            let inner = ManualClock()
            let outer = ManualClock()
            let (answer, reply) = Promise<Int, TestError>.pending()
            let outcomes = Delivery<Result<Int, TestError>>()
            answer.timeout(.seconds(1), orFailWith: TestError("inner"), clock: inner)
                .timeout(.seconds(1), orFailWith: TestError("outer"), clock: outer)
                .run { outcomes.send($0) }
            let arrived = Counter()
            DispatchQueue.concurrentPerform(iterations: 2) { index in
                arrived.increment()
                _ = spin(until: { arrived.value == 2 }, for: .milliseconds(100))
                if index == 0 { inner.advance(by: .seconds(1)) }
                if index == 1 {
                    if round % 3 == 0 { reply.fulfill(7) }
                    outer.advance(by: .seconds(1))
                }
            }
            _ = outcomes.wait()
            let counts = (outcomes.all.count, inner.timerCount, outer.timerCount)
            if counts != (1, 0, 0) { wrong.record("round \(round): \(counts)") }
        }
        #expect(done.value == rounds)
        #expect(wrong.all.isEmpty)
    }

    /// `retry(_:delay:clock:while:)` on a manual clock, cancelled while it waits between attempts:
    /// the timer goes as `cancel()` returns, the `ensure` step runs, no other attempt starts and
    /// the run delivers nothing; the same with an attempt that fails on another queue.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test func aRetryOnAManualClockCancelledBetweenAttemptsStops() {
        let clock = ManualClock()
        let attempts = Counter()
        let ensured = Counter()
        let outcomes = Log()
        let flaky = Promise<Int, TestError> { resolver in
            attempts.increment()
            resolver.reject(TestError("down"))
        }
        let handle = flaky.retry(5, delay: .seconds(2), clock: clock)
            .ensure { ensured.increment() }
            .run { outcomes.record("\($0)") }
        #expect(attempts.value == 1 && clock.timerCount == 1)
        clock.advance(by: .seconds(2))
        #expect(attempts.value == 2 && clock.timerCount == 1)
        handle.cancel()
        #expect(clock.timerCount == 0)
        #expect(ensured.value == 1)
        clock.run()
        #expect(attempts.value == 2 && outcomes.all.isEmpty)

        let queued = Counter()
        let queue = DispatchQueue(label: "retry attempts")
        let onAQueue = Promise<Int, TestError> { resolver in
            queued.increment()
            queue.async { resolver.reject(TestError("down")) }
        }
        let ended = Delivery<Void>()
        let second = onAQueue.retry(5, delay: .seconds(2), clock: clock)
            .ensure { ended.send(()) }
            .run { outcomes.record("\($0)") }
        #expect(spin(until: { clock.timerCount == 1 }, for: .seconds(timeoutSeconds)))
        second.cancel()
        #expect(clock.timerCount == 0)
        #expect(ended.wait() != nil)
        clock.run()
        #expect(queued.value == 1 && outcomes.all.isEmpty)
    }

    /// Time.swift: "another clock sleeps in a `Task` that the run's cancel cancels. The steps
    /// after the wait run ... on the task's thread". `after(.zero)`, `delay(.zero)` and a
    /// `timeout(.zero)` of work that waits, on a clock of the app's own, end off the caller's
    /// thread; a cancelled `after` runs its `ensure` step and no other.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test func zeroWaitsOnAClockOfYourOwnEndOnItsTask() async {
        let clock = WrappingClock()
        let ranHere = Log()
        await onThread(stackSize: 1 << 20) {
            let caller = pthread_self()
            @Sendable func here() -> String {
                pthread_equal(pthread_self(), caller) != 0 ? "here" : "away"
            }
            let paused = Delivery<String>()
            after(.zero, clock: clock).run { paused.send("after: \(here())") }
            ranHere.record(paused.wait() ?? "after: never")
            let delayed = Delivery<String>()
            Guarantee(value: 1).delay(.zero, clock: clock).run { _ in
                delayed.send("delay: \(here())")
            }
            ranHere.record(delayed.wait() ?? "delay: never")
            let (never, resolver) = Promise<Int, TestError>.pending()
            let timedOut = Delivery<String>()
            never.timeout(.zero, orFailWith: TestError("slow"), clock: clock).run {
                timedOut.send("timeout: \($0 == .failure(TestError("slow"))), \(here())")
            }
            ranHere.record(timedOut.wait() ?? "timeout: never")
            withExtendedLifetime(resolver) {}
            let steps = Delivery<String>()
            let handle = after(.seconds(3600), clock: clock).ensure { steps.send("ensure") }
                .run { steps.send("fired") }
            handle.cancel()
            ranHere.record(steps.wait() ?? "never")
        }
        #expect(ranHere.all == ["after: away", "delay: away", "timeout: true, away", "ensure"])
    }
}
