import Dispatch
import Testing

@testable import Future

@Suite struct Awaiting {
    @Test func valueGivesTheValueOrThrowsTheTypedError() async throws {
        #expect(
            try await awaited("a value") {
                try await Promise<Int, TestError>(value: 1).map { $0 + 1 }.value
            } == 2)
        do {
            _ = try await awaited("an error") { () async throws(TestError) -> Int? in
                try await Promise<Int, TestError>(error: TestError("typed")).value
            }
            Issue.record("must throw")
        } catch {
            #expect(error == TestError("typed"))  // `error` is a TestError, not `any Error`
        }
        // No `try`: a guarantee cannot fail.
        let guaranteed: Int?? = await awaited("a guarantee's value") { await later(3).value }
        #expect(guaranteed == 3)
        let failed = await awaited("a result") {
            await Promise<Int, TestError>(error: TestError("x")).result
        }
        #expect(failed == .failure(TestError("x")))
    }

    @Test func eachAwaitRunsTheWorkAgain() async {
        let runs = Counter()
        let promise = Promise<Int, Never> { $0.fulfill(runs.increment()) }
        #expect(await awaited("the first value") { await promise.value } == 1)
        #expect(await awaited("the second value") { await promise.value } == 2)
    }

    @Test func cancellingTheAwaitingTaskCancelsTheRunAndEndsTheAwait() async {
        let pending = Pending<Int>()
        let ensured = Counter()
        let promise = pending.promise.ensure { ensured.increment() }
        let task = Task { await promise.result }
        _ = await pending.resolvers.arrival()
        task.cancel()
        let outcome = await bounded { await task.value }
        #expect(outcome == .some(nil))  // the await ended, and its type says: cancelled
        #expect(pending.cancelled.value == 1)
        #expect(ensured.value == 1)
    }

    @Test func aTaskCancelledBeforeItAwaitsStartsNoWork() async {
        let started = Counter()
        let ensured = Counter()
        let promise = Promise<Int, TestError> { resolver in
            started.increment()
            resolver.fulfill(1)
        }.ensure { ensured.increment() }
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await promise.value
        }
        #expect(await bounded { try? await task.value } == .some(nil))
        #expect(started.value == 0)
        #expect(ensured.value == 1)
    }

    @Test func anAbandonedOperationEndsTheAwait() async {
        _ = reports  // listening from now on
        let line = #line + 1
        #expect(await bounded { await Promise<Int, TestError> { _ in }.result } == .some(nil))
        #expect(reports.reports(madeAt: line).count == 1)
    }

    @Test func anOperationThatCancelsItsRunEndsTheAwait() async {
        let ensured = Counter()
        let promise = Promise<Int, TestError>(value: 1)
            .then { _ in Promise<Int, TestError> { $0.cancel() } }
            .ensure { ensured.increment() }
        #expect(await bounded { await promise.result } == .some(nil))
        #expect(ensured.value == 1)
    }

    /// (Review 6.) A member's step that cancels the awaiting task stops the batch of
    /// `outcomes(of:)`, which returns.
    @Test func aMemberStepThatCancelsTheAwaitingTaskStopsTheBatch() async {
        let member = Guarantee(value: 1).map { value -> Int in
            withUnsafeCurrentTask { $0?.cancel() }
            return value
        }
        let task = Task.detached { await outcomes(of: [member, later(2)]) }
        let finished = await bounded { await task.value }
        #expect(finished != nil)
    }

    /// (Review 6.) A step that cancels the awaiting task stops the run before its next step.
    @Test func aStepThatCancelsTheAwaitingTaskStopsTheRun() async {
        let after = Counter()
        let promise = Guarantee(value: 1).map { value -> Int in
            withUnsafeCurrentTask { $0?.cancel() }
            return value
        }.map { value -> Int in
            after.increment()
            return value
        }
        let task = Task.detached { await promise.value }
        #expect(await bounded { await task.value } == .some(nil))
        #expect(after.value == 0)
    }
}

@Suite struct AsyncWork {
    @Test func eachRunStartsATaskThatResolvesTheRunOnce() async {
        let calls = Counter()
        let promise = Promise<Int, TestError> { () async throws(TestError) -> Int in
            let call = calls.increment()
            if call == 2 { throw TestError("second") }
            return call * 10
        }
        #expect(calls.value == 0)  // lazy
        #expect(await awaited("the first result") { await promise.result } == .success(10))
        #expect(
            await awaited("the second result") { await promise.result }
                == .failure(TestError("second")))
        let third = Delivery<Result<Int, TestError>>()
        promise.run { third.send($0) }
        #expect(await third.arrival() == .success(30))
    }

    @Test func cancellingTheRunCancelsTheTask() async {
        let started = Delivery<Void>()
        let sawCancellation = Delivery<Bool>()
        let handle = Promise<Int, Never> { () async -> Int in
            started.send(())
            try? await Task.sleep(for: .seconds(60))
            sawCancellation.send(Task.isCancelled)
            return 1
        }.run { _ in Issue.record("a cancelled run delivers nothing") }
        #expect(await started.arrival() != nil)
        handle.cancel()
        #expect(await sawCancellation.arrival() == true)
    }
}

@Suite struct Sharing {
    @Test func whatTheWorkCapturedMayRunTheSharedPromiseAsItGoes() {
        let shared = Delivery<Guarantee<Int>>()
        let late = Delivery<Int>()
        do {
            let farewell = Farewell { shared.all[0].run(some: { late.send($0) }) }
            let work = Guarantee<Int> { [farewell] resolver in
                _ = farewell
                DispatchQueue.global().async { resolver.fulfill(1) }
            }
            shared.send(work.share())
        }
        let first = Delivery<Int>()
        shared.all[0].run(some: { first.send($0) })
        #expect(first.wait() == 1)
        #expect(late.wait() == 1)  // the work, let go of once done, ran the shared promise
    }

    @Test func theRunsLeftWaitingGoOnInTheOrderTheyStartedAfterOthersLeft() {
        let (answer, reply) = Guarantee<Int>.pending()
        let order = Log()
        let handles = (0..<6).map { index in answer.run(some: { _ in order.record("\(index)") }) }
        for index in [4, 1, 2] { handles[index].cancel() }
        reply.fulfill(1)
        #expect(order.all == ["0", "3", "5"])
    }

    /// A run that waits through another shared promise, whose work waits for this one, goes on
    /// in its turn too: so a `share()` does not change which member of a race wins.
    @Test func aRunThatWaitsThroughAnotherSharedPromiseGoesOnInItsTurn() {
        let (answer, reply) = Guarantee<Int>.pending()
        let order = Log()
        let shared = answer.share().map { _ in "through a share" }
        race([shared, answer.map { _ in "direct" }]).run(some: { order.record($0) })
        answer.run(some: { _ in order.record("later") })
        reply.fulfill(1)
        #expect(order.all == ["through a share", "later"])
    }

    /// A shared promise that settles as a waiter of another goes on has its own waiters go on in
    /// the order they came too, a run's and a combination's member alike: so a `share()` stacked
    /// on another does not change which member of a race wins either.
    @Test func theWaitersOfASharedPromiseThatSettlesInsideAnotherGoOnInTheirTurn() {
        let (answer, reply) = Guarantee<Int>.pending()
        let middle = answer.map { _ in "direct" }.share()
        let order = Log()
        race([middle.map { _ in "through a step" }, middle]).run(some: { order.record($0) })
        reply.fulfill(1)
        #expect(order.all == ["through a step"])
    }

    /// The runs that wait through shared promises stacked on one another go on as nested calls
    /// would: each shared promise's waiting runs in the order they came, one that is the work of
    /// another shared promise with that one's waiting runs, before the next.
    @Test func runsWaitingThroughStackedSharedPromisesGoOnAsNestedCallsWould() {
        let (answer, reply) = Guarantee<Int>.pending()
        let middle = answer.share()
        let top = middle.share()
        let order = Log()
        top.run(some: { _ in order.record("top 1") })  // its work waits for middle's, for answer
        answer.run(some: { _ in order.record("answer") })
        middle.run(some: { _ in order.record("middle") })
        top.run(some: { _ in order.record("top 2") })
        reply.fulfill(1)
        #expect(order.all == ["top 1", "top 2", "middle", "answer"])
    }

    /// A step that settles a shared promise, by its work's resolver, has that promise's waiting
    /// runs go on before the resolver returns, as every resolver does, also when the step's run
    /// goes on as a waiter of another shared promise.
    @Test func aStepThatSettlesASharedPromiseGoesOnAfterItsWaitingRuns() {
        let (answer, reply) = Guarantee<Int>.pending()
        let work = Delivery<Resolver<Int, Never>>()
        let shared = Guarantee<Int> { work.send($0) }.share()
        let order = Log()
        shared.run(some: { _ in order.record("shared") })
        answer.map { _ in
            work.all[0].fulfill(2)
            order.record("step")
        }.run(some: { _ in })
        answer.run(some: { _ in order.record("later") })
        reply.fulfill(1)
        #expect(order.all == ["shared", "step", "later"])
    }

    @Test func theWorkRunsOnceForEveryRun() {
        let pending = Pending<Int>()
        let shared = pending.promise.share()
        let results = Delivery<Result<Int, TestError>>()
        #expect(pending.resolvers.all.isEmpty)  // still lazy
        let order = Log()
        for index in 0..<3 {
            shared.run {
                order.record("\(index)")
                results.send($0)
            }
        }
        #expect(pending.resolvers.all.count == 1)
        pending.resolvers.wait()?.fulfill(7)
        #expect(results.all == Array(repeating: .success(7), count: 3))
        #expect(order.all == ["0", "1", "2"])  // waiting runs go on in the order they started
        shared.run { results.send($0) }  // later: at once, without running the work again
        #expect(results.all.count == 4)
        #expect(pending.resolvers.all.count == 1)
    }

    @Test func aFailureIsKeptToo() {
        let runs = Counter()
        let shared = Promise<Int, TestError> { resolver in
            runs.increment()
            resolver.reject(TestError("once"))
        }.share()
        #expect(outcome(of: shared) == .failure(TestError("once")))
        #expect(outcome(of: shared) == .failure(TestError("once")))
        #expect(runs.value == 1)
    }

    @Test func cancellingOneRunLeavesTheOthersWaiting() {
        let pending = Pending<Int>()
        let shared = pending.promise.share()
        let kept = Delivery<Result<Int, TestError>>()
        let first = shared.run { _ in Issue.record("cancelled") }
        shared.run { kept.send($0) }
        first.cancel()
        #expect(pending.cancelled.value == 0)
        pending.resolvers.wait()?.fulfill(1)
        #expect(kept.all == [.success(1)])
    }

    @Test func whenEveryRunIsCancelledTheWorkIsCancelledAndStartsAgainNextTime() {
        let pending = Pending<Int>()
        let shared = pending.promise.share()
        let handles = (0..<3).map { _ in shared.run { _ in Issue.record("cancelled") } }
        for handle in handles { handle.cancel() }
        #expect(pending.cancelled.value == 1)
        let result = Delivery<Result<Int, TestError>>()
        shared.run { result.send($0) }
        #expect(pending.resolvers.all.count == 2)
        pending.resolvers.all.last?.fulfill(2)
        #expect(result.all == [.success(2)])
    }

    /// PromiseKit's cached in-flight promise: a caller that leaves does not stop it for the next.
    @Test func workThatDoesNotCancelWhenAbandonedGoesOnForTheNextRun() {
        let pending = Pending<Int>()
        let shared = pending.promise.share(cancelsWhenAbandoned: false)
        let handles = (0..<3).map { _ in shared.run { _ in Issue.record("cancelled") } }
        for handle in handles { handle.cancel() }
        #expect(pending.cancelled.value == 0)
        let results = Delivery<Result<Int, TestError>>()
        shared.run { results.send($0) }  // joins the work under way
        #expect(pending.resolvers.all.count == 1)
        pending.resolvers.all.first?.fulfill(3)
        #expect(results.all == [.success(3)])
        shared.run { results.send($0) }  // later: its outcome, at once
        #expect(results.all == [.success(3), .success(3)])
        #expect(pending.resolvers.all.count == 1)
    }

    @Test func fiveCallersOfACachedRefreshMakeOneRequest() {
        let requests = Counter()
        let request = Delivery<Resolver<String, TestError>>()  // the network, answered below
        let refresh = Promise<String, TestError> { resolver in
            requests.increment()
            request.send(resolver)
        }.share(cancelsWhenAbandoned: false)
        let tokens = Delivery<String>()
        let callers = (0..<5).map { _ in refresh.run(some: { tokens.send($0) }, none: { _ in }) }
        callers[0].cancel()  // the first caller gives up; the others still get the token
        // The answer comes once the first caller gave up, as a slow network's does: a timer could
        // fire first on a loaded machine, and then every caller would have had the token.
        DispatchQueue.global().async { request.wait()?.fulfill("token") }
        for _ in 1..<5 { #expect(tokens.wait() != nil) }
        #expect(eventually { tokens.all.count == 4 })
        #expect(requests.value == 1)
    }

    @Test func aPendingPromiseIsSettledFromOutside() {
        let (promise, resolver) = Promise<Int, TestError>.pending()
        let results = Delivery<Result<Int, TestError>>()
        promise.run { results.send($0) }
        promise.run { results.send($0) }
        #expect(results.all.isEmpty)
        resolver.fulfill(5)
        resolver.fulfill(6)  // the first outcome counts
        promise.run { results.send($0) }
        #expect(results.all == Array(repeating: .success(5), count: 3))
    }

    @Test func aPendingPromiseWhoseResolverIsDroppedEndsItsRunsByCancellation() {
        let ensured = Counter()
        do {
            _ = reports  // listening from now on
            var pair: (promise: Promise<Int, TestError>, resolver: Resolver<Int, TestError>)? =
                Promise<Int, TestError>.pending(line: 1_000_001)
            let promise = pair!.promise.ensure { ensured.increment() }
            let handle = promise.run { _ in Issue.record("nothing can settle it") }
            pair = nil
            #expect(handle.isCancelled)
            #expect(promise.run { _ in }.isCancelled)  // and so is every later run
        }
        #expect(ensured.value == 2)
        #expect(reports.reports(madeAt: 1_000_001).count == 1)
    }
}

/// A cache of a shared promise, for the tests of runs that the cache alone keeps it for.
private final class Cached: @unchecked Sendable {
    private let lock = TestLock()
    private var kept: Promise<Int, TestError>?  // guarded by lock

    var promise: Promise<Int, TestError>? {
        get { lock.withLock { kept } }
        set { lock.withLock { kept = newValue } }
    }
}

/// A run waits for the shared work though nothing else keeps the shared promise: the run keeps
/// what it waits for, as it keeps its steps, until it ends.
extension Sharing {
    /// Starts a run of what `make` makes of some work, then settles the work with 42 and returns
    /// the run's outcome; `nil` if the run ended by cancellation instead.
    private static func settled(
        _ make: (Promise<Int, TestError>) -> Promise<Int, TestError>
    ) throws -> Result<Int, TestError>? {
        let pending = Pending<Int>()
        let outcome = Delivery<Result<Int, TestError>>()
        let handle = make(pending.promise).run { outcome.send($0) }
        let resolver = try #require(pending.resolvers.wait())
        try #require(!handle.isCancelled)
        resolver.fulfill(42)
        #expect(eventually { handle.isCancelled || !outcome.all.isEmpty })
        try #require(!handle.isCancelled)
        #expect(pending.cancelled.value == 0)
        return outcome.wait()
    }

    /// `work`, with a step that keeps an object that sends to `gone` as it goes.
    private static func keeping(
        _ gone: Delivery<Void>, _ work: Promise<Int, TestError>
    ) -> Promise<Int, TestError> {
        let farewell = Farewell { gone.send(()) }
        return work.map { value in
            _ = farewell
            return value
        }
    }

    @Test func aSharedPromiseRunAtOnceAndNotKeptDeliversItsOutcome() throws {
        #expect(try Self.settled { $0.share() } == .success(42))
        #expect(try Self.settled { $0.share().map { $0 } } == .success(42))
    }

    @Test func aStepThatReturnsASharedPromiseGoesOnWithItsOutcome() throws {
        #expect(try Self.settled { work in .value(1).then { _ in work.share() } } == .success(42))
        #expect(try Self.settled { work in firstly { work.share() } } == .success(42))
    }

    @Test(arguments: [true, false])
    func aCachedSharedPromiseDeliversItsOutcome(clearedByTheWork clears: Bool) throws {
        let cache = Cached()
        let made = try Self.settled { work in
            cache.promise = work.ensure { if clears { cache.promise = nil } }.share()
            return firstly { cache.promise! }
        }
        #expect(made == .success(42))
        #expect((cache.promise == nil) == clears)
    }

    @Test func aSharedPromiseNotKeptIsLetGoOfOnceItsRunEnds() throws {
        let gone = Delivery<Void>()
        #expect(try Self.settled { Self.keeping(gone, $0).share() } == .success(42))
        #expect(gone.wait() != nil)
    }

    @Test(arguments: [true, false])
    func theOnlyRunOfASharedPromiseNotKeptLeaves(cancelsWhenAbandoned: Bool) {
        let gone = Delivery<Void>()
        let pending = Pending<Int>()
        let handle = Self.keeping(gone, pending.promise)
            .share(cancelsWhenAbandoned: cancelsWhenAbandoned)
            .run { _ in Issue.record("cancelled") }
        let resolver = pending.resolvers.wait()
        handle.cancel()
        #expect(pending.cancelled.value == (cancelsWhenAbandoned ? 1 : 0))
        resolver?.fulfill(1)  // work that goes on ends unobserved
        #expect(gone.wait() != nil)  // and nothing keeps it once it has ended
    }
}

/// Stress tests: CI runs this suite again under ThreadSanitizer.
@Suite struct SharingConcurrency {
    @Test func aThousandRunsJoinOneWorkFromManyThreads() {
        let pending = Pending<Int>()
        let shared = pending.promise.share()
        let results = Delivery<Result<Int, TestError>>()
        let kept = Counter()
        shared.run { results.send($0) }  // one run that stays, so the work is never abandoned
        DispatchQueue.concurrentPerform(iterations: 1_000) { index in
            let handle = shared.run { results.send($0) }
            if index.isMultiple(of: 3) { handle.cancel() } else { kept.increment() }
        }
        pending.resolvers.wait()?.fulfill(42)
        #expect(eventually { results.all.count == kept.value + 1 })
        #expect(results.all.allSatisfy { $0 == .success(42) })
        #expect(pending.resolvers.all.count == 1)
        #expect(pending.cancelled.value == 0)
    }

    @Test func joiningAndCancellingRaceWithTheOutcome() {
        for _ in 0..<200 {
            let pending = Pending<Int>()
            let shared = pending.promise.share()
            let delivered = Counter()
            let first = shared.run { _ in delivered.increment() }
            DispatchQueue.concurrentPerform(iterations: 4) { index in
                switch index {
                case 0: pending.resolvers.wait()?.fulfill(1)
                case 1: first.cancel()
                default: shared.run { _ in delivered.increment() }
                }
            }
            // If `first` left while it was alone, the work was cancelled and the joiners began it
            // anew: settle that run of it too.
            for resolver in pending.resolvers.all { resolver.fulfill(2) }
            #expect(eventually { delivered.value == (first.isCancelled ? 2 : 3) })
        }
    }
}

@Suite struct Typing {
    func cached(_ value: Int) -> Guarantee<String> { later("\(value)") }

    @Test func aGuaranteeStepJoinsAChainThatCanFail() {
        let chain: Promise<String, TestError> = Promise<Int, TestError>(value: 4).then {
            cached($0)
        }
        #expect(outcome(of: chain) == .success("4"))
        let guaranteed: Guarantee<String> = Guarantee(value: 5).then { cached($0) }
        #expect(outcome(of: guaranteed) == .success("5"))
    }

    @Test func aPromiseMadeInAStepNamesItsErrorType() {
        let chain = Promise<Int, TestError>(value: 1)
            .then { Promise<Int, TestError>(value: $0 * 10) }
        #expect(type(of: chain) == Promise<Int, TestError>.self)
        #expect(outcome(of: chain) == .success(10))
    }

    @Test func aStepOfAnyErrorTypeJoinsAChainThatFailsWithAnyError() throws {
        let chain = Promise<Int, any Error>(value: 1)
            .then { _ -> Result<Int, PromiseError> in .failure(.missingValue) }
        #expect(throws: PromiseError.missingValue) { try outcome(of: chain)?.get() }
        let other = Promise<Int, any Error>(value: 1)
            .then { Promise<Int, PromiseError>(value: $0 + 1) }
        #expect(type(of: other) == Promise<Int, any Error>.self)
        #expect(try outcome(of: other)?.get() == 2)
    }
}

@Suite struct Lifetimes {
    @Test func aHandlerThatTakesItsResolverDoesNotKeepTheRunAlive() {
        let ensured = Counter()
        let witness = WeakReference<Memory.Witness>()
        do {
            _ = reports  // listening from now on
            let captured = Memory.Witness()
            witness.value = captured
            let handle = Promise<Int, Never>(line: 1_000_002) { resolver in
                // The handler gets the resolver it needs, so it does not capture (and keep) it.
                resolver.onCancel { resolver in resolver.fulfill(0) }
            }.map { _ in captured }.ensure { ensured.increment() }.run()
            #expect(handle.isCancelled)  // ended as an abandoned operation does
        }
        #expect(ensured.value == 1)
        #expect(witness.value == nil)
        #expect(reports.reports(madeAt: 1_000_002).count == 1)
    }

    @Test func aReportNamesWhereThePromiseWasMade() {
        _ = reports  // listening from now on
        let line = #line + 1
        Promise<Int, TestError> { _ in }.run { _ in }
        #expect(
            reports.reports(madeAt: line) == [
                "an operation of Promise<Int, TestError> made at FutureTests/SwiftConcurrencyTests.swift:"
                    + "\(line) released its resolver without resolving it. Its run can never finish, "
                    + "so it was cancelled."
            ])
    }
}
