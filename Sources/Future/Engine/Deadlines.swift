// Engine/Deadlines.swift: the time runs wait for, `delay`'s hops and `timeout`'s scopes (Run.swift):
// every deadline in one heap, under one lock, behind one Dispatch timer source. Arming a
// deadline costs a heap insertion, and disarming one a removal that lets go of its run at once;
// the source is rescheduled only for a deadline earlier than the one it waits for. (A source
// for each deadline cost a third of a `timeout`'s time, and a delayed work item, when cancelled,
// holds what it captured until its deadline.)

import Dispatch

nonisolated extension Engine {
    /// One deadline a run waits for: a hop that goes on at a time, or a scope that expires.
    final class Deadline: @unchecked Sendable {
        let time: DispatchTime
        /// The run, until the deadline fires or is disarmed (`nil` for one never armed). Guarded by
        /// the heap's lock.
        @exclusivity(unchecked) fileprivate var run: Run?
        /// The queue a hop goes on on; `nil` for a scope's deadline.
        let queue: DispatchQueue?
        /// Its place in the heap, or -1 once it fired or was disarmed. Guarded by the heap's lock.
        @exclusivity(unchecked) fileprivate var index = -1

        init(_ time: DispatchTime, for run: Run?, on queue: DispatchQueue?) {
            self.time = time
            self.run = run
            self.queue = queue
        }
    }

    /// The deadlines every run waits for, earliest first.
    final class Deadlines: @unchecked Sendable {
        static let shared = Deadlines()

        private let lock = Lock()
        private let source = DispatchSource.makeTimerSource(queue: .global())
        // Guarded by `lock`.
        /// A binary heap, by time.
        @exclusivity(unchecked) private var heap: [Deadline] = []
        /// When the source fires next, if it waits.
        @exclusivity(unchecked) private var scheduled: DispatchTime?

        private init() {
            source.setEventHandler { Deadlines.shared.fire() }
            source.activate()
        }

        /// Arms `deadline`, which fires `run.deadlinePassed(_:)` unless disarmed first.
        func arm(_ deadline: Deadline) {
            lock.withLock {
                deadline.index = heap.count
                heap.append(deadline)
                siftUp(heap.count - 1)
                if scheduled.map({ deadline.time < $0 }) ?? true {
                    scheduled = deadline.time
                    source.schedule(deadline: deadline.time, leeway: .nanoseconds(0))
                }
            }
        }

        /// Disarms `deadline`, if it has not fired, and lets go of its run: the run, outside the
        /// lock, as it may be the last reference.
        func disarm(_ deadline: Deadline) {
            let run = lock.withLock { () -> Run? in
                guard deadline.index >= 0 else { return nil }
                remove(at: deadline.index)
                return deadline.run.take()
            }
            _ = consume run
        }

        /// The source fired: the deadlines that passed go to their runs, the earliest first, each
        /// on its queue (a global one for a scope), not on this one: a run goes on where its
        /// deadline sends it, and what it does there must not hold up the other deadlines.
        private func fire() {
            let passed = lock.withLock { () -> [(Deadline, Run?)] in
                let now = DispatchTime.now()
                var passed: [(Deadline, Run?)] = []
                while let first = heap.first, first.time <= now {
                    remove(at: 0)
                    passed.append((first, first.run.take()))
                }
                scheduled = heap.first?.time
                if let next = scheduled { source.schedule(deadline: next, leeway: .nanoseconds(0)) }
                return passed
            }
            for case (let deadline, let run?) in passed {
                let handle = RunHandle(run)
                (deadline.queue ?? .global()).async { handle.run.deadlinePassed(deadline) }
            }
        }

        private func remove(at index: Int) {
            let removed = heap[index]
            let last = heap.removeLast()
            removed.index = -1
            guard index < heap.count else { return }
            heap[index] = last
            last.index = index
            siftUp(index)
            siftDown(last.index)
        }

        private func siftUp(_ start: Int) {
            var child = start
            while child > 0, heap[child].time < heap[(child - 1) / 2].time {
                swapAt(child, (child - 1) / 2)
                child = (child - 1) / 2
            }
        }

        private func siftDown(_ start: Int) {
            var parent = start
            while true {
                let left = 2 * parent + 1
                let right = left + 1
                var earliest = parent
                if left < heap.count, heap[left].time < heap[earliest].time { earliest = left }
                if right < heap.count, heap[right].time < heap[earliest].time { earliest = right }
                guard earliest != parent else { return }
                swapAt(parent, earliest)
                parent = earliest
            }
        }

        private func swapAt(_ first: Int, _ second: Int) {
            heap.swapAt(first, second)
            heap[first].index = first
            heap[second].index = second
        }
    }
}
