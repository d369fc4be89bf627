import Dispatch
import Testing

@testable import Future

/// Review 6 (async/await bridging, main-actor steps, tokens and bags): cases a review of them
/// found against their documentation.
@Suite("Tokens and awaiting (review 6)") @MainActor struct TokensAndAwaitingReview {
    /// `InvalidationToken`: "Each run ties it as the run starts ..., and keeps that tie through
    /// every retry, combination or shared run inside it: a run started before an `invalidate()`
    /// skips it". A member of a combination with a limit starts only as an earlier member ends;
    /// if no earlier member tied, the member's tie is taken then, after the `invalidate()`.
    @Test func aMemberStartedAfterTheInvalidateInARunStartedBeforeItSkipsItsTiedStep() async {
        let screen = Screen()
        let token = InvalidationToken()
        let (first, answer) = Guarantee<Int>.pending()
        let tiedLater = Guarantee(value: 2).done(on: .main, tiedTo: token) {
            screen.items.append($0)
        }
        let ended = Delivery<Void>()
        when(fulfilled: [first.asVoid(), tiedLater], concurrently: 1)
            .run(some: { _ in ended.send(()) })
        token.invalidate()  // the run started before this, its second member not yet
        answer.fulfill(1)
        #expect(await ended.arrival() != nil)
        #expect(screen.items.isEmpty, "a tied step of a run started before the invalidate ran")
    }

    /// `RunBag.cancelAll()`: "Cancels every run in the bag and empties it." While another
    /// thread's `cancelAll()` (or `invalidate()`) is in the cancel of an earlier run of the bag,
    /// a second `cancelAll()` finds the bag empty and returns before the later runs are cancelled:
    /// such a run still delivers its outcome after it returned.
    @Test nonisolated func aCancelAllThatReturnsHasCancelledEveryRunOfTheBag() {
        let bag = RunBag()
        let inHandler = DispatchSemaphore(value: 0)
        let leave = DispatchSemaphore(value: 0)
        let kept = Delivery<Resolver<Int, Never>>()  // unresolved, not let go of
        Guarantee<Int> { resolver in
            resolver.onCancel { _ in
                inHandler.signal()
                leave.wait()
            }
            kept.send(resolver)
        }.run(some: { _ in }).store(in: bag)
        let (second, answer) = Guarantee<Int>.pending()
        let delivered = Delivery<Int>()
        let later = second.run(some: delivered.send).store(in: bag)
        let firstDone = DispatchSemaphore(value: 0)
        detachThread {
            bag.cancelAll()  // in the first run's cancel handler until `leave`
            firstDone.signal()
        }
        #expect(inHandler.wait(timeout: .now() + timeout) == .success)
        bag.cancelAll()
        let cancelledOnReturn = later.isCancelled
        answer.fulfill(2)
        leave.signal()
        #expect(firstDone.wait(timeout: .now() + timeout) == .success)
        #expect(cancelledOnReturn, "a run of the bag was not cancelled as cancelAll() returned")
        #expect(delivered.all.isEmpty, "a run of the bag delivered after cancelAll() returned")
    }

    /// Not a fault found: a member's step that cancels the awaiting task stops the batch of
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

    /// Not a fault found: a step that cancels the awaiting task stops the run before its next step.
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
