// Engine/Deadlines.swift: the time Dispatch's time operators wait for, `delay`'s hops (Run.swift)
// and the alarms of `timeout` (Timeout.swift): every deadline in one heap, under one lock, behind
// one Dispatch timer source. Arming a deadline costs a heap insertion, and disarming one a removal
// that lets go of what it would call at once; the source is rescheduled only for a deadline
// earlier than the one it waits for. (A source for each deadline cost a third of a `timeout`'s
// time, and a delayed work item, when cancelled, holds what it captured until its deadline.)

import Dispatch

nonisolated extension Engine {
    /// One deadline: what to call on `queue` when it passes, unless disarmed first.
    final class Deadline: @unchecked Sendable {
        let time: DispatchTime
        let queue: DispatchQueue
        /// What it calls, until it fires or is disarmed, and its place in the heap while it is
        /// armed. Guarded by the heap's lock.
        fileprivate var guarded: (fire: (@Sendable () -> Void)?, index: Int?)

        init(_ time: DispatchTime, on queue: DispatchQueue, _ fire: @escaping @Sendable () -> Void)
        {
            self.time = time
            self.queue = queue
            guarded = (fire, nil)
        }
    }

    /// Calls `fire` on a global queue at `time`, or, if `time` has passed, at once (behind the
    /// runs this thread deferred: see `Nesting.afterWaiting`), so that a `timeout` of zero fails
    /// work that waits as soon as it waits, and the innermost of nested ones first. Returns what
    /// cancels it.
    @usableFromInline static func setAlarm(
        at time: DispatchTime, _ fire: @escaping @Sendable () -> Void
    ) -> @Sendable () -> Void {
        guard time > .now() else {
            Nesting.afterWaiting(fire)
            return {}
        }
        let deadline = Deadline(time, on: .global(), fire)
        Deadlines.shared.arm(deadline)
        return { Deadlines.shared.disarm(deadline) }
    }

    /// The deadlines every run waits for, earliest first.
    final class Deadlines: @unchecked Sendable {
        static let shared = Deadlines()

        private let lock = Lock()
        private let source = DispatchSource.makeTimerSource(queue: .global())
        /// A binary heap, by time, and when the source fires next, if it waits. Guarded by
        /// `lock`, which orders every access: so they skip exclusivity checks.
        @exclusivity(unchecked) private var guarded: (heap: [Deadline], scheduled: DispatchTime?) =
            ([], nil)

        private init() {
            source.setEventHandler { Deadlines.shared.fire() }
            source.activate()
        }

        /// Arms `deadline`, which calls its closure on its queue unless disarmed first.
        func arm(_ deadline: Deadline) {
            lock.withLock {
                deadline.guarded.index = guarded.heap.count
                guarded.heap.append(deadline)
                siftUp(guarded.heap.count - 1)
                if guarded.scheduled.map({ deadline.time < $0 }) ?? true { schedule(deadline.time) }
            }
        }

        /// Disarms `deadline`, if it has not fired, and lets go of its closure: outside the lock,
        /// as it may keep the last reference to a run.
        func disarm(_ deadline: Deadline) {
            let fire = lock.withLock { deadline.guarded.index.flatMap { remove(at: $0) } }
            _ = consume fire
        }

        /// The source fired: the deadlines that passed are called, the earliest first, each on
        /// its queue, not on this one: a run goes on where its deadline sends it, and what it
        /// does there must not hold up the other deadlines.
        private func fire() {
            var passed: [(DispatchQueue, (@Sendable () -> Void)?)] = []
            lock.withLock {
                let now = DispatchTime.now()
                while let first = guarded.heap.first, first.time <= now {
                    passed.append((first.queue, remove(at: 0)))
                }
                schedule(guarded.heap.first?.time)
            }
            for case (let queue, let fire?) in passed { queue.async(execute: fire) }
        }

        /// Has the source fire at `time`; with `nil` (no deadline left), not again.
        private func schedule(_ time: DispatchTime?) {
            guarded.scheduled = time
            time.map { source.schedule(deadline: $0, leeway: .nanoseconds(0)) }
        }

        /// Takes the deadline at `index` out, and returns its closure: the last deadline takes its
        /// place, then moves up or down to where its time puts it.
        private func remove(at index: Int) -> (@Sendable () -> Void)? {
            swapAt(index, guarded.heap.count - 1)
            let removed = guarded.heap.removeLast()
            if index < guarded.heap.count { siftDown(siftUp(index)) }
            removed.guarded.index = nil
            return removed.guarded.fire.take()
        }

        /// Moves the deadline at `index` up while it is earlier than its parent; returns where it
        /// stopped.
        @discardableResult private func siftUp(_ index: Int) -> Int {
            var child = index
            while child > 0, isEarlier(child, than: (child - 1) / 2) {
                swapAt(child, (child - 1) / 2)
                child = (child - 1) / 2
            }
            return child
        }

        /// Moves the deadline at `index` down while a child is earlier than it.
        private func siftDown(_ index: Int) {
            var parent = index
            var child = 2 * parent + 1
            while child < guarded.heap.count {
                if child + 1 < guarded.heap.count, isEarlier(child + 1, than: child) { child += 1 }
                guard isEarlier(child, than: parent) else { return }
                swapAt(parent, child)
                parent = child
                child = 2 * parent + 1
            }
        }

        private func isEarlier(_ first: Int, than second: Int) -> Bool {
            guarded.heap[first].time < guarded.heap[second].time
        }

        private func swapAt(_ first: Int, _ second: Int) {
            guarded.heap.swapAt(first, second)
            guarded.heap[first].guarded.index = first
            guarded.heap[second].guarded.index = second
        }
    }
}
