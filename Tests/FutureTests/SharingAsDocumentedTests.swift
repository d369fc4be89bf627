import Dispatch
import Testing

@testable import Future

/// Shared work that a test settles by hand: each call of its operation is counted, its resolver
/// kept, and how many calls are under way at once (begun, neither settled by the test nor
/// cancelled) is watched, for `share()`'s "its steps never run twice at once".
private final class Work: @unchecked Sendable {
    let resolvers = Delivery<Resolver<Int, TestError>>()
    let cancelled = Counter()
    /// The calls under way, and the most there were at once.
    let live = Counter()
    let most = Counter()

    var promise: Promise<Int, TestError> {
        Promise { resolver in
            self.most.raise(to: self.live.increment())
            resolver.onCancel { _ in
                self.cancelled.increment()
                self.live.decrement()
            }
            self.resolvers.send(resolver)
        }
    }

    /// Settles call `index` (from 0) with `value`, as the network would.
    func fulfill(_ index: Int, with value: Int) {
        live.decrement()
        resolvers.all[index].fulfill(value)
    }

    /// The work behind a step, shared: given 1, the step signals `inStep` and holds until
    /// `release` is signalled; it passes other values at once.
    func sharedBehindAStepHeldAtOne() -> (
        shared: Promise<Int, TestError>, inStep: DispatchSemaphore, release: DispatchSemaphore
    ) {
        let inStep = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let shared = promise.map { value -> Int in
            if value == 1 {
                inStep.signal()
                _ = release.wait(timeout: .now() + timeout)
            }
            return value
        }.share()
        return (shared, inStep, release)
    }
}

/// `eventually`, awaited on a thread of its own, holding up no thread of Swift's pool.
private func eventuallyOffThePool(_ condition: @escaping @Sendable () -> Bool) async -> Bool {
    let held = Delivery<Bool>()
    await onThread(stackSize: 1 << 20) { held.send(eventually(condition)) }
    return held.all.first ?? false
}

/// The rounds of a stress test: fewer under ThreadSanitizer, which checks every access of each
/// (the suite runs there in CI, within its time budget).
private let stressRounds = MCSeeds.underThreadSanitizer ? 500 : 2_000

/// A place to keep a promise that a closure made before it reads (the work's own shared promise).
private final class Holder<Kept>: @unchecked Sendable {
    private let lock = TestLock()
    private var kept: Kept?

    var value: Kept? {
        get { lock.withLock { kept } }
        set { lock.withLock { kept = newValue } }
    }
}

/// `share()`, `share(cancelsWhenAbandoned:)` and `pending()` held to their doc comments
/// (Sharing.swift) and the articles, in corners no other test pinned (a review of sharing).
@Suite struct SharingAsDocumented {
    /// `share()`: "later runs get its outcome, value or error, at once". A run that comes while
    /// the runs that waited are going on (the first one's completion still under way, on the
    /// thread that settled the work) comes after the work settled: it gets the outcome inside its
    /// own `run(…)`, without starting the work again, and the run still waiting gets it too.
    @Test func aRunThatComesAsTheWaitingRunsGoOnGetsTheOutcomeAtOnce() {
        let work = Work()
        let shared = work.promise.share()
        let inFirst = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let results = Log()
        shared.run { _ in
            results.record("first")
            inFirst.signal()
            _ = release.wait(timeout: .now() + timeout)
        }
        shared.run { _ in results.record("second") }
        let resolver = work.resolvers.wait()
        DispatchQueue.global().async { resolver?.fulfill(5) }
        #expect(inFirst.wait(timeout: .now() + timeout) == .success)
        let late = Delivery<Result<Int, TestError>>()
        shared.run { late.send($0) }
        #expect(late.all == [.success(5)])
        release.signal()
        #expect(eventually { results.all.count == 2 })
        #expect(results.all == ["first", "second"])
        #expect(work.resolvers.all.count == 1)
    }

    /// RunHandle: "After `cancel()` no completion is delivered"; `share()`: "Cancelling a run
    /// leaves the others waiting". The first waiting run's completion cancels the second, whose
    /// turn has not come: it gets nothing, and the third still gets the value.
    @Test func aWaitingRunCancelledByAnEarlierOnesCompletionGetsNothing() {
        let (answer, reply) = Guarantee<Int>.pending()
        let handles = Delivery<RunHandle>()
        let order = Log()
        handles.send(
            answer.run(some: { _ in
                order.record("0")
                handles.all[1].cancel()
            }))
        handles.send(answer.run(some: { _ in order.record("1") }))
        handles.send(answer.run(some: { _ in order.record("2") }))
        reply.fulfill(1)
        #expect(order.all == ["0", "2"])
        #expect(handles.all[1].isCancelled)
    }

    /// `share()`: "Once every waiting run is cancelled, so is the work (it runs apart from the
    /// runs that wait: the last of them, cancelled from another thread, may end before a step of
    /// the work under way has returned) ... a run that comes later waits for that end ..., then
    /// starts the work again, so that its steps never run twice at once". The only run is
    /// cancelled while a step of the work is held on another thread; a run that comes then does
    /// not start the work beside that step, and gets the value of the new run of the work.
    @Test func aRunThatComesAsTheAbandonedWorksStepRunsWaitsForItThenStartsItAgain() {
        let work = Work()
        let (shared, inStep, release) = work.sharedBehindAStepHeldAtOne()
        let first = shared.run { _ in Issue.record("cancelled") }
        #expect(work.resolvers.wait() != nil)
        DispatchQueue.global().async { work.fulfill(0, with: 1) }
        #expect(inStep.wait(timeout: .now() + timeout) == .success)
        first.cancel()
        #expect(first.isCancelled)
        let result = Delivery<Result<Int, TestError>>()
        shared.run { result.send($0) }
        #expect(work.resolvers.all.count == 1)  // not beside the step still under way
        release.signal()
        #expect(eventually { work.resolvers.all.count == 2 })
        work.fulfill(1, with: 2)
        #expect(result.wait() == .success(2))
        #expect(work.resolvers.all.count == 2)
    }

    /// `share()`: "Once every waiting run is cancelled, so is the work". A run that comes as the
    /// abandoned work is still ending waits for the next run of the work; cancelled before that
    /// one starts, it leaves no work under way; the run after it starts one, and gets its value.
    @Test func aRunThatLeavesBeforeTheAbandonedWorkEndedLeavesNoWorkUnderWay() {
        let work = Work()
        let (shared, inStep, release) = work.sharedBehindAStepHeldAtOne()
        let first = shared.run { _ in Issue.record("cancelled") }
        #expect(work.resolvers.wait() != nil)
        let ended = Delivery<Void>()
        DispatchQueue.global().async {
            work.fulfill(0, with: 1)
            ended.send(())
        }
        #expect(inStep.wait(timeout: .now() + timeout) == .success)
        first.cancel()
        let second = shared.run { _ in Issue.record("cancelled") }
        second.cancel()
        release.signal()
        #expect(ended.wait() != nil)  // the thread that settled the work is out of it
        #expect(work.live.value == 0)
        let result = Delivery<Result<Int, TestError>>()
        shared.run { result.send($0) }
        #expect(eventually { work.live.value == 1 })
        work.fulfill(work.resolvers.all.count - 1, with: 3)
        #expect(result.wait() == .success(3))
        #expect(work.live.value == 0)
        #expect(work.most.value == 1)
    }

    /// `share(cancelsWhenAbandoned:)`: "Work that ends by cancellation, abandoned or cancelled by
    /// a step of its own, ends so the runs that waited for it as it was cancelled; a run that
    /// comes later waits for that end (the work's `ensure` steps still ahead), then starts the
    /// work again". The work's operation cancels itself: both waiting runs end by cancellation,
    /// its `ensure` step runs once, and the next run starts the work anew and gets its value.
    @Test(arguments: [true, false])
    func workThatCancelsItselfEndsItsRunsSoAndStartsAgainForTheNext(cancelsWhenAbandoned: Bool) {
        let work = Work()
        let ensured = Counter()
        let shared = work.promise.ensure { ensured.increment() }
            .share(cancelsWhenAbandoned: cancelsWhenAbandoned)
        let first = shared.run { _ in Issue.record("ended by cancellation") }
        let second = shared.run { _ in Issue.record("ended by cancellation") }
        let resolver = work.resolvers.wait()
        DispatchQueue.global().async { resolver?.cancel() }
        #expect(eventually { first.isCancelled && second.isCancelled })
        #expect(eventually { ensured.value == 1 })
        let result = Delivery<Result<Int, TestError>>()
        shared.run { result.send($0) }
        #expect(work.resolvers.all.count == 2)
        work.resolvers.all[1].fulfill(4)
        #expect(result.wait() == .success(4))
        #expect(ensured.value == 2)
        shared.run { result.send($0) }  // and that outcome is kept
        #expect(result.all == [.success(4), .success(4)])
        #expect(work.resolvers.all.count == 2)
    }

    /// `share()`: "The first run starts the work, runs that come while it is under way wait". A
    /// run that comes as the work's `ensure` step runs, after the work succeeded, waits for that
    /// step and gets the same value: the work ran once.
    @Test func aRunThatComesAsTheWorksEnsureStepRunsGetsTheSameValue() {
        let work = Work()
        let inEnsure = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let shared = work.promise.ensure {
            inEnsure.signal()
            _ = release.wait(timeout: .now() + timeout)
        }.share()
        let results = Delivery<Result<Int, TestError>>()
        shared.run { results.send($0) }
        #expect(work.resolvers.wait() != nil)
        DispatchQueue.global().async { work.fulfill(0, with: 6) }
        #expect(inEnsure.wait(timeout: .now() + timeout) == .success)
        shared.run { results.send($0) }
        #expect(results.all.isEmpty)
        release.signal()
        #expect(eventually { results.all.count == 2 })
        #expect(results.all == [.success(6), .success(6)])
        #expect(work.resolvers.all.count == 1)
    }

    /// Sharing.swift: the run "keeps ... the shared state, until the call resolves or is
    /// cancelled: ... the caller may have dropped the promise"; Running.swift: "The run keeps the
    /// chain's steps, and what they captured, until it ends". Three runs wait; the shared promise
    /// is let go of; the work settles from another thread: each run gets the value, and then
    /// nothing the work captured stays alive.
    @Test func aSharedPromiseLetGoOfAsRunsWaitDeliversToEachThenGoes() {
        let work = Work()
        let witness = WeakReference<Memory.Witness>()
        let results = Delivery<Result<Int, TestError>>()
        do {
            let captured = Memory.Witness()
            witness.value = captured
            let shared = work.promise.map { $0 + captured.zero }.share()
            for _ in 0..<3 { shared.run { results.send($0) } }
        }
        #expect(witness.value != nil)
        #expect(work.resolvers.wait() != nil)
        DispatchQueue.global().async { work.fulfill(0, with: 8) }
        #expect(eventually { results.all.count == 3 })
        #expect(results.all == Array(repeating: .success(8), count: 3))
        #expect(eventually { witness.value == nil })
    }

    /// `share()`'s memory once its runs ended by cancellation: every run cancelled, the work is
    /// cancelled and nothing it captured stays alive, though the test keeps the operation's
    /// resolver (Resolver: a resolver kept "keeps the run's own record in memory ..., not its
    /// steps"); with `cancelsWhenAbandoned: false`, the work goes on, and goes once it settled.
    @Test(arguments: [true, false])
    func nothingTheWorkCapturedStaysOnceItsRunsEnded(cancelsWhenAbandoned: Bool) {
        let work = Work()
        let witness = WeakReference<Memory.Witness>()
        do {
            let captured = Memory.Witness()
            witness.value = captured
            let shared = work.promise.map { $0 + captured.zero }
                .share(cancelsWhenAbandoned: cancelsWhenAbandoned)
            let handles = (0..<3).map { _ in shared.run { _ in Issue.record("cancelled") } }
            for handle in handles { handle.cancel() }
        }
        let resolver = work.resolvers.wait()
        #expect(work.cancelled.value == (cancelsWhenAbandoned ? 1 : 0))
        if cancelsWhenAbandoned {
            #expect(eventually { witness.value == nil })
        } else {
            #expect(witness.value != nil)  // the work goes on
            resolver?.fulfill(1)
            #expect(eventually { witness.value == nil })
        }
        withExtendedLifetime(resolver) {}
    }

    /// Resolver: "The run then goes on on the thread that is free to carry it: the resolving one if
    /// the operation had returned"; `share()`: runs that come while the work is under way "wait
    /// and go on in turn", later ones get its outcome "at once". The waiting runs go on on the
    /// queue that settled the work; a later run, on the thread that runs it, before `run(…)`
    /// returns.
    @Test func theWaitingRunsGoOnWhereTheWorkSettledAndLaterOnesWhereTheyRun() {
        let queues = NamedQueues()
        let settling = queues.make("settling")
        let caller = queues.make("caller")
        let work = Work()
        let shared = work.promise.share()
        let places = Log()
        for index in 0..<3 {
            shared.run { _ in places.record("\(index) on \(queues.current)") }
        }
        #expect(work.resolvers.wait() != nil)
        settling.async { work.fulfill(0, with: 1) }
        #expect(eventually { places.all.count == 3 })
        #expect(places.all == ["0 on settling", "1 on settling", "2 on settling"])
        caller.sync {
            shared.run { _ in places.record("later on \(queues.current)") }
            places.record("run returned")
        }
        #expect(places.all.suffix(2) == ["later on caller", "run returned"])
    }

    /// `share()`: "Cancelling a run leaves the others waiting. Once every waiting run is
    /// cancelled, so is the work". A race that another member wins cancels its shared member:
    /// the work is cancelled if that member alone waited for it, and goes on for a run outside
    /// the race that waits too.
    @Test(arguments: [false, true])
    func aRaceWonByAnotherMemberCancelsSharedWorkOnlyIfNothingElseWaits(othersWait: Bool) {
        let work = Work()
        let shared = work.promise.share()
        let outside = Delivery<Result<Int, TestError>>()
        if othersWait { shared.run { outside.send($0) } }
        let (other, win) = Promise<Int, TestError>.pending()
        let raced = Delivery<Result<Int, TestError>>()
        race([shared, other]).run { raced.send($0) }
        #expect(work.resolvers.wait() != nil)
        win.fulfill(2)
        #expect(raced.wait() == .success(2))
        #expect(work.cancelled.value == (othersWait ? 0 : 1))
        if othersWait {
            work.fulfill(0, with: 3)
            #expect(outside.wait() == .success(3))
        }
    }

    /// The same in `when`: a member that fails cancels the others, the shared promise twice
    /// (itself, and a step after it): the work is cancelled, as nothing else waits for it.
    @Test func aFailedWhenCancelsTheSharedWorkItAloneWaitedFor() {
        let work = Work()
        let shared = work.promise.share()
        let (other, fail) = Promise<Int, TestError>.pending()
        let result = Delivery<Result<[Int], TestError>>()
        when(fulfilled: [shared, shared.map { $0 + 1 }, other]).run { result.send($0) }
        #expect(work.resolvers.wait() != nil)
        #expect(work.resolvers.all.count == 1)
        fail.reject(TestError("failed"))
        #expect(result.wait() == .failure(TestError("failed")))
        #expect(work.cancelled.value == 1)
    }

    /// `share(cancelsWhenAbandoned:)` under a `timeout` (a run that the timeout cancels): "Once
    /// every waiting run is cancelled, so is the work ... with `cancelsWhenAbandoned: false`, the
    /// work goes on, and the next run waits for it or gets its outcome". The next run then waits
    /// for the work under way, or (cancelled when abandoned) starts it again.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test(arguments: [true, false])
    func aTimeoutOfTheOnlyRunCancelsTheWorkUnlessItGoesOn(cancelsWhenAbandoned: Bool) {
        let work = Work()
        let clock = ManualClock()
        let shared = work.promise.share(cancelsWhenAbandoned: cancelsWhenAbandoned)
        let first = Delivery<Result<Int, TestError>>()
        shared.timeout(.seconds(1), orFailWith: TestError("slow"), clock: clock)
            .run { first.send($0) }
        #expect(work.resolvers.wait() != nil)
        #expect(eventually { clock.timerCount == 1 })
        clock.advance(by: .seconds(1))
        #expect(first.wait() == .failure(TestError("slow")))
        #expect(work.cancelled.value == (cancelsWhenAbandoned ? 1 : 0))
        let next = Delivery<Result<Int, TestError>>()
        shared.run { next.send($0) }
        #expect(eventually { work.resolvers.all.count == (cancelsWhenAbandoned ? 2 : 1) })
        work.resolvers.all.last?.fulfill(7)
        #expect(next.wait() == .success(7))
    }

    /// `share()`: "an error is kept as a value is: to try again after one, share
    /// `work.retry(3)`, or make a new shared promise". A retry of the shared promise gets the
    /// kept error at every attempt, running the work once; the share of a retry runs the attempts
    /// once for every run that waits.
    @Test func aRetryOfASharedPromiseGetsTheKeptErrorAndAShareOfARetryRetriesOnce() {
        /// Work that fails on its first two calls, from another thread, and gives 3 on the third.
        func flaky(_ calls: Counter) -> Promise<Int, TestError> {
            Promise { resolver in
                let call = calls.increment()
                DispatchQueue.global().async {
                    resolver(call < 3 ? .failure(TestError("\(call)")) : .success(call))
                }
            }
        }
        let once = Counter()
        let kept = flaky(once).share()
        #expect(outcome(of: kept.retry(3)) == .failure(TestError("1")))
        #expect(once.value == 1)
        let calls = Counter()
        let retried = flaky(calls).retry(3).share()
        let results = Delivery<Result<Int, TestError>>()
        retried.run { results.send($0) }
        retried.run { results.send($0) }
        #expect(eventually { results.all.count == 2 })
        #expect(results.all == [.success(3), .success(3)])
        #expect(calls.value == 3)  // three attempts, for both runs
    }

    /// Sharing: what the work captured "may run the shared promise as it goes" (the test of that
    /// name runs it after the work); here the work's operation runs its own shared promise before
    /// it resolves: that run comes while the work is under way, waits, and gets the value.
    @Test func theWorksOperationMayRunItsOwnSharedPromiseWhichWaitsForIt() {
        let holder = Holder<Promise<Int, TestError>>()
        let calls = Counter()
        let results = Log()
        let resolvers = Delivery<Resolver<Int, TestError>>()
        holder.value = Promise<Int, TestError> { resolver in
            calls.increment()
            holder.value?.run { results.record("inner \($0)") }
            resolvers.send(resolver)
        }.share()
        holder.value?.run { results.record("outer \($0)") }
        resolvers.wait()?.fulfill(9)
        #expect(eventually { results.all.count == 2 })
        #expect(Set(results.all) == ["inner success(9)", "outer success(9)"])
        #expect(calls.value == 1)
        holder.value = nil
    }

    /// `pending()`: "Its runs wait for the resolver or get its outcome, as a shared promise's
    /// do"; Resolver: "Call it from any thread ... The first outcome counts". Runs come from three
    /// threads as a fourth fulfills: each run gets the first value once, in 2,000 rounds.
    @Test func aPendingPromiseFulfilledAsRunsComeFromManyThreadsGivesEachTheValue() {
        let rounds = Rounds()
        for _ in 0..<stressRounds where rounds.goOn {
            let (promise, resolver) = Promise<Int, TestError>.pending()
            let delivered = Log()
            DispatchQueue.concurrentPerform(iterations: 4) { index in
                if index == 0 {
                    resolver.fulfill(1)
                    resolver.fulfill(2)
                } else {
                    promise.run { delivered.record("\(index) \($0)") }
                }
            }
            rounds.waited(eventually { delivered.all.count == 3 })
            #expect(Set(delivered.all) == ["1 success(1)", "2 success(1)", "3 success(1)"])
        }
    }

    /// `pending()`: "if the resolver goes unused, they end by cancellation". Let go of on another
    /// thread as runs come from others: every run ends by cancellation, with no completion, in
    /// 1,000 rounds; a run after that too.
    @Test func aPendingResolverLetGoOfOnAnotherThreadAsRunsComeEndsThemAll() {
        _ = reports  // its reports go to the log, not standard error
        let rounds = Rounds()
        for _ in 0..<1_000 where rounds.goOn {
            let holder = Holder<Resolver<Int, TestError>>()
            let promise: Promise<Int, TestError>
            do {
                let made = Promise<Int, TestError>.pending(line: 2_000_001)
                promise = made.promise
                holder.value = made.resolver
            }
            let handles = Holder<[RunHandle]>()
            handles.value = []
            let lock = TestLock()
            DispatchQueue.concurrentPerform(iterations: 4) { index in
                if index == 0 {
                    holder.value = nil
                } else {
                    let handle = promise.run { _ in Issue.record("ended by cancellation") }
                    lock.withLock { handles.value?.append(handle) }
                }
            }
            let all = handles.value ?? []
            rounds.waited(eventually { all.allSatisfy(\.isCancelled) })
            #expect(all.count == 3)
            #expect(promise.run { _ in Issue.record("ended by cancellation") }.isCancelled)
        }
    }

    /// Resolver.cancel(): "Ends the run as cancelled"; `pending()`: its runs wait for the
    /// resolver "as a shared promise's do". Cancelled from another thread, it ends every waiting
    /// run by cancellation.
    @Test func aPendingResolverCancelledFromAnotherThreadEndsTheWaitingRunsSo() {
        let (promise, resolver) = Promise<Int, TestError>.pending()
        let ensured = Counter()
        let handles = (0..<3).map { _ in
            promise.ensure { ensured.increment() }.run { _ in Issue.record("cancelled") }
        }
        DispatchQueue.global().async { resolver.cancel() }
        #expect(eventually { handles.allSatisfy(\.isCancelled) })
        #expect(eventually { ensured.value == 3 })
    }

    /// `pending()`: "if the resolver goes unused, or is cancelled, they end by cancellation, and
    /// so do the runs after them (a later outcome is ignored). Its runs that leave cancel nothing:
    /// the resolver's `onCancel` handlers are not called for them".
    @Test func aPendingResolverCancelledEndsLaterRunsSoAndRunsThatLeaveCancelNothing() {
        let (promise, resolver) = Promise<Int, TestError>.pending()
        let heard = Counter()
        resolver.onCancel { _ in heard.increment() }
        let left = promise.run { _ in Issue.record("a cancelled run delivered") }
        left.cancel()
        #expect(left.isCancelled)
        #expect(heard.value == 0 && !resolver.isCancelled, "a run that left cancelled the resolver")
        resolver.cancel()
        #expect(heard.value == 1, "its own cancel calls its handlers, as a run's resolver's does")
        resolver.fulfill(1)  // ignored
        let later = promise.run { _ in Issue.record("a later run delivered") }
        #expect(later.isCancelled, "a run after the cancel ends by cancellation at once")
    }

    /// Concurrency.md: "Cancelling the awaiting task cancels the run"; `share()`: "Cancelling a
    /// run leaves the others waiting. Once every waiting run is cancelled, so is the work ...
    /// with `cancelsWhenAbandoned: false`, the work goes on, and the next run waits for it or
    /// gets its outcome". A task awaits the shared promise beside a run that stays: cancelled, its
    /// await gives `nil` and the work goes on. Then the only awaiting task is cancelled: the work
    /// is cancelled unless it goes on; the next await waits for it, or starts it again.
    @Test(arguments: [true, false])
    func aCancelledAwaitLeavesTheOthersAndAbandonsTheWorkWhenLast(
        cancelsWhenAbandoned: Bool
    ) async {
        let work = Work()
        let shared = work.promise.share(cancelsWhenAbandoned: cancelsWhenAbandoned)
        let stays = Delivery<Result<Int, TestError>>()
        shared.run { stays.send($0) }
        #expect(await work.resolvers.arrival() != nil)
        // Cancelled before or after it joined: the run that stays keeps the work either way.
        let joined = Task { await shared.result }
        joined.cancel()
        #expect(await bounded { await joined.value } == .some(nil))
        #expect(work.cancelled.value == 0)
        work.fulfill(0, with: 1)
        #expect(await stays.arrival() == .success(1))

        let again = Work()
        let alone = again.promise.share(cancelsWhenAbandoned: cancelsWhenAbandoned)
        let only = Task { await alone.result }
        #expect(await again.resolvers.arrival() != nil)
        only.cancel()
        #expect(await bounded { await only.value } == .some(nil))
        #expect(again.cancelled.value == (cancelsWhenAbandoned ? 1 : 0))
        let next = Task { await alone.result }
        let wanted = cancelsWhenAbandoned ? 2 : 1
        #expect(await eventuallyOffThePool { again.resolvers.all.count == wanted })
        #expect(again.resolvers.all.count == wanted)
        again.resolvers.all.last?.fulfill(2)
        #expect(await bounded { await next.value } == .some(.success(2)))
    }
}

/// A step of the shared work that cancels a run waiting for it (RunHandle: "A step that cancels
/// its own run stops it before the next step, even when another thread's cancel came first (a
/// step ... of a shared promise's work that cancels when abandoned and that only this run waits
/// for, too ...)"), where which runs wait changes before the step.
extension SharingAsDocumented {
    /// Shared work whose first step, once `gate` opens, cancels the run `handles` holds first,
    /// and whose second step logs.
    private static func workCancelling(
        _ handles: Delivery<RunHandle>, after gate: Guarantee<Int>, log: Log,
        inStep: DispatchSemaphore? = nil, release: DispatchSemaphore? = nil
    ) -> Guarantee<Int> {
        gate.map { value -> Int in
            inStep?.signal()
            _ = release?.wait(timeout: .now() + timeout)
            handles.all[0].cancel()
            return value
        }.map { value -> Int in
            log.record("next step")
            return value
        }.share()
    }

    /// `share()`: "Cancelling a run leaves the others waiting". Two runs wait; a step of the work
    /// cancels the first: the work goes on, and the second gets its value.
    @Test func aStepOfTheWorkThatCancelsOneOfTwoWaitingRunsLeavesTheWorkGoing() {
        let (gate, open) = Guarantee<Int>.pending()
        let handles = Delivery<RunHandle>()
        let log = Log()
        let shared = Self.workCancelling(handles, after: gate, log: log)
        handles.send(shared.run(some: { _ in Issue.record("cancelled") }))
        shared.run(some: { log.record("second \($0)") })
        open.fulfill(1)
        #expect(log.all == ["next step", "second 1"])
        #expect(handles.all[0].isCancelled)
    }

    /// The second run waited, then left (its cancel from this thread): the first is the only one
    /// left, and a step of the work that cancels it stops the work before its next step.
    @Test func aStepOfTheWorkThatCancelsTheOnlyRunLeftStopsTheWork() {
        let (gate, open) = Guarantee<Int>.pending()
        let handles = Delivery<RunHandle>()
        let log = Log()
        let shared = Self.workCancelling(handles, after: gate, log: log)
        handles.send(shared.run(some: { _ in Issue.record("cancelled") }))
        shared.run(some: { _ in Issue.record("cancelled") }).cancel()
        open.fulfill(1)
        #expect(handles.all[0].isCancelled)
        #expect(log.all.isEmpty)
    }

    /// A second run comes as the work's first step is under way, before that step cancels the
    /// first run (the only one waiting as the step began): the second still waits, so the work
    /// goes on, and it gets the value.
    @Test func aRunThatComesAsTheStepRunsKeepsTheWorkGoingWhenTheStepCancelsTheFirst() {
        let (gate, open) = Guarantee<Int>.pending()
        let handles = Delivery<RunHandle>()
        let log = Log()
        let inStep = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let shared = Self.workCancelling(
            handles, after: gate, log: log, inStep: inStep, release: release)
        handles.send(shared.run(some: { _ in Issue.record("cancelled") }))
        DispatchQueue.global().async { open.fulfill(1) }
        #expect(inStep.wait(timeout: .now() + timeout) == .success)
        let second = Delivery<Int>()
        shared.run(some: { second.send($0) })
        release.signal()
        #expect(second.wait() == 1)
        #expect(log.all == ["next step"])
        #expect(handles.all[0].isCancelled)
    }
}

/// Runs that come from the abandoned work's own cancel handler or `ensure` step.
extension SharingAsDocumented {
    /// `share()`: "Once every waiting run is cancelled, so is the work ... a run that comes later
    /// waits for that end (the work's `ensure` steps still ahead), then starts the work again".
    /// The only run is cancelled; the work's cancel handler, or its `ensure` step, runs the shared
    /// promise (a cache that hands the next caller the promise it holds): that run waits for the
    /// end, then for a new run of the work, and gets its value.
    @Test(arguments: [false, true])
    func aRunFromTheAbandonedWorksOwnEndWaitsForANewRunOfIt(fromEnsure: Bool) {
        let holder = Holder<Promise<Int, TestError>>()
        let calls = Counter()
        let resolvers = Delivery<Resolver<Int, TestError>>()
        let next = Delivery<Result<Int, TestError>>()
        let runNext: @Sendable () -> Void = {
            guard next.all.isEmpty, let promise = holder.value else { return }
            promise.run { next.send($0) }
        }
        holder.value = Promise<Int, TestError> { resolver in
            if calls.increment() == 1, !fromEnsure { resolver.onCancel { _ in runNext() } }
            resolvers.send(resolver)
        }.ensure { if fromEnsure, calls.value == 1 { runNext() } }.share()
        let first = holder.value?.run { _ in Issue.record("cancelled") }
        #expect(resolvers.wait() != nil)
        first?.cancel()
        #expect(eventually { calls.value == 2 })
        resolvers.all.last?.fulfill(2)
        #expect(next.wait() == .success(2))
        holder.value = nil
    }
}

/// Memory and stack of the runs that wait.
extension SharingAsDocumented {
    /// Running.swift: "A run that is cancelled lets go of them [its steps] where it ends: on the
    /// thread that calls `cancel()` if the run waits"; Resolver: a resolver kept "keeps the run's
    /// own record in memory ..., not its steps". A run of a pending promise, whose resolver the
    /// test keeps, is cancelled: what its steps captured goes at once.
    @Test func aCancelledRunOfAPendingPromiseLetsGoOfItsStepsThoughTheResolverIsKept() {
        let (promise, resolver) = Promise<Int, TestError>.pending()
        let witness = WeakReference<Memory.Witness>()
        let handle: RunHandle
        do {
            let captured = Memory.Witness()
            witness.value = captured
            handle = promise.map { $0 + captured.zero }.run { _ in Issue.record("cancelled") }
        }
        #expect(witness.value != nil)
        handle.cancel()
        #expect(witness.value == nil)
        withExtendedLifetime(resolver) {}
    }

    /// README: "The runs waiting for a shared promise go on one after another, in the order they
    /// came, not nested". Ten thousand runs wait; the work settles on a thread of 256 KiB: each
    /// goes on, in the order it came.
    @Test func tenThousandWaitingRunsGoOnInOrderOnASmallStack() {
        let (promise, resolver) = Guarantee<Int>.pending()
        let order = Counter()
        let wrong = Counter()
        for index in 0..<10_000 {
            promise.map { $0 + 1 }.run(some: { _ in
                if order.increment() != index + 1 { wrong.increment() }
            })
        }
        onThread(stackSize: 256 << 10) { resolver.fulfill(1) }
        #expect(order.value == 10_000)
        #expect(wrong.value == 0)
    }
}

/// Stress: runs that come, leave and settle a shared promise from many threads at once.
@Suite struct SharingAsDocumentedStress {
    /// RunHandle: "After `cancel()` no completion is delivered"; `share()`: "Cancelling a run
    /// leaves the others waiting". Four threads run one shared promise whose work settles on a
    /// global queue; two cancel their run at once. The two others get the value, and no run gets
    /// a completion once it is cancelled (Cancellation.swift: "A run that ended with an outcome
    /// stays not cancelled": a completion with its run cancelled is one after the cancel), in
    /// 2,000 rounds.
    @Test func runsThatComeAndLeaveFromManyThreadsAsTheWorkSettles() {
        let rounds = Rounds()
        let late = Counter()
        for _ in 0..<stressRounds where rounds.goOn {
            let calls = Counter()
            let shared = Promise<Int, TestError> { resolver in
                calls.increment()
                DispatchQueue.global().async { resolver.fulfill(7) }
            }.share()
            let kept = Counter()
            DispatchQueue.concurrentPerform(iterations: 4) { index in
                let handle = Holder<RunHandle>()
                handle.value = shared.run { result in
                    if handle.value?.isCancelled == true { late.increment() }
                    if index >= 2, result == .success(7) { kept.increment() }
                }
                if index < 2 { handle.value?.cancel() }
            }
            rounds.waited(eventually { kept.value == 2 })
        }
        #expect(late.value == 0)
    }

    /// RunHandle: "After `cancel()` no completion is delivered" (checked as above); `share()`: the
    /// work is cancelled once every waiting run is, and nothing a run captured stays once it
    /// ended. A `when` of the shared promise and a step after it, and a `race` of it against a
    /// promise that never settles, are each cancelled from a thread as another settles the work,
    /// in 2,000 rounds.
    @Test func combinationsOfASharedPromiseCancelledAsTheWorkSettles() {
        let rounds = Rounds()
        let late = Counter()
        for round in 0..<stressRounds where rounds.goOn {
            let work = Work()
            let witness = WeakReference<Memory.Witness>()
            let (never, keep) = Promise<Int, TestError>.pending()
            let ended = Counter()
            do {
                let captured = Memory.Witness()
                witness.value = captured
                let shared = work.promise.map { $0 + captured.zero }.share()
                let combined =
                    round.isMultiple(of: 2)
                    ? when(fulfilled: [shared, shared.map { $0 + 1 }]).map { $0[0] }
                    : race([shared, never])
                let handle = Holder<RunHandle>()
                handle.value = combined.ensure { ended.increment() }.run { _ in
                    if handle.value?.isCancelled == true { late.increment() }
                }
                let resolver = work.resolvers.wait()
                DispatchQueue.concurrentPerform(iterations: 2) { index in
                    if index == 0 {
                        resolver?.fulfill(1)
                    } else {
                        handle.value?.cancel()
                    }
                }
                withExtendedLifetime(keep) {}
            }
            rounds.waited(eventually { ended.value == 1 && witness.value == nil })
        }
        #expect(late.value == 0)
    }

    /// `share()`: "Once every waiting run is cancelled, so is the work ... a run that comes later
    /// waits for that end ..., then starts the work again, so that its steps never run twice at
    /// once". Three threads each run the shared promise and cancel the run at once; then a run
    /// that stays gets the value of the work under way, the work's operation never having two
    /// calls under way at once, in 2,000 rounds.
    @Test func runsThatAllLeaveFromManyThreadsThenOneThatStays() {
        let rounds = Rounds()
        for _ in 0..<stressRounds where rounds.goOn {
            let work = Work()
            let shared = work.promise.share()
            DispatchQueue.concurrentPerform(iterations: 3) { _ in
                shared.run { _ in Issue.record("cancelled") }.cancel()
            }
            let result = Delivery<Result<Int, TestError>>()
            shared.run { result.send($0) }
            guard rounds.waited(eventually { work.live.value == 1 }) else { break }
            #expect(work.most.value == 1)
            work.fulfill(work.resolvers.all.count - 1, with: 5)
            #expect(rounds.waited(result.wait() == .success(5)))
        }
    }
}
