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
    let deadline = ContinuousClock.now + .seconds(60)
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
        #expect(await task.value == .success(3))
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
        #expect(await task.value == .failure(TestError("slow")))
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
        #expect(await task.value == "work")
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
        await #expect(throws: Never.self) { try await sleeper.value }
        let cancelled = Task { try await clock.sleep(for: .seconds(1)) }
        #expect(await timersSet(1, on: clock))
        cancelled.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
        #expect(clock.timerCount == 0)
    }

    static func otherClocksSleepInATask() async {
        let start = ContinuousClock.now
        #expect(await after(.milliseconds(20), clock: ContinuousClock()).result != nil)
        #expect(ContinuousClock.now - start >= .milliseconds(20))
        let kept = Delivery<Resolver<Int, any Error>>()
        let erased = Promise<Int, any Error> { kept.send($0) }.timeout(
            .milliseconds(10), clock: SuspendingClock())
        await #expect(throws: PromiseError.timedOut) { try await erased.value }
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

    @Test func otherClocksSleepInATask() async { await ClockScenario.otherClocksSleepInATask() }

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
