import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A queue that a step can tell it runs on, by name.
private final class NamedQueues: Sendable {
    let key = DispatchSpecificKey<String>()

    func make(_ name: String) -> DispatchQueue {
        let queue = DispatchQueue(label: "fixrev2.\(name)")
        queue.setSpecific(key: key, value: name)
        return queue
    }

    /// The name of the queue this thread is in the block of, or "none".
    var current: String { DispatchQueue.getSpecific(key: key) ?? "none" }
}

/// Review of 7436fc3 (cc33281: a run's queue is the thread's, `Nesting.queue`, set as each drive
/// begins). `ensure(on:)`: "After `body`, the chain goes back to the queue it was on, if a hop
/// took it there (with ``on(_:)``, or a step on the main actor), or took there the run whose
/// thread started it or carried it on (a combination's member, or a `timeout`'s work, that a step
/// on that queue started, say), else on to a global queue".
@Suite struct FixReview2DeferredDrives {
    /// A member nested `depth` combinations deep in a step that a hop took to `work`: each level
    /// is a member run that its combination's step, on `work`, starts. Past `Nesting.limit` (32)
    /// levels on the thread, a member's drive waits, and the bottom level, the hop's, drives it as
    /// it returns: after `leaveRun` has put back the queue from before the hop (none), though the
    /// thread is still in `work`'s block and a step on `work` started the member. So the innermost
    /// member goes back after its cleanup to a global queue, not to `work`. (10 deep: `work`.)
    @Test(arguments: [10, 40])
    func aMemberStartedPastTheLimitGoesBackToTheQueueOfTheStepThatStartedIt(depth: Int) {
        let queues = NamedQueues()
        let work = queues.make("work")
        let cleanup = queues.make("cleanup")
        let place = Delivery<String>()
        let innermost = Promise<Int, TestError>(value: 0)
            .ensure(on: cleanup) {}
            .map { value -> Int in
                place.send(queues.current)
                return value
            }
        let nested = (0..<depth).reduce(innermost) { promise, _ in
            when(fulfilled: [promise]).map { $0[0] + 1 }
        }
        let finished = Delivery<Result<Int, TestError>>()
        Guarantee(value: ()).on(work)
            .then { _ in nested }
            .run { finished.send($0) }
        #expect(finished.wait() == .success(depth))
        #expect(place.wait() == "work")
    }
}
