import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A step tied to a token (`tiedTo:`) must not change what the chain before it does when its run
/// is cancelled. `onMain(tiedTo:)` (Engine/MainActor.swift) builds `tie.flatMap { add(self...) }`:
/// the chain before the tied step is entered by a `flatMap` step only once the tie's operation
/// has run, so a run cancelled before its start (an await in a task already cancelled, a
/// combination's member cancelled between its claim and its start) skips only the tie and the
/// `flatMap` step: the `ensure` steps and the `ignoringCancel()` work before the tied step are
/// never reached.
@Suite struct InvalidationTokensAndTheChainBeforeATiedStep {
    /// `Promise.result`: "The run ends by cancellation if the task was cancelled (after its
    /// `onCancel` handlers and `ensure` steps)"; `RunHandle`: "the `ensure` steps still ahead
    /// run". Without a token the `ensure` step runs; with one, it does not.
    @Test(arguments: [false, true])
    func anEnsureBeforeATiedStepRunsWhenTheAwaitingTaskWasCancelled(tied: Bool) async {
        let token = InvalidationToken()
        let ensured = Counter()
        let before = Guarantee(value: 1).ensure { ensured.increment() }
        let promise =
            tied
            ? before.done(on: .main, tiedTo: token) { _ in }
            : before.done(on: .main) { _ in }
        let awaited = await bounded {
            await Task {
                withUnsafeCurrentTask { $0?.cancel() }  // cancelled before the run starts
                return await promise.value == nil
            }.value
        }
        #expect(awaited == true, "the await did not end, or its run was not cancelled")
        // The await returned: the run has ended, after its ensure steps.
        #expect(ensured.value == 1, "the ensure step before the tied step did not run")
        withExtendedLifetime(token) {}
    }

    /// `ignoringCancel()`: "A run that reaches it starts the work even if the run was cancelled
    /// meanwhile, or before it started". Without a token the work starts; with one, never.
    @Test(arguments: [false, true])
    func ignoredWorkBeforeATiedStepStartsWhenTheAwaitingTaskWasCancelled(tied: Bool) async {
        let token = InvalidationToken()
        let started = Delivery<Void>()
        let before = Guarantee<Int> { resolver in
            started.send(())
            resolver.fulfill(1)
        }.ignoringCancel()
        let promise =
            tied
            ? before.map(on: .main, tiedTo: token) { $0 }
            : before.map(on: .main) { $0 }
        let awaited = await bounded {
            await Task {
                withUnsafeCurrentTask { $0?.cancel() }
                return await promise.value == nil
            }.value
        }
        #expect(awaited == true, "the await did not end, or its run was not cancelled")
        // The work starts as the cancelled run skips it, before the run's end: already here.
        #expect(started.all.count == 1, "the ignoringCancel() work before the step never started")
        withExtendedLifetime(token) {}
    }

    /// `when(fulfilled:concurrently:)`: "The members it has not started yet that begin with
    /// `ignoringCancel()` start as it ends". A member that begins with `ignoringCancel()` and
    /// ends with a tied step never starts once the first member failed.
    @Test(arguments: [false, true])
    func aMemberBeginningWithIgnoringCancelStartsAfterAFailureEvenIfItEndsTied(tied: Bool) async {
        let token = InvalidationToken()
        let started = Delivery<Void>()
        let work = Promise<Int, TestError> { resolver in
            started.send(())
            resolver.fulfill(2)
        }.ignoringCancel()
        let second =
            tied
            ? work.map(on: .main, tiedTo: token) { $0 }
            : work.map(on: .main) { $0 }
        let failed = Delivery<Result<[Int], TestError>>()
        when(fulfilled: [Promise(error: TestError("first")), second], concurrently: 1)
            .run { failed.send($0) }
        #expect(await failed.arrival() == .failure(TestError("first")))
        // The members that ignore cancel start as the combination closes, before it settles.
        #expect(started.all.count == 1, "the member's ignoringCancel() work never started")
        withExtendedLifetime(token) {}
    }
}

/// `ensure(on:)`: "After `body`, the chain goes back to the queue it was on, if a hop took it
/// there (with ``on(_:)``, or a step on the main actor), else on to a global queue". A chain a
/// `then` step returns after `on(work)` goes back to `work`; the same chain as the member of a
/// `thenMap` step (a run of its own, which begins in the block its starter's thread is in, as far
/// as hops tell: `Nesting.queueHere`, Engine/Nesting.swift) goes back to `work` too. Members of
/// `when`, `race` and `timeout`'s work run in runs of their own the same way.
@Suite struct EnsureOnInAMember {
    @Test(arguments: [false, true])
    func aMembersEnsureOnGoesBackToTheQueueItsChainWasOn(asMember: Bool) {
        let key = DispatchSpecificKey<String>()
        let work = DispatchQueue(label: "work")
        work.setSpecific(key: key, value: "work")
        let cleanup = DispatchQueue(label: "cleanup")
        cleanup.setSpecific(key: key, value: "cleanup")
        let places = Log()
        @Sendable func record() { places.record(DispatchQueue.getSpecific(key: key) ?? "none") }
        @Sendable func item(_ value: Int) -> Guarantee<Int> {
            Guarantee(value: value)
                .map { value -> Int in
                    record()
                    return value
                }
                .ensure(on: cleanup) { record() }
                .map { value -> Int in
                    record()
                    return value
                }
        }
        let start = Guarantee(value: [1]).on(work)
        let promise = asMember ? start.thenMap(item) : start.then { item($0[0]) }.map { [$0] }
        #expect(value(of: promise) == [1])
        #expect(places.all == ["work", "cleanup", "work"])
    }
}
