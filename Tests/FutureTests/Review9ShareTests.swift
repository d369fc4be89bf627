import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Found by review 9 (sharing): each test shows a documented promise that the engine breaks, and
/// fails on the code it was written against.
@Suite(.serialized) struct Review9ShareReach {
    /// How run U waits for the shared work: through members of one `when`, each either the
    /// shared promise itself (an operation alone, which the join calls: its resolver reports to
    /// U) or a step after it (a member run of its own, inside U).
    enum Waits: CaseIterable, Sendable {
        case oneMemberRun, twoMemberRuns, aCalledMemberAndAMemberRun
    }

    /// RunHandle: "A step that cancels its own run stops it before the next step, even when
    /// another thread's cancel came first (a step … of a shared promise's work that only this run
    /// waits for and that cancels when abandoned, too)"; `Shared.reach`: "the only run that waits
    /// (through one resolver or more: members of one combination)". Only run U waits for the
    /// work, through two members of one `when`; thread B cancels U first and is held in the cancel
    /// handler of U's first member before its cancel reaches the others. The work's step, on
    /// thread A, then cancels U: its next step must not run. It runs when a member that waits is
    /// a run of its own (`waitingRuns` counts two runs, so `reach` names none).
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
            case .twoMemberRuns: [shared.map { $0 }, shared.map { $0 }]
            case .aCalledMemberAndAMemberRun: [shared, shared.map { $0 }]
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

/// The README: "Combinations nested in combinations (`when`, …) and `share()`s stacked on
/// `share()`s run, complete, cancel and are released on a 512 KiB stack at any depth (tested
/// 10,000 deep in debug and release builds)". (`Nesting`'s tests build and drop theirs on a large
/// stack.) A shared promise is an operation alone, which keeps its `Shared`, which keeps its work
/// while no run of it is under way: ten thousand `share()`s stacked are released one inside the
/// other, with no level of releases (`Nesting.release`) between them. In a child process, where
/// a stack overflow fails the test instead of ending the test run.
@Suite struct Review9ShareRelease {
    static let depth = 10_000

    enum Use: String, CaseIterable, Codable, Sendable { case neverRun, runAndCancelled }

    #if os(macOS) || os(Linux)
        @Test(arguments: Use.allCases)
        func tenThousandStackedSharesAreReleasedOnASmallStack(use: Use) async {
            await #expect(processExitsWith: .success) { [use] in
                let ended = Delivery<Void>()
                onThread(stackSize: smallStack) {
                    let innermost = Promise<Int, TestError> { _ in }  // never settles
                    var promise = innermost
                    for _ in 0..<Self.depth { promise = promise.share() }
                    if use == .runAndCancelled {
                        // Every level's work cancelled as abandoned: each is idle again, and keeps
                        // its work.
                        promise.ensure { ended.send(()) }.run { _ in }.cancel()
                    }
                }
                if use == .runAndCancelled { #expect(ended.wait() != nil) }
            }
        }
    #endif
}

extension Review9ShareReach {
    /// Sharing: "Cancelling a run leaves the others waiting. Once every waiting run is
    /// cancelled, so is the work, and the next run starts it again". Run U alone waits for the
    /// work (through a `when`'s member: `reach` names U). Thread B cancels U first and is held in
    /// the cancel handler of U's other member before its cancel reaches the shared one; the
    /// work's step, on thread A, then cancels U, which stops the work (`Run.cancel(call:)`: the
    /// work is reached by U's cancel), but `Shared` still counts U as waiting. Run V, never
    /// cancelled, joins before the work has stopped: it waits for the stopped work, and ends by
    /// cancellation with it, where it should go on (had U's leave come first, V would have
    /// started the work again).
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
        let v = shared.ensure { vEnded.send(()) }.run(some: { vValue.send($0) })
        vJoined.signal()
        #expect(cancelledOnB.wait() != nil)
        #expect(vEnded.wait() != nil)
        #expect(!v.isCancelled)
        #expect(vValue.all == [1], "V, never cancelled, ended by cancellation with U's")
    }
}
