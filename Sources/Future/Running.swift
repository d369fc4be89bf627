// Running.swift: the terminals that start a run, `run(_:)` and `run(some:none:)`, and for a
// guarantee `run()`. Builds on `Run.make` and `Run.start` (Engine/Run.swift, whose header tells a
// run's calls from there), a run that keeps the terminal's closure (`Engine.Outcomes`).

nonisolated extension Promise {
    /// Starts a new run of the work and calls `completion` with its outcome.
    ///
    /// `completion` is called at most once, on the thread where the last step finished, and never
    /// after the run is cancelled. Choose it to pass the whole `Result` on, say to a completion
    /// handler of your own; ``run(some:none:)`` splits it in two closures. The handle it returns
    /// cancels the run, and can be ignored: `lookUp(id: id).run { result in show(result) }`. A
    /// trailing closure alone means this terminal on a guarantee too, and gets the `Result`: for
    /// the value, use `run(some:)`.
    ///
    /// The run keeps the chain's steps, and what they captured, until it ends, and lets go of them
    /// on the thread that ends it: after ``on(_:)``, on that queue (so a view a step captured goes
    /// away on the main queue). The steps of a promise that a step returned go once all of them
    /// have run, on the thread that ran the last (for a promise that ends in ``on(_:)``, on that
    /// queue). A run that is cancelled lets go of them where it ends: on the thread that calls
    /// ``RunHandle/cancel()`` if the run waits; if it runs, on the thread running it, as it
    /// stops, or on the canceller's, if the cancel handlers return later. (An `ensure(on:)`
    /// cleanup that a cancel queues keeps what it captured until it has run, on its queue.)
    @inlinable @discardableResult
    public consuming func run(
        _ completion: @escaping @Sendable (Swift.Result<Value, Failure>) -> Void
    ) -> RunHandle {
        (consume self).start(Engine.Outcomes(completion))
    }

    /// Starts a run whose outcome goes to `completion`. What the run does next, step by step:
    /// "A call in calls", in Engine/Run.swift's header.
    @inlinable consuming func start<Completion: Engine.Completion>(
        _ completion: Completion
    ) -> RunHandle where Completion.Value == Value, Completion.Failure == Failure {
        let run = Engine.Run.make(for: chain, completing: Completion.self)
        // Consumed, so that a promise made for this call alone is the run's to let go of.
        run.start(consume self, completion)
        return RunHandle(run)
    }

    /// Starts a run and calls `some` with its value or `none` with its error.
    ///
    /// The usual way to run a promise that can fail: both paths are spelled out where the run
    /// starts, and functions can be passed by name:
    /// `lookUp(id: id).then(toModel).run(some: show, none: report)`. Keep the returned
    /// ``RunHandle`` to cancel the run, or store it in a ``RunBag``.
    @inlinable @discardableResult
    public consuming func run(
        some: @escaping @Sendable (Value) -> Void, none: @escaping @Sendable (Failure) -> Void
    ) -> RunHandle {
        (consume self).start(
            Engine.Outcomes { outcome in
                switch outcome {
                case .success(let value): some(value)
                case .failure(let error): none(error)
                }
            })
    }
}

// What a promise that can fail cannot do: Swift picks these only when the `Failure == Never` ones
// below do not fit, so a chain that still owes its error handling gets a message that says how.
nonisolated extension Promise {
    /// Not for a promise that can fail: its error must go somewhere. Handle it first, with
    /// ``catch(_:)`` or `recover`, or run it with ``run(some:none:)``.
    // swift-format-ignore
    @available(*, unavailable, message: "this promise can fail: handle its error first with catch(_:) or recover(_:), or run it with run(some:none:)")
    @discardableResult public func run() -> RunHandle { fatalError() }

    /// Not for a promise that can fail, as ``run()``: use ``run(some:none:)``.
    // swift-format-ignore
    @available(*, unavailable, message: "this promise can fail: handle its error first with catch(_:) or recover(_:), or run it with run(some:none:)")
    @discardableResult
    public func run(some: @escaping @Sendable (Value) -> Void) -> RunHandle { fatalError() }
}

nonisolated extension Promise where Failure == Never {
    /// Starts work that cannot fail, for its effects alone.
    ///
    /// The end of a chain whose steps did the work, as ``done(_:)-((Value)->Void)`` and
    /// ``catch(_:)`` do: `fetchFeed().done { show($0) }.catch { report($0) }.run()`. Only a
    /// ``Guarantee`` has it: a promise that can fail must say where its error goes first.
    @inlinable @discardableResult
    public consuming func run() -> RunHandle {
        (consume self).start(Engine.Values { _ in })
    }

    /// Starts work that cannot fail and calls `some` with its value.
    ///
    /// Write the label: a bare trailing closure means ``run(_:)``, which passes a `Result`. Only a
    /// ``Guarantee`` has it: `cachedFeed().run(some: show)`.
    @inlinable @discardableResult @_disfavoredOverload
    public consuming func run(some: @escaping @Sendable (Value) -> Void) -> RunHandle {
        (consume self).start(Engine.Values(some))
    }
}
