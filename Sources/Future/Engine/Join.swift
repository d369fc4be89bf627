// Engine/Join.swift: a combination's run, the one mechanism behind `when`, `any`, `race`,
// `timeout` and `thenMap`. Builds on Run.swift: a join starts a run for each member (inside the
// combination's run, for its ties), asks its policy what to do each time a member ends, and
// settles the combination's resolver with the policy's verdict.

nonisolated extension RunHandle {
    /// What a combination does after a member ended: wait for more, or end its run.
    @usableFromInline enum Verdict<Output, Failure: Swift.Error> {
        case wait, cancel
        case settle(Swift.Result<Output, Failure>)
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
    /// every combinator.
    @inlinable static func join<Member, Failure, Output, OutFailure>(
        _ members: [Promise<Member, Failure>], _ width: Int = .max,
        _ decide: @escaping Policy<Member, Failure, Output, OutFailure>
    ) -> Promise<Output, OutFailure> {
        Promise { Join(members, width, decide).start($0) }
    }

    /// One run of a combination.
    @usableFromInline
    final class Join<Member, Failure: Swift.Error, Output, OutFailure: Swift.Error>:
        @unchecked Sendable
    {
        @usableFromInline let lock = Lock()
        @usableFromInline let members: [Promise<Member, Failure>]
        @usableFromInline let width: Int
        @usableFromInline let decide: Policy<Member, Failure, Output, OutFailure>
        // Guarded by `lock`.
        @exclusivity(unchecked) @usableFromInline var tally: Tally<Member, Failure>
        @exclusivity(unchecked) @usableFromInline var running: [RunHandle?]
        /// How many members have been started (or, once it is closed, never will be).
        @exclusivity(unchecked) @usableFromInline var started = 0
        /// Whether a thread runs the launch loop: at first, the one that starts the run.
        @exclusivity(unchecked) @usableFromInline var launching = true
        @exclusivity(unchecked) @usableFromInline var state = State.closed
        /// The combination's run, which its members' runs are inside.
        @usableFromInline var outer: RunHandle?

        @inlinable init(
            _ members: [Promise<Member, Failure>], _ width: Int,
            _ decide: @escaping Policy<Member, Failure, Output, OutFailure>
        ) {
            self.members = members
            self.width = width
            self.decide = decide
            tally = Tally(members.count)
            running = Array(repeating: nil, count: members.count)
        }

        /// Whether the combination still runs: members start and report while it is `open`,
        /// with the resolver that settles it; once it has settled or been cancelled, it is
        /// `closed`.
        @usableFromInline enum State {
            case open(Resolver<Output, OutFailure>)
            case closed
        }

        deinit { lock.free() }

        @inlinable func start(_ resolver: Resolver<Output, OutFailure>) {
            state = .open(resolver)
            outer = resolver.run
            resolver.onCancel { [self] _ in stop() }
            if members.isEmpty { settle(decide(tally, .noMembers), resolver) } else { launch() }
        }

        /// Starts members while there is room, in a loop rather than by recursion: members that
        /// end at once make room from inside `start`, and a hundred thousand must not nest. The
        /// caller has claimed the loop (`launching`), so that one thread at a time runs it.
        @inlinable func launch() {
            // The handle that runs members one after another while each ends at once (see `start`).
            var lane: (handle: RunHandle, finish: (Slot?) -> Void)?
            // A member's handle is in `running` from the moment it is claimed, before it starts,
            // so that `stop()` reaches it: a member cancelled before `start` never begins (even on
            // a handle whose last member has finished: see `State.ended(cancelledSince:)`).
            while let (index, handle) = lock.withLock({ () -> (Int, RunHandle)? in
                guard case .open = state, started < members.count, started - tally.ended < width
                else {
                    launching = false
                    return nil
                }
                // The lane goes on only if its member ended with an outcome: else it goes on
                // elsewhere, or was cancelled.
                if let last = lane?.handle.member, tally.outcomes[last] == nil { lane = nil }
                started += 1
                let handle =
                    lane?.handle ?? RunHandle(last: members[started - 1].last, inside: outer)
                running[started - 1] = handle
                return (started - 1, handle)
            }) {
                if lane == nil { lane = (handle, { [self] in end(handle.member, $0?.take()) }) }
                handle.member = index
                handle.start(members[index].last, lane!.finish)
            }
        }

        /// Member `index` ended, with `outcome` or (`nil`) by cancellation.
        @inlinable func end(_ index: Int, _ outcome: sending Swift.Result<Member, Failure>?) {
            var claimed = false  // the launch loop, if no thread runs it (one lock, not two)
            // The members' outcomes go outside the lock, after the combination settles.
            typealias Settled = (
                Verdict<Output, OutFailure>, Resolver<Output, OutFailure>, Tally<Member, Failure>
            )
            let settled = lock.withLock { () -> Settled? in
                guard case .open(let resolver) = state else { return nil }
                running[index] = nil
                tally.ended += 1
                tally.outcomes[index] = outcome
                let ending = outcome.map { Ending.outcome(index, $0) } ?? .cancelled(index)
                let verdict = decide(tally, ending)
                if case .wait = verdict {
                    claimed = !launching
                    launching = true
                    return nil
                }
                state = .closed
                defer { tally.outcomes = [] }
                return (verdict, resolver, tally)
            }
            if let (verdict, resolver, _) = settled { settle(verdict, resolver) }
            if claimed { launch() }
        }

        /// Cancels the members still running, then settles the combination's run.
        @inlinable func settle(
            _ verdict: Verdict<Output, OutFailure>, _ resolver: Resolver<Output, OutFailure>
        ) {
            stop()
            guard case .settle(let settled) = verdict else { return resolver.cancel() }
            nonisolated(unsafe) let outcome = settled  // members' outcomes, which it let go of
            resolver(outcome)
        }

        /// Cancels every member still running: the combination settled, or was cancelled. Every
        /// call cancels them all, even after another: a cancel of the combination's run that
        /// comes while the run that settled it is still cancelling the members must not return
        /// before they are (cancelling one twice is a no-op). The members it never started that
        /// ignore cancel start now (see `startIgnored`).
        @inlinable func stop() {
            // The state it closes, with the resolver of a combination still open, goes outside
            // the lock.
            typealias Stopped = ([RunHandle], ArraySlice<Promise<Member, Failure>>, State)
            let (running, unstarted, _) = lock.withLock { () -> Stopped in
                let unstarted = members[started...]
                started = members.count  // they start here if they ignore cancel, or never
                let previous = state
                state = .closed
                return (self.running.compactMap { $0 }, unstarted, previous)
            }
            for handle in running { handle.cancel() }
            for member in unstarted { member.last.ignoredWork.map { outer?.startIgnored($0) } }
        }
    }
}
