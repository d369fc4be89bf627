import Dispatch
import Testing

@testable import Future

/// Review of a7c49f8 (a cancel handler added as a cancelled run's end is under way waits in
/// `ending`, and `end` calls it once every `ensure` step has run). `RunHandle` says "the
/// `ensure` steps still ahead run once those handlers have returned", Cancellation.md the same,
/// and `ensure(_:)` that it "runs on cancellation too (once the cancel handlers have returned)".
/// A handler added while the end runs its first `ensure` step is added, and could be called,
/// before the second `ensure` step starts: that step is still ahead. `end` calls it only after
/// the last one, so the second `ensure` step runs before the handler. (Its operation run alone,
/// and a member that a combination calls, whose late handler goes to the combination's run.)
@Suite struct FixReview5 {
    @Test(arguments: [false, true])
    func anEnsureStepStillAheadRunsOnceAHandlerAddedDuringTheEndHasReturned(member: Bool) {
        let resolvers = Delivery<Resolver<Int, Never>>()
        let firstEnsureStarted = Delivery<Void>()
        let added = Delivery<Void>()
        let log = Log()
        let operation = Guarantee<Int> { resolvers.send($0) }
        let chain = member ? when(fulfilled: [operation]).map { $0[0] } : operation
        let handle = chain.ensure {
            log.record("first ensure")
            firstEnsureStarted.send(())
            // The handler is added while this step runs: the next step is still ahead.
            #expect(added.wait() != nil)
        }.ensure {
            log.record("second ensure")
        }.run(some: { _ in Issue.record("cancelled: no completion") })
        guard let resolver = resolvers.wait() else {
            Issue.record("the operation was not called")
            return
        }
        detachThread {
            guard firstEnsureStarted.wait() != nil else { return }
            resolver.onCancel { _ in log.record("handler") }
            added.send(())
        }
        handle.cancel()
        #expect(eventually { log.all.count == 3 })
        #expect(log.all == ["first ensure", "handler", "second ensure"])
    }
}
