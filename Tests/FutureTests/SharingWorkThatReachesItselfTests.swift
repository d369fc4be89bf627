import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Found by review 8 (async and sharing): each test shows a documented promise that the engine
/// breaks, and fails on the code it was written against.
@Suite(.serialized) struct SharingWorkReach {
    final class Box: @unchecked Sendable { var shared: Guarantee<Int>? }

    /// RunHandle: "Cancelling is idempotent and safe from any thread"; Sharing: the work may run
    /// the shared promise (`whatTheWorkCapturedMayRunTheSharedPromiseAsItGoes`), and "Cancelling
    /// a run leaves the others waiting". A shared promise's work races the shared promise itself
    /// (an operation alone, or through a step), or a share of it, against a fallback. The run
    /// that started the work leaves: a run inside the work is then the only run waiting, and
    /// `Shared.reach` names it as the work's `outer`: the runs' `outer` links loop. A step of the
    /// fallback then cancels an unrelated run, whose cancel walks `outer` from the run this thread
    /// drives to see whether the step cancels a run it is part of: the walk must end (it spun
    /// forever, a thread at 100 %, before the walk, now `Run.isInside(where:)`, stopped at a loop).
    enum Own: CaseIterable, Sendable { case itself, throughAStep, aShare, aShareThroughAStep }

    @Test(arguments: Own.allCases)
    func aStepOfWorkThatRacesItsOwnSharedPromiseCancelsAnotherRun(own: Own) {
        let box = Box()
        let (gate, gateResolver) = Guarantee<Int>.pending()
        let (never, neverResolver) = Guarantee<Int>.pending()
        let other = never.run()
        let walked = Delivery<Bool>()
        box.shared = Guarantee<Int>(value: 0).then { _ -> Guarantee<Int> in
            let member: Guarantee<Int> =
                switch own {
                case .itself: box.shared!
                case .throughAStep: box.shared!.map { $0 }
                case .aShare: box.shared!.map { $0 }.share()
                case .aShareThroughAStep: box.shared!.map { $0 }.share().map { $0 }
                }
            let fallback = gate.map { value -> Int in
                other.cancel()  // walks the links from the run this thread drives
                walked.send(true)
                return value
            }
            return race([member, fallback])
        }.share()
        let first = box.shared!.run()
        first.cancel()  // the race's member that joined the work waits for it alone
        detachThread { gateResolver.fulfill(1) }
        #expect(walked.wait() == true, "cancel() from the fallback's step never returned")
        #expect(other.isCancelled)
        withExtendedLifetime(neverResolver) {}
    }
}

extension SharingWorkReach {
    /// RunHandle: "A step that cancels its own run stops it before the next step, even when
    /// another thread's cancel came first (a step … of a shared promise's work that only this run
    /// waits for, too)". Run U waits for a shared promise's work through two members of a `when`
    /// (`members` 2: the shared promise itself, twice, whose resolvers both report to U; 1: once,
    /// the control). Thread B cancels U first, and is held inside the cancel handler of U's first
    /// member before its cancel has reached the shared members. The work's step, on thread A,
    /// then cancels U: only U waits for the work, yet the work's next step runs, as
    /// `Shared.reach` names the run that waits only if one resolver waits, not one run.
    @Test(arguments: [1, 2])
    func aStepOfWorkThatOneRunWaitsForThroughTwoMembersStopsAsItCancelsIt(members: Int) {
        let (start, starter) = Guarantee<Int>.pending()
        let handle = Delivery<RunHandle>()
        let stepRuns = DispatchSemaphore(value: 0)
        let blockerCancelled = DispatchSemaphore(value: 0)
        let stepCancelled = DispatchSemaphore(value: 0)
        let nextStep = Counter()
        let workEnded = Delivery<Void>()
        let shared = start.map { value -> Int in
            stepRuns.signal()
            _ = blockerCancelled.wait(timeout: .now() + timeout)
            handle.wait()?.cancel()  // U, which B is cancelling
            stepCancelled.signal()
            return value
        }.map { value -> Int in
            nextStep.increment()
            return value
        }.ensure { workEnded.send(()) }.share()
        let kept = Delivery<Resolver<Int, Never>>()
        let blocker = Guarantee<Int> { resolver in
            kept.send(resolver)  // never resolved
            resolver.onCancel { _ in
                blockerCancelled.signal()
                _ = stepCancelled.wait(timeout: .now() + timeout)
            }
        }.map { $0 }  // a member run of its own, cancelled first
        let waiting = Array(repeating: shared, count: members)
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
