// Engine/Run.swift: a run, the one execution of a chain that a terminal starts, and the handle
// that cancels it. Builds on Chain.swift (the stages, the slot, the plan). A run is one
// allocation, a `ManagedBuffer`: its fields (its lock and state), then in its tail what its
// driving thread owns, its completion, its slot and the stack of the stages it has still to take:
//
//   header: Fields (lock, state, invalidationsBefore, outer)
//   tail:   Driver | completion | slot | stages
//
// (`fields`, `driver`, `afterDriver`, `slot`; a chain that needs more room spills: `Spill`, in
// Chain.swift.) Its `state` names where it is. Each event is a method below that changes the state
// in one lock section and returns what to do once the lock is let go of.
//
// The file, in order, one `MARK` a part: what a run keeps and its states (`RunHandle`, `Fields`,
// `Driver`, `State`, the class); making a run (`make`, `typedWork`, the parts of its tail); who
// gets its outcome (`Reporter`, `Completion` and its four kinds); starting and driving (`start`,
// `drive`); calling an operation, and its resolver (`perform`, `callOrEnter`, `operationReturned`,
// `resolve`, `onCancel`, `callLate`, then `Resolver.settle`, which calls the next for the work of a
// timeout or an `ignoringCancel()` promise, and `Resolver.resolve(_:carriedOnBy:)`, which every
// outcome goes through); hopping to a queue (`awaitQueue`, `queueArrived`); cancelling and ending
// (`cancel(call:)`, `hold`, `release`, `end`, `skipReached`, `skip`); ties to invalidation tokens
// (`isValid(_:)`).
//
// The life of a run, in calls: a terminal (through `Promise.start`, Running.swift) makes it
// (`make`) and starts it (`start(_:_:immediately:member:)`, which places its completion, then
// `start(_:immediately:member:)`, which pushes its chain's stages on its plan, the first on top,
// or puts an operation alone in its slot); it drives (`drive`, now or once the thread's stack has
// room), popping one stage at a time, while each step says what comes next; it calls an operation
// (`perform`: a `Source` step's, or an operation alone's through its typed work,
// `.callOperation`, which knows its types) and goes on when the operation's resolver reports
// (`resolve`), now or later, from any thread; the last step ran, the drive ends it (`end`): its
// completion gets the outcome (`.complete`, its typed work). Cancelled (`cancel(call:)`),
// its handlers run (`Nesting.cancelling`), the thread driving it stops it (`release(stopping:)`),
// and once nothing holds its end (`hold`, `release`) it ends (`end`): it skips the stages ahead,
// running their `ensure` steps, each after the cancel handlers added meanwhile (`callLate`, then
// `callLateHandlers`), and its completion hears of it (`.complete(nil)`): see "A cancel in calls".
//
// A call in calls, `Promise { resolver in resolver.fulfill(1) }.run { result in … }` step by step
// (a bare name is this file's, `Type.name` that type's, unless a file is named; t: the driving
// thread):
//  1. `Promise.start` (Running.swift): `make`, which notes, as the run is a user's, the count of
//     invalidations so far (`Engine.invalidations`, for its tied steps: `isValid(_:)`), then
//     `start(_:_:immediately:member:)`, which places the completion (`Outcomes`, the user's
//     closure) in the tail.
//  2. `start(_:immediately:member:)`: `idle` to `driving(t)`; the operation alone goes in the
//     slot, and `Driver.resumesAt` is `.operation`; then `drive`.
//  3. `drive`: a level on this thread's stack (`Nesting.nest`, which says no only past
//     `Nesting.limit` levels); `resumesAt` says `.operation`, so it calls the typed work
//     `.callOperation` (`typedWork`), which takes the `Operation` out of the slot and calls
//     `perform` with the run's types.
//  4. `perform`: `driving(t)` to `calling(t,1,-)`; a new `Resolver` for call 1; the user's closure
//     (`Operation.callAsFunction`, Chain.swift).
//  5. `resolver.fulfill(1)` (Resolver.swift): `callAsFunction`, then `resolve(_:carriedOnBy:)`
//     with no queue (this file, the end of its part on calling), then `Run.resolve`: the outcome
//     into the slot, `calling(t,1,-)` to `driving(t)`, and, as this is t, `resolvedHere` set.
//  6. The closure returns; `perform` lets go of the resolver, which reports nothing as it goes, as
//     its outcome counted (`resolve(_:carriedOnBy:)` cleared its `reportsRelease`; let go of
//     unresolved, it would cancel the call: `Resolver.deinit`), reads `resolvedHere` (no lock)
//     and returns `.proceed`.
//  7. `drive`'s loop pops no stage (an operation alone has none): `driving(t)` to `ended`, then
//     `end(with: slot)`, which calls the typed work `.complete`: the completion, moved out of the
//     tail, gets the outcome (`Outcomes.complete`: the user's closure, with the `Result`).
// Resolved later (the closure keeps its resolver and returns): at 6, `perform` returns `.called`;
// `operationReturned` moves `calling` to `awaitingResolver`, and the drive returns. The thread
// that resolves finds `awaitingResolver` in `Run.resolve`, moves it to `driving` (its own thread),
// and drives on (`drive`) to 7.
// A `then` whose closure returns a promise, after an operation alone, makes a chain of two stages:
// a `Source` (the operation, whose step calls `perform`; `Promise.last` makes it) and an `Entry`
// (the step): `then` (Chaining.swift; on a guarantee, its `Failure == Never` overload) calls
// `entering` (Chain.swift). The run's start loads them (`Plan.load`), the first on top of the
// plan. The `Entry`'s step calls the user's closure and, if the promise it returns is an operation
// alone, calls it in place (`callOrEnter`: `perform` again), else enters its chain (`.enter`:
// `drive` pushes its stages).
//
// A cancel in calls, a handle's `cancel()` of a run whose call c waits for the user's resolver
// (`awaitingResolver(c,hs)`), step by step:
//  1. `RunHandle.cancel()` (Cancellation.swift) calls `cancel(call: nil)` (a resolver's cancel
//     passes its call's number): under the lock, `awaitingResolver(c,hs)` to `cancelling(-,1,c)`,
//     the canceller's hold alone (a run being driven has its driving thread's too: the table).
//  2. `Nesting.cancelling`: c's handlers hs, then the cancels they queued, then `release`, all
//     before `cancel(call:)` returns; but for a cancel inside a cancel handler, queued, and done
//     once that handler has returned; and `release` after the runs that these made wait on
//     this thread for a level below, if any (`Nesting.cancelling`): a combination's members
//     that ignore cancel, started inside a shared promise's settle inside another's, say.
//  3. `release`: the last hold, so `cancelling(-,1,c)` to `ending(c,-)`, then `end(with: nil)`.
//  4. `end(with: nil)`: skips the stages ahead (`skip`: their `ensure` steps run, each after the
//     handlers added late: `callLateHandlers`, and the work of `ignoringCancel()` promises starts,
//     the rest waiting behind the runs a start made wait for a level below, if any), then
//     `callLateHandlers(last: true)` (`ending` to `cancelled(c)`), then the typed work
//     `.complete(nil)`, the completion's `complete(nil)`.
//     For a terminal's closures, nothing; for an awaiting task, `nil`; for a join, its member's
//     run ended (`MemberRun`); for Future's own closure (`Callback`), a shared promise's work
//     settles its waiters cancelled, an `ignoringCancel()` promise's work cancels its resolver;
//     for a timeout's work, `Timeout.complete`: the timeout's failure if its alarm rang, else its
//     cancel, or the release of the run it held.
// A run that waits for a combination: at 2, the join's handler `runCancelled` (Join.swift, added
// by the join's `init`) holds the run (`hold`), stops the join (`stopping`; `closed`, the hold
// given back at once, if nothing of it is going: a member's run, its launch, a handler), and
// cancels its members (their runs' cancels queue behind this one). The last of what was going to
// stop releases that hold; of it and the canceller's `release` (3), the one that comes last ends
// the run (4). A timeout's `runCancelled` goes the same way with its work's run.
// Last, `cancel(call:)` checks the thread it was called on: a cancel with no call from a step of
// a run that the cancelled run reaches (a step that cancels a run it is part of) cancels that run
// too, which its thread stops before its next step; anywhere else (a handle's cancel from outside
// any run, an alarm on Dispatch's clock), the check does nothing.
//
// Which thread goes on after a call: an operation that resolves on the driving thread before it
// returns sets `Driver.resolvedHere`, which `perform` reads with no lock; one resolved from another
// thread before it returns leaves the state `driving` for `operationReturned` to find, or, for a
// timeout or a combination whose work ended in a queue's block
// (`Resolver.resolve(_:carriedOnBy:)`), `resolvedOnQueue`: the run hops to that queue as the
// operation returns, as it would go on there had the work ended later; once it has returned
// (`awaitingResolver`), the resolving thread drives the run on.
//
// The transitions. t: the thread that drives (-: before the run started, or once it stopped); c:
// the number of the call pending, hs its cancel handlers; h: the holds on a cancelled run's end
// (see `State.cancelling`): the driving thread's (or the start's to come) and the canceller's
// first; -: none. A cancel is a handle's, or the pending call's own (its resolver cancelled, or
// let go of unresolved), which counts only while the call is pending, in `calling` or
// `awaitingResolver` (the c of `cancelling` is the call that was pending as the run was
// cancelled, whose late handlers run at once): elsewhere only a handle's cancel counts, and a
// call's report, like its cancel, changes nothing (the last row). A step that cancels a run it is
// part of (a member's step cancels the combination's run, say) then also cancels the run that it
// is a step of (see `cancel(call:)`).
// Then "release": the canceller's hold, let go of once the handlers (hs, or none) have returned,
// and the cancels they set off (of a combination's members, say: `Nesting.cancelling`); "stop
// next": the driving thread stops before its next step (`Driver.cancelledHere`), and stopping
// releases its hold.
//
//   state                   event                  new state                 then
//   idle                    start                  driving(t)                drive
//   cancelling(-,h,-)       start                  unchanged                 stop next (a
//                                                                            member's: its plan
//                                                                            empty, release)
//   driving(t)              an operation called    calling(t,c,-)            call it
//   calling(t,c,hs)         c's onCancel           calling(t,c,hs+1)         -
//   awaitingResolver(c,hs)  c's onCancel           awaitingResolver(c,hs+1)  -
//   calling(t,c,hs)         c's resolver reports   driving(t)                t goes on
//                           (but the next row's)
//   calling(t,c,hs)         c's resolver reports   resolvedOnQueue(t,q)      -
//                           on another thread,
//                           carried on by queue q
//   resolvedOnQueue(t,q)    the operation returns  awaitingQueue(q)          wait (for q)
//   calling(t,c,hs)         the operation returns  awaitingResolver(c,hs)    wait
//   awaitingResolver(c,hs)  c's resolver reports   driving(its thread)       drive
//   driving(t)              a hop to q             awaitingQueue(q)          wait
//   awaitingQueue(q)        q arrives              driving(its thread)       drive
//   driving(t)              the last step ran      ended                     end
//   idle                    cancel                 cancelling(-,2,-)         release
//   driving(t),             cancel                 cancelling(t,2,-)         release (from t:
//   resolvedOnQueue(t,q)                                                     and stop next)
//   calling(t,c,hs)         cancel                 cancelling(t,2,c)         hs, release
//   awaitingResolver(c,hs)  cancel                 cancelling(-,1,c)         hs, release
//   awaitingQueue(q)        cancel                 cancelling(-,1,-)         release
//   cancelling(t,h,c)       a step of t cancels    unchanged                 stop next
//   cancelling(t,h,c)       the operation returns  unchanged                 stop (if -, the
//                                                                            outcome dropped)
//   cancelling(t,h,-)       t reaches an           unchanged                 stop
//                           operation, a chain
//                           entered, a hop (but
//                           the next row's) or
//                           the end
//   cancelling(t,h,-)       t reaches a hop that   cancelling(-,h,-)         the queue, once it
//                           leaves a queue                                   runs, releases t's
//                           (`Next.hop`)                                     hold
//   cancelling(t,h,c)       c's onCancel           cancelling(t,h+1,c)       call it, release
//   ending(c,hs)            c's onCancel           ending(c,hs+1)            -
//   ending(c,hs)            an ensure step ahead   ending(c,-)               hs, the step
//   cancelled(c)            c's onCancel           unchanged                 call it
//   cancelling(t,h,c)       hold (see `hold()`)    cancelling(t,h+1,c)       -
//   cancelling(t,h,c)       release (h > 1)        cancelling(t,h-1,c)       -
//   cancelling(t,h,c)       t stops (h > 1)        cancelling(-,h-1,c)       -
//   cancelling(t,1,c)       release, or t stops    ending(c,-)               end: skip the
//                                                                            steps ahead
//   ending(c,hs)            the steps ahead are    cancelled(c)              hs, completion
//                           skipped (end, perhaps
//                           after runs waiting)
//   any other               any other event        unchanged                 -
//
// (A combination's member's handler added late goes as c's does: `callLate`.)
//
// Beside the state, what means the same in every state: the count of invalidations as the user's
// run was made, for its ties to tokens (set as the run is made, so read with no lock), and, under
// the lock, the run whose cancel reaches this one (`outer`). The count of calls is the driving
// thread's (`Driver.calls`): it begins every call.

import Dispatch

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Bionic)
    import Bionic
#endif

// MARK: What a run keeps, and its states

/// A run of a promise, returned by every terminal, to cancel it.
///
/// After ``cancel()`` no completion is delivered, the operation waiting gets its
/// ``Resolver/onCancel(_:)`` handlers called once, no later operation starts, and the
/// ``Promise/ensure(_:)`` steps still ahead run once those handlers have returned; but a cancel
/// that comes once the run has ended (its last step finished) does nothing, and its completion,
/// which may then be under way on another thread, is delivered. Cancelling is
/// idempotent and safe from any thread; dropping a handle does not cancel. A step that cancels its
/// own run stops it before the next step, even when another thread's cancel came first (a step of a
/// combination's member, of a `timeout`'s work, or of a shared promise's work that cancels when
/// abandoned and that only this run waits for, too: itself, through one member of a combination it
/// runs, or through members that are the shared promise itself). From another thread, the run stops
/// at its next operation, hop, entered promise or end: steps take no lock, so the steps before that
/// point still run (their outcome reaches no one). When two threads cancel a run at once, the
/// second `cancel()` may return before the first has reached the runs inside it (a combination's
/// members, a `timeout`'s work, a shared promise's work), whose steps and operations may then start
/// until the first `cancel()` returns. A run cancelled while a combination's members (or a
/// `timeout`'s work) are in a step ends once they have stopped, so that nothing of them runs after
/// its `ensure` steps but an `ensure(on:)` cleanup, which a cancel queues on its queue and does not
/// wait for. Inside a cancel handler (``Resolver/onCancel(_:)``) that a cancel calls (not one
/// called as it is added, the run already cancelled), `cancel()` returns at once: that cancel, like
/// every cancel the handler causes (a combination that a resolver it calls settles cancels its
/// other members), is done after the handler has returned and before the cancel that called the
/// handler returns: one after another rather than nested, so that cancels nested deep take little
/// stack.
///
/// Keep the handle where the run's owner can reach it, such as a property of a screen, or put it in
/// a ``RunBag``: `let lookup = lookUp(id: id).run(some: show, none: report)`. It is a value: a copy
/// cancels the same run. An awaited promise needs no handle: cancelling the task cancels the run.
/// See <doc:Cancellation>.
nonisolated public struct RunHandle: @unchecked Sendable {
    /// The run, which the handle keeps in memory, not going. (A run is Sendable by its lock;
    /// Swift does not let a `ManagedBuffer` say so.)
    @usableFromInline let run: Engine.Run

    @inlinable init(_ run: Engine.Run) { self.run = run }
}

nonisolated extension Engine {
    /// What a run keeps before its tail, guarded by its lock (but `invalidationsBefore`, which
    /// never changes).
    @usableFromInline struct Fields {
        /// First, so that the lock's address is the fields'.
        @usableFromInline var mutex = pthread_mutex_t()
        @usableFromInline var state = State.idle
        /// The count of invalidations before the user's run, as its terminal made it
        /// (`Engine.invalidations`), which tied steps compare their token with (`isValid(_:)`), up
        /// to `UInt32.max`: a user's run takes it; a run Future makes inside another (`make`'s
        /// `cancelledWith` or `apartFrom`) copies that run's. Set as the run is made and never
        /// changed, so read with no lock (the run it is copied from was made before, on the
        /// thread that makes this one or one that took it from that thread under a lock). After
        /// the state, in room its alignment leaves (an `Int` would make the fields a word longer).
        @usableFromInline var invalidationsBefore: UInt32 = 0
        /// The run whose cancel reaches this one, through the cancel handler that a combination,
        /// timeout or share adds: for a member or a timeout's work, the run it is made inside
        /// (`make`'s `cancelledWith`); for a shared promise's work, the one run that waits for
        /// it, if only one does (`Shared.reach`). Read by `isInside(where:)`.
        @usableFromInline var outer: Engine.Run?

        @usableFromInline init() {}
    }

    /// What the thread that drives a run owns (and hands over under the lock), at the start of
    /// the run's tail: apart from the fields, as ThreadSanitizer sees an access to one field of a
    /// struct through a pointer as an access to all of it. Its fields of a byte or two come
    /// first, so that they share one word.
    @usableFromInline struct Driver {
        /// Set when the run is cancelled on the thread that drives it (by a step that cancels its
        /// own run, or before it started), so that the very next step does not start. Not part of
        /// `state`: the driving thread, the one that sets it, reads it after every step without
        /// taking the lock.
        var cancelledHere = false
        /// Where the next drive resumes, if not at the top of the plan.
        @usableFromInline var resumesAt: ResumePoint?
        /// Whether the operation being called resolved on the driving thread (see `resolve`),
        /// which `perform` reads as it returns: the run goes on with no lock of its own.
        @usableFromInline var resolvedHere = false
        /// Whether the tail holds a completion, still to be called: from the start to the end.
        @usableFromInline var hasCompletion = false
        /// The words of the tail after this, before the stages: the completion's, the slot's.
        let completionWords: UInt8
        let slotWords: UInt16
        /// How many operations the run has called: each call's number is its count, so that a
        /// resolver of an earlier call matches no pending one. Only the driving thread calls.
        @usableFromInline var calls = 0
        var plan = Plan()
        /// What fewer runs need: entered chains, more room, a deadline.
        var spill: Spill?
        /// What the run does with the types of its outcome and its completion (see `TypedWork`).
        let typed: Run.TypedWorker
        /// The type the slot holds, which debug builds check (see `Slot`).
        @usableFromInline let slotHolds: SlotHolds = SlotHolds()

        /// Where a drive resumes that does not pop the plan: with the operation of a promise made
        /// from one alone, in the slot; or past the step that hopped, back on top of the plan, its
        /// output in the slot, once the queue carries the run on. Or, on the queue too, after an
        /// operation resolved in its block (`State.resolvedOnQueue`): the plan pops, the outcome
        /// in the slot.
        @usableFromInline enum ResumePoint: UInt8 {
            case operation, hop, resolvedOnQueue
        }

        @usableFromInline init(
            completionWords: Int, slotWords: Int, typed: @escaping Run.TypedWorker
        ) {
            self.completionWords = UInt8(completionWords)
            self.slotWords = UInt16(slotWords)
            self.typed = typed
        }
    }

    /// The `invalidate()` calls so far, of every token: a user's run keeps the count as it is made
    /// (`Fields.invalidationsBefore`), and a token takes it as its generation as it is
    /// invalidated, so that a tied step, which may run long after the run started (in a member
    /// that a limit starts late, or a promise a step made), knows whether its token was
    /// invalidated since. Process-wide, as a run does not know its tokens as it is made.
    nonisolated(unsafe) private static var invalidationCount = 0
    nonisolated(unsafe) private static let invalidationsLock = Lock()

    /// The count, after adding `added`: 1 for an `invalidate()`, none for a user's run as it is
    /// made.
    @usableFromInline static func invalidations(adding added: Int = 0) -> Int {
        invalidationsLock.withLock {
            invalidationCount += added
            return invalidationCount
        }
    }

    /// A pending call's cancel handlers, `nil` in a state until one is registered: an empty array
    /// costs a retain and a release at every call. Each in a struct, which an array keeps as it
    /// is, where it keeps a closure behind a reabstraction thunk, one more allocation.
    @usableFromInline typealias CancelHandlers = [CancelHandler]
    @usableFromInline struct CancelHandler { let call: @Sendable (any Reporter) -> Void }

    /// Where a run is (see the table above). Cancelling moves a run that has not ended to
    /// `cancelling`, which becomes `ending` as its last hold is released, while `end` runs its
    /// `ensure` steps, then `cancelled`.
    @usableFromInline enum State {
        /// Made, not started yet.
        case idle
        /// `thread` takes the steps, one after another.
        case driving(thread: pthread_t)
        /// The driving thread, `thread`, is inside the operation of call `call`, which has not
        /// resolved yet; `handlers` run if the run is cancelled first.
        case calling(thread: pthread_t, call: Int, handlers: CancelHandlers?)
        /// The operation of call `call` returned before its resolver reported: the resolver
        /// carries the run on.
        case awaitingResolver(call: Int, handlers: CancelHandlers?)
        /// The driving thread, `thread`, is inside the operation of the call that another thread
        /// resolved for work that ended in `queue`'s block: `queue` carries the run on once the
        /// operation returns.
        case resolvedOnQueue(thread: pthread_t, queue: DispatchQueue)
        /// The run waits for `queue` to carry it on (see `Driver.ResumePoint.hop`).
        case awaitingQueue(DispatchQueue)
        /// Cancelled, not ended yet: the last of its `holds` to be released ends it. They are
        /// what its end waits for: the thread that drives it, `thread`, until it stops it at its
        /// next check (before the run started, the start to come, with no thread); the
        /// canceller, until the cancel handlers have returned; a handler added late, until it
        /// returns; each combination or timeout it runs, until what it counts has stopped; the
        /// skip of a stage it reached cancelled, until it is done; a cancel on the thread where
        /// the work that ignores cancel it reached waits to start, until it has started
        /// (`startApart`; see `hold()`, and the glossary). A few: an
        /// `Int32`, so that the state takes four words, not five. `call`: the call that was
        /// pending, whose late handlers run at once.
        case cancelling(thread: pthread_t?, holds: Int32, call: Int?)
        /// Ended with an outcome.
        case ended
        /// Cancelled, its end under way on the thread that released its last hold: a handler
        /// added late (to `call`, or a combination's member's) waits in `late` for the next
        /// `ensure` step, or the run's end, as the end cannot wait for it.
        case ending(call: Int?, late: CancelHandlers?)
        /// Ended by cancellation, its `ensure` steps run.
        case cancelled(call: Int?)

        /// Whether the run is cancelled: no operation starts or reports.
        var isCancelled: Bool {
            switch self {
            case .cancelling, .ending, .cancelled: true
            case .idle, .driving, .calling, .awaitingResolver, .resolvedOnQueue, .awaitingQueue,
                .ended:
                false
            }
        }

        var hasEnded: Bool {
            switch self {
            case .ended, .ending, .cancelled: true
            default: false
            }
        }
    }
    /// One execution of a chain. Its own code is not generic: what depends on the types of its
    /// outcome and its completion, which waits in its tail, is its typed work (`TypedWork`).
    @usableFromInline final class Run: ManagedBuffer<Fields, UInt64>, Reporter {
        @usableFromInline typealias Stage = Engine.Stage
        @usableFromInline typealias Slot = Engine.Slot
        @usableFromInline typealias Next = Engine.Next
        @usableFromInline typealias Plan = Engine.Plan
        @usableFromInline typealias Run = Engine.Run

        /// A run reports its own calls' outcomes.
        @usableFromInline var run: Run { self }

        // A run is let go of only once it ended, if it started: until then what holds it on
        // (the driving thread, the resolver it waits for, the queue, each hold on its end, a
        // drive waiting for room) keeps it. So the completion has been called and destroyed.
        deinit {
            assert(!driver.pointee.hasCompletion, "a run let go of before its end")
            _ = pthread_mutex_destroy(&fields.pointee.mutex)
            driver.deinitialize(count: 1)
        }
    }
}

// MARK: Making a run

nonisolated extension Engine.Run {
    /// Makes a run with room for `chain` (or, with `nil`, for an operation alone) and for a
    /// completion of type `Completion`. A user's run takes the count of invalidations so far
    /// (`Fields.invalidationsBefore`); a run Future makes inside another copies that run's, and
    /// is made `cancelledWith` it, linked to it (`Fields.outer`) as that run's cancel reaches it
    /// (a combination's member, a timeout's work), or `apartFrom` it, with no link, as it does not
    /// (a shared promise's work, an `ignoringCancel()` promise's).
    @inlinable static func make<Completion: Engine.Completion>(
        for chain: Stage?, completing _: Completion.Type, cancelledWith outer: Run? = nil,
        apartFrom starter: Run? = nil
    ) -> Run {
        typealias Outcome = Swift.Result<Completion.Value, Completion.Failure>
        let completionWords = (MemoryLayout<Completion>.size + 7) / 8
        // The slot holds the outcome, and a chain's outputs or an operation alone's `Operation`.
        let slot = max(
            MemoryLayout<Outcome>.size, chain?.slotSize ?? MemoryLayout<Engine.Operation>.size)
        let slotWords = max(1, (slot + 7) / 8)
        let words = driverWords + completionWords + slotWords + (chain?.depth ?? 0)
        let made = create(minimumCapacity: words) { _ in Engine.Fields() }
        let run = unsafeDowncast(made, to: Run.self)
        pthread_mutex_init(&run.fields.pointee.mutex, nil)
        if let outer { run.fields.pointee.outer = outer }
        let inside = (outer ?? starter)?.fields.pointee.invalidationsBefore
        run.fields.pointee.invalidationsBefore =
            inside ?? UInt32(clamping: Engine.invalidations())
        run.driver.initialize(
            to: Engine.Driver(
                completionWords: completionWords, slotWords: slotWords,
                typed: typedWork(Completion.self)))
        // A chain's stages fit the slot as it starts; for an operation alone, only its outcome
        // (not its `Operation`) may need more than 8-byte alignment.
        let alignment = MemoryLayout<Outcome>.alignment
        if chain == nil, alignment > 8 { run.fitSlot(size: slot, alignment: alignment) }
        return run
    }

    /// What a run does with the types of its outcome and its completion: call the completion
    /// (`Completion.complete`) with the outcome in the slot, or with `nil` for cancellation; call
    /// the operation alone it starts with; or destroy an outcome nobody may have any more.
    @usableFromInline enum TypedWork {
        case complete(Slot?)
        case callOperation
        case dropOutcome(Slot)
    }

    @usableFromInline typealias TypedWorker = (Run, TypedWork) -> Next

    /// A run's typed work for a completion of type `Completion`: compiled where the run is
    /// made, for its types, as a run's own code is not generic (Swift would look the types up at
    /// every use). A function with nothing to capture costs no allocation.
    @inlinable static func typedWork<Completion: Engine.Completion>(
        _: Completion.Type
    ) -> TypedWorker {
        { run, work in
            typealias Outcome = Swift.Result<Completion.Value, Completion.Failure>
            switch work {
            case .complete(let slot):
                // Let go of here, on the thread that ends the run.
                let completion = run.afterDriver.assumingMemoryBound(to: Completion.self).move()
                run.driver.pointee.hasCompletion = false
                completion.complete(slot?.take(Outcome.self), of: run)
            case .callOperation:
                let operation = run.slot.take(Engine.Operation.self)
                return run.perform(operation, Completion.Value.self, Completion.Failure.self)
            case .dropOutcome(let slot): _ = slot.take(Outcome.self)
            }
            return .proceed
        }
    }

    /// The words a run's tail needs before its completion.
    @inlinable static var driverWords: Int { (MemoryLayout<Engine.Driver>.size + 7) / 8 }

    /// The fields, through a pointer: `header`, a class's stored property, would cost an
    /// exclusivity check at every use.
    @inlinable final var fields: UnsafeMutablePointer<Engine.Fields> {
        withUnsafeMutablePointerToHeader { $0 }
    }

    /// What the driving thread owns, at the start of the tail.
    @inlinable final var driver: UnsafeMutablePointer<Engine.Driver> {
        UnsafeMutableRawPointer(withUnsafeMutablePointerToElements { $0 })
            .assumingMemoryBound(to: Engine.Driver.self)
    }

    /// Runs `body` with the fields, under the lock (a timeout's state shares it with its work).
    @inlinable final func locked<T>(_ body: (inout Engine.Fields) -> T) -> T {
        let fields = self.fields
        pthread_mutex_lock(&fields.pointee.mutex)
        defer { pthread_mutex_unlock(&fields.pointee.mutex) }
        return body(&fields.pointee)
    }

    /// The tail after what the driving thread owns: the completion, of the type the run was made
    /// for, then the slot.
    @usableFromInline final var afterDriver: UnsafeMutableRawPointer {
        UnsafeMutableRawPointer(driver) + 8 * Self.driverWords
    }

    /// The slot: in the tail, unless a chain needed a larger one.
    @usableFromInline final var slot: Slot {
        let spilled = driver.pointee.spill?.owned.slot?.memory
        var slot = Slot(memory: spilled ?? afterDriver + 8 * Int(driver.pointee.completionWords))
        slot.holds = driver.pointee.slotHolds
        return slot
    }
}

// MARK: Who gets the run's outcome, and what reports to it

nonisolated extension Engine {
    /// What reports an operation's outcome, for its resolver: a run, or a combination that runs
    /// its members without runs of their own (see `Join`). `call` numbers the operation.
    @usableFromInline protocol Reporter: AnyObject {
        /// Reports `call`'s outcome, which `write` puts in a slot; returns whether it counted.
        /// `queue`: see `Resolver.resolve(_:carriedOnBy:)`.
        func resolve(_ call: Int, with write: (Slot) -> Void, carriedOnBy queue: DispatchQueue?)
            -> Bool
        func onCancel(_ call: Int, _ handler: @escaping @Sendable (any Reporter) -> Void)
        /// Whether `call` was cancelled.
        func isCancelled(_ call: Int) -> Bool
        /// Cancels `call`, if it is pending; returns whether it did.
        func cancel(_ call: Int) -> Bool
        /// The run the operation is part of, or that the combination is part of.
        var run: Run { get }
    }

    /// What gets a run's outcome, kept in the run's tail: a terminal's closure (the value alone,
    /// for a promise that cannot fail), an awaiting task, or Future's own code, which also hears
    /// that the run ended by cancellation.
    @usableFromInline protocol Completion {
        associatedtype Value
        associatedtype Failure: Swift.Error
        /// Gets the outcome, or `nil` if the run ended by cancellation.
        func complete(_ outcome: sending Swift.Result<Value, Failure>?, of run: Run)
    }

    /// A terminal's closure, which gets the outcome.
    @usableFromInline struct Outcomes<Value, Failure: Swift.Error>: Completion {
        @usableFromInline let body: @Sendable (Swift.Result<Value, Failure>) -> Void
        @inlinable init(_ body: @escaping @Sendable (Swift.Result<Value, Failure>) -> Void) {
            self.body = body
        }
        @inlinable func complete(_ outcome: sending Swift.Result<Value, Failure>?, of _: Run) {
            if let outcome { body(outcome) }
        }
    }

    /// A guarantee's terminal closure, which gets the value.
    @usableFromInline struct Values<Value>: Completion {
        @usableFromInline let body: @Sendable (Value) -> Void
        @inlinable init(_ body: @escaping @Sendable (Value) -> Void) { self.body = body }
        @inlinable func complete(_ outcome: sending Swift.Result<Value, Never>?, of _: Run) {
            if case .success(let value)? = outcome { body(value) }
        }
    }

    /// A task awaiting the outcome.
    @usableFromInline struct Awaiting<Value, Failure: Swift.Error>: Completion {
        /// Unsafe, not checked: a run calls its completion once, and only once (`.complete`).
        @usableFromInline typealias Continuation =
            UnsafeContinuation<Swift.Result<Value, Failure>?, Never>
        @usableFromInline let continuation: Continuation
        @inlinable init(_ continuation: Continuation) { self.continuation = continuation }
        @inlinable func complete(_ outcome: sending Swift.Result<Value, Failure>?, of _: Run) {
            continuation.resume(returning: outcome)
        }
    }

    /// Future's own code, which gets the run too.
    @usableFromInline struct Callback<Value, Failure: Swift.Error>: Completion {
        @usableFromInline let body: (Run, sending Swift.Result<Value, Failure>?) -> Void
        @inlinable init(_ body: @escaping (Run, sending Swift.Result<Value, Failure>?) -> Void) {
            self.body = body
        }
        @inlinable func complete(_ outcome: sending Swift.Result<Value, Failure>?, of run: Run) {
            body(run, outcome)
        }
    }
}

// MARK: Starting and driving

nonisolated extension Engine.Run {
    /// Drives a run of `promise`; `completion` gets the outcome, or hears that the run ended by
    /// cancellation (after its `ensure` steps), exactly once. A run starts once. `immediately`
    /// runs it on this stack even deep in nested runs (see `drive`). `member`: a combination's,
    /// which runs none of its steps if it was cancelled before it started (see `ensure`).
    @inlinable final func start<Completion: Engine.Completion>(
        _ promise: consuming Promise<Completion.Value, Completion.Failure>,
        _ completion: Completion, immediately: Bool = false, member: Bool = false
    ) {
        // The one part that needs the completion's type, inlined where the run starts; the rest is
        // one copy, not inlined at every terminal (measured: inlined, the benchmarks' binary took
        // 19 KB more, and no run took fewer instructions).
        afterDriver.assumingMemoryBound(to: Completion.self).initialize(to: completion)
        start(promise.body, immediately: immediately, member: member)
    }

    /// Starts the run (see the table), its completion in the tail: pushes the chain's stages on
    /// its plan, the first on top, or puts an operation alone in its slot; then drives it (if it
    /// was cancelled first, the drive stops it before its first step, and its `ensure` steps run
    /// as it ends, but a member's).
    @usableFromInline final func start(
        _ body: consuming Engine.Body, immediately: Bool, member: Bool
    ) {
        precondition(!driver.pointee.hasCompletion, "a run started twice")
        driver.pointee.hasCompletion = true
        // Cancelled first, it stops before its first step.
        let cancelled = locked { fields -> Bool in
            switch fields.state {
            case .idle:
                fields.state = .driving(thread: pthread_self())
            case .cancelling(nil, _, _):
                break  // cancelled before the start, e.g. an awaiting task
            default:
                preconditionFailure("a run started \(fields.state)")
            }
            return fields.state.isCancelled
        }
        driver.pointee.cancelledHere = cancelled
        switch consume body {  // memory only: no step runs before `drive`
        case .chain(let last) where cancelled && member:
            // A member its combination cancelled before it started: no step runs, not even its
            // `ensure` steps, as in a member the combination never took, and what it ignores
            // cancel for starts, as there. It ends as the start lets go of its hold, after what
            // that work does at once, runs it made wait for a level below too (see `skip`).
            let mark = Engine.Nesting.waitingCount
            last.ignoredWork.forEach(startIgnored)
            return Engine.Nesting.afterWaiting(since: mark) { self.release(stopping: true) }
        case .chain(let last):
            fitSlot(size: last.slotSize, alignment: last.slotAlignment)
            let driver = self.driver
            // The stages' room: the rest of the tail.
            let words = Int(driver.pointee.completionWords) + Int(driver.pointee.slotWords)
            let stages = (afterDriver + 8 * words).assumingMemoryBound(to: Unmanaged<Stage>.self)
            let room = Engine.Room(start: stages, count: capacity - Self.driverWords - words)
            driver.pointee.plan.load(consume last, in: room)
        case .operation(let operation):  // the first drive calls it (`TypedWork.callOperation`)
            slot.put(operation)
            driver.pointee.resumesAt = .operation
        }
        drive(immediately: immediately)
    }

    /// Drives the run on this thread: takes its steps, one after another, entering the chains
    /// that steps return, until the end, an operation that has not resolved yet, a hop, or
    /// cancellation. Runs nest on one thread's stack (a combination's member, a resolver called
    /// from a step, a cancel handler): past `Nesting.limit` levels, the run waits, and a level
    /// below (the bottom one, or one inside a settle) drives it once the levels above it have
    /// returned. `immediately`: now even past the limit, as a level that resumes nothing (see
    /// `Nesting.nest`). `hop`: the queue that carries the run on (`queueArrived`), whose block
    /// the thread is in from then on, as far as hops tell (`Nesting.queueHere`, which a step
    /// reads: the cleanup of an `ensure(on:)` goes back to it); else it stays in the block it
    /// was in (a resolver's, a run's start, that of a run whose step starts this one).
    final func drive(immediately: Bool = false, hop: DispatchQueue? = nil) {
        let nesting = Engine.Nesting.self
        let driver = self.driver
        guard
            let level = nesting.withCurrent({
                $0.nest(self, immediately: immediately, hop: hop)
            })
        else { return }  // only past `Nesting.limit` levels on this thread: a level below drives it
        defer { nesting.withCurrent { $0.unnest(level) } }
        // Locals, not fields, in the loop: a field is read from memory at every use. The plan is
        // moved, not copied, in and out, as it keeps the run's chain.
        var plan = Plan()
        swap(&plan, &driver.pointee.plan)
        var slot = self.slot
        var next: Next = .proceed
        switch driver.pointee.resumesAt.take() {
        case .hop?: _ = plan.pop()  // past the step that hopped
        // An operation alone is called through the work typed for the run, made with it (see
        // `typedWork`, below `make`): `.callOperation` calls `perform` with its types.
        case .operation?: next = driver.pointee.typed(self, .callOperation)
        // The run starts, or a resolver carries it on: the loop pops a step.
        case .resolvedOnQueue?, nil: break
        }
        while true {
            if case .called = next { next = operationReturned(&plan) }
            switch next {
            case .proceed where driver.pointee.cancelledHere:
                // Cancelled by a step of this thread, before the run started, or while the drive
                // waited for room on the stack (`Nesting.nest`): no step starts. The slot
                // holds the next step's input, its parent's output: the step that ran last is the
                // next one's parent, or the last of a chain entered by that parent, whose output
                // is the same (`Entry`); before the first step, which has no parent, it is empty.
                // With no step left, it holds the run's outcome, which the drive drops as it ends.
                if let top = plan.top {
                    top.parent?.output.discard(from: slot)
                    next = .stop
                }
            case .enter(let inner):
                fitSlot(size: inner.slotSize, alignment: inner.slotAlignment)
                slot = self.slot
                plan.enter(inner, spill: &driver.pointee.spill)
                next = locked({ $0.state.isCancelled }) ? .stop : .proceed
            // `.wait`: `operationReturned` handed the plan back to the run. (`.called` never comes
            // here: the line above replaced it.)
            case .called, .wait: return
            case .proceed, .stop, .hop: break
            }
            // With no stage left (an operation alone has none), the run ends below.
            guard case .proceed = next, let stage = plan.pop() else { break }
            next = stage.borrowed { $0.step($0, slot, self) }
        }
        // A hop puts the step back on the plan, its output in the slot, until the queue carries
        // the run on. The plan is moved back, not kept: a thread that kept it could release the
        // chain's steps after the queue's thread has finished the run (and its memory stays
        // unshared for reuse).
        if case .hop = next { plan.putBack() }
        swap(&plan, &driver.pointee.plan)
        switch next {
        case .hop(let queue, let deadline, let leaving):
            return awaitQueue(queue, at: deadline, leaving: leaving)
        case .stop: break
        default:
            // The last step ran: the outcome goes to the completion, unless the run was cancelled
            // (then nobody may have it).
            let delivers = locked { fields -> Bool in
                guard case .driving = fields.state else { return false }
                fields.state = .ended
                return true
            }
            if delivers { return end(with: slot) }
            _ = driver.pointee.typed(self, .dropOutcome(slot))
        }
        release(stopping: true)  // the run stops: the driving thread lets go of its hold
    }

    /// Grows the slot to hold `size` bytes aligned to `alignment`, if it does not, for a chain's
    /// outcomes (the slot is empty as a chain starts): the tail is aligned to 8 bytes, a `UInt128`
    /// or a SIMD vector needs 16.
    @usableFromInline final func fitSlot(size needed: Int, alignment needs: Int) {
        let driver = self.driver
        let size = driver.pointee.spill?.owned.slot?.size ?? 8 * Int(driver.pointee.slotWords)
        let alignment = driver.pointee.spill?.owned.slot?.alignment ?? 8
        guard needed > size || needs > alignment else { return }
        Engine.Spill.make(&driver.pointee.spill).growSlot(
            size: max(needed, size), alignment: max(needs, alignment))
    }
}

// MARK: Calling an operation, and its resolver

nonisolated extension Engine.Run {
    /// Calls `operation` with a resolver for a new call, unless the run was cancelled: then the
    /// first stage of a chain made from an operation, `source`, is skipped as the stages after
    /// it are (a timeout's work runs its `ensure` steps, an `ignoringCancel()` promise's starts).
    @inlinable final func perform<Value, Failure: Swift.Error>(
        _ operation: Engine.Operation, _: Value.Type, _: Failure.Type, source: Stage? = nil
    ) -> Next {
        let call = driver.pointee.calls + 1
        let began = locked { fields -> Bool in
            guard case .driving(let thread) = fields.state else { return false }
            fields.state = .calling(thread: thread, call: call, handlers: nil)
            return true
        }
        guard began else {
            source.map(skipReached)
            return .stop
        }
        driver.pointee.calls = call
        // A resolver of its own for each call: one that served an earlier call may still be held
        // where no reference count shows it (an Objective-C weak reference), and report late.
        // Let go of here as the operation returns: if the operation let go of it unresolved, its
        // deinit cancels the call, still pending (see the table).
        let resolver = Resolver<Value, Failure>(reporter: self, call: call, of: operation)
        operation(resolver)  // the user's closure (`Operation.callAsFunction`, Chain.swift)
        guard driver.pointee.resolvedHere else { return .called }
        driver.pointee.resolvedHere = false
        return .proceed
    }

    /// What a step that returns `promise` does next: call its operation here, if it is an
    /// operation alone, which costs no stage and no entering; else enter its chain.
    @inlinable final func callOrEnter<Value, Failure: Swift.Error>(
        _ promise: consuming Promise<Value, Failure>
    ) -> Next {
        switch (consume promise).body {
        case .operation(let operation): perform(operation, Value.self, Failure.self)
        case .chain(let last): .enter(last)
        }
    }

    /// After an operation returns unresolved: go on if its resolver reported meanwhile on another
    /// thread (on the queue that carries it on, if any), else wait for it.
    private final func operationReturned(_ plan: inout Plan) -> Next {
        let finished = plan.takeFinished(from: driver.pointee.spill)  // let go of after the lock
        swap(&plan, &driver.pointee.plan)  // handed over before the lock may hand the run on
        let next = locked { fields -> Next in
            switch fields.state {
            case .calling(_, let call, let handlers):
                fields.state = .awaitingResolver(call: call, handlers: handlers)
                return .wait
            case .driving: return .proceed
            case .resolvedOnQueue(_, let queue):
                // Handed over with the run, which a canceller may take once the lock is let go of.
                driver.pointee.resumesAt = .resolvedOnQueue
                fields.state = .awaitingQueue(queue)
                return .hop(queue, nil)
            // Cancelled as the call was pending, the run stops; else the outcome came first, in
            // the slot, which the loop drops as it stops (the return is a check, as a hop is).
            case .cancelling(_, _, let call):
                if call == nil { driver.pointee.cancelledHere = true }
                return call == nil ? .proceed : .stop
            default: preconditionFailure("an operation returned to a run \(fields.state)")
            }
        }
        withExtendedLifetime(finished) {}  // here, where their steps ran
        if case .hop(let queue, _, _) = next {
            queue.async { [handle = RunHandle(self)] in handle.run.queueArrived() }
            return .wait
        }
        if case .wait = next { return next }
        swap(&plan, &driver.pointee.plan)  // still ours: take it back
        return next
    }

    /// Takes the outcome of call `call`, which `write` puts in the slot, if it still counts;
    /// returns whether it did. `queue`: see `Resolver.resolve(_:carriedOnBy:)`.
    @usableFromInline final func resolve(
        _ call: Int, with write: (Slot) -> Void, carriedOnBy queue: DispatchQueue?
    ) -> Bool {
        // The slot is written only while the call is pending: the driving thread is inside the
        // operation, or the run waits. The cancel handlers no longer needed go outside the lock:
        // releasing a handler may run any deinit. The state is moved out, not copied, so that
        // they move too. (`call` in a pattern is this call's number, not a new name: a report of
        // another call matches no case.)
        // `resumes`: `nil` if the outcome does not count, else whether this thread drives on.
        let (resumes, unneeded) = locked { fields -> (Bool?, Engine.CancelHandlers?) in
            var state = Engine.State.idle
            swap(&state, &fields.state)
            switch state {
            case .calling(let thread, call, let handlers):
                write(slot)
                fields.state = .driving(thread: thread)
                if pthread_equal(thread, pthread_self()) != 0 {
                    // Resolved inside the operation, on its thread: the driving thread may go on
                    // when the operation returns with no lock of its own (a cancel that comes
                    // meanwhile is seen at the run's next lock).
                    driver.pointee.resolvedHere = true
                } else if let queue {
                    fields.state = .resolvedOnQueue(thread: thread, queue: queue)
                }
                return (false, handlers)
            case .awaitingResolver(call, let handlers):
                write(slot)
                fields.state = .driving(thread: pthread_self())
                return (true, handlers)
            default:
                fields.state = state
                return (nil, nil)
            }
        }
        withExtendedLifetime(unneeded) {}  // not inside the lock (see `Lock.withLock`)
        if resumes == true { drive() }
        return resumes != nil
    }

    @usableFromInline final func onCancel(
        _ call: Int, _ handler: @escaping @Sendable (any Engine.Reporter) -> Void
    ) {
        let added = Engine.CancelHandler(call: handler)
        let late = locked { fields -> Bool in
            switch fields.state {
            case .calling(let thread, call, let handlers):
                let handlers = handlers.map { $0 + [added] } ?? [added]
                fields.state = .calling(thread: thread, call: call, handlers: handlers)
            case .awaitingResolver(call, let handlers):
                let handlers = handlers.map { $0 + [added] } ?? [added]
                fields.state = .awaitingResolver(call: call, handlers: handlers)
            // Added late, to the call that was pending as the run was cancelled. (`call?`
            // matches this call's number, as in `resolve`.)
            case .cancelling(_, _, call?), .ending(call?, _), .cancelled(call?): return true
            default: break
            }
            return false
        }
        if late { callLate(added) }
    }

    /// Calls a cancel handler added once the run is cancelled: at once, holding the run's end
    /// until it returns, if it has not come, as the canceller's handlers do; before the next
    /// `ensure` step, or as the run ends, if the end is under way; at once, once it has ended.
    final func callLate(_ handler: Engine.CancelHandler) {
        let holds = locked { fields -> Bool? in
            switch fields.state {
            case .cancelling(let thread, let holds, let call):
                fields.state = .cancelling(thread: thread, holds: holds + 1, call: call)
                return true
            case .ending(let call, let late):
                fields.state = .ending(call: call, late: (late ?? []) + [handler])
                return nil
            default: return false
            }
        }
        guard let holds else { return }
        handler.call(self)
        if holds { release() }
    }

    /// Whether the run was cancelled before it ended: what the resolver of each of its calls
    /// answers.
    @usableFromInline final func isCancelled(_: Int) -> Bool { locked { $0.state.isCancelled } }

    /// Call `call`'s resolver cancels the run (`Resolver.cancel()`, or its release unresolved),
    /// if the call is still pending: the reporter's side of `cancel(call:)`, which a handle calls
    /// with no call.
    @usableFromInline final func cancel(_ call: Int) -> Bool { cancel(call: call) }
}

nonisolated extension Resolver {
    /// Settles the resolver of a timeout or an `ignoringCancel()` promise with the outcome of its
    /// work, or (`nil`) cancels it, from the thread where that work ended, carried on by the queue
    /// whose block that thread is in, if any.
    @inlinable func settle(with outcome: sending Swift.Result<Value, Failure>?) {
        guard let outcome else { return cancel() }
        resolve(outcome, carriedOnBy: Engine.Nesting.queueHere)
    }

    /// Reports `result`, for every resolver. A user's (`callAsFunction`) reports with no queue:
    /// its run never hops that the user did not ask for. The library's own (`settle`'s; a
    /// combination's and a shared promise's, which pass the queue themselves) pass the queue
    /// whose block the work that decided it ended in (a run's steps on the queue): if the
    /// operation has not returned yet, on another thread (still setting the alarm, or launching
    /// members), the run goes on on `queue` once it returns, in a block of its own, as it would
    /// have had the work ended later, not on the operation's thread.
    @inlinable func resolve(
        _ result: sending Swift.Result<Value, Failure>, carriedOnBy queue: DispatchQueue?
    ) {
        // Resolved: nothing to report as it goes. Only the one report that counts writes it.
        let counted = reporter.resolve(call, with: { slot in slot.put(result) }, carriedOnBy: queue)
        if counted { reportsRelease = false }
    }
}

// MARK: Hopping to a queue

nonisolated extension Engine.Run {
    /// Parks the run, the step that hopped on top of its plan and its output in the slot, until
    /// `queue` carries it on, at `time` if given (see `Deadlines`). Cancelled, the run stops here,
    /// or, `leaving` the queue it is on, once `queue` runs, where nothing after it waits on the
    /// queue it left (the hop's output and the stages ahead go as in any stop: see `end`).
    private final func awaitQueue(_ queue: DispatchQueue, at time: DispatchTime?, leaving: Bool) {
        let finished = driver.pointee.plan.takeFinished(from: driver.pointee.spill)
        defer { withExtendedLifetime(finished) {} }  // here, where their steps ran
        let handle = RunHandle(self)
        let deadline = time.map { Engine.Deadline($0, on: queue) { handle.run.queueArrived() } }
        // Handed over before the lock may hand the run to the queue, or to a canceller.
        driver.pointee.resumesAt = .hop
        if let deadline { Engine.Spill.make(&driver.pointee.spill).owned.hopDeadline = deadline }
        // `nil`: cancelled, and the driving thread's hold goes to the queue.
        let parked = locked { fields -> Bool? in
            switch fields.state {
            case .driving:
                fields.state = .awaitingQueue(queue)
                // Armed under the lock, so that a canceller that takes the run over finds it armed.
                deadline.map(Engine.Deadlines.shared.arm)
                return true
            case .cancelling(_, let holds, let call) where leaving:
                fields.state = .cancelling(thread: nil, holds: holds, call: call)
                return nil
            default: return false
            }
        }
        switch parked {
        case true?: if deadline == nil { queue.async { handle.run.queueArrived() } }
        case false?: release(stopping: true)
        case nil:
            queue.async { Engine.Nesting.withCurrent { $0.on(queue) { handle.run.release() } } }
        }
    }

    /// The queue the run waits for carries it on, unless it was cancelled meanwhile.
    final func queueArrived() {
        let arrived = locked { fields -> DispatchQueue? in
            guard case .awaitingQueue(let queue) = fields.state else { return nil }
            fields.state = .driving(thread: pthread_self())
            return queue
        }
        guard let queue = arrived else { return }
        driver.pointee.spill?.owned.hopDeadline = nil
        drive(hop: queue)
    }
}

// MARK: Cancelling and ending

nonisolated extension Engine.Run {
    /// Cancels the run, if it is still going (and call `call`, if given, is still pending): calls
    /// the handlers, then ends the run if it waits, or once the thread driving it stops.
    @usableFromInline final func cancel(call: Int?) -> Bool {
        // Whether this cancel took the run: then the pending call's handlers (if any) are called,
        // and then the canceller's hold is released.
        let (cancelled, handlers) = locked { fields -> (Bool, Engine.CancelHandlers?) in
            switch fields.state {
            case .calling(let thread, let pending, let handlers) where (call ?? pending) == pending:
                fields.state = .cancelling(thread: thread, holds: 2, call: pending)
                return (true, handlers)
            case .awaitingResolver(let pending, let handlers) where (call ?? pending) == pending:
                fields.state = .cancelling(thread: nil, holds: 1, call: pending)
                return (true, handlers)
            // A call's own cancel counts only while it is pending: this arm, before the others,
            // makes a resolver let go of after its run ended (or went on) cancel nothing.
            case _ where call != nil: return (false, nil)
            case .idle:
                fields.state = .cancelling(thread: nil, holds: 2, call: nil)
            case .driving(let thread), .resolvedOnQueue(let thread, _):
                if pthread_equal(thread, pthread_self()) != 0 {
                    self.driver.pointee.cancelledHere = true
                }
                fields.state = .cancelling(thread: thread, holds: 2, call: nil)
            case .awaitingQueue:
                fields.state = .cancelling(thread: nil, holds: 1, call: nil)
            case .cancelling(let thread?, _, _)
            where pthread_equal(thread, pthread_self()) != 0:
                // A step that cancels stops the run before the next step, as in a run that is
                // driving, even once another thread's cancel came.
                self.driver.pointee.cancelledHere = true
                return (false, nil)
            default: return (false, nil)
            }
            return (true, nil)
        }
        if cancelled {
            // Once what the handlers cancelled has ended too, the run ends if it waits: the
            // handlers, then the cancels they queued, then `release`, which ends the run once
            // nothing else holds it (see "A cancel in calls" in the file's header).
            Engine.Nesting.cancelling(
                { for handler in handlers ?? [] { handler.call(self) } }, then: { self.release() })
        }
        // A step that cancels a run it is part of, as a combination's member, a timeout's work or
        // a shared promise's work, stops before its next step: it cancels its own run itself, as
        // another thread's cancel that came first (a timeout's alarm) may still be on its way
        // down to it, or has reached it as another thread's, and a cancel under way on this
        // thread (the step runs inside a cancel handler) queues this one (`Nesting.cancelling`).
        // Nothing more if this thread drives no run, one this cancel does not reach (one not
        // inside this one), or this one (marked `cancelledHere` above).
        if call == nil, let driven = Engine.Nesting.drivenRun,
            driven !== self, driven.isInside(where: { $0 === self })
        {
            _ = driven.cancel(call: nil)
        }
        return cancelled
    }

    /// Whether this run, or a run it is inside (see `isInside(where:)`), is cancelled: so it is,
    /// or is about to be, once the cancel handlers under way have run. Debug builds report a
    /// resolver let go of unresolved only if not.
    final var isCancelledOrInsideOne: Bool {
        isInside(where: { run in run.locked { $0.state.isCancelled } })
    }

    /// Whether `test` holds for this run or one it is inside, following the `outer` links. A run is
    /// inside another whose cancel reaches it: a combination's member, a timeout's work, or the
    /// work of a share that only that run waits for, is inside the run it runs for; and so is a run
    /// inside one of those, at any depth. The links may loop: a shared promise's work that waits
    /// for its own promise (racing it with a fallback, say) may have a run inside itself as the one
    /// run that waits for it (`Shared.reach`). So a second walk follows the first at half its pace,
    /// and meets it only in a loop, once the first has passed every run of it (Floyd's cycle
    /// finding): no allocation, and no walk that never ends.
    private final func isInside(where test: (Engine.Run) -> Bool) -> Bool {
        var ahead: Engine.Run? = self
        var behind: Engine.Run? = self
        var steps = 0
        while let current = ahead {
            if test(current) { return true }
            ahead = current.locked { $0.outer }
            steps += 1
            if steps % 2 == 0 { behind = behind?.locked { $0.outer } }
            if let ahead, ahead === behind { return false }  // around a loop, `test` never held
        }
        return false
    }

    /// Holds the end of a cancelled run that has not ended: for a combination it runs, whose
    /// members' runs have not stopped yet, or a timeout, whose work's run has not, so that nothing
    /// of them runs after the run's end (its `ensure` steps and its completion); for a stage
    /// skipped before the end, which may wait (`skipReached`); or for the work that ignores
    /// cancel it reached, which waits to start (`startApart`). A combination's or timeout's is
    /// taken by the cancel handler of the pending call, which runs while the canceller, or the
    /// driving thread, holds the run, as the skip's by the driving thread: so it is always taken.
    @usableFromInline final func hold() {
        locked { fields in
            guard case .cancelling(let thread, let holds, let call) = fields.state else { return }
            fields.state = .cancelling(thread: thread, holds: holds + 1, call: call)
        }
    }

    /// Releases a hold: the canceller's, once the handlers have returned, a combination's, a
    /// timeout's, or the driving thread's as it stops the run (`stopping`). The last ends the run.
    @usableFromInline final func release(stopping: Bool = false) {
        let ends = locked { fields -> Bool in
            guard case .cancelling(let thread, let holds, let call) = fields.state else {
                preconditionFailure("a hold released on a run \(fields.state)")
            }
            fields.state =
                holds > 1
                ? .cancelling(thread: stopping ? nil : thread, holds: holds - 1, call: call)
                : .ending(call: call, late: nil)
            return holds == 1
        }
        if ends { end(with: nil) }
    }

    /// Ends the run. A cancelled run first lets go of its hop, if it waited for a queue (the
    /// deadline, the output), and skips the stages still ahead, innermost chain first (perhaps
    /// after runs that the work they start made wait: see `skip`). Then the run lets go of its
    /// chains, and its completion gets the outcome, in the slot given, or with `nil` hears that
    /// the run was cancelled.
    private final func end(with outcome: Slot?) {
        let driver = self.driver
        // The hop of a run cancelled as it waited for its queue, which no drive resumes. (An
        // operation alone's first call is never left: the run's first drive takes it, and holds
        // the run's end until it returns.)
        switch driver.pointee.resumesAt.take() {
        case .hop?:
            driver.pointee.spill?.owned.hopDeadline.take().map(Engine.Deadlines.shared.disarm)
            driver.pointee.plan.pop()!.borrowed { $0.output }.discard(from: slot)
        // The outcome of an operation that resolved in the block of the queue the run waited
        // for: the next step's input, its parent's output (see `drive`), or the run's outcome.
        case .resolvedOnQueue?:
            if let top = driver.pointee.plan.top {
                top.parent?.output.discard(from: slot)
            } else {
                _ = driver.pointee.typed(self, .dropOutcome(slot))
            }
        case .operation?, nil: break
        }
        // The stages ahead are skipped, then the end goes on here again: its hop taken, the
        // plan empty, the run still `ending`. They are handed over, not kept here, so that they,
        // and what their steps captured, go before the completion, as after a last step.
        if let first = driver.pointee.plan.pop() {
            var ahead = [first.takeUnretainedValue()]
            while let next = driver.pointee.plan.pop() { ahead.append(next.takeUnretainedValue()) }
            ahead.reverse()  // the next last, as `skip` takes them
            return skip(consume ahead) { self.end(with: outcome) }
        }
        // A handle, or a resolver an operation kept, may keep the run long after its end: not
        // what the chains' steps captured.
        driver.pointee.plan = Plan()
        driver.pointee.spill?.owned.chains = []
        if outcome == nil { callLateHandlers(last: true) }
        // The completion is called here, through the work compiled for its types (`typedWork`).
        _ = driver.pointee.typed(self, .complete(outcome))
    }

    /// Calls the cancel handlers added as the end is under way (see `callLate`): before each
    /// `ensure` step still ahead, and as the end is done (`last`), which moves the run to
    /// `cancelled`. (A stage skipped before the end, a first stage that `perform` does not call,
    /// finds the run `cancelling`, held by its driving thread: a handler is called at once.)
    private final func callLateHandlers(last: Bool = false) {
        let late = locked { fields -> Engine.CancelHandlers? in
            guard case .ending(let call, let late) = fields.state else {
                precondition(!last, "a cancelled run ended \(fields.state)")
                return nil
            }
            fields.state = last ? .cancelled(call: call) : .ending(call: call, late: nil)
            return late
        }
        for handler in late ?? [] { handler.call(self) }
    }

    /// Skips the first stage of a chain made from an operation, which the run reached cancelled
    /// (see `perform`), holding the run's end until the skip is done (see `skip`).
    @usableFromInline final func skipReached(_ source: Stage) {
        hold()  // the run is `cancelling`, held by its driving thread
        skip([source]) { self.release() }
    }

    /// Skips `ahead`, the stages that a cancelled run does not take, the last first, then calls
    /// `next`: an `ensure` step runs all the same, and the work of an `ignoringCancel()` promise
    /// starts. What that work does at once comes first: if its start made runs wait for a level
    /// below (past `Nesting.limit`, or in a shared promise's settle inside another's), the rest
    /// waits behind them, as it would have come after them had they run nested
    /// (`Nesting.afterWaiting`). (Work starts only at a chain's first stage, the walk's head or
    /// a timeout's work's, so the rest is mostly `ensure` steps.)
    private final func skip(_ ahead: consuming [Stage], then next: @escaping () -> Void) {
        while let stage = ahead.popLast() {
            // A `timeout`'s first stage holds its work's chain, which the run never started: its
            // steps are stopped here too, first step first. (A list, not recursion, for timeouts
            // nested deep.)
            if let chain = stage.ahead {
                ahead.append(contentsOf: sequence(first: chain) { $0.parent })
                continue
            }
            if stage.isEnsure {
                callLateHandlers()
                Engine.Node<@Sendable () -> Void>.payload(of: stage)()
            }
            let mark = Engine.Nesting.waitingCount
            stage.ignoring.map(startIgnored)
            for member in stage.ignoringMembers { member.ignoredWork.forEach(startIgnored) }
            guard Engine.Nesting.waitingCount == mark else {
                let rest = copy ahead
                return Engine.Nesting.afterWaiting(since: mark) { self.skip(rest, then: next) }
            }
        }
        next()
    }

    /// Starts the work of an `ignoringCancel()` promise that this run reached cancelled (or
    /// that a settled combination never started): cancelling does not reach it, and nobody
    /// waits for its outcome.
    @usableFromInline final func startIgnored(_ work: @Sendable (Run) -> Void) { work(self) }

    /// Calls `start`, which starts the work of an `ignoringCancel()` promise that this run
    /// reached, in call `call`. If the work's run waits for a level below (past `Nesting.limit`),
    /// the call returns before what the work does at once: so a cancel of the run on this
    /// thread before the work has started holds the run's end until then
    /// (`Nesting.awaitStart`), as the call would have returned after it had the work run nested.
    /// (A cancel on another thread, once the handler below is in place, does not know when the
    /// work starts here.) The call is this run's own, a chain's first stage's: while its
    /// operation runs, the driving thread holds the run, so that its handlers find it
    /// `cancelling`, never ending.
    final func startApart(in call: Int, _ start: () -> Void) {
        let mark = Engine.Nesting.waitingCount
        start()
        guard Engine.Nesting.waitingCount > mark else { return }
        Engine.Nesting.awaitStart(by: self)
        onCancel(call) { reporter in Engine.Nesting.holdUntilStarted(reporter.run) }
    }
}

// MARK: Ties to invalidation tokens

nonisolated extension Engine.Run {
    /// Whether `token` was not invalidated since the user's run was made, however often its
    /// retries run a tied step: a token's generation, the count of invalidations as it was last
    /// invalidated, is past every count before it, so past the run's once it was invalidated
    /// since. (From `UInt32.max` invalidations in one process, a run's count is not known, and
    /// no token silences its tied steps.)
    final func isValid(_ token: InvalidationToken) -> Bool {
        let current = token.current  // under the token's lock
        let before = fields.pointee.invalidationsBefore  // set as the run was made: no lock
        return before == .max || current <= Int(before)
    }
}
