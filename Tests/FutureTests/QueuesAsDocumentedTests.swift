import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// Queues and hops as documented (`on(_:)`, `delay`, `ensure(on:)`, main-actor steps, where the
// steps after a hop, a combination or a timeout go on): a review's tests of what no other test
// pinned, and of the one fault it found.

/// An object whose release a test watches with a `WeakReference`.
final class QueuesTracked: @unchecked Sendable {}

/// Where the steps after a `timeout` (or a combination) of work that starts with `on(w)` run:
/// `on(_:)` says "Runs the steps after this one on `queue`, every time", and the README "Start
/// with `.on(queue)` to keep heavy steps off the calling thread". When the work, on `w`, settles
/// while the timeout's (or the combination's) launch is still under way on the thread that called
/// `run(…)`, the steps after it ran on that thread, inside `run(…)`, off `w` (a fault: they go on
/// on `w` now). Also when the launch of a race is still calling another member as the work, on
/// `w`, decides it: the steps after it go on on `w`, not where that member's call returns.
@Suite struct StepsAfterAWrapperOfWorkOnAQueue {
    enum Around: String, CaseIterable, Sendable {
        case timeout, timeoutOnContinuousClock, timeoutOnManualClock, when, race
        case raceDecidedWhileItsLaunchCallsAMember
    }

    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test(arguments: Around.allCases)
    func theStepsAfterWorkThatStartedWithOnGoOnOnItsQueueNotInsideRun(around: Around) {
        let queues = NamedQueues()
        let w = queues.make("w")
        let clock = ManualClock()
        var seen: [String: Int] = [:]
        for _ in 0..<200 {
            let place = Delivery<String>()
            let work = Guarantee(value: 1).on(w).setFailureType(to: TestError.self)
            let slow = TestError("slow")
            let wrapped: Promise<Int, TestError> =
                switch around {
                case .timeout: work.timeout(.seconds(60), orFailWith: slow)
                case .timeoutOnContinuousClock:
                    work.timeout(.seconds(60), orFailWith: slow, clock: ContinuousClock())
                case .timeoutOnManualClock:
                    work.timeout(.seconds(60), orFailWith: slow, clock: clock)
                case .when: when(fulfilled: [work]).map { $0[0] }
                case .race: race(work, Promise<Int, TestError>.pending().promise)
                case .raceDecidedWhileItsLaunchCallsAMember:
                    // Returns once the race, decided on w, has cancelled it.
                    race(work, Promise<Int, TestError> { r in spin(until: { r.isCancelled }) })
                }
            wrapped.map { _ in place.send(queues.current) }.run(some: { _ in }, none: { _ in })
            let got = place.wait() ?? "no outcome"
            seen[got, default: 0] += 1
            if got != "w" { break }  // one is enough
        }
        #expect(seen == ["w": 200], "where the step after the \(around.rawValue) ran: \(seen)")
    }
}

/// Documented behaviour of queues and hops that no other test pinned; these pass.
@Suite struct QueuesAsDocumented {
    // a shared promise's work on w carries a waiter on: ensure(on:) goes back to w.
    @Test func ensureOnAfterASharedPromiseGoesBackToTheQueueItsWorkEndedOn() {
        let queues = NamedQueues()
        let w = queues.make("w")
        let q = queues.make("q")
        let gate = DispatchSemaphore(value: 0)
        let shared = Guarantee(value: 1).on(w).map { v -> Int in
            _ = gate.wait(timeout: .now() + timeout)
            return v
        }.share()
        let places = Log()
        let done = Delivery<Void>()
        shared.map { _ in places.record("before:" + queues.current) }
            .ensure(on: q) { places.record("cleanup:" + queues.current) }
            .map { _ in places.record("after:" + queues.current) }
            .run { _ in done.send(()) }
        gate.signal()
        #expect(done.wait() != nil)
        #expect(places.all == ["before:w", "cleanup:q", "after:w"])
    }

    // several ensure(on:) cleanups in order, not cancelled.
    @Test func severalCleanupsOnQueuesRunInChainOrderEachBeforeTheNextStep() {
        let queues = NamedQueues()
        let w = queues.make("w")
        let q1 = queues.make("q1")
        let q2 = queues.make("q2")
        let places = Log()
        let done = Delivery<Void>()
        Guarantee(value: 1).on(w)
            .ensure(on: q1) { places.record("A:" + queues.current) }
            .ensure(on: q2) { places.record("B:" + queues.current) }
            .ensure { places.record("C:" + queues.current) }
            .map { _ in places.record("D:" + queues.current) }
            .run { _ in done.send(()) }
        #expect(done.wait() != nil)
        #expect(places.all == ["A:q1", "B:q2", "C:w", "D:w"])
    }

    // ensure(on:) inside a retry: each attempt's cleanup runs before the next attempt.
    @Test func aCleanupOnAQueueInsideARetryRunsBeforeEachNextAttempt() {
        let queues = NamedQueues()
        let w = queues.make("w")
        let q = queues.make("q")
        let places = Log()
        let attempts = Counter()
        let done = Delivery<Result<Int, TestError>>()
        Guarantee(value: ()).on(w).then { _ in
            Promise<Int, TestError> { r in
                let n = attempts.increment()
                places.record("attempt\(n):" + queues.current)
                n < 3 ? r.reject(TestError("again")) : r.fulfill(n)
            }
            .ensure(on: q) { places.record("cleanup:" + queues.current) }
            .retry(3)
        }
        .map { v -> Int in
            places.record("after:" + queues.current)
            return v
        }
        .run { done.send($0) }
        #expect(done.wait() == .success(3))
        #expect(
            places.all == [
                "attempt1:w", "cleanup:q", "attempt2:w", "cleanup:q", "attempt3:w", "cleanup:q",
                "after:w",
            ])
    }

    // cancel while the ensure(on:) body runs, a second ensure(on:) after it.
    @Test func aRunCancelledDuringACleanupQueuesTheNextCleanupOnceAndTakesNoStepAfter() {
        let queues = NamedQueues()
        let w = queues.make("w")
        let q1 = queues.make("q1")
        let q2 = queues.make("q2")
        let places = Log()
        let inBody = DispatchSemaphore(value: 0)
        let proceed = DispatchSemaphore(value: 0)
        let after = Counter()
        let handle = Guarantee(value: 1).on(w)
            .ensure(on: q1) {
                places.record("A:" + queues.current)
                inBody.signal()
                _ = proceed.wait(timeout: .now() + timeout)
            }
            .map { _ in after.increment() }
            .ensure(on: q2) { places.record("B:" + queues.current) }
            .ensure { places.record("C") }
            .run { _ in Issue.record("delivered") }
        #expect(inBody.wait(timeout: .now() + timeout) == .success)
        handle.cancel()
        proceed.signal()
        #expect(spin(until: { places.all.count >= 3 }))
        let flushed = Delivery<Void>()
        q2.async { flushed.send(()) }
        #expect(flushed.wait() != nil)
        #expect(after.value == 0)
        #expect(places.all.sorted() == ["A:q1", "B:q2", "C"])
    }

    // a cancelled delay releases its captures at once.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func aCancelledDelayLetsGoOfItsValueAndItsStepsAsCancelReturns() {
        let inSlot = WeakReference<QueuesTracked>()
        let inStep = WeakReference<QueuesTracked>()
        let handle: RunHandle
        do {
            let a = QueuesTracked()
            let b = QueuesTracked()
            inSlot.value = a
            inStep.value = b
            handle = Guarantee(value: a).delay(.seconds(3600)).map { x in
                withExtendedLifetime(b) { _ = x }
            }.run()
        }
        handle.cancel()
        #expect(inSlot.value == nil)
        #expect(inStep.value == nil)
    }

    // cancel while the hop to the cleanup's queue is queued: cleanup queued once, steps after
    // never run, plain ensure runs in cancel().
    @Test func aRunCancelledAsItsCleanupWaitsForTheQueueQueuesItOnceAndRunsItsEnsureInCancel() {
        let queues = NamedQueues()
        let w = queues.make("w")
        let q = queues.make("q")
        let gate = DispatchSemaphore(value: 0)
        q.async { _ = gate.wait(timeout: .now() + timeout) }
        let places = Log()
        let reached = Delivery<Void>()
        let handle = Guarantee(value: 1).on(w)
            .map { _ in reached.send(()) }
            .ensure(on: q) { places.record("A:" + queues.current) }
            .map { _ in places.record("after") }
            .ensure { places.record("C") }
            .run()
        #expect(reached.wait() != nil)
        // wait until the run parks on q's hop: nothing to observe; spin on w being idle
        let idle = Delivery<Void>()
        w.async { idle.send(()) }
        #expect(idle.wait() != nil)
        handle.cancel()
        #expect(places.all == ["C"])
        gate.signal()
        let flushed = Delivery<Void>()
        q.async { flushed.send(()) }
        #expect(flushed.wait() != nil)
        #expect(places.all == ["C", "A:q"])
    }

    // a timeout whose work hops to w and wins: the steps after go on on w, and so does
    // ensure(on:) after it.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func theStepsAfterATimeoutWhoseWorkWaitedGoOnOnTheWorksQueue() {
        let queues = NamedQueues()
        let w = queues.make("w")
        let q = queues.make("q")
        let places = Log()
        let done = Delivery<Void>()
        let gate = DispatchSemaphore(value: 0)
        Promise<Int, TestError> { r in
            DispatchQueue.global().async {
                _ = gate.wait(timeout: .now() + timeout)
                r.fulfill(1)
            }
        }.on(w)
            .timeout(.seconds(60), orFailWith: TestError("slow"))
            .map { _ in places.record("after timeout:" + queues.current) }
            .ensure(on: q) { places.record("cleanup:" + queues.current) }
            .map { _ in places.record("after cleanup:" + queues.current) }
            .run { _ in done.send(()) }
        gate.signal()
        #expect(done.wait() != nil)
        #expect(places.all == ["after timeout:w", "cleanup:q", "after cleanup:w"])
    }

    // a hop cancelled while queued lets go of its captures at once.
    @Test func aHopCancelledWhileItsQueueIsBusyLetsGoOfItsValueAndStepsAsCancelReturns() {
        let queues = NamedQueues()
        let q = queues.make("q")
        let gate = DispatchSemaphore(value: 0)
        q.async { _ = gate.wait(timeout: .now() + timeout) }
        let inSlot = WeakReference<QueuesTracked>()
        let inStep = WeakReference<QueuesTracked>()
        let handle: RunHandle
        do {
            let a = QueuesTracked()
            let b = QueuesTracked()
            inSlot.value = a
            inStep.value = b
            handle = Guarantee(value: a).on(q).map { x in withExtendedLifetime(b) { _ = x } }
                .run()
        }
        handle.cancel()
        #expect(inSlot.value == nil)
        #expect(inStep.value == nil)
        gate.signal()
    }

    // a manual-clock timeout whose work waits for a hop: cancel removes its timer at once.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func cancellingAManualTimeoutWhoseWorkWaitsForAQueueRemovesItsTimerAsCancelReturns() {
        let queues = NamedQueues()
        let q = queues.make("q")
        let gate = DispatchSemaphore(value: 0)
        q.async { _ = gate.wait(timeout: .now() + timeout) }
        let clock = ManualClock()
        let ran = Counter()
        let handle = Promise<Int, TestError>(value: 1).on(q).map { v -> Int in
            ran.increment()
            return v
        }
        .timeout(.seconds(5), orFailWith: TestError("slow"), clock: clock)
        .run { _ in Issue.record("delivered") }
        #expect(clock.timerCount == 1)
        handle.cancel()
        #expect(clock.timerCount == 0)
        gate.signal()
        let flushed = Delivery<Void>()
        q.async { flushed.send(()) }
        #expect(flushed.wait() != nil)
        #expect(ran.value == 0)
    }

    // a run started inside q.sync whose ensure(on: q): no deadlock, later steps not on q.
    @Test func aCleanupOnTheQueueTheStarterBlocksNeitherDeadlocksNorKeepsTheChainThere() {
        let queues = NamedQueues()
        let q = queues.make("q")
        let places = Log()
        let done = Delivery<Void>()
        q.sync {
            Guarantee(value: 1)
                .ensure(on: q) { places.record("cleanup:" + queues.current) }
                .map { _ in places.record("after:" + queues.current) }
                .run { _ in done.send(()) }
            #expect(places.all.isEmpty)
        }
        #expect(done.wait() != nil)
        #expect(places.all == ["cleanup:q", "after:none"])
    }

    // cancel while the hop back after the cleanup waits for a blocked queue.
    @Test func aRunCancelledAsItWaitsToGoBackAfterItsCleanupTakesNoStepAfter() {
        let queues = NamedQueues()
        let w = queues.make("w")
        let q = queues.make("q")
        let places = Log()
        let cleaned = DispatchSemaphore(value: 0)
        let gate = DispatchSemaphore(value: 0)
        let reached = Delivery<Void>()
        let handle = Guarantee(value: 1).on(w)
            .map { _ in
                // block w once the cleanup has run, so that the hop back waits
                reached.send(())
            }
            .ensure(on: q) {
                w.async { _ = gate.wait(timeout: .now() + timeout) }
                places.record("A:" + queues.current)
                cleaned.signal()
            }
            .map { _ in places.record("after") }
            .ensure { places.record("C") }
            .run { _ in Issue.record("delivered") }
        #expect(reached.wait() != nil)
        #expect(cleaned.wait(timeout: .now() + timeout) == .success)
        let idle = Delivery<Void>()
        q.async { idle.send(()) }
        #expect(idle.wait() != nil)
        handle.cancel()
        #expect(places.all == ["A:q", "C"])
        gate.signal()
        let flushed = Delivery<Void>()
        w.async { flushed.send(()) }
        #expect(flushed.wait() != nil)
        #expect(places.all == ["A:q", "C"])
    }
}
