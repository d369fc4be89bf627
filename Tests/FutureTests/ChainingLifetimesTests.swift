import Dispatch
import Testing

@testable import Future

/// A serial queue that code can tell it runs on.
final class MarkedQueue: Sendable {
    let queue: DispatchQueue
    private let key = DispatchSpecificKey<Bool>()

    init(_ label: String) {
        queue = DispatchQueue(label: label)
        queue.setSpecific(key: key, value: true)
    }

    var isCurrent: Bool { DispatchQueue.getSpecific(key: key) == true }
}

/// An object that sends, as it goes, whether it went on `queue`.
final class QueueWitness: Sendable {
    let queue: MarkedQueue
    let released: Delivery<Bool>

    init(_ queue: MarkedQueue, _ released: Delivery<Bool>) {
        (self.queue, self.released) = (queue, released)
    }

    deinit { released.send(queue.isCurrent) }
}

/// What a run lets go of, and where: CI runs this suite again under ThreadSanitizer (Lifetimes).
@Suite("Chaining lifetimes") struct ChainingLifetimes {
    /// Running.swift, `run(_:)`: "The steps of a promise that a step returned go once all of
    /// them have run, on the thread that ran the last". A step of a promise a step returned runs
    /// after a hop to `queue`: its witness, captured by that step alone, goes away on `queue`,
    /// though the run goes on on another thread and enters another promise there (it went where
    /// the run entered that promise, before the fix), then ends on `queue`.
    @Test func aStepOfAnEnteredPromiseIsReleasedWhereItRan() {
        let marked = MarkedQueue("chaining.release")
        let released = Delivery<Bool>()
        let ended = Delivery<Bool>()
        let resolvers = Delivery<Resolver<Void, Never>>()
        Guarantee(value: ())
            .then { _ -> Guarantee<Void> in
                let witness = QueueWitness(marked, released)
                return Guarantee(value: ()).on(marked.queue).map { _ = witness }
            }
            // Resolved on this test's thread once the operation has returned (the queue is
            // serial: its next block runs once the run has let go of it).
            .then { _ in
                Guarantee<Void> { resolver in marked.queue.async { resolvers.send(resolver) } }
            }
            .then { _ in Guarantee(value: ()).map { _ in } }  // enters a promise there
            .on(marked.queue)
            .run(some: { ended.send(marked.isCurrent) })
        resolvers.wait()?.fulfill()
        #expect(ended.wait() == true)
        #expect(released.wait() == true, "the step's witness went away off the run's last queue")
    }
}

extension ChainingLifetimes {
    /// Running.swift, `run(_:)`: "The steps of a promise that a step returned go once all of
    /// them have run, on the thread that ran the last (for a promise that ends in on(_:), on
    /// that queue)". The promise a step returns here ends with a hop: its step, the witness's,
    /// runs on `start`, then the hop, the promise's last step, takes the run to `hop`, where the
    /// witness goes.
    @Test func aStepOfAnEnteredPromiseThatEndsWithAHopIsReleasedOnTheHopsQueue() {
        let start = MarkedQueue("chaining.start")
        let hop = MarkedQueue("chaining.hop")
        let released = Delivery<Bool>()
        let ended = Delivery<Bool>()
        start.queue.async {
            Guarantee(value: ())
                .then { _ -> Guarantee<Void> in
                    let witness = QueueWitness(hop, released)
                    return Guarantee(value: ()).map { _ = witness }.on(hop.queue)
                }
                .run(some: { ended.send(hop.isCurrent) })
        }
        #expect(ended.wait() == true)
        #expect(released.wait() == true, "the step's witness went away off the hop's queue")
    }

    /// Running.swift: "A run that is cancelled lets go of them where it ends: ... if it runs, on
    /// the thread running it, as it stops, or on the canceller's, if the cancel handlers return
    /// later." A run on `marked` is in its operation, long synchronous work that checks
    /// `isCancelled`, as `canceller` cancels it; the cancel handler returns once the run's thread
    /// has stopped it: so the run ends, and its step's witness goes, on `canceller`.
    @Test func aCancelledRunWhoseHandlersReturnLastLetsGoOfItsStepsOnTheCancellersThread() {
        let marked = MarkedQueue("chaining.stop")
        let canceller = MarkedQueue("chaining.canceller")
        let released = Delivery<Bool>()
        let started = Delivery<RunHandle>()
        marked.queue.async {
            let witness = QueueWitness(canceller, released)
            Guarantee<Void> { resolver in
                resolver.onCancel { _ in
                    // Returns once the run's thread has let go of the queue, the run stopped.
                    let stopped = DispatchSemaphore(value: 0)
                    marked.queue.async { stopped.signal() }
                    _ = stopped.wait(timeout: .now() + timeout)
                }
                started.send(RunHandle(resolver.run))
                spin(until: { resolver.isCancelled })  // long work, checking between pieces
            }.map { _ = witness }.run(some: { Issue.record("a cancelled run delivered") })
        }
        let handle = started.wait()
        canceller.queue.async { handle?.cancel() }
        #expect(released.wait() == true, "the step's witness went away off the canceller's thread")
    }

    /// The same, with a cancel handler that returns at once: the thread running the run ends it
    /// as it stops, and its step's witness goes there.
    @Test func aCancelledRunWhoseHandlersReturnFirstLetsGoOfItsStepsWhereItRan() {
        let marked = MarkedQueue("chaining.stop")
        let released = Delivery<Bool>()
        let started = Delivery<RunHandle>()
        let cancelReturned = DispatchSemaphore(value: 0)
        marked.queue.async {
            let witness = QueueWitness(marked, released)
            Guarantee<Void> { resolver in
                started.send(RunHandle(resolver.run))
                _ = cancelReturned.wait(timeout: .now() + timeout)  // long work, cancelled
            }.map { _ = witness }.run(some: { Issue.record("a cancelled run delivered") })
        }
        started.wait()?.cancel()
        cancelReturned.signal()
        #expect(released.wait() == true, "the step's witness went away off the queue it ran on")
    }
}

/// Stress: CI's ThreadSanitizer filter names Racing.
@Suite("Chaining races", .serialized) struct ChainingRacing {
    /// A chain of every kind of step of the kinds a chain has, cancelled from another thread at a
    /// random moment: each `ensure` body runs once, the completion at most once, and after them.
    @Test func everyEnsureRunsOnceWhereverACancelLands() async {
        let first = MarkedQueue("chaining.first")
        let second = MarkedQueue("chaining.second")
        let runs = 2_000
        let ensured = Counter()
        let ensuredOn = Counter()
        let delivered = Counter()
        let wrong = Counter()
        let done = DispatchGroup()
        await concurrentlyOnThreads(iterations: runs) { index in
            done.enter()
            done.enter()
            let log = Log()
            let handle = Promise<Int, TestError>(value: index)
                .on(first.queue)
                .then { value in
                    Promise<Int, TestError> { resolver in
                        DispatchQueue.global().async { resolver.fulfill(value) }
                    }
                }
                .ensure(on: second.queue) {
                    if !second.isCurrent { wrong.increment() }
                    ensuredOn.increment()
                    log.record("ensure on")
                    done.leave()
                }
                .then { value in
                    Promise<Int, TestError>(value: value).on(first.queue).map { $0 + 1 }
                }
                .then { value -> Promise<Int, TestError> in
                    value % 2 == 0 ? Promise(error: TestError("even")) : Promise(value: value)
                }
                .recover { _ in Promise<Int, TestError>(value: -1) }
                .ensure {
                    ensured.increment()
                    log.record("ensure")
                    done.leave()
                }
                .run { _ in
                    delivered.increment()
                    if log.all != ["ensure on", "ensure"] { wrong.increment() }
                }
            spin(microseconds: Int.random(in: 0...200))
            handle.cancel()
        }
        #expect(done.wait(timeout: .now() + timeout) == .success)
        #expect(ensured.value == runs)
        #expect(ensuredOn.value == runs)
        #expect(wrong.value == 0)
        #expect(delivered.value <= runs)
    }
}

@Suite("Chaining steps") struct ChainingSteps {
    /// A retry of work that fails at once, a hundred thousand attempts, runs each attempt once,
    /// in constant stack space (Laziness.md: a step that returns a promise pushes its steps),
    /// and fails with the last attempt's error.
    @Test func aHundredThousandRetriesRunOnASmallStack() async {
        let attempts = Counter()
        let failing = Promise<Int, TestError> { resolver in
            resolver.reject(TestError("\(attempts.increment())"))
        }
        let outcome = Delivery<Result<Int, TestError>>()
        await onThread(stackSize: 64 << 10) {
            failing.retry(100_000).run { outcome.send($0) }
        }
        #expect(outcome.wait() == .failure(TestError("100000")))
        #expect(attempts.value == 100_000)
    }
}
