// Engine/Shared.swift: what `share()` and `pending()` keep: the one run of the work that the runs
// of the promise wait for (for `pending()`, the resolver they wait for), then its outcome. Builds
// on Run.swift: the work runs in a run of its own (apart from the run that started it, whose
// user's run its tied steps check their tokens against), and each run of the promise waits for it
// as an operation waits for its resolver.
//
// A state machine. `State` is all there is to know; each event is a method that changes it in one
// lock section (`on`) and returns an `Action`, done after the lock, as it calls into runs. A run
// that waits gets a number (`arrivals`), counted across every state, so that a run that leaves
// late (its cancel raced with the outcome) never names a later one. The transitions, a row a
// `case` (n: the run that joins or leaves; r: the run of the work, or pending()'s own; ws: the runs
// that wait, by number; k: the first of them to wait for the next run of the work, or -):
//
//   state                 event                            new state                action
//   making(nil)           pending()'s operation is called  making(resolver)         -
//   making(resolver)      pending() hands it out           running(nil, r, [:], -)  -
//   settled(o)            join n                           settled(o)               resume n
//   idle(work)            join n                           running(work, r, [n], -) wait n, start r
//   running(w, r, ws, -)  join n, r cancelled, w not nil   running(w, r, ws+n, n)   wait n
//   running(w, r, ws, k)  join n, else                     running(w, r, ws+n, k)   wait n
//   making                join n                           traps: no run sees it
//   running(w, r, ws, -)  leave n, none left, cancels      running(w, r, [], n+1)   cancel r
//                         when abandoned (so w is not nil)
//   running(w, r, ws, k)  leave n, else                    running(w, r, ws-n, k)   -
//   idle, settled         leave n (resumed as it left)     the same                 -
//   running(w, r, ws, k)  r ends with o, or w is nil       settled(o)               resume ws
//   running(w, r, ws, -)  r ends by cancellation (o nil)   idle(w)                  resume ws
//   running(w, r, ws, k)  r ends by cancellation           running(w, r', ws≥k, -)  resume ws<k,
//                                                          (idle(w) if ws≥k empty)  start r'
//
// o is an outcome, or `nil` for cancellation: `settled(nil)` (pending()'s resolver cancelled, or
// let go of unused) ends every run by cancellation; "resume" gives the outcome in the order the
// runs came. `making` is pending()'s, before it returns its promise and its resolver: no run can
// join, none waits to leave, and its own run cannot end. A cancelled run of the work ends by
// cancellation, which the runs that came after its cancel must not share: they wait for its end
// (its `ensure` steps may still run: the work's steps never run twice at once, but for what the
// end does not wait for, `ensure(on:)` cleanups and `ignoringCancel()` work), then for a new run.
// As ws changes, a work cancelled when abandoned has r name the one run whose cancel reaches it,
// for a step of the work that cancels that run (`reach`).

import Dispatch

nonisolated extension Engine {
    /// The one run of a shared promise's work, the runs waiting for it, and its outcome once it
    /// has one.
    final class Shared<Value: Sendable, Failure: Swift.Error>: @unchecked Sendable {
        private typealias Done = Callback<Value, Failure>
        private let lock = Lock()
        // Guarded by `lock`.
        private var state: State
        private var arrivals = 0
        /// How many of the waiting resolvers each run has (a combination's members may be many),
        /// so that `reach` knows at once whether one run waits.
        private var waitingRuns: [ObjectIdentifier: Int] = [:]
        /// Whether the run of the work is cancelled when every waiting run has left.
        private let cancelsWhenAbandoned: Bool

        private enum State {
            /// `pending()`'s, until its operation is given the resolver that `pending()` hands out.
            case making(Resolver<Value, Failure>?)
            /// No run of the work is under way: the next run of the promise starts one.
            case idle(Promise<Value, Failure>)
            /// The work (`nil` for a pending promise, whose resolver brings the outcome) runs on
            /// `Run`, and these runs, keyed by number, wait for it; once that run is cancelled,
            /// those from number `restart` on wait for the next run of the work, which starts as
            /// this one ends.
            case running(
                Promise<Value, Failure>?, Run, [Int: Resolver<Value, Failure>], restart: Int?)
            /// Every run gets the outcome at once, or (`nil`) ends by cancellation.
            case settled(Swift.Result<Value, Failure>?)
        }

        /// What an event leaves to do after the lock.
        private enum Action {
            /// The run of the resolver waits, as the number given, and first starts the work on
            /// the run given, if any.
            case wait(Resolver<Value, Failure>, Int, starting: (Promise<Value, Failure>, Run)?)
            /// The run of the resolver goes on at once with the outcome or (`nil`) by cancellation.
            case resume(Resolver<Value, Failure>, Swift.Result<Value, Failure>?)
            /// These runs go on, as the run of the work ended: in the order they came, through
            /// `Nesting.settling`, with the outcome or (`nil`) by cancellation, carried on by the
            /// queue given (`Resolver.resolve(_:carriedOnBy:)`); then the work starts on the run
            /// given, if any, for the runs that came after the cancel.
            case settle(
                [Resolver<Value, Failure>], Swift.Result<Value, Failure>?,
                starting: (Promise<Value, Failure>, Run)?, carriedOnBy: DispatchQueue?)
            /// Every run that waited for the work left: its run is cancelled.
            case cancelWork(Run)
        }

        /// Keeps `work`, or for `pending()` (`nil`), waits for its resolver.
        init(_ work: Promise<Value, Failure>?, cancelsWhenAbandoned: Bool) {
            state = work.map(State.idle) ?? .making(nil)
            self.cancelsWhenAbandoned = cancelsWhenAbandoned
        }

        // The work may be a shared promise, whose `Shared` keeps more work: it is released as a
        // level of releases (see `Nesting`), as a `Source` releases what it keeps.
        deinit {
            Nesting.release({ state as Any }, by: { state = .settled(nil) })
            lock.free()
        }

        /// Changes the state by `event`, in one lock section, then does the action it returns
        /// (`nil`: none). The state is lent `inout`, so that `event` consumes it (and changes the
        /// `waiting` of a case in place, not a copy), and the compiler checks that each `case`
        /// sets the next. What the state lets go of, `event` puts in `dropped`, let go of after
        /// the lock (see `Lock`): a resolver may be its run's last reference, and the work's
        /// steps may run the promise.
        private func on(_ event: (inout State, inout Any?) -> Action?) {
            var dropped: Any?
            let action = lock.withLock { event(&state, &dropped) }
            withExtendedLifetime(dropped) {}
            action.map(perform)
        }

        /// What `pending()` keeps, and the resolver it hands out: the resolver of an operation
        /// that a run of its own calls at once, so that it reports as any resolver does, but only
        /// while a run waits for it: a promise made and never run (or no longer) has lost nothing.
        static func pending(file: StaticString, line: UInt) -> (Shared, Resolver<Value, Failure>) {
            let shared = Shared(nil, cancelsWhenAbandoned: false)
            let run = Run.make(for: nil, completing: Done.self)
            // With no lock: nothing else has `shared` before this returns; and `immediately`, so
            // that the operation has been called, and `making` holds its resolver, once `start`
            // returns.
            let operation = Promise(file: file, line: line) { shared.state = .making($0) }
            // Its outcome is a user's resolver's, which carries the runs that wait on no queue.
            run.start(
                operation, Done { shared.settle($1, of: $0, carriedOnBy: nil) }, immediately: true)
            guard case .making(let resolver?) = shared.state else { preconditionFailure("unmade") }
            shared.state = .running(nil, run, [:], restart: nil)
            #if DEBUG
                resolver.diagnosesRelease = shared.waits
            #endif
            return (shared, resolver)
        }

        /// Whether a run waits, and is not cancelled (its handler, which leaves, may wait for a
        /// cancel handler under way), nor is the waiting member of a combination that cancelled
        /// it (its handler comes after those of the members before it): a pending promise's
        /// resolver, let go of unresolved, is diagnosed only then. (Under this lock: no lock
        /// section of a run or of a combination takes a shared promise's lock, so the order is
        /// safe.)
        private func waits() -> Bool {
            lock.withLock {
                guard case .running(_, _, let waiting, _) = state else { return false }
                return waiting.values.contains { !$0.isCancelled && !$0.run.isCancelledOrInsideOne }
            }
        }

        /// The operation of every run of the promise.
        func join(_ resolver: Resolver<Value, Failure>) {
            on { state, _ in
                // A settled state answers at once, and stays as it is.
                if case .settled(let outcome) = state { return .resume(resolver, outcome) }
                arrivals += 1
                waitingRuns[ObjectIdentifier(resolver.run), default: 0] += 1
                switch consume state {
                case .idle(let work):
                    let waiting = [arrivals: resolver]
                    // Made, not started (`begin` starts it, after the lock): a run that leaves
                    // before then cancels it, and the work does not begin.
                    let run = Run.make(
                        for: work.chain, completing: Done.self, apartFrom: resolver.run)
                    reach(run, from: waiting)
                    state = .running(work, run, waiting, restart: nil)
                    return .wait(resolver, arrivals, starting: (work, run))
                case .running(let work, let run, var waiting, var restart):
                    waiting[arrivals] = resolver
                    // Its cancel may have come from the work itself, or from a step that the
                    // cancel of its only waiting run reached: this run waits for the next.
                    if restart == nil, work != nil, run.locked({ $0.state.isCancelled }) {
                        restart = arrivals
                    }
                    if restart == nil { reach(run, from: waiting) }
                    state = .running(work, run, waiting, restart: restart)
                    return .wait(resolver, arrivals, starting: nil)
                case .making, .settled: preconditionFailure("no run sees making; settled is above")
                }
            }
        }

        /// Waiting run `number` was cancelled; when none is left, the work is cancelled, if it is
        /// to be, and the runs that come next wait for its end to start it again.
        private func leave(_ number: Int) {
            on { state, dropped in
                switch consume state {
                case .running(let work, let run, var waiting, let restart):
                    let left = waiting.removeValue(forKey: number)
                    if let left {
                        let leaving = ObjectIdentifier(left.run)
                        let count = waitingRuns[leaving]!
                        waitingRuns[leaving] = count > 1 ? count - 1 : nil
                    }
                    dropped = left
                    state = .running(work, run, waiting, restart: restart)
                    // Once it is cancelled, the run of the work has nobody left to name.
                    guard restart == nil else { return .none }
                    reach(run, from: waiting)
                    guard waiting.isEmpty, cancelsWhenAbandoned, work != nil else { return .none }
                    state = .running(work, run, waiting, restart: arrivals + 1)
                    return .cancelWork(run)
                case let unchanged: state = unchanged  // idle, settled (resumed as it left)
                }
                return .none
            }
        }

        /// Names, as the run of the work's outer run, the one run whose cancel reaches it: the
        /// only run that waits (through one resolver or more: members of one combination that
        /// are the shared promise itself), when the work is cancelled as abandoned; else none.
        /// (Two runs inside one that wait, members of a combination that have steps after the
        /// shared promise, name none: its cancel stops the work as they leave.) A step of the work
        /// that cancels that run so stops before its next step (see `Run.cancel`), even as another
        /// thread's cancel of it is on its way down, or has cancelled the work. That run may be
        /// inside the work (work that waits for its own promise), which makes the runs' `outer`
        /// links a loop: the walk of them ends all the same (`Run.isInside(where:)`). Under the
        /// lock, as `waiting` changes, until the run is cancelled; the last run to leave stays
        /// named.
        private func reach(_ run: Run, from waiting: [Int: Resolver<Value, Failure>]) {
            guard cancelsWhenAbandoned, let only = waiting.first?.value.run else { return }
            run.locked { $0.outer = waitingRuns.count == 1 ? only : nil }
        }

        /// The run of the work, `run` (or, for `pending()`, its resolver's), ended with `outcome`
        /// or (`nil`) by cancellation: the runs that waited for it go on. The work, cancelled,
        /// stays to be run again, at once for the runs that came after the cancel.
        private func settle(
            _ outcome: sending Swift.Result<Value, Failure>?, of run: Run,
            carriedOnBy queue: DispatchQueue?
        ) {
            on { state, dropped in
                guard case .running(let work, let current, let waiting, let restart) = state,
                    current === run
                else { preconditionFailure("only the run of the work ends, and only once") }
                let ordered = waiting.sorted { $0.key < $1.key }
                waitingRuns = [:]
                guard outcome == nil, let work else {
                    dropped = work
                    state = .settled(outcome)
                    return .settle(
                        ordered.map { $0.value }, outcome, starting: nil, carriedOnBy: queue)
                }
                let first = restart ?? .max
                let after = ordered.filter { $0.key >= first }
                let ended = ordered.filter { $0.key < first }.map { $0.value }
                guard let starter = after.first?.value.run else {
                    state = .idle(work)
                    return .settle(ended, nil, starting: nil, carriedOnBy: queue)
                }
                for (_, waiter) in after {
                    waitingRuns[ObjectIdentifier(waiter.run), default: 0] += 1
                }
                let next = Dictionary(uniqueKeysWithValues: after)
                let again = Run.make(for: work.chain, completing: Done.self, apartFrom: starter)
                reach(again, from: next)
                state = .running(work, again, next, restart: nil)
                return .settle(ended, nil, starting: (work, again), carriedOnBy: queue)
            }
        }

        private func perform(_ action: Action) {
            switch action {
            case .wait(let resolver, let number, let start):
                // The run keeps its cancel handler, and so the shared state, until the call
                // resolves or is cancelled: a run calls an operation and lets go of it, and the
                // caller may have dropped the promise (`work.share().run(...)`, a cache that lets
                // go).
                resolver.onCancel { [self] _ in leave(number) }
                start.map(begin)
            case .resume(let waiter, let outcome):
                if let outcome { waiter(outcome) } else { waiter.cancel() }
            case .settle(let waiters, let outcome, let start, let queue):
                // In the order they came, as nested calls would order them, on a flat stack.
                // (Not through `Resolver.settle`, which reads the queue itself: a frame fewer at
                // each level of shares nested deep.)
                Nesting.settling(waiters) {
                    if let outcome { $0.resolve(outcome, carriedOnBy: queue) } else { $0.cancel() }
                }
                start.map(begin)
            case .cancelWork(let run): _ = run.cancel(call: nil)
            }
        }

        /// Starts the work on `run`, which `join` or `settle` made.
        private func begin(_ work: Promise<Value, Failure>, on run: Run) {
            run.start(
                work,
                Done { [weak self] run, outcome in
                    // Its steps are done: it lets go of the run it named (`reach`) now, so that
                    // shares nested deep are not let go of as a chain of runs, each the last to
                    // hold the next, and a loop (a run inside the work) goes, even once the shared
                    // promise has gone.
                    _ = run.locked { $0.outer.take() }
                    self?.settle(outcome, of: run, carriedOnBy: Nesting.queueHere)
                })
        }
    }
}
