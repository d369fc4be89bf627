import Dispatch
import Testing

@testable import Future

/// Documented behaviour of tokens, bags and the async/await bridges that no other test pinned.
@Suite struct TokensAndBagsAsDocumented {
    /// `InvalidationToken`: "A tied callback does not run once the token was invalidated after
    /// the callback was tied". A tied step that invalidates its own token silences the tied steps
    /// after it in the same run.
    @Test @MainActor func aTiedStepThatInvalidatesItsTokenSilencesTheTiedStepsAfterIt() async {
        let token = InvalidationToken()
        let seen = Log()
        let ended: Void? =
            await awaited("the chain") { @MainActor in
                await later(1)
                    .done(on: .main, tiedTo: token) { _ in
                        seen.record("first")
                        token.invalidate()
                    }
                    .map { 2 }
                    .done(on: .main, tiedTo: token) { _ in seen.record("second") }
                    .value
            } ?? nil
        #expect(ended != nil, "a skipped done lets the chain go on")
        #expect(seen.all == ["first"])
    }

    /// `RunHandle.isCancelled`: "a step tied to a token invalidated before it (with no value to
    /// go on with), or a member that ended its combination by cancellation". A tied `map` of a
    /// `when` member cancels the member, which cancels the run: no completion, its `ensure` runs.
    @Test @MainActor func aTiedMapOfAWhenMemberInvalidatedCancelsTheRun() async {
        let token = InvalidationToken()
        let (gate, open) = Guarantee<Int>.pending()
        let ended = Delivery<String>()
        let handle = when(fulfilled: [gate.map(on: .main, tiedTo: token) { $0 }, later(2)])
            .ensure { ended.send("ensure") }
            .run { _ in ended.send("completion") }
        token.invalidate()
        open.fulfill(1)
        #expect(await ended.arrival() == "ensure")
        #expect(handle.isCancelled)
        #expect(ended.all == ["ensure"])
    }

    /// `race(_:)`: a member whose run ends by cancellation of its own drops out. A tied `map`
    /// invalidated is such a member: the other member wins.
    @Test @MainActor func aTiedMapOfARaceMemberInvalidatedDropsOut() async {
        let token = InvalidationToken()
        let (gate, open) = Guarantee<Int>.pending()
        let (slow, answer) = Guarantee<Int>.pending()
        let ended = Delivery<Result<Int, Never>>()
        race([gate.map(on: .main, tiedTo: token) { $0 }, slow]).run { ended.send($0) }
        token.invalidate()
        open.fulfill(1)
        _ = await awaited("a hop to main") { @MainActor in  // after the tied step's hop
            await Guarantee(value: ()).on(.main).value
        }
        answer.fulfill(2)
        #expect(await ended.arrival() == .success(2))
    }

    /// `outcomes(of:concurrently:)`: "if the task is cancelled, stops them and returns what
    /// finished ... the others never start". In a task cancelled before the call, no member
    /// starts, and each outcome is `nil`.
    @Test func outcomesInATaskCancelledBeforeTheCallStartsNoMember() async {
        let started = Counter()
        let member = Guarantee<Int> { resolver in
            started.increment()
            resolver.fulfill(1)
        }
        let finished = await bounded {
            await Task {
                withUnsafeCurrentTask { $0?.cancel() }
                return await outcomes(of: [member, member], concurrently: 1)
            }.value
        }
        #expect(finished?.count == 2)
        #expect(finished?.allSatisfy { $0 == nil } == true)
        #expect(started.value == 0)
    }

    /// `outcomes(of:concurrently:)` lets go of its stop signal's resolver unused when the batch
    /// ends on its own: no debug report of a resolver released unresolved ("Debug builds report
    /// such a resolver if a run is waiting for it as it goes").
    @Test func outcomesThatEndOnTheirOwnReportNoDroppedStopSignal() async {
        _ = reports  // listening from now on
        for _ in 0..<20 {
            guard await awaited("a batch", { await outcomes(of: [later(1), later(2)]) }) != nil
            else { break }
        }
        #expect(!reports.all.contains { $0.contains("Future/Concurrency.swift") })
    }

    /// `Promise.init(file:line:_:)` of async work: "Cancelling the run cancels that task". A task
    /// that ignores its cancellation does not hold the run: it ends at once, its `ensure` steps
    /// run, nothing is delivered.
    @Test func aRunOfAsyncWorkThatIgnoresCancellationEndsAtOnce() async {
        let (gate, open) = Guarantee<Void>.pending()
        let started = Delivery<Void>()
        let ended = Delivery<Void>()
        let handle = Promise<Int, Never> { () async -> Int in
            started.send(())
            _ = await gate.value  // a run of its own, which the task's cancel does not reach
            return 1
        }.ensure { ended.send(()) }.run { _ in Issue.record("a cancelled run delivered") }
        #expect(await started.arrival() != nil)
        handle.cancel()
        #expect(await ended.arrival() != nil)
        #expect(handle.isCancelled)
        open.fulfill(())
    }

    /// `MainActorContext`: the closure of a main-actor step is called as the main actor's. The
    /// runtime agrees: `MainActor.assertIsolated()` holds in it.
    @Test func theClosureOfAMainActorStepIsTheMainActorsForTheRuntime() async {
        let checked = await awaited("the chain") {
            await later(1).map(on: .main) { _ in
                MainActor.assertIsolated()
                return true
            }.value
        }
        #expect(checked == true)
    }

    /// `RunBag.cancelAll()`: "it returns once every run the bag held as it was called is
    /// cancelled". Called inside a cancel handler of another run, where a nested cancel is
    /// deferred (`RunHandle`), the bag's run is cancelled as it returns all the same.
    @Test func cancelAllInsideACancelHandlerReturnsWithTheBagsRunsCancelled() async {
        let bag = RunBag()
        let (waiting, answer) = Guarantee<Int>.pending()
        let other = waiting.run().store(in: bag)
        let seen = Delivery<Bool>()
        let kept = Delivery<Resolver<Int, Never>>()
        let handle = Guarantee<Int> { resolver in
            resolver.onCancel { _ in
                bag.cancelAll()
                seen.send(other.isCancelled)
            }
            kept.send(resolver)
        }.run()
        handle.cancel()
        #expect(await seen.arrival() == true)
        answer.fulfill(0)
    }
}

/// An owner, such as a screen model, that keeps its runs in a bag of its own, and whose runs
/// capture it: the usual `self` in a closure.
private final class Owner: @unchecked Sendable {
    let bag: RunBag
    let gone: Delivery<Void>
    init(bag: RunBag, gone: Delivery<Void>) {
        self.bag = bag
        self.gone = gone
    }
    deinit { gone.send(()) }
}

/// `RunBag`: "its runs are cancelled when it goes away". A bag whose owner its own runs keep goes
/// away as the run lets go of its closures: the bag's cancel of that very run, from inside the
/// run's end, neither deadlocks nor traps.
@Suite struct BagsLetGoOfByTheirOwnRuns {
    @Test func aRunThatEndsLetsItsBagsOwnerGo() async {
        let gone = Delivery<Void>()
        let (waiting, answer) = Guarantee<Int>.pending()
        do {
            let owner = Owner(bag: RunBag(), gone: gone)
            waiting.run(some: { _ in _ = owner }).store(in: owner.bag)
        }
        let finished = Delivery<Void>()
        detachThread {
            answer.fulfill(1)
            finished.send(())
        }
        #expect(await finished.arrival() != nil, "the fulfil did not return")
        #expect(await gone.arrival() != nil)
    }

    @Test func aRunCancelledByItsHandleLetsItsBagsOwnerGo() async {
        let gone = Delivery<Void>()
        let (waiting, answer) = Guarantee<Int>.pending()
        let handle: RunHandle
        do {
            let owner = Owner(bag: RunBag(), gone: gone)
            handle = waiting.map {
                _ = owner
                return $0
            }.ensure { _ = owner }
                .run(some: { _ in _ = owner }).store(in: owner.bag)
        }
        let finished = Delivery<Void>()
        detachThread {
            handle.cancel()
            finished.send(())
        }
        #expect(await finished.arrival() != nil, "the cancel did not return")
        #expect(await gone.arrival() != nil)
        answer.fulfill(0)
    }

    @Test func aRunWhoseCancelHandlerKeepsTheOwnerLetsItGoAsItResolves() async {
        let gone = Delivery<Void>()
        let resolvers = Delivery<Resolver<Int, Never>>()
        do {
            let owner = Owner(bag: RunBag(), gone: gone)
            Guarantee<Int> { resolver in
                resolver.onCancel { _ in _ = owner }
                resolvers.send(resolver)
            }.run().store(in: owner.bag)
        }
        guard let resolver = await resolvers.arrival() else { return }
        let finished = Delivery<Void>()
        detachThread {
            resolver.fulfill(1)
            finished.send(())
        }
        #expect(await finished.arrival() != nil, "the fulfil did not return")
        #expect(await gone.arrival() != nil)
    }

    @Test func anInvalidateThatCancelsTheRunKeepingItsTokensOwnerLetsItGo() async {
        let gone = Delivery<Void>()
        let (waiting, answer) = Guarantee<Int>.pending()
        let token = InvalidationToken()
        do {
            let owner = Owner(bag: token, gone: gone)
            waiting.map {
                _ = owner
                return $0
            }.run().store(in: token)
        }
        let finished = Delivery<Void>()
        detachThread {
            token.invalidate()
            finished.send(())
        }
        #expect(await finished.arrival() != nil, "the invalidate did not return")
        #expect(await gone.arrival() != nil)
        answer.fulfill(0)
    }
}
