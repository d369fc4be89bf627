import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A review of 690607c. `when(resolved:concurrently:until:)`: "`stop` runs with each run of the
/// batch, beside the members"; the members "it never started that begin with `ignoringCancel()`
/// start their work as it ends". 690607c: "a batch's signal is not a member" (`Engine.join(...,
/// signals: 1)`), but only where a run skips the batch: `Join.cancelMembers` starts the ignored
/// work of `members.dropFirst(tally.started)`, which holds the signal (member 0) when the batch's
/// run is cancelled after its join is made (its cancel handler set) and before its launch loop
/// claims the signal.
@Suite struct SignalsCancelledAsABatchBegins {
    /// Batches whose run a second thread cancels as a first one reaches the batch. A signal that
    /// was claimed runs its `ensure` step (its run ends, or is skipped); the signal's
    /// `ignoringCancel()` work should start only then.
    ///
    /// On a thread of its own, not one of Swift's pool that other tests' timers and global
    /// queues need; the spins yield and are bounded, and the trials stop at the first that
    /// stalls, or after `budget`: under load each trial waits for two threads to share the
    /// cores, and 20,000 of them took a minute in the full suite.
    @Test func aBatchCancelledAsItBeginsStartsNoWorkOfASignalItNeverStarted() async {
        let work = Counter()
        let claimed = Counter()
        let signal = Guarantee<Void> { resolver in
            work.increment()
            resolver.fulfill(())
        }.ignoringCancel().ensure { claimed.increment() }
        let batch = when(resolved: [Promise<Int, TestError>(value: 1)], until: signal)
        let trials = 20_000
        let budget = DispatchTime.now() + .seconds(20)
        let rounds = Rounds()
        let ran = Counter()
        await onThread(stackSize: 1 << 20) {
            for trial in 0..<trials where rounds.goOn && DispatchTime.now() < budget {
                let (gate, opener) = Guarantee<Void>.pending()
                let handle = gate.then { _ in batch }.run { _ in }
                let ready = Counter()
                let done = DispatchSemaphore(value: 0)
                detachThread {
                    ready.increment()
                    guard spin(until: { ready.value >= 2 }) else {
                        done.signal()
                        return
                    }
                    for _ in 0..<(trial % 251) { _ = ready.value }  // to sweep the window
                    handle.cancel()
                    done.signal()
                }
                ready.increment()
                guard rounds.waited(spin(until: { ready.value >= 2 })) else { break }
                opener.fulfill(())
                guard rounds.waited(done.wait(timeout: .now() + timeout) == .success) else {
                    break
                }
                ran.increment()
            }
        }
        #expect(rounds.goOn, "a trial that did not end, after \(ran.value)")
        usleep(100_000)  // (all of it is synchronous: a margin)
        #expect(
            work.value == claimed.value,
            """
            the signal's work started \(work.value) times, the signal \(claimed.value), in \
            \(ran.value) trials
            """)
    }
}
