import Dispatch
import Testing

@testable import Future

@Suite struct CombiningResolvers {
    /// A resolver answers for its own member only: member 0 ended with a value, member 1 still
    /// waits, and cancelling the combination cancels member 1, while member 0's resolver (kept
    /// by its work) goes on saying that its member was not cancelled, and runs no handler; for
    /// members the join calls, and for members in runs of their own.
    @Test(arguments: [false, true])
    func aFinishedMembersResolverDoesNotReportALaterMembersCancellation(inRuns: Bool) {
        let first = Delivery<Resolver<Int, TestError>>()
        let second = Delivery<Resolver<Int, TestError>>()
        let finished = Promise<Int, TestError> { resolver in
            first.send(resolver)
            resolver.fulfill(1)  // ends at once
        }
        let waiting = Promise<Int, TestError> { second.send($0) }
        let members = inRuns ? [finished.map { $0 }, waiting.map { $0 }] : [finished, waiting]
        let handle = when(fulfilled: members).run { _ in
            Issue.record("cancelled: no completion")
        }
        let kept = first.wait()
        #expect(second.wait()?.isCancelled == false)
        #expect(kept?.isCancelled == false)
        handle.cancel()
        #expect(second.all.first?.isCancelled == true)
        #expect(kept?.isCancelled == false, "member 0 ended with a value; it was never cancelled")
        let handled = Counter()
        kept?.onCancel { _ in handled.increment() }
        #expect(handled.value == 0)
    }

    /// A member's resolver goes on saying that its operation was cancelled once its handlers have
    /// run, and runs a handler added later at once, as an operation run alone does: the
    /// temporary resolver its handlers are given, let go of, does not end the member again.
    @Test func aCancelledMembersResolverStaysCancelledAfterItsHandlersRan() {
        let delivered = Delivery<Resolver<Int, TestError>>()
        let handled = Counter()
        let member = Promise<Int, TestError> { resolver in
            resolver.onCancel { _ in handled.increment() }
            delivered.send(resolver)
        }
        let handle = when(fulfilled: [member, member]).run { _ in
            Issue.record("cancelled: no completion")
        }
        #expect(delivered.wait() != nil)
        #expect(eventually { delivered.all.count == 2 })
        handle.cancel()
        #expect(handled.value == 2)
        for resolver in delivered.all {
            #expect(resolver.isCancelled)
            resolver.onCancel { _ in handled.increment() }
        }
        #expect(handled.value == 4, "a handler added once the member was cancelled runs at once")
    }

    /// A member whose own resolver cancelled it runs a handler added after that at once, as an
    /// operation run alone does (`Resolver.onCancel`: "at once if the run already is"; for a
    /// member, `isCancelled` says, the run is the member): the operation cancels its resolver
    /// first, as an API whose callback reports cancellation before the operation registered its
    /// handler does, then registers the handler.
    @Test(arguments: [false, true])
    func aMemberThatCancelledItselfRunsAHandlerAddedAfterAtOnce(inCombination: Bool) {
        let handled = Counter()
        let seenCancelled = Counter()
        let cancelling = Promise<Int, TestError> { resolver in
            resolver.cancel()
            if resolver.isCancelled { seenCancelled.increment() }
            resolver.onCancel { _ in handled.increment() }
        }
        let promise = inCombination ? when(fulfilled: [cancelling]).map { $0[0] } : cancelling
        _ = promise.run { _ in Issue.record("cancelled: no completion") }
        #expect(handled.value == 1, "the handler added once the operation was cancelled")
        #expect(seenCancelled.value == 1, "isCancelled, once the operation cancelled itself")
    }

    /// The resolver a cancel handler is given answers for a call that has ended: let go of, it
    /// reports nothing to its run or combination (which, for a call still pending, would end it).
    @Test func aCancelHandlersResolverReportsNothingAsItIsLetGoOf() {
        let recorder = Recorder()
        let handled = Counter()
        do {
            let resolver = Resolver<Int, TestError>(reporter: recorder, call: 0, of: operation)
            withExtendedLifetime(resolver) {
                resolver.onCancel { _ in handled.increment() }
                #expect(handled.value == 1)
                #expect(recorder.reports.isEmpty, "the handler's resolver reported its release")
            }
        }
        #expect(recorder.reports == ["cancel"], "the operation's own resolver reports it")
    }

    /// A resolver whose outcome counted reports nothing more as it is let go of (finding its
    /// call ended would take a lock); one whose outcome did not count (its call had ended)
    /// reports its release, which its run or combination ignores.
    @Test func aResolverWhoseOutcomeCountedReportsNothingAsItIsLetGoOf() {
        for counts in [true, false] {
            let recorder = Recorder(outcomesCount: counts)
            do {
                let resolver = Resolver<Int, TestError>(reporter: recorder, call: 0, of: operation)
                resolver.fulfill(1)
            }
            #expect(recorder.reports == (counts ? ["resolve"] : ["resolve", "cancel"]))
        }
    }
}

/// A reporter that records what a resolver reports to it.
private final class Recorder: Engine.Reporter, @unchecked Sendable {
    var reports: [String] = []
    let outcomesCount: Bool
    init(outcomesCount: Bool = true) { self.outcomesCount = outcomesCount }
    func resolve(
        _ call: Int, with write: (Engine.Slot) -> Void, carriedOnBy _: DispatchQueue?
    ) -> Bool {
        reports.append("resolve")
        return outcomesCount
    }
    func onCancel(_ call: Int, _ handler: @escaping @Sendable (any Engine.Reporter) -> Void) {
        handler(self)
    }
    func isCancelled(_ call: Int) -> Bool { true }
    func cancel(_ call: Int) -> Bool {
        reports.append("cancel")
        return false  // as a call no longer pending does: nothing to diagnose
    }
    /// A run never started: debug builds ask, before a resolver let go of is diagnosed, whether
    /// its run is cancelled.
    let run = Engine.Run.make(for: nil, completing: Engine.Outcomes<Int, TestError>.self)
}

/// An operation, for a resolver to be made for.
private let operation = Engine.Operation(file: #fileID, line: #line) {
    (_: Resolver<Int, TestError>) in
}
