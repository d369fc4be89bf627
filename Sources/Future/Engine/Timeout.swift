// Engine/Timeout.swift: one run of a `timeout`, on any clock (Time.swift): its work, in a run of
// its own inside the timeout's run, raced against an alarm that is set once the work waits.
// Builds on Run.swift (the work's run, whose completion the timeout is, and the timeout's run,
// whose end it holds when that run is cancelled) and on a clock's alarm (Deadlines.swift,
// Timeline.swift).
//
// A state machine: each event is a method that changes `state` in one lock section (under the
// work's run's lock, which the run never holds as it calls out to the timeout), then does
// what the state it left says. The transitions (r: the timeout's resolver; a: what cancels the
// alarm, `nil` until it is set; a?: set or not, for a deadline already past rings as it is set,
// and work may end before; f: the call r(failure(error())), which makes the timeout's error;
// "the run": the one the timeout is part of):
//
//   state           event                                  new state      then
//   going(r, nil)   the work's start returns (`waits`)     unchanged      set the alarm
//   going(r, nil)   the alarm is set, a (`armed`)          going(r, a)    -
//   any other       the alarm is set, a                    unchanged      cancel the alarm
//   going(r, a?)    the alarm rings (`rang`)               ringing(f)     cancel the work
//   going(r, a?)    the work ends, with an outcome or      ended          cancel a if set, then
//                   cancelled (`complete`)                                r(outcome) or cancel r
//   ringing(f)      the work ends                          ended          f: r(failure(e))
//   holding(run)    the work ends                          ended          release the run
//   going, ringing  the run is cancelled, its end held     holding(run)   cancel the alarm and
//                   (`runCancelled`; see `Run.hold()`)                    the work
//   ended           the run is cancelled, its end held     unchanged      release the hold
//   any other       any other event                        unchanged      -
//
// The life of a timeout that fires, step by step: on Dispatch's clock, with a deadline still
// ahead, its work an operation that keeps its resolver (a bare name is this file's, `Type.name`
// that type's, unless a file is named; r: the timeout's resolver, in the timeout's run; the work's
// run: the run of the work, inside it):
//  1. The timeout's run calls its operation (`Engine.timeout`'s, through its `Source` step and
//     `Run.perform`), which reads the deadline and makes the `Timeout` (`init`): `going(r, nil)`;
//     the work's run, made inside the timeout's run (`Run.make`'s `cancelledWith`); `runCancelled`
//     registered on the timeout's call; then the work's run starts (`Run.start`), and its
//     operation returns unresolved: it waits for its resolver (`Run.operationReturned`:
//     `calling` to `awaitingResolver`, as in Run.swift's "A call in calls", resolved later).
//  2. The work waits (`waits`), so the operation sets the alarm (`Engine.setAlarm(at:_:)`,
//     Deadlines.swift, which arms a `Deadline`; a deadline already past rings at once, on this
//     thread: `Nesting.afterWaiting`) and keeps what cancels it (`armed`: `going(r, a)`). The
//     operation returns: the timeout's run waits for r.
//  3. The deadline passes: the timer source fires (`Deadlines.fire`), which queues the deadline's
//     closure on a global queue, where the alarm rings (`rang`; on a manual clock, on the thread
//     that advances the clock): `going` to `ringing(f)`, then the work's run is cancelled
//     (`Run.cancel(call:)`).
//  4. The work's run goes as Run.swift's "A cancel in calls" tells: `awaitingResolver(1,-)` to
//     `cancelling(-,1,1)`; `Nesting.cancelling` calls its call's handlers (none here), then the
//     canceller's `release`, the last hold (`ending`), then `end(with: nil)` (`cancelled(1)`),
//     whose completion is the timeout: `complete(nil)`. (Work that waits for a queue ends at the
//     canceller's `release` too; work in a step or a call, as its driving thread stops, and work
//     that waits for a combination or a timeout, at that one's release, unless the canceller's
//     `release` comes later: the last of the two ends the run, and the chain goes on there.)
//  5. `complete`: `ringing(f)` to `ended`, then f, `r(.failure(error()))`: `Run.resolve`
//     (Run.swift) on the timeout's run, which waits for it, so the run goes on (`drive`) on this
//     thread, the alarm's.
//
// (Work whose operation lets its resolver go unresolved is cancelled, and the timeout, hearing of
// it in `complete`, ends cancelled too: only work that keeps its resolver, or waits for a queue or
// a timer, lets the alarm ring.)
//
// So the first of the work and the alarm to settle decides; work that settles at once wins with
// no alarm set, even with a deadline already past; and the alarm's failure, as the run's cancel,
// waits for the work's run to stop (its `ensure` steps run, nothing of it after).

nonisolated extension Engine {
    /// A `timeout` on any clock: its work, raced against an alarm that fails with `error()`. The
    /// alarm's deadline, `deadline(interval)`, is read as each run of the timeout starts (given
    /// `interval`, the closure captures nothing to allocate); the alarm is set (by `alarm`, which
    /// returns what cancels it) once the work waits: on Dispatch's clock, `Engine.setAlarm(at:_:)`
    /// (Deadlines.swift), which rings on a global queue; on another, `setAlarm(at:on:_:)`
    /// (Timeline.swift); either calls `rang`, below. The first stage keeps the work's chain, if
    /// it has one (an operation alone has no steps), whose `ensure` steps a run cancelled before
    /// it reaches the timeout still runs (see `Run.skip`).
    @inlinable static func timeout<Value, Failure, Interval: Sendable, Instant: Sendable>(
        _ work: Promise<Value, Failure>, failingWith error: @escaping @Sendable () -> Failure,
        after interval: Interval, deadline: @escaping @Sendable (Interval) -> Instant,
        alarm: @escaping @Sendable (Instant, @escaping @Sendable () -> Void) -> @Sendable () -> Void
    ) -> Promise<Value, Failure> {
        let operation = Operation(file: #fileID, line: #line) {
            (resolver: Resolver<Value, Failure>) in
            let due = deadline(interval)
            let timeout = Timeout(resolver, work)
            if timeout.waits { timeout.armed(alarm(due) { timeout.rang(error) }) }
        }
        return Promise(last: Source<Value, Failure>(operation, work: work.chain))
    }

    /// One run of a timeout, which starts the work's run as it is made, and is its completion.
    @usableFromInline
    final class Timeout<Value, Failure: Swift.Error>: Completion, @unchecked Sendable {
        /// The work's run, whose lock guards the timeout's state too: one lock fewer to make, and
        /// the run calls out to its completion only once it has let go of its lock.
        @usableFromInline let work: Run
        /// Read and changed only under the work's lock, which orders every access: so it skips
        /// exclusivity checks.
        @exclusivity(unchecked) @usableFromInline var state: State

        /// Where the timeout is (see the table in the file's header).
        @usableFromInline enum State {
            /// The work goes on; once it waits, the alarm is set, and then cancelled by `alarm`.
            case going(Resolver<Value, Failure>, alarm: (@Sendable () -> Void)?)
            /// The alarm rang: the work is cancelled, and the timeout fails (`fail`) once it
            /// stopped. A closure, not the error: no case's layout depends on the types, so that
            /// letting go of a timeout looks up no type at run time (3 % of an unfired one).
            case ringing(fail: @Sendable () -> Void)
            /// Its run was cancelled, and the run's end waits for the work's run to stop.
            case holding(Run)
            /// It settled, or was cancelled.
            case ended
        }

        /// Starts the work, in a run that the cancel of the timeout's run reaches from the start.
        @inlinable init(_ resolver: Resolver<Value, Failure>, _ promise: Promise<Value, Failure>) {
            work = .make(for: promise.chain, completing: Timeout.self, cancelledWith: resolver.run)
            state = .going(resolver, alarm: nil)
            // Its reporter's own handler: `Resolver.onCancel` would wrap it in one more closure.
            resolver.reporter.onCancel(resolver.call) { [self] in runCancelled($0.run) }
            work.start(promise, self)
        }

        /// Moves, under the work's run's lock (a timeout has none of its own: see `work`), to the
        /// state that `next` returns for the state now, or stays with `nil`. Returns the state
        /// left (`nil` if it stayed), let go of after the lock.
        @inlinable func move(_ next: (State) -> State?) -> State? {
            work.locked { _ in
                guard let moved = next(state) else { return nil }
                defer { state = moved }
                return state
            }
        }

        /// Whether the work goes on: it waits, as its start returned.
        @inlinable var waits: Bool {
            work.locked { _ in if case .going = state { true } else { false } }
        }

        @inlinable func armed(_ cancel: @escaping @Sendable () -> Void) {
            let left = move {
                if case .going(let r, nil) = $0 { .going(r, alarm: cancel) } else { nil }
            }
            if left == nil { cancel() }
        }

        /// The alarm rang. `error()` is made only if it is the alarm that fails the timeout: an
        /// alarm may ring late, as the timeout ends (a clock's task whose sleep was cancelled).
        @inlinable func rang(_ error: @escaping @Sendable () -> Failure) {
            let left = move {
                if case .going(let r, _) = $0 { .ringing { r(.failure(error())) } } else { nil }
            }
            if left != nil { _ = work.cancel(call: nil) }
        }

        /// The work's run ended, with `outcome` or (`nil`) by cancellation.
        @inlinable func complete(_ outcome: sending Swift.Result<Value, Failure>?, of _: Run) {
            switch move({ _ in .ended }) {
            case .going(let resolver, let alarm)?:
                alarm?()
                resolver.settle(with: outcome)
            // The resolver fails as `rang` set (`resolver(.failure(error()))`), with no queue.
            case .ringing(let fail)?: fail()
            case .holding(let run)?: run.release()
            case .ended?, nil: break
            }
        }

        /// Its run was cancelled: it cancels the alarm and the work, and holds the run's end
        /// until the work's run has stopped. It comes once (a call's cancel handlers are called
        /// once), never to a timeout `holding`, which it sets.
        @inlinable func runCancelled(_ run: Run) {
            run.hold()
            let left = move {
                switch $0 {
                case .going, .ringing: .holding(run)
                case .holding, .ended: nil
                }
            }
            guard let left else { return run.release() }  // no work to wait for
            if case .going(_, let alarm?) = left { alarm() }
            _ = work.cancel(call: nil)
        }
    }
}
