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

/// An `ensure(on:)` cleanup that a cancel finds not yet run is queued on its queue, and nothing
/// waits for it ("A run cancelled before `body` has run queues it on `queue` ...; the run's end
/// does not wait for it"): not a combination that cancelled its member, a `timeout` that cancelled
/// its work, an awaiting task's run, or a run cancelled while its combination's member is in a
/// step, each of which waits for the other `ensure` steps of what it cancelled; and what the
/// cleanup captured goes once it has run, on its queue. A review of hops found the docs of each
/// said the cleanup ran first; they now name the exception. Each test holds the cleanup's queue
/// until the order it checks is settled.
@Suite struct EnsureOnQueuedCleanups {
    /// A race's loser waits in its operation, an `ensure(on:)` ahead of it; the winner settles at
    /// once, and the race cancels the loser: the step after the race runs while the loser's
    /// cleanup waits on its queue.
    @Test func aRaceGoesOnWithoutWaitingForTheEnsureOnCleanupOfALoser() {
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
        #expect(events.all == ["the step after the race", "the loser's cleanup"])
    }

    /// A timeout whose alarm rings as its work waits in its operation, an `ensure(on:)` ahead of
    /// it: the timeout fails, and the step after it runs, before the work's cleanup.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func aTimeoutFailsWithoutWaitingForTheEnsureOnCleanupOfItsWork() {
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
        #expect(events.all == ["the step after the timeout", "the work's cleanup"])
    }

    /// An awaiting task, cancelled as its run waits in its operation, an `ensure(on:)` ahead: the
    /// await returns before the cleanup has run.
    @Test func anAwaitOfACancelledTaskReturnsWithoutWaitingForTheEnsureOnCleanup() async {
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
        #expect(await bounded { await task.value } == .some(nil))  // (ended in time, cancelled)
        cleanup.open()
        for _ in 0..<(timeoutSeconds * 1000) where events.all.count < 2 {
            try? await Task.sleep(nanoseconds: 1_000_000)
        }
        #expect(events.all == ["the await returned", "the cleanup"])
    }

    /// A run cancelled while its combination's member is in a step, an `ensure(on:)` right after
    /// it: the member stops as the step returns, queuing its cleanup, and the run ends, its own
    /// `ensure` step run, without waiting for it.
    @Test func aRunCancelledAsAMemberIsInAStepEndsWithoutWaitingForTheMembersEnsureOnCleanup() {
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
        #expect(events.all == ["the run's ensure", "the member's cleanup"])
    }

    /// `run(_:)`: a cancelled run lets go of what its steps captured where it ends, but an
    /// `ensure(on:)` cleanup that the cancel queued keeps what it captured until it has run, on
    /// its queue. The run waits in its operation, and ends as `cancel()` returns.
    @Test func whatAQueuedEnsureOnCleanupCapturedGoesOnItsQueueOnceItHasRun() {
        let marked = MarkedQueue("ensure-on.cleanup")
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
        #expect(released.wait() == true, "let go of on the cleanup's queue")
        #expect(!goneAsTheRunEnded)
    }
}
