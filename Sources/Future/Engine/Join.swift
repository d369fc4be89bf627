// Engine/Join.swift: a combination's run, the one mechanism behind `when`, `any`, `race`,
// `timeout` (on every clock) and `thenMap`. Builds on Run.swift: a join calls each member that is
// an operation alone, and starts a run for each other member (inside the combination's run, for
// its ties); it asks its policy what to do each time a member ends, and settles the
// combination's resolver with the policy's verdict. The transitions of its `state` (r: the
// combination's resolver; o: an outcome; "member runs going": members in runs of their own that
// have not ended):
//
//   state           event                                         new state       then
//   closed (made)   start                                         open(r)         launch members
//   open(r)         a member ends; verdict wait                   open(r)         launch more
//   open(r)         a member ends; verdict settle(o)              closed          cancel members, r(o)
//   open(r)         a member ends; verdict cancel                 closed          cancel members, r's
//                                                                                 run
//   open(r)         a member ends; verdict settleOnceStopped(o),
//                   member runs going                             stopping(r, o)  cancel members
//   open(r)         … the same, no member runs going              closed          r(o)
//   stopping(r, o)  the last member run ends                      closed          r(o)
//   open, stopping  its run is cancelled; member runs going       holding(run)    hold its run's end,
//                                                                                 cancel members
//   open, stopping  its run is cancelled; none going              closed          cancel members
//   holding(run)    the last member run ends                      closed          release the hold
//   closed          a member ends, or reports                     closed          -
//
// Beside the state, under the lock: each member's progress (`running`, `tally`, the called
// members' cancel handlers), how many have started, and whether a thread runs the launch loop.

nonisolated extension Engine {
    /// What a combination does after a member ended: wait for more, or end its run, at once or,
    /// for a `timeout`, once the runs of the members it cancels have stopped (so that nothing of
    /// the work runs after the timeout's outcome: their `ensure` steps have run).
    @usableFromInline enum Verdict<Output, Failure: Swift.Error> {
        case wait, cancel
        case settle(Swift.Result<Output, Failure>)
        case settleOnceStopped(Swift.Result<Output, Failure>)
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
        @usableFromInline var ended = 0
        @inlinable init(_ count: Int) { outcomes = Array(repeating: nil, count: count) }
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
    /// every combinator. (A chain's first stage, not an operation alone, so that releasing
    /// combinations nested in combinations stays flat: see `Source`.)
    @inlinable static func join<Member, Failure, Output, OutFailure>(
        _ members: [Promise<Member, Failure>], _ width: Int = .max,
        _ decide: @escaping Policy<Member, Failure, Output, OutFailure>
    ) -> Promise<Output, OutFailure> {
        let operation = Operation(file: #fileID, line: #line) {
            (resolver: Resolver<Output, OutFailure>) in Join(members, width, decide).start(resolver)
        }
        return Promise(last: Source<Output, OutFailure>(operation))
    }

    /// A `timeout` on any clock: a combination of the work and an alarm that fails with
    /// `error()`, whichever settles first. The alarm's `deadline` is read as each run of the
    /// timeout starts; the alarm is set (by `alarm`, which returns what cancels it) only once the
    /// work waits, so work that settles at once wins, even with a deadline already past. The
    /// first stage keeps the work's chain, whose `ensure` steps a run cancelled before it reaches
    /// the timeout still runs (see `Run.skip`).
    @inlinable static func timeout<Value, Failure, Instant: Sendable>(
        _ work: Promise<Value, Failure>, failingWith error: @escaping @Sendable () -> Failure,
        deadline: @escaping @Sendable () -> Instant,
        alarm: @escaping @Sendable (Instant, @escaping @Sendable () -> Void) -> @Sendable () -> Void
    ) -> Promise<Value, Failure> {
        let operation = Operation(file: #fileID, line: #line) {
            (resolver: Resolver<Value, Failure>) in
            let due = deadline()
            let timer = Promise<Value, Failure>(file: #fileID, line: #line) { timer in
                let cancel = alarm(due) { timer.reject(error()) }
                timer.onCancel { _ in cancel() }
            }
            Join([work, timer], .max) { _, ending in
                if case .outcome(_, let outcome) = ending {
                    .settleOnceStopped(outcome)
                } else {
                    .cancel
                }
            }.start(resolver)
        }
        return Promise(last: Source<Value, Failure>(operation, work: work.chain))
    }

    /// How a member of a combination runs: its operation called, its resolver not heard from
    /// yet; or in a run.
    @usableFromInline enum Running {
        case called
        case run(Run)
    }

    /// One run of a combination. A member made from an operation alone is called with a
    /// resolver that reports here, as a run's resolver reports to its run; any other member runs
    /// in a run of its own (or on the `lane`, after a member that ended at once).
    ///
    /// Swift calls a generic class's protocol methods unspecialized, and unspecialized code here
    /// would look types up at every use: so what the resolvers call (`Reporter`) reads only
    /// fields whose types are not generic, and ends a member through `reported`, which is
    /// compiled for the join's types.
    @usableFromInline
    final class Join<Member, Failure: Swift.Error, Output, OutFailure: Swift.Error>:
        Reporter, @unchecked Sendable
    {
        @usableFromInline let lock = Lock()
        @usableFromInline let width: Int
        @usableFromInline let decide: Policy<Member, Failure, Output, OutFailure>
        // Guarded by `lock`.
        /// The members, until the combination closes: a member's resolver, which keeps the join,
        /// may outlive its run (a cancelled `DispatchWorkItem` keeps its block until its
        /// deadline), and must not keep what the members captured.
        @usableFromInline var members: [Promise<Member, Failure>]
        /// `memberEnded(_:_:)`, for the resolvers' reports: with the outcome a resolver writes, or by
        /// cancellation.
        @usableFromInline let reported: (Join, Int, (Slot) -> Void) -> Bool
        @usableFromInline let cancelled: (Join, Int) -> Bool
        /// Read and changed only under `lock`, which orders every access: so they skip
        /// exclusivity checks, which would cost one at every use.
        @exclusivity(unchecked) @usableFromInline var guarded: Guarded

        @usableFromInline struct Guarded {
            @usableFromInline var tally: Tally<Member, Failure>
            /// The members that run: `nil` for one that has not started, or has ended.
            @usableFromInline var running: [Running?]
            /// The cancel handlers of the members whose operations were called, by member.
            @usableFromInline var cancelHandlers: [Int: [@Sendable (any Reporter) -> Void]] = [:]
            /// How many members have been started (more than `members` holds, once closing
            /// empties it).
            @usableFromInline var started = 0
            /// Whether a thread runs the launch loop: at first, the one that starts the run.
            @usableFromInline var launching = true
            @usableFromInline var state = State.closed

            @inlinable init(_ count: Int) {
                tally = Tally(count)
                running = Array(repeating: nil, count: count)
            }
        }
        /// The combination's run, which its members' runs are inside.
        @usableFromInline var outer: Run?

        @inlinable init(
            _ members: [Promise<Member, Failure>], _ width: Int,
            _ decide: @escaping Policy<Member, Failure, Output, OutFailure>
        ) {
            self.members = members
            self.width = width
            self.decide = decide
            guarded = Guarded(members.count)
            reported = Join.report
            cancelled = { join, index in join.memberEnded(index, nil) }
        }

        /// Ends member `index` with the outcome `write` puts in a slot.
        @inlinable static func report(_ join: Join, _ index: Int, _ write: (Slot) -> Void) -> Bool {
            // The slot's own rule: what it holds has no other owner.
            nonisolated(unsafe) let outcome: Swift.Result<Member, Failure>? =
                withUnsafeTemporaryAllocation(of: Swift.Result<Member, Failure>.self, capacity: 1) {
                    let slot = Slot(memory: UnsafeMutableRawPointer($0.baseAddress!))
                    write(slot)
                    return slot.take(Swift.Result<Member, Failure>.self)
                }
            return join.memberEnded(index, outcome)
        }

        /// Whether the combination still runs: members start and report while it is `open`,
        /// with the resolver that settles it; decided to settle once the runs it cancels have
        /// stopped, it is `stopping` until the last ends; cancelled while member runs go on, it
        /// is `holding` the end of its run (see `Run.hold()`) until the last ends; once it has
        /// settled or been cancelled, it is `closed`.
        @usableFromInline enum State {
            case open(Resolver<Output, OutFailure>)
            case stopping(Resolver<Output, OutFailure>, Swift.Result<Output, OutFailure>)
            case holding(Run)
            case closed
        }

        @inlinable var isOpen: Bool { if case .open = guarded.state { true } else { false } }

        /// Whether a member runs in a run of its own (under the lock).
        @inlinable var isRunningAMember: Bool {
            guarded.running.contains { if case .run? = $0 { true } else { false } }
        }

        deinit { lock.free() }

        @inlinable func start(_ resolver: Resolver<Output, OutFailure>) {
            guarded.state = .open(resolver)
            outer = resolver.run
            // (Read before a cancel can let go of the members.)
            if members.isEmpty { return settle(decide(guarded.tally, .noMembers), resolver) }
            resolver.onCancel { [self] _ in cancelMembers(holding: outer) }
            launch()
        }

        /// What the launch loop starts next.
        @usableFromInline enum Launch {
            case call(Int, Operation)
            case run(Int, Run, Stage)
        }

        /// Starts members while there is room, in a loop rather than by recursion: members that
        /// end at once make room from inside `start`, and a hundred thousand must not nest. The
        /// caller has claimed the loop (`launching`), so that one thread at a time runs it.
        @inlinable func launch() {
            // The run that runs members one after another while each ends at once (see `start`),
            // and the member it ran last.
            var lane: (run: Run, member: Int)?
            let ended = Callback<Member, Failure> { [self] run, outcome in
                memberEnded(run.member, outcome)
            }
            // A member is in `running` from the moment it is claimed, before it starts, so that
            // `cancelMembers()` reaches it: a member cancelled before `start` never begins (even on a run
            // whose last member has finished: see `State.ended(cancelledSince:)`).
            while let launch = lock.withLock({ () -> Launch? in
                guard isOpen, guarded.started < members.count,
                    guarded.started - guarded.tally.ended < width
                else {
                    guarded.launching = false
                    return nil
                }
                // The lane goes on only if its member ended with an outcome: else it goes on
                // elsewhere, or was cancelled.
                if let member = lane?.member, guarded.tally.outcomes[member] == nil { lane = nil }
                guarded.started += 1
                let index = guarded.started - 1
                switch members[index].body {
                case .operation(let operation):
                    guarded.running[index] = .called
                    return .call(index, operation)
                case .chain(let last):
                    let run =
                        lane?.run
                        ?? .make(
                            for: last, completing: Callback<Member, Failure>.self, inside: outer)
                    guarded.running[index] = .run(run)
                    return .run(index, run, last)
                }
            }) {
                switch launch {
                case .call(let index, let operation):
                    // A resolver of its own, as a run gives each call (see `Run.perform`), let go
                    // of as the operation returns: unresolved, it ends its member at once.
                    operation(Resolver<Member, Failure>(reporter: self, call: index, of: operation))
                case .run(let index, let run, let last):
                    lane = (run, index)
                    run.member = index
                    run.start(Promise(last: last), ended)
                }
            }
        }

        /// Member `index` ended, with `outcome` or (`nil`) by cancellation; `false` if it had
        /// ended already, or the combination had.
        @inlinable @discardableResult
        func memberEnded(_ index: Int, _ outcome: sending Swift.Result<Member, Failure>?) -> Bool {
            var claimed = false  // the launch loop, if no thread runs it (one lock, not two)
            var released: Run?
            var ends = false
            var stops = false
            // The members' outcomes, and a called member's cancel handlers, go outside the lock.
            typealias Settled = (
                Verdict<Output, OutFailure>, Resolver<Output, OutFailure>, Tally<Member, Failure>
            )
            let (settled, handlers) = lock.withLock {
                () -> (Settled?, [@Sendable (any Reporter) -> Void]?) in
                guard guarded.running[index] != nil else { return (nil, nil) }
                // In every state: `stopping` and `holding` wait for it.
                guarded.running[index] = nil
                switch guarded.state {
                case .open: break
                case .closed: return (nil, nil)
                case .stopping, .holding:
                    // A run it cancelled ended; the last settles it, or releases its run.
                    guard !isRunningAMember else { return (nil, nil) }
                    defer { guarded.state = .closed }
                    if case .holding(let run) = guarded.state {
                        released = run
                        return (nil, nil)
                    }
                    guard case .stopping(let resolver, let outcome) = guarded.state else {
                        return (nil, nil)
                    }
                    return ((.settle(outcome), resolver, guarded.tally), nil)
                }
                ends = true
                // (Not a lookup, which hashes, when no member has any.)
                let handlers =
                    guarded.cancelHandlers.isEmpty
                    ? nil : guarded.cancelHandlers.removeValue(forKey: index)
                guarded.tally.ended += 1
                guarded.tally.outcomes[index] = outcome
                let ending = outcome.map { Ending.outcome(index, $0) } ?? .cancelled(index)
                let verdict = decide(guarded.tally, ending)
                if case .wait = verdict {
                    claimed = !guarded.launching
                    guarded.launching = true
                    return (nil, handlers)
                }
                // (Bound only now, as the combination settles: binding it costs a retain.)
                guard case .open(let resolver) = guarded.state else { return (nil, handlers) }
                var settles = verdict
                if case .settleOnceStopped(let outcome) = verdict {
                    guard !isRunningAMember else {
                        guarded.state = .stopping(resolver, outcome)
                        stops = true
                        return (nil, handlers)
                    }
                    settles = .settle(outcome)
                }
                guarded.state = .closed
                defer { guarded.tally.outcomes = [] }
                return ((settles, resolver, guarded.tally), handlers)
            }
            // A member that cancelled its own run hears its handlers, as an operation run alone
            // does (see `Run.cancel(call:)`); one that resolved lets go of them (see `Lock`).
            if outcome == nil, let handlers { for handler in handlers { handler(self) } }
            withExtendedLifetime(handlers) {}
            if let (verdict, resolver, _) = settled { settle(verdict, resolver) }
            if stops { cancelMembers() }
            released?.release()
            if claimed { launch() }
            return ends
        }

        /// Cancels the members still running, then settles the combination's run.
        @inlinable func settle(
            _ verdict: Verdict<Output, OutFailure>, _ resolver: Resolver<Output, OutFailure>
        ) {
            cancelMembers()
            guard case .settle(let settled) = verdict else { return resolver.cancel() }
            nonisolated(unsafe) let outcome = settled  // members' outcomes, which it let go of
            resolver(outcome)
        }

        /// Cancels every member still running: the combination settled, or was cancelled. Every
        /// call cancels them all, even after another: a cancel of the combination's run that
        /// comes while the run that settled it is still cancelling the members must not return
        /// before they are (cancelling one twice is a no-op). The members it never started that
        /// ignore cancel start now (see `startIgnored`).
        /// With `holding`: the combination's run was cancelled, and its end waits for the members'
        /// runs to stop.
        @inlinable func cancelMembers(holding run: Run? = nil) {
            let held = run?.hold() ?? false
            var holds = false
            // The state it closes, with the resolver of a combination still open, goes outside
            // the lock.
            typealias Stopped = (
                [Run], [(Int, [@Sendable (any Reporter) -> Void])],
                ArraySlice<Promise<Member, Failure>>, (State, Tally<Member, Failure>)
            )
            let (runs, handlers, unstarted, closed) = lock.withLock { () -> Stopped in
                // The members, and the outcomes of those that ended, go with the run (a slice
                // keeps its array's storage: to outside the lock).
                let unstarted = members.dropFirst(guarded.started)
                members = []  // the unstarted start here if they ignore cancel, or never
                let previous = (guarded.state, guarded.tally)
                if held, let run, isRunningAMember {
                    guarded.state = .holding(run)
                    holds = true
                } else if isOpen {
                    guarded.state = .closed  // (else as the last run it cancelled ends)
                }
                guarded.tally.outcomes = []
                let runs = guarded.running.compactMap {
                    if case .run(let run)? = $0 { run } else { nil }
                }
                let handlers = guarded.cancelHandlers.sorted { $0.key < $1.key }
                guarded.cancelHandlers = [:]
                return (runs, handlers, unstarted, previous)
            }
            withExtendedLifetime(closed) {}  // see `Lock`
            if held && !holds { run?.release() }  // no member run to wait for
            for run in runs { _ = run.cancel(call: nil) }
            // After the runs' cancels, which a cancel under way on this thread does later.
            Nesting.cancelling(
                { for (_, list) in handlers { for handler in list { handler(self) } } },
                then: {
                    for member in unstarted {
                        member.chain?.ignoredWork.map { self.outer?.startIgnored($0) }
                    }
                })
        }

        // A member's resolver reports here: `call` is the member's index.

        @usableFromInline func resolve(_ call: Int, with write: (Slot) -> Void) {
            _ = reported(self, call, write)
        }

        @usableFromInline func onCancel(
            _ call: Int, _ handler: @escaping @Sendable (any Reporter) -> Void
        ) {
            let callNow = lock.withLock { () -> Bool in
                guard case .called? = guarded.running[call] else { return false }  // it ended
                guard isOpen else { return true }
                guarded.cancelHandlers[call, default: []].append(handler)
                return false
            }
            if callNow { handler(self) }
        }

        @usableFromInline func isCancelled(since call: Int) -> Bool {
            lock.withLock {
                if !isOpen, case .called? = guarded.running[call] { true } else { false }
            }
        }

        @usableFromInline func cancel(_ call: Int) { _ = cancelled(self, call) }

        @usableFromInline func resolverReleased(
            _ call: Int, _ promise: @autoclosure () -> String
        ) {
            guard cancelled(self, call) else { return }
            #if DEBUG
                PromiseDiagnostics.handler(
                    "an operation of \(promise()) released its resolver without resolving it. "
                        + "Its member of a combination can never finish, so it was cancelled.")
            #endif
        }

        @usableFromInline var run: Run { outer! }
    }
}
