// Cancellation.swift: cancelling runs, one (`RunHandle`), many (`RunBag`), or silencing the
// steps tied to a token (`InvalidationToken`); and `ignoringCancel()`. `RunHandle` is declared
// in Engine/Run.swift, with the run it cancels.

nonisolated extension RunHandle {
    /// Whether the run was cancelled before it finished: by ``cancel()``, a bag or token it is
    /// stored in, a resolver's `cancel()` or an operation abandoned, a step tied to a token
    /// invalidated before it (with no value to go on with), or a member that ended its
    /// combination by cancellation.
    ///
    /// A run that ended with an outcome stays not cancelled, whatever is called later.
    public var isCancelled: Bool { run.locked { $0.state.isCancelled } }

    /// Cancels the run; see ``RunHandle`` for what that does.
    ///
    /// Safe from any thread, and as often as you like:
    /// `lookUp(id: id).run(some: show, none: report).cancel()`. Only the first call cancels, and
    /// none after the run ended; a later call from a step of the run still stops it before its
    /// next step (see ``RunHandle``).
    // What a cancel does, step by step: "A cancel in calls", in Engine/Run.swift's header (of a
    // combination: Engine/Join.swift's header; the alarm's of a timeout: Engine/Timeout.swift's).
    public func cancel() { _ = run.cancel(call: nil) }

    /// Puts the run in `bag`, to be cancelled with it.
    ///
    /// For runs that belong to an owner, such as a screen, whose bag cancels them when it goes
    /// away: `fetchFeed().run(some: show, none: report).store(in: model.runs)`. The bag forgets
    /// runs that ended, so storing many does not grow it without bound.
    @discardableResult public func store(in bag: RunBag) -> RunHandle {
        bag.lock.withLock {
            if bag.runs.count == bag.runs.capacity {
                bag.runs.removeAll { handle in handle.run.locked { $0.state.hasEnded } }
            }
            bag.runs.append(self)  // the ended ones forgotten, every time the bag would grow
        }
        return self
    }
}

/// Runs to cancel together, with ``cancelAll()`` and when the bag goes away.
///
/// It plays the part of Combine's set of `AnyCancellable`s: keep one in a screen or a view model,
/// store each run in it, and the runs end with their owner:
/// `fetchFeed().run(some: show, none: report).store(in: model.runs)`. To cancel one run, keep its
/// ``RunHandle`` instead.
nonisolated public class RunBag: @unchecked Sendable {
    fileprivate let lock = Engine.Lock()
    fileprivate var runs: [RunHandle] = []

    /// Makes an empty bag.
    ///
    /// Keep it in the object whose lifetime the runs share: its runs are cancelled when it goes
    /// away.
    public init() {}

    deinit {
        cancelAll()
        lock.free()
    }

    /// Cancels every run in the bag and empties it.
    ///
    /// Safe from any thread: it returns once every run the bag held as it was called is cancelled
    /// (see ``RunHandle``), even while another thread's call is under way. Runs stored meanwhile
    /// stay in the bag, for the next call.
    ///
    /// For a reset that keeps the bag, such as a search field whose old queries are stale:
    /// `model.runs.cancelAll()`.
    public func cancelAll() {
        // Left in the bag until cancelled, so that a call made meanwhile on another thread
        // cancels them too, rather than return before they are; the runs stored meanwhile stay.
        // Let go of inside the lock, as `store(in:)` lets go of ended runs: a cancelled run is
        // kept by what holds its end until it ended, and an ended run keeps nothing of its chain.
        for run in lock.withLock({ runs }) { run.cancel() }
        lock.withLock {
            runs.removeAll { $0.run.locked { $0.state.isCancelled || $0.state.hasEnded } }
        }
    }
}

/// Silences the callbacks tied to it once ``invalidate()`` is called, while the work goes on.
///
/// Tomorrowland's invalidation token. Tie the callbacks that update a screen to the screen's token,
/// and invalidate it when what they would show is stale: a new search started, a cell reused, the
/// screen gone (a token invalidates itself as it goes away). A tied callback does not run once the
/// token was invalidated after the callback was tied, even one already waiting for the main queue;
/// the run and the steps that are not tied go on. A token can be used again: callbacks tied after
/// an `invalidate()` run. The token is checked on the main queue just before a tied callback
/// runs, so call `invalidate()` on the main actor, as a screen does: from another thread, it may
/// miss a callback about to run, which then runs after it returns.
///
/// Tie a main-actor step with its `tiedTo:` argument, such as ``Promise/done(on:tiedTo:_:)``'s.
/// Each run ties it as the run starts, and keeps that tie through every retry, combination or
/// shared run inside it, and in the promises its steps make: a run started before an
/// `invalidate()` skips it, even in a member that a combination's limit starts after the
/// `invalidate()`, a run started after does not, so a promise kept and run again is not silenced
/// for good. The work of a shared promise ties in the run that started it: the runs that join it
/// later share its steps, tied ones included, as they share its outcome. Keep the token, in the
/// object whose callbacks it silences: ties do not keep it, and a token that has gone away
/// silences them.
///
/// ```swift
/// @MainActor final class SearchScreen {
///     let token = InvalidationToken()
///     var results: [Item] = []
///
///     func search(_ text: String) {
///         token.invalidate()  // the results of the previous search are stale
///         find(text).done(on: .main, tiedTo: token) { self.results = $0 }.catch(report).run()
///     }
/// }
/// ```
///
/// A token silences callbacks; a ``RunBag`` or a ``RunHandle`` cancels runs, which stops their
/// work. Use a bag when the work itself is no longer wanted, a token when it may finish (a save, a
/// cache fill) but nobody should hear of it. A token is also a bag: the runs stored in it, as
/// Tomorrowland's `requestCancelOnInvalidate` does, are cancelled when it is invalidated:
/// `image(url).done(on: .main, tiedTo: token, show).catch(report).run().store(in: token)`.
nonisolated public final class InvalidationToken: RunBag, @unchecked Sendable {
    // The count of invalidations of every token as this one was last invalidated (see
    // `Engine.invalidations`), guarded by the bag's lock.
    fileprivate var generation = 0

    /// The generation now. A getter, so that its caller's reference keeps the token past the
    /// unlock: a token that goes away cancels its runs, which takes the lock again.
    var current: Int { lock.withLock { generation } }

    /// Makes a token, which invalidates itself as it goes away.
    ///
    /// Keep it in the object whose callbacks it silences, such as a view controller: when it goes,
    /// so do the callbacks, and the runs stored in the token are cancelled, as a bag's are.
    override public init() {}

    /// Silences every callback tied so far, and cancels the runs stored in the token.
    ///
    /// Callbacks tied afterwards run: call it before starting the work that replaces stale work,
    /// such as the next search: `token.invalidate()`. To cancel the runs alone, as Tomorrowland's
    /// `cancelWithoutInvalidating()` does, call ``RunBag/cancelAll()``. Call it on the main actor,
    /// where tied callbacks run: from another thread, it may miss one about to run (see
    /// ``InvalidationToken``).
    public func invalidate() {
        lock.withLock { generation = Engine.invalidations(adding: 1) }
        cancelAll()
    }
}

nonisolated extension Promise {
    /// A promise whose work goes on when a run of it is cancelled; the run itself ends without
    /// waiting for the work.
    ///
    /// For work worth finishing though nobody waits for it any more, such as an upload: each run
    /// starts the work in a run of its own, which the run's cancellation does not reach. So the
    /// uploads of a `when` go on after one failed:
    /// `when(fulfilled: files.map { upload($0).ignoringCancel() })`. Tomorrowland's
    /// `cancelOnFailure: false` is this. A run that reaches it starts the work even if the run
    /// was cancelled meanwhile, or before it started; and a combination that ends before its
    /// turn starts it all the same (see ``when(fulfilled:concurrently:)``). So does a run
    /// cancelled before it reaches a combination in its chain that has it as a member, however
    /// deeply the combinations nest; but a combination that a step would return is not reached if
    /// the run stops before calling that step.
    ///
    /// The work starts on the thread that reaches it, as a promise a step returns does, and what
    /// it does there before it first waits (a compression before the upload, say) comes first: a
    /// run cancelled meanwhile ends, as a run does, once that has returned. (Past 32 levels of
    /// runs on that thread, where the work waits for the levels below to return, as README's
    /// "Nesting is flat" says, a cancel from another thread may end the run before the work
    /// starts.)
    public func ignoringCancel() -> Promise {
        typealias Callback = Engine.Callback<Value, Failure>
        let work = self
        // The work in a run of its own, apart from the run that starts it, whose cancel does not
        // reach it (its steps tie in the starting run's user's run, as every run inside it does).
        let start: @Sendable (Engine.Run, Callback) -> Void = { starter, callback in
            Engine.Run.make(for: work.chain, completing: Callback.self, apartFrom: starter)
                .start(work, callback)
        }
        let operation = Engine.Operation(file: #fileID, line: #line) {
            (resolver: Resolver<Value, Failure>) in
            resolver.run.startApart(in: resolver.call) {
                start(resolver.run, Callback { _, outcome in resolver.settle(with: outcome) })
            }
        }
        // The work alone, for a run that reaches this promise cancelled or never starts it.
        let ignored: @Sendable (Engine.Run) -> Void = { start($0, Callback { _, _ in }) }
        return Promise(last: Engine.Source<Value, Failure>(operation, ignoring: ignored))
    }
}
