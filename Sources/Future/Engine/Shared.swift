// Engine/Shared.swift: what `share()` and `pending()` keep, one run of the work for many runs.
// Builds on Run.swift: the work runs in a run of its own (inside the run that started it, for
// its ties), and each run of the shared promise waits for it as an operation waits for its
// resolver.

nonisolated extension Engine {
    /// The one run of a shared promise's work, the runs waiting for it, and its outcome once it
    /// has one.
    final class Shared<Value: Sendable, Failure: Swift.Error>: @unchecked Sendable {
        private let lock = Lock()
        // Guarded by `lock`.
        private var state: State
        /// Keyed by number: a run that leaves is removed at once however many wait.
        private var waiting: [Int: Resolver<Value, Failure>] = [:]
        private var lastNumber = 0
        /// The resolver that `pending()` hands out, as its operation gets it.
        private var outside: Resolver<Value, Failure>?
        /// Whether the run of the work is cancelled when every waiting run has left.
        private let cancelsWhenAbandoned: Bool

        /// Where the shared work is. A run of the shared promise is numbered as it comes, and
        /// the run of the work is known by the number of the run that started it.
        private enum State {
            /// No run of the work is under way: the next run of the shared promise starts one.
            case idle(Promise<Value, Failure>)
            /// The run of the work that run `starter` started is under way, on `run`.
            case running(Promise<Value, Failure>, starter: Int, run: Run)
            /// `pending()`'s, which has no work: its resolver brings the outcome.
            case awaitingResolver
            /// The work ended with `outcome`: every run gets it at once.
            case settled(Swift.Result<Value, Failure>)
            /// `pending()`'s resolver went away unused: every run ends by cancellation.
            case abandoned
        }

        /// Keeps `work`, or for `pending()` (`nil`), waits for its resolver.
        init(_ work: Promise<Value, Failure>?, cancelsWhenAbandoned: Bool) {
            state = work.map(State.idle) ?? .awaitingResolver
            self.cancelsWhenAbandoned = cancelsWhenAbandoned
        }

        deinit { lock.free() }

        /// What `pending()` keeps, and the resolver it hands out: the resolver of an operation
        /// that a run of its own calls at once, so that it reports as any resolver does, but only
        /// while a run waits for it: a promise made and never run (or no longer) has lost nothing.
        static func pending(file: StaticString, line: UInt) -> (Shared, Resolver<Value, Failure>) {
            let shared = Shared(nil, cancelsWhenAbandoned: false)
            let operation = Promise(file: file, line: line) { shared.outside = $0 }
            Run.make(for: nil, completing: Callback<Value, Failure>.self).start(
                operation, Callback { _, outcome in shared.settle(outcome, starter: 0) },
                immediately: true)
            let resolver = shared.outside.take()!
            #if DEBUG
                resolver.reportsRelease = { shared.lock.withLock { !shared.waiting.isEmpty } }
            #endif
            return (shared, resolver)
        }

        /// The operation of every run of the shared promise.
        func join(_ resolver: Resolver<Value, Failure>) {
            // The run's handle is recorded before it starts, so that a joiner leaving meanwhile
            // cancels it, and the work does not begin.
            typealias Start = (Promise<Value, Failure>, Run)
            let (number, known, start) = lock.withLock {
                () -> (Int, Swift.Result<Value, Failure>??, Start?) in
                lastNumber += 1
                switch state {
                case .settled(let outcome): return (lastNumber, outcome, nil)
                case .abandoned: return (lastNumber, .some(nil), nil)
                case .running, .awaitingResolver:
                    waiting[lastNumber] = resolver
                    return (lastNumber, nil, nil)
                case .idle(let work):
                    waiting[lastNumber] = resolver
                    let run = Run.make(
                        for: work.chain, completing: Callback<Value, Failure>.self,
                        inside: resolver.run)
                    state = .running(work, starter: lastNumber, run: run)
                    return (lastNumber, nil, (work, run))
                }
            }
            if let known { return known.map { resolver($0) } ?? resolver.cancel() }
            // The run keeps its cancel handler, and so the shared state, until the call resolves
            // or is cancelled: a run calls an operation and lets go of it, and the caller may
            // have dropped the shared promise (`work.share().run(...)`, a cache that lets go).
            resolver.onCancel { [self] _ in leave(number) }
            guard let (work, run) = start else { return }
            let settle = { [weak self] (_: Run, outcome: sending Swift.Result<Value, Failure>?) in
                guard let self else { return }
                self.settle(outcome, starter: number)
            }
            run.start(work, Callback(settle))
        }

        /// A waiting run was cancelled; when none is left, the work is cancelled, if it is to be.
        private func leave(_ number: Int) {
            // The resolver that left is let go of outside the lock, as it may be its run's last.
            let (gone, abandoned) = lock.withLock { () -> (Resolver<Value, Failure>?, Run?) in
                let left = waiting.removeValue(forKey: number)
                guard waiting.isEmpty, cancelsWhenAbandoned,
                    case .running(let work, _, let run) = state
                else { return (left, nil) }
                state = .idle(work)
                return (left, run)
            }
            withExtendedLifetime(gone) {}  // see `Lock`
            _ = abandoned?.cancel(call: nil)
        }

        /// The run of the work that run `starter` started (or, for `pending()`, its resolver)
        /// ended, with `outcome` or (`nil`) by cancellation: the waiting runs go on in the order
        /// they came. The work, cancelled, stays to be run again.
        func settle(_ outcome: sending Swift.Result<Value, Failure>?, starter: Int) {
            // The work goes outside the lock: what its steps captured may run the shared promise.
            let (waiting, before) = lock.withLock { () -> ([Resolver<Value, Failure>], State) in
                let before = state
                switch (state, outcome) {
                case (.running(_, starter, _), let outcome?), (.awaitingResolver, let outcome?):
                    state = .settled(outcome)
                case (.running(let work, starter, _), nil):
                    state = .idle(work)
                case (.awaitingResolver, nil):
                    state = .abandoned
                default:
                    return ([], before)  // a run of the work that was cancelled when abandoned
                }
                defer { self.waiting = [:] }
                return (self.waiting.sorted { $0.key < $1.key }.map(\.value), before)
            }
            withExtendedLifetime(before) {}  // see `Lock`
            Nesting.settling(waiting) { resolver in
                if let outcome { resolver(outcome) } else { resolver.cancel() }
            }
        }
    }
}
