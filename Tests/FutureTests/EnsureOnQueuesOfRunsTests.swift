import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Calls `body` as it goes away.
private final class OnRelease: Sendable {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    deinit { body() }
}

/// A resolver kept for a test to call later, from any thread.
private final class Kept<Value, Failure: Error>: @unchecked Sendable {
    private let lock = TestLock()
    private var kept: Resolver<Value, Failure>?
    func keep(_ resolver: Resolver<Value, Failure>) { lock.withLock { kept = resolver } }
    var resolver: Resolver<Value, Failure>? { lock.withLock { kept } }
}

/// `ensure(on:)`: "After `body`, the chain goes back to the queue it was on, if a hop took it
/// there (with ``on(_:)``, or a step on the main actor), or took there the run whose thread
/// started it or carried it on (a combination's member, or a `timeout`'s work, that a step on
/// that queue started, say), else on to a global queue". (A review of a first fix, which took the
/// queue of the run the starting thread drove, found these two wrong.)
@Suite struct EnsureOnInMembersStartedLate {
    /// How the first member of a combination that runs one member at a time ends, which starts
    /// the second: its own hop to another queue (its run's end clears its queue before the
    /// combination hears of it), or its resolver, called from a step of an unrelated run that a
    /// hop took to another queue (`Run.start` reads that run's queue).
    enum FirstEnds: CaseIterable, Sendable { case onItsOwnHop, byAnUnrelatedRunsStep }

    /// The first member starts as the combination's step runs, on `work`, and goes back there
    /// after its cleanup (as in `EnsureOnInAMember`). The second, started once the first ended (the
    /// limit is 1), starts on the thread where the first ended, in the block of `other` either way:
    /// it goes back there. (The first fix sent it to a global queue when the first ended on its
    /// hop, as the first's end had cleared the queue it read.)
    @Test(arguments: FirstEnds.allCases)
    func aMemberStartedAsAnotherEndsGoesBackWhereTheFirstMemberDoes(first ends: FirstEnds) {
        let queues = NamedQueues()
        let work = queues.make("work")
        let other = queues.make("other")
        let cleanup = queues.make("cleanup")
        let places = Log()
        let kept = Kept<Int, TestError>()
        @Sendable func member(_ name: String, _ value: Int) -> Promise<Int, TestError> {
            Promise<Int, TestError>(value: value)
                .ensure(on: cleanup) {}
                .map { value -> Int in
                    places.record("\(name): \(queues.current)")
                    return value
                }
        }
        let first: Promise<Int, TestError> =
            switch ends {
            case .onItsOwnHop: member("first", 1).on(other)
            case .byAnUnrelatedRunsStep:
                // Its operation is called, and waits; the first member's queue is not recorded.
                Promise<Int, TestError> { kept.keep($0) }
            }
        let finished = Delivery<Result<[Int], TestError>>()
        Guarantee(value: ()).on(work)
            .then { _ in when(fulfilled: [first, member("second", 2)], concurrently: 1) }
            .run { finished.send($0) }
        if ends == .byAnUnrelatedRunsStep {
            #expect(eventually { kept.resolver != nil })
            Guarantee(value: ()).on(other).done { kept.resolver?.fulfill(1) }.run()
        }
        #expect(finished.wait() == .success([1, 2]))
        let expected =
            ends == .onItsOwnHop ? ["first: work", "second: other"] : ["second: other"]
        #expect(places.all.sorted() == expected)
    }
}

/// The queue a step reads as the one its thread is in the block of is the thread's own
/// (`Nesting.queue`; it was once the run's, `Driver.queue`, which the drive set). Between a hop's
/// hand-over of the run (`Run.awaitQueue`, under the lock) and the end of that drive, the thread
/// that hopped still counts as driving the run (`Nesting.drivenRun`), which the queue it is moving
/// to drives meanwhile. What that thread lets go of there (the steps of a promise a step returned,
/// which have all run) may start a run inside another: here a model that such a step captured goes,
/// and as it goes it settles the first member of a `when` that runs one member at a time, which
/// starts the second (the first fix's `Run.start` read the hopping run's `Driver.queue`, which the
/// hop's queue's thread writes as it ends that run, with no lock between: a data race, which
/// ThreadSanitizer does not see, as Swift has it ignore every access a deinit makes; the queue is
/// now the thread's own, `Nesting.queue`).
@Suite struct EnsureOnAfterAHandOver {
    /// The second member was never on `hop`, nor was its combination's step, nor did a hop take
    /// it there: after its cleanup it goes on to a global queue, as `ensure(on:)` says; it goes
    /// on on `hop`.
    @Test func aMemberStartedAsAHoppingThreadLetsGoOfStepsDoesNotGoToTheHopsQueue() {
        let queues = NamedQueues()
        let hop = queues.make("hop")
        let cleanup = queues.make("cleanup")
        let place = Delivery<String>()
        let kept = Kept<Int, TestError>()
        let second = Promise<Int, TestError>(value: 2)
            .ensure(on: cleanup) {}
            .map { value -> Int in
                place.send(queues.current)
                return value
            }
        let first = Promise<Int, TestError> { kept.keep($0) }
        let combined = Delivery<Result<[Int], TestError>>()
        let ended = Delivery<Void>()
        Guarantee(value: ())
            .then { _ -> Guarantee<Void> in
                when(fulfilled: [first, second], concurrently: 1).run { combined.send($0) }
                // A model, kept by the returned promise's step alone: it goes as the run hops, on
                // this thread, once the run is handed to `hop`, and settles the first member.
                let model = OnRelease { kept.resolver?.fulfill(1) }
                return Guarantee(value: ()).map { _ in withExtendedLifetime(model) {} }
            }
            .on(hop)
            .map { _ in usleep(300_000) }  // the run is on `hop` as its model goes
            .run(some: { ended.send(()) })
        #expect(ended.wait() != nil)
        #expect(combined.wait() == .success([1, 2]))
        #expect(place.wait() == "none")
    }
}
