// Concurrency.swift: async/await, a promise's `result` and `value`, awaited on the caller's actor,
// and a batch's `outcomes(of:concurrently:)`, which the task's cancellation stops. Builds on
// `Run.start` (Engine/Run.swift) and `when(resolved:concurrently:until:)` (Combining.swift);
// `Promise.init` from an `async` closure is in Making.swift.

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
    /// the steps after it run where it resolved, unless a step moves them (``on(_:)``,
    /// `ensure(on:)`, a step on the main actor).
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

/// Runs the promises, at most `limit` at once, and returns every outcome, in the order given; if
/// the task is cancelled, stops them and returns what finished.
///
/// For a batch whose finished items are worth reporting however it ends, such as a tool that
/// Ctrl-C or a deadline cancels: where `await when(resolved:).value` gives `nil` to a cancelled
/// task, this gives an outcome for each member, `nil` for one that had not finished.
///
/// ```swift
/// let finished = await outcomes(of: urls.map(download), concurrently: 4)
/// print("\(finished.compactMap { $0 }.count) of \(urls.count) done")
/// ```
///
/// The task's cancellation stops the batch as the signal of
/// ``when(resolved:concurrently:until:)`` does: the members still running are cancelled (their
/// `onCancel` handlers and `ensure` steps have run when the await returns, but for the body of
/// an `ensure(on:)`, which is queued by then), and the others never start (but for the work of
/// those that begin with `ignoringCancel()`). A member whose run ends by cancellation of its
/// own has `nil` too. A `limit` below 1 stops the program, with the message of
/// `when(resolved:concurrently:until:)`.
@inlinable nonisolated(nonsending) public func outcomes<Value, Failure>(
    of promises: [Promise<Value, Failure>], concurrently limit: Int = .max
) async -> [Swift.Result<Value, Failure>?] {
    let (stop, stopper) = Guarantee<Void>.pending()
    let batch = when(resolved: promises, concurrently: limit, until: stop)
    let isolation = #isolation  // as in `result`
    // Not `batch.result`, which the task's cancellation would cancel: it stops the batch instead.
    let outcomes = await withTaskCancellationHandler {
        await withUnsafeContinuation(isolation: isolation) { _ = batch.start(Engine.Awaiting($0)) }
    } onCancel: {
        stopper.fulfill(())
    }
    // (`nil` only if the batch were cancelled, which nothing here does.)
    return outcomes?.get() ?? Array(repeating: nil, count: promises.count)
}
