import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Review of 7436fc3 (cc33281: a run's queue is the thread's, `Nesting.queue`, set as each drive
/// begins). `ensure(on:)`: "After `body`, the chain goes back to the queue it was on, if a hop
/// took it there (with ``on(_:)``, or a step on the main actor), or took there the run whose
/// thread started it or carried it on (a combination's member, or a `timeout`'s work, that a step
/// on that queue started, say), else on to a global queue".
@Suite struct EnsureOnInDeferredDrives {
    /// A member nested `depth` combinations deep in a step that a hop took to `work`: each level
    /// is a member run that its combination's step, on `work`, starts. Past `Nesting.limit` (32)
    /// levels on the thread, a member's drive waits, and the bottom level, the hop's, drives it as
    /// it returns: after `unnest` has put back the queue from before the hop (none), though the
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

/// Review of 830af6c with 7436fc3: a run cancelled while an `ensure(on:)` cleanup runs makes its
/// move back, and the queue that it moves to ends it (`Run.awaitQueue` hands it the driving
/// thread's hold, released in a block of that queue, outside any drive). The run of a `timeout`
/// whose alarm cancelled its work there goes on as that work ends: its resolver's thread is in
/// the block of `work`, where a hop took the work (and, before it, the timeout's own run), but
/// `Nesting.queue` says none, as no drive began there; so a later `ensure(on:)` of that run goes
/// back to a global queue.
@Suite struct EnsureOnAfterALeavingHop {
    /// The timeout's run hops to `work`, whose step starts the timeout's work there; the work's
    /// cleanup outlasts the timeout, whose failure comes as the work ends, on `work` (the ensure
    /// right after the timeout sees it). `ensure(on:)`: "the chain goes back to the queue it was
    /// on, if a hop took it there (with ``on(_:)`` ...), or took there the run whose thread
    /// started it or carried it on": `work` either way; it goes on on a global queue.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func aRunThatATimeoutsEndingWorkCarriesOnGoesBackToItsQueueAfterEnsureOn() {
        let queues = NamedQueues()
        let work = queues.make("work")
        let cleanup = queues.make("cleanup")
        let later = queues.make("later")
        let places = Log()
        let clock = ManualClock()
        let gate = DispatchSemaphore(value: 0)
        cleanup.async { _ = gate.wait(timeout: .now() + timeout) }  // until the alarm is set
        let started = Delivery<Void>()
        let slow = Promise<Int, TestError> { resolver in
            started.send(())
            resolver.fulfill(1)
        }.ensure(on: cleanup) { clock.advance(by: .seconds(1)) }  // the alarm rings as it runs
        let finished = runTimedOut(slow, on: work, clock: clock, then: later, queues, places)
        #expect(started.wait() != nil)
        #expect(eventually { clock.timerCount == 1 })  // the work waits for its cleanup
        gate.signal()
        #expect(finished.wait() == .failure(TestError("late")))
        #expect(
            places.all == ["after the timeout: work", "after ensure(on:): work"])
    }
}

extension EnsureOnAfterALeavingHop {
    /// `ensure(on:)`: "A run cancelled while `body` runs (a `timeout` around it expired, say)
    /// makes that move all the same, and stops there: what goes on after it does not go on on
    /// `queue`"; it ends where its last hold is let go of. Here the alarm rings on another thread,
    /// inside a cancel handler there (of an unrelated run), whose hold on the work's end outlasts
    /// the move back, most often: the work then ends on that thread, which carries the timeout's
    /// run on, in no queue's block, so a later `ensure(on:)` goes on to a global queue. Nothing
    /// goes on on the cleanup's queue. (A review of a fix expected `work` here; the work's run does
    /// not end there.)
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func aTimeoutsWorkCancelledFromAnotherThreadDuringEnsureOnStopsOnTheQueueItMovesBackTo() {
        let queues = NamedQueues()
        let work = queues.make("work")
        let cleanup = queues.make("cleanup")
        let later = queues.make("later")
        let places = Log()
        let clock = ManualClock()
        let bodyRuns = Delivery<Void>()
        let rang = DispatchSemaphore(value: 0)
        let bodyReturns = DispatchSemaphore(value: 0)
        let slow = Promise<Int, TestError>(value: 1).ensure(on: cleanup) {
            bodyRuns.send(())
            _ = rang.wait(timeout: .now() + timeout)
            bodyReturns.signal()
        }
        let finished = runTimedOut(slow, on: work, clock: clock, then: later, queues, places)
        #expect(bodyRuns.wait() != nil)
        #expect(eventually { clock.timerCount == 1 })
        let kept = Delivery<Resolver<Int, Never>>()  // unresolved, until the run is cancelled
        let unrelated = Guarantee<Int> { resolver in
            kept.send(resolver)
            resolver.onCancel { _ in
                clock.advance(by: .seconds(1))  // the alarm cancels the work: its part waits
                rang.signal()
                _ = bodyReturns.wait(timeout: .now() + timeout)
                work.sync {}  // most often, the move back's block has released its hold
            }
        }.run()
        detachThread { unrelated.cancel() }
        #expect(finished.wait() == .failure(TestError("late")))
        // Where the work ends depends on which hold goes last; never on the cleanup's queue.
        #expect(places.all.count == 2)
        #expect(!places.all.contains { $0.hasSuffix("cleanup") })
        withExtendedLifetime(kept) {}
    }
}

/// Runs `slow` on `queue` under a timeout of a second on `clock`, then an `ensure` step and an
/// `ensure(on: later)`, recording in `places` the queue each of the last two steps ran on; the
/// delivery gets the outcome.
@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
private func runTimedOut(
    _ slow: Promise<Int, TestError>, on queue: DispatchQueue, clock: ManualClock,
    then later: DispatchQueue, _ queues: NamedQueues, _ places: Log
) -> Delivery<Result<Int, TestError>> {
    let finished = Delivery<Result<Int, TestError>>()
    Guarantee(value: ()).on(queue)
        .setFailureType(to: TestError.self)
        .then { _ in slow.timeout(.seconds(1), orFailWith: TestError("late"), clock: clock) }
        .ensure { places.record("after the timeout: \(queues.current)") }
        .ensure(on: later) {}
        .run { outcome in
            places.record("after ensure(on:): \(queues.current)")
            finished.send(outcome)
        }
    return finished
}
