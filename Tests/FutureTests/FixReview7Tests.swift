import Dispatch
import Testing

@testable import Future

/// Review of the fix that has a run that joins a shared promise whose work's run is cancelled wait
/// for that run's end, then start the work again (`Shared.settle`, `restart`).
@Suite(.serialized) struct FixReview7 {
    /// What the work's calls count, under a `TestLock`.
    final class Counts: @unchecked Sendable {
        var calls = 0
        /// Calls made while the first run's cleanup was under way.
        var callsDuringCleanup = 0
        var inCleanup = false
        /// Calls whose resolver has not been called.
        var outstanding = 0
        var most = 0
        var resolvers: [Resolver<Int, Never>] = []
    }

    /// share(): "Work that ends by cancellation, abandoned [...], ends so the runs that waited for
    /// it as it was cancelled; a run that comes later waits for that end (the work's `ensure`
    /// steps still ahead), then starts the work again: it never runs twice at once." With an
    /// `ensure(on:)` step, the cancelled run's end does not wait for the cleanup it queued
    /// (ensure(on:): "the run's end does not wait for it"): a run that comes as the cleanup runs
    /// starts the work beside it.
    @Test func abandonedWorkWithEnsureOnDoesNotRunAgainBesideItsQueuedCleanup() {
        let lock = TestLock()
        let counts = Counts()
        let queue = DispatchQueue(label: "FixReview7.cleanup")
        let cleanupEntered = DispatchSemaphore(value: 0)
        let gate = DispatchSemaphore(value: 0)
        let work = Guarantee<Int> { resolver in
            let call = lock.withLock {
                counts.calls += 1
                if counts.inCleanup { counts.callsDuringCleanup += 1 }
                return counts.calls
            }
            if call > 1 { resolver.fulfill(7) }  // the first waits, until cancelled
        }
        .ensure(on: queue) {
            let first = lock.withLock { () -> Bool in
                guard counts.calls == 1, !counts.inCleanup else { return false }
                counts.inCleanup = true
                return true
            }
            guard first else { return }
            cleanupEntered.signal()
            _ = gate.wait(timeout: .now() + timeout)  // opened below; bounded
            lock.withLock { counts.inCleanup = false }
        }
        let shared = work.share()
        let first = shared.run(some: { _ in })
        first.cancel()  // abandoned: the work's run is cancelled, and queues its cleanup
        #expect(cleanupEntered.wait(timeout: .now() + timeout) == .success)
        let secondValue = Delivery<Int>()
        let second = shared.run(some: { secondValue.send($0) })
        let beside = lock.withLock { counts.callsDuringCleanup }
        gate.signal()
        #expect(secondValue.wait() == 7)
        #expect(beside == 0, "the work started again while its cancelled run's cleanup ran")
        withExtendedLifetime(second) {}
    }

    /// share(): "it never runs twice at once". Work that ignores the cancel goes on after its
    /// run, abandoned, ended (ignoringCancel(): "the run itself ends without waiting for the
    /// work"): the next run starts the work again beside it.
    @Test func abandonedWorkThatIgnoresCancelDoesNotRunTwiceAtOnce() {
        let lock = TestLock()
        let counts = Counts()
        let work = Guarantee<Int> { resolver in
            lock.withLock {
                counts.calls += 1
                counts.outstanding += 1
                counts.most = max(counts.most, counts.outstanding)
                counts.resolvers.append(resolver)
            }
        }
        .ignoringCancel()
        let shared = work.share()
        let first = shared.run(some: { _ in })
        first.cancel()
        let secondEnded = Delivery<Void>()
        let second = shared.ensure { secondEnded.send(()) }.run(some: { _ in })
        let most = lock.withLock { counts.most }
        // Ends what is under way.
        for resolver in lock.withLock({ counts.resolvers }) {
            lock.withLock { counts.outstanding -= 1 }
            resolver.fulfill(1)
        }
        #expect(secondEnded.wait() != nil)
        #expect(most == 1, "the work ran twice at once: \(most) calls under way")
        withExtendedLifetime(second) {}
    }
}
