import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A cancel handler that the operation's work adds on a thread of its own as the run ends by
/// cancellation: `Resolver.onCancel` calls it at once ("at once if the run already is"), and
/// `RunHandle` says the `ensure` steps still ahead run once the handlers have returned (the
/// glossary's hold: "a handler added late, until it returns"). `Run.release` moves the run to
/// its end in its lock section and runs the `ensure` steps after it (`end`, which skips the stages
/// ahead first): a handler added in between was once called at once, holding nothing (for a
/// member the combination calls too), and the `ensure` step ran while it had not returned. It
/// now waits for the end (`Run.callLate`). The steps between the operation and the `ensure` step
/// widen that gap; the handler waits, at most `grace`, for the `ensure` step, which must come
/// either after it returns or before it is called.
@Suite struct CancellingWithLateHandlers {
    static let steps = 100_000
    static let grace = DispatchTimeInterval.seconds(1)

    @Test(arguments: [false, true])
    func anEnsureStepWaitsForAHandlerAddedAsTheCancelledRunEnds(member: Bool) {
        for _ in 0..<2 { Self.round(member: member) }
    }

    static func round(member: Bool) {
        let resolvers = Delivery<Resolver<Int, Never>>()
        let ensured = Delivery<Void>()
        let log = Log()
        let operation = Guarantee<Int> { resolvers.send($0) }
        var chain = member ? when(fulfilled: [operation]).map { $0[0] } : operation
        for _ in 0..<steps { chain = chain.map { $0 } }
        let handle = chain.ensure {
            log.record("ensure")
            ensured.send(())
        }.run(some: { _ in Issue.record("cancelled: no completion") })
        guard let resolver = resolvers.wait() else {
            Issue.record("the operation was not called")
            return
        }
        let added = Delivery<Void>()
        detachThread {
            // As soon as the run has moved to `cancelled`, before its end ran the ensure step.
            let ending = spin(until: {
                handle.run.locked { $0.state.isCancelled && $0.state.hasEnded }
            })
            guard ending else { return added.send(()) }
            resolver.onCancel { _ in
                log.record("handler")
                _ = ensured.wait(timeout: grace)  // the ensure step must not come meanwhile
                log.record("handler returned")
            }
            added.send(())
        }
        handle.cancel()
        #expect(added.wait() != nil)
        #expect(ensured.wait() != nil)
        #expect(eventually { log.all.count == 3 })
        let order = log.all
        #expect(
            order == ["handler", "handler returned", "ensure"]
                || order == ["ensure", "handler", "handler returned"])
    }

    /// A handler added while the end runs its first `ensure` step is called before the second,
    /// still ahead (`RunHandle`: the `ensure` steps still ahead run once the handlers have
    /// returned; `ensure(_:)`: on cancellation, once the cancel handlers have returned). The
    /// first fix called it after the last `ensure` step (found by a review of that fix). Its
    /// operation run alone, and a member that a combination calls.
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

extension Delivery {
    /// Waits for the first value for at most `bound`; `nil` if none came.
    func wait(timeout bound: DispatchTimeInterval) -> Value? {
        let deadline = DispatchTime.now() + bound
        while all.isEmpty {
            guard DispatchTime.now() < deadline else { return nil }
            usleep(200)
        }
        return all.first
    }
}
