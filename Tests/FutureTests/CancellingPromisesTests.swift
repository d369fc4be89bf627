import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What the docs promise of a cancel (`RunHandle`, `Resolver.onCancel(_:)`,
/// `outcomes(of:concurrently:)`), in cases a review of the run found broken.
@Suite(.serialized) struct CancellingPromises {
    /// A cancel handler that the operation's work adds from a thread of its own while the run is
    /// being cancelled (the canceller still in the handler added before) is called at once, as
    /// the run already is cancelled (`Resolver.onCancel`); the run has not ended yet, and its
    /// `ensure` steps run once the cancel handlers have returned (`RunHandle`): this one too, for
    /// an operation run alone and for a combination's member.
    @Test(arguments: [false, true])
    func aHandlerAddedOnAnotherThreadAsTheRunIsCancelledReturnsBeforeItsEnd(asAMember: Bool) {
        let log = Log()
        let cancelling = Delivery<Void>()
        let lateHandlerStarted = Counter()
        let ended = Delivery<Void>()
        let operation = Guarantee<Int> { resolver in
            resolver.onCancel { _ in
                cancelling.send(())
                spin(until: { lateHandlerStarted.value > 0 }, for: .seconds(10))
            }
            detachThread {  // the work, which adds its handler once it has started
                guard cancelling.wait() != nil else { return }
                resolver.onCancel { _ in
                    lateHandlerStarted.increment()
                    usleep(100_000)
                    log.record("late handler returned")
                }
            }
        }
        let handle = (asAMember ? when(fulfilled: [operation]).map { $0[0] } : operation)
            .ensure {
                log.record("ensure")
                ended.send(())
            }
            .run()
        handle.cancel()
        #expect(ended.wait() != nil)
        eventually { log.all.count == 2 }
        #expect(log.all == ["late handler returned", "ensure"])
    }

    /// A step of a combination's member that cancels the combination's run stops the member
    /// before its next step, and no member starts after (`RunHandle`: a step that cancels its own
    /// run stops it before the next step, a step of a combination's member too), whether or not
    /// the thread is inside another run's cancel handler: there, the member resumes as the
    /// handler fulfills the operation it waits for.
    @Test(arguments: [false, true])
    func aMembersStepThatCancelsItsCombinationStopsIt(insideACancelHandler: Bool) {
        let log = Log()
        let gate = Delivery<Resolver<Void, Never>>()
        let combination = Delivery<RunHandle>()
        let first = Guarantee<Void> { gate.send($0) }
            .map { _ in
                combination.wait()?.cancel()
                log.record("cancelled")
            }
            .map { _ in log.record("a step after the cancel") }
        let second = Guarantee<Void> { resolver in
            log.record(resolver.isCancelled ? "second called, cancelled" : "second called")
            resolver.fulfill()
        }
        let ended = Delivery<Void>()
        combination.send(
            when(fulfilled: [first, second], concurrently: 1).ensure { ended.send(()) }.run())
        guard let open = gate.wait() else { return #expect(Bool(false), "the gate never waited") }
        if insideACancelHandler {
            let kept = Delivery<Resolver<Void, Never>>()  // so that only the cancel calls it
            Guarantee<Void> { resolver in
                kept.send(resolver)
                resolver.onCancel { _ in open.fulfill() }
            }
            .run().cancel()
        } else {
            open.fulfill()
        }
        #expect(ended.wait() != nil)
        #expect(log.all == ["cancelled"])
    }

    /// `outcomes(of:concurrently:)` in a task cancelled while a member is in a step, on another
    /// thread, returns once that member's `ensure` steps have run, as it says.
    @Test func outcomesOfACancelledTaskReturnsAfterTheMembersEnsureSteps() async {
        let inStep = Delivery<Void>()
        let ensured = Counter()
        let member = later(1).map { value -> Int in
            inStep.send(())
            usleep(200_000)
            return value
        }
        .ensure { ensured.increment() }
        let task = Task { () -> Int in
            _ = await outcomes(of: [member])
            return ensured.value
        }
        _ = await inStep.arrival()
        task.cancel()
        #expect(
            await bounded { await task.value } == 1, "ensure steps run when outcomes(of:) returned")
    }

    /// A cancel from another thread while a step runs lets the steps after it run up to the
    /// run's next operation, which never starts; then the `ensure` steps ahead run, and nothing
    /// is delivered (`RunHandle`: steps take no lock). The docs once said no later step starts.
    @Test func aCancelFromAnotherThreadStopsTheRunAtItsNextOperation() {
        let log = Log()
        let inStep = Delivery<Void>()
        let cancelled = DispatchSemaphore(value: 0)
        let ended = Delivery<Void>()
        let resolvers = Delivery<Resolver<Int, Never>>()
        // Resolved from another thread once `run` has returned: resolved while the operation
        // still ran (as `later(1)`'s queue did, once in a while), the run went on on this thread,
        // into the step that waits for this thread's signal, and the test hung.
        let handle = Guarantee<Int> { resolvers.send($0) }
            .map { value -> Int in
                inStep.send(())
                _ = cancelled.wait(timeout: .now() + timeout)
                return value
            }
            .map { value -> Int in
                log.record("step")
                return value + 1
            }
            .then { value in
                Guarantee<Int> { resolver in
                    log.record("operation")
                    resolver.fulfill(value)
                }
            }
            .ensure {
                log.record("ensure")
                ended.send(())
            }
            .run { _ in log.record("completion") }
        detachThread { resolvers.wait()?.fulfill(1) }
        #expect(inStep.wait() != nil)
        handle.cancel()
        cancelled.signal()
        #expect(ended.wait() != nil)
        #expect(log.all == ["step", "ensure"])
        #expect(handle.isCancelled)
    }
}
