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

/// Where a run goes on after its operation was resolved before it returned (a review of the fix
/// above): a timeout's or a combination's run, whose work ended on a queue, goes on there (the
/// resolver's report carries the queue: `Resolver.resolve(_:carriedOnBy:)`); a user's resolver
/// never sends the run to a queue the user did not ask for.
@Suite struct WhereARunGoesOnAfterAnOperationResolvedBeforeItReturned {
    /// An operation resolved by a step on w (another thread) while it is still running on t, as a
    /// user's resolver or as a timeout's (carried on by w), its run cancelled by another thread
    /// before it returns: the run stops as the operation returns (the step after it ran on t,
    /// inside `run(…)`, before: 20 of 20 rounds).
    @Test(arguments: [false, true])
    func aRunCancelledAfterItsOperationResolvedButBeforeItReturnedStopsThere(carried: Bool) {
        let queues = NamedQueues()
        let w = queues.make("w")
        var seen: [String: Int] = [:]
        for _ in 0..<20 {
            let log = Log()
            let returned = Counter()
            let resolved = DispatchSemaphore(value: 0)
            let done = Delivery<Void>()
            let operation = Promise<Int, Never> { r in
                Guarantee(value: ()).on(w).map { _ in
                    // In w's block, the operation still running on t.
                    r.resolve(.success(1), carriedOnBy: carried ? w : nil)
                    RunHandle(r.run).cancel()  // another thread's cancel, as a handle's
                    resolved.signal()
                }.run(some: { _ in })
                _ = resolved.wait(timeout: .now() + timeout)
            }
            operation.map { value -> Int in
                log.record(queues.current + (returned.value == 0 ? ", inside run()" : ""))
                return value
            }
            .ensure { done.send(()) }
            .run(some: { _ in })
            returned.increment()
            #expect(done.wait() != nil)
            let got = log.all.first ?? "did not run"
            seen[got, default: 0] += 1
        }
        #expect(seen == ["did not run": 20])
    }

    enum Shape: String, CaseIterable, Sendable {
        case operationAlone, sourceAlone, sourceThenSteps, thenReturningAnOperation
        case enteredChainEndingWithTheSource
    }

    /// A run cancelled as it waits for the queue whose block resolved its operation (resume point
    /// `resolvedOnQueue`): it ends, lets go of the outcome in its slot (debug builds check its
    /// type), runs its `ensure` steps, and delivers nothing.
    @Test(arguments: Shape.allCases)
    func aRunCancelledAsItWaitsForTheQueueThatResolvedItLetsGoOfTheOutcome(shape: Shape) {
        let queues = NamedQueues()
        let w = queues.make("w")
        let weak = WeakReference<QueuesTracked>()
        let handles = Delivery<RunHandle>()
        let resolved = DispatchSemaphore(value: 0)
        let log = Log()
        let operation = Promise<QueuesTracked, Never> { r in
            Guarantee(value: ()).on(w).map { _ in
                let tracked = QueuesTracked()
                weak.value = tracked
                r.resolve(.success(tracked), carriedOnBy: w)  // as a timeout's, from w
                resolved.signal()
                // The run waits for w, which this block holds.
                if let handle = handles.wait() {
                    let waits = handle.run.locked {
                        if case .awaitingQueue = $0.state { true } else { false }
                    }
                    #expect(waits)
                    handle.cancel()
                }
                log.record("cancelled on " + queues.current)
            }.run(some: { _ in })
            _ = resolved.wait(timeout: .now() + timeout)
        }
        let promise: Guarantee<QueuesTracked> =
            switch shape {
            case .operationAlone: operation
            case .sourceAlone: Promise(last: operation.last)
            case .sourceThenSteps:
                operation.map { $0 }.ensure { log.record("ensure on " + queues.current) }
            case .thenReturningAnOperation:
                Guarantee(value: ()).then { _ in operation }.map { $0 }
                    .ensure { log.record("ensure on " + queues.current) }
            case .enteredChainEndingWithTheSource:
                Guarantee(value: ()).then { _ in Promise(last: operation.last) }.map { $0 }
                    .ensure { log.record("ensure on " + queues.current) }
            }
        let handle = promise.run(some: { _ in log.record("delivered") })
        handles.send(handle)
        #expect(eventually { log.all.contains { $0.hasPrefix("cancelled") } })
        #expect(handle.run.locked { if case .cancelled = $0.state { true } else { false } })
        #expect(eventually { weak.value == nil }, "the outcome left in the slot was let go of")
        // The queued queueArrived finds the run cancelled: drain w.
        w.sync {}
        let expected =
            switch shape {
            case .operationAlone, .sourceAlone: ["cancelled on w"]
            default: ["ensure on w", "cancelled on w"]
            }
        #expect(log.all == expected)
    }

    /// `when` of work on w whose second member fails on w and is decided as the first stops on
    /// another thread: the combination's steps go on w (decidedOn), after the members' ensure
    /// steps.
    @Test func aCombinationDecidedOnAQueueSettlesThereAfterItsMembersEnsureSteps() {
        let queues = NamedQueues()
        let w = queues.make("w")
        let other = queues.make("other")
        for _ in 0..<50 {
            let log = Log()
            let done = Delivery<Void>()
            let started = DispatchSemaphore(value: 0)
            // The first member is in a step on `other` until the second, on w, failed and the
            // combination cancelled it.
            let first = Guarantee(value: ()).on(other).map { _ -> Int in
                let me = Engine.Nesting.drivenRun!
                started.signal()
                spin(until: { me.locked { $0.state.isCancelled } })
                return 1
            }.setFailureType(to: TestError.self)
                .ensure { log.record("first's ensure on " + queues.current) }
            let second = Guarantee(value: ()).on(w).setFailureType(to: TestError.self)
                .then { _ -> Promise<Int, TestError> in
                    _ = started.wait(timeout: .now() + timeout)
                    return Promise(error: TestError("no"))
                }
            when(fulfilled: [first, second])
                .recover { _ -> [Int] in
                    log.record("after on " + queues.current)
                    return []
                }
                .ensure { done.send(()) }
                .run(some: { _ in })
            #expect(done.wait() != nil)
            #expect(log.all == ["first's ensure on other", "after on w"])
            if log.all != ["first's ensure on other", "after on w"] { break }
        }
    }

    /// Work whose operation a user's step on w resolves before the operation returns settles "at
    /// once, without waiting": a timeout of zero lets it win (it lost while a user's resolver
    /// sent the run to w, in a first form of the fix).
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test(arguments: [false, true])
    func aTimeoutOfZeroAndWorkResolvedBeforeItsOperationReturnsByAStepOnAQueue(chain: Bool) {
        let queues = NamedQueues()
        let w = queues.make("w")
        let runReturned = DispatchSemaphore(value: 0)
        let operation: Promise<Int, TestError> = operationResolvedByAStep(on: w) {
            _ = runReturned.wait(timeout: .now() + timeout)  // w stays busy until run returns
        }
        let work = chain ? operation.map { $0 } : operation
        let delivery = Delivery<Result<Int, TestError>>()
        work.timeout(.zero, orFailWith: TestError("slow")).run { delivery.send($0) }
        runReturned.signal()
        #expect(delivery.wait() == .success(1))
    }

    /// A user's step on a serial queue that resolves an operation still running on another thread,
    /// then waits for the steps after that operation: they run on the operation's thread, not in
    /// a later block of the queue (where a first form of the fix put them: a deadlock).
    @Test func aStepOnASerialQueueThatResolvesAnOperationAndWaitsForTheStepsAfterIt() {
        let queues = NamedQueues()
        let w = queues.make("w")
        let after = DispatchSemaphore(value: 0)
        let waited = Delivery<Bool>()
        let operation: Promise<Int, Never> = operationResolvedByAStep(on: w) {
            waited.send(after.wait(timeout: .now() + timeout) == .success)
        }
        operation.map { _ in after.signal() }.run(some: { _ in })
        #expect(waited.wait() == true, "the steps after ran while the resolving step waited")
    }
}
