// Engine/Timeline.swift: how a time operator waits on a clock you pass (Time.swift): a manual
// clock's timeline, its time and the timers set on it, under a lock, which the clock moves
// (ManualClock.swift) and the time operators set their timers on, with no task in between;
// Dispatch's timers for the standard clocks; or, for another clock, a task that sleeps.

import Dispatch

@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
nonisolated extension Engine {
    /// Calls `fire` when `clock` reaches `deadline`, and returns what cancels it. A manual clock
    /// keeps the timer, which fires as a test advances the clock; the standard clocks use
    /// Dispatch's timers (`Deadlines`), which cost no task; another clock sleeps in a task.
    @usableFromInline static func setAlarm<C: Clock<Duration>>(
        at deadline: C.Instant, on clock: C, _ fire: @escaping @Sendable () -> Void
    ) -> @Sendable () -> Void {
        if let manual = clock as? ManualClock, let deadline = deadline as? ManualClock.Instant {
            let timeline = manual.timeline
            guard let timer = timeline.schedule(at: deadline, fire) else {
                Nesting.afterWaiting(fire)  // a deadline the clock has reached, as Dispatch's
                return {}
            }
            return { _ = timeline.cancel(timer) }
        }
        if clock is ContinuousClock || clock is SuspendingClock {
            let interval = Guarantee<Void>.nanoseconds(clock.now.duration(to: deadline))
            return setAlarm(at: .now() + .nanoseconds(interval), fire)
        }
        let task = Task {
            try? await clock.sleep(until: deadline, tolerance: nil)
            fire()  // which a cancelled run ignores
        }
        return { task.cancel() }
    }

    /// A guarantee that succeeds when `clock` reaches `deadline()`, read as each of its runs
    /// starts (`after(_:clock:)`, `ManualClock.sleep`): an alarm that cancelling its run cancels.
    static func pause<C: Clock<Duration>>(
        on clock: C, until deadline: @escaping @Sendable () -> C.Instant
    ) -> Guarantee<Void> {
        Guarantee { resolver in
            let cancel = setAlarm(at: deadline(), on: clock) { resolver.fulfill() }
            resolver.onCancel { _ in cancel() }
        }
    }
}

@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
nonisolated extension ManualClock {
    /// The time and the timers of one clock. Sendable by its lock, which guards all its state:
    /// the timers it holds are `@Sendable` closures, called on the thread that advances the
    /// clock and released outside the lock.
    final class Timeline: @unchecked Sendable {
        private typealias Timer = (deadline: Instant, fire: @Sendable () -> Void)
        private let lock = Engine.Lock()
        private var instant: Instant
        /// Where the advances under way move time to: past `instant` while they fire timers, so
        /// that advances from several threads add up.
        private var horizon: Instant
        private var timers: [Int: Timer] = [:]  // by the order they were set
        private var timersSet = 0
        /// Held while a timer fires, so that one fires at a time: an advance from another thread
        /// waits, rather than move time past a timer whose steps still run on the firing thread
        /// (steps that hop to a queue, or that a level below runs later, run once it is let go
        /// of). Recursive, for an advance from a timer's steps.
        private let firing = Engine.Lock(recursive: true)

        init(now: Instant) { (instant, horizon) = (now, now) }

        deinit {
            lock.free()
            firing.free()
        }

        var now: Instant { lock.withLock { instant } }

        var count: Int { lock.withLock { timers.count } }

        /// Moves the horizon to `deadline`, or else `step` past it, for an advance; returns the
        /// time now, which `deadline` must not be before, and the horizon, where an advance by
        /// `step` moves time to. One step under the lock, so that an advance from another thread
        /// cannot come between.
        func claim(_ deadline: Instant?, by step: Duration) -> (now: Instant, horizon: Instant) {
            lock.withLock {
                horizon = max(horizon, deadline ?? max(horizon, instant).advanced(by: step))
                return (instant, horizon)
            }
        }

        /// Sets a timer that calls `fire` when time reaches `deadline`, and returns its number;
        /// `nil` if time has reached it, under the lock that an advance moves time under.
        func schedule(at deadline: Instant, _ fire: @escaping @Sendable () -> Void) -> Int? {
            lock.withLock {
                guard deadline > instant else { return nil }
                timersSet += 1
                timers[timersSet] = (deadline, fire)
                return timersSet
            }
        }

        /// Removes a timer if it has not fired, and returns its closure, to let go of outside the
        /// lock.
        func cancel(_ timer: Int) -> (@Sendable () -> Void)? {
            lock.withLock { timers.removeValue(forKey: timer)?.fire }
        }

        /// Fires the earliest timer due by `deadline` (any timer if `nil`), the first set of those
        /// due together, and says whether there was one. Time moves to the timer's deadline, or,
        /// when there is none, to `deadline`.
        func fireNext(until deadline: Instant?) -> Bool {
            firing.withLock {
                let due = lock.withLock { () -> Timer? in
                    // (With no `deadline`, every timer is due.)
                    let next = timers.lazy.filter {
                        $0.value.deadline <= deadline ?? $0.value.deadline
                    }
                    .min { ($0.value.deadline, $0.key) < ($1.value.deadline, $1.key) }
                    instant = max(instant, next?.value.deadline ?? deadline ?? instant)
                    return next.flatMap { timers.removeValue(forKey: $0.key) }
                }
                due?.fire()
                return due != nil
            }
        }

        /// Lets other work run: the steps queued on the main queue, jobs queued on `isolation`'s
        /// executor, then other tasks.
        ///
        /// A main-actor step hops with `DispatchQueue.main.async`; the main actor's own jobs can
        /// pass such blocks (measured in release builds: a `catch(on: .main)` after a
        /// `done(on: .main)` had not run after 32 yields in up to a quarter of advances). So, on
        /// the main actor, each round also waits behind what the main queue holds, and a few rounds
        /// follow hops that queue further hops.
        static func settle(_ isolation: isolated (any Actor)?) async {
            for _ in 0..<4 {
                if isolation is MainActor {
                    await withCheckedContinuation { (queued: CheckedContinuation<Void, Never>) in
                        DispatchQueue.main.async { queued.resume() }
                    }
                }
                for _ in 0..<8 { await Task.yield() }
            }
        }
    }
}
