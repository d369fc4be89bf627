// Engine/Run.swift: a run, the one execution of a chain that a terminal starts, and the handle
// that keeps it. Builds on Chain.swift (the stages, the slot, the plan) and Lock.swift. A run's
// `state` names where it is, and changes under the lock, one event at a time: starting, calling
// an operation, the operation returning, its resolver reporting, a hop, cancelling, ending.
// Each event is a method below that changes the state in one lock section and returns what to
// do once the lock is let go of.

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

/// A run of a promise, returned by every terminal, to cancel it.
///
/// After ``cancel()`` no completion is delivered, the operation waiting gets its
/// ``Resolver/onCancel(_:)`` handlers called once, no later step starts, and the
/// ``Promise/ensure(_:)`` steps still ahead run once those handlers have returned. Cancelling is
/// idempotent and safe from any thread; dropping a handle does not cancel. A step that cancels its
/// own run stops it before the next step; from another thread, the run stops at its next operation,
/// hop, entered promise or end (steps take no lock).
///
/// Keep the handle where the run's owner can reach it, such as a property of a screen, or put it in
/// a ``RunBag``: `let lookup = lookUp(id: id).run(some: show, none: report)`. An awaited promise
/// needs no handle: cancelling the task cancels the run. See <doc:Cancellation>.
nonisolated public final class RunHandle: @unchecked Sendable {
    // No property here or in `Join` needs an exclusivity check: one thread at a time uses each (as
    // said below), and the checks cost a quarter of the time of a combination's members.
    @exclusivity(unchecked) private var slot: Slot
    @exclusivity(unchecked) private var slotSize: Int
    @exclusivity(unchecked) private var slotAlignment: Int
    /// The type of the run's outcome, to destroy one that arrives after the run was cancelled.
    @exclusivity(unchecked) private var output: any Outcome.Type
    /// Which member of a combination it runs (see `Join`).
    @exclusivity(unchecked) @usableFromInline var member = 0
    /// The run a user started, for a run Future started inside it (a combination's member, a
    /// shared or ignoring run): its tokens' ties are that run's.
    private let user: RunHandle?

    // Owned by the one thread that drives the run; ownership passes under `lock`.
    @exclusivity(unchecked) private var plan = Plan()
    @exclusivity(unchecked) private var finish: ((Slot?) -> Void)?
    /// Set when a step cancels its own run, so that the very next step does not start. Not part
    /// of `state`: the driving thread, the one that sets it, reads it after every step without
    /// taking the lock.
    @exclusivity(unchecked) private var cancelledByStep = false

    // Guarded by `lock`.
    private let lock = Lock(room: 16)
    @exclusivity(unchecked) private var state = State.idle
    /// How many operations the run has called: each call's number is its count.
    @exclusivity(unchecked) private var calls = 0
    /// The number of the last call whose resolver reported an outcome.
    @exclusivity(unchecked) private var lastResolvedCall = 0
    /// The first call of the chain now running: the handle may have run others before.
    @exclusivity(unchecked) private var firstCallOfChain = 1
    @exclusivity(unchecked) private var cancelHandlers: [@Sendable (RunHandle) -> Void] = []
    /// The generation of each token the steps of a user's run tied to, as of the first tie.
    @exclusivity(unchecked) private var ties: [Tie] = []
    /// What the run waits for while it waits for a queue (apart from `state`, so that the state
    /// stays a plain value, copied at no cost).
    @exclusivity(unchecked) private var queueWait: QueueWait?

    /// Where a run is. Cancelling moves a run that has not ended to one of the `cancelled`
    /// states, which end in `.cancelled` once its `ensure` steps have run.
    enum State: CustomDebugStringConvertible {
        /// Made, not started yet.
        case idle
        /// `thread` takes the steps, one after another.
        case driving(thread: pthread_t)
        /// The driving thread, `thread`, is inside an operation that has not resolved yet.
        case calling(thread: pthread_t)
        /// The operation returned before its resolver reported: the resolver carries the run on.
        case awaitingResolver
        /// The run waits for a queue to carry it on (see `queueWait`).
        case awaitingQueue
        /// Cancelled while a thread drives it, which halts it at its next check; while
        /// `handlersRunning`, the canceller still calls the cancel handlers.
        case cancelledWhileDriving(handlersRunning: Bool)
        /// Cancelled while no thread drives it (or its driver stopped to let the canceller end
        /// it): the canceller ends it once the handlers have returned.
        case cancelledWhileWaiting
        /// Ended with an outcome. `cancelledSince`: a cancel came after, from a combination that
        /// had claimed the handle for its next member, which then never starts.
        case ended(cancelledSince: Bool)
        /// Ended by cancellation, its `ensure` steps run.
        case cancelled

        var isCancelled: Bool {
            switch self {
            case .cancelledWhileDriving, .cancelledWhileWaiting, .cancelled: true
            case .idle, .driving, .calling, .awaitingResolver, .awaitingQueue, .ended: false
            }
        }

        var hasEnded: Bool {
            switch self {
            case .ended, .cancelled: true
            default: false
            }
        }

        var debugDescription: String {
            switch self {
            case .idle: "idle"
            case .driving: "driving"
            case .calling: "calling an operation"
            case .awaitingResolver: "awaiting a resolver"
            case .awaitingQueue: "awaiting a queue"
            case .cancelledWhileDriving(let running):
                "cancelled while driving\(running ? ", calling cancel handlers" : "")"
            case .cancelledWhileWaiting: "cancelled while waiting, calling cancel handlers"
            case .ended(let cancelledSince): cancelledSince ? "ended, then cancelled" : "ended"
            case .cancelled: "cancelled"
            }
        }
    }

    /// What a run that hops waits for (a queue, after `timer` fires if there is a deadline), and
    /// the type of the step's output that waits in the slot meanwhile.
    struct QueueWait {
        let timer: DispatchSourceTimer?
        let held: any Outcome.Type
    }

    private struct Tie {
        weak var token: InvalidationToken?
        let identity: ObjectIdentifier
        let generation: Int
    }

    @usableFromInline init(last: Stage, inside outer: RunHandle? = nil) {
        user = outer.map { $0.user ?? $0 }
        // The slot starts in the 16 bytes after the mutex (see `Lock`): most outcomes fit there,
        // and then a run costs one allocation less. `start` grows it for larger ones.
        slotSize = 16
        slotAlignment = 8
        output = last.output
        slot = Slot(memory: lock.room)
    }

    deinit {
        if slot.memory != lock.room { slot.memory.deallocate() }
        lock.free()
    }
}

// MARK: Starting and driving

nonisolated extension RunHandle {
    /// Drives a run of the chain `last`; `finish` gets the slot with the outcome, or `nil` if the
    /// run ended by cancellation (after its `ensure` steps), exactly once. A handle whose run
    /// ended with an outcome can run another chain so: how a combination runs the members that
    /// end at once, one after another, on one handle and in the same memory.
    /// `immediately` runs it on this stack even deep in nested runs (see `proceed`).
    @usableFromInline func start(
        _ last: consuming Stage, immediately: Bool = false, _ finish: @escaping (Slot?) -> Void
    ) {
        let cancelled = locked { () -> Bool in
            firstCallOfChain = calls + 1
            switch state {
            case .ended(cancelledSince: true):
                state = .cancelledWhileDriving(handlersRunning: false)
            case .idle, .ended(cancelledSince: false):
                state = .driving(thread: pthread_self())
            default:
                break  // cancelled before the start, e.g. an awaiting task
            }
            return state.isCancelled
        }
        output = last.output
        self.finish = finish
        _ = fitSlot(to: last)
        plan.push(consume last, isRoot: true)  // the plan's alone, to let go of where the run ends
        let resumption = cancelled ? Resumption.halt : .drive
        immediately ? resume(resumption) : proceed(resumption)
    }

    /// The loop that runs a chain: one step after another, entering the chains that steps
    /// return, until the end, an operation that has not resolved yet, a hop, or cancellation.
    private func drive() {
        // Locals, not properties, in the loop: a property is read from memory at every use.
        var plan = Plan()
        swap(&plan, &self.plan)
        var slot = self.slot
        while let stage = plan.pop() {
            var next = stage._withUnsafeGuaranteedRef { $0.step($0, slot, self) }
            if case .called = next { next = operationReturned(&plan) }
            switch next {
            case .proceed:
                guard cancelledByStep else { continue }
                stage._withUnsafeGuaranteedRef { $0.output.discard(from: slot) }
                return halt(plan)
            case .enter(let inner):
                plan.push(inner)
                slot = fitSlot(to: inner)
                if read({ $0.isCancelled }) { return halt(plan) }
            case .called, .wait: return
            case .halt: return halt(plan)
            case .hop(let queue, let deadline):
                // A move, not a copy: a thread that kept the plan could release the chain's
                // steps after the queue's thread has finished the run.
                swap(&plan, &self.plan)
                return awaitQueue(queue, at: deadline, holding: stage.takeUnretainedValue().output)
            }
        }
        swap(&plan, &self.plan)  // a move, so that its memory stays unshared for reuse
        complete()
    }

    /// Does `resumption` now if the thread's stack has room for one more run, else later.
    private func proceed(_ resumption: Resumption) { Nesting.resume(self, resumption) }

    func resume(_ resumption: Resumption) {
        switch resumption {
        case .drive: drive()
        case .halt: halt(plan)
        case .callCancelHandlers(let handlers): callCancelHandlers(handlers)
        }
    }

    /// What a run does next, once there is room on the stack.
    enum Resumption {
        case drive, halt
        case callCancelHandlers([@Sendable (RunHandle) -> Void])
    }

    /// The slot, grown first if `chain` has larger outcomes (the slot is empty as a chain starts).
    private func fitSlot(to chain: Stage) -> Slot {
        guard chain.slotSize > slotSize || chain.slotAlignment > slotAlignment else { return slot }
        if slot.memory != lock.room { slot.memory.deallocate() }
        slotSize = max(chain.slotSize, slotSize)
        slotAlignment = max(chain.slotAlignment, slotAlignment)
        slot = Slot(memory: .allocate(byteCount: slotSize, alignment: slotAlignment))
        return slot
    }
}

// MARK: Calling an operation, and its resolver

nonisolated extension RunHandle {
    /// Calls the operation of `source` with a fresh resolver.
    @inlinable func perform<Value, Failure>(_ source: Source<Value, Failure>) -> Next {
        guard let call = beginCall() else {
            source.ignored.map(startIgnored)
            return .halt
        }
        #if DEBUG
            let (file, line) = source.origin
        #else
            let (file, line) = (StaticString(""), UInt(0))
        #endif
        source.operation(Resolver(run: self, call: call, file: file, line: line))
        return .called
    }

    /// Numbers a new call of an operation, unless the run is cancelled.
    @usableFromInline func beginCall() -> Int? {
        locked { () -> Int? in
            guard case .driving(let thread) = state else { return nil }
            state = .calling(thread: thread)
            calls += 1
            return calls
        }
    }

    /// After an operation returns: go on if it resolved meanwhile, else wait for its resolver.
    private func operationReturned(_ plan: inout Plan) -> Next {
        swap(&plan, &self.plan)  // handed over before the lock may hand the run to a resolver
        let next = locked { () -> Next in
            switch state {
            case .calling:
                state = .awaitingResolver
                return .wait
            case .driving: return .proceed
            default:
                // Cancelled: an outcome that came first is in the slot, for the loop to drop.
                return lastResolvedCall == calls ? .proceed : .halt
            }
        }
        if case .wait = next { return next }
        swap(&plan, &self.plan)  // still ours: take it back
        return next
    }

    /// Takes the outcome of call `call`, which `write` puts in the slot, if it still counts.
    @usableFromInline func resolve(_ call: Int, with write: (Slot) -> Void) {
        var unneeded: [@Sendable (RunHandle) -> Void] = []
        let resume = locked { () -> Bool in
            guard isPending(call), !state.isCancelled else { return false }
            write(slot)
            lastResolvedCall = call
            unneeded = cancelHandlers
            cancelHandlers = []
            switch state {
            case .calling(let thread):
                state = .driving(thread: thread)
                return false
            default:
                state = .driving(thread: pthread_self())
                return true
            }
        }
        unneeded.removeAll()  // outside the lock: releasing a handler may run any deinit
        if resume { proceed(.drive) }
    }

    /// Whether call `call` is the latest and has not resolved (under the lock).
    private func isPending(_ call: Int) -> Bool { call == calls && call != lastResolvedCall }

    func onCancel(_ call: Int, _ handler: @escaping @Sendable (RunHandle) -> Void) {
        let callNow = locked { () -> Bool in
            guard isPending(call), !state.isCancelled else { return isPending(call) }
            cancelHandlers.append(handler)
            return false
        }
        if callNow { handler(self) }
    }

    /// Whether the chain that call `call` belongs to was cancelled: a call of a chain this handle
    /// ran before ended with an outcome, so it was not.
    func isCancelled(since call: Int) -> Bool {
        locked { state.isCancelled && call >= firstCallOfChain }
    }

    /// Call `call` ended its run as cancelled.
    func cancel(_ call: Int) { _ = cancel(call: call) }

    /// A call's resolver went away: if it never resolved, nothing ever will.
    func resolverReleased(_ call: Int, _ promise: @autoclosure () -> String) {
        guard cancel(call: call) else { return }
        #if DEBUG
            PromiseDiagnostics.handler(
                "an operation of \(promise()) released its resolver without resolving it. "
                    + "Its run can never finish, so it was cancelled.")
        #endif
    }
}

// MARK: Hopping to a queue

nonisolated extension RunHandle {
    /// Parks the run, the step's output in the slot and its plan in `plan`, until `queue` carries
    /// it on, at `deadline` if given. A timer is a Dispatch source, not a delayed work item: when
    /// cancelled, a source lets go of its handler (and so of the run) at once, where a cancelled
    /// work item stays in Dispatch's timer list, holding the run, until its deadline.
    private func awaitQueue(
        _ queue: DispatchQueue, at deadline: DispatchTime?, holding held: any Outcome.Type
    ) {
        let timer = deadline.map { _ in DispatchSource.makeTimerSource(queue: queue) }
        // Active before anyone can cancel or drop it (Dispatch traps on an inactive source's
        // release); with no deadline yet, it does not fire.
        timer?.activate()
        let parked = locked { () -> Bool in
            guard case .driving = state else { return false }
            state = .awaitingQueue
            queueWait = QueueWait(timer: timer, held: held)
            return true
        }
        guard parked else {
            held.discard(from: slot)
            return halt(plan)
        }
        guard let timer, let deadline else { return queue.async { [self] in queueArrived() } }
        timer.setEventHandler { [self] in queueArrived() }
        timer.schedule(deadline: deadline)
    }

    /// The queue carries the run on, unless it was cancelled meanwhile.
    private func queueArrived() {
        let wait = locked { () -> QueueWait? in
            guard case .awaitingQueue = state else { return nil }
            state = .driving(thread: pthread_self())
            return queueWait.take()
        }
        guard let wait else { return }
        // A fired timer's source keeps its handler, and so the run, until it is cancelled.
        wait.timer?.cancel()
        proceed(.drive)
    }
}

// MARK: Cancelling and ending

nonisolated extension RunHandle {
    /// Cancels the run, if it is still going (and call `call`, if given, is still pending): calls
    /// the handlers, then halts the run if it waits, or once the thread driving it stops.
    func cancel(call: Int?) -> Bool {
        let handlers = locked { () -> [@Sendable (RunHandle) -> Void]? in
            if call.map(isPending) == false { return nil }
            switch state {
            case .idle, .calling:
                state = .cancelledWhileDriving(handlersRunning: true)
            case .driving(let thread):
                if call == nil, pthread_equal(thread, pthread_self()) != 0 {
                    cancelledByStep = true
                }
                state = .cancelledWhileDriving(handlersRunning: true)
            case .awaitingResolver, .awaitingQueue:
                state = .cancelledWhileWaiting
            case .ended(cancelledSince: false):
                if call == nil { state = .ended(cancelledSince: true) }
                return nil
            case .ended, .cancelledWhileDriving, .cancelledWhileWaiting, .cancelled:
                return nil
            }
            defer { cancelHandlers = [] }
            return cancelHandlers
        }
        guard let handlers else { return false }
        proceed(.callCancelHandlers(handlers))
        return true
    }

    /// Calls a cancelled run's handlers, then ends the run if it waits.
    private func callCancelHandlers(_ handlers: [@Sendable (RunHandle) -> Void]) {
        for handler in handlers { handler(self) }
        let (takesOver, wait) = locked { () -> (Bool, QueueWait?) in
            guard case .cancelledWhileWaiting = state else {
                state = .cancelledWhileDriving(handlersRunning: false)  // its driver ends it
                return (false, nil)
            }
            state = .cancelled
            return (true, queueWait.take())
        }
        if takesOver { endCancelled(plan, leaving: wait) }
    }

    /// The driving thread stops a cancelled run: it ends it, unless the canceller still calls
    /// the handlers, in which case it leaves it for the canceller to end.
    private func halt(_ rest: Plan) {
        self.plan = rest
        let ends = locked { () -> Bool in
            if case .cancelledWhileDriving(handlersRunning: true) = state {
                state = .cancelledWhileWaiting
                return false
            }
            state = .cancelled
            return true
        }
        if ends { endCancelled(rest, leaving: nil) }
    }

    /// Ends a cancelled run: lets go of what waited for a queue, then runs the `ensure` steps
    /// still ahead, innermost chain first.
    private func endCancelled(_ rest: Plan, leaving wait: QueueWait?) {
        if let wait {
            wait.timer?.cancel()
            wait.held.discard(from: slot)
        }
        let finish = self.finish
        plan = Plan()
        self.finish = nil
        for stage in rest.stages.reversed() {
            let stage = stage.takeUnretainedValue()
            if stage.isEnsure { Node<@Sendable () -> Void>.payload(of: stage)() }
            stage.ignoring.map(startIgnored)
        }
        finish?(nil)
    }

    /// The chain's last step has run: the outcome goes to `finish`, unless the run was cancelled.
    private func complete() {
        let deliver = locked { () -> Bool in
            guard case .driving = state else { return false }
            state = .ended(cancelledSince: false)
            return true
        }
        guard deliver else {
            output.discard(from: slot)  // the outcome nobody may have any more
            return halt(Plan())
        }
        let finish = self.finish.take()
        plan.end()
        finish?(slot)
    }

    /// Starts the work of an `ignoringCancel()` promise that this run reached cancelled (or
    /// that a settled combination never started): cancelling does not reach it, and nobody
    /// waits for its outcome.
    @usableFromInline func startIgnored(_ work: Stage) {
        RunHandle(last: work, inside: self).start(work) { $0.map(work.output.discard) }
    }

    /// Reads the state, under the lock.
    func read<T>(_ property: (State) -> T) -> T { locked { property(state) } }
}

// MARK: Ties to invalidation tokens

nonisolated extension RunHandle {
    /// The generation of `token` for the user's run, which ties to a token once, however often
    /// its retries run a tied step.
    func generation(of token: InvalidationToken) -> Int {
        let user = user ?? self
        let identity = ObjectIdentifier(token)
        let current = token.current  // the token's lock, not taken inside the run's
        // One lock, so that steps tying at once on two threads agree on the first generation. A
        // tie's weak reference is read only when its identity is `token`'s, which the caller
        // holds: so it is never a token's last reference, let go of inside the lock.
        return user.locked {
            let tied = user.ties.first { $0.identity == identity && $0.token === token }
            if let tied { return tied.generation }
            user.ties.append(Tie(token: token, identity: identity, generation: current))
            return current
        }
    }

    private func locked<T>(_ body: () -> T) -> T { lock.withLock(body) }
}
