// HandlingErrors.swift: steps that see the error, `mapError`, `recover`, `catch`, and the
// cleanups `ensure` and `ensure(on:)`. Builds on `appending` and `mapOutcome` (Engine/Chain.swift),
// and for `ensure(on:)` on the hop and the queue a run is on (Engine/Run.swift).

import Dispatch

nonisolated extension Promise {
    /// Transforms the error when the promise fails.
    ///
    /// Choose it to give a chain one error type from steps of several, or to turn a low-level error
    /// into one of your domain: `fetchUser(id).mapError { _ in LookupError.notFound }`. A value
    /// passes through untouched. To turn an error into a value, use `recover` or
    /// ``flatMapError(_:)``; to forget the type, ``eraseToAnyError()``.
    @inlinable public func mapError<NewFailure>(
        _ transform: @escaping @Sendable (Failure) -> NewFailure
    ) -> Promise<Value, NewFailure> {
        mapOutcome { $0.mapError(transform) }
    }

    /// Turns an error into a value or another error, at once.
    ///
    /// Choose it to recover from some errors and not others, with no promise to wait for; its
    /// `Result` decides: `fetchFeed().flatMapError { $0 == .notFound ? .success(.empty) :
    /// .failure(FeedError.unavailable) }`. To continue with other work, such as a retry or a cache
    /// read, use ``recover(_:)->Promise<Value,NewFailure>``.
    @inlinable public func flatMapError<NewFailure>(
        _ transform: @escaping @Sendable (Failure) -> Swift.Result<Value, NewFailure>
    ) -> Promise<Value, NewFailure> {
        mapOutcome { $0.flatMapError(transform) }
    }

    /// Continues with the promise `next` makes from the error; a success passes through.
    ///
    /// Choose it to fall back on other work, such as a cache or a mirror. When `next` gives a
    /// ``Guarantee``, so does this, and the chain cannot fail any more:
    /// `fetchFeed().recover { _ in cachedFeed() }`. A fallback that can fail too gives the chain
    /// its error type:
    ///
    /// ```swift
    /// let feed = fetchFeed().recover { error in
    ///     error.isTransient ? fetchFeed() : Promise(error: error)
    /// }
    /// ```
    ///
    /// To replace an error with a value, use ``recover(_:)->Guarantee<Value>``.
    @inlinable public func recover<NewFailure>(
        _ next: @escaping @Sendable (Failure) -> Promise<Value, NewFailure>
    ) -> Promise<Value, NewFailure> {
        typealias Entry = Engine.Entry<Failure, Value, NewFailure>
        return entering(next) { stage, slot, run in
            switch slot.take(Outcome.self) {
            case .success(let value):
                slot.put(Swift.Result<Value, NewFailure>.success(value))
                return .proceed
            case .failure(let error): return run.callOrEnter(Entry.next(of: stage)(error))
            }
        }
    }

    /// Not for a closure that throws on a chain with a typed error: return `Promise(error:)`.
    // swift-format-ignore
    @available(*, unavailable, message: "on a chain with a typed error, a recover closure cannot throw: return Promise(error:) instead, or erase the chain's error type first")
    public func recover<NewFailure>(
        _ next: @escaping @Sendable (Failure) throws -> Promise<Value, NewFailure>
    ) -> Promise<Value, NewFailure> { fatalError() }

    /// Replaces an error with a value, so the result cannot fail.
    ///
    /// The simplest recovery, when a default will do: `lookUp(id: id).recover { _ in "stranger" }`
    /// is a ``Guarantee``, to run with ``run(some:)`` or await without `try`. To recover from some
    /// errors only, use ``flatMapError(_:)``; to fall back on other work, the promise form of
    /// `recover`; to handle the error with a side effect, ``catch(_:)``.
    @inlinable public func recover(
        _ transform: @escaping @Sendable (Failure) -> Value
    ) -> Guarantee<Value> {
        mapOutcome { $0.flatMapError { .success(transform($0)) } }
    }

    /// Handles the error and ends the success path, leaving a ``Guarantee`` to run.
    ///
    /// The PromiseKit ending: ``done(_:)-((Value)->Void)`` for the value, `catch` for the error,
    /// then ``run()``: `fetchFeed().done { show($0) }.catch { report($0) }.run()`. Unlike
    /// PromiseKit's, it runs nothing by itself: the chain is still a promise. Choose `recover`
    /// instead when a value can stand in for the error and later steps need it.
    @inlinable public func `catch`(_ body: @escaping @Sendable (Failure) -> Void) -> Guarantee<Void>
    {
        mapOutcome { outcome in
            if case .failure(let error) = outcome { body(error) }
            return .success(())
        }
    }

    /// Runs `body` when the chain gets here, succeeded or failed, and also when a run is cancelled
    /// before it.
    ///
    /// The place to undo what a run set up, such as a spinner, whatever happens to the run:
    /// `spinner.start(); fetchFeed().ensure { spinner.stop() }.catch(report).run()`. Unlike
    /// ``tap(_:)``, it runs on cancellation too (once the cancel handlers have returned), and sees
    /// no outcome. In a combination's member, it is a step of the member's run: a member whose run
    /// its combination never started (it ended first, or the run was cancelled before reaching
    /// it) runs none; one whose run started runs it however that run ends, even if a cancel stops
    /// the run before its operation is called.
    @inlinable public func ensure(_ body: @escaping @Sendable () -> Void) -> Promise {
        appending(body, isEnsure: true) { stage, _, _ in
            Node<@Sendable () -> Void>.payload(of: stage)()
            return .proceed
        }
    }

    /// Runs `body` on `queue` when the chain gets here, as ``ensure(_:)`` does; the steps after it
    /// start once `body` has returned.
    ///
    /// PromiseKit's `ensure(on:)`, for cleanup that belongs to a queue, such as state the queue
    /// guards: `fetchUser(id).ensure(on: queue) { spinner.stop() }.catch(report).run()`.
    /// After `body`, the chain goes back to the queue it was on, if a hop took it there (with
    /// ``on(_:)``, or a step on the main actor), or took there the run whose thread started it or
    /// carried it on (a combination's member, or a `timeout`'s work, that a step on that queue
    /// started, say), else on to a global queue: not on `queue`, whose `sync` a later step may
    /// call, unless it was there before. Every move is queued,
    /// never a `sync`. A run cancelled while `body` runs (a `timeout` around it expired, say)
    /// makes that move all the same, and stops there (it ends there, or, if the cancel is still
    /// under way, on the canceller's thread): what goes on after it does not go on on `queue`.
    ///
    /// A run cancelled before `body` has run queues it on `queue`, once the cancel handlers have
    /// returned; the run's end does not wait for it.
    ///
    /// (Disfavored, so that `.main` means the main actor, as for ``done(on:tiedTo:_:)``; pass
    /// `DispatchQueue.main` to run a closure that is not the main actor's there.)
    @_disfavoredOverload public func ensure(
        on queue: DispatchQueue, _ body: @escaping @Sendable () -> Void
    ) -> Promise {
        // The queue to go back to travels with the outcome, in the slot: every run has its own.
        typealias Carried = Swift.Result<(Outcome, DispatchQueue?), Never>
        let there: Guarantee<(Outcome, DispatchQueue?)> = appending(queue) { _, slot, _ in
            slot.put(Carried.success((slot.take(Outcome.self), Engine.Nesting.queueHere)))
            return .hop(queue, nil)
        }
        let cancelled: @Sendable () -> Void = { queue.async(execute: body) }
        return there.appending(cancelled, isEnsure: true) { _, slot, _ in
            body()
            let (outcome, back) = slot.take(Carried.self).get()
            slot.put(outcome)
            return .hop(back ?? .global(), nil, leaving: true)
        }
    }

    /// Runs `body` on the main actor when the chain gets here, as ``ensure(_:)`` does; the steps
    /// after it start once `body` has returned.
    ///
    /// PromiseKit's `ensure(on: .main)`, for cleanup of main-actor state, such as a spinner of
    /// the user interface: `fetchFeed().ensure(on: .main) { spinner.stop() }`. The chain goes on
    /// as after ``ensure(on:_:)-(_,()->Void)`` with the main queue: back to the queue it was on
    /// (as that method says), else on to a global queue.
    public func ensure(
        on _: MainActorContext, _ body: @escaping @MainActor @Sendable () -> Void
    ) -> Promise {
        ensure(on: DispatchQueue.main) { Guarantee<Void>.asMainActor(body) }
    }

    /// PromiseKit's last step after `catch`, which Future calls ``ensure(_:)``.
    // swift-format-ignore
    @available(*, unavailable, renamed: "ensure", message: "Future's finally is ensure(_:): .catch { … }.ensure { … }.run()")
    public func finally(_ body: @escaping @Sendable () -> Void) -> Promise { fatalError() }

    /// Forgets the error's type, to chain with promises that fail with `any Error`.
    ///
    /// Choose it to combine promises of different error types, or to use an API typed for
    /// `any Error`, such as ``timeout(_:)``:
    /// `lookUp(id: id).eraseToAnyError().timeout(.seconds(5))`. To keep a typed error, convert it
    /// with ``mapError(_:)`` instead.
    @inlinable public func eraseToAnyError() -> Promise<Value, any Swift.Error> {
        mapOutcome { $0.mapError { $0 } }
    }
}
