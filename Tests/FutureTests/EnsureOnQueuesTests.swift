import Dispatch
import Foundation
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `ensure(on:)`'s promise of where the chain goes on after the cleanup ("back to the queue it
/// was on, if a hop took it there, ..., else on to a global queue: not on `queue`").
@Suite struct EnsureOnQueues {
    /// "A run cancelled while `body` runs (a `timeout` around it expired, say) makes that move all
    /// the same, and stops there: what goes on after it does not go on on `queue`". The work's
    /// run used to stop on the cleanup's queue as the cleanup returned, and the steps after the
    /// timeout went on there.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func theStepsAfterATimeoutThatStopsAnEnsureOnGoOnOffTheCleanupsQueue() {
        let key = DispatchSpecificKey<String>()
        let cleanup = DispatchQueue(label: "review8.cleanup")
        cleanup.setSpecific(key: key, value: "cleanup")
        let clock = ManualClock()
        let gate = DispatchSemaphore(value: 0)
        cleanup.async { _ = gate.wait(timeout: .now() + timeout) }  // until the alarm is set
        let place = Delivery<String>()
        Promise<Int, TestError>(value: 1)
            .ensure(on: cleanup) { clock.advance(by: .seconds(1)) }  // the deadline passes
            .timeout(.seconds(1), orFailWith: TestError("slow"), clock: clock)
            .recover { _ in -1 }
            .map { _ in place.send(DispatchQueue.getSpecific(key: key) ?? "elsewhere") }
            .run()
        gate.signal()
        #expect(place.wait() == "elsewhere")
    }

    /// After the cleanup, `ensure(on:)` goes back to the queue a hop took the chain to. Inside a
    /// `timeout`'s work, which runs in a run of its own, it forgets that queue and goes on on a
    /// global queue: wrapping work in a timeout moves its steps.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func ensureOnInsideATimeoutGoesBackToTheQueueTheChainWasOn() {
        let key = DispatchSpecificKey<String>()
        let work = DispatchQueue(label: "review8.work")
        work.setSpecific(key: key, value: "work")
        let cleanup = DispatchQueue(label: "review8.cleanup2")
        cleanup.setSpecific(key: key, value: "cleanup")
        let places = Log()
        let finished = Delivery<Void>()
        Guarantee(value: 1).on(work)
            .then { _ in
                Promise<Int, TestError>(value: 1)
                    .ensure(on: cleanup) {
                        places.record(DispatchQueue.getSpecific(key: key) ?? "none")
                    }
                    .map { _ in places.record(DispatchQueue.getSpecific(key: key) ?? "none") }
                    .timeout(.seconds(60), orFailWith: TestError("slow"))
            }
            .run { _ in finished.send(()) }
        #expect(finished.wait() != nil)
        #expect(places.all == ["cleanup", "work"])
    }

    /// The same inside a member of a combination, which runs in a run of its own too.
    @Test func ensureOnInsideAMemberGoesBackToTheQueueTheChainWasOn() {
        let key = DispatchSpecificKey<String>()
        let work = DispatchQueue(label: "review8.work3")
        work.setSpecific(key: key, value: "work")
        let cleanup = DispatchQueue(label: "review8.cleanup3")
        cleanup.setSpecific(key: key, value: "cleanup")
        let places = Log()
        let finished = Delivery<Void>()
        Guarantee(value: 1).on(work)
            .then { _ in
                when(fulfilled: [
                    Promise<Int, TestError>(value: 1)
                        .ensure(on: cleanup) {
                            places.record(DispatchQueue.getSpecific(key: key) ?? "none")
                        }
                        .map { _ in places.record(DispatchQueue.getSpecific(key: key) ?? "none") }
                ])
            }
            .run { _ in finished.send(()) }
        #expect(finished.wait() != nil)
        #expect(places.all == ["cleanup", "work"])
    }
}

/// `ensure(_:)` "runs body when the chain gets here ... and also when a run is cancelled before
/// it"; a run cancelled before it reaches a `timeout` runs the `ensure` steps of the timeout's
/// work (`Run.skip` walks its chain, `Stage.ahead`); a combination's members are promises of
/// their own, and one that never started runs none of its steps (`ensure`, Cancellation.md).
@Suite struct EnsureStepsAhead {
    /// The task is cancelled before the await starts the run, which so stops before its first
    /// step, the combination: its member never starts, and its `ensure` does not run.
    @Test func anEnsureInAMemberOfACombinationThatACancelledRunNeverReachedDoesNotRun() async {
        let ensured = Counter()
        let task = Task { () -> [Int]? in
            withUnsafeCurrentTask { $0?.cancel() }
            return await when(fulfilled: [Guarantee(value: 1).ensure { ensured.increment() }])
                .value
        }
        #expect(await bounded { await task.value } == .some(nil))  // (ended in time, cancelled)
        #expect(ensured.value == 0)
    }

    /// With a timeout around the work instead, its `ensure` runs: the timeout's work is a part
    /// of the run's chain.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func anEnsureInATimeoutsWorkThatACancelledRunNeverReachedRuns() async {
        let ensured = Counter()
        let task = Task { () -> Result<Int, TestError>? in
            withUnsafeCurrentTask { $0?.cancel() }
            return await Guarantee(value: 1).ensure { ensured.increment() }
                .setFailureType(to: TestError.self)
                .timeout(.seconds(9), orFailWith: TestError("slow"))
                .result
        }
        #expect(await bounded { await task.value } == .some(nil))  // (ended in time, cancelled)
        #expect(ensured.value == 1)
    }
}
