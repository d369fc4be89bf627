import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Found by a review of fd6e965: the test shows a documented promise that the code after that fix
/// broke, and failed on it (10 of 10, with a control that passed).
@Suite(.serialized) struct SharingWorkLoops {
    /// A cache of a shared promise, which lets go of it (Shared.swift: "the caller may have
    /// dropped the promise (`work.share().run(...)`, a cache that lets go)").
    final class Cache: @unchecked Sendable {
        private let lock = TestLock()
        private var kept: Guarantee<Int>?
        var shared: Guarantee<Int>? {
            get { lock.withLock { kept } }
            set { lock.withLock { kept = newValue } }
        }
    }

    /// What the work's race waits for besides its fallback: the shared promise itself (an
    /// operation alone, whose resolver reports to the race, so to the work's own run), through a
    /// step (a member run inside the work's run), or, the control, a promise that has nothing to
    /// do with the work (no loop).
    enum Member: CaseIterable, Sendable { case itself, throughAStep, unrelated }

    /// fd6e965. `Shared.reach`: "That run may be inside the work ..., which makes the runs'
    /// `outer` links a loop"; `Shared.settle`: "it lets go of the run it named (`reach`) now".
    /// Run.swift: "A handle, or a resolver an operation kept, may keep the run long after its
    /// end: not what the chains' steps captured" — nothing else keeps an ended run. A shared
    /// promise's work races its own shared promise (`member`) against a fallback and a member
    /// whose step is under way on thread X. The run that started the work leaves: the run inside
    /// the work is the only one waiting, and `reach` names it the work's `outer` (the work's run
    /// itself, or a member run whose `outer` is the work's run): a loop of strong references. The
    /// cache lets go of the shared promise. The fallback wins; the race cancels the other
    /// members: the one that waits for the work leaves, so the work is cancelled as abandoned;
    /// its run ends once X's step returns, after the shared state is gone: its completion
    /// (`Done { [weak self] in self?.settle(...) }`) finds no `self`, so nothing takes the
    /// `outer` link, and the work's run, ended, keeps itself alive forever.
    @Test(arguments: Member.allCases)
    func workThatRacesItsOwnSharedPromiseIsLetGoOfOnceItEnds(member: Member) {
        let cache = Cache()
        let (gate, gateResolver) = Guarantee<Int>.pending()
        let (slowGate, slowResolver) = Guarantee<Int>.pending()
        let (never, neverResolver) = Guarantee<Int>.pending()
        let workRun = WeakReference<Engine.Run>()
        let slowRuns = DispatchSemaphore(value: 0)
        let slowGoesOn = DispatchSemaphore(value: 0)
        let workEnded = Delivery<Void>()
        cache.shared = Guarantee<Int>(value: 0).then { _ -> Guarantee<Int> in
            workRun.value = Engine.Nesting.drivenRun
            let own: Guarantee<Int> =
                switch member {
                case .itself: cache.shared!
                case .throughAStep: cache.shared!.map { $0 }
                case .unrelated: never
                }
            let slow = slowGate.map { value -> Int in
                slowRuns.signal()
                _ = slowGoesOn.wait(timeout: .now() + timeout)
                return value
            }
            return race([own, gate.map { $0 }, slow])
        }.ensure { workEnded.send(()) }.share()
        let first = cache.shared!.run()
        // The race's member that waits for the work is then the only run waiting; the control's
        // first run leaves once the fallback has won, so that its work is abandoned as late.
        if member != .unrelated { first.cancel() }
        cache.shared = nil  // the cache lets go
        #expect(workRun.value != nil)
        detachThread { slowResolver.fulfill(0) }  // X
        #expect(slowRuns.wait(timeout: .now() + timeout) == .success)
        gateResolver.fulfill(1)  // the fallback wins: the work is abandoned, and waits for X
        first.cancel()
        usleep(100_000)  // what the cancels let go of is gone
        slowGoesOn.signal()
        #expect(workEnded.wait() != nil)
        #expect(
            holds(within: .seconds(2)) { workRun.value == nil },
            "the work's run, ended, is never let go of")
        if let run = workRun.value {  // what keeps it: its `outer` link, back to itself
            let outer = run.locked { $0.outer }
            let loops = outer === run || outer?.locked { $0.outer } === run
            Issue.record("the work's run keeps its outer link, which loops back to it: \(loops)")
        }
        withExtendedLifetime(neverResolver) {}
    }
}
