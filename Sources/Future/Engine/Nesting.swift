// Engine/Nesting.swift: how runs and releases nest without bound on one thread's stack: the
// levels that `Run.drive` adds and takes away (`nest`, `unnest`), and those of a release; and
// what waits behind the runs that wait for room (a cancelled run's end, behind the work that
// ignores cancel it started: `afterWaiting`, `awaitStart`). Builds on Run.swift, whose runs wait
// here for room (`Run.drive`).

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

// Runs and releases can nest without bound. A run started or resumed inside a step of another run
// (a combination's member, a shared run, a resolver called from a step, a cancel handler) runs on
// the same stack; and releasing an operation that holds promises (a combination's members, a
// shared promise's work) releases them from inside its own release. Nested 10,000 deep, either
// would overflow the stack. So past `limit` levels of either on a thread, the run or the release
// waits until the levels below have returned: a level below does it before it returns (the bottom
// one, or one inside a settle), so what a call started is done when the call returns. (So is the
// closure of a step that enters the promise it makes, which may keep the promise before it.
// Another step's closure that captured a promise is still released recursively: see the README's
// "Nesting is flat".) The call is the bottom level's: a run started past `limit` levels ends after
// its own `run(…)` has returned, even one that settles at once.

nonisolated extension Engine {
    /// The levels of runs and of releases on one thread, and what waits for them to unwind.
    @usableFromInline final class Nesting {
        /// A level takes about 4 KiB of stack in debug builds (1.3 KiB in release builds): 32
        /// take 130 KiB at most, of the 512 KiB of a Dispatch thread on Apple's systems.
        static let limit = 32
        /// Each thread's own, made on first use, released when the thread ends.
        static let key = {
            var key = pthread_key_t()
            // Optional on Linux, not on Darwin; never nil, as a destructor runs only for a value.
            pthread_key_create(&key) {
                Unmanaged<Nesting>.fromOpaque(($0 as UnsafeMutableRawPointer?)!).release()
            }
            return key
        }()

        // One thread uses these. The counters of levels change only in the methods below, which are
        // never inlined, so that an optimizer cannot assume that a level's work, between two of
        // them, leaves them alone. Every field keeps its exclusivity checks: they change around a
        // release, which may run any deinit, and with the checks off the optimizer assumed that a
        // release cannot touch them (seen in Swift 6.3.1 release builds: a double free of `held`).
        private var levels = (runs: 0, releases: 0)
        /// Whether a shared promise resumes its waiters on this thread (see `settling`).
        private var isSettling = false
        /// What waits for a level to return: runs to resume, and what is due behind them (an
        /// alarm, a combination's or cancelled run's end, or its rest: see `afterWaiting`,
        /// `cancelling`).
        private var waiting: [() -> Void] = []
        /// What a cancel under way on this thread set off, to do before it returns: there as a
        /// part's handlers run, `nil` as what comes afterwards runs (see `cancelling`).
        private var cancels: [Cancelling]?

        /// A part of cancelling: calling handlers, then, once what they cancelled has ended too,
        /// what comes `afterwards`.
        private enum Cancelling {
            case handlers(() -> Void, then: () -> Void)
            case afterwards(() -> Void, since: Int)
        }
        /// What releases past `limit` kept, for the bottom level of releases to let go of.
        private var held: [Any] = []
        /// The run this thread drives, the innermost (see `Run.cancel(call:)`).
        private var driven: Run?
        /// The queue whose block this thread is in, as far as hops tell: the one a hop took the
        /// innermost run it drives to, or the queue that run began its drive on (see
        /// `Run.drive`). The thread's own, so read by no other thread.
        private var queue: DispatchQueue?
        /// The run this thread drove as the cancel under way on it began (see `drivenRun`).
        private var drivenAsCancelBegan: Run?
        /// Runs whose calls started work apart that waits here for a level below: how many such
        /// works have not started yet, and whether a cancel on this thread holds the run's end
        /// until then (see `awaitStart`). Keyed by the run, which the note behind its work
        /// keeps alive: constant time for each, as a wide `when` of such members keeps thousands.
        private var startsAwaited: [ObjectIdentifier: (works: Int, held: Bool)] = [:]

        /// Calls `body` with this thread's nesting (without retaining it: the thread keeps it).
        static func withCurrent<T>(_ body: (Nesting) -> T) -> T {
            guard let current = pthread_getspecific(key) else { return body(makeCurrent()) }
            return Unmanaged<Nesting>.fromOpaque(current).borrowed(body)
        }

        /// The thread's nesting, made on its first use, which the thread keeps until it ends.
        @inline(never) private static func makeCurrent() -> Nesting {
            let made = Nesting()
            pthread_setspecific(key, Unmanaged.passRetained(made).toOpaque())
            return made
        }

        /// The run this thread drives, for a step's cancel of a run it is part of (see
        /// `Run.cancel(call:)`): `nil` while a cancel under way calls handlers, unless a run was
        /// driven inside them (by a resolver a handler calls), as what cancels there is that
        /// cancel, not a step of the run (so a cancel of runs nested deep takes linear time).
        static var drivenRun: Run? {
            withCurrent { nesting in
                let began = nesting.drivenAsCancelBegan
                return nesting.cancels == nil || nesting.driven !== began ? nesting.driven : nil
            }
        }

        /// The queue whose block this thread is in, as far as hops tell (see `queue`).
        @usableFromInline static var queueHere: DispatchQueue? { withCurrent { $0.queue } }

        /// Calls `body` in `queue`'s block: now, if this thread is in it, else in a block queued
        /// there (a combination's settle goes where the member that decided it ended).
        @usableFromInline static func inBlock(
            of queue: DispatchQueue, _ body: @escaping @Sendable () -> Void
        ) {
            guard queue !== queueHere else { return body() }
            queue.async { withCurrent { $0.on(queue, body) } }
        }

        /// A level of runs (see `Run.drive`): the run driven around it and its queue, and, if it
        /// resumes what waits inside it as it returns (the bottom level, and every level inside a
        /// settle), how much waited before it.
        typealias Level = (outer: Run?, queue: DispatchQueue?, mark: Int?)

        /// Adds a level of runs that drives `run`, if there is room; else `run` waits, and a
        /// level below that resumes what waits inside it (see `Level`) drives it once the levels
        /// above it have returned (`nil`). `immediately`: now, even past `limit`, as a level that
        /// resumes nothing: a run that waited, driven by what resumes it (a level, or a settle),
        /// which goes on to what waits inside it too; or `pending()`'s, whose operation starts
        /// none. `hop`: the queue of a hop that carries the run on, whose block this thread is now
        /// in; else the thread stays in the block it was in.
        @inline(never) func nest(
            _ run: Run, immediately: Bool, hop: DispatchQueue?
        ) -> Level? {
            guard immediately || levels.runs < Nesting.limit else {
                waiting.append { run.drive(immediately: true, hop: hop) }
                return nil
            }
            levels.runs += 1
            let outer = (driven, queue)
            driven = run
            if let hop { queue = hop }
            let resumes = !immediately && (levels.runs == 1 || isSettling)
            return (outer.0, outer.1, resumes ? waiting.count : nil)
        }

        /// Takes a level of runs away: the bottom level, and every level inside a settle, resumes
        /// what waited inside it: runs that waited for room, and those that settles made wait
        /// (`settling`).
        @inline(never) func unnest(_ level: Level) {
            driven = level.outer
            // What waited is resumed in this level's queue's block, which the thread is still in
            // (a hop carries a run on at the bottom level).
            if let mark = level.mark, waiting.count > mark { resumeWaiting(since: mark) }
            queue = level.queue
            levels.runs -= 1
        }

        /// Calls `body` in `hop`'s block outside a drive, as a drive would: the release of a
        /// cancelled run that stops as a hop leaves a queue (`Run.awaitQueue`), so that the runs
        /// that its end carries on, if it is the last hold, are on `hop`.
        func on(_ hop: DispatchQueue, _ body: () -> Void) {
            let outer = queue
            queue = hop
            body()
            queue = outer
        }

        /// Resumes what waited since `mark` (what waited before is a lower level's), one after
        /// another, each before what waited before it was resumed, as nested calls would.
        private func resumeWaiting(since mark: Int) {
            var ahead: [() -> Void] = []  // the next last
            while waiting.count > mark || !ahead.isEmpty {
                ahead += waiting[mark...].reversed()
                waiting.removeSubrange(mark...)
                ahead.removeLast()()
            }
        }

        /// Calls a cancelled run's (or combination's) `handlers`, then the handlers of what they
        /// cancel (a combination's members, and theirs), then what comes `afterwards` (such as
        /// ending the run): in the order nested calls would, but one after another, so that a
        /// cancel of combinations nested 10,000 deep takes little stack. All of it is done when
        /// the first cancel on the thread returns, before the runs it cancelled, perhaps further
        /// down this stack, take another step; but what comes afterwards waits behind the runs
        /// that a part's handlers, and the parts they queued, made wait for a level below, as it
        /// would have come after what they do at once had they run nested (the members that
        /// ignore cancel that a combination inside a shared promise's settle inside another's
        /// started, before its run's end). What comes afterwards may run the user's code, so it
        /// is no part of the cancel under way: a cancel it makes is done before it returns.
        /// For a `when` whose run is cancelled: the run's handler (the join's, which cancels the
        /// members), then each member run's handlers and end, then the called members' handlers
        /// and the join's afterwards (the members that ignore cancel start), then the run's
        /// afterwards (its end).
        @usableFromInline static func cancelling(
            _ handlers: @escaping () -> Void, then afterwards: @escaping () -> Void
        ) {
            withCurrent { nesting in
                let part = Cancelling.handlers(handlers, then: afterwards)
                if nesting.cancels != nil { return nesting.cancels!.append(part) }
                // Restored after it: what comes afterwards may begin a cancel of its own.
                let began = nesting.drivenAsCancelBegan
                nesting.drivenAsCancelBegan = nesting.driven
                defer { nesting.drivenAsCancelBegan = began }
                // The next last: a part's afterwards goes in under the parts its handlers
                // queued, so that they run first, each one's afterwards before the next part.
                var ahead = [part]
                while let next = ahead.popLast() {
                    switch next {
                    case .handlers(let call, let afterwards):
                        let mark = nesting.waiting.count
                        nesting.cancels = []
                        call()
                        ahead.append(.afterwards(afterwards, since: mark))
                        ahead += nesting.cancels.take()!.reversed()
                    case .afterwards(let body, let mark): afterWaiting(since: mark, body)
                    }
                }
            }
        }

        /// Calls `fire` now, unless runs wait for a level below (more than `mark` of them): then
        /// after them, as it would have come after what they do at once had they run nested. An
        /// alarm whose deadline had passed as it was set, as one may be the work it races (see
        /// `setAlarm`); what comes after the start of work that ignores cancel, after the runs
        /// the start made wait (those that wait since `waitingCount` was `mark`): a stopping
        /// combination's end (`Join.cancelMembers`), the rest of a cancelled run's end
        /// (`Run.skip`), the release of a member cancelled before its start (`Run.start`).
        @usableFromInline static func afterWaiting(
            since mark: Int = 0, _ fire: @escaping () -> Void
        ) {
            withCurrent { nesting in
                guard nesting.waiting.count <= mark else { return nesting.waiting.append(fire) }
                fire()
            }
        }

        /// For `Run.startApart`: the work that `starter`'s call started waits here, last, for a
        /// level below. Until it has started, and what it makes wait with it, a cancel of
        /// `starter` on this thread holds its end (`holdUntilStarted`).
        static func awaitStart(by starter: Run) {
            withCurrent { nesting in
                let key = ObjectIdentifier(starter)
                nesting.startsAwaited[key, default: (0, false)].works += 1
                nesting.waiting.append {  // behind the work's run
                    nesting.startsAwaited[key]!.works -= 1
                    let awaited = nesting.startsAwaited[key]!
                    guard awaited.works == 0 else { return }
                    nesting.startsAwaited[key] = nil
                    if awaited.held { starter.release() }
                }
            }
        }

        /// Holds the end of `run`, cancelled on this thread, until the work its calls started
        /// has started, if some waits here (see `awaitStart`).
        static func holdUntilStarted(_ run: Run) {
            withCurrent { nesting in
                let key = ObjectIdentifier(run)
                guard nesting.startsAwaited[key]?.held == false else { return }
                nesting.startsAwaited[key]!.held = true
                run.hold()
            }
        }

        /// How many runs (and what is due behind them) wait on this thread for a level below.
        @usableFromInline static var waitingCount: Int { withCurrent { $0.waiting.count } }

        /// Calls `resume` with each waiter of a shared promise that settled, so that each goes on
        /// in its turn, as nested calls would: before the next waiter, and with it the waiters of
        /// every shared promise that settles as it goes on (such as the one whose work it is). But
        /// not nested: inside a settle, every level of runs resumes, as it returns, what waited
        /// inside it; and the waiters of a settle inside another wait, for the level of runs around
        /// it (the run of the work that settled), and then the run each resumes too, as past
        /// `limit`. So a chain of ten thousand settles two levels deep (a test settles them on a
        /// 64 KiB stack), and a step that settles a shared promise returns after its waiters went
        /// on, as a step that calls a resolver does.
        static func settling<Waiter>(_ waiters: [Waiter], _ resume: @escaping (Waiter) -> Void) {
            withCurrent { nesting in
                guard !nesting.isSettling else {
                    let resumes = waiters.map { waiter in { nesting.pastLimit { resume(waiter) } } }
                    return nesting.waiting.append(contentsOf: resumes)
                }
                nesting.isSettling = true
                for waiter in waiters {
                    let mark = nesting.waiting.count
                    resume(waiter)
                    nesting.resumeWaiting(since: mark)
                }
                nesting.isSettling = false
            }
        }

        /// Calls `body` as if past `limit`: every run it resumes waits for the level around.
        @inline(never) private func pastLimit(_ body: () -> Void) {
            let below = levels.runs
            levels.runs = Nesting.limit
            body()
            levels.runs = below
        }

        /// Lets go of what a deinit keeps (`clear`), which may hold promises, as one more level of
        /// releases, in the deinit's body (Swift releases stored properties after every deinit
        /// has returned); if there is no room for the level, the bottom level releases it, as
        /// `kept` gives it. (Not an `inout` generic value: a closure passed so would be copied
        /// out and written back, and released after the level.)
        static func release(_ kept: () -> Any, by clear: () -> Void) {
            withCurrent { nesting in
                if !nesting.nestRelease() { nesting.held.append(kept()) }
                clear()
                nesting.unnestRelease()
            }
        }

        @inline(never) private func nestRelease() -> Bool {
            levels.releases += 1
            return levels.releases <= Nesting.limit
        }

        /// The bottom level releases what the levels above kept, before it is left.
        @inline(never) private func unnestRelease() {
            while levels.releases == 1, !held.isEmpty {
                var batch: [Any] = []
                swap(&batch, &held)  // out first: releasing one may keep more
                batch.removeAll()
            }
            levels.releases -= 1
        }
    }
}
