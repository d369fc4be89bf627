// Queues.swift: where steps run: `on(_:)`, and the steps that run on the main actor. Builds on
// the hop (`Next.hop`, Engine/Run.swift) and on the ties of invalidation tokens
// (Cancellation.swift).

import Dispatch

// A step runs where the step before it finished: on the thread that started the run, or the one
// that resolved an operation. `on` is the one way to choose a queue: a hop, made every time.

/// A guarantee that goes on on `queue`, to start work there.
///
/// Start a chain with it to do slow synchronous work off the calling thread:
/// `on(.global()).map { resize(photo) }`. To move the steps of a chain that is under way, use
/// ``Promise/on(_:)``.
nonisolated public func on(_ queue: DispatchQueue) -> Guarantee<Void> {
    Guarantee(value: ()).on(queue)
}

nonisolated extension Promise {
    /// Runs the steps after this one on `queue`, every time, however the work before settled.
    ///
    /// A step runs where the step before it finished, as fast as a callback; `on` is the one way to
    /// choose: a hop, made every time, not a hint. A run cancelled while it waits for the queue
    /// goes no further: `name.on(.main).done(show)`. From async code, no hop is needed for the code
    /// after `await promise.value`, which goes on on the caller's actor.
    public func on(_ queue: DispatchQueue) -> Promise {
        appending(queue) { stage, _, _ in .hop(Node<DispatchQueue>.payload(of: stage), nil) }
    }

    /// Not Future's way to choose a queue: hop with ``on(_:)`` before the step, or, for a step on
    /// the main actor, use ``map(on:tiedTo:_:)`` or ``done(on:tiedTo:_:)``.
    // swift-format-ignore
    @available(*, unavailable, message: "Future has no then(on:): hop first with .on(queue), as in .on(.main).then { … }, or for main-actor work use map(on: .main) or done(on: .main)")
    public func then<NewValue>(
        on queue: DispatchQueue, _ body: @escaping @Sendable (Value) -> NewValue
    ) -> Promise<NewValue, Failure> { fatalError() }
}

/// The main actor, as the place a step runs: the `on` of ``Promise/map(on:tiedTo:_:)``,
/// ``Promise/done(on:tiedTo:_:)`` and ``Promise/catch(on:tiedTo:_:)``.
///
/// Its one value is `.main`: `loadItem(1).done(on: .main) { items = [$0] }`. The steps run on
/// the main queue, in an app as in a command-line tool that calls `dispatchMain()`. In a tool,
/// call `dispatchMain()` before any top-level `await`: after one, libdispatch stops the program
/// at `dispatchMain()`.
nonisolated public enum MainActorContext: Sendable {
    /// The main actor, whose code runs on the main queue.
    case main
}

// A step isolated to the main actor hops to the main queue, as `on(.main)` does, and calls its
// closure there as the main actor's: the values that cross are `Sendable`, which the compiler
// checks. Only a tied step checks its token: under the token's lock (its run's count takes none).
nonisolated extension Promise where Value: Sendable {
    /// Transforms the value on the main actor, where the closure may use main-actor state.
    ///
    /// The step hops to the main queue first, on every run; the steps after it run there too. With
    /// a `token`, an invalidated token cancels the run instead of calling `body`, as there is
    /// then no value to go on with: `loadItem(1).map(on: .main) { cell(for: $0) }`.
    public func map<NewValue: Sendable>(
        on _: MainActorContext, tiedTo token: InvalidationToken? = nil,
        _ body: @escaping @MainActor @Sendable (Value) -> NewValue
    ) -> Promise<NewValue, Failure> {
        onMain(tiedTo: token) { outcome, valid in
            switch outcome {
            case .success(let value): valid ? .success(Self.asMainActor { body(value) }) : nil
            case .failure(let error): .failure(error)
            }
        }
    }

    /// Ends the success path with a side effect on the main actor, such as showing the value.
    ///
    /// What PromiseKit's `done` does by default, checked by Swift 6: the closure may set main-actor
    /// state. The step hops to the main queue first, and the steps after it run there too. With a
    /// `token`, an invalidated token skips the closure, and the chain goes on:
    ///
    /// ```swift
    /// @MainActor final class ItemScreen {
    ///     let token = InvalidationToken()
    ///     var items: [Item] = []
    ///
    ///     func load() {
    ///         loadItem(1)
    ///             .done(on: .main, tiedTo: token) { self.items = [$0] }
    ///             .catch(on: .main) { report($0) }
    ///             .run()
    ///     }
    /// }
    /// ```
    public func done(
        on _: MainActorContext, tiedTo token: InvalidationToken? = nil,
        _ body: @escaping @MainActor @Sendable (Value) -> Void
    ) -> Promise<Void, Failure> {
        onMain(tiedTo: token) { outcome, valid in
            outcome.map { value in Self.asMainActor { if valid { body(value) } } }
        }
    }

    /// Handles the error on the main actor, such as showing an alert, leaving a ``Guarantee``.
    ///
    /// The main-actor form of ``catch(_:)``: `fetchFeed().done(on: .main, show).catch(on: .main,
    /// report).run()`. It hops to the main queue, with a value or an error, and the steps after it
    /// run there too. With a `token`, an invalidated token skips the closure.
    public func `catch`(
        on _: MainActorContext, tiedTo token: InvalidationToken? = nil,
        _ body: @escaping @MainActor @Sendable (Failure) -> Void
    ) -> Guarantee<Void> {
        onMain(tiedTo: token) { outcome, valid in
            if case .failure(let error) = outcome, valid { Self.asMainActor { body(error) } }
            return .success(())
        }
    }
}
