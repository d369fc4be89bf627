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
@Suite(.serialized) struct CancelPromises {
    /// A cancel handler that the operation's work adds from a thread of its own while the run is
    /// being cancelled (the canceller still in the handler added before) is called at once, as
    /// the run already is cancelled (`Resolver.onCancel`); the run has not ended yet, and its
    /// `ensure` steps run once the cancel handlers have returned (`RunHandle`): this one too.
    @Test func aHandlerAddedOnAnotherThreadAsTheRunIsCancelledReturnsBeforeItsEnd() {
        let log = Log()
        let cancelling = Delivery<Void>()
        let lateHandlerStarted = Counter()
        let ended = Delivery<Void>()
        let handle = Guarantee<Int> { resolver in
            resolver.onCancel { _ in
                cancelling.send(())
                spin(until: { lateHandlerStarted.value > 0 }, for: .seconds(1))
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
}
