// Resolver.swift: what an operation is given, to report its outcome and hear of cancellation.
// Builds on the run (Engine/Run.swift), which a resolver reports to, by its call's number, or a
// combination (Engine/Join.swift), by its member's index; the report itself,
// `resolve(_:carriedOnBy:)`, is with the run's code.

/// What an operation receives, to report its outcome and to learn that its run was cancelled.
///
/// Call it with a `Result`, or use ``fulfill(_:)-pc1s`` and ``reject(_:)``:
/// `resolver(.success(data))`. The first outcome counts, later ones are ignored. Call it from any
/// thread, during the operation or after. The run then goes on on the thread that is free to carry
/// it: the resolving one if the operation had returned, else the operation's own once it returns
/// (so to go on on a given queue, use ``Promise/on(_:)``, not `queue.async { resolver… }`). A
/// combination's member made from an operation alone is no run of its own: the combination hears
/// of its outcome at once, on the resolving thread, even before the operation returns; if that
/// outcome decides the combination, the steps after it go on on whichever thread stops last (see
/// <doc:CombiningPromises>).
///
/// ```swift
/// Promise<Data, any Error> { resolver in
///     let task = session.dataTask(with: url) { data, _, error in
///         resolver.resolve(data, error)
///     }
///     resolver.onCancel { _ in task.cancel() }
///     task.resume()
/// }
/// ```
///
/// An operation that lets its resolver go without resolving it or calling ``cancel()`` can never
/// finish: its run is cancelled, and debug builds report where the promise was made. Hold it
/// strongly, as a closure that captures it does: a resolver held only `weak` or `unowned` is let
/// go of when the operation returns, unresolved. A resolver kept after its run ended (cancelled,
/// or by a `timeout` that fired) or its combination settled keeps the run's own record in memory
/// (and those of the runs it is inside: a combination's, a timeout's), not its steps, until it is
/// let go of: a cancel handler (``onCancel(_:)``) that stops the work lets it go sooner.
nonisolated public final class Resolver<Value, Failure: Swift.Error>: @unchecked Sendable {
    /// The run, or the combination, that the outcome goes to: `Run.resolve` or `Join.resolve`.
    @usableFromInline let reporter: any Engine.Reporter
    /// The number of the call it reports for: each call has a resolver of its own.
    @usableFromInline let call: Int
    /// Whether its release, if unresolved, is reported: not that of the one a cancel handler is
    /// given, whose call has ended, so that a reader need not prove that report harmless; nor
    /// that of one whose outcome counted, whose report would take a lock to find nothing pending
    /// (the resolving thread sets it, holding it: its deinit comes after). Written once so (one
    /// outcome counts), and read only by its deinit, no access can overlap a write: so it skips
    /// exclusivity checks, which would cost one at every resolver's release.
    @exclusivity(unchecked) @usableFromInline var reportsRelease: Bool
    #if DEBUG
        let origin: (file: StaticString, line: UInt)
        /// Whether its release, if reported, is diagnosed: a pending promise's only while a run
        /// waits.
        var diagnosesRelease: (@Sendable () -> Bool)?
    #endif

    /// A resolver for call `call` of `operation` (`nil` for one a cancel handler is given).
    @usableFromInline init(
        reporter: any Engine.Reporter, call: Int, of operation: Engine.Operation? = nil
    ) {
        self.reporter = reporter
        self.call = call
        reportsRelease = operation != nil
        #if DEBUG
            origin = operation?.origin ?? ("a cancel handler", 0)
        #endif
    }

    /// The run the operation is part of (or that its combination is part of).
    @usableFromInline var run: Engine.Run { reporter.run }

    /// A resolver let go of while its call is pending (it never resolved) means nothing will: it
    /// cancels the call, and debug builds say where its promise was made. One whose call ended
    /// otherwise (cancelled, say) reports too: its run or combination ignores the cancel of a
    /// call that is no longer pending.
    deinit {
        guard reportsRelease else { return }
        #if DEBUG
            // Asked before the cancel changes it. A run cancelled inside a cancel handler is
            // cancelled at once, but a combination's or a shared promise's handlers, which end
            // its calls, wait for the handler to return (`Nesting.cancelling`).
            let diagnosed = !run.isCancelledOrInsideOne && diagnosesRelease?() ?? true
            guard reporter.cancel(call), diagnosed else { return }
            let what = reporter is Engine.Run ? "run" : "member of a combination"
            PromiseDiagnostics.handler(
                "an operation of Promise<\(Value.self), \(Failure.self)> made at \(origin.file):"
                    + "\(origin.line) released its resolver without resolving it. Its \(what) can "
                    + "never finish, so it was cancelled.")
        #else
            _ = reporter.cancel(call)
        #endif
    }

    /// Reports the outcome of the operation.
    ///
    /// The form to use when you hold a `Result`, or build one: `resolver(.success(data))`. The
    /// first outcome counts and later ones are ignored, so two callbacks racing to resolve are
    /// safe.
    @inlinable public func callAsFunction(_ result: sending Swift.Result<Value, Failure>) {
        // A user's resolver: its run goes on where it is. (`resolve(_:carriedOnBy:)`, the one way
        // every resolver's outcome goes, is in Engine/Run.swift.)
        resolve(result, carriedOnBy: nil)
    }

    /// Reports success.
    ///
    /// The same as `resolver(.success(value))`. The value is `sending`: the run takes it over, so
    /// an operation cannot keep mutating what it handed on: `resolver.fulfill(data)`.
    @inlinable public func fulfill(_ value: sending Value) { self(.success(value)) }

    /// Reports failure.
    ///
    /// The error has the promise's `Failure` type. To end the run as cancelled rather than failed
    /// (the user gave up; nothing went wrong), call ``cancel()``.
    @inlinable public func reject(_ error: Failure) { self(.failure(error)) }

    /// Ends the run as cancelled, as its handle's ``RunHandle/cancel()`` would (this operation's
    /// ``onCancel(_:)`` handlers are called too), if this operation has not resolved yet.
    ///
    /// For work that learns elsewhere that it was cancelled, such as an API that reports
    /// cancellation as an error: the run then delivers no completion, and an await of it gets
    /// `nil`, where ``reject(_:)`` would report a failure. For completion handlers,
    /// ``resolve(_:_:cancelledIf:)`` does this for you. Like a late outcome, a late cancel does
    /// nothing: the resolver of an operation that resolved (or of an earlier attempt of a
    /// `retry`) cancels nothing.
    public func cancel() { _ = reporter.cancel(call) }

    /// Whether the run this operation is part of (for a combination's member, the member) was
    /// cancelled before it ended.
    ///
    /// Check it between the pieces of long synchronous work, to stop early. To stop work that waits
    /// (a request, a timer), register ``onCancel(_:)`` instead, which is called as soon as the run
    /// is cancelled.
    public var isCancelled: Bool { reporter.isCancelled(call) }

    /// Registers work to do if the run is cancelled before this operation resolves.
    ///
    /// The handler is called at most once, on the thread that cancels (at once if the run already
    /// is; if the run's end is under way, before its next `ensure` step, or as it ends, on the
    /// thread that ends it); use it to cancel the request, timer or task the operation started. It
    /// gets the resolver: one that captured its own resolver would keep its run alive forever.
    ///
    /// ```swift
    /// Promise<Data, any Error> { resolver in
    ///     let task = session.dataTask(with: url) { data, _, error in
    ///         resolver.resolve(data, error)
    ///     }
    ///     resolver.onCancel { _ in task.cancel() }
    ///     task.resume()
    /// }
    /// ```
    public func onCancel(_ handler: @escaping @Sendable (Resolver) -> Void) {
        reporter.onCancel(call) { [call] in handler(Resolver(reporter: $0, call: call)) }
    }
}

nonisolated extension Resolver where Value == Void {
    /// Reports success for an operation that produces no value.
    ///
    /// The same as `resolver(.success(()))`, for a `Promise<Void, Failure>`, such as a save or a
    /// write that ends with nothing to pass on.
    @inlinable public func fulfill() { self(.success(())) }

    /// Reports what a completion handler that passes an optional error passes.
    ///
    /// For a `Promise<Void, any Error>` around an `(Error?) -> Void` handler, as a save or a delete
    /// has: `nil` is success, anything else the failure.
    public func resolve(_ error: (any Swift.Error)?) where Failure == any Swift.Error {
        if let error { reject(error) } else { fulfill() }
    }
}

nonisolated extension Resolver where Failure == any Swift.Error {
    /// Reports what a completion handler passes.
    ///
    /// An error wins over a value, and with neither the operation fails with
    /// ``PromiseError/missingValue``. The adapter for the `(Value?, Error?) -> Void` handlers of
    /// Foundation and older APIs: `fetch { data, error in resolver.resolve(data, error) }`. If the
    /// API reports cancellation as an error, use ``resolve(_:_:cancelledIf:)``, so that a cancelled
    /// run does not look like a failure.
    public func resolve(_ value: sending Value?, _ error: (any Swift.Error)?) {
        resolve(value, error, cancelledIf: { _ in false })
    }

    /// Reports what a completion handler passes, ending the run as cancelled on a cancellation
    /// error.
    ///
    /// Like ``resolve(_:_:)-14z48``, but an error that `isCancellation` recognizes ends the run as
    /// cancelled, as ``cancel()`` does:
    /// `resolver.resolve(data, error, cancelledIf: { $0 is CancellationError })`.
    public func resolve(
        _ value: sending Value?, _ error: (any Swift.Error)?,
        cancelledIf isCancellation: (any Swift.Error) -> Bool
    ) {
        if let error, isCancellation(error) { return cancel() }
        resolve(value, error, mapError: { $0 })
    }
}

nonisolated extension Resolver {
    /// Reports what a completion handler passes, converting its error to the promise's type.
    ///
    /// For a `(Value?, Error?) -> Void` handler on a promise with a typed error: the error, or
    /// ``PromiseError/missingValue`` when there is neither, goes through `transform`:
    ///
    /// ```swift
    /// Promise<Data, NetworkError> { resolver in
    ///     fetch { data, error in resolver.resolve(data, error, mapError: { _ in .offline }) }
    /// }
    /// ```
    public func resolve(
        _ value: sending Value?, _ error: (any Swift.Error)?,
        mapError transform: (any Swift.Error) -> Failure
    ) {
        guard let value, error == nil else {
            return reject(transform(error ?? PromiseError.missingValue))
        }
        fulfill(value)
    }

    /// Not for a promise with a typed error: a handler's error is `any Error`.
    // swift-format-ignore
    @available(*, unavailable, message: "a (Value?, Error?) handler's error is any Error: convert it with resolve(_:_:mapError:), as in { resolver.resolve($0, $1, mapError: MyError.init) }, or make the promise a Promise<_, any Error> and mapError(_:) after")
    public func resolve(_ value: Value?, _ error: (any Swift.Error)?) { fatalError() }
}

// A method whose value is `sending` cannot be passed where a completion handler is expected, whose
// parameter is not: these are for that, and Swift prefers the `sending` ones for a direct call.
nonisolated extension Resolver where Value: Sendable {
    /// Reports success, as a function to pass where a completion handler is expected.
    ///
    /// The same as ``fulfill(_:)-pc1s``, for a `Sendable` value, whose parameter is not
    /// `sending`, so that it converts to a handler's type:
    /// `Guarantee<Data> { load(completion: $0.fulfill) }`.
    @_disfavoredOverload public func fulfill(_ value: Value) { self(.success(value)) }

    /// Reports what a completion handler passes, as a function to pass as that handler.
    ///
    /// The same as ``resolve(_:_:)-14z48``, for a `Sendable` value, so that PromiseKit's way of
    /// wrapping a callback API compiles: `Promise { fetch(completion: $0.resolve) }`.
    @_disfavoredOverload public func resolve(_ value: Value?, _ error: (any Swift.Error)?)
    where Failure == any Swift.Error {
        resolve(value, error, cancelledIf: { _ in false })
    }
}
