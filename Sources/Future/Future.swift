// Future: a lazy, value-type promise in one file.
//
// Read it top to bottom: the type, how to make one, how to run it, how to chain steps, how to
// handle errors, how to cancel, how to share one run, how to use it from async code, and last the
// engine that runs a chain. Copy this file into your project as it is; it needs only the Swift
// standard library and the platform C library.

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

// MARK: - Promise

/// A description of asynchronous work that produces a `Value` or fails with a `Failure`.
///
/// A promise is lazy. Making one, and chaining steps onto it, only describes work: nothing runs
/// until a terminal such as ``run(some:none:)`` starts it, and every run starts the work anew.
///
/// ```swift
/// let answer = Promise<Int, Never> { resolver in resolver.fulfill(41) }
///     .then { $0 + 1 }
/// answer.run(some: { print($0) })  // prints 42
/// answer.run(some: { print($0) })  // runs the operation again, and prints 42 again
/// ```
///
/// Because a promise is a value, it is cheap to copy, to return from a function, to keep, and
/// to run again. Errors are typed: a `Promise<Value, Never>` (``Guarantee``) cannot fail, so the
/// compiler knows when error handling is still owed.
///
/// A promise is `Sendable`: keep one in a `static let`, hand it to another task or queue, run it
/// from any thread. The compiler checks that this is safe: every closure a promise keeps is
/// `@Sendable`, because two runs of one promise may call it at the same time, on two threads.
public struct Promise<Value, Failure: Swift.Error>: Sendable {
    /// The last step of the chain; each step knows the one before it (see Internals).
    @usableFromInline let last: RunHandle.Stage

    @inlinable init(last: RunHandle.Stage) { self.last = last }
}

/// A promise that cannot fail.
///
/// ```swift
/// let one: Guarantee<Int> = Guarantee(value: 1)
/// one.run(some: { print($0) })  // no error handler needed
/// ```
public typealias Guarantee<Value> = Promise<Value, Never>

/// The errors Future raises itself.
public enum PromiseError: Swift.Error, Equatable, Sendable {
    /// A completion handler passed neither a value nor an error to ``Resolver/resolve(_:_:)``.
    case missingValue
    /// The transform given to ``Promise/compactMap(_:)`` returned `nil`.
    case compactMapReturnedNil
    /// The promise did not settle within the interval given to ``Promise/timeout(_:)``.
    case timedOut
}

// MARK: - Resolver

/// What an operation receives, to report its outcome and to learn that its run was cancelled.
///
/// Call it with a `Result` (`resolver(.success(data))`), or use ``fulfill(_:)`` and
/// ``reject(_:)``. Only the first outcome counts and later ones are ignored, so racing callbacks
/// are harmless. A resolver may be called from any thread, while the operation runs or after it
/// returned. The run goes on from the thread that is free to carry it: the resolving thread if the
/// operation had returned, otherwise the operation's own thread once it returns. So resolving from
/// `queue.async { … }` does not promise that the next step runs on `queue`.
///
/// ```swift
/// func download(_ url: URL) -> Promise<Data, any Error> {
///     Promise { resolver in
///         let task = URLSession.shared.dataTask(with: url) { data, _, error in
///             resolver.resolve(data, error)
///         }
///         resolver.onCancel { _ in task.cancel() }
///         task.resume()
///     }
/// }
/// ```
///
/// An operation must resolve, or end its run with ``cancel()``. One that lets its resolver go
/// without doing either can never finish: its run is cancelled, and debug builds report the
/// mistake, naming the file and line where the promise was made.
public final class Resolver<Value, Failure: Swift.Error>: @unchecked Sendable {
    @usableFromInline let run: RunHandle
    @usableFromInline let operation: Int
    #if DEBUG
        let file: StaticString
        let line: UInt
    #endif

    @usableFromInline init(run: RunHandle, operation: Int, file: StaticString, line: UInt) {
        self.run = run
        self.operation = operation
        #if DEBUG
            (self.file, self.line) = (file, line)
        #endif
    }

    deinit {
        #if DEBUG
            run.resolverReleased(
                operation, "Promise<\(Value.self), \(Failure.self)> made at \(file):\(line)")
        #else
            run.resolverReleased(operation, "")
        #endif
    }

    /// Reports the outcome of the operation.
    @inlinable public func callAsFunction(_ result: sending Swift.Result<Value, Failure>) {
        run.resolve(operation) { slot in slot.put(result) }
    }

    /// Reports success.
    @inlinable public func fulfill(_ value: sending Value) { self(.success(value)) }

    /// Reports failure.
    @inlinable public func reject(_ error: Failure) { self(.failure(error)) }

    /// Ends the run as cancelled, for work that learns it was cancelled elsewhere.
    ///
    /// The run then ends as if its handle's ``RunHandle/cancel()`` had been called.
    public func cancel() { run.cancel(operation) }

    /// Whether the run was cancelled; a long operation can check it to stop early.
    public var isCancelled: Bool { run.isCancelled }

    /// Registers work to do if the run is cancelled before this operation resolves.
    ///
    /// The handler runs at most once, on the thread that cancels, and at once if the run is already
    /// cancelled; it is dropped unrun once the operation resolves. It receives this operation's
    /// resolver, so it need not capture it: a handler that keeps its own resolver alive would keep
    /// the whole run alive, even when the work that should resolve it is gone.
    public func onCancel(_ handler: @escaping @Sendable (Resolver) -> Void) {
        let (operation, file, line) = (operation, StaticString("a cancel handler"), UInt(0))
        run.onCancel(operation) { run in
            handler(Resolver(run: run, operation: operation, file: file, line: line))
        }
    }
}

extension Resolver where Value == Void {
    /// Reports success for an operation that produces no value.
    @inlinable public func fulfill() { self(.success(())) }
}

extension Resolver where Failure == any Swift.Error {
    /// Reports the outcome a completion handler passes as an optional value and optional error.
    ///
    /// An error wins over a value; with neither, the operation fails with
    /// ``PromiseError/missingValue``. Pass it where a callback is expected:
    /// `fetch(completion: resolver.resolve)`.
    public func resolve(_ value: sending Value?, _ error: (any Swift.Error)?) {
        if let error {
            reject(error)
        } else if let value {
            fulfill(value)
        } else {
            reject(PromiseError.missingValue)
        }
    }
}

extension Resolver where Failure == any Swift.Error {
    /// Like ``resolve(_:_:)``, but an error that `isCancellation` recognizes (say,
    /// `URLError.cancelled`) ends the run as cancelled instead.
    ///
    /// ```swift
    /// resolver.resolve(data, error, cancelledIf: { ($0 as? URLError)?.code == .cancelled })
    /// ```
    public func resolve(
        _ value: sending Value?, _ error: (any Swift.Error)?,
        cancelledIf isCancellation: (any Swift.Error) -> Bool
    ) {
        if let error, isCancellation(error) { cancel() } else { resolve(value, error) }
    }
}

extension Resolver where Value == Void, Failure == any Swift.Error {
    /// Reports the outcome a completion handler passes as an optional error.
    public func resolve(_ error: (any Swift.Error)?) {
        if let error { reject(error) } else { fulfill() }
    }
}

// MARK: - Making promises

extension Promise {
    /// The steps of a chain keep what they need in nodes (see Internals).
    @usableFromInline typealias Node<Payload: Sendable> = RunHandle.Node<Payload>
    @usableFromInline typealias Outcome = Swift.Result<Value, Failure>

    /// Makes a promise from an operation that reports its outcome through a ``Resolver``.
    ///
    /// The operation runs once per run, on the thread that starts the run (or that finished the
    /// step before it), and may resolve at once or later from any thread:
    ///
    /// ```swift
    /// let tick = Promise<Int, Never> { resolver in
    ///     DispatchQueue.global().async { resolver.fulfill(1) }
    /// }
    /// ```
    ///
    /// `file` and `line` name the promise in debug reports; leave them to their defaults.
    @inlinable public init(
        file: StaticString = #fileID, line: UInt = #line,
        _ operation: @escaping @Sendable (Resolver<Value, Failure>) -> Void
    ) {
        self.init(last: RunHandle.Source(operation, file: file, line: line))
    }

    /// Makes a promise from async code: each run starts a `Task` that calls `work`, and cancelling
    /// the run cancels that task.
    ///
    /// ```swift
    /// let page = Promise<Data, any Error> { try await URLSession.shared.data(from: url).0 }
    /// ```
    @inlinable public init(
        file: StaticString = #fileID, line: UInt = #line,
        _ work: @escaping @Sendable () async throws(Failure) -> Value
    ) {
        self.init(file: file, line: line) { resolver in
            let task = Task {
                do throws(Failure) {
                    resolver.fulfill(try await work())
                } catch {
                    resolver.reject(error)
                }
            }
            resolver.onCancel { _ in task.cancel() }
        }
    }

    /// Makes a promise that fails with `error`.
    @inlinable public init(error: Failure) {
        self.init(
            last: Node(error, after: nil, output: Outcome.self) { stage, slot, _ in
                slot.put(Outcome.failure(Node<Failure>.payload(of: stage)))
                return .proceed
            })
    }

    /// Makes a promise that calls `body` on every run, failing with what it throws.
    ///
    /// ```swift
    /// let config = Promise<Config, DecodingError>(catching: { () throws(DecodingError) in
    ///     try loadConfig()
    /// })
    /// ```
    @inlinable public init(catching body: @escaping @Sendable () throws(Failure) -> Value) {
        self = Promise<Void, Failure>(value: ()).then { () -> Outcome in
            Swift.Result { () throws(Failure) in try body() }
        }
    }
}

extension Promise where Value: Sendable {
    /// Makes a promise that succeeds or fails with `result` every time it runs.
    ///
    /// The value must be `Sendable`, because every run hands the same value on, from any thread.
    @inlinable public init(result: Swift.Result<Value, Failure>) {
        self.init(
            last: Node(result, after: nil, output: Outcome.self) { stage, slot, _ in
                slot.put(Node<Outcome>.payload(of: stage))
                return .proceed
            })
    }

    /// Makes a promise that succeeds with `value`.
    @inlinable public init(value: Value) { self.init(result: .success(value)) }

    /// Makes a promise that succeeds with `value`: `return .value(cached)`.
    @inlinable public static func value(_ value: Value) -> Promise { Promise(value: value) }
}

/// Starts a chain with the promise `body` makes; `body` is called anew on every run.
///
/// Pure sugar that lines up the first step with the ones after it:
///
/// ```swift
/// firstly {
///     login()
/// }.then { credentials in
///     fetchAvatar(for: credentials.user)
/// }.run(some: show, none: report)
/// ```
@inlinable public func firstly<Value, Failure>(
    _ body: @escaping @Sendable () -> Promise<Value, Failure>
) -> Promise<Value, Failure> {
    Promise<Void, Failure>(value: ()).flatMap { body() }
}

// MARK: - Running

extension Promise {
    /// Starts the work and calls `completion` with its outcome.
    ///
    /// Each call starts a new, independent run. `completion` is called at most once, on the
    /// thread where the last step finished, and never after the run is cancelled.
    @discardableResult
    public func run(
        _ completion: @escaping @Sendable (Swift.Result<Value, Failure>) -> Void
    ) -> RunHandle {
        let handle = RunHandle(last: last)
        handle.start { slot in if let slot { completion(slot.take(Outcome.self)) } }
        return handle
    }

    /// Starts the work and calls `some` with its value or `none` with its error.
    ///
    /// ```swift
    /// iTunesLookUp(id: "909253")
    ///     .then(toDictionary)
    ///     .then(toModel)
    ///     .run(some: printName, none: report)
    /// ```
    @discardableResult
    public func run(
        some: @escaping @Sendable (Value) -> Void, none: @escaping @Sendable (Failure) -> Void
    ) -> RunHandle {
        run { outcome in
            switch outcome {
            case .success(let value): some(value)
            case .failure(let error): none(error)
            }
        }
    }

    /// Starts a run that reports how it ended: with its outcome, or `nil` if it was cancelled.
    /// `end` is called exactly once, after the `ensure` steps of a cancelled run.
    func start(
        _ end: @escaping @Sendable (sending Swift.Result<Value, Failure>?) -> Void
    ) -> RunHandle {
        let handle = RunHandle(last: last)
        handle.start { slot in end(slot?.take(Outcome.self)) }
        return handle
    }
}

extension Promise where Failure == Never {
    /// Starts work that cannot fail, for its effects alone.
    @discardableResult
    public func run() -> RunHandle { run { (_: Swift.Result<Value, Never>) in } }

    /// Starts work that cannot fail and calls `some` with its value.
    ///
    /// A trailing closure alone still means ``run(_:)``, which passes a `Result`, as it does for
    /// every promise; write the label to get the value: `guarantee.run(some: { show($0) })`.
    @discardableResult @_disfavoredOverload
    public func run(some: @escaping @Sendable (Value) -> Void) -> RunHandle {
        run { outcome in
            switch outcome {
            case .success(let value): some(value)
            }
        }
    }
}

// MARK: - Transforming values

// The builders below are `@inlinable` so that a chain built in your module is compiled for your
// types: each step then costs one allocation to build and no dynamic casts to run.

extension Promise {
    /// Transforms the value when the promise succeeds.
    ///
    /// ```swift
    /// let length = name.then { $0.count }
    /// ```
    ///
    /// (This form is disfavored, so that a step returning a promise or a result chains instead of
    /// becoming the next value; `map` says the same with one form, which type-checks faster.)
    @inlinable @_disfavoredOverload public func then<NewValue>(
        _ transform: @escaping @Sendable (Value) -> NewValue
    ) -> Promise<NewValue, Failure> { map(transform) }

    /// Continues with the promise that `next` makes from the value: the chain waits for it.
    ///
    /// ```swift
    /// let avatar = login().then { credentials in fetchAvatar(for: credentials.user) }
    /// ```
    @inlinable public func then<NewValue>(
        _ next: @escaping @Sendable (Value) -> Promise<NewValue, Failure>
    ) -> Promise<NewValue, Failure> { flatMap(next) }

    /// Continues with a step that succeeds or fails at once.
    ///
    /// ```swift
    /// func toDictionary(from data: Data) -> Result<[String: Any], LookupError> { … }
    /// let dictionary = download.then(toDictionary)
    /// ```
    @inlinable public func then<NewValue>(
        _ transform: @escaping @Sendable (Value) -> Swift.Result<NewValue, Failure>
    ) -> Promise<NewValue, Failure> {
        typealias Transform = @Sendable (Value) -> Swift.Result<NewValue, Failure>
        return appending(transform) { stage, slot, _ in
            slot.put(slot.take(Outcome.self).flatMap(Node<Transform>.payload(of: stage)))
            return .proceed
        }
    }

    /// Continues with a promise that cannot fail: a ``Guarantee`` joins a chain of any error type.
    ///
    /// ```swift
    /// let avatar = login().then { user in cachedAvatar(for: user) }  // cachedAvatar: Guarantee
    /// ```
    @inlinable @_disfavoredOverload public func then<NewValue>(
        _ next: @escaping @Sendable (Value) -> Guarantee<NewValue>
    ) -> Promise<NewValue, Failure> {
        flatMap { next($0).setFailureType(to: Failure.self) }
    }

    /// Continues with a promise of another error type, so the chain fails with `any Error` after.
    ///
    /// Swift cannot reject this call outright, so it warns instead: a step that fails with another
    /// error type than its chain is more often a slip than a choice.
    // swift-format-ignore: LineLength
    @available(
        *, deprecated,
        message:
            "the step's promise fails with another error type, so the chain's error becomes `any Error`; convert it with mapError(_:) (or setFailureType(to:) on a Guarantee), or call eraseToAnyError() to say so"
    )
    @inlinable @_disfavoredOverload public func then<NewValue, StepFailure>(
        _ next: @escaping @Sendable (Value) -> Promise<NewValue, StepFailure>
    ) -> Promise<NewValue, any Swift.Error> {
        eraseToAnyError().flatMap { next($0).eraseToAnyError() }
    }

    /// Continues with a step whose result has another error type, so the chain fails with
    /// `any Error` after; Swift warns about it, as about the promise-returning form.
    // swift-format-ignore: LineLength
    @available(
        *, deprecated,
        message:
            "the step's result fails with another error type, so the chain's error becomes `any Error`; convert it with mapError(_:), or call eraseToAnyError() on the chain to say so"
    )
    @inlinable @_disfavoredOverload public func then<NewValue, StepFailure>(
        _ transform: @escaping @Sendable (Value) -> Swift.Result<NewValue, StepFailure>
    ) -> Promise<NewValue, any Swift.Error> {
        mapOutcome { outcome in
            outcome.mapError { $0 as any Swift.Error }.flatMap {
                transform($0).mapError { $0 as any Swift.Error }
            }
        }
    }

    /// Transforms the value when the promise succeeds; unlike `then`, `map` has one form only, so
    /// a long chain of `map` steps type-checks faster.
    @inlinable public func map<NewValue>(
        _ transform: @escaping @Sendable (Value) -> NewValue
    ) -> Promise<NewValue, Failure> {
        typealias Transform = @Sendable (Value) -> NewValue
        return appending(transform) { stage, slot, _ in
            slot.put(slot.take(Outcome.self).map(Node<Transform>.payload(of: stage)))
            return .proceed
        }
    }

    /// Continues with the promise that `next` makes from the value; `then` with such a step.
    @inlinable public func flatMap<NewValue>(
        _ next: @escaping @Sendable (Value) -> Promise<NewValue, Failure>
    ) -> Promise<NewValue, Failure> {
        typealias Next = @Sendable (Value) -> Promise<NewValue, Failure>
        return appending(next) { stage, slot, _ in
            switch slot.take(Outcome.self) {
            case .success(let value): return .enter(Node<Next>.payload(of: stage)(value).last)
            case .failure(let error):
                slot.put(Swift.Result<NewValue, Failure>.failure(error))
                return .proceed
            }
        }
    }

    /// Transforms the value with a function that can throw `Failure`.
    ///
    /// ```swift
    /// let user = data.tryMap { (data) throws(any Error) in try decoder.decode(User.self, from: data) }
    /// ```
    @inlinable public func tryMap<NewValue>(
        _ transform: @escaping @Sendable (Value) throws(Failure) -> NewValue
    ) -> Promise<NewValue, Failure> {
        then { value -> Swift.Result<NewValue, Failure> in
            Swift.Result { () throws(Failure) in try transform(value) }
        }
    }

    /// Transforms the value, failing with `error` when the transform returns `nil`.
    ///
    /// ```swift
    /// let first = results.compactMap(orFailWith: .noResultFound) { $0.first }
    /// ```
    @inlinable public func compactMap<NewValue>(
        orFailWith error: @autoclosure @escaping @Sendable () -> Failure,
        _ transform: @escaping @Sendable (Value) -> NewValue?
    ) -> Promise<NewValue, Failure> {
        then { value -> Swift.Result<NewValue, Failure> in
            transform(value).map { .success($0) } ?? .failure(error())
        }
    }

    /// Ends the success path with a side effect; the result is a `Promise<Void, Failure>`.
    @inlinable public func done(
        _ body: @escaping @Sendable (Value) -> Void
    ) -> Promise<Void, Failure> { map(body) }

    /// Looks at the value without changing it.
    ///
    /// ```swift
    /// fetchUser().get { cache.store($0) }.then { render($0) }
    /// ```
    @inlinable public func get(
        _ body: @escaping @Sendable (Value) -> Void
    ) -> Promise<Value, Failure> {
        map { value -> Value in
            body(value)
            return value
        }
    }

    /// Looks at the outcome, success or failure, without changing it: handy for logging.
    @inlinable public func tap(
        _ body: @escaping @Sendable (Swift.Result<Value, Failure>) -> Void
    ) -> Promise<Value, Failure> {
        mapOutcome { outcome in
            body(outcome)
            return outcome
        }
    }
}

extension Promise where Failure == any Swift.Error {
    /// Transforms the value, failing with ``PromiseError/compactMapReturnedNil`` on `nil`.
    ///
    /// ```swift
    /// let names = data.compactMap { try? JSONSerialization.jsonObject(with: $0) as? [String] }
    /// ```
    @inlinable public func compactMap<NewValue>(
        _ transform: @escaping @Sendable (Value) -> NewValue?
    ) -> Promise<NewValue, Failure> {
        compactMap(orFailWith: PromiseError.compactMapReturnedNil, transform)
    }
}

// MARK: - Handling errors

extension Promise {
    /// Transforms the error when the promise fails.
    @inlinable public func mapError<NewFailure>(
        _ transform: @escaping @Sendable (Failure) -> NewFailure
    ) -> Promise<Value, NewFailure> {
        mapOutcome { $0.mapError(transform) }
    }

    /// Turns an error into a value or into another error, at once.
    ///
    /// ```swift
    /// let page = fetch.flatMapError { error in
    ///     error == .notFound ? .success(.empty) : .failure(.unavailable)
    /// }
    /// ```
    @inlinable public func flatMapError<NewFailure>(
        _ transform: @escaping @Sendable (Failure) -> Swift.Result<Value, NewFailure>
    ) -> Promise<Value, NewFailure> {
        mapOutcome { $0.flatMapError(transform) }
    }

    /// Continues with the promise `next` makes from the error; a success passes through.
    ///
    /// When `next` returns a ``Guarantee``, the result cannot fail:
    ///
    /// ```swift
    /// let feed = fetchFeed().recover { _ in loadCachedFeed() }  // Guarantee<Feed>
    /// ```
    @inlinable public func recover<NewFailure>(
        _ next: @escaping @Sendable (Failure) -> Promise<Value, NewFailure>
    ) -> Promise<Value, NewFailure> {
        typealias Next = @Sendable (Failure) -> Promise<Value, NewFailure>
        return appending(next) { stage, slot, _ in
            switch slot.take(Outcome.self) {
            case .success(let value):
                slot.put(Swift.Result<Value, NewFailure>.success(value))
                return .proceed
            case .failure(let error): return .enter(Node<Next>.payload(of: stage)(error).last)
            }
        }
    }

    /// Replaces an error with a value, so the result cannot fail.
    @inlinable public func recover(
        _ transform: @escaping @Sendable (Failure) -> Value
    ) -> Guarantee<Value> {
        mapOutcome { outcome in
            switch outcome {
            case .success(let value): .success(value)
            case .failure(let error): .success(transform(error))
            }
        }
    }

    /// Handles the error and ends the success path; what is left is a ``Guarantee`` to run.
    ///
    /// ```swift
    /// fetchFeed()
    ///     .done { show($0) }
    ///     .catch { showError($0) }
    ///     .run()
    /// ```
    @inlinable public func `catch`(_ body: @escaping @Sendable (Failure) -> Void) -> Guarantee<Void>
    {
        mapOutcome { outcome in
            if case .failure(let error) = outcome { body(error) }
            return .success(())
        }
    }

    /// Runs `body` when the chain gets here, whether it succeeded or failed, and also when the
    /// run is cancelled before getting here. The outcome passes through unchanged.
    ///
    /// ```swift
    /// spinner.start()
    /// fetchFeed().ensure { spinner.stop() }.run(some: show, none: report)
    /// ```
    @inlinable public func ensure(
        _ body: @escaping @Sendable () -> Void
    ) -> Promise<Value, Failure> {
        appending(body, isEnsure: true) { stage, _, _ in
            Node<@Sendable () -> Void>.payload(of: stage)()
            return .proceed
        }
    }

    /// Forgets the error's type, to chain with promises that fail with `any Error`.
    @inlinable public func eraseToAnyError() -> Promise<Value, any Swift.Error> {
        mapOutcome { $0.mapError { $0 } }
    }

    /// Adds a step that sees the whole outcome and returns the next one at once.
    @inlinable func mapOutcome<NewValue, NewFailure>(
        _ transform: @escaping @Sendable (Outcome) -> Swift.Result<NewValue, NewFailure>
    ) -> Promise<NewValue, NewFailure> {
        typealias Transform = @Sendable (Outcome) -> Swift.Result<NewValue, NewFailure>
        return appending(transform) { stage, slot, _ in
            slot.put(Node<Transform>.payload(of: stage)(slot.take(Outcome.self)))
            return .proceed
        }
    }

    /// Adds a step that keeps `payload` and runs `step` with it.
    @inlinable func appending<Payload: Sendable, NewValue, NewFailure>(
        _ payload: Payload, isEnsure: Bool = false, _ step: @escaping RunHandle.Stage.Step
    ) -> Promise<NewValue, NewFailure> {
        typealias Output = Swift.Result<NewValue, NewFailure>
        return Promise<NewValue, NewFailure>(
            last: Node(payload, after: last, output: Output.self, isEnsure: isEnsure, step))
    }
}

extension Promise where Failure == Never {
    /// Continues a chain that cannot fail with a promise that can: the chain takes its error type.
    ///
    /// ```swift
    /// after(.seconds(1)).then { fetchStatus() }  // a Promise<Status, FetchError>
    /// ```
    @inlinable @_disfavoredOverload public func then<NewValue, NewFailure>(
        _ next: @escaping @Sendable (Value) -> Promise<NewValue, NewFailure>
    ) -> Promise<NewValue, NewFailure> {
        setFailureType(to: NewFailure.self).flatMap(next)
    }

    /// Gives a promise that cannot fail the error type of the chain it joins.
    ///
    /// ```swift
    /// let cached: Promise<Feed, FeedError> = cachedFeed().setFailureType(to: FeedError.self)
    /// ```
    @inlinable public func setFailureType<NewFailure>(
        to _: NewFailure.Type
    ) -> Promise<Value, NewFailure> {
        mapOutcome { outcome in
            switch outcome {
            case .success(let value): .success(value)
            }
        }
    }
}

// MARK: - Combining

/// Runs every promise at once and succeeds with their values, in the order given, whatever order
/// they finish in. Fails with the first error to arrive, and then cancels the promises still
/// running; no promises succeed with `[]` at once.
///
/// ```swift
/// when(fulfilled: ids.map(fetchUser)).done { users in show(users) }
/// ```
public func when<Value, Failure>(
    fulfilled promises: [Promise<Value, Failure>]
) -> Promise<[Value], Failure> {
    when(fulfilled: promises, concurrently: .max)
}

/// Like ``when(fulfilled:)-(Array)``, running at most `limit` promises at a time: the next starts
/// as one finishes. A promise is a recipe, so plain promises will do: none starts before its turn.
///
/// A `limit` below 1 is a precondition failure.
///
/// ```swift
/// when(fulfilled: urls.map(download), concurrently: 4)
/// ```
public func when<Value, Failure>(
    fulfilled promises: [Promise<Value, Failure>], concurrently limit: Int
) -> Promise<[Value], Failure> {
    precondition(limit > 0, "when(fulfilled:concurrently:) needs a limit of at least 1")
    return RunHandle.join(promises, limit) { tally, ending in
        switch ending {
        case .outcome(_, .failure(let error)): .settle(.failure(error))
        case .cancelled: .cancel
        default: tally.isComplete ? .settle(.success(tally.values)) : .wait
        }
    }
}

/// Runs promises of different types at once and succeeds with a tuple of their values.
///
/// ```swift
/// when(fulfilled: fetchUser(id), fetchAvatar(id), fetchFriends(id))
///     .done { user, avatar, friends in show(user, avatar, friends) }
/// ```
public func when<each Value, Failure>(
    fulfilled promise: repeat Promise<each Value, Failure>
) -> Promise<(repeat each Value), Failure> {
    var members: [Promise<Any, Failure>] = []
    repeat members.append((each promise).map { $0 })
    return when(fulfilled: members).map { values in
        var index = -1
        func next<Element>() -> Element {
            index += 1
            return values[index] as! Element
        }
        return (repeat next() as each Value)
    }
}

/// Runs every promise of a dictionary at once and succeeds with their values under their keys.
///
/// ```swift
/// when(fulfilled: ["avatar": avatar, "header": header]).done { images in show(images) }
/// ```
public func when<Key: Hashable & Sendable, Value, Failure>(
    fulfilled promises: [Key: Promise<Value, Failure>]
) -> Promise<[Key: Value], Failure> {
    let (keys, members) = (Array(promises.keys), Array(promises.values))
    return when(fulfilled: members).map { Dictionary(uniqueKeysWithValues: zip(keys, $0)) }
}

/// Runs every promise at once and succeeds, once all have finished, with every outcome in the
/// order given. It never fails.
public func when<Value, Failure>(
    resolved promises: [Promise<Value, Failure>]
) -> Guarantee<[Swift.Result<Value, Failure>]> {
    RunHandle.join(promises) { tally, ending in
        if case .cancelled = ending { return .cancel }
        return tally.isComplete ? .settle(.success(tally.results)) : .wait
    }
}

/// Runs every promise at once, waits for all, and succeeds with every outcome in the order given,
/// unless every one failed: then it fails with all their errors. No promises succeed with `[]`.
///
/// ```swift
/// any(mirrors.map(download)).done { outcomes in use(outcomes.compactMap { try? $0.get() }) }
/// ```
public func any<Value, Failure>(
    _ promises: [Promise<Value, Failure>]
) -> Promise<[Swift.Result<Value, Failure>], AllPromisesFailedError<Failure>> {
    RunHandle.join(promises) { tally, ending in
        if case .cancelled = ending { return .cancel }
        guard tally.isComplete else { return .wait }
        let errors = tally.errors
        return errors.isEmpty || errors.count < tally.count
            ? .settle(.success(tally.results)) : .settle(.failure(AllPromisesFailedError(errors)))
    }
}

/// Runs every promise at once; the first to finish, with a value or an error, decides, and the
/// others are cancelled.
///
/// A member whose run ends by cancellation drops out of the race; when every member has (and so
/// when racing no promises at all), nothing can win and the race ends by cancellation.
public func race<Value, Failure>(_ promises: [Promise<Value, Failure>]) -> Promise<Value, Failure> {
    RunHandle.join(promises) { tally, ending in
        if case .outcome(_, let outcome) = ending { return .settle(outcome) }
        return tally.isComplete ? .cancel : .wait
    }
}

/// Runs every promise at once; the first value wins and the others are cancelled. Errors drop out
/// of the race, which fails only when every promise failed, with all their errors (racing no
/// promises fails at once). If some ended by cancellation and the rest failed, the race ends by
/// cancellation.
///
/// ```swift
/// race(fulfilled: mirrors.map(download)).done { data in use(data) }
/// ```
public func race<Value, Failure>(
    fulfilled promises: [Promise<Value, Failure>]
) -> Promise<Value, AllPromisesFailedError<Failure>> {
    RunHandle.join(promises) { tally, ending in
        if case .outcome(_, .success(let value)) = ending { return .settle(.success(value)) }
        guard tally.isComplete else { return .wait }
        return tally.cancelled > 0
            ? .cancel : .settle(.failure(AllPromisesFailedError(tally.errors)))
    }
}

/// The error of a combination that needed a success and got none: every error, in input order.
public struct AllPromisesFailedError<Failure: Swift.Error>: Swift.Error {
    /// The errors of the promises, in the order the promises were given.
    public let errors: [Failure]

    /// Makes the error from the members' errors, in input order.
    public init(_ errors: [Failure]) { self.errors = errors }
}

extension AllPromisesFailedError: Equatable where Failure: Equatable {}

extension Promise {
    /// On a promise of an array: turns each element into a promise and joins them in order, like
    /// ``when(fulfilled:)-(Array)``, at most `limit` at a time.
    ///
    /// ```swift
    /// fetchFollowers(of: user).thenMap(concurrently: 4) { fetchAvatar(for: $0) }
    /// ```
    public func thenMap<Element, NewValue>(
        concurrently limit: Int = .max,
        _ transform: @escaping @Sendable (Element) -> Promise<NewValue, Failure>
    ) -> Promise<[NewValue], Failure> where Value == [Element] {
        precondition(limit > 0, "thenMap(concurrently:_:) needs a limit of at least 1")
        return flatMap { when(fulfilled: $0.map(transform), concurrently: limit) }
    }
}

// MARK: - Time

/// A guarantee that succeeds after `interval`. Its run holds no thread while it waits, and
/// cancelling the run cancels the timer.
///
/// ```swift
/// after(.seconds(1)).then { fetchStatus() }
/// ```
public func after(_ interval: Duration) -> Guarantee<Void> {
    Guarantee(value: ()).delay(interval)
}

extension Promise {
    /// Passes the outcome on, a value or an error alike, `interval` later, on a global queue.
    public func delay(_ interval: Duration) -> Promise {
        let (seconds, attoseconds) = interval.components
        let nanoseconds = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        let delay =
            nanoseconds.overflow
            ? Int64.max : nanoseconds.partialValue + attoseconds / 1_000_000_000
        return appending(delay) { stage, _, _ in
            .hop(.global(), .now() + .nanoseconds(Int(clamping: Node<Int64>.payload(of: stage))))
        }
    }

    /// Fails with `error()` and cancels the work if the promise has not settled within `interval`;
    /// settling in time cancels the timer.
    ///
    /// ```swift
    /// download(url).timeout(.seconds(10), orFailWith: .timedOut)
    /// ```
    public func timeout(
        _ interval: Duration, orFailWith error: @autoclosure @escaping @Sendable () -> Failure
    ) -> Promise {
        let timer = after(interval).setFailureType(to: Failure.self).flatMap {
            Promise(error: error())
        }
        return RunHandle.join([self, timer]) { _, ending in
            if case .outcome(_, let outcome) = ending { .settle(outcome) } else { .cancel }
        }
    }

    /// Runs the work again after a failure, at most `attempts` runs in all, waiting `delay`
    /// before each new attempt, and only while `shouldRetry` accepts the error. An `attempts`
    /// below 1 is a precondition failure.
    ///
    /// ```swift
    /// fetchFeed().retry(3, delay: .seconds(1), while: { $0.isTransient })
    /// ```
    public func retry(
        _ attempts: Int, delay: Duration = .zero,
        while shouldRetry: @escaping @Sendable (Failure) -> Bool = { _ in true }
    ) -> Promise {
        precondition(attempts > 0, "retry(_:delay:while:) needs at least 1 attempt")
        guard attempts > 1 else { return self }
        return recover { error in
            guard shouldRetry(error) else { return Promise(error: error) }
            let pause = delay == .zero ? Guarantee(value: ()) : after(delay)
            return pause.setFailureType(to: Failure.self).flatMap {
                retry(attempts - 1, delay: delay, while: shouldRetry)
            }
        }
    }
}

extension Promise where Failure == any Swift.Error {
    /// Fails with ``PromiseError/timedOut`` and cancels the work if the promise has not settled
    /// within `interval`.
    public func timeout(_ interval: Duration) -> Promise {
        timeout(interval, orFailWith: PromiseError.timedOut)
    }
}

// MARK: - Where code runs

// A step runs where the step before it finished: the thread that started the run, or the one
// that resolved an operation. `on` is the one way to choose: a hop, made every time.

/// A guarantee whose run goes on on `queue`: start the work there with `on(queue).then { … }`.
public func on(_ queue: DispatchQueue) -> Guarantee<Void> { Guarantee(value: ()).on(queue) }

extension Promise {
    /// Runs the steps after this point on `queue`, every time, however the work before settled.
    /// A run cancelled while it waits for the queue goes no further.
    ///
    /// ```swift
    /// fetchFeed().on(.main).done { feed in show(feed) }.run()
    /// ```
    public func on(_ queue: DispatchQueue) -> Promise {
        appending(queue) { stage, _, _ in .hop(Node<DispatchQueue>.payload(of: stage), nil) }
    }
}

// MARK: - Cancelling a run

/// A run of a promise, returned by every terminal: use it to cancel the run.
///
/// After ``cancel()`` no completion is delivered, every operation still waiting gets its
/// ``Resolver/onCancel(_:)`` handlers called once, no later step starts, and every
/// ``Promise/ensure(_:)`` still ahead runs. Cancelling is idempotent and safe from any thread.
/// Dropping the handle does not cancel: a run you do not keep goes on to its end.
///
/// A step that cancels its own run stops it before the next step. Cancelled from another thread
/// while steps are running one after the other, the run stops at the next operation, the next
/// promise a step returns, or its end: steps take no lock, so that a chain stays cheap.
///
/// ```swift
/// let search = lookUp(query).run(some: show, none: report)
/// // the user typed again:
/// search.cancel()
/// ```
public final class RunHandle: @unchecked Sendable {
    private var slot: Slot
    private var slotSize: Int
    private var slotAlignment: Int
    /// The type of the run's outcome, to destroy one that arrives after the run was cancelled.
    private let output: any Outcome.Type

    // Owned by the one thread that drives the run; ownership passes under `lock`.
    private var plan: Plan
    private var finish: ((Slot?) -> Void)?
    /// Set when a step cancels its own run, so that the very next step does not start.
    @exclusivity(unchecked) private var cancelledByStep = false

    // Guarded by `lock`.
    private let lock = Lock()
    private var phase = Phase.driving
    private var cancelRequested = false
    private var operation = 0
    private var resolved = 0
    private var cancelHandlers: [@Sendable (RunHandle) -> Void] = []
    private var driver = pthread_self()
    /// Set while a canceller runs the handlers: it halts the run after them, so that `ensure`
    /// steps run only once every handler has returned.
    private var cancelling = false
    /// What the run waits for while it hops to a queue, and the type of the outcome it holds.
    private var hop: (work: DispatchWorkItem, held: any Outcome.Type)?

    private enum Phase { case driving, operating, waiting, finished }

    init(last: Stage) {
        (slotSize, slotAlignment) = (last.slotSize, last.slotAlignment)
        slot = Slot(size: slotSize, alignment: slotAlignment)
        output = last.output
        plan = Plan(last)
    }

    deinit {
        slot.memory.deallocate()
        lock.free()
    }

    /// Whether ``cancel()`` was called before the run finished, or its operation was abandoned.
    public var isCancelled: Bool { locked { cancelRequested } }

    /// Cancels the run; see ``RunHandle`` for what that does.
    public func cancel() { _ = cancel(operation: nil) }
}

/// Runs collected to be cancelled together: at once with ``cancelAll()``, and when the bag goes
/// away, like Combine's `AnyCancellable`s in a set, or Tomorrowland's invalidation tokens.
///
/// ```swift
/// final class FeedModel {
///     private let runs = RunBag()
///     func refresh() { fetchFeed().run(some: show, none: report).store(in: runs) }
/// }  // a model that goes away cancels its runs still going
/// ```
public final class RunBag: @unchecked Sendable {
    private let lock = RunHandle.Lock()
    private var runs: [RunHandle] = []

    /// Makes an empty bag.
    public init() {}

    deinit {
        cancelAll()
        lock.free()
    }

    /// Cancels every run in the bag and empties it.
    public func cancelAll() {
        let cancelled = lock.withLock { () -> [RunHandle] in
            defer { runs = [] }
            return runs
        }
        for run in cancelled { run.cancel() }
    }

    fileprivate func insert(_ run: RunHandle) {
        lock.withLock {
            if runs.count == runs.capacity { runs.removeAll { $0.isFinished } }  // forget the ended
            runs.append(run)
        }
    }
}

extension RunHandle {
    /// Puts the run in `bag`, to be cancelled with it.
    @discardableResult public func store(in bag: RunBag) -> RunHandle {
        bag.insert(self)
        return self
    }

    /// Whether the run has ended, one way or another.
    fileprivate var isFinished: Bool { locked { phase == .finished } }
}

// MARK: - Sharing one run

extension Promise where Value: Sendable {
    /// A promise whose work runs once, however many times it is run: an eager promise, opt-in.
    ///
    /// The first run starts the work; runs that start while it is under way wait for it, and go on
    /// in the order they started; runs after it finished get its outcome at once, a failure as
    /// well as a value. Cancelling one run
    /// leaves the others waiting; when every waiting run has been cancelled, the work is cancelled
    /// too, and the next run starts it again. So does the next run after the work ended by
    /// cancellation (its operation dropped its resolver, or a step cancelled its run).
    ///
    /// ```swift
    /// let profile = fetchProfile().share()  // seed 002's cache-then-fetch
    /// profile.run(some: showHeader)         // starts the request
    /// profile.run(some: showAvatar)         // waits for the same request
    /// ```
    public func share() -> Promise {
        let shared = RunHandle.Shared(self)
        return Promise { shared.join($0) }
    }

    /// Makes a promise together with the resolver that settles it, from outside the promise.
    ///
    /// For work that is not started by running a promise, such as a delegate's callbacks. Every run
    /// waits for the resolver, or gets its outcome at once once it has been called; if the resolver
    /// is released without being called, every run ends by cancellation.
    ///
    /// ```swift
    /// let (location, resolver) = Promise<Location, LocationError>.pending()
    /// delegate.onUpdate = { resolver.fulfill($0) }
    /// location.run(some: show, none: report)
    /// ```
    public static func pending(
        file: StaticString = #fileID, line: UInt = #line
    ) -> (promise: Promise, resolver: Resolver<Value, Failure>) {
        let shared = RunHandle.Shared<Value, Failure>(nil)
        _ = Promise(file: file, line: line) { shared.handOut($0) }.start {
            shared.settle($0, generation: 0)
        }
        return (Promise { shared.join($0) }, shared.takeHandedOut())
    }
}

// MARK: - Swift concurrency

extension Promise {
    /// Runs the promise and waits for its outcome, or for `nil` if the run ended by cancellation.
    ///
    /// Cancelling the awaiting task cancels the run: the `onCancel` handlers of its operation and
    /// the `ensure` steps still ahead run before the await returns `nil`. A run also ends by
    /// cancellation when its operation drops its resolver or cancels, or a step cancels the run.
    ///
    /// ```swift
    /// switch await fetchUser(id).result {
    /// case .success(let user)?: show(user)
    /// case .failure(let error)?: report(error)
    /// case nil: break  // cancelled
    /// }
    /// ```
    nonisolated(nonsending) public var result: Swift.Result<Value, Failure>? {
        get async {
            let handle = RunHandle(last: last)
            return await withTaskCancellationHandler {
                await withUnsafeContinuation { continuation in
                    handle.start { continuation.resume(returning: $0?.take(Outcome.self)) }
                }
            } onCancel: {
                handle.cancel()
            }
        }
    }

    /// Runs the promise and waits for its value: throws its error, and gives `nil` if the run
    /// ended by cancellation (see ``result``).
    ///
    /// ```swift
    /// guard let user = try await fetchUser(id).value else { return }  // cancelled
    /// ```
    nonisolated(nonsending) public var value: Value? {
        get async throws(Failure) { try await result?.get() }
    }
}

extension Promise where Failure == Never {
    /// Runs the guarantee and waits for its value, or for `nil` if the run ended by cancellation.
    nonisolated(nonsending) public var value: Value? {
        get async {
            switch await result {
            case .success(let value)?: value
            case nil: nil
            }
        }
    }
}

// MARK: - Internals: how a chain is stored

// A chain is a list of stages linked from the last to the first, so that two promises built on
// the same one share it. Running it pushes its stages onto a stack and loops, popping one at a
// time; a step that returns a promise pushes that promise's stages instead of running it nested.
// So no step grows the call stack, however long the chain or deep the recursion.

extension RunHandle {
    /// One step of a chain; `Node` adds what the step keeps (usually the user's closure), which
    /// must be `Sendable`: two runs of a promise may take the same step at once.
    @usableFromInline class Stage: @unchecked Sendable {
        /// Runs the step: it takes its input from the slot and leaves its output there.
        @usableFromInline typealias Step = @Sendable (Stage, Slot, RunHandle) -> Next

        @exclusivity(unchecked) @usableFromInline var parent: Stage?
        @usableFromInline let step: Step
        @usableFromInline let depth: Int
        @usableFromInline let slotSize: Int
        @usableFromInline let slotAlignment: Int
        @usableFromInline let isEnsure: Bool
        /// The type of the step's outcome, to destroy one that is left behind when a run stops.
        @usableFromInline let output: any Outcome.Type

        @inlinable init<Output>(
            after parent: Stage?, output: Output.Type, isEnsure: Bool, step: @escaping Step
        ) {
            self.parent = parent
            self.step = step
            self.isEnsure = isEnsure
            self.output = Box<Output>.self
            depth = (parent?.depth ?? 0) + 1
            slotSize = max(parent?.slotSize ?? 1, MemoryLayout<Output>.size)
            slotAlignment = max(parent?.slotAlignment ?? 1, MemoryLayout<Output>.alignment)
        }

        // Releasing a long chain one link at a time, instead of each link releasing the one before
        // it from its own deinit, keeps dropping a 100,000-link chain off the stack.
        deinit {
            guard var stage = parent.take() else { return }
            while isKnownUniquelyReferenced(&stage), let before = stage.parent.take() {
                stage = before
            }
        }
    }

    @usableFromInline final class Node<Payload: Sendable>: Stage, @unchecked Sendable {
        @usableFromInline let payload: Payload

        @inlinable init<Output>(
            _ payload: Payload, after parent: Stage?, output: Output.Type, isEnsure: Bool = false,
            _ step: @escaping Step
        ) {
            self.payload = payload
            super.init(after: parent, output: output, isEnsure: isEnsure, step: step)
        }

        @inlinable static func payload(of stage: Stage) -> Payload {
            unsafeDowncast(stage, to: Node.self).payload
        }
    }

    /// The first step of a chain made from an operation. (A `Node` would keep the operation behind
    /// a reabstraction thunk, one more allocation for every promise made this way.)
    @usableFromInline final class Source<Value, Failure: Swift.Error>: Stage, @unchecked Sendable {
        @usableFromInline let operation: @Sendable (Resolver<Value, Failure>) -> Void
        #if DEBUG
            @usableFromInline let file: StaticString
            @usableFromInline let line: UInt
        #endif

        @inlinable init(
            _ operation: @escaping @Sendable (Resolver<Value, Failure>) -> Void,
            file: StaticString, line: UInt
        ) {
            self.operation = operation
            #if DEBUG
                (self.file, self.line) = (file, line)
            #endif
            super.init(after: nil, output: Swift.Result<Value, Failure>.self, isEnsure: false) {
                stage, _, run in
                run.perform(unsafeDowncast(stage, to: Source.self))
            }
        }
    }

    /// A type whose values a slot can hold; `Box<T>` stands for `T`. (A protocol, not `Any.Type`:
    /// Swift 5 mode does not open `Any` to call a generic function.)
    @usableFromInline protocol Outcome {
        static func discard(from slot: Slot)
    }

    @usableFromInline enum Box<Output>: Outcome {
        @usableFromInline static func discard(from slot: Slot) { _ = slot.take(Output.self) }
    }

    /// What the loop does after a step.
    @usableFromInline enum Next {
        /// The output is in the slot: go on.
        case proceed
        /// Run this chain; its outcome is the step's output.
        case enter(Stage)
        /// An operation is under way; its resolver resumes the run.
        case suspend
        /// The run was cancelled: stop.
        case halt
        /// Go on on this queue (after this time), keeping the output in the slot.
        case hop(DispatchQueue, DispatchTime?)
    }

    /// Where a step finds its input and leaves its output: raw memory sized for the largest outcome
    /// in the chain, so passing a value along costs no allocation and no cast.
    @usableFromInline struct Slot {
        @usableFromInline let memory: UnsafeMutableRawPointer

        init(size: Int, alignment: Int) {
            memory = .allocate(byteCount: size, alignment: alignment)
        }

        @inlinable func put<Output>(_ output: Output) {
            memory.initializeMemory(as: Output.self, to: output)
        }

        /// Moves the value out. It is `sending`: what is put in a slot has no other owner (an
        /// operation's outcome arrives `sending`, a constant is `Sendable`, a step's is its own).
        @inlinable func take<Input>(_: Input.Type) -> sending Input {
            nonisolated(unsafe) let input = memory.assumingMemoryBound(to: Input.self).move()
            return input
        }
    }

    /// The steps a run has still to take, the next one on top, and the chains they belong to.
    ///
    /// Entering a chain pushes its stages, so what follows it is simply what lies below: a chain
    /// that ends by entering another leaves nothing behind, and a loop that recurses through `then`
    /// runs in constant memory.
    fileprivate struct Plan {
        /// Unretained, so that walking a chain costs no reference counting; `chains` keeps them alive.
        private(set) var stages: [Unmanaged<Stage>] = []
        /// The last stage of each chain on the stack, and the height of the stack below it.
        private var chains: [(last: Stage, base: Int)] = []

        init() {}

        init(_ last: Stage) {
            stages.reserveCapacity(last.depth)
            push(last)
        }

        mutating func push(_ last: Stage) {
            // Chains whose stages have all run are released here, not while their last step runs.
            while let chain = chains.last, chain.base >= stages.count { chains.removeLast() }
            chains.append((last, stages.count))
            var stage = Unmanaged.passUnretained(last)
            for _ in 0..<last.depth {
                stages.append(stage)
                // Reading the parent through an unretained reference skips a retain and a release.
                stage =
                    stage._withUnsafeGuaranteedRef { $0.parent.map(Unmanaged.passUnretained) }
                    ?? stage
            }
        }

        mutating func pop() -> Unmanaged<Stage>? { stages.popLast() }
    }
}

// MARK: - Internals: the engine

extension RunHandle {
    /// Starts driving the run; `finish` gets the slot with the outcome, or `nil` if the run ended
    /// by cancellation (after its `ensure` steps), exactly once.
    func start(_ finish: @escaping (Slot?) -> Void) {
        self.finish = finish
        if isCancelled { return halt(plan) }  // e.g. an awaiting task cancelled before the start
        drive()
    }

    /// The loop that runs a chain: one step after another, entering the chains that steps
    /// return, until the end, an operation that has not resolved yet, or cancellation.
    private func drive() {
        // Locals, not properties, in the loop: a property access costs an exclusivity check.
        var plan = Plan()
        swap(&plan, &self.plan)
        var slot = self.slot
        while let stage = plan.pop() {
            var next = stage._withUnsafeGuaranteedRef { $0.step($0, slot, self) }
            if case .suspend = next { next = suspend(&plan) }
            switch next {
            case .proceed:
                guard cancelledByStep else { continue }
                stage._withUnsafeGuaranteedRef { $0.output.discard(from: slot) }
                return halt(plan)
            case .enter(let inner):
                plan.push(inner)
                if inner.slotSize > slotSize || inner.slotAlignment > slotAlignment {
                    slot = grownSlot(for: inner)
                }
                if isCancelled { return halt(plan) }
            case .suspend: return
            case .halt: return halt(plan)
            case .hop(let queue, let deadline):
                return hop(
                    to: queue, at: deadline, holding: stage.takeUnretainedValue().output, plan)
            }
        }
        complete()
    }

    /// Runs the operation of `source` with a fresh resolver.
    @inlinable func perform<Value, Failure>(_ source: Source<Value, Failure>) -> Next {
        guard let id = beginOperation() else { return .halt }
        #if DEBUG
            let (file, line) = (source.file, source.line)
        #else
            let (file, line) = (StaticString(""), UInt(0))
        #endif
        source.operation(Resolver(run: self, operation: id, file: file, line: line))
        return .suspend
    }

    /// Numbers a new operation, unless the run is cancelled.
    @usableFromInline func beginOperation() -> Int? {
        locked { () -> Int? in
            guard !cancelRequested else { return nil }
            phase = .operating
            operation += 1
            return operation
        }
    }

    /// After an operation returns: go on if it resolved meanwhile, else wait for it.
    private func suspend(_ plan: inout Plan) -> Next {
        swap(&plan, &self.plan)  // handed over before the lock may hand the run to a resolver
        let next = locked { () -> Next in
            if phase == .driving { return .proceed }
            if cancelRequested {
                phase = .driving
                return .halt
            }
            phase = .waiting
            return .suspend
        }
        if case .suspend = next { return next }
        swap(&plan, &self.plan)  // still ours: take it back
        return next
    }

    /// Takes the outcome of operation `id`, which `write` puts in the slot, if it still counts.
    @usableFromInline func resolve(_ id: Int, with write: (Slot) -> Void) {
        var unneeded: [@Sendable (RunHandle) -> Void] = []
        let resume = locked { () -> Bool in
            guard isPending(id), !cancelRequested else { return false }
            write(slot)
            resolved = id
            let wasWaiting = phase == .waiting
            (unneeded, cancelHandlers, phase) = (cancelHandlers, [], .driving)
            if wasWaiting { driver = pthread_self() }
            return wasWaiting
        }
        unneeded.removeAll()  // outside the lock: releasing a handler may run any deinit
        if resume { drive() }
    }

    /// Whether operation `id` is the latest and has not resolved (under the lock).
    private func isPending(_ id: Int) -> Bool { id == operation && id != resolved }

    func onCancel(_ id: Int, _ handler: @escaping @Sendable (RunHandle) -> Void) {
        let callNow = locked { () -> Bool in
            guard isPending(id) else { return false }
            if cancelRequested { return true }
            cancelHandlers.append(handler)
            return false
        }
        if callNow { handler(self) }
    }

    /// Operation `id` ended its run as cancelled.
    func cancel(_ id: Int) { _ = cancel(operation: id) }

    /// An operation's resolver went away: if it never resolved, nothing ever will.
    func resolverReleased(_ id: Int, _ promise: @autoclosure () -> String) {
        guard cancel(operation: id) else { return }
        assert(
            Diagnostics.report(
                "an operation of \(promise()) released its resolver without resolving it. "
                    + "Its run can never finish, so it was cancelled."))
    }

    /// Cancels the run, if it is still going (and operation `id`, if given, still pending): runs
    /// the handlers, then halts the run if it waits, or once the thread driving it stops.
    private func cancel(operation id: Int?) -> Bool {
        let handlers = locked { () -> [@Sendable (RunHandle) -> Void]? in
            guard !cancelRequested, phase != .finished, id.map(isPending) ?? true else {
                return nil
            }
            if id == nil, phase == .driving, pthread_equal(driver, pthread_self()) != 0 {
                cancelledByStep = true
            }
            (cancelRequested, cancelling) = (true, true)
            defer { cancelHandlers = [] }
            return cancelHandlers
        }
        guard let handlers else { return false }
        for handler in handlers { handler(self) }
        let takeOver = locked { () -> Bool in
            cancelling = false
            guard phase == .waiting else { return false }
            phase = .driving
            return true
        }
        if takeOver { halt(plan) }
        return true
    }

    /// Parks the run, the step's output in the slot, until `queue` carries it on.
    private func hop(
        to queue: DispatchQueue, at deadline: DispatchTime?, holding held: any Outcome.Type,
        _ plan: Plan
    ) {
        let work = DispatchWorkItem { [self] in
            let resume = locked { () -> Bool in
                guard phase == .waiting, hop != nil else { return false }  // cancelled meanwhile
                (phase, hop, driver) = (.driving, nil, pthread_self())
                return true
            }
            if resume { drive() }
        }
        self.plan = plan
        let parked = locked { () -> Bool in
            guard !cancelRequested else { return false }
            (phase, hop) = (.waiting, (work, held))
            return true
        }
        guard parked else {
            held.discard(from: slot)
            return halt(self.plan)
        }
        if let deadline {
            queue.asyncAfter(deadline: deadline, execute: work)
        } else {
            queue.async(execute: work)
        }
    }

    private func complete() {
        let deliver = locked { () -> Bool in
            if !cancelRequested { phase = .finished }
            return !cancelRequested
        }
        guard deliver else {
            output.discard(from: slot)  // the outcome nobody may have any more
            return halt(Plan())
        }
        let finish = self.finish
        (self.finish, plan) = (nil, Plan())
        finish?(slot)
    }

    /// Ends a cancelled run: runs the `ensure` steps still ahead, innermost chain first. While a
    /// canceller still runs handlers, it parks the run for the canceller to halt instead.
    private func halt(_ rest: Plan) {
        self.plan = rest
        let hop = locked { () -> (work: DispatchWorkItem, held: any Outcome.Type)?? in
            if cancelling {
                phase = .waiting
                return .none
            }
            phase = .finished
            defer { self.hop = nil }
            return .some(self.hop)
        }
        guard let hop else { return }
        if let hop {
            hop.work.cancel()
            hop.held.discard(from: slot)
        }
        let finish = self.finish
        (plan, self.finish) = (Plan(), nil)
        for stage in rest.stages.reversed() where stage.takeUnretainedValue().isEnsure {
            Node<@Sendable () -> Void>.payload(of: stage.takeUnretainedValue())()
        }
        finish?(nil)
    }

    /// Grows the slot for a chain with larger outcomes (the slot is empty as a chain starts).
    private func grownSlot(for chain: Stage) -> Slot {
        slot.memory.deallocate()
        slotSize = max(chain.slotSize, slotSize)
        slotAlignment = max(chain.slotAlignment, slotAlignment)
        slot = Slot(size: slotSize, alignment: slotAlignment)
        return slot
    }

    private func locked<T>(_ body: () -> T) -> T { lock.withLock(body) }
}

extension RunHandle {
    /// How a member of a combination ended; `.start` asks about a combination of no members.
    enum Ending<Member, Failure: Swift.Error> {
        case start
        case outcome(Int, Swift.Result<Member, Failure>)
        case cancelled(Int)
    }

    /// What a combination does after a member ended: wait for more, or end its run.
    enum Verdict<Output, Failure: Swift.Error> {
        case wait
        case settle(Swift.Result<Output, Failure>)
        case cancel
    }

    /// The members' outcomes so far, in input order (`nil`: not ended, or ended by cancellation).
    struct Tally<Member, Failure: Swift.Error> {
        var outcomes: [Swift.Result<Member, Failure>?]
        var ended = 0
        var cancelled = 0

        var count: Int { outcomes.count }
        var isComplete: Bool { ended == count }
        var results: [Swift.Result<Member, Failure>] { outcomes.map { $0! } }
        var values: [Member] { outcomes.map { try! $0!.get() } }
        var errors: [Failure] {
            outcomes.compactMap { if case .failure(let error)? = $0 { error } else { nil } }
        }
    }

    /// A promise whose every run runs `members` anew, at most `width` at once, and asks `decide`
    /// how to go on each time one ends. The one mechanism behind every combinator.
    static func join<Member, Failure, Output, OutFailure>(
        _ members: [Promise<Member, Failure>], _ width: Int = .max,
        _ decide:
            @escaping @Sendable (Tally<Member, Failure>, Ending<Member, Failure>) -> Verdict<
                Output, OutFailure
            >
    ) -> Promise<Output, OutFailure> {
        Promise { Join(members, width, decide).start($0) }
    }

    /// One run of a combination.
    final class Join<Member, Failure: Swift.Error, Output, OutFailure: Swift.Error>:
        @unchecked Sendable
    {
        typealias Decide =
            @Sendable (Tally<Member, Failure>, Ending<Member, Failure>) -> Verdict<
                Output, OutFailure
            >
        private enum State {
            case waiting
            case running(RunHandle)
            case ended
        }

        private let lock = Lock()
        private let members: [Promise<Member, Failure>]
        private let width: Int
        private let decide: Decide
        private var tally: Tally<Member, Failure>
        private var states: [State]
        private var started = 0
        private var launching = false
        /// The combination's own resolver; `nil` once it has settled or been cancelled.
        private var resolver: Resolver<Output, OutFailure>?

        init(_ members: [Promise<Member, Failure>], _ width: Int, _ decide: @escaping Decide) {
            (self.members, self.width, self.decide) = (members, width, decide)
            tally = Tally(outcomes: Array(repeating: nil, count: members.count))
            states = Array(repeating: .waiting, count: members.count)
        }

        deinit { lock.free() }

        func start(_ resolver: Resolver<Output, OutFailure>) {
            self.resolver = resolver
            resolver.onCancel { [self] _ in stop() }
            if members.isEmpty { settle(decide(tally, .start), resolver) } else { launch() }
        }

        /// Starts members while there is room, in a loop rather than by recursion: members that end
        /// at once make room from inside `start`, and a hundred thousand of them must not nest.
        private func launch() {
            let mine = lock.withLock { () -> Bool in
                defer { launching = true }
                return !launching
            }
            guard mine else { return }
            while let index = lock.withLock({ () -> Int? in
                guard resolver != nil, started < members.count, started - tally.ended < width else {
                    launching = false
                    return nil
                }
                started += 1
                return started - 1
            }) {
                let handle = members[index].start { [self] in end(index, $0) }
                let kept = lock.withLock { () -> Bool in
                    guard resolver != nil, case .waiting = states[index] else { return false }
                    states[index] = .running(handle)
                    return true
                }
                if !kept { handle.cancel() }  // settled meanwhile (a no-op if the member ended)
            }
        }

        /// Member `index` ended, with `outcome` or (`nil`) by cancellation.
        private func end(_ index: Int, _ outcome: sending Swift.Result<Member, Failure>?) {
            let settled = lock.withLock {
                () -> (Verdict<Output, OutFailure>, Resolver<Output, OutFailure>)? in
                guard let resolver else { return nil }
                states[index] = .ended
                tally.ended += 1
                if outcome == nil { tally.cancelled += 1 }
                tally.outcomes[index] = outcome
                let verdict = decide(
                    tally, outcome.map { .outcome(index, $0) } ?? .cancelled(index))
                if case .wait = verdict { return nil }
                (self.resolver, tally.outcomes) = (nil, [])
                return (verdict, resolver)
            }
            if let (verdict, resolver) = settled { settle(verdict, resolver) } else { launch() }
        }

        /// Cancels the members still running, then settles the combination's run.
        private func settle(
            _ verdict: Verdict<Output, OutFailure>, _ resolver: Resolver<Output, OutFailure>
        ) {
            stop()
            switch verdict {
            case .settle(let outcome):
                // Made of members' outcomes, which the join has let go of.
                nonisolated(unsafe) let outcome = outcome
                resolver(outcome)
            case .cancel: resolver.cancel()
            case .wait: break
            }
        }

        /// Cancels every member still running: the combination settled or was cancelled.
        private func stop() {
            let running = lock.withLock { () -> [RunHandle] in
                resolver = nil
                defer { states = states.map { _ in .ended } }
                return states.compactMap {
                    if case .running(let handle) = $0 { handle } else { nil }
                }
            }
            for handle in running { handle.cancel() }
        }
    }
}

extension RunHandle {
    /// A mutex for an object that frees it in its `deinit`. (A class would cost every run one more
    /// allocation.)
    struct Lock {
        private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)

        init() { pthread_mutex_init(mutex, nil) }

        func free() {
            pthread_mutex_destroy(mutex)
            mutex.deallocate()
        }

        func withLock<T>(_ body: () -> T) -> T {
            pthread_mutex_lock(mutex)
            defer { pthread_mutex_unlock(mutex) }
            return body()
        }
    }

    /// What `share()` and `pending()` keep: the one run of the work, the runs waiting for it, and
    /// its outcome once it has one.
    final class Shared<Value: Sendable, Failure: Swift.Error>: @unchecked Sendable {
        private enum State {
            case idle
            case running(generation: Int, handle: RunHandle?)
            /// `nil` when the outcome will never come: the resolver of `pending()` was dropped.
            case done(Swift.Result<Value, Failure>?)
        }

        private let lock = Lock()
        /// The work to run; `nil` once it is done, and for `pending()`, which has none to run.
        private var work: Promise<Value, Failure>?
        private var state: State
        private var waiting: [Int: Resolver<Value, Failure>] = [:]
        private var lastWaiter = 0
        private var generation = 0
        private var handedOut: Resolver<Value, Failure>?

        init(_ work: Promise<Value, Failure>?) {
            self.work = work
            state = work == nil ? .running(generation: 0, handle: nil) : .idle
        }

        deinit { lock.free() }

        private enum Then {
            case settle(Swift.Result<Value, Failure>?)
            case wait(Int)
            case start(Int, Int)
        }

        /// Called as the operation of every run of the shared promise.
        func join(_ resolver: Resolver<Value, Failure>) {
            let then = lock.withLock { () -> Then in
                if case .done(let outcome) = state { return .settle(outcome) }
                lastWaiter += 1
                waiting[lastWaiter] = resolver
                guard case .idle = state else { return .wait(lastWaiter) }
                generation += 1
                state = .running(generation: generation, handle: nil)
                return .start(lastWaiter, generation)
            }
            switch then {
            case .settle(let outcome?): resolver(outcome)
            case .settle(nil): resolver.cancel()
            case .wait(let id): resolver.onCancel { [weak self] _ in self?.leave(id) }
            case .start(let id, let generation):
                resolver.onCancel { [weak self] _ in self?.leave(id) }
                guard let work = lock.withLock({ work }) else { return }
                let handle = work.start { [weak self] in self?.settle($0, generation: generation) }
                let keep = lock.withLock { () -> Bool in
                    guard case .running(generation, nil) = state else { return false }
                    state = .running(generation: generation, handle: handle)
                    return true
                }
                if !keep { handle.cancel() }  // everyone left already, or it is over: no-op then
            }
        }

        /// A waiting run was cancelled; when none is left, the work is cancelled.
        private func leave(_ id: Int) {
            let cancel = lock.withLock { () -> RunHandle? in
                guard waiting.removeValue(forKey: id) != nil, waiting.isEmpty, work != nil,
                    case .running(_, let handle) = state
                else { return nil }
                state = .idle
                return handle
            }
            cancel?.cancel()
        }

        /// The work of `generation` ended, with `outcome` or (`nil`) by cancellation.
        func settle(_ outcome: sending Swift.Result<Value, Failure>?, generation: Int) {
            let settled = lock.withLock { () -> [Resolver<Value, Failure>] in
                guard case .running(generation, _) = state else { return [] }
                if outcome == nil, work != nil {
                    state = .idle  // the next run tries again
                } else {
                    (state, work) = (.done(outcome), nil)
                }
                defer { waiting = [:] }
                return waiting.sorted { $0.key < $1.key }.map(\.value)  // in the order they came
            }
            for resolver in settled {
                if let outcome { resolver(outcome) } else { resolver.cancel() }
            }
        }

        /// `pending()` keeps its operation's resolver here until it hands it to the caller.
        func handOut(_ resolver: Resolver<Value, Failure>) {
            lock.withLock { handedOut = resolver }
        }

        func takeHandedOut() -> Resolver<Value, Failure> {
            lock.withLock { handedOut.take()! }
        }
    }

    /// Where debug builds report misuse: standard error, unless tests are listening.
    enum Diagnostics {
        nonisolated(unsafe) private static var listeners: [Int: (String) -> Void] = [:]
        nonisolated(unsafe) private static var lastListener = 0
        nonisolated(unsafe) private static let lock = Lock()

        /// Reports `message`; returns `true` so that `assert` can call it in debug builds only.
        static func report(_ message: String) -> Bool {
            lock.withLock {
                if listeners.isEmpty {
                    let line = "Future: \(message)\n"
                    _ = line.withCString { write(2, $0, strlen($0)) }
                }
                for listener in listeners.values { listener(message) }
            }
            return true
        }

        /// Sends every report to `listener` instead of standard error; returns how to stop.
        static func listen(_ listener: @escaping (String) -> Void) -> () -> Void {
            let id = lock.withLock { () -> Int in
                lastListener += 1
                listeners[lastListener] = listener
                return lastListener
            }
            return { lock.withLock { listeners[id] = nil } }
        }
    }
}
