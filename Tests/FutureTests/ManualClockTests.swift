import Dispatch
import Testing

@testable import Future

/// A view model as an app writes it: it takes a clock, which a test gives as a manual one.
@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
@MainActor
final class FeedModel {
    var items: [String] = []
    var failure: TestError?
    let load: @Sendable () -> Promise<[String], TestError>
    let clock: any Clock<Duration>

    init(clock: any Clock<Duration>, load: @escaping @Sendable () -> Promise<[String], TestError>) {
        self.clock = clock
        self.load = load
    }

    func refresh() {
        load().retry(3, delay: .seconds(1), clock: self.clock)
            .done(on: .main) { self.items = $0 }
            .catch(on: .main) { self.failure = $0 }
            .run()
    }
}

/// Waits, at most `timeout`, until work started in a new `Task` has set `count` timers on `clock`.
/// Yields alone do not promise that the task has run: with six test processes and four busy
/// loops on 2 cores, the race and timeout scenarios below hung 4 times in 6 without it, the task
/// starting after the clock had moved.
@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
func timersSet(_ count: Int, on clock: ManualClock) async -> Bool {
    let deadline = ContinuousClock.now + .seconds(timeoutSeconds)
    while clock.timerCount < count {
        guard ContinuousClock.now < deadline else { return false }
        try? await Task.sleep(for: .milliseconds(1))
    }
    return true
}

/// The scenarios of the manual clock, each as the docs teach it: start the work from the test's
/// actor, wait until a task's work has set its timers, then `await` the clock's advance; no
/// sleeping past a time. `ManualClockTests` runs each once, `ManualClockRepeated` a thousand times
/// in a row.
@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
@MainActor
enum ClockScenario {
    static func retryWaitsOnTheClock() async {
        let clock = ManualClock()
        let attempts = Log()
        let flaky = Promise<Int, TestError> { resolver in
            attempts.record("\(clock.now.offset)")
            attempts.all.count < 3 ? resolver.reject(TestError("down")) : resolver.fulfill(3)
        }
        let task = Task { await flaky.retry(3, delay: .seconds(2), clock: clock).result }
        #expect(await timersSet(1, on: clock))
        await clock.advance(by: .seconds(4))
        #expect(await bounded { await task.value } == .success(3))
        #expect(attempts.all == ["0.0 seconds", "2.0 seconds", "4.0 seconds"])
        #expect(clock.timerCount == 0)
    }

    static func aTimeoutFiresOnTheClockAndCancelsTheWork() async {
        let clock = ManualClock()
        let cancels = Log()
        let kept = Delivery<Resolver<Int, TestError>>()  // work that never answers
        let work = Promise<Int, TestError> { resolver in
            kept.send(resolver)
            resolver.onCancel { _ in cancels.record("\(clock.now.offset)") }
        }
        let task = Task {
            await work.timeout(.seconds(10), orFailWith: TestError("slow"), clock: clock).result
        }
        #expect(await timersSet(1, on: clock))
        await clock.advance(by: .seconds(9))
        #expect(cancels.all.isEmpty)
        await clock.advance(by: .seconds(1))
        #expect(await bounded { await task.value } == .failure(TestError("slow")))
        #expect(cancels.all == ["10.0 seconds"])
        #expect(clock.timerCount == 0)
    }

    static func aRaceEndsWithTheWorkAndLeavesNoTimer() async {
        let clock = ManualClock()
        let timer = after(.seconds(5), clock: clock).map { "timer" }
        let work = after(.seconds(3), clock: clock).map { "work" }
        let task = Task { await race([timer, work]).value }
        #expect(await timersSet(2, on: clock))
        await clock.advance(by: .seconds(3))
        #expect(await bounded { await task.value } == "work")
        #expect(clock.timerCount == 0)
    }

    static func cancelledTimeoutsLeaveNoTimer(count: Int) {
        let clock = ManualClock()
        let kept = Delivery<Resolver<Int, TestError>>()  // work that never answers
        let handles = (0..<count).map { _ in
            Promise<Int, TestError> { kept.send($0) }.timeout(
                .seconds(1), orFailWith: TestError("slow"), clock: clock
            )
            .run { _ in }
        }
        #expect(clock.timerCount == count)
        for handle in handles { handle.cancel() }
        #expect(clock.timerCount == 0)
    }

    static func aViewModelRetriesWithADelay() async {
        let clock = ManualClock()
        let calls = Counter()
        let model = FeedModel(clock: clock) {
            Promise { resolver in
                calls.increment() == 1
                    ? resolver.reject(TestError("offline")) : resolver.fulfill(["news"])
            }
        }
        model.refresh()
        await clock.advance(by: .seconds(1))
        #expect(model.items == ["news"])
        #expect(calls.value == 2)
    }

    static func timersFireInDeadlineOrderThenInTheOrderSet() {
        let clock = ManualClock()
        let fired = Log()
        for (name, seconds) in [("b", 2), ("a", 1), ("c", 2)] {
            after(.seconds(seconds), clock: clock).run { fired.record(name) }
        }
        clock.advance(by: .milliseconds(999))
        #expect(fired.all.isEmpty)
        clock.advance(to: ManualClock.Instant(offset: .seconds(2)))
        #expect(fired.all == ["a", "b", "c"])
        #expect(clock.now == ManualClock.Instant(offset: .seconds(2)))
    }

    static func runFiresEveryTimerAndDelayKeepsTheOutcome() {
        let clock = ManualClock()
        let outcomes = Log()
        Promise<Int, TestError>(value: 1).delay(.seconds(5), clock: clock).run {
            outcomes.record("\($0)")
        }
        Promise<Int, TestError>(error: TestError("late")).delay(.seconds(7), clock: clock)
            .run { outcomes.record("\($0)") }
        clock.run()
        #expect(outcomes.all.count == 2)
        #expect(clock.now.offset == .seconds(7))
    }

    static func aSleepWakesWithTheClockOrThrowsWhenCancelled() async {
        let clock = ManualClock()
        let sleeper = Task { try await clock.sleep(for: .seconds(1)) }
        #expect(await timersSet(1, on: clock))
        await clock.advance(by: .seconds(1))
        let slept = await bounded { await sleeper.result }
        #expect(slept != nil, "the sleep did not return")
        #expect(throws: Never.self) { try slept?.get() }
        let cancelled = Task { try await clock.sleep(for: .seconds(1)) }
        #expect(await timersSet(1, on: clock))
        cancelled.cancel()
        let woke = await bounded { await cancelled.result }
        #expect(throws: CancellationError.self) { try woke?.get() }  // (nil: it did not return)
        #expect(clock.timerCount == 0)
    }
}

@Suite @MainActor struct ManualClockTests {
    @Test func retryWaitsOnTheClock() async { await ClockScenario.retryWaitsOnTheClock() }

    @Test func aTimeoutFiresOnTheClockAndCancelsTheWork() async {
        await ClockScenario.aTimeoutFiresOnTheClockAndCancelsTheWork()
    }

    @Test func aRaceEndsWithTheWorkAndLeavesNoTimer() async {
        await ClockScenario.aRaceEndsWithTheWorkAndLeavesNoTimer()
    }

    @Test func tenThousandCancelledTimeoutsLeaveNoTimer() {
        ClockScenario.cancelledTimeoutsLeaveNoTimer(count: 10_000)
    }

    @Test func aViewModelRetriesWithADelay() async {
        await ClockScenario.aViewModelRetriesWithADelay()
    }

    @Test func timersFireInDeadlineOrderThenInTheOrderSet() {
        ClockScenario.timersFireInDeadlineOrderThenInTheOrderSet()
    }

    @Test func runFiresEveryTimerAndDelayKeepsTheOutcome() {
        ClockScenario.runFiresEveryTimerAndDelayKeepsTheOutcome()
    }

    @Test func aSleepWakesWithTheClockOrThrowsWhenCancelled() async {
        await ClockScenario.aSleepWakesWithTheClockOrThrowsWhenCancelled()
    }

    /// The clock is `Sendable`: four threads that each advance it by 500 ms, a millisecond at a
    /// time, move it by 2 s, and fire every timer on the way, each once; none traps for moving
    /// the clock back (an advance's target was read apart from the move).
    @Test func advancesFromSeveralThreadsAddUp() {
        let clock = ManualClock()
        let fired = Counter()
        for milliseconds in 1...400 {
            after(.milliseconds(5 * milliseconds), clock: clock).run { fired.increment() }
        }
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            for _ in 0..<500 { clock.advance(by: .milliseconds(1)) }
        }
        #expect(clock.now.offset == .seconds(2))
        #expect(fired.value == 400)
        #expect(clock.timerCount == 0)
    }
}

@Suite @MainActor struct ManualClockRepeated {
    @Test func eachScenarioPassesAThousandTimesInARow() async {
        for _ in 0..<1_000 {
            await ClockScenario.retryWaitsOnTheClock()
            await ClockScenario.aTimeoutFiresOnTheClockAndCancelsTheWork()
            await ClockScenario.aRaceEndsWithTheWorkAndLeavesNoTimer()
            ClockScenario.cancelledTimeoutsLeaveNoTimer(count: 10)
            await ClockScenario.aViewModelRetriesWithADelay()
        }
    }
}

/// A clock of the app's own, which the library knows nothing of: it waits through its `sleep`,
/// which it counts. (It keeps `ContinuousClock`'s time, and sleeps on it.)
@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
struct CountingClock: Clock {
    let sleeps = Counter()
    var now: ContinuousClock.Instant { ContinuousClock.now }
    var minimumResolution: Duration { ContinuousClock().minimumResolution }
    func sleep(until deadline: ContinuousClock.Instant, tolerance: Duration?) async throws {
        sleeps.increment()
        try await ContinuousClock().sleep(until: deadline, tolerance: tolerance)
    }
}

/// The clocks an app passes, on real time: the standard ones, which wait on Dispatch's timers as
/// the time operators with no clock do, and one of the app's own, which waits through its
/// `sleep`.
enum RealClock: String, CaseIterable, Sendable {
    case continuous, suspending, ownClock
}

/// The scenarios of `RealClockTiming`, on any clock. None asserts a duration, only what
/// comes first. They wait without holding a thread: a clock of the app's own sleeps in a task,
/// which a test blocking the concurrency pool's threads (two on 2 cores) would starve.
@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
enum RealClockScenario {
    static func clock(_ clock: RealClock) -> any Clock<Duration> {
        switch clock {
        case .continuous: ContinuousClock()
        case .suspending: SuspendingClock()
        case .ownClock: CountingClock()
        }
    }

    /// Whether `condition` holds within `timeout`, polled without holding a thread.
    static func released(_ condition: () -> Bool) async -> Bool {
        let deadline = DispatchTime.now() + timeout
        while !condition() {
            guard DispatchTime.now() < deadline else { return false }
            try? await Task.sleep(nanoseconds: 10_000_000)
        }
        return true
    }

    static func aTimeoutFailsWorkThatWaitsPastItsDeadlineAndCancelsIt(
        on clock: some Clock<Duration>
    ) async {
        let pending = Pending<Int>()
        let ensured = Counter()
        let promise = pending.promise.ensure { ensured.increment() }
            .timeout(.milliseconds(20), orFailWith: TestError("slow"), clock: clock)
        #expect(
            await awaited("the timeout") { await promise.result } == .failure(TestError("slow")))
        #expect(pending.cancelled.value == 1)
        #expect(ensured.value == 1)
        let kept = Delivery<Resolver<Int, any Error>>()
        let erased = Promise<Int, any Error> { kept.send($0) }.timeout(.zero, clock: clock)
        await #expect(throws: PromiseError.timedOut) {
            try await awaited("the erased timeout") { try await erased.value }
        }
    }

    static func workThatSettlesInTimeWins(on clock: some Clock<Duration>) async {
        let promise = later(5).setFailureType(to: TestError.self)
            .timeout(.seconds(60), orFailWith: TestError("slow"), clock: clock)
        #expect(await awaited("the work") { await promise.result } == .success(5))
    }

    static func cancellingTheRunCancelsTheAlarm(on clock: some Clock<Duration>) async {
        var runs: [CancelledTimers.Weak] = []
        let witness = WeakReference<Memory.Witness>()
        let kept = Delivery<Resolver<Int, TestError>>()  // work that never answers
        do {
            let captured = Memory.Witness()
            witness.value = captured
            for _ in 0..<1_000 {
                let timeout = Promise<Int, TestError> { kept.send($0) }.timeout(
                    .seconds(3600), orFailWith: TestError("\(captured.zero)"), clock: clock
                )
                .run { _ in Issue.record("cancelled") }
                let pause = after(.seconds(3600), clock: clock).run { _ in
                    Issue.record("cancelled")
                }
                for handle in [timeout, pause] {
                    handle.cancel()
                    runs.append(CancelledTimers.Weak(run: handle.run))
                }
            }
        }
        #expect(kept.all.count == 1_000)
        kept.clear()
        #expect(await released { witness.value == nil })
        #expect(await released { runs.allSatisfy { $0.run == nil } })
    }

    static func afterAndDelayWaitTheirInterval<C: Clock<Duration>>(on clock: C) async {
        let deadline = clock.now.advanced(by: .milliseconds(20))
        let woke = after(.milliseconds(20), clock: clock).map { clock.now >= deadline }
        #expect(await awaited("after") { await woke.value } == true)
        let later = clock.now.advanced(by: .milliseconds(20))
        let delayed = Promise<Int, TestError>(value: 1).delay(.milliseconds(20), clock: clock)
        #expect(await awaited("the delay") { await delayed.result } == .success(1))
        #expect(clock.now >= later)
        let last = clock.now.advanced(by: .milliseconds(20))
        let failed = Promise<Int, TestError>(error: TestError("kept"))
            .delay(.milliseconds(20), clock: clock)
        #expect(
            await awaited("the failure's delay") { await failed.result }
                == .failure(TestError("kept")))
        #expect(clock.now >= last)
        let first = race([
            after(.seconds(3600), clock: clock).map { "an hour" },
            after(.milliseconds(20), clock: clock).map { "20 ms" },
        ])
        #expect(await awaited("the race") { await first.value } == "20 ms")
    }

    static func aClockOfYourOwnWaitsThroughItsSleep() async {
        let clock = CountingClock()
        #expect(
            await awaited("after") { await after(.milliseconds(10), clock: clock).value != nil }
                == true)
        #expect(clock.sleeps.value == 1)
        let pending = Pending<Int>()
        let timedOut = pending.promise.timeout(
            .milliseconds(10), orFailWith: TestError("slow"), clock: clock)
        #expect(
            await awaited("the timeout") { await timedOut.result } == .failure(TestError("slow")))
        #expect(clock.sleeps.value == 2)
    }
}

/// The time operators on a clock an app passes, each on every `RealClock`.
@Suite struct RealClockTiming {
    @Test(arguments: RealClock.allCases)
    func aTimeoutFailsWorkThatWaitsPastItsDeadlineAndCancelsIt(on clock: RealClock) async {
        await RealClockScenario.aTimeoutFailsWorkThatWaitsPastItsDeadlineAndCancelsIt(
            on: RealClockScenario.clock(clock))
    }

    @Test(arguments: RealClock.allCases)
    func workThatSettlesInTimeWins(on clock: RealClock) async {
        await RealClockScenario.workThatSettlesInTimeWins(on: RealClockScenario.clock(clock))
    }

    /// Cancelling a run cancels its alarm, which lets go of what it would call at once, not at
    /// its deadline: a thousand timeouts and `after`s of an hour, cancelled while they wait, keep
    /// neither their runs nor what the timeout's error captured.
    @Test(arguments: RealClock.allCases)
    func cancellingTheRunCancelsTheAlarm(on clock: RealClock) async {
        await RealClockScenario.cancellingTheRunCancelsTheAlarm(on: RealClockScenario.clock(clock))
    }

    /// `after` and `delay` wake once the clock has passed their deadline, not before, and before
    /// a later alarm on the same clock.
    @Test(arguments: RealClock.allCases)
    func afterAndDelayWaitTheirInterval(on clock: RealClock) async {
        await RealClockScenario.afterAndDelayWaitTheirInterval(on: RealClockScenario.clock(clock))
    }

    /// A clock of the app's own waits through its `sleep`: once for each wait.
    @Test func aClockOfYourOwnWaitsThroughItsSleep() async {
        await RealClockScenario.aClockOfYourOwnWaitsThroughItsSleep()
    }
}
