// Concurrency.swift: async/await, a promise's `result` and `value`, awaited on the caller's actor.
// Builds on `Run.start` (Engine/Run.swift); `Promise.init` from an `async` closure is in
// Making.swift.

nonisolated extension Promise {
    /// Starts a run on the caller's actor and waits for its outcome, or `nil` if it ended by
    /// cancellation.
    ///
    /// Choose it over ``value-7wpyp`` to handle the error without `do`/`catch`, as a typed
    /// `Result`:
    ///
    /// ```swift
    /// if case .success(let user)? = await fetchUser(id).result { show(user) }
    /// ```
    ///
    /// The run ends by cancellation if the task was cancelled (after its `onCancel` handlers and
    /// `ensure` steps), or an operation dropped or cancelled its resolver. The steps up to the
    /// first operation that resolves later run on the caller's actor (its executor, custom or not);
    /// the steps after it run where it resolved, unless ``on(_:)`` says otherwise.
    @inlinable nonisolated(nonsending) public var result: Swift.Result<Value, Failure>? {
        get async {
            typealias Awaiting = Engine.Awaiting<Value, Failure>
            let handle = RunHandle(Engine.Run.make(for: chain, completing: Awaiting.self))
            // Named, because the cancellation handler's operation runs on the generic executor:
            // the continuation's body, which starts the run, is then sent back to the caller's.
            let isolation = #isolation
            return await withTaskCancellationHandler {
                await withUnsafeContinuation(isolation: isolation) { continuation in
                    handle.run.start(self, Awaiting(continuation))
                }
            } onCancel: {
                handle.cancel()
            }
        }
    }

    /// Runs the promise and waits for its value, or `nil` if the run ended by cancellation.
    ///
    /// The way to use a promise from async code: it throws the promise's typed error, and
    /// cancelling the task cancels the run:
    /// `guard let user = try await fetchUser(id).value else { return }`. To handle the error
    /// without `catch`, await ``result`` instead.
    @inlinable nonisolated(nonsending) public var value: Value? {
        get async throws(Failure) { try await result?.get() }
    }
}

nonisolated extension Promise where Failure == Never {
    /// Runs the guarantee and waits for its value, or `nil` if the run ended by cancellation.
    ///
    /// A guarantee cannot fail, so there is no `try`: `let feed = await cachedFeed().value`. Like
    /// the other `value`, it starts a run on the caller's actor.
    @inlinable nonisolated(nonsending) public var value: Value? {
        get async { await result?.get() }
    }
}
