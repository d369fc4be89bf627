import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A resolver kept for a test to call, or let go of, later.
private final class KeptResolver<Value, Failure: Error>: @unchecked Sendable {
    private let lock = TestLock()
    private var kept: Resolver<Value, Failure>?
    let arrived = Delivery<Void>()
    func keep(_ resolver: Resolver<Value, Failure>) {
        lock.withLock { kept = resolver }
        arrived.send(())
    }
    var resolver: Resolver<Value, Failure>? { lock.withLock { kept } }
}

/// A serial queue held by a block until `open()`, so that what is queued on it waits: an
/// `ensure(on:)` body queued there cannot run before the test lets it.
private final class HeldQueue: Sendable {
    let queue: DispatchQueue
    private let gate = DispatchSemaphore(value: 0)

    init(_ queues: NamedQueues, _ name: String) {
        queue = queues.make(name)
        queue.async { [gate] in _ = gate.wait(timeout: .now() + timeout) }
    }

    func open() { gate.signal() }
}

/// Review 9 (hops and queues). The docs of the parts that cancel a piece of a run and go on after
/// it promise that the piece's `ensure` steps have run before the steps after it: a combination's
/// members it cancelled (CombiningPromises.md, "Letting the others finish": "their cancel handlers
/// and `ensure` steps have run before the steps after it"; "the members it cancelled have had
/// their `onCancel` handlers and `ensure` steps run before the batch settles"), a `timeout`'s work
/// (`timeout(_:orFailWith:)`: "the work's `ensure` steps run; the promise then fails";
/// Cancellation.md: "the promise fails once they have, with the work's `ensure` steps done"), an
/// awaiting task's run (README, "Cancellation maps both ways": "pending `ensure` steps run, then
/// the await returns `nil`"). An `ensure(on:)` is an `ensure` step ("Runs `body` on `queue` when
/// the chain gets here, as ``ensure(_:)`` does"), but "A run cancelled before `body` has run
/// queues it on `queue` ...; the run's end does not wait for it": so the steps after the
/// combination or the timeout, and the code after the await, go on before the cleanup has run.
/// (Only `outcomes(of:concurrently:)` and Concurrency.md name the exception.) `RunHandle` and
/// Cancellation.md say more of a run cancelled while a combination's members are in a step: "it
/// ends once they have stopped, so that nothing of them runs after its `ensure` steps". One of the
/// two
/// must give: the docs of the combinators, of `timeout` and the README, as `ensure(on:)`'s
/// behaviour is deliberate.
@Suite struct EnsureOnBodiesOfCancelledParts {
    /// A race's loser waits in its operation, an `ensure(on:)` ahead of it; the winner settles at
    /// once, and the race cancels the loser. The docs: the loser's cleanup, then the step after the
    /// race. It does: the step after the race, while the cleanup waits on its queue.
    @Test func aRaceGoesOnOnceTheEnsureOnBodyOfALoserItCancelledHasRun() {
        let queues = NamedQueues()
        let cleanup = HeldQueue(queues, "cleanup")
        let events = Log()
        let kept = KeptResolver<Int, TestError>()
        let loser = Promise<Int, TestError> { kept.keep($0) }  // never resolved
            .ensure(on: cleanup.queue) { events.record("the loser's cleanup") }
        let finished = Delivery<Result<Int, TestError>>()
        race([loser, Promise<Int, TestError>(value: 2)])
            .map { value -> Int in
                events.record("the step after the race")
                return value
            }
            .run { finished.send($0) }
        #expect(finished.wait() == .success(2))
        #expect(kept.resolver?.isCancelled == true)  // the race cancelled it
        cleanup.open()
        #expect(eventually { events.all.count == 2 })
        #expect(events.all == ["the loser's cleanup", "the step after the race"])
    }

    /// A timeout whose alarm rings as its work waits in its operation, an `ensure(on:)` ahead of
    /// it. The docs: the work's cleanup, then the failure. It does: the timeout fails, and the step
    /// after it runs, before the work's cleanup.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test func aTimeoutFailsOnceTheEnsureOnBodyOfTheWorkItCancelledHasRun() {
        let queues = NamedQueues()
        let cleanup = HeldQueue(queues, "cleanup")
        let events = Log()
        let clock = ManualClock()
        let kept = KeptResolver<Int, TestError>()
        let work = Promise<Int, TestError> { kept.keep($0) }
            .ensure(on: cleanup.queue) { events.record("the work's cleanup") }
        let finished = Delivery<Result<Int, TestError>>()
        work.timeout(.seconds(1), orFailWith: TestError("slow"), clock: clock)
            .mapError { error -> TestError in
                events.record("the step after the timeout")
                return error
            }
            .run { finished.send($0) }
        #expect(kept.arrived.wait() != nil)
        #expect(eventually { clock.timerCount == 1 })
        clock.advance(by: .seconds(1))
        #expect(finished.wait() == .failure(TestError("slow")))
        cleanup.open()
        #expect(eventually { events.all.count == 2 })
        #expect(events.all == ["the work's cleanup", "the step after the timeout"])
    }

    /// An awaiting task, cancelled as its run waits in its operation, an `ensure(on:)` ahead. The
    /// README: the cleanup, then the await returns `nil`. It does: the await returns before the
    /// cleanup has run.
    @Test func anAwaitOfACancelledTaskReturnsOnceTheEnsureOnBodyHasRun() async {
        let queues = NamedQueues()
        let cleanup = HeldQueue(queues, "cleanup")
        let events = Log()
        let kept = KeptResolver<Int, TestError>()
        let promise = Promise<Int, TestError> { kept.keep($0) }
            .ensure(on: cleanup.queue) { events.record("the cleanup") }
        let task = Task { () -> Result<Int, TestError>? in
            let result = await promise.result
            events.record("the await returned")
            return result
        }
        #expect(await kept.arrived.arrival() != nil)
        task.cancel()
        #expect(await task.value == nil)
        cleanup.open()
        for _ in 0..<(timeoutSeconds * 1000) where events.all.count < 2 {
            try? await Task.sleep(nanoseconds: 1_000_000)
        }
        #expect(events.all == ["the cleanup", "the await returned"])
    }

    /// A run cancelled while its combination's member is in a step, an `ensure(on:)` right after
    /// it: the member stops as the step returns. The docs: the member's cleanup, then the run's
    /// `ensure`. It does: the run ends, its `ensure` step run, and the member's cleanup after.
    @Test func aRunCancelledAsAMemberIsInAStepEndsAfterTheMembersEnsureOnBody() {
        let queues = NamedQueues()
        let work = queues.make("work")
        let cleanup = HeldQueue(queues, "cleanup")
        let events = Log()
        let inStep = Delivery<Void>()
        let stepReturns = DispatchSemaphore(value: 0)
        let member = Guarantee(value: 1)
            .map { value -> Int in
                inStep.send(())
                _ = stepReturns.wait(timeout: .now() + timeout)
                return value
            }
            .ensure(on: cleanup.queue) { events.record("the member's cleanup") }
        let ended = Delivery<Void>()
        let handle = Guarantee(value: ()).on(work)
            .then { _ in when(fulfilled: [member]) }
            .ensure {
                events.record("the run's ensure")
                ended.send(())
            }
            .run()
        #expect(inStep.wait() != nil)
        handle.cancel()
        stepReturns.signal()
        #expect(ended.wait() != nil)
        cleanup.open()
        #expect(eventually { events.all.count == 2 })
        #expect(events.all == ["the member's cleanup", "the run's ensure"])
    }

    /// `run(_:)`: "A run that is cancelled lets go of them [the chain's steps, and what they
    /// captured] where it ends: on the thread that calls ``RunHandle/cancel()`` if the run waits".
    /// The run waits in its operation, and ends as `cancel()` returns, which should have let go of
    /// what its steps captured. What its `ensure(on:)` body captured stays until the body has run
    /// on its queue, and goes there.
    @Test func whatAnEnsureOnBodyCapturedGoesAsACancelEndsTheRun() {
        let marked = MarkedQueue("review9.cleanup")
        let gate = DispatchSemaphore(value: 0)
        marked.queue.async { _ = gate.wait(timeout: .now() + timeout) }
        let released = Delivery<Bool>()
        let kept = KeptResolver<Int, TestError>()
        let handle: RunHandle
        do {
            let witness = QueueWitness(marked, released)
            handle = Promise<Int, TestError> { kept.keep($0) }
                .ensure(on: marked.queue) { withExtendedLifetime(witness) {} }
                .run { _ in }
        }
        #expect(kept.arrived.wait() != nil)
        handle.cancel()  // the run waits: it ends here, on this thread
        let goneAsTheRunEnded = !released.all.isEmpty
        gate.signal()
        #expect(released.wait() != nil)
        #expect(goneAsTheRunEnded, "the body's capture went on the cleanup's queue, after the end")
    }
}
