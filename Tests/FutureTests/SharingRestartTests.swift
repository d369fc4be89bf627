import Dispatch
import Testing

@testable import Future

/// A run that joins a shared promise whose work's run is cancelled, but not yet ended, waits for
/// that end, then for a new run of the work (`Shared.join`), found by a review of a first fix that
/// started the new run at once.
@Suite(.serialized) struct SharingRestart {
    /// What the work's steps count, under a `TestLock`.
    final class Counts: @unchecked Sendable {
        var calls = 0
        var callsDuringEnsure = 0
        var inEnsure = false
    }

    /// `share(cancelsWhenAbandoned:)`: "with `cancelsWhenAbandoned: false`, the work goes on, and
    /// the next run waits for it or gets its outcome"; the model check's spec (ModelCheckTests):
    /// "work that ends by cancellation ends its waiting runs so and runs again for the next run".
    /// The work's operation cancels its own run (run 1 waits for it); as the run's end runs the
    /// work's `ensure` step, held, run 2 joins. It must wait for that run (which ends by
    /// cancellation, and run 1 with it), not start the work again beside the `ensure` step still
    /// under way: the work would run twice at once, and run 1, whose work ended by cancellation,
    /// would get the second run's value.
    @Test func aRunThatJoinsAsTheCancelledWorkRunsItsEnsureStepDoesNotStartItBesideIt() {
        let lock = TestLock()
        let counts = Counts()
        let ensureEntered = DispatchSemaphore(value: 0)
        let gate = DispatchSemaphore(value: 0)
        let work = Guarantee<Int> { resolver in
            let call = lock.withLock {
                counts.calls += 1
                if counts.inEnsure { counts.callsDuringEnsure += 1 }
                return counts.calls
            }
            if call == 1 { resolver.cancel() } else { resolver.fulfill(7) }
        }
        .ensure {
            let first = lock.withLock { () -> Bool in
                guard counts.calls == 1 else { return false }
                counts.inEnsure = true
                return true
            }
            guard first else { return }
            ensureEntered.signal()
            _ = gate.wait(timeout: .now() + timeout)  // opened below; bounded
            lock.withLock { counts.inEnsure = false }
        }
        let shared = work.share(cancelsWhenAbandoned: false)
        let firstValues = Delivery<Int>()
        let firstEnded = Delivery<Void>()
        let handle = Delivery<RunHandle>()
        detachThread {
            // A step, not the completion, records the value: it runs before the ensure step.
            let first = shared.map { value in
                firstValues.send(value)
                return value
            }
            handle.send(first.ensure { firstEnded.send(()) }.run(some: { _ in }))
        }
        #expect(ensureEntered.wait(timeout: .now() + timeout) == .success)
        let secondEnded = Delivery<Void>()
        let second = shared.ensure { secondEnded.send(()) }.run(some: { _ in })
        let startedBeside = lock.withLock { counts.callsDuringEnsure }
        gate.signal()
        #expect(firstEnded.wait() != nil)
        #expect(secondEnded.wait() != nil)
        #expect(startedBeside == 0, "the work started again while its cancelled run's ensure ran")
        #expect(
            firstValues.all.isEmpty,
            "run 1 got a value though the work it waited for ended by cancellation")
        withExtendedLifetime((handle.wait(), second)) {}
    }

    /// What `share()` leaves out of "never runs twice at once" (a review found it promised too
    /// much): a cancelled run's end does not wait for an `ensure(on:)` cleanup it queued
    /// (`ensure(on:)`: "the run's end does not wait for it"), so the next run starts the work
    /// again while that cleanup is still held. (Its own cleanup then waits for the queue.)
    @Test func theNextRunDoesNotWaitForAnEnsureOnCleanupTheCancelledRunQueued() {
        let calls = Counter()
        let queue = DispatchQueue(label: "SharingRestart.cleanup")
        let cleanupEntered = DispatchSemaphore(value: 0)
        let secondCall = DispatchSemaphore(value: 0)
        let gate = DispatchSemaphore(value: 0)
        let work = Guarantee<Int> { resolver in
            guard calls.increment() > 1 else { return }  // the first waits, until cancelled
            secondCall.signal()
            resolver.fulfill(7)
        }
        .ensure(on: queue) {
            guard calls.value == 1 else { return }
            cleanupEntered.signal()
            _ = gate.wait(timeout: .now() + timeout)  // opened below; bounded
        }
        let shared = work.share()
        shared.run(some: { _ in }).cancel()  // abandoned: its cleanup is queued
        #expect(cleanupEntered.wait(timeout: .now() + timeout) == .success)
        let secondValue = Delivery<Int>()
        let second = shared.run(some: { secondValue.send($0) })
        let started = secondCall.wait(timeout: .now() + timeout)
        gate.signal()
        #expect(started == .success, "the next run waited for the queued cleanup")
        #expect(secondValue.wait() == 7)
        withExtendedLifetime(second) {}
    }

    /// The same for work under `ignoringCancel()`, whose run "ends without waiting for the
    /// work": abandoned, the next run starts the work again beside the call still under way.
    @Test func theNextRunDoesNotWaitForWorkThatIgnoresTheCancel() {
        let resolvers = Delivery<Resolver<Int, Never>>()
        let work = Guarantee<Int> { resolvers.send($0) }.ignoringCancel()
        let shared = work.share()
        shared.run(some: { _ in }).cancel()
        let secondValue = Delivery<Int>()
        let second = shared.run(some: { secondValue.send($0) })
        let underWay = resolvers.all.count
        for resolver in resolvers.all { resolver.fulfill(1) }
        #expect(underWay == 2, "the next run did not start the work beside the ignored call")
        #expect(secondValue.wait() == 1)
        withExtendedLifetime(second) {}
    }
}
