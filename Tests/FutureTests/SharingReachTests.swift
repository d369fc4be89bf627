import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A step of shared work that cancels the one run that waits for it, another thread's cancel of
/// that run on its way (`Shared.reach`), found by a review of sharing.
@Suite(.serialized) struct SharingReach {
    /// How run U waits for the shared work: through members of one `when`, each either the
    /// shared promise itself (an operation alone, which the join calls: its resolver reports to
    /// U) or a step after it (a member run of its own, inside U). (Two members with steps after
    /// the shared promise, or one of each, are two runs that wait: RunHandle promises nothing
    /// there, and the work stops as they leave.)
    enum Waits: CaseIterable, Sendable {
        case oneMemberRun, oneCalledMember, twoCalledMembers
    }

    /// RunHandle: "A step that cancels its own run stops it before the next step, even when
    /// another thread's cancel came first (a step … of a shared promise's work that cancels when
    /// abandoned and that only this run waits for, too: itself, through one member of a
    /// combination it runs, or through members that are the shared promise itself)". Only run U
    /// waits for the work, through members of one `when`; thread B cancels U first and is held in
    /// the cancel handler of U's first member before its cancel reaches the others. The work's
    /// step, on thread A, then cancels U: its next step must not run. (The review found it ran
    /// with two members with steps after the shared promise, which the doc then promised.)
    @Test(arguments: Waits.allCases)
    func aStepOfWorkThatOneRunWaitsForThroughMemberRunsStopsAsItCancelsIt(waits: Waits) {
        let (start, starter) = Guarantee<Int>.pending()
        let handle = Delivery<RunHandle>()
        let stepRuns = DispatchSemaphore(value: 0)
        let blockerCancelled = DispatchSemaphore(value: 0)
        let nextStep = Counter()
        let workEnded = Delivery<Void>()
        let workEndedForB = DispatchSemaphore(value: 0)
        let shared = start.map { value -> Int in
            stepRuns.signal()
            _ = blockerCancelled.wait(timeout: .now() + timeout)
            handle.wait()?.cancel()  // U, which B is cancelling
            return value
        }.map { value -> Int in
            nextStep.increment()
            return value
        }.ensure {
            workEnded.send(())
            workEndedForB.signal()
        }.share()
        let kept = Delivery<Resolver<Int, Never>>()
        let blocker = Guarantee<Int> { resolver in
            kept.send(resolver)  // never resolved
            resolver.onCancel { _ in
                blockerCancelled.signal()
                // B goes on once the work has ended, either way.
                _ = workEndedForB.wait(timeout: .now() + timeout)
            }
        }.map { $0 }  // a member run of its own, cancelled first
        let waiting: [Guarantee<Int>] =
            switch waits {
            case .oneMemberRun: [shared.map { $0 }]
            case .oneCalledMember: [shared]
            case .twoCalledMembers: [shared, shared]
            }
        handle.send(when(fulfilled: [blocker] + waiting).run(some: { _ in }))
        detachThread { starter.fulfill(1) }  // A: runs the work's steps
        #expect(stepRuns.wait(timeout: .now() + timeout) == .success)
        let cancelledOnB = Delivery<Void>()
        detachThread {  // B
            handle.all.first?.cancel()
            cancelledOnB.send(())
        }
        #expect(workEnded.wait() != nil)
        #expect(cancelledOnB.wait() != nil)
        #expect(nextStep.value == 0, "the work's step after the one that cancelled U ran")
    }
}

extension SharingReach {
    /// Sharing: "Cancelling a run leaves the others waiting. Once every waiting run is
    /// cancelled, so is the work, and the next run starts it again". Run U alone waits for the
    /// work (through a `when`'s member: `reach` names U). Thread B cancels U first and is held in
    /// the cancel handler of U's other member before its cancel reaches the shared one; the
    /// work's step, on thread A, then cancels U, which stops the work (`Run.cancel(call:)`: the
    /// work is reached by U's cancel), but `Shared` still counts U as waiting. Run V, never
    /// cancelled, joins before the work has stopped: it waits for the stopped work, and ends by
    /// cancellation with it, where it should go on (had U's leave come first, V would have
    /// started the work again). A run that joins a cancelled run of the work now waits for it to end,
    /// then starts it again.
    @Test func aRunThatJoinsWorkStoppedByItsOnlyWaitersCancelIsNotCancelledWithIt() {
        let (start, starter) = Guarantee<Int>.pending()
        let handle = Delivery<RunHandle>()
        let first = Counter()
        let stepRuns = DispatchSemaphore(value: 0)
        let blockerCancelled = DispatchSemaphore(value: 0)
        let stepCancelled = DispatchSemaphore(value: 0)
        let vJoined = DispatchSemaphore(value: 0)
        let workEndedForB = DispatchSemaphore(value: 0)
        let shared = start.map { value -> Int in
            guard first.increment() == 1 else { return value }  // a later run of the work
            stepRuns.signal()
            _ = blockerCancelled.wait(timeout: .now() + timeout)
            handle.wait()?.cancel()  // U, which B is cancelling
            stepCancelled.signal()
            _ = vJoined.wait(timeout: .now() + timeout)
            return value
        }.ensure { workEndedForB.signal() }.share()
        let kept = Delivery<Resolver<Int, Never>>()
        let blocker = Guarantee<Int> { resolver in
            kept.send(resolver)  // never resolved
            resolver.onCancel { _ in
                blockerCancelled.signal()
                _ = workEndedForB.wait(timeout: .now() + timeout)
            }
        }.map { $0 }  // a member run of its own, cancelled first
        handle.send(when(fulfilled: [blocker, shared]).run(some: { _ in }))
        detachThread { starter.fulfill(1) }  // A: runs the work's steps
        #expect(stepRuns.wait(timeout: .now() + timeout) == .success)
        let cancelledOnB = Delivery<Void>()
        detachThread {  // B
            handle.all.first?.cancel()
            cancelledOnB.send(())
        }
        #expect(stepCancelled.wait(timeout: .now() + timeout) == .success)
        let vEnded = Delivery<Void>()
        let vValue = Delivery<Int>()
        // A step, not the completion, records the value: it runs before the ensure step.
        let v = shared.map { value in
            vValue.send(value)
            return value
        }.ensure { vEnded.send(()) }.run(some: { _ in })
        vJoined.signal()
        #expect(cancelledOnB.wait() != nil)
        #expect(vEnded.wait() != nil)
        #expect(!v.isCancelled)
        #expect(vValue.all == [1], "V, never cancelled, ended by cancellation with U's")
    }
}
