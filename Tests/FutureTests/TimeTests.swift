import Dispatch
import Testing

@testable import Future

/// The time since `start`, in milliseconds.
func milliseconds(since start: DispatchTime) -> Double {
    Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e6
}

@Suite struct Timing {
    @Test func afterSucceedsNoSoonerThanItsInterval() {
        let start = DispatchTime.now()
        #expect(outcome(of: after(.milliseconds(30))) != nil)
        #expect(milliseconds(since: start) >= 30)
    }

    /// `after(.zero)` is one promise made once: each run hops anew, and never runs its steps
    /// inside `run` (they wait here for `run` to have returned).
    @Test func afterZeroOrLessHopsOnEveryRun() {
        for pause in [after(.zero), after(.milliseconds(-500)), after(.zero)] {
            let returned = DispatchSemaphore(value: 0)
            let hopped = value(
                of: Guarantee<Bool> { resolver in
                    _ = pause.map { returned.wait(timeout: .now() + .seconds(10)) == .success }
                        .run { resolver.fulfill($0) }
                    returned.signal()
                })
            #expect(hopped == true)
        }
    }

    /// A cancel that comes before the timer fires ends the run at once: its `ensure` step runs,
    /// what it held is released, and the timer never delivers. The test thread may be paused
    /// past the timer's interval after `run` (on a loaded machine): then the timer may fire
    /// first, the run ends with its outcome and the cancel does nothing. A try counts only when
    /// `cancel()` returned before the timer's deadline, so that it certainly came first; the
    /// others check that the run ended once either way, and another try follows.
    @Test func cancellingAfterCancelsTheTimer() {
        var checked = false
        for _ in 0..<10 where !checked {
            let fired = Counter()
            let ensured = Counter()
            let witness = WeakReference<Memory.Witness>()
            let start = DispatchTime.now()
            let handle: RunHandle
            do {
                let captured = Memory.Witness()
                witness.value = captured
                handle = after(.milliseconds(200)).map { _ = captured }.ensure {
                    ensured.increment()
                }
                .run { _ in fired.increment() }
                handle.cancel()
            }
            // The timer's deadline is 200 ms after `run` was called, later than `start`.
            checked = milliseconds(since: start) < 200
            if checked {
                #expect(handle.isCancelled)
                #expect(ensured.value == 1)
                #expect(witness.value == nil)
            } else {
                #expect(eventually { ensured.value == 1 })
                #expect(eventually { witness.value == nil })
            }
            // A later timer firing proves the cancelled one's deadline has passed: it never fired.
            #expect(outcome(of: after(.milliseconds(400))) != nil)
            // (A run that ended before the cancel came delivered its outcome, once.)
            #expect(fired.value == (handle.isCancelled ? 0 : 1))
            #expect(ensured.value == 1)
        }
        #expect(checked, "the test thread was paused past the timer's deadline in every try")
    }

    @Test func delayPassesValuesAndErrorsOnLater() {
        let start = DispatchTime.now()
        #expect(
            outcome(of: Promise<Int, TestError>(value: 1).delay(.milliseconds(20))) == .success(1))
        #expect(milliseconds(since: start) >= 20)
        let failed = Promise<Int, TestError>(error: TestError("late")).delay(.milliseconds(20))
        #expect(outcome(of: failed) == .failure(TestError("late")))
        #expect(milliseconds(since: start) >= 40)
    }

    @Test func aTimeoutFailsAndCancelsTheWork() {
        let pending = Pending<Int>()
        let ensured = Counter()
        let promise = pending.promise.ensure { ensured.increment() }
            .timeout(.milliseconds(20), orFailWith: TestError("timed out"))
        #expect(outcome(of: promise) == .failure(TestError("timed out")))
        #expect(pending.cancelled.value == 1)
        #expect(ensured.value == 1)
        let kept = Delivery<Resolver<Int, any Error>>()
        let erased = Promise<Int, any Error> { kept.send($0) }.timeout(.milliseconds(10))
        #expect(throws: PromiseError.timedOut) { try outcome(of: erased)?.get() }
    }

    @Test func aTimeoutOfZeroOrLessLetsWorkThatSettlesAtOnceWin() {
        ZeroTimeout.letsWorkThatSettlesAtOnceWin()
    }

    @Test func theInnermostOfNestedTimeoutsOfZeroFailsFirst() {
        ZeroTimeout.theInnermostOfNestedTimeoutsFailsFirst()
    }

    @Test func aTimeoutOfZeroLetsAMemberThatSettlesAtOnceWinAtAnyDepth() {
        ZeroTimeout.letsAMemberThatSettlesAtOnceWinAtAnyDepth()
    }

    @Test func aTimeoutOfZeroFailsWorkThatWaitsForAQueue() {
        ZeroTimeout.failsWorkThatWaitsForAQueue()
    }

    @Test func aTimeoutOfZeroOrLessFailsWorkThatWaitsAndCancelsIt() {
        ZeroTimeout.failsWorkThatWaitsAndCancelsIt()
    }

    @Test func workThatSettlesInTimeWins() {
        let promise = later(5).setFailureType(to: TestError.self)
            .timeout(.seconds(60), orFailWith: TestError("timed out"))
        #expect(outcome(of: promise) == .success(5))
    }

    @Test func retryRunsTheWorkAgainUntilItSucceeds() {
        let attempts = Counter()
        let flaky = Promise<Int, TestError> { resolver in
            let attempt = attempts.increment()
            attempt == 3 ? resolver.fulfill(attempt) : resolver.reject(TestError("\(attempt)"))
        }
        let start = DispatchTime.now()
        #expect(outcome(of: flaky.retry(5, delay: .milliseconds(10))) == .success(3))
        #expect(attempts.value == 3)  // each attempt a fresh run of the work
        #expect(milliseconds(since: start) >= 20)
        #expect(outcome(of: flaky.retry(2)) == .failure(TestError("5")))  // attempts 4 and 5
        let stops = flaky.retry(9, while: { $0 != TestError("6") })
        #expect(outcome(of: stops) == .failure(TestError("6")))
        #expect(attempts.value == 6)
    }

    /// A delay of zero or less is no wait: the attempts follow one another on the thread of
    /// the failure, as with no delay, and a clock sets no timer for them.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func aRetryWithADelayOfZeroOrLessRetriesAtOnce() {
        for delay in [Duration.zero, .seconds(-1)] {
            let clock = ManualClock()
            for withClock in [false, true] {
                let attempts = Counter()
                let flaky = Promise<Int, TestError> { resolver in
                    let attempt = attempts.increment()
                    attempt == 3
                        ? resolver.fulfill(attempt) : resolver.reject(TestError("\(attempt)"))
                }
                let retried =
                    withClock
                    ? flaky.retry(3, delay: delay, clock: clock) : flaky.retry(3, delay: delay)
                let delivered = Log()
                retried.run { delivered.record("\($0)") }
                #expect(delivered.all == ["success(3)"], "delay \(delay), clock \(withClock)")
                #expect(clock.timerCount == 0)
            }
        }
    }

    @Test func cancellingBetweenAttemptsStopsTheRetries() {
        let attempts = Counter()
        let ensured = Counter()
        let failed = Delivery<Void>()
        let handle = Promise<Int, TestError> { resolver in
            attempts.increment()
            resolver.reject(TestError("no"))
            failed.send(())
        }.retry(3, delay: .seconds(60)).ensure { ensured.increment() }.run { _ in
            Issue.record("cancelled: no completion")
        }
        #expect(failed.wait() != nil)
        handle.cancel()  // during the 60-second wait before the second attempt
        #expect(ensured.value == 1)
        #expect(attempts.value == 1)
    }

    #if os(macOS) || os(Linux)
        @Test func fewerThanOneAttemptIsAPreconditionFailure() async {
            await #expect(processExitsWith: .failure) {
                exitTestWatchdog(expectsSuccess: false)
                _ = Guarantee(value: 1).retry(0)
            }
        }
    #endif
}

/// A timeout of zero or less: one meaning on every clock, where work that settles at once wins.
@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
enum ZeroTimeout {
    static func letsWorkThatSettlesAtOnceWin() {
        let calls = Counter()
        let ready = Promise<Int, TestError> { resolver in
            calls.increment()
            resolver.fulfill(1)
        }
        .map { $0 + 1 }
        let intervals: [Duration] = [.zero, .nanoseconds(1), .seconds(-1)]
        for interval in intervals {
            let bounded = ready.timeout(interval, orFailWith: TestError("late"))
            #expect(outcome(of: bounded) == .success(2))
            let failing = Promise<Int, TestError>(error: TestError("work"))
                .timeout(interval, orFailWith: TestError("late"))
            #expect(outcome(of: failing) == .failure(TestError("work")))
        }
        #expect(calls.value == 3)
        // The same meaning on a clock of the caller's.
        let clocked = ready.timeout(.zero, orFailWith: TestError("late"), clock: ManualClock())
        #expect(outcome(of: clocked) == .success(2))
    }

    static func theInnermostOfNestedTimeoutsFailsFirst() {
        let inner = TestError("inner")
        let outer = TestError("outer")
        let nested = Pending<Int>().promise.timeout(.zero, orFailWith: inner)
            .timeout(.zero, orFailWith: outer)
        #expect(outcome(of: nested) == .failure(inner))
        // As on a clock, where the inner timer is set first, and fires first.
        let clock = ManualClock()
        let clocked = Pending<Int>().promise.timeout(.zero, orFailWith: inner, clock: clock)
            .timeout(.zero, orFailWith: outer, clock: clock)
        let delivered = Delivery<Result<Int, TestError>>()
        clocked.run { delivered.send($0) }
        clock.advance(by: .zero)
        #expect(delivered.wait() == .failure(inner))
    }

    static func letsAMemberThatSettlesAtOnceWinAtAnyDepth() {
        @Sendable func nest(_ level: Int, _ depth: Int, _ body: @escaping @Sendable () -> Void) {
            guard level < depth else { return body() }
            Guarantee(value: level).map { nest($0 + 1, depth, body) }.run()
        }
        for depth in [0, 29, 30, 31, 32, 33, 40] {
            let outcomes = Log()
            let done = Delivery<Void>()
            DispatchQueue.global().async {
                nest(0, depth) {
                    when(fulfilled: [Promise<Int, TestError>(value: 1).map { $0 + 1 }])
                        .timeout(.zero, orFailWith: TestError("late"))
                        .run { outcomes.record("when \($0)") }
                    Promise<Int, TestError>(value: 1).map { $0 + 1 }.share()
                        .timeout(.zero, orFailWith: TestError("late"))
                        .run { outcomes.record("share \($0)") }
                }
                done.send(())
            }
            #expect(done.wait() != nil)
            // (Two runs deferred past the nesting limit may end in either order.)
            #expect(
                outcomes.all.sorted() == ["share success(2)", "when success([2])"],
                "depth \(depth)")
        }
    }

    static func failsWorkThatWaitsForAQueue() {
        // The queue is busy until the timeout has decided: a queue that carried the work on
        // first, from another thread, would have it win.
        let busy = DispatchQueue(label: "busy")
        let decided = DispatchSemaphore(value: 0)
        let stalled = Counter()
        busy.async {
            if decided.wait(timeout: .now() + timeout) == .timedOut { stalled.increment() }
        }
        let hopped = Promise<Int, TestError>(value: 1).on(busy)
            .timeout(.zero, orFailWith: TestError("late"))
        let delivered = Delivery<Result<Int, TestError>>()
        hopped.run { delivered.send($0) }
        #expect(delivered.wait() == .failure(TestError("late")))
        decided.signal()
        busy.sync {}
        #expect(stalled.value == 0, "the timeout waited for the queue the work waits for")
        let delayed = Promise<Int, TestError>(value: 1).delay(.seconds(3600))
            .timeout(.zero, orFailWith: TestError("late"))
        #expect(outcome(of: delayed) == .failure(TestError("late")))
    }

    static func failsWorkThatWaitsAndCancelsIt() {
        let ensured = Counter()
        for interval in [Duration.zero, .seconds(-1)] {
            let pending = Pending<Int>()
            let bounded = pending.promise.ensure { ensured.increment() }
                .timeout(interval, orFailWith: TestError("late"))
            #expect(outcome(of: bounded) == .failure(TestError("late")))
            #expect(pending.cancelled.value == 1)
            // The steps after the timeout go on with the error.
            let recovered = pending.promise.timeout(interval, orFailWith: TestError("late"))
                .recover { _ in 2 }
            #expect(value(of: recovered) == 2)
        }
        #expect(ensured.value == 2)  // the work's `ensure` steps run, as for a cancel
    }
}

@Suite struct Queues {
    static let key = DispatchSpecificKey<String>()

    static func queue(_ name: String) -> DispatchQueue {
        let queue = DispatchQueue(label: name)
        queue.setSpecific(key: key, value: name)
        return queue
    }

    @Test func aHopRunsTheNextStepOnItsQueueEveryTime() {
        let target = Self.queue("target")
        let wrong = Counter()
        let ended = Counter()
        for index in 0..<10_000 {
            // Work that settles at once, and work that resolves from another queue, even before
            // its operation returns.
            let work =
                index.isMultiple(of: 2)
                ? Guarantee(value: index)
                : Guarantee { resolver in DispatchQueue.global().async { resolver.fulfill(index) } }
            work.on(target).map { _ in DispatchQueue.getSpecific(key: Self.key) }
                .run { outcome in
                    if case .success(let queue) = outcome, queue != "target" { wrong.increment() }
                    ended.increment()
                }
        }
        #expect(eventually { ended.value == 10_000 })
        #expect(wrong.value == 0)
    }

    @Test func onStartsTheWorkOnAQueue() {
        let worker = Self.queue("worker")
        let ran = on(worker).then { Guarantee(value: DispatchQueue.getSpecific(key: Self.key)) }
        #expect(outcome(of: ran) == .success("worker"))
    }

    @Test func aRunCancelledWhileWaitingForItsQueueGoesNoFurther() {
        let paused = Self.queue("paused")
        paused.suspend()
        let log = Log()
        let handle = Guarantee(value: 1).on(paused).map { _ in log.record("step") }
            .ensure { log.record("ensure") }.run { _ in log.record("delivered") }
        handle.cancel()
        #expect(log.all == ["ensure"])
        paused.resume()
        paused.sync {}  // the hop's work item had its turn
        #expect(log.all == ["ensure"])
    }
}

@Suite struct CancellingMany {
    @Test func aBagCancelsItsRunsAtOnceAndWhenItGoesAway() {
        let members = Members()
        var bag: RunBag? = RunBag()
        let promises = members.promises
        for promise in promises.prefix(2) { promise.run { _ in }.store(in: bag!) }
        bag?.cancelAll()
        #expect(members.cancelled == [1, 1, 0, 0])
        for promise in promises.suffix(2) { promise.run { _ in }.store(in: bag!) }
        bag = nil
        #expect(members.cancelled == [1, 1, 1, 1])
    }

    @Test func droppingAHandleDoesNotCancel() {
        let pending = Pending<Int>()
        let result = Delivery<Result<Int, TestError>>()
        _ = pending.promise.run { result.send($0) }
        pending.resolvers.wait()?.fulfill(1)
        #expect(result.all == [.success(1)])
        #expect(pending.cancelled.value == 0)
    }

    @Test func aCompletionHandlerErrorCanMeanCancellation() {
        struct Cancelled: Error {}
        let ensured = Counter()
        let handle = Promise<Int, any Error> { resolver in
            resolver.resolve(nil, Cancelled(), cancelledIf: { $0 is Cancelled })
        }.ensure { ensured.increment() }.run { _ in Issue.record("cancelled: no completion") }
        #expect(handle.isCancelled)
        #expect(ensured.value == 1)
        let failed = Promise<Int, any Error> { resolver in
            resolver.resolve(nil, TestError("other"), cancelledIf: { $0 is Cancelled })
        }
        #expect(throws: TestError("other")) { try outcome(of: failed)?.get() }
    }

    @Test func ensureRunsOnlyOnceTheHandlersHaveReturned() async {
        let canceller = DispatchQueue(label: "canceller")
        let rounds = Rounds()
        for _ in 0..<200 where rounds.goOn {
            let log = Log()
            let entered = Delivery<Void>()
            let handlerBegan = Delivery<Void>()
            let returned = Delivery<Void>()
            let promise = Promise<Int, Never> { resolver in
                resolver.onCancel { _ in
                    log.record("handler begins")
                    handlerBegan.send(())
                    _ = returned.wait()  // the operation returns while this handler runs
                    log.record("handler ends")
                }
                defer { returned.send(()) }
                entered.send(())
                _ = handlerBegan.wait()
            }.ensure { log.record("ensure") }
            let task = Task { await promise.result }
            // The operation holds the task's thread, one of Swift's concurrency pool, until the
            // handler begins: the cancel comes from a thread of its own (a serial queue's), not
            // from this test, which would need a second pool thread to go on, and blocking tests
            // may hold it for seconds; nor from a global queue's, which it would hold as long.
            canceller.async { if entered.wait() != nil { task.cancel() } }
            #expect(rounds.waited(await bounded { await task.value } == .some(nil)))
            #expect(log.all == ["handler begins", "handler ends", "ensure"])
        }
    }
}

@Suite struct CancellingEverywhere {
    /// Runs what `make` builds, cancels it once `reached` (if given) arrives, and checks that
    /// nothing is delivered, `ensure` runs once, and nothing the run captured stays alive.
    func cancel(
        once reached: Delivery<Void>? = nil,
        _ make: (Memory.Witness) -> Promise<Int, TestError>
    ) {
        let ensured = Counter()
        let witness = WeakReference<Memory.Witness>()
        let delivered = Counter()
        do {
            let captured = Memory.Witness()
            witness.value = captured
            let handle = make(captured).ensure { ensured.increment() }
                .run { _ in delivered.increment() }
            _ = reached?.wait()
            handle.cancel()
        }
        #expect(ensured.value == 1)
        #expect(delivered.value == 0)
        #expect(eventually { witness.value == nil })
    }

    @Test func inEveryStateARunEndsCleanly() {
        cancel { witness in  // waiting in `after`
            after(.seconds(60)).setFailureType(to: TestError.self).map { _ in witness.zero }
        }
        cancel { witness in  // waiting in `delay`
            Promise(value: 1).delay(.seconds(60)).map { $0 + witness.zero }
        }
        let slow = Pending<Int>()
        cancel { witness in  // waiting in `timeout`
            slow.promise.map { $0 + witness.zero }.timeout(.seconds(60), orFailWith: .init("t"))
        }
        #expect(slow.cancelled.value == 1)
        let failed = Delivery<Void>()
        cancel(once: failed) { witness in  // waiting between `retry` attempts
            Promise<Int, TestError> { resolver in
                resolver.reject(TestError("no"))
                failed.send(())
            }.map { $0 + witness.zero }.retry(2, delay: .seconds(60))
        }
        let paused = Queues.queue("paused")
        paused.suspend()
        cancel { witness in  // waiting for a queue
            Promise(value: 1).on(paused).map { $0 + witness.zero }
        }
        paused.resume()
        let members = Members()
        cancel { witness in  // inside a combinator
            when(fulfilled: members.promises).map { $0.count + witness.zero }
        }
        #expect(members.cancelled == [1, 1, 1, 1])
        #expect(members.ensured.map(\.value) == [1, 1, 1, 1])
    }
}
