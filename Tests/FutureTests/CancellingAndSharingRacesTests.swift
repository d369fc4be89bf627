import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Found by a review of the fixes of issue 38: each test shows a documented promise that
/// the engine breaks.
@Suite(.serialized) struct CancellingAndSharingRaces {
    /// Holds a promise that its own work's operation runs.
    final class Box: @unchecked Sendable { var shared: Promise<Int, TestError>? }

    /// `share()`: the runs that wait for the work go on (here: end by cancellation, as the work's
    /// own resolver cancels it) whatever thread the work ends on. Run X starts the work inside
    /// its call of the shared promise, on this thread, inside another shared promise's settle
    /// (so the work's level of runs resumes what waits in it as it returns); run Y joins from the
    /// work's operation. After that operation returned, and before X's start of the work has
    /// returned, thread B cancels the work through its resolver, outside any run: the work ends
    /// on B. The fault was that B's settle resumed X and left Y in B's queue of waiting runs,
    /// where no level of runs would ever resume it.
    @Test func aWaiterOfSharedWorkEndedOnAnotherThreadDuringTheStartGoesOn() {
        let (first, firstResolver) = Promise<Int, TestError>.pending()
        let (third, thirdResolver) = Promise<Int, TestError>.pending()
        let workResolver = Delivery<Resolver<Int, TestError>>()
        let cancelOnB = DispatchSemaphore(value: 0)
        let cancelledOnB = DispatchSemaphore(value: 0)
        let threadBMayEnd = DispatchSemaphore(value: 0)
        let yEnded = DispatchSemaphore(value: 0)
        let xEnded = DispatchSemaphore(value: 0)
        let box = Box()
        detachThread {  // B: a thread outside any run, kept until the end of the test
            _ = cancelOnB.wait(timeout: .now() + timeout)
            workResolver.wait()?.cancel()
            cancelledOnB.signal()
            _ = threadBMayEnd.wait(timeout: .now() + timeout)
        }
        box.shared = Promise<Int, TestError> { resolver in
            workResolver.send(resolver)
            // Y joins after X, from this operation.
            box.shared!.ensure { yEnded.signal() }.run { _ in }
            // W's resume waits for the level of the work's run: it runs once this operation
            // returned, inside X's start.
            thirdResolver.cancel()
        }.share()
        // W: ends by cancellation inside the window, and has thread B cancel the work there.
        third.ensure {
            cancelOnB.signal()
            _ = cancelledOnB.wait(timeout: .now() + .seconds(5))
        }.run { _ in }
        // X: starts the work as `first` settles (inside its settle).
        first.then { _ in box.shared! }.ensure { xEnded.signal() }.run { _ in }
        firstResolver.fulfill(0)
        #expect(xEnded.wait(timeout: .now() + timeout) == .success, "X went on")
        let yWent = yEnded.wait(timeout: .now() + .seconds(10)) == .success
        threadBMayEnd.signal()
        #expect(yWent, "the second run that waited for the work never went on")
        // B's queue keeps Y's resolver (its nesting is kept by the closures it queued): Y never
        // ends, even once B has.
        if !yWent { #expect(yEnded.wait(timeout: .now() + .seconds(1)) == .success) }
    }

    /// CombiningPromises.md: "The combination settles once they have stopped: their cancel
    /// handlers and `ensure` steps have run before the steps after it." A race is won while
    /// member 0 is in a step on another thread (so the race is `closing`); member 1, an operation
    /// alone that the race cancelled, adds a cancel handler from another thread, which runs at
    /// once (`Resolver.onCancel`). Member 0's step returns as that handler starts: the race must
    /// not settle before the handler returns, as a cancelled run's end waits for such a handler.
    @Test func aRaceSettlesAfterALateCancelHandlerOfAMemberItCancelled() {
        let early = Counter()
        let rounds = 5
        for _ in 0..<rounds {
            let stepRuns = DispatchSemaphore(value: 0)
            let handlerStarted = DispatchSemaphore(value: 0)
            let handlerReturned = DispatchSemaphore(value: 0)
            let after = Counter()
            let kept = Delivery<Resolver<Int, TestError>>()
            let keptOne = DispatchSemaphore(value: 0)
            let members: [Promise<Int, TestError>] = [
                // Resolved once member 1 is called, so that its run's step runs on the resolving
                // thread, not in the launch loop (which a resolve before the operation returned
                // would have go on into the step, holding up the other members).
                Promise<Int, TestError> { resolver in
                    detachThread {
                        _ = keptOne.wait(timeout: .now() + timeout)
                        resolver.fulfill(0)
                    }
                }
                .map { value in
                    stepRuns.signal()
                    _ = handlerStarted.wait(timeout: .now() + timeout)
                    return value
                },
                Promise { resolver in
                    kept.send(resolver)
                    keptOne.signal()
                },
                Promise { resolver in
                    detachThread {
                        _ = stepRuns.wait(timeout: .now() + timeout)
                        resolver.fulfill(2)
                    }
                },
            ]
            let done = Delivery<Void>()
            race(members).map { _ in after.increment() }.ensure { done.send(()) }.run { _ in }
            guard let resolver = kept.wait() else { return #expect(Bool(false), "no member 1") }
            // One round that stalls ends the test: each would wait minutes in vain.
            guard spin(until: { resolver.isCancelled }) else {
                return #expect(Bool(false), "member 1 was never cancelled")
            }
            resolver.onCancel { _ in
                handlerStarted.signal()
                spin(until: { after.value > 0 }, for: .milliseconds(100))
                if after.value > 0 { early.increment() }
                handlerReturned.signal()
            }
            guard handlerReturned.wait(timeout: .now() + timeout) == .success,
                done.wait() != nil
            else { return #expect(Bool(false), "a round whose race did not end in time") }
        }
        #expect(early.value == 0, "rounds where the race's next step ran inside a late handler")
    }

    /// RunHandle: "Inside a cancel handler, `cancel()` returns at once: that cancel ... is done
    /// after the handler has returned". An operation that cancels itself has its handlers called
    /// so (`Nesting.cancelling`); a combination's member made from an operation alone, which the
    /// CHANGELOG says behaves as an operation run alone does, has them called directly by
    /// `Join.memberEnded`, so a cancel inside them is done nested, before it returns.
    @Test(arguments: [false, true])
    func aCancelInsideTheHandlerOfAnOperationThatCancelsItselfReturnsFirst(asMember: Bool) {
        let order = Log()
        let otherKept = Delivery<Resolver<Int, TestError>>()  // so that it does not cancel itself
        let other = Promise<Int, TestError> { resolver in
            resolver.onCancel { _ in order.record("other's handler") }
            otherKept.send(resolver)
        }.run { _ in }
        let kept = Delivery<Resolver<Int, TestError>>()
        let operation = Promise<Int, TestError> { resolver in
            resolver.onCancel { _ in
                other.cancel()
                order.record("cancel returned")
            }
            kept.send(resolver)
        }
        let never = Promise<Int, TestError> { otherKept.send($0) }
        let handle =
            asMember ? race([operation, never]).run { _ in } : operation.run { _ in }
        kept.wait()?.cancel()
        #expect(order.all == ["cancel returned", "other's handler"])
        handle.cancel()
    }
}
