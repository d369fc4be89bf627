// Engine/Join.swift: a combination's run, the one mechanism behind `when`, `any`, `race` and
// `thenMap`. Builds on Run.swift: a join calls each member that is an operation alone, and starts a
// run for each other member (inside the combination's run, for its ties), whose completion
// (`MemberRun`) reports to it; it asks its policy what to do each time a member ends, and settles
// the combination's resolver with the policy's verdict once the members it cancelled have stopped.
//
// The file, in order: what a policy reads and decides (`Verdict`, `Ending`, `Tally`, `Policy`); the
// promise of a combination (`Engine.join`); the class (`Running`, then `Join`: its fields, `State`,
// `Progress`, `Ended`, `Settle`, `Cancels`); its events (`init`, `launch`, `MemberRun`,
// `memberEnded`, `runCancelled`, `handlersReturned`); the counting helpers (`countUp`, `countDown`,
// `counted`); cancelling the members (`takeCancels`, `cancelMembers`); last, what its members'
// resolvers call (`Reporter`).
//
// The transitions of its `state` (p: an open combination's progress, with r, its resolver; v: a
// verdict, settle(o) with an outcome o, or cancel; n: what a stopping combination waits for, before
// it settles r as v says or, its run cancelled (-), releases the run's end: the members in runs of
// their own that have not ended, the launch loop, which may be in a member's operation, and each
// thread that calls members' cancel handlers after the lock), and of `launching` beside it (l:
// whether a thread runs the launch loop, in every state, as the loop sees the combination closed
// only when it next asks) and `handling` (h: how many threads call members' cancel handlers after
// the lock: the one that settled the combination, until its cancel of the members is done, and each
// that calls a cancelled member's handlers, until they have returned: its own resolver's, as it
// cancels it or adds one late), each in one lock section, then what is done outside the lock (a
// combination of no members makes no join: its policy's verdict ends its run at once):
//
//   state, l          event                                       new state, l     then
//   open(p), true     made (`init`), by the combination's         unchanged        launch
//                     operation, which then calls `launch`
//   open(p), l        launch: room, and a member not started      unchanged        start it
//   open(p), l        launch: no room, or none left               open(p), false   end the loop
//   open(p), l        a member ends; verdict wait                 open(p), true    launch, if not l
//   open(p), false    a member ends; verdict v, not wait; no      closed           r(o) or cancel r
//                     member run going, handler or member not
//                     started, h = 0
//   open(p), l        a member ends; verdict v, not wait, else    stopping(n,r v), cancel members
//                                                                 l, h+1 (the
//                                                                 settle's)
//   open(p)           a called member with handlers ends by its   a state above,   call them (the
//                     own cancel                                  h+1              row above next)
//   open, closed      a cancelled member adds a handler           unchanged, h+1   hold the run if
//                                                                                  cancelling, call
//                                                                                  it, release
//   stopping(n,x)     the same                                    stopping(n+1,x), the same
//                                                                 h+1
//   stopping(n,x)     a member run ends, the launch loop asks     stopping(n-1,x)  end the loop if
//                     (l: false), or a thread's call of handlers  (h-1 for that    it asked
//                     is done (h-1), n > 1                        thread)
//   stopping(1,r v)   the same                                    closed           r(o) or cancel r
//   stopping(1,-)     the same                                    closed           release run
//   open, closed      the same                                    unchanged (h-1)  -
//   open, stopping    its run is cancelled, its end held (see     stopping(n,-)    cancel members
//   (r v), closed     `Run.hold()`), n > 0 (the member runs
//                     going, the loop if l, and h)
//   the same          its run is cancelled, its end held, n = 0   closed           release hold,
//                                                                                  cancel members
//   any other         a member ends                               unchanged        -
//
// r(o) is carried on by the queue whose block the member that decided it ended in, if any: in a
// block queued there if the thread that stops last is not in it (see `Settle`), and after the
// combination's operation, if it has not returned (`Resolver.resolve(_:carriedOnBy:)`).
//
// The counting helpers do only what the table says: `countUp` adds a thread calling handlers
// (h, and n if stopping), `countDown` takes one of n away and says what the last leaves to do,
// `handlersReturned` takes h down (and n, if stopping), and `counted` does it after the lock
// (`.ends` with a verdict: `Verdict.end`; with none: `Run.release`).
//
// The life of `when(fulfilled: [a, b, c])`, three operations alone that resolve at once, step by
// step (a bare name is this file's, `Type.name` that type's, unless a file is named; l:
// `launching`, h: `handling`; the variadic `when(fulfilled: a, b, c)` maps each member, so its
// members start in runs of their own, as in 2):
//  1. The combination's run calls its operation (`Engine.join`'s, through its `Source` step and
//     `Run.perform`), which makes the `Join` (`init`: `open(p)`, l true, h 0, the run's cancel
//     handler `runCancelled` registered, `Run.onCancel`) and calls `launch`.
//  2. `launch` claims member 0 under the lock (`running[0]` becomes `.called([])`) and calls its
//     operation with a resolver that reports to the join. (A member that is not an operation alone
//     starts in a run of its own, whose completion, `MemberRun.complete`, calls `memberEnded`.)
//  3. Its `fulfill`: `Resolver.resolve(_:carriedOnBy:)` (Run.swift), the join's `resolve`, the
//     stored `reported` (`Slot.value`, Chain.swift: a slot for the outcome, on the stack if it
//     fits), then `memberEnded`: `running[0]` becomes `nil`, the tally counts it, and the policy
//     (`decide`) says `wait`; l is true: nothing more.
//  4. Member 1 goes as member 0 did.
//  5. Member 2: the policy settles. `takeCancels` finds nothing to cancel, but the loop is going
//     (l), so the join cannot settle yet: this thread counts itself (`countUp`: h 1), and the
//     state becomes `stopping(going: 2, settles: v)` (the loop, this thread). After the lock,
//     `cancelMembers` has nothing to do and calls `handlersReturned`: h 0, and `countDown` leaves
//     `stopping(going: 1, settles: v)`.
//  6. Back in `launch`, the loop's next ask finds the join not open: l false, and `countDown`
//     closes it (`closed`), giving `.ends` with v. After the lock, `counted` calls `Verdict.end`,
//     which calls the run's resolver with the values, inside the operation: the run goes on as
//     the operation returns (Run.swift, "A call in calls", from 6).
// A member that ends while no thread runs the loop (l false: the launch returned, say) and whose
// policy says `wait` runs it (`.waits`); the one that decides settles at once (`closed`) if
// nothing is going, no handler is to be called and every member started, else it stops the join
// as in 5.
//
// Cancelled, `when(fulfilled: [a, b, c])` whose three operations wait for their resolvers, having
// registered no cancel handlers (the run `awaitingResolver`, the join `open`, every member
// `.called([])`, l false, h 0):
//  1. The run's cancel (`Run.cancel(call:)`, Run.swift) calls `runCancelled`, which holds the run
//     (`Run.hold`: 2 holds, the canceller's and this) and takes what to cancel (`takeCancels`:
//     each member's `running` entry becomes `.cancelled`, its handlers taken). Nothing is going
//     (no member run, no loop, h 0): the join is `closed`, and the hold is given back at once
//     (`Run.release`: 1).
//  2. `cancelMembers`: the member runs' cancels, then the members' handlers, which, inside the
//     run's cancel, are queued (`Nesting.cancelling`) and called once `runCancelled` returns; here
//     there are neither, nor members never started, so it returns at once. The join's own
//     resolver, let go of unresolved with the join's progress, cancels a call already cancelled:
//     nothing (and, its run cancelled, debug builds do not report it: `isCancelledOrInsideOne`).
//  3. The canceller's `release` ends the run (Run.swift, "A cancel in calls", 3 and 4).
// Cancelled as the combination's operation runs (`calling`), the run has its driving thread's
// hold too, released as that thread stops. With something going (a member's run, the loop, or
// h > 0), the join is `stopping(going: n, settles: nil)` and keeps its hold: the last of what is
// going to stop counts down to `.ends` with no verdict: `Run.release`. The last hold released
// ends the run.
//
// To cancel the members is to cancel the member runs still going, to call the called members'
// cancel handlers (each member's `running` entry becomes `cancelled`) and, for a combination that
// was open, to start the members never started that ignore cancel. Its run's cancel goes in this
// order, one part after another (see `Nesting.cancelling`): the run's handler (`runCancelled`);
// each member run's handlers and end; the called members' handlers, in input order; the members
// that ignore cancel start; the run ends, once nothing holds it (no member run, nor the launch
// loop, which calls a member's operation as a run's driving thread does, nor a thread that calls
// members' cancel handlers). Beside the state, in
// every state: how each member runs (`running`), which the members' resolvers read and change: a
// called member keeps the cancel handlers its resolver sets until it is cancelled (by the
// combination, or by its own resolver, as a run's call is); after that, it calls them at once, and
// stays cancelled whatever its resolver reports.

import Dispatch

nonisolated extension Engine {
    /// What a combination does after a member ended: wait for more, or end its run.
    @usableFromInline enum Verdict<Output, Failure: Swift.Error> {
        case wait, cancel
        case settle(Swift.Result<Output, Failure>)

        /// Settles a combination's run with the verdict's outcome, or cancels it. The outcome is
        /// carried on by `decidedOn`, the queue where the member that decided it ended, if given:
        /// in a block queued there if this thread is not in its block (see `Join.Settle`).
        @inlinable func end(
            _ resolver: Resolver<Output, Failure>, decidedOn: DispatchQueue? = nil
        ) {
            switch self {
            case .settle(let settled):
                nonisolated(unsafe) let outcome = settled  // the members', which it let go of
                guard let decidedOn else { return resolver(outcome) }
                Nesting.inBlock(of: decidedOn) { resolver.resolve(outcome, carriedOnBy: decidedOn) }
            case .wait, .cancel: resolver.cancel()
            }
        }
    }

    /// What a combination's policy is asked about: a member that ended with an outcome or by
    /// cancellation, or, once as it starts, a combination of no members.
    @usableFromInline enum Ending<Member, Failure: Swift.Error> {
        case noMembers
        case outcome(Int, Swift.Result<Member, Failure>)
        case cancelled(Int)
    }

    /// The members' outcomes so far, in input order: `nil` while running, or if cancelled.
    @usableFromInline struct Tally<Member, Failure: Swift.Error> {
        @usableFromInline var outcomes: [Swift.Result<Member, Failure>?]
        @usableFromInline var started = 0
        @usableFromInline var ended = 0
        // `map`, compiled for these types: `Array(repeating:count:)` calls the standard library's
        // unspecialized buffer code, which looks the array's type up at each call (about 500
        // instructions a combination).
        @inlinable init(_ count: Int) { outcomes = (0..<count).map { _ in nil } }
        @inlinable var isComplete: Bool { ended == outcomes.count }
        /// Every outcome, once every member ended with one.
        @inlinable var results: [Swift.Result<Member, Failure>] { outcomes.map { $0! } }
        /// Every value, once every member succeeded.
        @inlinable var values: [Member] { outcomes.map { try! $0!.get() } }
        @inlinable var errors: [Failure] {
            outcomes.compactMap { if case .failure(let error)? = $0 { error } else { nil } }
        }
    }

    @usableFromInline typealias Policy<
        Member, Failure: Swift.Error, Output, OutFailure: Swift.Error
    > = @Sendable (Tally<Member, Failure>, Ending<Member, Failure>) -> Verdict<Output, OutFailure>

    /// A promise whose every run runs `members` anew, at most `width` at once, and asks `decide`
    /// what to do each time one ends, or at once if there are none: the one mechanism behind
    /// every combinator. Its operation is a chain's first stage (`Source`), not an operation
    /// alone as a user's is, so that releasing combinations nested in combinations stays flat.
    /// The first `signals` members run beside the others (a batch's signal): not the
    /// combination's members, whose `ignoringCancel()` work a run stopped before it starts.
    @inlinable static func join<Member, Failure, Output, OutFailure>(
        _ members: [Promise<Member, Failure>], _ width: Int = .max, signals: Int = 0,
        _ decide: @escaping Policy<Member, Failure, Output, OutFailure>
    ) -> Promise<Output, OutFailure> {
        let operation = Operation(file: #fileID, line: #line) {
            (resolver: Resolver<Output, OutFailure>) in
            guard !members.isEmpty else { return decide(Tally(0), .noMembers).end(resolver) }
            Join(members, width, signals: signals, resolver, decide).launch()
        }
        // A run cancelled before it reaches the combination starts the work of the members that
        // ignore cancel (see `Run.skip`), as a combination that ends starts those it never did.
        let ignoring = members.dropFirst(signals).compactMap(\.chain).filter(\.startsIgnoring)
        return Promise(last: Source<Output, OutFailure>(operation, ignoringMembers: ignoring))
    }

    /// How a member of a combination runs: its operation called, its resolver not heard from
    /// yet, with the cancel handlers the resolver set; called, and cancelled as the combination
    /// stopped (its handlers called); or in a run.
    @usableFromInline enum Running {
        case called([@Sendable (any Reporter) -> Void])
        case cancelled
        case run(Run)
    }

    /// One run of a combination. A member made from an operation alone is called with a
    /// resolver that reports here, as a run's resolver reports to its run; any other member runs
    /// in a run of its own.
    ///
    /// Swift calls a generic class's protocol methods unspecialized, and unspecialized code here
    /// would look types up at every use: so what the resolvers call (`Reporter`, at the end of
    /// the class) reads only fields whose types are not generic, and ends a member through
    /// `reported` or `cancelled`, which are compiled for the join's types. (Calling `Slot.value`
    /// and `memberEnded` from there instead cost 6.7 times the instructions of an element of a
    /// fan-out: measure with Benchmarks/instructions.sh before removing the closures.)
    @usableFromInline
    final class Join<Member, Failure: Swift.Error, Output, OutFailure: Swift.Error>:
        Reporter, @unchecked Sendable
    {
        @usableFromInline let lock = Lock()
        @usableFromInline let width: Int
        /// How many members, first, run beside the others (a batch's signal): see `Engine.join`.
        @usableFromInline let signals: Int
        @usableFromInline let decide: Policy<Member, Failure, Output, OutFailure>
        /// `memberEnded(_:_:carriedOnBy:)`, for the resolvers' reports: with the outcome a resolver
        /// writes (and the queue it carries, a library's resolver's: see
        /// `Resolver.resolve(_:carriedOnBy:)`), or by cancellation.
        @usableFromInline let reported: (Join, Int, (Slot) -> Void, DispatchQueue?) -> Bool
        @usableFromInline let cancelled: (Join, Int) -> Bool
        /// The combination's run, which its members' runs are inside.
        @usableFromInline let outer: Run
        /// What `lock` guards, read and changed only under it, which orders every access: so it
        /// skips exclusivity checks, which would cost one at every use. `state`: where the
        /// combination is. `running`: the members that run, in every state: `nil` for one that
        /// has not started, or has ended. (A called member's resolver may report after the
        /// combination closed.) `launching`: whether a thread runs the launch loop (at first, the
        /// one that starts the run), so that one thread at a time runs it, and that the end of a
        /// cancelled run waits for it. `handling`: how many threads call members' cancel handlers
        /// after the lock (the one that settled the combination, a called member's resolver that
        /// cancelled it or adds a handler once cancelled: see `countUp`), which a stopping
        /// combination waits for too, as a run's end waits for its canceller's handlers.
        @exclusivity(unchecked) @usableFromInline var guarded:
            (state: State, running: [Running?], launching: Bool, handling: Int)

        /// Where the combination is (see the table in the file's header).
        @usableFromInline enum State {
            /// Members start and report.
            case open(Progress)
            /// Its members stop, and what it waits for is a count (`going`): every member run still
            /// going as it closed, the launch loop, if a thread runs it (the member operation it
            /// calls may not have returned), and each thread that calls members' cancel handlers
            /// (they may not have returned). Then it settles the resolver as its policy's verdict
            /// says (`settles`), so that the members' `ensure` steps have run before the steps
            /// after the combination; or, once its run was cancelled (`nil`), it releases the run's
            /// end (`outer`'s), which it holds for them.
            case stopping(going: Int, settles: Settle?)
            /// It settled, or was cancelled.
            case closed
        }

        /// An open combination's resolver, members and what they have done: an object, so that
        /// an event changes it in place, where a change to what an enum case holds would copy it.
        @usableFromInline final class Progress {
            @usableFromInline let resolver: Resolver<Output, OutFailure>
            /// Let go of as the combination closes: a member's resolver, which keeps the join,
            /// may outlive its run (a cancelled `DispatchWorkItem` keeps its block until its
            /// deadline), and must not keep what the members captured.
            @usableFromInline let members: [Promise<Member, Failure>]
            /// Changed only under the join's lock: so it skips exclusivity checks too.
            @exclusivity(unchecked) @usableFromInline var tally: Tally<Member, Failure>

            @inlinable init(
                _ resolver: Resolver<Output, OutFailure>, _ members: [Promise<Member, Failure>]
            ) {
                self.resolver = resolver
                self.members = members
                tally = Tally(members.count)
            }
        }

        /// What a member's end leaves to do once the lock is let go of.
        @usableFromInline enum Ended {
            /// Nothing: it had ended, or the combination had, or other member runs go on.
            case nothing
            /// The combination waits for more; with `true`, this thread runs the launch loop.
            case waits(launch: Bool)
            /// The combination closes: cancel the members (the verdict waits: `stopping`).
            case closes(Cancels)
            /// The combination closed, at once or as the last that a stopping one waited for
            /// stopped: settle the resolver as the verdict says, or, with none (its run was
            /// cancelled: `State.stopping`'s `settles` is `nil`), release the run's hold.
            case ends(settles: Settle?)
        }

        /// How a combination settles: its resolver, its policy's verdict, and the queue whose
        /// block the member that decided it ended in, if any, where the steps after it go on (the
        /// thread that settles, the last that a stopping combination waited for, may be another:
        /// the launch loop, say, on the thread that started the run, inside its operation).
        @usableFromInline typealias Settle = (
            resolver: Resolver<Output, OutFailure>, verdict: Verdict<Output, OutFailure>,
            decidedOn: DispatchQueue?
        )

        /// What cancelling the members cancels, taken under the lock: every member run still
        /// going (each time, even after another: a cancel of the combination's run that comes
        /// while the thread that settled it is still cancelling them counts them, so that the
        /// run's end waits for them; a second cancel of a run is a no-op), the called members'
        /// cancel handlers, and, of the combination it closed, the members never started that
        /// ignore cancel (they start now: see `startIgnored`). What it holds is let go of outside
        /// the lock.
        @usableFromInline typealias Cancels = (
            runs: [Run], handlers: [@Sendable (any Reporter) -> Void], closed: Progress?
        )

        /// Opens the combination, which its run's cancel reaches from then on; `launch` starts
        /// its members.
        @inlinable init(
            _ members: [Promise<Member, Failure>], _ width: Int, signals: Int,
            _ resolver: Resolver<Output, OutFailure>,
            _ decide: @escaping Policy<Member, Failure, Output, OutFailure>
        ) {
            self.width = width
            self.signals = signals
            self.decide = decide
            outer = resolver.run
            guarded = (
                .open(Progress(resolver, members)),
                members.map { _ in nil },  // (not `Array(repeating:count:)`: see `Tally`)
                true, 0
            )
            reported = { join, index, write, queue in
                let outcome = Slot.value(Swift.Result<Member, Failure>.self, from: write)
                return join.memberEnded(index, outcome, carriedOnBy: queue)
            }
            cancelled = { join, index in join.memberEnded(index, nil) }
            // Last, with every field set: a cancel of its run may come at once. Its reporter's own
            // handler, as a timeout's: `Resolver.onCancel` would wrap it in one more closure.
            resolver.reporter.onCancel(resolver.call) { [self] _ in runCancelled() }
        }

        deinit { lock.free() }

        /// Starts members while there is room, in a loop rather than by recursion: members that
        /// end at once make room from inside `start`, and a hundred thousand must not nest. The
        /// caller has claimed the loop (`launching`), so that one thread at a time runs it.
        @inlinable func launch() {
            var ended = Ended.nothing  // the loop was the last that a stopping join waited for
            // A member is in `running` from the moment it is claimed, before it starts, so that a
            // stop reaches it: a member run cancelled before `start` never begins (an operation
            // alone claimed before a cancel is called all the same, its resolver cancelled, as a
            // run's operation may be; the cancelled run's end waits for the loop). The claim gives
            // the member, and the run it starts in, unless it is an operation alone.
            while case (let index, let member, let run)? = lock.withLock({
                () -> (Int, Promise<Member, Failure>, Run?)? in
                guard case .open(let progress) = guarded.state else {
                    guarded.launching = false
                    ended = countDown()
                    return nil
                }
                let index = progress.tally.started
                guard index < guarded.running.count, index - progress.tally.ended < width else {
                    guarded.launching = false
                    return nil
                }
                progress.tally.started += 1
                let member = progress.members[index]
                guard let last = member.chain else {
                    guarded.running[index] = .called([])
                    return (index, member, nil)
                }
                let run = Run.make(for: last, completing: MemberRun.self, cancelledWith: outer)
                guarded.running[index] = .run(run)
                return (index, member, run)
            }) {
                if let run {
                    // A member cancelled meanwhile takes no step; a batch's signal, not a member,
                    // runs its `ensure` steps, as any run cancelled before it starts.
                    run.start(member, MemberRun(self, index), member: index >= signals)
                } else if case .operation(let operation) = member.body {
                    // A resolver of its own, as a run gives each call (see `Run.perform`), let go
                    // of as the operation returns: unresolved, it ends its member at once.
                    operation(Resolver<Member, Failure>(reporter: self, call: index, of: operation))
                }
            }
            counted(ended)
        }

        /// What gets a member run's outcome: the join, and the member the run runs.
        @usableFromInline struct MemberRun: Completion {
            @usableFromInline let join: Join
            @usableFromInline let index: Int
            @inlinable init(_ join: Join, _ index: Int) { (self.join, self.index) = (join, index) }
            @inlinable func complete(_ outcome: sending Swift.Result<Member, Failure>?, of _: Run) {
                join.memberEnded(index, outcome, carriedOnBy: Nesting.queueHere)
            }
        }

        /// Member `index` ended, with `outcome` or (`nil`) by cancellation; `false` if nothing
        /// came of it: it had ended already, the combination had, or what a stopping combination
        /// waits for still goes on. (A called member's resolver reads it: as it resolves, to
        /// report nothing as it goes; as it goes unresolved, for the debug report.) `queue`: what
        /// carries the combination on if this member decides it (see `Settle`): the queue its
        /// run ended on, or a library's resolver's (`Resolver.resolve(_:carriedOnBy:)`); a user's
        /// resolver's, none.
        @inlinable @discardableResult
        func memberEnded(
            _ index: Int, _ outcome: Swift.Result<Member, Failure>?,
            carriedOnBy queue: DispatchQueue? = nil
        ) -> Bool {
            var handlers: [@Sendable (any Reporter) -> Void]?  // a called member's
            var closed: Progress?  // let go of after the lock
            let ended = lock.withLock { () -> Ended in
                switch guarded.running[index] {
                // Ended; or cancelled, by the combination or by its own resolver, it stays
                // cancelled for its resolver, whatever it reports after (a late outcome, its
                // resolver let go of), as a run's call does. So the cancel that a called member's
                // resolver sends as it goes, resolved or not (see `Resolver.deinit`), ends only a
                // member still running.
                case nil, .cancelled?: return .nothing
                case .called(let list)?:
                    if !list.isEmpty { handlers = list }
                    guarded.running[index] = outcome == nil ? .cancelled : nil
                    // Its own cancel: its handlers, called after the lock, are counted.
                    if outcome == nil, handlers != nil { countUp() }
                case .run?: guarded.running[index] = nil
                }
                switch guarded.state {
                case .stopping, .closed: return countDown()
                case .open(let progress):
                    progress.tally.ended += 1
                    progress.tally.outcomes[index] = outcome
                    let ending = outcome.map { Ending.outcome(index, $0) } ?? .cancelled(index)
                    switch decide(progress.tally, ending) {
                    case .wait:
                        defer { guarded.launching = true }  // by this thread, if by none
                        return .waits(launch: !guarded.launching)
                    case let verdict:
                        let (cancels, going) = takeCancels()
                        // Nothing to stop, call or start (no member run going, no handler, every
                        // member started, no launch loop: a `when` whose last member succeeded
                        // after the launch returned): it settles now. Members that succeed inside
                        // the launch find the loop going: the loop settles as it next asks.
                        let started = progress.tally.started == progress.members.count
                        let settles: Settle = (progress.resolver, verdict, queue)
                        if going == 0, cancels.handlers.isEmpty, started {
                            guarded.state = .closed
                            closed = progress
                            return .ends(settles: settles)
                        }
                        countUp()  // this thread's, until its cancel is done
                        guarded.state = .stopping(going: going + 1, settles: settles)
                        return .closes(cancels)
                    }
                }
            }
            // A member that cancelled itself hears its handlers, as an operation run alone does,
            // as a part of cancelling (see `Run.cancel(call:)`); one that resolved lets go of
            // them, after the lock (see `Lock`).
            if outcome == nil, let handlers {
                Nesting.cancelling(
                    { for handler in handlers { handler(self) } },
                    then: { [self] in handlersReturned() })
            }
            withExtendedLifetime((handlers, closed)) {}
            switch ended {
            case .nothing: return false
            case .waits(let launch): if launch { self.launch() }
            case .closes(let members): cancelMembers(members) { [self] in handlersReturned() }
            case .ends: counted(ended)
            }
            return true
        }

        /// Its run was cancelled: it cancels the members, and holds the run's end until the
        /// member runs, the launch loop and the threads that call members' handlers have stopped.
        @inlinable func runCancelled() {
            // The hold is taken first, so that the last member run (or the loop, or a handler's),
            // which releases it as it ends once the join is stopping, always finds it taken; it
            // is kept only if one is going: else it is given back at once. (A handle's cancel of
            // the run as it waits for the join: the canceller's hold, 1; this one, 2; released by
            // the last member run to end, or here, 1; the canceller's, once the cancels it set off
            // are done, 0: the run ends.)
            outer.hold()
            // It comes once, to a combination open, closed, or stopping to settle (never stopping
            // for its cancel, which it sets).
            let (members, waits, left) = lock.withLock { () -> (Cancels, Bool, State) in
                let left = guarded.state
                let (members, going) = takeCancels()
                guarded.state = going > 0 ? .stopping(going: going, settles: nil) : .closed
                return (members, going > 0, left)
            }
            // The state left goes after the lock, and with it, once the members' cancel below
            // lets go of an open one's progress too, the combination's resolver, unresolved (and a
            // verdict that waited): its release cancels a call of a run already cancelled, which
            // does nothing.
            withExtendedLifetime(left) {}
            if !waits { outer.release() }  // nothing to wait for
            cancelMembers(members)
        }

        /// A thread that called members' cancel handlers after the lock is done with them (the
        /// settle's cancel of the members, with what the handlers cancelled, or a member's own
        /// cancel): the end of a cancelled run no longer waits for it.
        @inlinable func handlersReturned() {
            counted(
                lock.withLock {
                    guarded.handling -= 1
                    return countDown()
                })
        }

        /// Counts a thread that calls members' cancel handlers after the lock (under it), which a
        /// stopping combination waits for, as the end of a cancelled run waits for the handlers
        /// its canceller calls; `handlersReturned` counts it down.
        @inlinable func countUp() {
            guarded.handling += 1
            if case .stopping(let going, let settles) = guarded.state {
                guarded.state = .stopping(going: going + 1, settles: settles)
            }
        }

        /// Counts a stopping combination down (under the lock) as a member run, the launch loop
        /// or a thread that calls members' handlers that it waits for ends: the last settles the
        /// resolver, or releases the end of the cancelled run.
        @inlinable func countDown() -> Ended {
            guard case .stopping(let going, let settles) = guarded.state else { return .nothing }
            guarded.state = going > 1 ? .stopping(going: going - 1, settles: settles) : .closed
            return going > 1 ? .nothing : .ends(settles: settles)
        }

        /// Does what the last count down leaves to do, after the lock.
        @inlinable func counted(_ ended: Ended) {
            switch ended {
            case .ends(let (resolver, verdict, queue)?): verdict.end(resolver, decidedOn: queue)
            case .ends(nil): outer.release()
            case .nothing, .waits, .closes: break
            }
        }

        /// Takes what cancelling the members cancels (under the lock), with the progress of the
        /// combination, if it is open (the caller closes it); and counts what a stopping
        /// combination would wait for: those member runs, the launch loop, if a thread runs it,
        /// and the threads that call members' cancel handlers.
        @inlinable func takeCancels() -> (Cancels, going: Int) {
            var cancels: Cancels = ([], [], nil)
            if case .open(let progress) = guarded.state { cancels.closed = progress }
            for index in guarded.running.indices {
                switch guarded.running[index] {
                case .run(let run)?: cancels.runs.append(run)
                case .called(let handlers)?:
                    cancels.handlers += handlers
                    guarded.running[index] = .cancelled
                default: break
                }
            }
            return (cancels, cancels.runs.count + (guarded.launching ? 1 : 0) + guarded.handling)
        }

        /// Cancels the member runs still going, then calls the called members' cancel handlers
        /// and starts the members never started that ignore cancel, then calls `done`, if given:
        /// if those wait on this thread for a level below (as runs started inside a shared
        /// promise's settle inside another's do), after them (`Nesting.afterWaiting`), so that
        /// what they do at once comes before the combination goes on.
        @inlinable func cancelMembers(_ members: Cancels, then done: (() -> Void)? = nil) {
            for run in members.runs { _ = run.cancel(call: nil) }
            // The work of the members never started that ignore cancel.
            let unstarted =
                members.closed.map { $0.members.dropFirst(max($0.tally.started, signals)) } ?? []
            let ignored = unstarted.flatMap { $0.chain?.ignoredWork ?? [] }
            guard !members.handlers.isEmpty || !ignored.isEmpty else {
                done?()
                return
            }
            // After the runs' cancels, which a cancel under way on this thread does later: so
            // `done` comes once the handlers, and what they cancelled, are done. (From
            // `runCancelled`, inside its run's cancel, this queues them: they are called once
            // `runCancelled` returns, before the run's release; see `Nesting.cancelling`.)
            Nesting.cancelling(
                { for handler in members.handlers { handler(self) } },
                then: {
                    let mark = Nesting.waitingCount
                    for work in ignored { self.outer.startIgnored(work) }
                    if let done { Nesting.afterWaiting(since: mark, done) }
                })
        }

        // A member's resolver reports here: `call` is the member's index. An outcome goes on
        // through the stored `reported` (set in `init`: `Slot.value`, then `memberEnded`), a
        // cancel through `cancelled` (`memberEnded` with `nil`): see the class's comment for why.

        @usableFromInline func resolve(
            _ call: Int, with write: (Slot) -> Void, carriedOnBy queue: DispatchQueue?
        ) -> Bool {
            reported(self, call, write, queue)
        }

        @usableFromInline func onCancel(
            _ call: Int, _ handler: @escaping @Sendable (any Reporter) -> Void
        ) {
            let callNow = lock.withLock { () -> Bool in
                if case .cancelled? = guarded.running[call] {
                    // Counted as the members' other handlers are (see `countUp`).
                    countUp()
                    return true
                }
                // Not called, or ended:
                guard case .called(var handlers)? = guarded.running[call] else { return false }
                guarded.running[call] = nil  // for a moment, so that the list is not copied
                handlers.append(handler)
                guarded.running[call] = .called(handlers)
                return false
            }
            // Cancelled: called as a run's late handler is, counted (above): by the combination's
            // run, which a join that its run's cancel closed is left to hold.
            if callNow {
                outer.callLate(
                    Engine.CancelHandler { [self] _ in
                        handler(self)
                        handlersReturned()
                    })
            }
        }

        @usableFromInline func isCancelled(_ call: Int) -> Bool {
            lock.withLock { if case .cancelled? = guarded.running[call] { true } else { false } }
        }

        @usableFromInline func cancel(_ call: Int) -> Bool { cancelled(self, call) }

        @usableFromInline var run: Run { outer }
    }
}
