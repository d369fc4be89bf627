// Making.swift: the ways to make a promise, from an operation, an `async` closure, a value, an
// error or a throwing closure, and `firstly`. Builds on the stages of Engine/Chain.swift.

// How a builder adds a step, here and in every file after this one: it appends a stage
// (Engine/Chain.swift), a `Node` that keeps a payload (your closure, a value, an error) and a
// step function `{ stage, slot, run in … }`. The step gets the payload back with
// `Node<Payload>.payload(of: stage)` (a stage does not know its payload's type, so that a chain
// is a list of one type), takes its input from the slot with `slot.take(Input.self)`, leaves its
// output there with `slot.put(_:)`, and returns what the run does next: `.proceed` to go on, or
// `run.callOrEnter(promise)` to run a promise in its place (an operation alone is called there, a
// chain's stages are entered). The input and the output are the `Result` of the step before and
// of this one, at the same address.

nonisolated extension Promise {
    @usableFromInline typealias Node<Payload: Sendable> = Engine.Node<Payload>
    @usableFromInline typealias Outcome = Swift.Result<Value, Failure>

    /// Makes a promise from an operation that reports its outcome through a ``Resolver``.
    ///
    /// The operation runs on every run, on the thread that starts the run or where the step before
    /// it finished; it resolves at once or later, from any thread. This is how to wrap a callback
    /// API. For an outcome you already have, choose ``init(value:)``, ``init(error:)`` or
    /// ``init(result:)``; for a throwing function ``init(catching:)``; for async code
    /// ``init(file:line:_:)-1zmct``.
    ///
    /// ```swift
    /// let contents = Promise<Data, any Error> { resolver in
    ///     fetch { data, error in resolver.resolve(data, error) }
    /// }
    /// let one = Guarantee<Int> { resolver in
    ///     queue.async { resolver.fulfill(1) }
    /// }
    /// ```
    ///
    /// `file` and `line` name the promise in the debug report of an operation that dropped its
    /// resolver without resolving it.
    @inlinable public init(
        file: StaticString = #fileID, line: UInt = #line,
        _ operation: @escaping @Sendable (Resolver<Value, Failure>) -> Void
    ) {
        self.init(Engine.Operation(file: file, line: line, operation))
    }

    /// Makes a promise from async code: each run starts a `Task` that calls `work`.
    ///
    /// Cancelling the run cancels that task, so an `await` in `work` that honours cancellation
    /// stops. Choose it to bring an async API into a chain; to go the other way, awaiting a promise
    /// from async code, use ``value-7wpyp`` or ``result``. A typed `throws(Failure)` keeps the
    /// error's type; an untyped `throws` makes a `Promise<Value, any Error>`:
    /// `Promise<Data, any Error> { try await session.data(from: url).0 }`.
    @inlinable public init(
        file: StaticString = #fileID, line: UInt = #line,
        _ work: @escaping @Sendable () async throws(Failure) -> Value
    ) {
        self.init(file: file, line: line) { resolver in
            let task = Task {
                do throws(Failure) { resolver.fulfill(try await work()) } catch {
                    resolver.reject(error)
                }
            }
            resolver.onCancel { _ in task.cancel() }
        }
    }

    /// Makes a promise that fails with `error`.
    ///
    /// Every run fails at once. It is the failing branch of a step that returns a promise; for a
    /// step that can fail at once and has no promise to wait for, a `Result` step of `then` is
    /// lighter:
    ///
    /// ```swift
    /// let details = lookUp(id: id).then { name -> Promise<Model, LookupError> in
    ///     name.isEmpty ? Promise(error: .notFound) : fetchDetails(of: .unknown)
    /// }
    /// ```
    @inlinable public init(error: Failure) {
        self.init(
            last: Node(error, after: nil, output: Outcome.self) { stage, slot, _ in
                slot.put(Outcome.failure(Node<Failure>.payload(of: stage)))
                return .proceed
            })
    }

    /// Makes a promise that calls `body` on every run, failing with what it throws.
    ///
    /// Choose it to bring synchronous work that throws into a chain. Write the closure's
    /// `throws(…)` to keep a typed error, as Swift infers `any Error` for an untyped one:
    /// `Promise(catching: { () throws(DecodingError) in try loadConfig() })`. For a throwing step
    /// in the middle of a chain, use ``tryMap(_:)``.
    @inlinable public init(catching body: @escaping @Sendable () throws(Failure) -> Value) {
        self = Promise<Void, Failure>().tryMap { (_: Void) throws(Failure) in try body() }
    }
}

nonisolated extension Promise where Value: Sendable {
    /// Makes a promise that settles with `result`.
    ///
    /// Every run settles with it at once. Choose it to hand a `Result` you already have to code
    /// that takes a promise; for a value or an error alone, ``init(value:)`` and ``init(error:)``
    /// read better. The value is `Sendable`, as every run gets it.
    @inlinable public init(result: Swift.Result<Value, Failure>) {
        self.init(
            last: Node(result, after: nil, output: Outcome.self) { stage, slot, _ in
                slot.put(Node<Outcome>.payload(of: stage))
                return .proceed
            })
    }

    /// Makes a promise that succeeds with `value`.
    ///
    /// Every run succeeds at once, with the same value, which must be `Sendable`. Name the error
    /// type, as Swift cannot infer it from a value: `Promise<Int, LookupError>(value: 1)`. Where
    /// the type is known from context, ``value(_:)`` is shorter.
    @inlinable public init(value: Value) { self.init(result: .success(value)) }

    /// Makes a promise that succeeds with `value`, where the promise's type is known from context.
    ///
    /// The same as ``init(value:)``, shorter as one branch of a choice, where the other branch
    /// gives the type: `isFresh ? .value(cached) : fetchFeed()`.
    @inlinable public static func value(_ value: Value) -> Promise { Promise(value: value) }
}

nonisolated extension Promise where Value == Void {
    /// Makes a promise that succeeds at once with no value.
    ///
    /// PromiseKit's `Promise()` and `Guarantee()`: a start for a chain whose first step needs no
    /// input, or a branch with nothing to do: `isFresh ? Guarantee() : cachedFeed().asVoid()`.
    @inlinable public init() { self.init(value: ()) }
}

/// Not for a closure that throws: a `firstly` closure returns `Promise(error:)` instead.
// swift-format-ignore
@available(*, unavailable, message: "a firstly closure cannot throw: return Promise(error:) instead")
nonisolated public func firstly<Value, Failure>(
    _ body: @escaping @Sendable () throws -> Promise<Value, Failure>
) -> Promise<Value, Failure> { fatalError() }

/// Starts a chain with the promise `body` makes anew on every run.
///
/// It lines the steps up, each on a line of its own, as PromiseKit's `firstly` does; `body` is
/// called when a run starts, not when the chain is built. Calling the function that makes the first
/// promise directly does the same work, as a promise is lazy anyway.
///
/// ```swift
/// firstly { login() }
///     .then { credentials in fetchAvatar(for: credentials.user) }
///     .run(some: show, none: report)
/// ```
@inlinable nonisolated public func firstly<Value, Failure>(
    _ body: @escaping @Sendable () -> Promise<Value, Failure>
) -> Promise<Value, Failure> {
    Promise<Void, Failure>(value: ()).flatMap { body() }
}
