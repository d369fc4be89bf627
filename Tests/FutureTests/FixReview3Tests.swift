import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Review of e359314, 453cf2d and bf772a7: each test shows a documented promise that the code
/// after those fixes breaks, and fails on it.
@Suite(.serialized) struct FixReview3 {
    final class Box: @unchecked Sendable { var shared: Guarantee<Int>? }

    /// Whether the `outer` links from `run` end, bounded, as `SharingWorkReach.outerLinksEnd`.
    static func outerLinksEnd(from run: Engine.Run) -> Bool {
        var seen = Set<ObjectIdentifier>()
        var next: Engine.Run? = run
        while let current = next {
            guard seen.insert(ObjectIdentifier(current)).inserted else { return false }
            next = current.locked { $0.outer }
        }
        return true
    }

    /// e359314. RunHandle: "Cancelling is idempotent and safe from any thread"; Sharing: the
    /// work may run the shared promise. As `SharingWorkReach`'s test, but the work races a share
    /// of its own shared promise (`own`), not the promise itself: the race waits for that share's
    /// work (run R2, made apart), which waits for the first shared promise. The run that started
    /// the work leaves: R2 is then the only run waiting, and `Shared.reach`'s walk up from R2
    /// stops at R2 itself (made apart), so it names R2 the work's `outer`, though R2's `outer` is
    /// the work's run (the race's, which waits for R2 alone): a cycle. Before e359314 the walk
    /// went on through R2's `outer` and found the work's run. A step of the fallback then cancels
    /// an unrelated run, whose walk of `outer` never ends.
    @Test(arguments: [false, true])
    func aStepOfWorkThatRacesAShareOfItsOwnSharedPromiseCancelsAnotherRun(throughAStep: Bool) {
        let box = Box()
        let (gate, gateResolver) = Guarantee<Int>.pending()
        let (never, neverResolver) = Guarantee<Int>.pending()
        let other = never.run()
        let walked = Delivery<Bool>()
        box.shared = Guarantee<Int>(value: 0).then { _ -> Guarantee<Int> in
            let share = box.shared!.map { $0 }.share()
            let own: Guarantee<Int> = throughAStep ? share.map { $0 } : share
            let fallback = gate.map { value -> Int in
                let ends = Engine.Nesting.drivenRun.map(Self.outerLinksEnd) ?? true
                if ends { other.cancel() }  // (else it would not return)
                walked.send(ends)
                return value
            }
            return race([own, fallback])
        }.share()
        let first = box.shared!.run()
        first.cancel()  // the share's work is then the only run that waits for the work
        detachThread { gateResolver.fulfill(1) }
        #expect(walked.wait() == true, "cancel() from the fallback's step would never return")
        #expect(other.isCancelled == (walked.all == [true]))
        withExtendedLifetime(neverResolver) {}
    }
}

/// A queue that a step can tell it runs on, by name.
private final class Named3Queues: Sendable {
    let key = DispatchSpecificKey<String>()

    func make(_ name: String) -> DispatchQueue {
        let queue = DispatchQueue(label: "fixrev3.\(name)")
        queue.setSpecific(key: key, value: name)
        return queue
    }

    var current: String { DispatchQueue.getSpecific(key: key) ?? "none" }
}

extension FixReview3 {
    /// bf772a7. `ensure(on:)`: "A run cancelled while `body` runs (a `timeout` around it
    /// expired, say) makes that move all the same, and stops there", and the chain goes back to
    /// the queue a hop took it to. As `EnsureOnAfterALeavingHop`'s test, but the alarm rings on
    /// another thread, inside a cancel handler there (of an unrelated run), so that the
    /// canceller's hold on the work's end is released after the block of `work` (the move back)
    /// has released the driving thread's: `Nesting.on` wraps that block's release, which is not
    /// the last, and the work ends on the canceller's thread, which carries the timeout's run on
    /// in no queue's block: a later `ensure(on:)` sends it to a global queue.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func aTimeoutsWorkCancelledFromAnotherThreadDuringEnsureOnStopsOnTheQueueItMovesBackTo() {
        let queues = Named3Queues()
        let work = queues.make("work")
        let cleanup = queues.make("cleanup")
        let later = queues.make("later")
        let places = Log()
        let clock = ManualClock()
        let bodyRuns = Delivery<Void>()
        let rang = DispatchSemaphore(value: 0)
        let bodyReturns = DispatchSemaphore(value: 0)
        let finished = Delivery<Result<Int, TestError>>()
        let slow = Promise<Int, TestError>(value: 1).ensure(on: cleanup) {
            bodyRuns.send(())
            _ = rang.wait(timeout: .now() + timeout)
            bodyReturns.signal()
        }
        Guarantee(value: ()).on(work)
            .setFailureType(to: TestError.self)
            .then { _ in slow.timeout(.seconds(1), orFailWith: TestError("late"), clock: clock) }
            .ensure { places.record("after the timeout: \(queues.current)") }
            .ensure(on: later) {}
            .run { outcome in
                places.record("after ensure(on:): \(queues.current)")
                finished.send(outcome)
            }
        #expect(bodyRuns.wait() != nil)
        #expect(eventually { clock.timerCount == 1 })
        let kept = Delivery<Resolver<Int, Never>>()  // unresolved, until the run is cancelled
        let unrelated = Guarantee<Int> { resolver in
            kept.send(resolver)
            resolver.onCancel { _ in
                clock.advance(by: .seconds(1))  // the alarm cancels the work: its part waits
                rang.signal()
                _ = bodyReturns.wait(timeout: .now() + timeout)
                usleep(200_000)  // the move back is queued on `work`
                work.sync {}  // and its block has released the driving thread's hold
            }
        }.run()
        detachThread { unrelated.cancel() }
        #expect(finished.wait() == .failure(TestError("late")))
        #expect(places.all == ["after the timeout: work", "after ensure(on:): work"])
        withExtendedLifetime(kept) {}
    }
}
