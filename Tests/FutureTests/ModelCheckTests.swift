// The model checker: random programs run on the library and on a reference model of the
// documented semantics, which must agree on the outcome, on the order of the effects a program
// logs and where each ran, and on what stays alive once the run is over.
//
// A program (`MCProgram`) is a promise expression over `Promise<Int, MCError>` (`MCNode`): leaf
// operations that resolve now (in the exact mode, some from another thread that the operation
// waits for), later (the harness keeps the resolver and an event resolves it), twice, never
// (later, with no event), that drop their resolver, cancel their own run or cancel the whole run
// from the operation; steps (`map`, `then`, `recover`, `ensure`, `tap`, `ensure(on:)` on the
// harness's queue right after a hop to it, or, in the real-time mode, on a queue that runs on
// its own, and steps that cancel the run, resolve another operation, or, right after a hop,
// advance the clock); `when`, keyed `when`, `when(concurrently:)`, `when(resolved:)`,
// `when(resolved:concurrently:until:)`, `any`, `race`, `race(fulfilled:)`; `timeout`, `delay`,
// `after` and `retry` on a `ManualClock`, and the Dispatch `timeout` (of zero, of an hour, or, in
// the real-time mode, of a few milliseconds); `on(_:)`, a hop to the harness's queue, which runs
// only as an event drains it; `share()` (inline, or kept by the program and dropped by an
// event), `pending()`, an `InvalidationToken` that the run is stored in, and `ignoringCancel()`.
// After the run starts, the harness plays an event script: resolve or drop an operation's
// resolvers, advance the clock, drain the queue, cancel or invalidate, drop a kept shared
// promise; the script always ends with a cancel. The log marks each cancel, invalidation, drop
// and drain as it returns, so that what one sets off is not mistaken for what the final cancel
// does.
//
// The model (`MCModel`) is an interpreter over the same tree, with no locks and no threads: each
// event of the script is handled in turn, and everything it sets off happens in a plain
// recursion of callbacks. It encodes these rules, each from the documentation named:
// - Laziness.md: nothing runs before the run starts; each run runs every operation again.
// - Resolver: the first outcome counts, later ones are ignored; the run goes on where it was
//   resolved (synchronously, here, as the harness resolves on the test thread); an operation that
//   lets its resolver go without resolving ends its run as cancelled; `Resolver.cancel()` ends the
//   run "as its handle's cancel() would" (so its own `onCancel` handlers run); a handler added
//   once the run is cancelled runs at once (checked as it is added, by an operation that
//   cancelled itself: one in two adds its handler after the cancel).
// - Cancellation.md and `RunHandle.cancel()`: after `cancel()` no completion is delivered; the
//   waiting operation's handlers run once, then the `ensure` steps still ahead; a step that
//   cancels its own run stops it before the next step; steps (`map`, `then`, `tap`…) do not run
//   once the run is cancelled; a run cancelled from inside its call of an operation stops as the
//   operation returns (also a shared promise's, a combination's or `ignoringCancel()`'s, whose
//   work or members start inside it), and what the operation resolves after the cancel is
//   ignored. `ignoringCancel()`: the run ends at once, the work goes on.
// - CombiningPromises.md and the combinators' doc comments: members start in the order given (at
//   most `limit` at once, the next as one finishes); results keep input order; the policies of
//   `when`, `when(resolved:)`, `any`, `race`, `race(fulfilled:)` (with no members too), and of
//   `when(resolved:concurrently:until:)`: its signal starts first, beside the limit, and stops the
//   batch as it ends (with `nil` for each member not finished), or cancels it if its run ends by
//   cancellation; a member cancelled on its own drops out with `nil`; no promises succeed at once,
//   the signal not started. A member that ends by cancellation ends a `when`/`any` so, and drops
//   out of a race; a decided
//   combination cancels the members still running and starts none, but those that begin with
//   `ignoringCancel()`, which start as it ends. A cancelled combination's run ends (its `ensure`
//   steps, then its completion hears of it) once the members it cancelled that run steps have
//   stopped: a member in a step stops after it (RunHandle).
// - TestingTime.md, ManualClock: timers fire on `advance`, earliest deadline first, same
//   deadlines in the order set; steps a timer wakes run before the advance returns; cancelling a
//   run removes its timers at once (`timerCount`). `timeout(_:orFailWith:clock:)` races the work
//   against its timer; `delay` passes the outcome on after the interval; `retry` runs the work
//   again after a failure, after the delay.
// - `timeout(_:orFailWith:)`, on every clock: the work races a timer, set once the work waits,
//   and the first to settle wins ("when the deadline passes first, the promise fails at once and
//   the work is cancelled"); Dispatch's timer, for an interval of zero or less, "lets work that
//   settles at once, without waiting, win, as on every clock, and fails the work as soon as it
//   waits". Zero timeouts nested in one another: the innermost timer is set first and fires
//   first, and the outer ones see their work settle with its error. A run cancelled before it
//   reaches a timeout runs the ensure steps of the work (Cancellation.md: the steps it wraps run
//   their ensure steps as for RunHandle.cancel()).
// - `on(_:)`: the steps after it run once the queue runs the run, with the outcome before it; a
//   run cancelled while it waits for the queue goes no further, and runs its `ensure` steps still
//   ahead at once (RunHandle: the waiting operation's handlers, then the `ensure` steps). A drain
//   runs what waited for the queue as it began, in the order it came, not what comes meanwhile
//   (the queue is serial: what a step queues comes after the drain's own block).
// - `ensure(on:_:)`'s doc comment: it runs `body` on the queue "as `ensure(_:)` does" (succeeded
//   or failed, or cancelled before it), and "the steps after it start once `body` has returned";
//   after `body` "the chain goes back to the queue it was on, if a hop took it there"; "Every
//   move is queued, never a `sync`": so `body` waits for a drain, and the steps after it for the
//   next one. "A run cancelled before `body` has run queues it on `queue`, once the cancel
//   handlers have returned; the run's end does not wait for it": the `ensure` steps after it run
//   at once, and `body` at a later drain, if one comes (none after the script: `finish()`
//   drains with the log closed).
// - Sharing: `share()` runs the work once for the runs that come while it is under way (they go
//   on in turn, in the order they came), later runs get its outcome; cancelling a run leaves the
//   others waiting; once every waiting run is cancelled, so is the work (its handlers and ensures
//   run before the last waiting run's own `ensure`s, as a cancel handler's effects come first),
//   unless `cancelsWhenAbandoned: false`; work that ends by cancellation ends its waiting runs so
//   and runs again for the next run, once that run has ended (a run that joins as it ends waits
//   for its end). `pending()`: runs wait for its resolver; dropped, they end by cancellation.
// - Where each step runs (README's "Which thread a step runs on", `on(_:)`, Concurrency.md, the
//   header of Combining.swift, `timeout(_:orFailWith:)`): a step runs where the step before it
//   finished, and `on(_:)` hops every time. In the exact and deep modes each entry of the log says
//   where it ran: on the harness's thread (no mark), on the hop queue (` @queue`), or elsewhere
//   (` @elsewhere`). The model has everything on the harness's thread, which starts the run and
//   plays the events, but what a drain runs: a run that waited for the queue goes on there, and
//   so does all it sets off (the operations its steps resolve, the cancels they make, the
//   combinations and shared promises whose waiters they end, a zero Dispatch timeout that fails
//   work waiting for the queue, on the thread that waited). A run waiting for the queue that a
//   cancel ends runs its `ensure` steps on the cancelling thread; one hop after another waits for
//   the next drain, even on the queue. An `ensure(on:)` there runs its `body` on the queue at a
//   drain (` @queue`, also a `body` that a cancel queued), and goes back to the queue, as a hop
//   does, so the steps after it run at the next drain (`ensure(on:)`: "back to the queue it was
//   on, if a hop took it there"; the exact mode has one only where a hop took the run there, as
//   the way back from elsewhere is a global queue, which no drain runs). An operation that
//   resolves from another thread during its call leaves the steps after it to its own thread
//   (Resolver); a step on the queue that advances the clock runs the steps its timers wake
//   there, before the advance returns (ManualClock, TestingTime.md). But a combination's member
//   made from an operation alone (`retry(1)` of one too) is no run of its own: resolved so, it
//   ends on the resolving thread, at once, and the combination decides there (Resolver,
//   CombiningPromises.md, the header of Combining.swift): the model runs what that end sets off
//   ` @elsewhere` (the other members' cancel handlers and `ensure` steps, the starts of those
//   that ignore cancel, and all they do at once), while the steps after the combination go on on
//   the thread that called the member (in the launch, or as another member ended), once its
//   operation returns.
// - `run(_:)`: the run keeps the chain's steps and what they captured until it ends, and lets
//   go of them then; DESIGN.md "Memory": nothing a run captured stays alive after it ended.
//
// Swift's `Dictionary` order is the one thing the model takes from the library's run: the keyed
// `when` starts its members in its dictionary's order, which is Swift's, not the engine's.
//
// Modes: most programs are single-threaded and deterministic (`exact`), compared entry by entry.
// `threads` programs cancel from another thread as the harness's thread plays the events (in half
// of them, the operations called until that cancel returns wait for it, so that it comes during
// their call), or else split clock advances over two threads; half their combinations are
// `when(fulfilled:concurrently: 1)` and half their members operations alone, so that an event
// that ends a member has the harness's thread run the launch loop, which calls the next member.
// `deep` programs nest combinations about 32 deep (where the engine defers nested runs);
// `realTime` programs use Dispatch timeouts of a few milliseconds, around steps that sleep and
// `ensure(on:)` steps on a queue of their own that runs freely, whose `body` sleeps too, so that a
// deadline may pass as it runs. Those are held to what holds in every interleaving: at most one
// completion, no step, operation or completion after a `cancel()` of the run returned (a `body`
// that a cancel queued is no step: `ensure(on:)` queues it on cancellation), nothing alive and
// no timer left once the run is over, and the clock's time; and, with a cancel from another
// thread, no operation, step, cancel handler or `ensure` of the run after its end, its last
// `ensure` (RunHandle: it ends once the combinations' members, the operations their launch loops
// call, their members' cancel handlers and the timeouts' work have stopped; a shared promise's
// work runs apart). Real-time programs are held to `ensure(on:)` too: each `body` of the chain
// runs once (the run gets there, or is cancelled before, or as it runs), and nothing but a
// `body` runs on its queue ("not on `queue` ... unless it was there before"; cancelled as `body`
// runs, "what goes on after it does not go on on `queue`"). Deep programs, whose deferred nested
// runs change which steps run, are held to running everything on the harness's thread, as the
// model has it (they have no hop, and a nested run deferred past 32 levels runs before the level
// below returns, on the same thread: README's "Nesting is flat"). Neither they nor the `threads`
// programs have an `ensure(on:)`: they do not hop to the harness's queue, which none of their
// events drains, and a queue that runs on its own would take their runs off the harness's
// thread, which their checks count on (what is late after a cancel, what comes after the end).
//
// A failure prints the program as Swift code to paste into a test. `MODELCHECK_TRACE=1` prints
// every program before it runs (for a crash); `MODELCHECK_SEED=n` runs one seed.

import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// MARK: - Programs

/// The error of every program.
struct MCError: Error, Equatable, Sendable {
    let code: Int
}

/// An outcome of a program's promise.
enum MCOutcome: Equatable, Sendable, CustomStringConvertible {
    case value(Int)
    case error(Int)

    var result: Result<Int, MCError> {
        switch self {
        case .value(let value): .success(value)
        case .error(let code): .failure(MCError(code: code))
        }
    }

    init(_ result: Result<Int, MCError>) {
        switch result {
        case .success(let value): self = .value(value)
        case .failure(let error): self = .error(error.code)
        }
    }

    var description: String {
        switch self {
        case .value(let value): ".value(\(value))"
        case .error(let code): ".error(\(code))"
        }
    }
}

/// What a leaf operation does after logging "op k" (and registering its cancel handler).
enum MCLeaf: Equatable, Sendable, CustomStringConvertible {
    /// Resolves during the operation.
    case now(MCOutcome)
    /// Resolves during the operation, from another thread, which the operation waits for.
    case nowFromThread(MCOutcome)
    /// Resolves twice during the operation: the second is ignored.
    case twice(MCOutcome, MCOutcome)
    /// The harness keeps the resolver; an event resolves or drops it (or none: never).
    case later
    /// Lets its resolver go unresolved.
    case drop
    /// Ends its own run as cancelled, with `resolver.cancel()`.
    case cancelSelf
    /// Keeps its resolver and cancels the whole run with its handle.
    case cancelRun

    var description: String {
        switch self {
        case .now(let outcome): ".now(\(outcome))"
        case .nowFromThread(let outcome): ".nowFromThread(\(outcome))"
        case .twice(let first, let second): ".twice(\(first), \(second))"
        case .later: ".later"
        case .drop: ".drop"
        case .cancelSelf: ".cancelSelf"
        case .cancelRun: ".cancelRun"
        }
    }
}

/// What a step of `map` kind does besides logging.
enum MCEffect: Equatable, Sendable, CustomStringConvertible {
    /// Cancels the whole run with its handle.
    case cancelRun
    /// Resolves the latest call of operation `op`.
    case resolve(Int, MCOutcome)
    /// Fulfills the latest call of operation `op` with 1, then cancels the run.
    case resolveThenCancel(Int)
    /// Sleeps for so many milliseconds (the real-time mode: a deadline passes meanwhile).
    case sleep(Int)
    /// Advances the clock by so many milliseconds: right after a hop, so on the hop queue, as a
    /// drain runs it, and never inside a timer's firing.
    case advance(Int)

    var description: String {
        switch self {
        case .cancelRun: ".cancelRun"
        case .resolve(let op, let outcome): ".resolve(\(op), \(outcome))"
        case .resolveThenCancel(let op): ".resolveThenCancel(\(op))"
        case .sleep(let milliseconds): ".sleep(\(milliseconds))"
        case .advance(let milliseconds): ".advance(\(milliseconds))"
        }
    }
}

enum MCCombinator: Equatable, Sendable {
    case all
    case limit(Int)
    case keyed
    case resolved
    case any
    case race
    case raceFulfilled
    /// `when(resolved:concurrently:until:)` with this limit (`Int.max`: none): the first member
    /// is the signal, the others are the batch. The library adds a step to each (so none runs as
    /// an operation alone).
    case until(Int)
    /// The model's keyed `when`, its members in the dictionary's order: the keys, in that order.
    case keyedIn([Int])
}

/// A promise expression. Numbers after the first are ids: each op or step has its own.
indirect enum MCNode: Equatable, Sendable {
    case value(Int)
    case error(Int)
    case op(Int, MCLeaf, handler: Bool)
    case map(MCNode, Int)
    case effect(MCNode, Int, MCEffect)
    case then(MCNode, Int, MCNode)
    case recover(MCNode, Int, MCNode)
    case ensure(MCNode, Int)
    case tap(MCNode, Int)
    case combine(MCCombinator, [MCNode], id: Int)
    /// `timeout(_:orFailWith:clock:)` on the harness's manual clock, or Dispatch's `timeout`.
    case timeout(MCNode, milliseconds: Int, code: Int, clock: Bool)
    case delay(MCNode, milliseconds: Int)
    case after(milliseconds: Int)
    case retry(MCNode, attempts: Int, milliseconds: Int)
    /// `x.share(cancelsWhenAbandoned:)`, made where it stands (and anew each time it is built).
    case share(MCNode, cancelsWhenAbandoned: Bool)
    /// The program's kept shared promise `k`.
    case shared(Int)
    /// The program's pending promise `k`.
    case pending(Int)
    case ignoringCancel(MCNode)
    /// `x.on(queue)`, the harness's queue, suspended but while an event drains it.
    case hop(MCNode)
    /// `x.ensure(on: queue, body)`, `body` logging "ensureOn k": on the harness's queue (in the
    /// exact mode, right after a hop to it, so that both its moves are hops onto that queue), or,
    /// with `sleep`, on a queue that runs on its own, `body` sleeping so many milliseconds after
    /// it logs (the real-time mode, where a deadline may pass as it runs).
    case ensureOn(MCNode, Int, sleep: Int?)
}

enum MCEvent: Equatable, Sendable {
    /// Resolves the latest call of an operation.
    case resolve(Int, MCOutcome)
    /// Lets go of every resolver of an operation that the harness keeps.
    case drop(Int)
    case resolvePending(Int, MCOutcome)
    case dropPending(Int)
    /// Lets go of the program's kept shared promise `k`.
    case dropShare(Int)
    case advance(milliseconds: Int)
    /// Lets the harness's queue run what it holds: the runs that waited for it as the event came.
    case drain
    case cancel
    case invalidate
}

enum MCMode: String, Sendable {
    case exact, threads, deep, realTime
}

/// A shared promise the program makes before it runs, and keeps until an event drops it.
struct MCShare: Equatable, Sendable {
    var work: MCNode
    var cancelsWhenAbandoned: Bool
}

struct MCProgram: Sendable {
    var mode: MCMode = .exact
    var shares: [MCShare] = []
    var pendings = 0
    var inToken = false
    var main: MCNode
    var events: [MCEvent]
    /// In the threads mode: the cancel from another thread comes before event `k`.
    var cancelFromThreadAt: Int?
    /// In the threads mode: the operations called once that cancel is due wait until it has
    /// returned, so that it comes during their call.
    var callsAwaitTheCancel = false
    /// Whether the log says where each entry ran: in the deterministic modes.
    var placed: Bool { mode == .exact || mode == .deep }
}

/// How the library's and the model's results are compared: encodings of combinations' values.
enum MC {
    /// Whether operation `id` adds its cancel handler after it cancelled itself: one in two.
    static func addsHandlerLate(_ id: Int, _ leaf: MCLeaf) -> Bool {
        leaf == .cancelSelf && id.isMultiple(of: 2)
    }
    static func fold(_ values: [Int]) -> Int { values.reduce(7) { $0 &* 31 &+ $1 } }
    static func fold(keyed values: [Int: Int]) -> Int {
        fold(values.keys.sorted().map { values[$0]! })
    }
    static func code(_ result: Result<Int, MCError>) -> Int {
        switch result {
        case .success(let value): value
        case .failure(let error): -1000 - error.code
        }
    }
    static func fold(results: [Result<Int, MCError>]) -> Int { fold(results.map(code)) }
    /// What a batch's member that did not finish counts as.
    static let unfinished = -1
    static func fold(unfinished results: [Result<Int, MCError>?]) -> Int {
        fold(results.map { $0.map(code) ?? unfinished })
    }
    /// A log without the marks of cancels from steps and operations (see `mcCheck`).
    static func comparable(_ log: [String]) -> [String] {
        log.filter { !$0.hasPrefix("cancelled by") || $0 == "cancelled by harness" }
    }
    /// The marks of where an entry ran, in the modes that check it: none on the harness's thread.
    static let onQueue = " @queue"
    static let elsewhere = " @elsewhere"
    /// An entry without its mark of where it ran.
    static func unplaced(_ entry: String) -> String {
        for mark in [onQueue, elsewhere] where entry.hasSuffix(mark) {
            return String(entry.dropLast(mark.count))
        }
        return entry
    }
    static func allFailed(_ error: AllPromisesFailedError<MCError>) -> MCError {
        MCError(code: fold(error.errors.map(\.code)))
    }
}

// MARK: - The harness: the library's side

/// Something an op or a step captures, to see whether the run let go of it.
final class MCTracked: Sendable {}

/// What a program's promise is built from, and what its run logs. Pasted failing programs call
/// it as the generated code does.
@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
final class MCHarness: @unchecked Sendable {
    private let lock = TestLock()
    private var entries: [String] = []
    private var frozen = false
    private var resolvers: [Int: [Resolver<Int, MCError>]] = [:]
    private var pendingResolvers: [Int: Resolver<Int, MCError>] = [:]
    private var pendingPromises: [Int: Promise<Int, MCError>] = [:]
    private var kept: [Int: Promise<Int, MCError>] = [:]
    private var trackers: [Int: MCWeak] = [:]
    private var handle: RunHandle?
    private(set) var keyOrders: [Int: [[Int]]] = [:]
    let clock = ManualClock()
    private let token: InvalidationToken?
    /// The queue of `on(_:)`, suspended but while `drain()` runs it, made so as a hop is built.
    private var hopQueue: DispatchQueue?
    /// Whether each entry of the log says where it ran (see `MC.onQueue`).
    private let placed: Bool
    /// The thread that makes the harness: the one that starts the run and plays the events.
    private let thread = pthread_self()
    /// What the hop queue holds, to tell its blocks from other threads'.
    private let hopKey = DispatchSpecificKey<Bool>()
    /// A serial queue that runs on its own, for the `ensure(on:)` of the real-time mode: its
    /// `body` alone runs there (see `cleanupEntries`).
    let cleanupQueue = DispatchQueue(label: "model check cleanups")
    private let cleanupKey = DispatchSpecificKey<Bool>()

    init(pendings: Int = 0, token: Bool = false, places: Bool = false) {
        _ = reports  // the debug reports of dropped resolvers go to the tests' log, not stderr
        self.token = token ? InvalidationToken() : nil
        placed = places
        cleanupQueue.setSpecific(key: cleanupKey, value: true)
        for k in 0..<pendings {
            let (promise, resolver) = Promise<Int, MCError>.pending()
            pendingPromises[k] = promise
            pendingResolvers[k] = resolver
        }
    }

    final class MCWeak: @unchecked Sendable {
        weak var object: MCTracked?
    }

    // The log.

    func log(_ entry: String) {
        let entry = placed ? entry + place : entry
        lock.withLock {
            guard !frozen else { return }
            entries.append(entry)
            if DispatchQueue.getSpecific(key: cleanupKey) == true { cleanupEntries.append(entry) }
            let isRunning = ["step", "op", "tap", "completion"].contains { entry.hasPrefix($0) }
            if isRunning, let cancel = cancelReturned {
                lateEntries.append("\(entry) (after \(cancel))")
            }
        }
    }
    /// Where the caller runs: on the harness's thread (""), on the hop queue, or elsewhere.
    private var place: String {
        if DispatchQueue.getSpecific(key: hopKey) == true { return MC.onQueue }
        return pthread_equal(pthread_self(), thread) != 0 ? "" : MC.elsewhere
    }
    /// The first cancel of the run that returned.
    private var cancelReturned: String?
    /// Cancels from another thread: begun so far, and begun and not returned.
    private var threadCancels = (begun: 0, underWay: 0)
    private var lateEntries: [String] = []
    /// What the run began (a step, an operation, its completion) after a `cancel()` returned.
    var late: [String] { lock.withLock { lateEntries } }
    var log: [String] { lock.withLock { entries } }
    func freeze() { lock.withLock { frozen = true } }
    /// What the log had from `cleanupQueue`: `ensure(on:)` says that only its `body` runs
    /// there, as nothing else hops there ("not on `queue` ... unless it was there before").
    private var cleanupEntries: [String] = []
    var onCleanupQueue: [String] { lock.withLock { cleanupEntries } }

    // What programs are built from.

    func tracker(_ id: Int) -> MCTracked {
        lock.withLock {
            if let object = trackers[id]?.object { return object }
            let object = MCTracked()
            let weak = MCWeak()
            weak.object = object
            trackers[id] = weak
            return object
        }
    }

    /// The ids whose captured objects are still alive.
    var alive: [Int] {
        lock.withLock { trackers.filter { $0.value.object != nil }.keys.sorted() }
    }

    func op(_ id: Int, _ leaf: MCLeaf, handler: Bool = false) -> Promise<Int, MCError> {
        let tracked = tracker(id)
        return Promise { resolver in
            _ = tracked
            self.awaitTheCancelDue(id)
            self.log("op \(id)")
            if handler, !MC.addsHandlerLate(id, leaf) {
                resolver.onCancel { _ in self.log("cancel handler \(id)") }
            }
            switch leaf {
            case .now(let outcome): resolver(outcome.result)
            case .nowFromThread(let outcome):
                let resolved = DispatchSemaphore(value: 0)
                DispatchQueue.global().async {
                    resolver(outcome.result)
                    resolved.signal()
                }
                resolved.wait()
            case .twice(let first, let second):
                resolver(first.result)
                resolver(second.result)
            case .later: self.keep(id, resolver)
            case .drop: break
            case .cancelSelf:
                resolver.cancel()
                guard handler, MC.addsHandlerLate(id, leaf) else { break }
                // Added once it cancelled itself, the handler runs at once (`Resolver.onCancel`).
                let ran = Counter()
                resolver.onCancel { _ in ran.increment() }
                if ran.value != 1 { self.lock.withLock { self.lateHandlersMissed.append(id) } }
            case .cancelRun:
                self.keep(id, resolver)
                self.cancelRun(by: "\(id)")
            }
        }
    }

    private func keep(_ id: Int, _ resolver: Resolver<Int, MCError>) {
        lock.withLock { resolvers[id, default: []].append(resolver) }
    }

    func map(_ id: Int) -> @Sendable (Int) -> Int {
        let tracked = tracker(id)
        return { value in
            _ = tracked
            self.log("step \(id)")
            return value &* 2 &+ id
        }
    }

    func effect(_ id: Int, _ effect: MCEffect) -> @Sendable (Int) -> Int {
        let tracked = tracker(id)
        return { value in
            _ = tracked
            self.log("step \(id)")
            switch effect {
            case .cancelRun: self.cancelRun(by: "\(id)")
            case .resolve(let op, let outcome): self.resolve(op, outcome)
            case .resolveThenCancel(let op):
                self.resolve(op, .value(1))
                self.cancelRun(by: "\(id)")
            case .sleep(let milliseconds): usleep(UInt32(milliseconds) * 1000)
            case .advance(let milliseconds): self.advance(milliseconds: milliseconds)
            }
            return value &+ id
        }
    }

    func then(
        _ id: Int, _ next: @escaping @Sendable () -> Promise<Int, MCError>
    ) -> @Sendable (Int) -> Promise<Int, MCError> {
        let tracked = tracker(id)
        return { _ in
            _ = tracked
            self.log("step \(id)")
            return next()
        }
    }

    func recover(
        _ id: Int, _ next: @escaping @Sendable () -> Promise<Int, MCError>
    ) -> @Sendable (MCError) -> Promise<Int, MCError> {
        let tracked = tracker(id)
        return { _ in
            _ = tracked
            self.log("step \(id)")
            return next()
        }
    }

    func ensure(_ id: Int) -> @Sendable () -> Void {
        let tracked = tracker(id)
        return {
            _ = tracked
            self.log("ensure \(id)")
        }
    }

    /// The `body` of an `ensure(on:)`: logs, then sleeps for so many milliseconds.
    func ensureOn(_ id: Int, sleep milliseconds: Int = 0) -> @Sendable () -> Void {
        let tracked = tracker(id)
        return {
            _ = tracked
            self.log("ensureOn \(id)")
            if milliseconds > 0 { usleep(UInt32(milliseconds) * 1000) }
        }
    }

    func tap(_ id: Int) -> @Sendable (Result<Int, MCError>) -> Void {
        let tracked = tracker(id)
        return { _ in
            _ = tracked
            self.log("tap \(id)")
        }
    }

    /// The members of a keyed `when`, under their index; records the dictionary's order.
    func keyed(_ id: Int, _ members: [Promise<Int, MCError>]) -> [Int: Promise<Int, MCError>] {
        let dictionary = Dictionary(uniqueKeysWithValues: members.enumerated().map { ($0, $1) })
        lock.withLock { keyOrders[id, default: []].append(Array(dictionary.keys)) }
        return dictionary
    }

    func keep(share id: Int, _ promise: Promise<Int, MCError>) {
        lock.withLock { kept[id] = promise }
    }
    func shared(_ id: Int) -> Promise<Int, MCError> { lock.withLock { kept[id]! } }
    func pending(_ id: Int) -> Promise<Int, MCError> { lock.withLock { pendingPromises[id]! } }

    // Running, and the events.

    func start(_ promise: Promise<Int, MCError>) {
        let handle = promise.run { result in
            switch result {
            case .success(let value): self.log("completion value \(value)")
            case .failure(let error): self.log("completion error \(error.code)")
            }
        }
        lock.withLock { self.handle = handle }
        if let token { handle.store(in: token) }
    }

    var isCancelled: Bool { lock.withLock { handle }?.isCancelled ?? false }

    func cancelRun(by who: String) {
        guard let handle = lock.withLock({ handle }) else { return }
        let before = lock.withLock {
            if who == "thread" {
                threadCancels = (threadCancels.begun + 1, threadCancels.underWay + 1)
            }
            return threadCancels
        }
        handle.cancel()
        let beside = lock.withLock {
            if who == "thread" { threadCancels.underWay -= 1 }
            return before.underWay > 0 || threadCancels.begun != before.begun  // (the harness's)
        }
        // From another thread, a step or completion that began before the cancel returned may
        // log after it: only the cancels of the run's own thread mark what comes after as late.
        // A step's cancel does so even beside another thread's; the harness's does not, as a
        // second cancel may return before the first has reached the runs inside (RunHandle).
        if who != "thread" && who != "the harness, at the end" && !(who == "harness" && beside) {
            lock.withLock {
                guard cancelReturned == nil else { return }
                cancelReturned = "cancelled by \(who)"
            }
        }
        log("cancelled by \(who)")
    }

    /// Cancels from another thread; signals `done` as the cancel returns. With `awaitedByCalls`,
    /// the operations called meanwhile wait for it (see `awaitTheCancelDue`).
    func cancelFromAnotherThread(awaitedByCalls: Bool, done: DispatchSemaphore) {
        lock.withLock { cancelDue = (true, awaitedByCalls) }
        DispatchQueue.global().async {
            self.cancelRun(by: "thread")
            self.lock.withLock { self.cancelDue.due = false }
            done.signal()
        }
    }

    /// A cancel from another thread that is due (dispatched, and not returned), and whether the
    /// operations called meanwhile wait for it.
    private var cancelDue = (due: false, awaited: false)
    private var stalledCalls: [String] = []
    /// The operations that waited in vain for a cancel from another thread.
    var stalled: [String] { lock.withLock { stalledCalls } }
    /// The operations that cancelled themselves whose handler, added after, did not run at once.
    private var lateHandlersMissed: [Int] = []
    var missed: [Int] { lock.withLock { lateHandlersMissed } }

    /// Lets a cancel from another thread that the calls await come during the call, as it may:
    /// the launch loop of a `when(fulfilled:concurrently:)`, on the harness's thread as an event
    /// ends a member, calls the next member there, and the cancel may reach the combination
    /// before the call returns. A cancel waits for no operation: this one, for a while at most.
    private func awaitTheCancelDue(_ id: Int) {
        guard lock.withLock({ cancelDue == (true, true) }) else { return }
        if !mcEventually({ lock.withLock { !cancelDue.due } }) {
            lock.withLock { stalledCalls.append("op \(id)") }
        }
    }

    func resolve(_ op: Int, _ outcome: MCOutcome) {
        let resolver = lock.withLock { resolvers[op]?.last }
        resolver?(outcome.result)
    }

    /// Lets go of the operation's resolvers, one by one, in the order they were kept.
    func drop(_ op: Int) {
        while let first = lock.withLock({ () -> Resolver<Int, MCError>? in
            guard var list = resolvers[op], !list.isEmpty else { return nil }
            let first = list.removeFirst()
            resolvers[op] = list
            return first
        }) {
            _ = first
        }
        log("dropped \(op)")
    }

    func resolvePending(_ id: Int, _ outcome: MCOutcome) {
        lock.withLock { pendingResolvers[id] }?(outcome.result)
    }

    func dropPending(_ id: Int) {
        do {
            let resolver = lock.withLock { pendingResolvers.removeValue(forKey: id) }
            _ = resolver
        }  // let go of before the mark
        log("dropped pending \(id)")
    }

    func dropShare(_ id: Int) {
        do {
            let promise = lock.withLock { kept.removeValue(forKey: id) }
            _ = promise
        }  // let go of before the mark
        log("dropped share \(id)")
    }

    func advance(milliseconds: Int) { clock.advance(by: .milliseconds(milliseconds)) }

    /// The queue the program's hops go to.
    var queue: DispatchQueue {
        lock.withLock {
            if let hopQueue { return hopQueue }
            let queue = DispatchQueue(label: "model check hops")
            queue.setSpecific(key: hopKey, value: true)
            queue.suspend()
            hopQueue = queue
            return queue
        }
    }

    /// Runs what the queue holds as it is called, and suspends it again: the block that suspends
    /// it is queued before the queue resumes, so after those and before what they queue (a
    /// suspension takes effect between blocks). Waits for it for `timeout` at most: a block that
    /// never returns (the library waiting in it for the harness's thread) is then a problem of
    /// the program, `drainStalled`, not a hang of every model check queued behind it.
    func drain() {
        guard let queue = lock.withLock({ hopQueue }) else { return log("drained") }
        let suspended = DispatchSemaphore(value: 0)
        let mark = DrainMark()
        queue.async {
            // (Once the drain gave up, the queue stays running, and `deinit` lets go of it so.)
            let claimed = mark.lock.withLock { () -> Bool in
                guard !mark.abandoned else { return false }
                mark.done = true
                return true
            }
            guard claimed else { return }
            queue.suspend()
            suspended.signal()
        }
        queue.resume()
        if suspended.wait(timeout: .now() + timeout) == .timedOut {
            let abandoned = mark.lock.withLock { () -> Bool in
                if !mark.done { mark.abandoned = true }
                return mark.abandoned
            }
            if abandoned {
                lock.withLock {
                    drainStalls += 1
                    hopQueue = nil  // resumed, for good
                }
                return log("drain stalled")
            }
            suspended.wait()  // (the block has suspended the queue just now)
        }
        log("drained")
    }

    /// Whether a drain's block has suspended the queue, or the drain gave up waiting for it.
    private final class DrainMark: @unchecked Sendable {
        let lock = TestLock()
        var done = false
        var abandoned = false
    }
    private var drainStalls = 0
    /// Whether a drain waited in vain for the blocks queued before it.
    var drainStalled: Bool { lock.withLock { drainStalls > 0 } }

    deinit { hopQueue?.resume() }  // (a suspended queue must not be let go of)

    func cancel() { cancelRun(by: "harness") }

    func invalidate() {
        token?.invalidate()
        log("invalidated")
    }

    /// Lets go of everything the program keeps, and fires what the clock holds, so that every run
    /// ends: nothing it captured may then stay alive, nor any timer. Round after round, four at
    /// least, until nothing is alive and no timer is left, or 64 rounds: a run that ignores cancel
    /// may wait for a drain after each of its hops, and after an `ensure(on:)` for two more.
    func finish() {
        freeze()
        for round in 0..<64 {
            for op in lock.withLock({ Array(resolvers.keys) }) { drop(op) }
            for id in lock.withLock({ Array(pendingResolvers.keys) }) { dropPending(id) }
            for id in lock.withLock({ Array(kept.keys) }) { dropShare(id) }
            clock.run()
            drain()
            if round >= 3 && alive.isEmpty && clock.timerCount == 0 { return }
        }
    }
}

// MARK: - The model

/// How a run of a node ends: with an outcome, or `nil`, by cancellation.
typealias MCEnd = MCOutcome?

/// One activation of a node in the model: what a cancel reaches, and where its end goes.
final class MCAct {
    private var done: ((MCEnd) -> Void)?
    private(set) var isOver = false
    /// Inside a step's closure: a cancel then stops the chain after the step.
    var inStep = false
    var stopRequested = false
    /// The activation a cancel is passed on to, or what a cancel does here.
    var current: MCAct?
    var onCancel: (() -> Void)?
    /// The run is inside its call of an operation that starts other runs at once (see
    /// `MCModel.operating`): a cancel ends it once the operation returns.
    var inOperation = false
    var cancelledInOperation = false
    /// An end that came while the run was inside its operation: the run goes on with it once
    /// the operation returns, as the library's run goes on where its driving thread is.
    var endInOperation: MCEnd?
    private var handlerCalled = false

    init(_ done: @escaping (MCEnd) -> Void) { self.done = done }

    func finish(_ end: MCEnd) {
        // Cancelled inside its operation: what the operation resolves after it is ignored.
        guard !isOver, let done, !(cancelledInOperation && end != nil) else { return }
        if inOperation && end != nil {
            if endInOperation == nil { endInOperation = end }  // the first counts
            return
        }
        isOver = true
        self.done = nil
        done(end)
    }

    /// Ends the act as cancelled: now, or, inside its operation, once the operation returns.
    func finishCancelled() {
        if inOperation {
            cancelledInOperation = true
        } else {
            finish(nil)
        }
    }

    func cancel() {
        guard !isOver, !cancelledInOperation else { return }
        if inStep {
            stopRequested = true
        } else if let onCancel {
            // Once: cancelling is idempotent (a cancel from what the handler starts, such as a
            // combination's ignoring member, finds it under way).
            guard !handlerCalled else { return }
            handlerCalled = true
            onCancel()
        } else {
            current?.cancel()
        }
    }
}

/// The reference model: an interpreter of programs, with one queue of events.
final class MCModel {
    /// A call of an operation that keeps its resolver (or waits for its harness).
    final class Call {
        let op: Int
        let handler: Bool
        let act: MCAct
        var waiting = true
        /// The operation is running: its run goes on once it returns.
        var inOperation = false
        var cancelledInOperation = false
        init(op: Int, handler: Bool, act: MCAct) {
            self.op = op
            self.handler = handler
            self.act = act
        }
    }

    final class Shared {
        enum State {
            case idle
            case running
            /// Its run was cancelled as abandoned, and has not ended (its `ensure` steps).
            case ending
            case done(MCOutcome)
        }
        let work: MCNode
        let cancelsWhenAbandoned: Bool
        var state = State.idle
        var waiters: [MCAct] = []
        /// The runs that came while its run was ending, which start it again as it ends.
        var after: [MCAct] = []
        var workAct: MCAct?
        var built: [Int: [[Int]]] = [:]
        init(_ work: MCNode, cancelsWhenAbandoned: Bool) {
            self.work = work
            self.cancelsWhenAbandoned = cancelsWhenAbandoned
        }
    }

    final class Pending {
        var outcome: MCEnd?  // nil: waiting; .some(nil): dropped
        var waiters: [MCAct] = []
    }

    var log: [String] = []
    /// Where what runs now runs, as the mark of its entries: on the harness's thread (none), on
    /// its queue as a drain runs it (`MC.onQueue`), or on the thread that resolves a bare member
    /// (`MC.elsewhere`; see the header).
    var place = ""
    var now = 0
    var timers: [(id: Int, deadline: Int, fire: () -> Void)] = []
    var timerSerial = 0
    /// The blocks on the harness's queue, in the order they came: a run that waits for the
    /// queue, with what carries it on there (nothing, once it is over), or (`nil`) the `body` of
    /// an `ensure(on:)` that a cancel queued, which runs all the same.
    var queued: [(act: MCAct?, block: () -> Void)] = []
    /// The `ensure(on:)` steps reached off the harness's queue, which would go on on a global
    /// queue: never, as generated.
    var cleanupsOffTheQueue: [Int] = []
    var calls: [Int: [Call]] = [:]
    var keptShares: [Int: Shared] = [:]
    var droppedShares: Set<Int> = []
    var pendings: [Int: Pending] = [:]
    var top: MCAct?
    var handleAvailable = false
    /// While a combination calls its operations' cancel handlers: what they cancel, for after.
    var deferredCancels: [() -> Void]?
    /// Swift's dictionary orders, from the library's run (see the header).
    var keyOrders: [Int: [[Int]]]
    /// Shared promises made inline: each build of the node makes one.
    var inlineShares: [Int] = []

    init(keyOrders: [Int: [[Int]]]) { self.keyOrders = keyOrders }

    /// Logs an entry, marked with where it runs.
    func note(_ entry: String) { log.append(entry + place) }

    // Running a program.

    func run(_ program: MCProgram) {
        for k in 0..<program.pendings { pendings[k] = Pending() }
        let top = MCAct { end in
            switch end {
            case .value(let value)?: self.note("completion value \(value)")
            case .error(let code)?: self.note("completion error \(code)")
            case nil: break
            }
        }
        self.top = top
        for (k, share) in program.shares.enumerated() {
            keptShares[k] = Shared(
                build(share.work), cancelsWhenAbandoned: share.cancelsWhenAbandoned)
        }
        start(build(program.main), top)
        handleAvailable = true
        for event in program.events { handle(event) }
    }

    func handle(_ event: MCEvent) {
        switch event {
        case .resolve(let op, let outcome): resolve(op, outcome)
        case .drop(let op):
            // One by one, in the order kept, as the harness does: a call that a drop sets off (a
            // shared promise's work, run again for the next member) is dropped too.
            while let call = calls[op]?.first {
                calls[op]?.removeFirst()
                cancelCall(call)
            }
            note("dropped \(op)")
        case .resolvePending(let k, let outcome):
            guard let pending = pendings[k], pending.outcome == nil else { return }
            pending.outcome = .some(outcome)
            let waiters = pending.waiters
            pending.waiters = []
            for waiter in waiters { waiter.finish(outcome) }
        case .dropPending(let k):
            defer { note("dropped pending \(k)") }
            guard let pending = pendings[k], pending.outcome == nil else { return }
            pending.outcome = .some(nil)
            let waiters = pending.waiters
            pending.waiters = []
            for waiter in waiters { waiter.finish(nil) }
        case .dropShare(let k):
            droppedShares.insert(k)
            note("dropped share \(k)")
        case .advance(let milliseconds): advance(milliseconds)
        case .drain:
            // Each run that waited goes on on the queue, and so does all it sets off: a step
            // runs where the one before it finished (`on(_:)`, Concurrency.md).
            let batch = queued
            queued = []
            place = MC.onQueue
            for (act, block) in batch where act?.isOver != true { block() }
            place = ""
            note("drained")
        case .cancel:
            top?.cancel()
            note("cancelled by harness")
        case .invalidate:
            top?.cancel()
            note("invalidated")
        }
    }

    func cancelRun(by who: String) {
        guard handleAvailable else { return }
        top?.cancel()
        note("cancelled by \(who)")
    }

    func resolve(_ op: Int, _ outcome: MCOutcome) {
        guard let call = calls[op]?.last, call.waiting else { return }
        call.waiting = false
        call.act.finish(outcome)
    }

    /// An operation's run is cancelled, by its handle or its resolver: its handlers, then its end.
    func cancelCall(_ call: Call) {
        guard call.waiting else { return }
        call.waiting = false
        if call.handler { note("cancel handler \(call.op)") }
        if call.inOperation {
            call.cancelledInOperation = true
        } else {
            call.act.finish(nil)
        }
    }

    /// Runs `body` as the run's call of an operation that starts other runs at once: a shared
    /// promise's work, a combination's members, a `timeout`'s work, `ignoringCancel()`'s
    /// work. `RunHandle.cancel()` and Cancellation.md: the waiting operation's handlers run, then
    /// the `ensure` steps still ahead, and no completion; a run cancelled from inside its
    /// operation stops as the operation returns (as for `MCLeaf.cancelRun`). So a cancel that
    /// comes meanwhile runs the act's handler (`onCancel`, which cancels the runs it started) at
    /// once, and ends the act when `body` returns, after what those runs do as they return; what
    /// the operation resolves after the cancel is ignored.
    func operating(_ act: MCAct, _ body: () -> Void) {
        let was = act.inOperation
        act.inOperation = true
        body()
        act.inOperation = was
        if !was && act.cancelledInOperation {
            act.cancelledInOperation = false
            act.endInOperation = nil
            act.finish(nil)
        } else if !was, let end = act.endInOperation {
            act.endInOperation = nil
            act.finish(end)
        }
    }

    // The clock.

    func setTimer(_ milliseconds: Int, _ fire: @escaping () -> Void) -> Int {
        timerSerial += 1
        timers.append((timerSerial, now + milliseconds, fire))
        return timerSerial
    }

    func removeTimer(_ id: Int) { timers.removeAll { $0.id == id } }

    func advance(_ milliseconds: Int) {
        let target = now + milliseconds
        while let next = timers.filter({ $0.deadline <= target }).min(by: {
            ($0.deadline, $0.id) < ($1.deadline, $1.id)
        }) {
            removeTimer(next.id)
            now = next.deadline
            next.fire()
        }
        now = target
    }

    /// Whether anything still waits: an operation, a timer, a run of a pending promise, a run
    /// that waits for the queue.
    var isQuiet: Bool {
        !calls.values.contains { $0.contains { $0.waiting } } && timers.isEmpty
            && !pendings.values.contains { !$0.waiters.isEmpty }
            && !queued.contains { $0.act?.isOver != true }
    }

    // The nodes.

    func start(_ node: MCNode, _ act: MCAct) {
        switch node {
        case .value(let value): act.finish(.value(value))
        case .error(let code): act.finish(.error(code))
        case .op(let id, let leaf, let handler):
            note("op \(id)")
            // A handler added after the operation cancelled itself is checked, not logged: what
            // the cancel does comes before it, or, in a run of its own, after the call returns.
            let call = Call(op: id, handler: handler && !MC.addsHandlerLate(id, leaf), act: act)
            act.onCancel = { self.cancelCall(call) }
            switch leaf {
            // An operation that resolves before it returns, on any thread, leaves the steps after
            // it to the thread that called it (README's "Which thread a step runs on").
            case .now(let outcome), .nowFromThread(let outcome), .twice(let outcome, _):
                call.waiting = false
                act.finish(outcome)
            case .later: calls[id, default: []].append(call)
            case .drop, .cancelSelf: cancelCall(call)
            case .cancelRun:
                // The run is cancelled from its own operation: it ends as the operation returns.
                calls[id, default: []].append(call)
                call.inOperation = true
                cancelRun(by: "\(id)")
                call.inOperation = false
                if call.cancelledInOperation { act.finish(nil) }
            }
        case .map(let inner, let id):
            startStep(inner, act) { end in
                guard case .value(let value)? = end else { return (false, end) }
                self.note("step \(id)")
                return (true, .value(value &* 2 &+ id))
            }
        case .effect(let inner, let id, let effect):
            startStep(inner, act) { end in
                guard case .value(let value)? = end else { return (false, end) }
                self.note("step \(id)")
                switch effect {
                case .cancelRun: self.cancelRun(by: "\(id)")
                case .resolve(let op, let outcome): self.resolve(op, outcome)
                case .resolveThenCancel(let op):
                    self.resolve(op, .value(1))
                    self.cancelRun(by: "\(id)")
                case .sleep: break
                // The steps a timer wakes run on the thread that advances the clock, before the
                // advance returns (ManualClock, TestingTime.md): here, the hop queue.
                case .advance(let milliseconds): self.advance(milliseconds)
                }
                return (true, .value(value &+ id))
            }
        case .tap(let inner, let id):
            startStep(inner, act) { end in
                guard let end else { return (false, nil) }
                self.note("tap \(id)")
                return (true, end)
            }
        case .ensure(let inner, let id):
            let child = MCAct { end in
                self.note("ensure \(id)")
                act.finish(end)
            }
            act.current = child
            start(inner, child)
        case .then(let inner, let id, let next), .recover(let inner, let id, let next):
            let isThen = if case .then = node { true } else { false }
            let child = MCAct { end in
                let takes =
                    switch end {
                    case .value?: isThen
                    case .error?: !isThen
                    case nil: false
                    }
                guard takes else { return act.finish(end) }
                act.inStep = true
                self.note("step \(id)")
                let built = self.build(next)
                act.inStep = false
                guard !act.stopRequested else { return act.finish(nil) }
                let after = MCAct { act.finish($0) }
                act.current = after
                self.start(built, after)
            }
            act.current = child
            start(inner, child)
        case .combine(let combinator, let members, let id):
            combine(combinator, members, id: id, act)
        case .timeout(let inner, let milliseconds, let code, let clock):
            // Every clock's timeout races the work against a timer, which is set once the work
            // waits. On the manual clock it fires as the clock advances; Dispatch's fires at once
            // for an interval of zero or less, and never, within a program, for an hour (the
            // real-time mode checks the others).
            let timer: (MCAct) -> Void = { timerAct in
                if clock {
                    let timer = self.setTimer(milliseconds) { timerAct.finish(.error(code)) }
                    timerAct.onCancel = {
                        self.removeTimer(timer)
                        timerAct.finish(nil)
                    }
                } else if milliseconds <= 0 {
                    timerAct.finish(.error(code))
                } else {
                    timerAct.onCancel = { timerAct.finish(nil) }
                }
            }
            join(
                [
                    (nil, Self.isOperationAlone(inner), false, { self.start(inner, $0) }),
                    (nil, false, false, timer),
                ],
                limit: .max, act
            ) { _, ending in
                if case .outcome(_, let outcome) = ending { return .settle(outcome) }
                return .cancel
            }
        case .delay(let inner, let milliseconds):
            let child = MCAct { end in
                guard let end else { return act.finish(nil) }
                let timer = self.setTimer(milliseconds) { act.finish(end) }
                act.onCancel = {
                    self.removeTimer(timer)
                    act.finish(nil)
                }
            }
            act.current = child
            start(inner, child)
        case .after(let milliseconds):
            let timer = setTimer(milliseconds) { act.finish(.value(0)) }
            act.onCancel = {
                self.removeTimer(timer)
                act.finish(nil)
            }
        case .retry(let inner, let attempts, let milliseconds):
            attempt(inner, 1, of: attempts, pause: milliseconds, act)
        case .share(let work, let cancelsWhenAbandoned):
            fatalError("built away: \(work) \(cancelsWhenAbandoned)")
        case .shared(let k): join(shared: keptShares[k]!, act)
        case .pending(let k):
            let pending = pendings[k]!
            switch pending.outcome {
            case .some(let end): act.finish(end)
            case nil:
                pending.waiters.append(act)
                act.onCancel = {
                    pending.waiters.removeAll { $0 === act }
                    act.finish(nil)
                }
            }
        case .hop(let inner):
            let child = MCAct { end in
                guard let end else { return act.finish(nil) }
                self.queued.append((act, { act.finish(end) }))
                act.onCancel = { act.finish(nil) }
            }
            act.current = child
            start(inner, child)
        case .ignoringCancel(let inner):
            act.onCancel = { act.finishCancelled() }
            operating(act) { start(inner, MCAct { act.finish($0) }) }
        case .ensureOn(let inner, let id, let sleep):
            ensureOn(inner, id, onHopQueue: sleep == nil, act)
        }
    }

    /// `ensure(on:)` (its doc comment): "Runs `body` on `queue` when the chain gets here, as
    /// `ensure(_:)` does; the steps after it start once `body` has returned"; "After `body`, the
    /// chain goes back to the queue it was on, if a hop took it there ..., else on to a global
    /// queue"; "Every move is queued, never a `sync`": on the harness's queue, `body` runs at the
    /// next drain, and the steps after it at the one after (one hop after another waits for the
    /// next drain). "A run cancelled before `body` has run queues it on `queue`, once the cancel
    /// handlers have returned; the run's end does not wait for it": it runs at a later drain, if
    /// one comes. (A cancel while `body` runs needs another thread: not in this model.) The other
    /// queue, the real-time mode's, which the model never runs, holds the run.
    func ensureOn(_ inner: MCNode, _ id: Int, onHopQueue: Bool, _ act: MCAct) {
        let cleanup = {
            guard onHopQueue else { return }
            self.queued.append((nil, { self.note("ensureOn \(id)") }))
        }
        let child = MCAct { end in
            guard let end else {
                cleanup()
                return act.finish(nil)
            }
            act.onCancel = {
                cleanup()
                act.finish(nil)
            }
            guard onHopQueue else { return }
            if self.place != MC.onQueue { self.cleanupsOffTheQueue.append(id) }
            self.queued.append(
                (
                    act,
                    {
                        self.note("ensureOn \(id)")
                        act.onCancel = { act.finish(nil) }
                        self.queued.append((act, { act.finish(end) }))
                    }
                ))
        }
        act.current = child
        start(inner, child)
    }

    /// Starts `inner`, then the step `body` on its end: `body` says whether it ran as a step
    /// (which a cancel during it stops after) and the end it gives.
    func startStep(_ inner: MCNode, _ act: MCAct, _ body: @escaping (MCEnd) -> (Bool, MCEnd)) {
        let child = MCAct { end in
            act.inStep = true
            let (ran, next) = body(end)
            act.inStep = false
            act.finish(ran && act.stopRequested ? nil : next)
        }
        act.current = child
        start(inner, child)
    }

    func attempt(_ inner: MCNode, _ number: Int, of attempts: Int, pause: Int, _ act: MCAct) {
        let child = MCAct { end in
            guard case .error? = end, number < attempts else { return act.finish(end) }
            if pause > 0 {
                let timer = self.setTimer(pause) {
                    self.attempt(inner, number + 1, of: attempts, pause: pause, act)
                }
                act.current = nil
                act.onCancel = {
                    self.removeTimer(timer)
                    act.finish(nil)
                }
            } else {
                self.attempt(inner, number + 1, of: attempts, pause: pause, act)
            }
        }
        act.onCancel = nil
        act.current = child
        start(inner, child)
    }

    /// The work of the `ignoringCancel()` a member's chain begins with, if it does: a
    /// combination that ends before the member's turn starts that work all the same, and not
    /// the member's steps after it. `ignoringCancel()`'s doc: "A run that reaches it starts the
    /// work even if the run was cancelled meanwhile, or before it started; and a combination that
    /// ends before its turn starts it all the same"; Cancellation.md: "the work goes on to its
    /// end unobserved". (`when`'s doc says such members "start as it ends"; what starts is their
    /// work: their steps, `ensure` steps too, belong to the member's run, which never began.) A
    /// member that begins with a combination never starts it either: the work of that
    /// combination's members that ignore cancel starts, as a run cancelled before it reaches a
    /// combination starts it (`ignoringCancel()`'s doc).
    static func ignoredWork(_ node: MCNode) -> [MCNode] {
        switch node {
        case .ignoringCancel(let inner): [inner]
        case .map(let inner, _), .effect(let inner, _, _), .then(let inner, _, _),
            .recover(let inner, _, _), .tap(let inner, _), .ensure(let inner, _),
            .delay(let inner, _), .hop(let inner), .ensureOn(let inner, _, _),
            .retry(let inner, _, _):
            ignoredWork(inner)
        case .timeout(let inner, _, _, _): ignoredWork(inner)
        // (A batch's signal, its first member here, runs beside its members: it is not one.)
        case .combine(.until, let members, _): members.dropFirst().flatMap(ignoredWork)
        case .combine(_, let members, _): members.flatMap(ignoredWork)
        default: []
        }
    }

    /// Whether a promise is an operation alone that resolves from another thread during its call.
    static func endsElsewhere(_ node: MCNode) -> Bool {
        switch node {
        case .op(_, .nowFromThread, _): true
        case .retry(let inner, let attempts, _) where attempts <= 1: endsElsewhere(inner)
        default: false
        }
    }

    /// Whether a promise is an operation alone, with no step.
    static func isOperationAlone(_ node: MCNode) -> Bool {
        switch node {
        case .op, .shared, .pending, .share: true
        // One attempt is no retry: `retry(1)` is the promise it was called on.
        case .retry(let inner, let attempts, _) where attempts <= 1: isOperationAlone(inner)
        default: false
        }
    }

    /// The `ensure` steps of a chain, innermost first: not those of a combination's members, of
    /// the promises steps would make, or of a shared or pending promise, which are not its own.
    func ensures(_ node: MCNode) -> [Int] {
        switch node {
        case .ensure(let inner, let id), .ensureOn(let inner, let id, _): ensures(inner) + [id]
        case .map(let inner, _), .effect(let inner, _, _), .then(let inner, _, _),
            .recover(let inner, _, _), .tap(let inner, _), .delay(let inner, _),
            .hop(let inner), .retry(let inner, _, _):
            ensures(inner)
        case .timeout(let inner, _, _, _): ensures(inner)
        default: []
        }
    }

    /// Makes a promise of `node` as building it does: each inline `share()` a new shared promise
    /// (kept as a `shared` node), each keyed `when` with its dictionary's order.
    func build(_ node: MCNode) -> MCNode {
        switch node {
        case .value, .error, .op, .after, .shared, .pending: node
        case .map(let inner, let id): .map(build(inner), id)
        case .effect(let inner, let id, let effect): .effect(build(inner), id, effect)
        case .then(let inner, let id, let next): .then(build(inner), id, next)
        case .recover(let inner, let id, let next): .recover(build(inner), id, next)
        case .ensure(let inner, let id): .ensure(build(inner), id)
        case .tap(let inner, let id): .tap(build(inner), id)
        case .combine(let combinator, let members, let id):
            built(combinator, members.map(build), id: id)
        case .timeout(let inner, let milliseconds, let code, let clock):
            .timeout(build(inner), milliseconds: milliseconds, code: code, clock: clock)
        case .delay(let inner, let milliseconds): .delay(build(inner), milliseconds: milliseconds)
        case .retry(let inner, let attempts, let milliseconds):
            .retry(build(inner), attempts: attempts, milliseconds: milliseconds)
        case .share(let work, let cancelsWhenAbandoned):
            makeShare(build(work), cancelsWhenAbandoned)
        case .ignoringCancel(let inner): .ignoringCancel(build(inner))
        case .hop(let inner): .hop(build(inner))
        case .ensureOn(let inner, let id, let sleep): .ensureOn(build(inner), id, sleep: sleep)
        }
    }

    private func makeShare(_ work: MCNode, _ cancelsWhenAbandoned: Bool) -> MCNode {
        let k = -1 - keptShares.count  // inline shares get negative numbers
        keptShares[k] = Shared(work, cancelsWhenAbandoned: cancelsWhenAbandoned)
        return .shared(k)
    }

    /// A keyed `when` takes its members in its dictionary's order.
    private func built(_ combinator: MCCombinator, _ members: [MCNode], id: Int) -> MCNode {
        guard combinator == .keyed else { return .combine(combinator, members, id: id) }
        let order: [Int]
        if var orders = keyOrders[id], !orders.isEmpty {
            order = orders.removeFirst()
            keyOrders[id] = orders
        } else {
            order = Array(members.indices)
        }
        return .combine(.keyedIn(order), order.map { members[$0] }, id: id)
    }

    // Combinations.

    enum Ending {
        case noMembers
        case outcome(Int, MCOutcome)
        case cancelled(Int)
    }

    enum Decision {
        case wait
        case settle(MCOutcome)
        case cancel
    }

    /// The tally of a combination: each member's end, `nil` while it runs.
    typealias Tally = [MCEnd?]

    /// A member of a combination: the work it starts if the combination ends before its turn
    /// (`ignoredWork`), whether it is an operation alone, and whether it is one that resolves
    /// from another thread during its call (`endsElsewhere`).
    typealias Member = (
        ignored: (() -> Void)?, alone: Bool, elsewhere: Bool, start: (MCAct) -> Void
    )

    func combine(_ combinator: MCCombinator, _ members: [MCNode], id: Int, _ act: MCAct) {
        var starters = members.map { member -> Member in
            (
                Self.ignoredWork(member).isEmpty
                    ? nil
                    : { for work in Self.ignoredWork(member) { self.start(work, MCAct { _ in }) } },
                Self.isOperationAlone(member), Self.endsElsewhere(member),
                { self.start(member, $0) }
            )
        }
        var limit = if case .limit(let limit) = combinator { limit } else { Int.max }
        if case .until(let batchLimit) = combinator {
            // Every member has a step of its own (the batch makes optionals of its members'
            // values, the signal a `Guarantee<Void>`), and the signal a place beside the limit's;
            // with no promises there is nothing to stop, and it does not start.
            for index in starters.indices {
                starters[index].alone = false
                starters[index].elsewhere = false
            }
            if starters.count == 1 { starters = [] }
            limit = batchLimit == .max ? .max : batchLimit + 1
        }
        func complete(_ tally: Tally) -> Bool { !tally.contains { $0 == nil } }
        func values(_ tally: Tally) -> [Int] {
            tally.compactMap { if case .value(let value)?? = $0 { value } else { nil } }
        }
        func errors(_ tally: Tally) -> [Int] {
            tally.compactMap { if case .error(let code)?? = $0 { code } else { nil } }
        }
        func results(_ tally: Tally) -> [Int] {
            tally.map { end -> Int in
                switch end {
                case .value(let value)??: value
                case .error(let code)??: -1000 - code
                default: 0
                }
            }
        }
        join(starters, limit: limit, act) { tally, ending in
            switch combinator {
            case .all, .limit, .keyed, .keyedIn:
                if case .outcome(_, .error(let code)) = ending { return .settle(.error(code)) }
                if case .cancelled = ending { return .cancel }
                guard complete(tally) else { return .wait }
                var inOrder = values(tally)
                if case .keyedIn(let order) = combinator {
                    var byKey = [Int](repeating: 0, count: inOrder.count)
                    for (position, key) in order.enumerated() { byKey[key] = inOrder[position] }
                    inOrder = byKey
                }
                return .settle(.value(MC.fold(inOrder)))
            case .resolved:
                if case .cancelled = ending { return .cancel }
                return complete(tally) ? .settle(.value(MC.fold(results(tally)))) : .wait
            case .any:
                if case .cancelled = ending { return .cancel }
                guard complete(tally) else { return .wait }
                let errors = errors(tally)
                if !errors.isEmpty && errors.count == tally.count {
                    return .settle(.error(MC.fold(errors)))
                }
                return .settle(.value(MC.fold(results(tally))))
            case .race:
                if case .outcome(_, let outcome) = ending { return .settle(outcome) }
                return complete(tally) ? .cancel : .wait
            case .raceFulfilled:
                if case .outcome(_, .value(let value)) = ending { return .settle(.value(value)) }
                guard complete(tally) else { return .wait }
                return tally.contains { $0 == .some(nil) }
                    ? .cancel : .settle(.error(MC.fold(errors(tally))))
            case .until:
                if case .cancelled(0) = ending { return .cancel }
                let signalled = if case .some(.some) = tally.first { true } else { false }
                let batch = tally.dropFirst()
                guard signalled || !batch.contains(where: { $0 == nil }) else { return .wait }
                // A member not finished, cancelled or never started, is `nil`.
                return .settle(
                    .value(
                        MC.fold(
                            batch.map { end -> Int in
                                switch end {
                                case .value(let value)??: value
                                case .error(let code)??: -1000 - code
                                default: MC.unfinished
                                }
                            })))
            }
        }
    }

    /// Runs members, at most `limit` at once, asking `policy` as each ends (and at once with
    /// none); once decided, cancels those still running and starts those not started that
    /// ignore cancel.
    /// A combination. Cancelled, or deciding to be or to settle, it ends once the members it
    /// cancelled that run in runs of their own (not operations alone) have stopped: a member in a
    /// step stops after it (CombiningPromises.md: "The combination settles once they have
    /// stopped"). A timeout is one too.
    func join(
        _ members: [Member], limit: Int,
        _ act: MCAct, policy: @escaping (Tally, Ending) -> Decision
    ) {
        var tally = Tally(repeating: nil, count: members.count)
        var acts: [MCAct?] = Array(repeating: nil, count: members.count)
        var next = 0
        var running = 0
        var closed = false
        /// Inside `close()`, which starts the members that ignore cancel: a cancel of the run
        /// that comes from them finds the combination stopping (`Join`'s `stopping`), which
        /// ends the run cancelled once `close()` is done, not before, whatever it decided.
        var closing = false
        var cancelledWhileClosing = false
        /// What ends the act once the member runs it cancelled have stopped.
        var whenStopped: (() -> Void)?
        func runsStopped() -> Bool {
            (0..<next).allSatisfy { members[$0].alone || acts[$0]?.isOver ?? true }
        }
        func once(stopped end: @escaping () -> Void) {
            if runsStopped() { end() } else { whenStopped = end }
        }
        func close() {
            closed = true
            closing = true
            defer { closing = false }
            // The docs leave open the order in which the members still running are cancelled:
            // the model takes the library's, members with runs of their own (those with steps)
            // first, in input order, then operations alone (an op, a shared or pending promise),
            // whose handlers are called one after another before what they cancel (a shared
            // promise's work) is (the engine's `Nesting.cancelling`).
            for index in 0..<next where tally[index] == nil && !members[index].alone {
                acts[index]?.cancel()
            }
            let outer = deferredCancels
            deferredCancels = []
            for index in 0..<next where tally[index] == nil && members[index].alone {
                acts[index]?.cancel()
            }
            let deferred = deferredCancels ?? []
            deferredCancels = outer
            for cancel in deferred { cancel() }
            while next < members.count {
                next += 1
                members[next - 1].ignored?()
            }
        }
        func apply(_ decision: Decision) {
            switch decision {
            case .wait: pump()
            case .settle(let outcome):
                close()
                if cancelledWhileClosing {
                    once { act.finishCancelled() }
                } else {
                    once { act.finish(outcome) }
                }
            case .cancel:
                // Its own end, an outcome or a cancellation, that came during a call of a member
                // (in the launch, or as another member ended) goes on on the thread that called
                // it, once the call returned (`operating`; the header of Combining.swift).
                close()
                once { act.finishCancelled() }
            }
        }
        // Members start in a loop, not nested: a member that ends while another starts makes room
        // for the next, which starts once that one's start returned (the engine's launch loop).
        var pumping = false
        func pump() {
            guard !pumping else { return }
            pumping = true
            defer { pumping = false }
            while !closed && next < members.count && running < limit {
                let index = next
                next += 1
                running += 1
                let member = MCAct { end in
                    // A member made from an operation alone ends where its resolver is called, at
                    // once: resolved from another thread in its call, the combination decides
                    // there, and all it sets off runs there (cancelling the others, starting those
                    // that ignore cancel); its own end goes on on the thread that called the
                    // member, once the call returned (`operating`, below): the harness's operation
                    // waits for its resolving thread, so the caller stops last (Resolver, the
                    // header of Combining.swift, CombiningPromises.md).
                    let was = self.place
                    if members[index].elsewhere { self.place = MC.elsewhere }
                    defer { self.place = was }
                    guard !closed else {
                        if let end = whenStopped, runsStopped() {
                            whenStopped = nil
                            end()
                        }
                        return
                    }
                    running -= 1
                    tally[index] = .some(end)
                    apply(policy(tally, end.map { .outcome(index, $0) } ?? .cancelled(index)))
                }
                acts[index] = member
                // The thread that calls a member (in the launch, or as another member ended) is
                // one that stops: the combination's end that comes in the call goes on there once
                // it returns (the header of Combining.swift).
                operating(act) { members[index].start(member) }
            }
        }
        act.onCancel = {
            guard !closing else {
                cancelledWhileClosing = true
                return
            }
            close()
            once { act.finishCancelled() }
        }
        operating(act) {
            if members.isEmpty { apply(policy(tally, .noMembers)) } else { pump() }
        }
    }

    // Sharing.

    func join(shared: Shared, _ act: MCAct) {
        // Set before the work starts: the work runs inside this run's call of the shared
        // promise's operation, and may cancel the run from there.
        act.onCancel = {
            shared.waiters.removeAll { $0 === act }
            shared.after.removeAll { $0 === act }
            if shared.waiters.isEmpty && shared.cancelsWhenAbandoned,
                case .running = shared.state
            {
                shared.state = .ending
                let work = shared.workAct
                if self.deferredCancels != nil {
                    self.deferredCancels!.append { work?.cancel() }
                } else {
                    work?.cancel()
                }
            }
            act.finishCancelled()
        }
        switch shared.state {
        case .done(let outcome): return act.finish(outcome)
        case .running: shared.waiters.append(act)
        case .ending: shared.after.append(act)
        case .idle:
            shared.waiters.append(act)
            operating(act) { startWork(shared) }
        }
    }

    /// Starts a run of the shared promise's work for its waiters. As it ends by cancellation, the
    /// runs that came while it was ending start it again.
    private func startWork(_ shared: Shared) {
        shared.state = .running
        let work = MCAct { end in
            let waiters = shared.waiters
            let after = shared.after
            shared.waiters = []
            shared.after = []
            if let end {
                shared.state = .done(end)
                for waiter in waiters + after { waiter.finish(end) }
                return
            }
            shared.state = .idle
            for waiter in waiters { waiter.finish(nil) }
            guard !after.isEmpty else { return }
            shared.waiters = after
            self.startWork(shared)
        }
        shared.workAct = work
        start(shared.work, work)
    }
}

// MARK: - Building on the library, and printing as Swift

/// Builds a program's promise on the library, with the calls `MCSource` prints.
struct MCBuilder: Sendable {
    let h: MCHarness

    func build(_ node: MCNode) -> Promise<Int, MCError> {
        switch node {
        case .value(let value): Promise<Int, MCError>(value: value)
        case .error(let code): Promise<Int, MCError>(error: MCError(code: code))
        case .op(let id, let leaf, let handler): h.op(id, leaf, handler: handler)
        case .map(let inner, let id): build(inner).map(h.map(id))
        case .effect(let inner, let id, let effect): build(inner).map(h.effect(id, effect))
        case .then(let inner, let id, let next): build(inner).then(h.then(id) { build(next) })
        case .recover(let inner, let id, let next):
            build(inner).recover(h.recover(id) { build(next) })
        case .ensure(let inner, let id): build(inner).ensure(h.ensure(id))
        case .tap(let inner, let id): build(inner).tap(h.tap(id))
        case .combine(let combinator, let members, let id):
            combine(combinator, members.map(build), id: id)
        case .timeout(let inner, let milliseconds, let code, let clock):
            clock
                ? build(inner).timeout(
                    .milliseconds(milliseconds), orFailWith: MCError(code: code), clock: h.clock)
                : build(inner).timeout(.milliseconds(milliseconds), orFailWith: MCError(code: code))
        case .delay(let inner, let milliseconds):
            build(inner).delay(.milliseconds(milliseconds), clock: h.clock)
        case .after(let milliseconds):
            after(.milliseconds(milliseconds), clock: h.clock).map { 0 }
                .setFailureType(to: MCError.self)
        case .retry(let inner, let attempts, let milliseconds):
            build(inner).retry(attempts, delay: .milliseconds(milliseconds), clock: h.clock)
        case .share(let work, let cancelsWhenAbandoned):
            build(work).share(cancelsWhenAbandoned: cancelsWhenAbandoned)
        case .shared(let k): h.shared(k)
        case .pending(let k): h.pending(k)
        case .ignoringCancel(let inner): build(inner).ignoringCancel()
        case .hop(let inner): build(inner).on(h.queue)
        case .ensureOn(let inner, let id, nil): build(inner).ensure(on: h.queue, h.ensureOn(id))
        case .ensureOn(let inner, let id, let sleep?):
            build(inner).ensure(on: h.cleanupQueue, h.ensureOn(id, sleep: sleep))
        }
    }

    func combine(
        _ combinator: MCCombinator, _ members: [Promise<Int, MCError>], id: Int
    ) -> Promise<Int, MCError> {
        switch combinator {
        case .all: when(fulfilled: members).map(MC.fold)
        case .limit(let limit): when(fulfilled: members, concurrently: limit).map(MC.fold)
        case .keyed, .keyedIn: when(fulfilled: h.keyed(id, members)).map(MC.fold(keyed:))
        case .resolved:
            when(resolved: members).map(MC.fold(results:)).setFailureType(to: MCError.self)
        case .any: any(members).map(MC.fold(results:)).mapError(MC.allFailed)
        case .race: race(members)
        case .raceFulfilled: race(fulfilled: members).mapError(MC.allFailed)
        case .until(let limit):
            when(
                resolved: Array(members.dropFirst()), concurrently: limit,
                until: members[0].asVoid().recover { _ in }
            ).map(MC.fold(unfinished:)).setFailureType(to: MCError.self)
        }
    }
}

/// A program as Swift code that builds the same promise and plays the same events.
enum MCSource {
    static func node(_ node: MCNode) -> String {
        switch node {
        case .value(let value): return "Promise<Int, MCError>(value: \(value))"
        case .error(let code): return "Promise<Int, MCError>(error: MCError(code: \(code)))"
        case .op(let id, let leaf, let handler):
            return "h.op(\(id), \(leaf)\(handler ? ", handler: true" : ""))"
        case .map(let inner, let id): return "\(self.node(inner)).map(h.map(\(id)))"
        case .effect(let inner, let id, let effect):
            return "\(self.node(inner)).map(h.effect(\(id), \(effect)))"
        case .then(let inner, let id, let next):
            return "\(self.node(inner)).then(h.then(\(id)) { \(self.node(next)) })"
        case .recover(let inner, let id, let next):
            return "\(self.node(inner)).recover(h.recover(\(id)) { \(self.node(next)) })"
        case .ensure(let inner, let id): return "\(self.node(inner)).ensure(h.ensure(\(id)))"
        case .tap(let inner, let id): return "\(self.node(inner)).tap(h.tap(\(id)))"
        case .combine(let combinator, let members, let id):
            let list = "[" + members.map(self.node).joined(separator: ", ") + "]"
            switch combinator {
            case .all: return "when(fulfilled: \(list)).map(MC.fold)"
            case .limit(let limit):
                return "when(fulfilled: \(list), concurrently: \(limit)).map(MC.fold)"
            case .keyed, .keyedIn:
                return "when(fulfilled: h.keyed(\(id), \(list))).map(MC.fold(keyed:))"
            case .resolved:
                return "when(resolved: \(list)).map(MC.fold(results:))"
                    + ".setFailureType(to: MCError.self)"
            case .any: return "any(\(list)).map(MC.fold(results:)).mapError(MC.allFailed)"
            case .race: return "race(\(list))"
            case .raceFulfilled: return "race(fulfilled: \(list)).mapError(MC.allFailed)"
            case .until(let limit):
                let batch = "[" + members.dropFirst().map(self.node).joined(separator: ", ") + "]"
                let concurrently = limit == .max ? ".max" : "\(limit)"
                return "when(resolved: \(batch), concurrently: \(concurrently), "
                    + "until: \(self.node(members[0])).asVoid().recover { _ in })"
                    + ".map(MC.fold(unfinished:)).setFailureType(to: MCError.self)"
            }
        case .timeout(let inner, let milliseconds, let code, let clock):
            return "\(self.node(inner)).timeout(.milliseconds(\(milliseconds)), "
                + "orFailWith: MCError(code: \(code))\(clock ? ", clock: h.clock" : ""))"
        case .delay(let inner, let milliseconds):
            return "\(self.node(inner)).delay(.milliseconds(\(milliseconds)), clock: h.clock)"
        case .after(let milliseconds):
            return "after(.milliseconds(\(milliseconds)), clock: h.clock).map { 0 }"
                + ".setFailureType(to: MCError.self)"
        case .retry(let inner, let attempts, let milliseconds):
            return "\(self.node(inner)).retry(\(attempts), delay: .milliseconds(\(milliseconds)), "
                + "clock: h.clock)"
        case .share(let work, let cancelsWhenAbandoned):
            return "\(self.node(work)).share(cancelsWhenAbandoned: \(cancelsWhenAbandoned))"
        case .shared(let k): return "h.shared(\(k))"
        case .pending(let k): return "h.pending(\(k))"
        case .ignoringCancel(let inner): return "\(self.node(inner)).ignoringCancel()"
        case .hop(let inner): return "\(self.node(inner)).on(h.queue)"
        case .ensureOn(let inner, let id, nil):
            return "\(self.node(inner)).ensure(on: h.queue, h.ensureOn(\(id)))"
        case .ensureOn(let inner, let id, let sleep?):
            return "\(self.node(inner)).ensure(on: h.cleanupQueue, "
                + "h.ensureOn(\(id), sleep: \(sleep)))"
        }
    }

    static func event(_ event: MCEvent) -> String {
        switch event {
        case .resolve(let op, let outcome): "h.resolve(\(op), \(outcome))"
        case .drop(let op): "h.drop(\(op))"
        case .resolvePending(let k, let outcome): "h.resolvePending(\(k), \(outcome))"
        case .dropPending(let k): "h.dropPending(\(k))"
        case .dropShare(let k): "h.dropShare(\(k))"
        case .advance(let milliseconds): "h.advance(milliseconds: \(milliseconds))"
        case .drain: "h.drain()"
        case .cancel: "h.cancel()"
        case .invalidate: "h.invalidate()"
        }
    }

    static func program(_ program: MCProgram, name: String, expected: [String]?) -> String {
        var lines = ["@Test func \(name)() {"]
        lines.append(
            "    let h = MCHarness(pendings: \(program.pendings), token: \(program.inToken)"
                + (program.placed ? ", places: true)" : ")"))
        for (k, share) in program.shares.enumerated() {
            lines.append(
                "    h.keep(share: \(k), \(node(share.work))"
                    + ".share(cancelsWhenAbandoned: \(share.cancelsWhenAbandoned)))")
        }
        lines.append("    h.start(\(node(program.main)))")
        for (index, item) in program.events.enumerated() {
            if program.cancelFromThreadAt == index {
                lines.append(
                    "    // a cancel from another thread comes about here"
                        + (program.callsAwaitTheCancel ? ", as the next operation is called" : ""))
            }
            lines.append("    " + event(item))
        }
        if let expected {
            lines.append("    #expect(MC.comparable(h.log) == [")
            for entry in MC.comparable(expected) { lines.append("        \"\(entry)\",") }
            lines.append("    ])")
        }
        lines.append("    h.finish()")
        lines.append("    #expect(h.alive == [] && h.clock.timerCount == 0)")
        lines.append("}")
        return lines.joined(separator: "\n")
    }
}

// MARK: - Random programs

/// SplitMix64: the same programs from the same seed, on every platform.
struct MCRandom {
    var state: UInt64

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func int(_ range: ClosedRange<Int>) -> Int {
        range.lowerBound + Int(next() % UInt64(range.count))
    }

    mutating func chance(_ probability: Double) -> Bool {
        Double(next() % 1_000_000) < probability * 1_000_000
    }

    mutating func pick<T>(_ items: [T]) -> T { items[int(0...(items.count - 1))] }
}

struct MCGenerator {
    var random: MCRandom
    var nextId = 1
    /// Operations whose resolvers the harness keeps: what events resolve and drop.
    var kept: [Int] = []
    var shares: [MCShare] = []
    var pendings = 0
    /// What the program may hold: nothing that outlives a cancel, in the threads mode.
    var detached = true
    /// In the threads mode: half the combinations are `when(fulfilled:concurrently: 1)`, and half
    /// the members are operations alone, so that an event that ends a member often has the
    /// harness's thread run the launch loop, which calls the next member as the cancel from
    /// another thread comes.
    var launchesOnEvents = false
    var inShare = false
    /// Inside the promise a `then` or `recover` step makes: no kept shared promise, which the
    /// program may have let go of by then.
    var inStep = false
    /// Whether the program may hop to the harness's queue (the exact mode), whether it does, and
    /// whether it has an `ensure(on:)` there.
    var hops = (allowed: false, made: false, cleanups: false)

    init(seed: UInt64) { random = MCRandom(state: seed) }

    /// Whether a combination's member may be an operation alone that drops its resolver (see
    /// where it is used).
    static let bareDroppingMembers = false
    /// Whether a combination's member may be an operation alone that resolves from another thread
    /// during its call. The combination then decides on that thread, cancelling the other members
    /// and starting those that ignore cancel there (Resolver, CombiningPromises.md, the header of
    /// Combining.swift; the tests `aMemberResolvedFromAnotherThreadInItsCall…`), which the model
    /// marks ` @elsewhere`; the steps after the combination go on on the thread that called the
    /// member, once its operation returns. A step after it gives it a run of its own, which goes
    /// on on the operation's thread.
    static let bareMembersResolvedFromThreads = true

    /// The leaf of a promise that is an operation alone, if it is one (`retry(1)` is the promise
    /// it was called on).
    static func leafAlone(_ node: MCNode) -> MCLeaf? {
        switch node {
        case .op(_, let leaf, _): leaf
        case .retry(let inner, let attempts, _) where attempts <= 1: leafAlone(inner)
        default: nil
        }
    }

    mutating func id() -> Int {
        defer { nextId += 1 }
        return nextId
    }

    mutating func outcome() -> MCOutcome {
        random.chance(0.7) ? .value(random.int(1...9)) : .error(random.int(1...9))
    }

    mutating func leaf(zeroTimeout: Bool = false) -> MCNode {
        // Inside a zero Dispatch timeout, no operation drops its resolver but its work itself:
        // whether the timeout or a combination or shared promise around the operation notices
        // the drop first is not documented.
        var roll = random.int(0...99)
        if zeroTimeout && (86..<90).contains(roll) { roll = 50 }
        switch roll {
        case 0..<8: return .value(random.int(1...9))
        case 8..<14: return .error(random.int(1...9))
        default:
            let id = id()
            let handler = random.chance(0.5)
            let leaf: MCLeaf
            switch roll {
            case 14..<44:
                // In the exact mode, one in five resolves from another thread as it is called.
                let fromThread = hops.allowed && random.chance(0.2)
                leaf = fromThread ? .nowFromThread(outcome()) : .now(outcome())
            case 44..<50: leaf = .twice(outcome(), outcome())
            case 50..<86:
                leaf = .later
                kept.append(id)
            case 86..<90: leaf = .drop
            case 90..<95: leaf = .cancelSelf
            default:
                leaf = .cancelRun
                kept.append(id)
            }
            return .op(id, leaf, handler: handler)
        }
    }

    mutating func node(_ depth: Int, zeroTimeout: Bool = false) -> MCNode {
        if depth <= 0 || random.chance(0.22) { return leaf(zeroTimeout: zeroTimeout) }
        let inner = { (generator: inout MCGenerator) in
            generator.node(depth - 1, zeroTimeout: zeroTimeout)
        }
        if hops.allowed && random.chance(0.06) {
            hops.made = true
            let hop = MCNode.hop(inner(&self))
            guard random.chance(0.3) else { return random.chance(0.5) ? cleanup(after: hop) : hop }
            // A step right after the hop runs on the queue, and advances the clock there, which a
            // member beside it waits for: the steps its timer wakes run on the queue too.
            let advance = MCNode.effect(hop, id(), .advance(random.int(1...6)))
            let wait =
                random.chance(0.5)
                ? MCNode.after(milliseconds: random.int(1...6))
                : .delay(inner(&self), milliseconds: random.int(1...5))
            return .combine(
                random.pick([.all, .resolved, .race]), [advance, .map(wait, id())], id: id())
        }
        switch random.int(0...21) {
        case 0, 1: return .map(inner(&self), id())
        case 2:
            let base = inner(&self)
            let effect: MCEffect =
                if let op = kept.last, random.chance(0.5) {
                    .resolve(op, outcome())
                } else {
                    .cancelRun
                }
            return .effect(base, id(), effect)
        case 3, 4, 5:
            let base = inner(&self)
            let id = id()
            let wasInStep = inStep
            inStep = true
            let next = inner(&self)
            inStep = wasInStep
            return random.chance(0.6) ? .then(base, id, next) : .recover(base, id, next)
        case 6, 7: return .ensure(inner(&self), id())
        case 8: return .tap(inner(&self), id())
        case 9, 10, 11:
            var combinator = random.pick([
                MCCombinator.all, .limit(random.int(1...2)), .keyed, .resolved, .any, .race,
                .raceFulfilled, .until(random.pick([Int.max, 1, 2])),
            ])
            if launchesOnEvents && random.chance(0.5) { combinator = .limit(1) }
            var count = random.chance(0.1) ? 0 : random.int(1...3)
            if case .until = combinator { count += 1 }  // the signal, first
            let members = (0..<count).map { _ -> MCNode in
                let member =
                    launchesOnEvents && random.chance(0.5)
                    ? leaf(zeroTimeout: zeroTimeout) : inner(&self)
                // An operation alone that drops its resolver, as a member: when the drop is
                // noticed is not documented (the engine notices it after starting the other
                // members). A step after it gives it a run of its own, where it is noticed as the
                // operation returns.
                if !Self.bareDroppingMembers, case .op(_, .drop, _) = member {
                    return .map(member, id())
                }
                if !Self.bareMembersResolvedFromThreads,
                    case .nowFromThread? = Self.leafAlone(member)
                {
                    return .map(member, id())
                }
                return member
            }
            return .combine(combinator, members, id: id())
        case 12, 13:
            let base = inner(&self)
            return .timeout(
                base, milliseconds: random.int(1...8), code: 100 + random.int(1...9), clock: true)
        case 14:
            let zero = random.chance(0.6)
            let base =
                zero && !zeroTimeout && random.chance(0.2)
                ? .op(id(), .drop, handler: random.chance(0.5))
                : node(depth - 1, zeroTimeout: zeroTimeout || zero)
            return .timeout(
                base, milliseconds: zero ? 0 : 3_600_000, code: 200 + random.int(1...9),
                clock: false)
        case 15: return .delay(inner(&self), milliseconds: random.int(1...5))
        case 16: return .after(milliseconds: random.int(1...5))
        case 17:
            let base = inner(&self)
            return .retry(
                base, attempts: random.int(1...3),
                milliseconds: random.chance(0.5) ? 0 : random.int(1...4))
        case 18:
            guard detached || random.chance(0.5) else {
                return .share(inner(&self), cancelsWhenAbandoned: true)
            }
            return .share(inner(&self), cancelsWhenAbandoned: random.chance(0.7) || !detached)
        case 19:
            guard !inShare && !inStep && !zeroTimeout else { return leaf(zeroTimeout: zeroTimeout) }
            if !shares.isEmpty && random.chance(0.5) {
                return .shared(random.int(0...(shares.count - 1)))
            }
            inShare = true
            let work = node(depth - 1)
            inShare = false
            shares.append(
                MCShare(work: work, cancelsWhenAbandoned: random.chance(0.7) || !detached))
            return .shared(shares.count - 1)
        case 20:
            if pendings == 0 || random.chance(0.3) { pendings += 1 }
            return .pending(random.int(0...(pendings - 1)))
        default:
            guard detached && !zeroTimeout else { return .map(inner(&self), id()) }
            return .ignoringCancel(inner(&self))
        }
    }

    /// An `ensure(on:)` on the harness's queue, where the run is on that queue as it gets there:
    /// right after the hop `hop` (or a step after it, or another such `ensure(on:)`). After
    /// `body`, the run goes back to the queue it was on, there: off it, it would go on to a
    /// global queue, which no drain runs.
    mutating func cleanup(after hop: MCNode) -> MCNode {
        hops.cleanups = true
        var cleanup = MCNode.ensureOn(random.chance(0.2) ? .map(hop, id()) : hop, id(), sleep: nil)
        if random.chance(0.2) { cleanup = .ensureOn(cleanup, id(), sleep: nil) }
        return cleanup
    }

    mutating func events(count: Int, inToken: Bool) -> [MCEvent] {
        var events: [MCEvent] = []
        for _ in 0..<count {
            if hops.made && random.chance(hops.cleanups ? 0.45 : 0.3) {
                events.append(.drain)
                continue
            }
            switch random.int(0...99) {
            case 0..<45 where !kept.isEmpty: events.append(.resolve(random.pick(kept), outcome()))
            case 45..<53 where !kept.isEmpty: events.append(.drop(random.pick(kept)))
            case 53..<60 where pendings > 0:
                events.append(.resolvePending(random.int(0...(pendings - 1)), outcome()))
            case 60..<62 where pendings > 0:
                events.append(.dropPending(random.int(0...(pendings - 1))))
            case 62..<66 where !shares.isEmpty:
                events.append(.dropShare(random.int(0...(shares.count - 1))))
            case 66..<72: events.append(inToken && random.chance(0.5) ? .invalidate : .cancel)
            default: events.append(.advance(milliseconds: random.int(1...6)))
            }
        }
        return events + [.cancel]
    }

    mutating func program(_ mode: MCMode) -> MCProgram {
        switch mode {
        case .exact:
            hops.allowed = true
            let main = MCNode.ensure(node(random.int(1...5)), 0)
            let inToken = random.chance(0.15)
            // (An `ensure(on:)` waits for two drains more than its hop: more events.)
            let count = random.int(0...(hops.cleanups ? 9 : 7))
            var program = MCProgram(main: main, events: events(count: count, inToken: inToken))
            (program.shares, program.pendings, program.inToken) = (shares, pendings, inToken)
            return program
        case .threads:
            detached = false
            launchesOnEvents = true
            let main = MCNode.ensure(node(random.int(1...4)), 0)
            var program = MCProgram(
                main: main, events: events(count: random.int(1...6), inToken: false))
            (program.shares, program.pendings, program.mode) = (shares, pendings, .threads)
            program.cancelFromThreadAt =
                random.chance(0.7) ? random.int(0...(program.events.count - 1)) : nil
            program.callsAwaitTheCancel = random.chance(0.5)
            return program
        case .deep:
            // A member waits; another, once the harness resolves it, nests combinations about 32
            // deep, at the bottom of which a step resolves the first and cancels the run.
            let waiting = id()
            let gate = id()
            let first = MCNode.ensure(.map(.op(waiting, .later, handler: true), id()), id())
            var bottom = MCNode.effect(.value(1), id(), .resolveThenCancel(waiting))
            for _ in 0..<random.int(24...40) {
                var members = [bottom]
                if random.chance(0.3) { members.append(.value(random.int(1...9))) }
                bottom = .combine(random.pick([.all, .resolved, .race, .any]), members, id: id())
                if random.chance(0.2) { bottom = .map(bottom, id()) }
            }
            let second = MCNode.then(.op(gate, .later, handler: false), id(), bottom)
            let main = MCNode.ensure(
                .combine(random.pick([.all, .resolved]), [first, second], id: id()), 0)
            return MCProgram(mode: .deep, main: main, events: [.resolve(gate, .value(1)), .cancel])
        case .realTime:
            // Dispatch timeouts of a few milliseconds around steps that outlast them.
            let gate = id()
            var chain = MCNode.op(gate, .later, handler: false)
            for _ in 0..<random.int(1...5) {
                switch random.int(0...6) {
                case 0: chain = .effect(chain, id(), .sleep(random.int(1...4)))
                case 1: chain = .effect(chain, id(), .cancelRun)
                case 2: chain = .ensure(chain, id())
                case 3: chain = .then(chain, id(), .op(id(), .later, handler: true))
                case 4:
                    chain = .timeout(
                        chain, milliseconds: random.int(1...3), code: 300 + random.int(1...9),
                        clock: false)
                // Its `body` may outlast a deadline: a cancel comes as it runs. (In one link in 14:
                // the run waits for its queues, and a timeout's timer may fire meanwhile.)
                case 5 where random.chance(0.5):
                    chain = .ensureOn(chain, id(), sleep: random.int(0...2))
                default: chain = .map(chain, id())
                }
            }
            chain = .timeout(chain, milliseconds: random.int(1...3), code: 310, clock: false)
            if random.chance(0.5) {
                chain = .timeout(chain, milliseconds: random.int(1...3), code: 320, clock: false)
            }
            return MCProgram(
                mode: .realTime, main: .ensure(chain, 0), events: [.resolve(gate, .value(1))])
        }
    }
}

/// The ids of the objects a built promise captures (not those of promises its steps make).
func mcBuiltIds(_ node: MCNode) -> Set<Int> {
    switch node {
    case .value, .error, .after, .shared, .pending: []
    case .op(let id, _, _): [id]
    case .map(let inner, let id), .effect(let inner, let id, _), .ensure(let inner, let id),
        .tap(let inner, let id), .then(let inner, let id, _), .recover(let inner, let id, _),
        .ensureOn(let inner, let id, _):
        mcBuiltIds(inner).union([id])
    case .combine(_, let members, _):
        members.reduce(into: Set<Int>()) { $0.formUnion(mcBuiltIds($1)) }
    case .timeout(let inner, _, _, _), .delay(let inner, _), .retry(let inner, _, _),
        .share(let inner, _), .ignoringCancel(let inner), .hop(let inner):
        mcBuiltIds(inner)
    }
}

/// The ids of the `ensure(on:)` steps of a chain, innermost first: not those of a combination's
/// members, of the promises steps would make, or of a shared promise (see `MCModel.ensures`).
func mcCleanupIds(_ node: MCNode) -> [Int] {
    switch node {
    case .ensureOn(let inner, let id, _): mcCleanupIds(inner) + [id]
    case .map(let inner, _), .effect(let inner, _, _), .ensure(let inner, _), .tap(let inner, _),
        .timeout(let inner, _, _, _), .delay(let inner, _), .retry(let inner, _, _),
        .then(let inner, _, _), .recover(let inner, _, _), .hop(let inner):
        mcCleanupIds(inner)
    default: []
    }
}

/// The ids of the operations and steps of the shared promises' work in `node` (with `shared`,
/// of all of `node`), those of the promises its steps make too.
func mcSharedIds(_ node: MCNode, shared: Bool = false) -> Set<Int> {
    switch node {
    case .value, .error, .after, .shared, .pending: return []
    case .op(let id, _, _): return shared ? [id] : []
    case .map(let inner, let id), .effect(let inner, let id, _), .ensure(let inner, let id),
        .tap(let inner, let id), .ensureOn(let inner, let id, _):
        return mcSharedIds(inner, shared: shared).union(shared ? [id] : [])
    case .then(let inner, let id, let next), .recover(let inner, let id, let next):
        return mcSharedIds(inner, shared: shared).union(mcSharedIds(next, shared: shared))
            .union(shared ? [id] : [])
    case .combine(_, let members, _):
        return members.reduce(into: Set<Int>()) { $0.formUnion(mcSharedIds($1, shared: shared)) }
    case .timeout(let inner, _, _, _), .delay(let inner, _), .retry(let inner, _, _),
        .ignoringCancel(let inner), .hop(let inner):
        return mcSharedIds(inner, shared: shared)
    case .share(let work, _): return mcSharedIds(work, shared: true)
    }
}

// MARK: - Checking a program

/// Waits until `condition` holds, for at most `seconds`: for releases and ends that another
/// thread may finish. A check that passes costs no wait; the bound is generous, as a loaded
/// 2-core machine (CI runs the tests, ThreadSanitizer and benchmarks side by side) can hold off
/// another thread's release for seconds.
func mcEventually(seconds: Int = 30, _ condition: () -> Bool) -> Bool {
    let deadline = DispatchTime.now() + .seconds(seconds)
    while !condition() {
        guard DispatchTime.now() < deadline else { return false }
        usleep(200)
    }
    return true
}

/// Runs `program` on the library and on the model; what they disagree on, as sentences.
func mcCheck(_ program: MCProgram) -> (problems: [String], expected: [String]?, actual: [String]) {
    var problems: [String] = []
    let h = MCHarness(pendings: program.pendings, token: program.inToken, places: program.placed)
    let builder = MCBuilder(h: h)
    for (k, share) in program.shares.enumerated() {
        h.keep(
            share: k,
            builder.build(share.work).share(cancelsWhenAbandoned: share.cancelsWhenAbandoned))
    }
    h.start(builder.build(program.main))
    var thread: DispatchSemaphore?
    for (index, event) in program.events.enumerated() {
        if program.cancelFromThreadAt == index {
            let done = DispatchSemaphore(value: 0)
            h.cancelFromAnotherThread(awaitedByCalls: program.callsAwaitTheCancel, done: done)
            thread = done
        }
        switch event {
        case .resolve(let op, let outcome): h.resolve(op, outcome)
        case .drop(let op): h.drop(op)
        case .resolvePending(let k, let outcome): h.resolvePending(k, outcome)
        case .dropPending(let k): h.dropPending(k)
        case .dropShare(let k): h.dropShare(k)
        case .advance(let milliseconds)
        where program.mode == .threads && program.cancelFromThreadAt == nil:
            // Two threads advance the clock at once, by half the time each, a microsecond at a
            // time.
            let done = DispatchSemaphore(value: 0)
            let half = milliseconds * 500
            DispatchQueue.global().async {
                for _ in 0..<half { h.clock.advance(by: .microseconds(1)) }
                done.signal()
            }
            for _ in 0..<(milliseconds * 1000 - half) { h.clock.advance(by: .microseconds(1)) }
            if done.wait(timeout: .now() + timeout) == .timedOut {
                problems.append("an advance of the clock did not return")
            }
        case .advance(let milliseconds): h.advance(milliseconds: milliseconds)
        case .drain: h.drain()
        case .cancel: h.cancel()
        case .invalidate: h.invalidate()
        }
    }
    if let thread, thread.wait(timeout: .now() + timeout) == .timedOut {
        problems.append("the cancel from another thread did not return")
    }
    if program.mode == .realTime {
        if !mcEventually(seconds: 60, { h.log.contains("ensure 0") }) {
            problems.append("the run did not end, though a timeout bounds it")
        }
        // Every `ensure(on:)` of the chain runs its `body` once: the run gets there, or is
        // cancelled before, which queues it (its doc), or a timeout's work is cancelled as it runs.
        let cleanups = mcCleanupIds(program.main).map { "ensureOn \($0)" }
        if !mcEventually(seconds: 60, { Set(cleanups).isSubset(of: h.log) }) {
            problems.append("not every body of an ensure(on:) ran: \(cleanups)")
        }
        let repeated = cleanups.filter { cleanup in h.log.filter { $0 == cleanup }.count > 1 }
        if !repeated.isEmpty { problems.append("bodies of ensure(on:) ran twice: \(repeated)") }
        h.cancelRun(by: "the harness, at the end")
    }
    let actual = h.log
    let alive = h.alive
    let timers = h.clock.timerCount
    let clockNow = h.clock.now.offset

    let model = MCModel(keyOrders: h.keyOrders)
    model.run(program)
    let expected = model.log

    // Every mode: at most one completion, and nothing of the run after a cancel returned.
    let completions = actual.filter { $0.hasPrefix("completion") }
    if completions.count > 1 { problems.append("more than one completion: \(completions)") }
    if !completions.isEmpty && h.isCancelled {
        problems.append("the run was cancelled (isCancelled), and delivered \(completions)")
    }
    // (What began after a cancel returned, as the harness saw it as it began: a step already
    // running as another thread cancels may log after the cancel's mark, and is not late.)
    if program.mode != .exact, !h.late.isEmpty {
        problems.append("the run went on after a cancel() returned: \(h.late)")
    }
    if !h.missed.isEmpty {
        problems.append("handlers added after their operations cancelled themselves: \(h.missed)")
    }
    if h.drainStalled { problems.append("a drain of the hop queue did not return") }
    // `ensure(on:)`: after `body`, the run goes "not on `queue` ... unless it was there before",
    // also when cancelled as `body` runs ("what goes on after it does not go on on `queue`").
    let strays = h.onCleanupQueue.filter { !$0.hasPrefix("ensureOn ") }
    if !strays.isEmpty { problems.append("ran on the queue of ensure(on:) after it: \(strays)") }
    if !h.stalled.isEmpty {
        problems.append("the cancel from another thread waited for \(h.stalled), called as it came")
    }
    // With a cancel from another thread, and the harness's thread running every operation and
    // step: nothing of the run begins after its end, its last `ensure` step (RunHandle: a run
    // cancelled while a combination's members, the operation its launch loop calls, or a
    // `timeout`'s work are in a step ends once they have stopped; a plain run, once its operation
    // returns or its step finishes; and the `ensure` steps run once the cancel handlers have
    // returned, a called member's too, even as the combination settles on another thread). Not a
    // shared promise's work, which runs apart: the end of a run that waited for it does not wait
    // for it to stop.
    if program.cancelFromThreadAt != nil, let end = actual.firstIndex(of: "ensure 0") {
        let shared = program.shares.reduce(mcSharedIds(program.main)) {
            $0.union(mcSharedIds($1.work, shared: true))
        }
        let after = actual[(end + 1)...].filter { entry in
            ["step", "op", "tap", "ensure", "cancel handler"].contains { entry.hasPrefix($0) }
                && !shared.contains(Int(entry.split(separator: " ").last!)!)
        }
        if !after.isEmpty { problems.append("the run went on after its end (ensure 0): \(after)") }
    }
    switch program.mode {
    case .exact:
        // Where a cancel from a step or an operation returns, against the ensures it runs, is
        // not documented (the library runs them once the step or operation returns, as the run's
        // thread is still inside it): compared without those marks.
        if MC.comparable(actual) != MC.comparable(expected) { problems.append("the logs differ") }
        if !model.cleanupsOffTheQueue.isEmpty {
            problems.append("ensure(on:) reached off the hop queue: \(model.cleanupsOffTheQueue)")
        }
        if timers != model.timers.count {
            problems.append("the clock holds \(timers) timers, the model \(model.timers.count)")
        }
        if model.top?.isOver == true && model.isQuiet {
            // The run is over and nothing waits: only what the program keeps may be alive.
            var keep = Set<Int>()
            for (k, share) in program.shares.enumerated() where !model.droppedShares.contains(k) {
                keep.formUnion(mcBuiltIds(share.work))
            }
            if !mcEventually({ Set(h.alive).isSubset(of: keep) }) {
                problems.append(
                    "after the run, still alive: \(Set(alive).subtracting(keep).sorted()) "
                        + "(objects captured by those ops and steps)")
            }
        }
    case .threads:
        if program.cancelFromThreadAt != nil, let completion = completions.first,
            !expected.contains(completion)
        {
            let modelCompletions = expected.filter { $0.hasPrefix("completion") }
            problems.append("completed with \(completion), the model with \(modelCompletions)")
        }
        if clockNow != .milliseconds(model.now) {
            problems.append("the clock is at \(clockNow), after advances of \(model.now) ms")
        }
    case .deep, .realTime:
        if actual.filter({ MC.unplaced($0) == "ensure 0" }).count != 1 {
            problems.append("ensure 0 did not run once")
        }
        // Deep programs have no hop and no other thread: everything runs on the harness's
        // thread, as the model has it, also a nested run deferred past 32 levels (README's
        // "Nesting is flat": it runs before the level below returns, on its thread).
        let placed = actual.filter { MC.unplaced($0) != $0 }
        if program.mode == .deep && !placed.isEmpty {
            problems.append("ran off the harness's thread: \(placed)")
        }
    }
    h.finish()
    if !mcEventually({ h.alive.isEmpty && h.clock.timerCount == 0 }) {
        problems.append(
            "once every run was over, still alive: \(h.alive), timers left: \(h.clock.timerCount)")
    }
    return (problems, program.mode == .exact ? expected : nil, actual)
}

// MARK: - The suites

enum MCSeeds {
    static let fixed: [UInt64] = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89]
    /// One seed per test process, printed: `MODELCHECK_SEED` runs it again.
    static let random: UInt64 = {
        if let text = getenv("MODELCHECK_SEED"), let seed = UInt64(String(cString: text)) {
            return seed
        }
        return UInt64.random(in: 1_000...999_999_999)
    }()
    static var all: [UInt64] {
        getenv("MODELCHECK_SEED") != nil ? [random] : fixed + [random]
    }
    static let trace = getenv("MODELCHECK_TRACE") != nil
    /// `MODELCHECK_SURVEY=1` prints a line for every failing program, and goes on.
    static let survey = getenv("MODELCHECK_SURVEY") != nil
    /// `MODELCHECK_SCALE=n` runs n times as many programs.
    static let scale = getenv("MODELCHECK_SCALE").flatMap { Int(String(cString: $0)) } ?? 1
    /// `MODELCHECK_PROGRAM=n` runs program `n` of each seed alone.
    static let program = getenv("MODELCHECK_PROGRAM").flatMap { Int(String(cString: $0)) }
    static let underThreadSanitizer: Bool = {
        let process = dlopen(nil, RTLD_NOW)
        return dlsym(process, "__tsan_init") != nil
    }()
}

/// Runs `count` programs of `mode` from `seed` on a queue of its own, one check at a time: a
/// check runs for seconds, and blocks its thread as it waits for its runs. On the concurrency
/// pool (a thread a core) it held up the tests that await; many at once on Dispatch's threads,
/// the timers of every test. Records the first failure, as Swift code.
func mcRun(_ mode: MCMode, seed: UInt64, count: Int) async {
    let failure = await withCheckedContinuation { (done: CheckedContinuation<String?, Never>) in
        mcQueue.async {
            done.resume(returning: mcFirstFailure(mode, seed: seed, count: count))
        }
    }
    if let failure { Issue.record(Comment(rawValue: failure)) }
}

let mcQueue = DispatchQueue(label: "model check")

/// Runs `count` programs of `mode` from `seed`; returns the first failure, as Swift code.
func mcFirstFailure(_ mode: MCMode, seed: UInt64, count: Int) -> String? {
    if seed == MCSeeds.random {
        print("ModelCheck: random seed \(seed) (MODELCHECK_SEED=\(seed) runs it again)")
    }
    for index in 0..<(count * MCSeeds.scale)
    where MCSeeds.program == nil || MCSeeds.program == index {
        var generator = MCGenerator(
            seed: seed &* 1_000_003 &+ UInt64(index) &* 7919 &+ UInt64(mode.rawValue.count))
        let program = generator.program(mode)
        let name = "modelCheck_\(mode.rawValue)_seed\(seed)_program\(index)"
        if MCSeeds.trace { print(MCSource.program(program, name: name, expected: nil)) }
        let (problems, expected, actual) = mcCheck(program)
        guard problems.isEmpty else {
            if MCSeeds.survey {
                let problems = problems.joined(separator: " | ")
                print("MC-FAIL \(mode.rawValue) seed \(seed) #\(index): \(problems)")
                print("  library: \(actual)\n  model:   \(expected ?? [])")
                print("  main: \(MCSource.node(program.main))")
                for share in program.shares { print("  share: \(MCSource.node(share.work))") }
                continue
            }
            let source = MCSource.program(program, name: name, expected: expected)
            let which = "\(mode.rawValue) program \(index) of seed \(seed)"
            return """
                The library and the model disagree (\(which)):
                \(problems.joined(separator: "\n"))
                library: \(actual)
                model:   \(expected.map { "\($0)" } ?? "(properties only)")
                \(source)
                """
        }
    }
    return nil
}

/// The plain run's model check: 5,610 programs from 11 seeds (ThreadSanitizer runs the suite
/// below instead).
@Suite("ModelCheck", .enabled(if: !MCSeeds.underThreadSanitizer)) struct ModelCheck {
    @Test(arguments: MCSeeds.all) func singleThreadedProgramsAgreeWithTheModel(seed: UInt64) async {
        await mcRun(.exact, seed: seed, count: 450)
    }

    @Test(arguments: MCSeeds.all) func programsThatCancelFromAnotherThread(seed: UInt64) async {
        await mcRun(.threads, seed: seed, count: 30)
    }

    @Test(arguments: MCSeeds.all) func programsNestedAbout32Deep(seed: UInt64) async {
        await mcRun(.deep, seed: seed, count: 10)
    }

    @Test(arguments: MCSeeds.all) func programsWithDispatchTimeoutsOfAFewMilliseconds(seed: UInt64)
        async
    {
        await mcRun(.realTime, seed: seed, count: 20)
    }
}

/// The model check that CI's ThreadSanitizer run names: 1,000 programs of every mode, from a
/// fixed seed and the random one.
@Suite("ModelCheckUnderThreadSanitizer") struct ModelCheckUnderThreadSanitizer {
    @Test(arguments: [MCSeeds.fixed[0], MCSeeds.random]) func aThousandPrograms(seed: UInt64) async
    {
        await mcRun(.exact, seed: seed &+ 1, count: 250)
        await mcRun(.threads, seed: seed &+ 1, count: 175)
        await mcRun(.deep, seed: seed &+ 1, count: 25)
        await mcRun(.realTime, seed: seed &+ 1, count: 50)
    }
}

extension ModelCheck {
    /// Seed 618's program 699, where the model was wrong: a batch's member whose step resolves the
    /// batch's signal (op 2) decides the batch inside that step; the member stops after the step,
    /// and the batch settles once it has stopped, its `ensure` step (6) before the steps after
    /// the batch (CombiningPromises.md). The model settled at once, but for a timeout.
    @Test func aMemberWhoseStepDecidesItsBatchRunsItsEnsureStepBeforeTheStepsAfterTheBatch() {
        let h = MCHarness(pendings: 0, token: false)
        do {  // so that nothing here keeps the promises, which `alive` checks are let go of
            let signal = Promise<Int, MCError>(value: 9)
                .retry(1, delay: .milliseconds(0), clock: h.clock)
                .then(
                    h.then(1) { h.op(2, .later, handler: true).share(cancelsWhenAbandoned: false) })
            let members = [
                Promise<Int, MCError>(value: 9).delay(.milliseconds(4), clock: h.clock)
                    .ignoringCancel(),
                h.op(3, .twice(.value(6), .error(5))).on(h.queue),
                h.op(4, .now(.value(4))).map(h.effect(5, .resolve(2, .value(1))))
                    .ensure(h.ensure(6)),
            ]
            h.start(
                when(
                    resolved: members, concurrently: 2,
                    until: signal.asVoid().recover { _ in }
                )
                .map(MC.fold(unfinished:)).setFailureType(to: MCError.self).tap(h.tap(8))
                .ensure(h.ensure(0)))
        }
        h.drain()
        h.advance(milliseconds: 2)
        h.drain()
        h.drain()
        h.resolve(2, .error(4))
        h.resolve(2, .value(7))
        h.cancel()
        let expected = [
            "step 1", "op 2", "op 3", "op 4", "step 5", "ensure 6", "tap 8", "ensure 0",
            "completion value 207761", "drained", "drained", "drained", "cancelled by harness",
        ]
        #expect(MC.comparable(h.log) == expected)
        h.finish()
        #expect(h.alive == [] && h.clock.timerCount == 0)
    }

    /// Seed 38's program 3422, where the model was wrong: a member that ignores cancel, started as
    /// the combination closes (its first member cancelled itself), cancels the run from its
    /// operation; the run, whose combination is stopping, ends once the close is done (`Join`'s
    /// `stopping`), after that member's race has gone on (op 3) and cancelled its loser.
    @Test func aCancelFromAMemberStartedAsTheCombinationClosesEndsTheRunAfterTheClose() {
        let h = MCHarness(pendings: 0, token: false)
        do {  // so that nothing here keeps the promises, which `alive` checks are let go of
            let race = race(fulfilled: [
                h.op(2, .cancelRun, handler: true), h.op(3, .now(.value(7))),
            ])
            .mapError(MC.allFailed)
            .timeout(.milliseconds(3_600_000), orFailWith: MCError(code: 203))
            let ignoring = when(fulfilled: h.keyed(5, [race])).map(MC.fold(keyed:)).ignoringCancel()
            h.start(
                when(fulfilled: [h.op(1, .later, handler: true), ignoring], concurrently: 1)
                    .map(MC.fold).ensure(h.ensure(0)))
        }
        h.resolve(2, .value(9))
        h.drop(1)
        h.resolve(2, .value(2))
        h.drop(1)
        h.resolve(2, .value(5))
        h.cancel()
        let expected = [
            "op 1", "cancel handler 1", "op 2", "op 3", "cancel handler 2", "ensure 0",
            "dropped 1", "dropped 1", "cancelled by harness",
        ]
        #expect(MC.comparable(h.log) == expected)
        h.finish()
        #expect(h.alive == [] && h.clock.timerCount == 0)
    }

    /// Seed 738308893's program 2633 (at a scale of 20), where the model was wrong: dropping an
    /// operation's resolvers ends the shared work (op 4), so the batch's first member drops out,
    /// and the next joins the shared promise, whose work runs again and keeps a new resolver,
    /// which the same drop lets go of too, as the harness lets go of every resolver it keeps, one
    /// by one. The model forgot that call without ending it. Both members drop out, the third
    /// succeeds at once, and the batch, all finished, succeeds before its signal has settled.
    @Test func aDropThatRestartsSharedWorkDropsTheResolverOfTheNewRunToo() {
        let h = MCHarness(pendings: 1, token: false)
        do {  // so that nothing here keeps the promises, which `alive` checks are let go of
            h.keep(share: 0, h.op(4, .later).tap(h.tap(5)).share(cancelsWhenAbandoned: false))
            let third = Promise<Int, MCError>(value: 3)
                .recover(h.recover(6) { h.op(7, .twice(.error(1), .value(4))) })
                .timeout(.milliseconds(6), orFailWith: MCError(code: 105), clock: h.clock)
            let signal = h.pending(0)
                .then(h.then(1) { h.op(2, .now(.value(4))).ensure(h.ensure(3)) })
            h.start(
                when(
                    resolved: [h.shared(0), h.shared(0), third], concurrently: 1,
                    until: signal.asVoid().recover { _ in }
                )
                .map(MC.fold(unfinished:)).setFailureType(to: MCError.self).ensure(h.ensure(0)))
        }
        h.drop(4)
        h.resolve(4, .error(5))
        h.advance(milliseconds: 5)
        h.resolvePending(0, .value(9))
        h.cancel()
        let unfinished = MC.unfinished
        let expected = [
            "op 4", "op 4", "ensure 0",
            "completion value \(MC.fold([unfinished, unfinished, 3]))", "dropped 4",
            "cancelled by harness",
        ]
        #expect(MC.comparable(h.log) == expected)
        h.finish()
        #expect(h.alive == [] && h.clock.timerCount == 0)
    }

    /// Seed 789047407's program 2689 (at a scale of 20), where the engine was wrong: a member of
    /// stacked shared promises ends by cancellation, which ends its `when` so, as the outer
    /// shared promise settles inside the inner one's settle, where a run started waits for the
    /// level around (README's "Nesting is flat"). The member never started that ignores cancel
    /// then waited, and the run ended first (`ensure 0`), where `when(fulfilled:)` says such
    /// members start as it ends, and what their work does before it first waits comes first.
    @Test(arguments: [true, false])
    func aMemberThatIgnoresCancelStartsBeforeTheRunEndsInsideStackedShares(throughAWhen: Bool) {
        let h = MCHarness(pendings: 0, token: false)
        do {  // so that nothing here keeps the promises, which `alive` checks are let go of
            let inner = h.op(2, .later).share(cancelsWhenAbandoned: true)
            let stacked =
                throughAWhen
                ? when(fulfilled: [inner]).map(MC.fold) : inner.map(h.map(3))
            let members = [
                Promise<Int, MCError>(value: 1).tap(h.tap(1)),
                stacked.share(cancelsWhenAbandoned: true),
                h.op(5, .later).ignoringCancel(),
            ]
            h.start(when(fulfilled: members, concurrently: 1).map(MC.fold).ensure(h.ensure(0)))
        }
        h.drop(2)
        h.cancel()
        let expected = [
            "tap 1", "op 2", "op 5", "ensure 0", "dropped 2", "cancelled by harness",
        ]
        #expect(MC.comparable(h.log) == expected)
        h.finish()
        #expect(h.alive == [] && h.clock.timerCount == 0)
    }

    /// The same order for a combination whose run is cancelled (`Join.runCancelled`), found by
    /// a review of the fix above (review62): the third member, a `when` that has not started its
    /// member that ignores cancel, is cancelled as the outer `when` ends by cancellation inside
    /// the inner shared promise's settle; it started that member (`op 5`) in a run that waited
    /// for the level around, while its run's end (`ensure 9`) and the outer one's (`ensure 0`)
    /// came at once. Now a cancelled run's end waits behind it, as in the order documented
    /// without the stacked shares (`ignoringCancel()`, the header of Join.swift: the members
    /// that ignore cancel start, then the run ends).
    @Test(arguments: [false, true])
    func aCancelledCombinationStartsItsMemberThatIgnoresCancelBeforeItEnds(stacked: Bool) {
        let h = MCHarness(pendings: 0, token: false)
        do {  // so that nothing here keeps the promises, which `alive` checks are let go of
            let inner = h.op(2, .later).share(cancelsWhenAbandoned: true)
            let second = stacked ? inner.map(h.map(3)).share(cancelsWhenAbandoned: true) : inner
            let third = when(
                fulfilled: [h.op(6, .later), h.op(5, .later).ignoringCancel()], concurrently: 1
            )
            .map(MC.fold).ensure(h.ensure(9))
            let members = [Promise<Int, MCError>(value: 1).tap(h.tap(1)), second, third]
            h.start(when(fulfilled: members).map(MC.fold).ensure(h.ensure(0)))
        }
        h.drop(2)
        h.cancel()
        let expected = [
            "tap 1", "op 2", "op 6", "op 5", "ensure 9", "ensure 0", "dropped 2",
            "cancelled by harness",
        ]
        #expect(MC.comparable(h.log) == expected)
        h.finish()
        #expect(h.alive == [] && h.clock.timerCount == 0)
    }
}

extension ModelCheck {
    /// Found by the model checker once it checked where steps run (exact program 2844 of seed 1,
    /// and others): a combination's member that is an operation alone, resolved from another
    /// thread while the operation is still running, decides the combination on that thread, as
    /// Resolver's doc, CombiningPromises.md and the header of Combining.swift now say ("the
    /// combination hears of its outcome at once, on the resolving thread, even before the
    /// operation returns"; "cancels the other members (their handlers and `ensure` steps) ... on
    /// that thread"): the other members' cancel handlers and `ensure` steps run there, before the
    /// operation returns; the steps after the combination go on on the thread that launched it,
    /// as after any resolver called before its operation returned.
    @Test func aMemberResolvedFromAnotherThreadInItsCallCancelsTheOthersOnTheResolvingThread() {
        let h = MCHarness(places: true)
        h.start(
            when(fulfilled: [
                h.op(1, .later, handler: true).ensure(h.ensure(2)),
                h.op(3, .nowFromThread(.error(4))),
            ])
            .map(MC.fold).ensure(h.ensure(0)))
        #expect(
            h.log == [
                "op 1", "op 3", "cancel handler 1 @elsewhere", "ensure 2 @elsewhere", "ensure 0",
                "completion error 4",
            ])
        h.cancel()
        h.finish()
        #expect(h.alive == [] && h.clock.timerCount == 0)
    }

    /// The same, for a member that ignores cancel, started as the race ends (`when`'s doc: such
    /// members "start as it ends"; the header of Combining.swift: the combination "starts those
    /// that ignore cancel on that thread"): its operation runs on the resolving thread of the
    /// member that won, while that member's operation has not returned; the steps after the race
    /// go on on the launching thread.
    @Test func aMemberResolvedFromAnotherThreadInItsCallStartsTheIgnoringOnesOnTheResolvingThread()
    {
        let h = MCHarness(places: true)
        h.start(
            race([h.op(1, .nowFromThread(.value(7))), h.op(2, .later).ignoringCancel()])
                .ensure(h.ensure(0)))
        #expect(h.log == ["op 1", "op 2 @elsewhere", "ensure 0", "completion value 7"])
        h.resolve(2, .value(1))
        h.cancel()
        h.finish()
        #expect(h.alive == [] && h.clock.timerCount == 0)
    }
}

extension ModelCheck {
    /// A bare member that a `when(fulfilled:concurrently:)` calls after its launch returned (as
    /// the member before it ended, on the harness's thread), resolved from another thread in its
    /// call: it settles the combination there (the other member's handler and `ensure` step run
    /// there), and the steps after go on on the thread that called it, once its operation returns
    /// (the header of Combining.swift, CombiningPromises.md), as a run's steps after an operation
    /// resolved so do (Resolver).
    @Test func aBareMemberCalledAfterTheLaunchAndResolvedFromAnotherThreadLeavesTheRunToItsCaller()
    {
        let h = MCHarness(places: true)
        h.start(
            when(
                fulfilled: [
                    h.op(1, .later), h.op(2, .later, handler: true).ensure(h.ensure(3)),
                    h.op(4, .nowFromThread(.error(5))),
                ], concurrently: 2
            )
            .map(MC.fold).ensure(h.ensure(0)))
        h.resolve(1, .value(6))
        #expect(
            h.log == [
                "op 1", "op 2", "op 4", "cancel handler 2 @elsewhere", "ensure 3 @elsewhere",
                "ensure 0", "completion error 5",
            ])
        h.cancel()
        h.finish()
        #expect(h.alive == [] && h.clock.timerCount == 0)
    }
}
