import Dispatch
import Testing

@testable import Future

/// A review of two fixes: entered chains let go of where their steps ran (2880428, 2f748af), and
/// a token's ties counting the invalidations since a run started (ea2fbdc, 92ebbad, f727c5d).
@Suite("Fixes review") struct FixesReview {
    /// Running.swift, `run(_:)`: "The steps of a promise that a step returned go once they have
    /// run, on the thread that ran them." The promise a step returns here ends with a hop: its
    /// step, the witness's, runs on `start`, then the hop takes the run to `hop`. The run put
    /// the hop's step back on its plan, so the entered chain is not finished as the run leaves
    /// `start` (`Run.awaitQueue`), and it goes where the run ends, on `hop`.
    @Test func aStepOfAnEnteredPromiseThatEndsWithAHopIsReleasedWhereItRan() {
        let start = MarkedQueue("rfix.start")
        let hop = MarkedQueue("rfix.hop")
        let released = Delivery<Bool>()
        let ended = Delivery<Bool>()
        start.queue.async {
            Guarantee(value: ())
                .then { _ -> Guarantee<Void> in
                    let witness = QueueWitness(start, released)
                    return Guarantee(value: ()).map { _ = witness }.on(hop.queue)
                }
                .run(some: { ended.send(hop.isCurrent) })
        }
        #expect(ended.wait() == true)
        #expect(released.wait() == true, "the step's witness went away off the queue it ran on")
    }
}

@MainActor extension FixesReview {
    /// `InvalidationToken`: "a run started before an `invalidate()` skips it, ... a run started
    /// after does not". An await whose task is already cancelled cancels its run before the run
    /// starts; the run reaches its `ignoringCancel()` promise cancelled and starts the work,
    /// whose tied step ties in that run. The token was invalidated once, long before, and never
    /// again: the step should run. `Run.start` records the count of invalidations only for a run
    /// it finds idle, so this run's count stays 0, and its first tie takes the token as
    /// invalidated since the run started.
    @Test func aTiedStepOfWorkThatACancelledAwaitStartsRunsAfterAnEarlierInvalidate() async {
        let screen = Screen()
        let token = InvalidationToken()
        token.invalidate()  // before the run is even made; nothing invalidates it after
        let ended = Delivery<Void>()
        let work = Guarantee(value: 1)
            .done(on: .main, tiedTo: token) { screen.items.append($0) }
            .map { ended.send(()) }
            .ignoringCancel()
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }  // cancelled before the run starts
            return await work.value
        }
        #expect(await task.value == nil, "the awaited run was not cancelled")
        #expect(await ended.arrival() != nil)
        #expect(screen.items == [1], "a tied step of a run made after the invalidate was skipped")
    }
}
