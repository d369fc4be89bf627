// Future: a lazy, value-type promise in one file.
//
// Read it top to bottom: the type, how to make one, run it, chain steps, handle errors, combine
// promises, wait, choose queues, cancel, share one run, use it from async code; last, the engine.
// Copy this file into your project as it is: it needs only Dispatch and the platform C library.

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
/// It is lazy: nothing runs until a terminal such as ``run(some:none:)`` starts it, and every run
/// starts the work anew:
///
/// ```swift
/// let answer = Promise<Int, Never> { resolver in resolver.fulfill(41) }
///     .map { $0 + 1 }
/// answer.run(some: { print($0) })  // prints 42
/// answer.run(some: { print($0) })  // runs it all again: 42 again
/// ```
///
/// Errors are typed: a `Promise<Value, Never>` (``Guarantee``) cannot fail. A promise is a
/// `Sendable` value, to copy, keep and run from any thread, so the closures it keeps are too.
///
/// Choose a promise over a bare `async` function when the work is a value to pass around before it
/// runs: to retry it, time it out, race it, run it at most four at a time, or hand it to a
/// callback-based API. Make one with ``init(file:line:_:)-(_,_,(Resolver<Value,Failure>)->Void)``,
/// chain steps with ``map(_:)-k0ui`` and `then` (see <doc:ChoosingAStep>), handle errors with `recover`
/// or ``catch(_:)``, and run it with ``run(some:none:)`` or by awaiting ``value-7wpyp``.
nonisolated public struct Promise<Value, Failure: Swift.Error>: Sendable {
    /// The last step of the chain; each step knows the one before it (see Internals).
    @usableFromInline let last: RunHandle.Stage

    @inlinable init(last: RunHandle.Stage) { self.last = last }
}

/// A promise that cannot fail: a `Promise<Value, Never>`.
///
/// Choose a guarantee for work that always ends with a value, such as a timer, a cache read or a
/// default, and for a chain whose errors are handled: ``Promise/recover(_:)->Guarantee<Value>`` and
/// ``Promise/catch(_:)`` return one. So the type tells you when an error is still owed: only a
/// guarantee has ``Promise/run()`` and ``Promise/run(some:)``, and its ``Promise/value-9o2n2`` is
/// awaited without `try`:
///
/// ```swift
/// Guarantee(value: 1).run(some: { print($0) })
/// // No `try`: a guarantee cannot fail.
/// let feed = await fetchFeed().recover { _ in Feed.empty }.value
/// ```
///
/// A guarantee joins a chain that can fail as a step of it; a chain that cannot fail takes the
/// error type of a step that can with ``Promise/flatMap(_:)->Promise<NewValue,NewFailure>``.
public typealias Guarantee<Value> = Promise<Value, Never>

/// The errors Future raises itself.
///
/// Only a promise that fails with `any Error` meets them: on a chain with a typed error, the
/// operations that would raise them take the error to raise instead, such as
/// ``Promise/timeout(_:orFailWith:)`` and ``Promise/compactMap(orFailWith:_:)``. Match them as any
/// error:
/// `if case .failure(PromiseError.timedOut)? = await fetch(url).timeout(.seconds(5)).result {}`.
nonisolated public enum PromiseError: Swift.Error, Equatable, Sendable {
    /// A completion handler passed neither a value nor an error to
    /// ``Resolver/resolve(_:_:)-14z48``.
    ///
    /// An API that does so means "no result" in its own way: handle that case in the operation,
    /// with ``Resolver/fulfill(_:)-pc1s`` or ``Resolver/reject(_:)``, before calling `resolve`.
    case missingValue
    /// The transform given to ``Promise/compactMap(_:)`` returned `nil`.
    ///
    /// To fail with an error that says what was missing, use ``Promise/compactMap(orFailWith:_:)``.
    case compactMapReturnedNil
    /// The sequence given to ``Promise/firstValue`` or ``Promise/lastValue`` was empty.
    ///
    /// On a chain with a typed error, say which error an empty sequence is, with
    /// ``Promise/compactMap(orFailWith:_:)``.
    case emptySequence
    /// The promise did not settle within the interval given to ``Promise/timeout(_:)``.
    ///
    /// The work it gave up on was cancelled. On a chain with a typed error, say which error a
    /// timeout is with ``Promise/timeout(_:orFailWith:)``.
    case timedOut
}

// MARK: - Resolver

/// What an operation receives, to report its outcome and to learn that its run was cancelled.
///
/// Call it with a `Result`, or use ``fulfill(_:)-pc1s`` and ``reject(_:)``:
/// `resolver(.success(data))`. The first outcome counts, later ones are ignored. Call it from any thread, during the operation
/// or after. The run then goes on on the thread that is free to carry it: the resolving one if the
/// operation had returned, else the operation's own once it returns (so to go on on a given queue,
/// use ``Promise/on(_:)``, not `queue.async { resolver… }`).
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
/// finish: its run is cancelled, and debug builds report where the promise was made.
nonisolated public final class Resolver<Value, Failure: Swift.Error>: @unchecked Sendable {
    @usableFromInline let run: RunHandle
    @usableFromInline let operation: Int
    #if DEBUG
        let origin: (file: StaticString, line: UInt)
    #endif

    @usableFromInline init(run: RunHandle, operation: Int, file: StaticString, line: UInt) {
        self.run = run
        self.operation = operation
        #if DEBUG
            origin = (file, line)
        #endif
    }

    deinit {
        #if DEBUG
            let origin = "\(origin.file):\(origin.line)"
        #else
            let origin = "?"
        #endif
        run.resolverReleased(operation, "Promise<\(Value.self), \(Failure.self)> made at \(origin)")
    }

    /// Reports the outcome of the operation.
    ///
    /// The form to use when you hold a `Result`, or build one: `resolver(.success(data))`. The
    /// first outcome counts and later ones are ignored, so two callbacks racing to resolve are
    /// safe.
    @inlinable public func callAsFunction(_ result: sending Swift.Result<Value, Failure>) {
        run.resolve(operation) { slot in slot.put(result) }
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

    /// Ends the run as cancelled, as its handle's ``RunHandle/cancel()`` would.
    ///
    /// For work that learns elsewhere that it was cancelled, such as an API that reports
    /// cancellation as an error: the run then delivers no completion, and an await of it gets
    /// `nil`, where ``reject(_:)`` would report a failure. For completion handlers,
    /// ``resolve(_:_:cancelledIf:)`` does this for you.
    public func cancel() { run.cancel(operation) }

    /// Whether the run was cancelled while this operation was part of it.
    ///
    /// Check it between the pieces of long synchronous work, to stop early. To stop work that waits
    /// (a request, a timer), register ``onCancel(_:)`` instead, which is called as soon as the run
    /// is cancelled.
    public var isCancelled: Bool { run.isCancelled(since: operation) }

    /// Registers work to do if the run is cancelled before this operation resolves.
    ///
    /// The handler is called at most once, on the thread that cancels (at once if the run already
    /// is); use it to cancel the request, timer or task the operation started. It gets the
    /// resolver: one that captured its own resolver would keep its run alive forever.
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
        let (operation, file) = (operation, StaticString("a cancel handler"))
        run.onCancel(operation) {
            handler(Resolver(run: $0, operation: operation, file: file, line: 0))
        }
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
        if let error {
            if isCancellation(error) { cancel() } else { reject(error) }
        } else if let value {
            fulfill(value)
        } else {
            reject(PromiseError.missingValue)
        }
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
        if let error {
            reject(transform(error))
        } else if let value {
            fulfill(value)
        } else {
            reject(transform(PromiseError.missingValue))
        }
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

// MARK: - Making promises

nonisolated extension Promise {
    @usableFromInline typealias Node<Payload: Sendable> = RunHandle.Node<Payload>
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
        self.init(last: RunHandle.Source(operation, file: file, line: line))
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
        self = Promise<Void, Failure>(value: ()).then { () -> Outcome in
            Swift.Result { () throws(Failure) in try body() }
        }
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

// MARK: - Running

nonisolated extension Promise {
    /// Starts a new run of the work and calls `completion` with its outcome.
    ///
    /// `completion` is called at most once, on the thread where the last step finished, and never
    /// after the run is cancelled. Choose it to pass the whole `Result` on, say to a completion
    /// handler of your own; ``run(some:none:)`` splits it in two closures. The handle it returns
    /// cancels the run, and can be ignored: `lookUp(id: id).run { result in show(result) }`.
    ///
    /// The run keeps the chain's steps, and what they captured, until it ends, and lets go of them
    /// on the thread that ends it: after ``on(_:)``, on that queue (so a view a step captured goes
    /// away on the main queue). A run that is cancelled lets go of them on the thread that stops
    /// it: the one that calls ``RunHandle/cancel()`` if the run waits, else the one running it.
    @inlinable @discardableResult
    public consuming func run(
        _ completion: @escaping @Sendable (Swift.Result<Value, Failure>) -> Void
    ) -> RunHandle {
        let handle = RunHandle(last: last)
        // Consumed, so that a promise made for this call alone is the run's to let go of.
        handle.start((consume self).last) { slot in
            if let slot { completion(slot.take(Outcome.self)) }
        }
        return handle
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
        (consume self).run { outcome in
            switch outcome {
            case .success(let value): some(value)
            case .failure(let error): none(error)
            }
        }
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
    @discardableResult public func run(some: @escaping @Sendable (Value) -> Void) -> RunHandle {
        fatalError()
    }
}

nonisolated extension Promise where Failure == Never {
    /// Starts work that cannot fail, for its effects alone.
    ///
    /// The end of a chain whose steps did the work, as ``done(_:)-((Value)->Void)`` and ``catch(_:)`` do:
    /// `fetchFeed().done { show($0) }.catch { report($0) }.run()`. Only a ``Guarantee`` has it: a
    /// promise that can fail must say where its error goes first.
    @inlinable @discardableResult
    public consuming func run() -> RunHandle {
        (consume self).run { (_: Swift.Result<Value, Never>) in }
    }

    /// Starts work that cannot fail and calls `some` with its value.
    ///
    /// Write the label: a bare trailing closure means ``run(_:)``, which passes a `Result`. Only a
    /// ``Guarantee`` has it: `cachedFeed().run(some: show)`.
    @inlinable @discardableResult @_disfavoredOverload
    public consuming func run(some: @escaping @Sendable (Value) -> Void) -> RunHandle {
        (consume self).run { some($0.get()) }
    }
}

// MARK: - Transforming values

// The builders are `@inlinable`, so that a chain built in your module is compiled for your types:
// each step costs one allocation to build, and no dynamic cast to run.
//
// `then` has three shapes, for a step that returns a value, a promise or a `Result`, and no more:
// Swift weighs every overload of a name against every closure in a chain, so each shape more
// multiplies the time a long chain takes to type-check. `map` has one shape: the fast way to write
// a value step in a closure. The promise and `Result` shapes take any error type, so that such a
// step is never taken for a value. On a chain that cannot fail, the `Failure == Never` extension
// below gives those two shapes again, taking the step's error type as PromiseKit's
// `Guarantee.then` does: Swift prefers them there, and they cost a chain that can fail nothing.
// Rejecting every other pair of error types at compile time would take more shapes on every chain
// (measured: a six-closure chain of the corpus went from 120 to 335 ms), so that stays a check as
// the step is built.

nonisolated extension Promise {
    /// Transforms the value with a function, as ``map(_:)-k0ui`` does.
    ///
    /// Choose it to pass a function by name, so that a pipeline reads as a list of `then`s,
    /// whatever each step returns: `fetchAvatar(id).then(resize)`. For a closure, choose `map`:
    /// Swift type-checks a chain as one expression and weighs each closure against all three shapes
    /// of `then`, so a long chain of `then` value closures can take seconds to compile, where `map`
    /// is checked at once. See <doc:ChoosingAStep>.
    ///
    /// (Disfavored, so that a step returning a promise or a `Result` chains rather than becoming
    /// the next value.)
    @inlinable @_disfavoredOverload public func then<NewValue>(
        _ transform: @escaping @Sendable (Value) -> NewValue
    ) -> Promise<NewValue, Failure> { map(transform) }

    /// Continues with the promise `next` makes from the value, and waits for it.
    ///
    /// The step for work that is itself asynchronous, such as a request that needs the value
    /// before: `login().then { credentials in fetchAvatar(for: credentials.user) }`. For a step
    /// that succeeds or fails at once, return a `Result`; for a plain value, use ``map(_:)-k0ui``.
    ///
    /// The step's promise fails with the chain's error type, or cannot fail (a ``Guarantee``), or,
    /// on a chain that fails with `any Error`, fails with any error. On a chain that cannot fail,
    /// it may fail with any error, and the chain takes its type:
    /// `after(.seconds(1)).then { fetchStatus() }` can fail as `fetchStatus()` does. Any other
    /// error type stops the program as the step is built, with a message that names the fix
    /// (convert the step's error with ``mapError(_:)``, or erase the chain's with
    /// ``eraseToAnyError()``): Swift cannot reject that pair at compile time without slowing every
    /// chain. A promise made in the closure names its error type:
    /// `Promise<Int, LookupError>(value: 1)`.
    ///
    /// (Disfavored, as the value shape is, which Swift settles faster in long chains: measured 73
    /// ms against 123 ms for six closures. It still wins over the value shape, which is less
    /// specific.)
    @inlinable @_disfavoredOverload public func then<NewValue, StepFailure>(
        _ next: @escaping @Sendable (Value) -> Promise<NewValue, StepFailure>
    ) -> Promise<NewValue, Failure> {
        guard let convert = Self.joining(StepFailure.self) else {
            // One error type (checked): the same chain, under the names this function knows.
            let chain = Promise<Value, StepFailure>(last: last).flatMap(next)
            return Promise<NewValue, Failure>(last: chain.last)
        }
        return flatMap { next($0).mapError(convert) }
    }

    /// Continues with a step that succeeds or fails at once.
    ///
    /// Choose it for validation and parsing, where a step can fail but has nothing to wait for; the
    /// step's `Result` decides, with no promise built: `download(url).then(toDictionary)`. Its
    /// error type joins the chain as a step's promise's does; a `Result` made in the closure names
    /// its error type, as `.failure(LookupError.notFound)` does:
    ///
    /// ```swift
    /// let count = lookUp(id: id).then { name -> Result<Int, LookupError> in
    ///     name.isEmpty ? .failure(.notFound) : .success(name.count)
    /// }
    /// ```
    ///
    /// A step that throws instead of returning a `Result` is a ``tryMap(_:)``.
    @inlinable public func then<NewValue, StepFailure>(
        _ transform: @escaping @Sendable (Value) -> Swift.Result<NewValue, StepFailure>
    ) -> Promise<NewValue, Failure> {
        guard let convert = Self.joining(StepFailure.self) else {
            typealias Transform = @Sendable (Value) -> Swift.Result<NewValue, StepFailure>
            return appending(transform) { stage, slot, _ in
                // One error type (checked): the outcome is a `Result<Value, StepFailure>`.
                let outcome = slot.take(Swift.Result<Value, StepFailure>.self)
                slot.put(outcome.flatMap(Node<Transform>.payload(of: stage)))
                return .proceed
            }
        }
        return then { transform($0).mapError(convert) }
    }

    /// How a step's errors join the chain, decided once, as the step is built, so that a run pays
    /// no test: `nil` when they are the chain's own; else a conversion, for a step that cannot fail
    /// or a chain that fails with `any Error`. Any other pair stops here, where the mistake is,
    /// rather than at the first failure of some run; `fatalError`, as a `precondition` loses its
    /// message in a release build. (A chain that cannot fail reaches here only from generic code:
    /// elsewhere Swift picks the shapes that take the step's error type.)
    @inlinable static func joining<StepFailure>(
        _: StepFailure.Type
    ) -> (@Sendable (StepFailure) -> Failure)? {
        if StepFailure.self == Failure.self { return nil }
        guard StepFailure.self == Never.self || Failure.self == (any Swift.Error).self else {
            fatalError(
                """
                then: a step that fails with \(StepFailure.self) cannot join a chain that fails \
                with \(Failure.self). Convert the step's error with mapError(_:), as in \
                `.then { step($0).mapError { _ in MyError.failed } }`, or call eraseToAnyError() \
                on the chain. (In generic code, a chain that cannot fail takes the step's error \
                type with setFailureType(to:) first.)
                """)
        }
        return { $0 as! Failure }  // a `Never` never comes; an error is an `any Error`
    }

    /// Transforms the value when the promise succeeds.
    ///
    /// The way to write a value step in a closure: with one shape, it type-checks at once in a
    /// chain of any length, where a `then` closure is weighed against three:
    /// `name.map { $0.count }`. A failure passes through untouched. When the step returns a promise
    /// or a `Result`, use `then`; when it throws, ``tryMap(_:)``; when it only looks, ``get(_:)``.
    @inlinable public func map<NewValue>(
        _ transform: @escaping @Sendable (Value) -> NewValue
    ) -> Promise<NewValue, Failure> {
        typealias Transform = @Sendable (Value) -> NewValue
        return appending(transform) { stage, slot, _ in
            slot.put(slot.take(Outcome.self).map(Node<Transform>.payload(of: stage)))
            return .proceed
        }
    }

    /// Not for a closure that throws: a `then` closure returns `Promise(error:)` instead.
    ///
    /// (An overload that throws would tie with the promise shape on `any Error` chains; this one,
    /// unavailable, only names the fix, and measured no slower to type-check.)
    // swift-format-ignore
    @available(*, unavailable, message: "a then closure cannot throw: return Promise(error:) instead, or throw in a map or tryMap step before it")
    public func then<NewValue, StepFailure>(
        _ next: @escaping @Sendable (Value) throws -> Promise<NewValue, StepFailure>
    ) -> Promise<NewValue, Failure> { fatalError() }

    /// Not for a closure that throws on a chain with a typed error: that is a ``tryMap(_:)``.
    // swift-format-ignore
    @available(*, unavailable, message: "on a chain with a typed error, a map closure that throws is a tryMap step: write its throws(Failure), or erase the chain's error type first")
    public func map<NewValue>(
        _ transform: @escaping @Sendable (Value) throws -> NewValue
    ) -> Promise<NewValue, Failure> { fatalError() }

    /// Continues with the promise `next` makes from the value, which fails with the chain's error
    /// type.
    ///
    /// The promise shape of `then`, in one shape: the same step, for when Swift needs it spelled
    /// out, such as a closure whose promise type it cannot infer alone. Prefer `then`, which also
    /// takes a step that cannot fail: `fetchUser(id).flatMap { user in fetchAvatar(for: user) }`.
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

    /// Transforms the value with a function that throws `Failure`.
    ///
    /// Choose it to call throwing code, such as a decoder, in the middle of a chain; what it throws
    /// is the chain's failure. Write the closure's `throws(…)` when the chain's error is typed, as
    /// Swift infers `any Error` for an untyped one: `fetch(url).tryMap { (data) throws(any Error)
    /// in try decoder.decode(User.self, from: data) }`. For a step that returns a `Result`, use
    /// `then`.
    @inlinable public func tryMap<NewValue>(
        _ transform: @escaping @Sendable (Value) throws(Failure) -> NewValue
    ) -> Promise<NewValue, Failure> {
        then { value -> Swift.Result<NewValue, Failure> in
            Swift.Result { () throws(Failure) in try transform(value) }
        }
    }

    /// Transforms the value, failing with `error` when the transform returns `nil`.
    ///
    /// Choose it to take something out of a value that may not hold it, such as the first search
    /// result, and fail with an error of the chain's type that says what was missing:
    /// `results.compactMap(orFailWith: .noResultFound) { $0.first }`. The error is made only when
    /// needed. On a chain that fails with `any Error`, ``compactMap(_:)`` fails with
    /// ``PromiseError/compactMapReturnedNil``.
    @inlinable public func compactMap<NewValue>(
        orFailWith error: @autoclosure @escaping @Sendable () -> Failure,
        _ transform: @escaping @Sendable (Value) -> NewValue?
    ) -> Promise<NewValue, Failure> {
        then { value -> Swift.Result<NewValue, Failure> in
            transform(value).map { .success($0) } ?? .failure(error())
        }
    }

    /// Ends the success path with a side effect; what is left is a `Promise<Void, Failure>`.
    ///
    /// The step that uses the value, before ``catch(_:)`` handles the error and ``run()`` starts
    /// it: `fetchFeed().done { show($0) }.catch { report($0) }.run()`. To look at the value and
    /// pass it on, use ``get(_:)``.
    @inlinable public func done(
        _ body: @escaping @Sendable (Value) -> Void
    ) -> Promise<Void, Failure> { map(body) }

    /// Ends the success path with a side effect that throws `Failure`, which fails the chain.
    ///
    /// PromiseKit's `done` with a `try` in it: on a chain that fails with `any Error`,
    /// `fetch(url).done { try save($0) }`; on a typed one, write the closure's
    /// `throws(…)`. (Its own overload, disfavored, so that a closure that does not throw is checked
    /// against the one above alone.)
    @inlinable @_disfavoredOverload public func done(
        _ body: @escaping @Sendable (Value) throws(Failure) -> Void
    ) -> Promise<Void, Failure> { tryMap(body) }

    /// Looks at the value without changing it.
    ///
    /// For a side effect in the middle of a chain, such as caching or logging a value that later
    /// steps still need: `fetchUser(id).get { cache.store($0) }`. To end the chain with the effect,
    /// use ``done(_:)-((Value)->Void)``; to see failures too, ``tap(_:)``.
    @inlinable public func get(_ body: @escaping @Sendable (Value) -> Void) -> Promise {
        map { value -> Value in
            body(value)
            return value
        }
    }

    /// Forgets the value, keeping success or failure.
    ///
    /// For a promise whose caller needs to know only that the work is done, such as members of
    /// different value types under one `when`:
    /// `when(fulfilled: [fetchUser(1).asVoid(), upload(url)])`.
    @inlinable public func asVoid() -> Promise<Void, Failure> { map { _ in } }

    /// Looks at the outcome, success or failure, without changing it.
    ///
    /// Handy for logging: the body sees what the step before produced, and the chain goes on as if
    /// it were not there: `fetchFeed().tap { print("feed:", $0) }`. To see the value alone, use
    /// ``get(_:)``; to run something however the chain ends, cancellation included, ``ensure(_:)``.
    @inlinable public func tap(
        _ body: @escaping @Sendable (Swift.Result<Value, Failure>) -> Void
    ) -> Promise {
        mapOutcome { outcome in
            body(outcome)
            return outcome
        }
    }
}

nonisolated extension Promise where Failure == any Swift.Error {
    /// Transforms the value with a function that throws, which fails the chain.
    ///
    /// PromiseKit's `map` with a `try` in it, on a chain that fails with `any Error`:
    /// `fetch(url).map { try decoder.decode(User.self, from: $0) }`. On a chain with a typed
    /// error, use ``tryMap(_:)`` with the closure's `throws(…)` written out: a throwing overload
    /// of `map` on every chain made a chain of six `map`s ten times slower to type-check
    /// (14 to 166 ms), where this one, for `any Error` chains alone, costs a few milliseconds.
    @inlinable @_disfavoredOverload public func map<NewValue>(
        _ transform: @escaping @Sendable (Value) throws -> NewValue
    ) -> Promise<NewValue, Failure> { tryMap(transform) }

    /// Continues with the promise `next` makes from the error, or fails with the error it throws.
    ///
    /// PromiseKit's `recover` that rethrows what it cannot handle, on a chain that fails with
    /// `any Error`:
    ///
    /// ```swift
    /// let feed = fetch(url).recover { error -> Promise<Data, any Error> in
    ///     guard error is URLError else { throw error }
    ///     return fetch(mirrors[0])
    /// }
    /// ```
    ///
    /// A typed chain's closure returns `Promise(error:)` instead: typed throws on every `recover`
    /// break Swift's inference of closures that do not throw.
    @inlinable @_disfavoredOverload public func recover(
        _ next: @escaping @Sendable (Failure) throws -> Promise<Value, Failure>
    ) -> Promise<Value, Failure> {
        recover { error -> Promise<Value, Failure> in
            do {
                return try next(error)
            } catch {
                return Promise(error: error)
            }
        }
    }

    /// Transforms the value, failing with ``PromiseError/compactMapReturnedNil`` on `nil`.
    ///
    /// For a chain that fails with `any Error`; on a chain with a typed error, say which error
    /// `nil` is with ``compactMap(orFailWith:_:)``:
    /// `fetch(url).compactMap { String(data: $0, encoding: .utf8) }`.
    @inlinable public func compactMap<NewValue>(
        _ transform: @escaping @Sendable (Value) -> NewValue?
    ) -> Promise<NewValue, Failure> {
        compactMap(orFailWith: PromiseError.compactMapReturnedNil, transform)
    }
}

nonisolated extension Promise where Failure == Never {
    /// Continues a chain that cannot fail with the promise `next` makes, taking its error type.
    ///
    /// PromiseKit's `Guarantee.then`: after ``after(_:)``, a `recover` or a cache read, the next
    /// step is work that can fail, and so can the chain from there on:
    /// `after(.seconds(1)).then { fetchStatus() }` is a `Promise<Status, NetworkError>`. A step
    /// that cannot fail keeps the chain a ``Guarantee``.
    @inlinable @_disfavoredOverload public func then<NewValue, NewFailure>(
        _ next: @escaping @Sendable (Value) -> Promise<NewValue, NewFailure>
    ) -> Promise<NewValue, NewFailure> {
        typealias Next = @Sendable (Value) -> Promise<NewValue, NewFailure>
        return appending(next) { stage, slot, _ in
            .enter(Node<Next>.payload(of: stage)(slot.take(Outcome.self).get()).last)
        }
    }

    /// Continues a chain that cannot fail with a step that succeeds or fails at once, taking its
    /// error type.
    ///
    /// The `Result` shape of `then`, as the promise shape above is:
    /// `lookUp(id: id).recover { _ in "guest" }.then(toModel)` fails as `toModel` does.
    @inlinable public func then<NewValue, NewFailure>(
        _ transform: @escaping @Sendable (Value) -> Swift.Result<NewValue, NewFailure>
    ) -> Promise<NewValue, NewFailure> {
        mapOutcome { transform($0.get()) }
    }

    /// Continues a chain that cannot fail with the promise `next` makes, taking its error type.
    ///
    /// The same step as `then`, under the standard library's name:
    /// `after(.seconds(1)).flatMap { fetchStatus() }` is a `Promise<Status, NetworkError>`.
    @inlinable @_disfavoredOverload public func flatMap<NewValue, NewFailure>(
        _ next: @escaping @Sendable (Value) -> Promise<NewValue, NewFailure>
    ) -> Promise<NewValue, NewFailure> { then(next) }

    /// Gives a promise that cannot fail the error type of the chain it joins.
    ///
    /// Needed where Swift wants one error type, such as a guarantee among the members of
    /// ``when(fulfilled:concurrently:)``, or one branch of a choice:
    /// `isFresh ? cachedFeed().setFailureType(to: FeedError.self) : fetchFeed()`. As a step of
    /// `then`, a guarantee joins a chain that can fail without it, and a chain that cannot fail
    /// takes the error type of a `then` step that can.
    @inlinable public func setFailureType<NewFailure>(
        to _: NewFailure.Type
    ) -> Promise<Value, NewFailure> {
        mapOutcome { .success($0.get()) }
    }
}

// MARK: - Handling errors

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
    /// The PromiseKit ending: ``done(_:)-((Value)->Void)`` for the value, `catch` for the error, then ``run()``:
    /// `fetchFeed().done { show($0) }.catch { report($0) }.run()`. Unlike PromiseKit's, it runs
    /// nothing by itself: the chain is still a promise. Choose `recover` instead when a value can
    /// stand in for the error and later steps need it.
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
    /// no outcome.
    @inlinable public func ensure(_ body: @escaping @Sendable () -> Void) -> Promise {
        appending(body, isEnsure: true) { stage, _, _ in
            Node<@Sendable () -> Void>.payload(of: stage)()
            return .proceed
        }
    }

    /// Runs `body` on `queue` when the chain gets here, as ``ensure(_:)`` does, and goes on at once.
    ///
    /// PromiseKit's `ensure(on:)`, for cleanup that belongs to a queue, such as a spinner on the main
    /// queue: `fetchFeed().ensure(on: .main) { spinner.stop() }.catch(report).run()`. The steps
    /// after it go on where the chain was, without waiting for `body`: unlike
    /// `.on(queue).ensure { … }`, it moves nothing onto `queue`, so a later `queue.sync` cannot
    /// deadlock on it.
    ///
    /// (Disfavored, so that `.main` means the main actor, as for ``done(on:tiedTo:_:)``; pass
    /// `DispatchQueue.main` to run a closure that is not the main actor's there.)
    @inlinable @_disfavoredOverload public func ensure(
        on queue: DispatchQueue, _ body: @escaping @Sendable () -> Void
    ) -> Promise {
        ensure { queue.async(execute: body) }
    }

    /// Runs `body` on the main actor when the chain gets here, as ``ensure(_:)`` does, and goes on
    /// at once.
    ///
    /// PromiseKit's `ensure(on: .main)`, for cleanup of main-actor state, such as a spinner of
    /// the user interface: `fetchFeed().ensure(on: .main) { spinner.stop() }`. As with
    /// ``ensure(on:_:)-(_,()->Void)``, the steps after it do not wait for `body`, and stay
    /// where the chain was.
    public func ensure(
        on _: MainActorContext, _ body: @escaping @MainActor @Sendable () -> Void
    ) -> Promise {
        ensure { DispatchQueue.main.async { Guarantee<Void>.asMainActor(body) } }
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

// MARK: - Combining

// Every combinator runs its promises anew on each of its runs, all at once unless a limit says
// otherwise, cancels those it no longer needs (and starts none after it ended, but those that
// ignore cancel), and keeps input order. A member whose run ends by
// cancellation ends a `when` or `any` as cancelled, and drops out of a race.

/// Succeeds with every value, in the order given, or fails with the first error to arrive.
///
/// The combinator for work that is all needed, such as the pages of a report: the first failure
/// decides, and the members still running are cancelled: `when(fulfilled: ids.map(fetchUser))`. No
/// promises succeed with `[]`. To keep going past failures, use ``when(resolved:)`` or
/// ``any(_:)-([Promise<Value,Failure>])``; to take the first to finish, ``race(_:)``.
///
/// With a `limit`, at most that many members run at once: the next starts as one finishes, in the
/// order given, so a long list does not flood a server:
/// `when(fulfilled: urls.map(download), concurrently: 4)`. A `limit` below 1 stops the program
/// with a message. On a promise of an array, ``Promise/thenMap(concurrently:_:)`` does the same as a step.
///
/// To let the other members' work finish after one failed, such as uploads worth completing, make
/// each member ignore the cancel: `when(fulfilled: files.map { upload($0).ignoringCancel() })`.
/// The combination still fails at once; the work goes on, and its outcome is dropped. The members
/// it has not started yet that begin with `ignoringCancel()` start as it ends, all at once (the
/// limit no longer holds); the others never start.
@inlinable nonisolated public func when<Value, Failure>(
    fulfilled promises: [Promise<Value, Failure>], concurrently limit: Int = .max
) -> Promise<[Value], Failure> {
    // `fatalError`, not `precondition`: its message stays in a release build.
    guard limit > 0 else {
        fatalError("when(fulfilled:concurrently:) needs a limit of at least 1, not \(limit)")
    }
    return RunHandle.join(promises, limit) { tally, ended in
        switch ended {
        case .some((_, .failure(let error)?)): .settle(.failure(error))
        case .some((_, nil)): .cancel
        default: tally.isComplete ? .settle(.success(tally.outcomes.map { try! $0!.get() })) : .wait
        }
    }
}

/// Succeeds with a tuple of the values of promises of any types.
///
/// For a fixed number of different things needed together, such as a user and their avatar; the
/// tuple keeps the order given, and the first failure cancels the rest:
/// `when(fulfilled: fetchUser(id), fetchAvatar(id)).done { user, avatar in show(user, avatar) }`.
/// The promises share one error type: convert the others first, with ``Promise/mapError(_:)`` or
/// ``Promise/eraseToAnyError()``.
nonisolated public func when<each Value, Failure>(
    fulfilled promise: repeat Promise<each Value, Failure>
) -> Promise<(repeat each Value), Failure> {
    var members: [Promise<Any, Failure>] = []
    repeat members.append((each promise).map { $0 })
    return when(fulfilled: members).map { values in
        var values = values.makeIterator()
        func next<Element>() -> Element { values.next()! as! Element }
        return (repeat next() as each Value)
    }
}

/// Not for promises of different error types, which one `Failure` cannot hold: convert them to one
/// first, with ``Promise/setFailureType(to:)`` for a guarantee, ``Promise/mapError(_:)`` or
/// ``Promise/eraseToAnyError()``.
// swift-format-ignore
@available(*, unavailable, message: "when(fulfilled:) needs promises of one error type: give a Guarantee the others' with setFailureType(to:), convert the others with mapError(_:), or call eraseToAnyError() on each")
nonisolated public func when<each Value, each Failure>(
    fulfilled promise: repeat Promise<each Value, each Failure>
) -> Promise<(repeat each Value), any Swift.Error> { fatalError() }

/// Succeeds with the values of a dictionary's promises, under their keys.
///
/// For work keyed by an identifier, where the order does not matter but the pairing does; the first
/// failure cancels the rest, as with an array:
/// `when(fulfilled: Dictionary(uniqueKeysWithValues: ids.map { ($0, fetchUser($0)) }))`.
nonisolated public func when<Key: Hashable & Sendable, Value, Failure>(
    fulfilled promises: [Key: Promise<Value, Failure>]
) -> Promise<[Key: Value], Failure> {
    let (keys, members) = (Array(promises.keys), Array(promises.values))
    return when(fulfilled: members).map { Dictionary(uniqueKeysWithValues: zip(keys, $0)) }
}

/// Waits for every promise and succeeds with every outcome, in the order given; never fails.
///
/// Choose it when each outcome matters on its own, such as a batch of uploads to report one by one:
/// a ``Guarantee`` of `Result`s, one per member. ``any(_:)-([Promise<Value,Failure>])`` is the
/// same but fails when every member failed; ``when(fulfilled:concurrently:)`` stops at the first
/// failure:
/// `when(resolved: ids.map(fetchUser)).run(some: { results in show(results) })`.
@inlinable nonisolated public func when<Value, Failure>(
    resolved promises: [Promise<Value, Failure>]
) -> Guarantee<[Swift.Result<Value, Failure>]> {
    RunHandle.join(promises) { tally, ended in
        if case .some((_, nil)) = ended { return .cancel }
        return tally.isComplete ? .settle(.success(tally.results)) : .wait
    }
}

/// Waits for every promise and succeeds with every outcome, in the order given, unless all failed.
///
/// Choose it to make the most of partial success, such as loading from several sources: it fails,
/// with an ``AllPromisesFailedError`` holding every error, only when nothing succeeded. No promises
/// succeed with `[]`. ``when(resolved:)`` never fails; ``race(fulfilled:)`` stops at the first
/// success: `any(mirrors.map(download))`.
@inlinable nonisolated public func any<Value, Failure>(
    _ promises: [Promise<Value, Failure>]
) -> Promise<[Swift.Result<Value, Failure>], AllPromisesFailedError<Failure>> {
    RunHandle.join(promises) { tally, ended in
        if case .some((_, nil)) = ended { return .cancel }
        guard tally.isComplete else { return .wait }
        let errors = tally.errors
        return errors.count < tally.outcomes.count || errors.isEmpty
            ? .settle(.success(tally.results)) : .settle(.failure(AllPromisesFailedError(errors)))
    }
}

/// Waits for promises of any types and succeeds with a tuple of their outcomes, unless all failed.
///
/// The tuple form of ``any(_:)-([Promise<Value,Failure>])``, for a fixed number of different
/// sources: `any(fetchProfile(), fetchAvatar(id)).done { profile, avatar in show(try? profile.get(),
/// try? avatar.get()) }`. The promises share one error type, as with
/// ``when(fulfilled:)->Promise<(Value),Failure>``.
nonisolated public func any<each Value, Failure>(
    _ promise: repeat Promise<each Value, Failure>
) -> Promise<(repeat Swift.Result<each Value, Failure>), AllPromisesFailedError<Failure>> {
    var members: [Promise<Any, Failure>] = []
    repeat members.append((each promise).map { $0 })
    return any(members).map { results in
        var results = results.makeIterator()
        func next<T>() -> Swift.Result<T, Failure> { results.next()!.map { $0 as! T } }
        return (repeat next() as Swift.Result<each Value, Failure>)
    }
}

/// The first promise to settle, with a value or an error, decides; the others are cancelled.
///
/// Choose it when the fastest answer is the answer, failure included; to ignore failures until one
/// succeeds, use ``race(fulfilled:)``. When every member has ended by cancellation (or none was
/// given), the race ends so too. A race against ``after(_:)`` is a timeout, but
/// ``Promise/timeout(_:orFailWith:)`` says it in one step: `race(mirrors.map(download))`.
///
/// The losers' work is cancelled; to let it finish, such as downloads that fill a cache, make each
/// member ignore the cancel: `race(mirrors.map { download($0).ignoringCancel() })`. Such members
/// start even after a member before them won at once.
@inlinable nonisolated public func race<Value, Failure>(
    _ promises: [Promise<Value, Failure>]
) -> Promise<Value, Failure> {
    RunHandle.join(promises) { tally, ended in
        if case .some((_, let outcome?)) = ended { return .settle(outcome) }
        return tally.isComplete ? .cancel : .wait
    }
}

/// The first of two or more promises to settle decides, as ``race(_:)-([Promise<Value,Failure>])``
/// does for an array.
///
/// For a race written out: `race(download(url), download(mirrors[0]))`.
@inlinable nonisolated public func race<Value, Failure>(
    _ first: Promise<Value, Failure>, _ second: Promise<Value, Failure>,
    _ others: Promise<Value, Failure>...
) -> Promise<Value, Failure> {
    race([first, second] + others)
}

/// The first value wins and the others are cancelled.
///
/// Choose it for redundant sources, such as mirrors, where a failure should not end the race:
/// `race(fulfilled: mirrors.map(download))`. Errors drop out; it fails only when every promise
/// failed (at once if none was given), with an ``AllPromisesFailedError`` of all their errors, or
/// ends by cancellation if some ended so and the rest failed. ``race(_:)`` lets the first failure
/// win too.
@inlinable nonisolated public func race<Value, Failure>(
    fulfilled promises: [Promise<Value, Failure>]
) -> Promise<Value, AllPromisesFailedError<Failure>> {
    RunHandle.join(promises) { tally, ended in
        if case .some((_, .success(let value)?)) = ended { return .settle(.success(value)) }
        guard tally.isComplete else { return .wait }
        return tally.outcomes.contains { $0 == nil }
            ? .cancel : .settle(.failure(AllPromisesFailedError(tally.errors)))
    }
}

/// The error of a combination that needed a value and got none: every error, in input order.
///
/// ``any(_:)-([Promise<Value,Failure>])`` and ``race(fulfilled:)`` fail with it. Look at
/// ``errors`` to report each source's failure:
/// `race(fulfilled: mirrors.map(download)).catch { report($0.errors.first ?? .offline) }`.
nonisolated public struct AllPromisesFailedError<Failure: Swift.Error>: Swift.Error {
    /// The errors, in the order the promises were given.
    ///
    /// Empty when no promise was given, as `race(fulfilled: [])` fails at once.
    public let errors: [Failure]

    /// Makes the error from every member's error.
    ///
    /// For tests, and for combinators of your own that fail the same way as
    /// ``any(_:)-([Promise<Value,Failure>])``.
    public init(_ errors: [Failure]) { self.errors = errors }
}

nonisolated extension AllPromisesFailedError: Equatable where Failure: Equatable {}

// MARK: - Promises of sequences

// PromiseKit's helpers for a promise of a list: each a `map` or a `thenMap` of what a sequence does.
// (`SendableMetatype`: a step's closure, which may run on any thread, uses the sequence's type.)

nonisolated extension Promise where Value: Sequence & SendableMetatype {
    /// Transforms each element: a `map` of the sequence's `map`.
    ///
    /// For a list that comes from the step before: `fetchUsers().mapValues { $0.name }`.
    @inlinable public func mapValues<NewElement>(
        _ transform: @escaping @Sendable (Value.Element) -> NewElement
    ) -> Promise<[NewElement], Failure> { map { $0.map(transform) } }

    /// Transforms each element into a sequence and joins them in one array.
    ///
    /// For a list of lists, such as each album's tracks: `fetchAlbums().flatMapValues(\.tracks)`.
    @inlinable public func flatMapValues<Segment: Sequence & SendableMetatype>(
        _ transform: @escaping @Sendable (Value.Element) -> Segment
    ) -> Promise<[Segment.Element], Failure> { map { $0.flatMap(transform) } }

    /// Transforms each element, keeping the results that are not `nil`.
    ///
    /// For a list to parse, where what does not parse is dropped:
    /// `fetchLines().compactMapValues { Int($0) }`.
    @inlinable public func compactMapValues<NewElement>(
        _ transform: @escaping @Sendable (Value.Element) -> NewElement?
    ) -> Promise<[NewElement], Failure> { map { $0.compactMap(transform) } }

    /// Keeps the elements that `isIncluded` accepts, in order.
    ///
    /// `fetchUsers().filterValues { $0.isActive }`.
    @inlinable public func filterValues(
        _ isIncluded: @escaping @Sendable (Value.Element) -> Bool
    ) -> Promise<[Value.Element], Failure> { map { $0.filter(isIncluded) } }

    /// Makes a promise of each element and joins them in order: the step form of
    /// ``when(fulfilled:concurrently:)``.
    ///
    /// For a list that comes from the step before; `limit` caps how many run at once, and the
    /// first failure cancels the rest: `followers.thenMap(concurrently: 4) { avatar(of: $0) }`.
    public func thenMap<NewValue>(
        concurrently limit: Int = .max,
        _ transform: @escaping @Sendable (Value.Element) -> Promise<NewValue, Failure>
    ) -> Promise<[NewValue], Failure> {
        guard limit > 0 else {
            fatalError("thenMap(concurrently:_:) needs a limit of at least 1, not \(limit)")
        }
        return flatMap { when(fulfilled: $0.map(transform), concurrently: limit) }
    }

    /// Makes a promise of a sequence from each element, and joins their elements in one array.
    ///
    /// As ``thenMap(concurrently:_:)``, for steps that each give a list, such as a page of
    /// results per query: `queries.thenFlatMap { search($0) }`.
    public func thenFlatMap<Segment: Sequence & SendableMetatype>(
        concurrently limit: Int = .max,
        _ transform: @escaping @Sendable (Value.Element) -> Promise<Segment, Failure>
    ) -> Promise<[Segment.Element], Failure> {
        thenMap(concurrently: limit, transform).flatMapValues { $0 }
    }
}

nonisolated extension Promise where Value: Sequence & SendableMetatype, Value.Element: Comparable {
    /// Sorts the elements in increasing order: `fetchScores().sortedValues()`.
    @inlinable public func sortedValues() -> Promise<[Value.Element], Failure> {
        map { $0.sorted() }
    }
}

nonisolated extension Promise where Value: Sequence & SendableMetatype, Failure == any Swift.Error {
    /// The first element; fails with ``PromiseError/emptySequence`` if there is none.
    ///
    /// `fetchResults().firstValue`. On a chain with a typed error, say which error an empty
    /// sequence is: `results.compactMap(orFailWith: .noResultFound) { $0.first }`.
    @inlinable public var firstValue: Promise<Value.Element, Failure> {
        compactMap(orFailWith: PromiseError.emptySequence) { $0.first { _ in true } }
    }

    /// The last element; fails with ``PromiseError/emptySequence`` if there is none.
    ///
    /// `fetchMessages().lastValue`. On a chain with a typed error, use
    /// ``compactMap(orFailWith:_:)`` as ``firstValue`` says.
    @inlinable public var lastValue: Promise<Value.Element, Failure> {
        compactMap(orFailWith: PromiseError.emptySequence) { Array($0).last }
    }
}

// MARK: - Time

// `Duration` needs macOS 13, iOS 16, tvOS 16 and watchOS 9, the package's minimums. An app with a
// lower deployment target can copy the file in: these declarations alone are then unavailable.

/// A guarantee that succeeds after `interval`, holding no thread.
///
/// Start a chain with it to wait first, as a poll does; a step that can fail gives the chain its
/// error type: `after(.seconds(1)).then(poll)`. Cancelling the run cancels the timer. To wait in
/// the middle of a chain, use ``Promise/delay(_:)``.
@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
nonisolated public func after(_ interval: Duration) -> Guarantee<Void> {
    immediately.delay(interval)
}

/// Not Future's spelling: ``after(_:)`` takes a `Duration`.
// swift-format-ignore
@available(*, unavailable, message: "Future's after takes a Duration: after(.seconds(1)), after(.milliseconds(500))")
nonisolated public func after(seconds: Double) -> Guarantee<Void> { fatalError() }

/// The first step of every `after`, made once rather than at every call.
nonisolated private let immediately = Guarantee(value: ())

@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
nonisolated extension Promise {
    /// Passes the outcome, value or error, on after `interval`, on a global queue.
    ///
    /// Choose it to pace a chain, such as a pause before showing a result; cancelling the run
    /// meanwhile cancels the timer: `fetchStatus().delay(.milliseconds(300))`. The steps after it
    /// run on a global queue: add ``on(_:)`` to go on elsewhere. To start with a wait, use
    /// ``after(_:)``; to wait between attempts, ``retry(_:delay:while:)``.
    public func delay(_ interval: Duration) -> Promise {
        let nanoseconds = Int(max(0, min(interval / .nanoseconds(1), 9e18)))
        return appending(nanoseconds) { stage, _, _ in
            let nanoseconds = Node<Int>.payload(of: stage)
            return .hop(.global(), nanoseconds == 0 ? nil : .now() + .nanoseconds(nanoseconds))
        }
    }

    /// Fails with `error()` unless the promise settles within `interval`, and cancels the work.
    ///
    /// The way to bound a wait with a typed error: the work it gave up on is cancelled (not left
    /// running), and a settled promise cancels the timer:
    /// `download(url).timeout(.seconds(9), orFailWith: .slow)`. Put it after
    /// ``retry(_:delay:while:)`` to bound every attempt together, before it to bound each one.
    @inlinable public func timeout(
        _ interval: Duration, orFailWith error: @autoclosure @escaping @Sendable () -> Failure
    ) -> Promise {
        let timer = after(interval).flatMap { Promise(error: error()) }
        return RunHandle.join([self, timer]) { _, ended in
            if case .some((_, let outcome?)) = ended { .settle(outcome) } else { .cancel }
        }
    }

    /// Runs the work again after a failure, `attempts` times at most in all.
    ///
    /// As a promise is lazy, a retry runs the whole chain before it again, not a stored result. It
    /// waits `delay` before each new attempt, and retries while `shouldRetry` accepts the error;
    /// `attempts` below 1 stops the program with a message:
    /// `fetchFeed().retry(3, delay: .seconds(1), while: { $0.isTransient })`. The last attempt's
    /// error is the chain's.
    public func retry(
        _ attempts: Int, delay: Duration = .zero,
        while shouldRetry: @escaping @Sendable (Failure) -> Bool = { _ in true }
    ) -> Promise {
        retrying(
            attempts, name: "retry(_:delay:while:)",
            after: delay == .zero ? immediately : after(delay), while: shouldRetry)
    }

    /// Runs the work again after a failure, `attempts` times at most, after `pause` each time.
    private func retrying(
        _ attempts: Int, name: String, after pause: Guarantee<Void>,
        while shouldRetry: @escaping @Sendable (Failure) -> Bool
    ) -> Promise {
        guard attempts > 0 else { fatalError("\(name) needs at least 1 attempt, not \(attempts)") }
        guard attempts > 1 else { return self }
        return recover { error in
            guard shouldRetry(error) else { return Promise(error: error) }
            return pause.flatMap {
                retrying(attempts - 1, name: name, after: pause, while: shouldRetry)
            }
        }
    }
}

@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
nonisolated extension Promise {
    /// Not for a chain with a typed error, which ``PromiseError/timedOut`` is not: say which error
    /// a timeout is, with ``timeout(_:orFailWith:)`` (a guarantee takes an error type first, with
    /// ``setFailureType(to:)``), or erase the type first.
    // swift-format-ignore
    @available(*, unavailable, message: "timeout(_:) fails with PromiseError.timedOut, which this chain's error type is not: give the error with timeout(_:orFailWith:) (on a Guarantee, after setFailureType(to:)), or call eraseToAnyError() first")
    public func timeout(_ interval: Duration) -> Promise { fatalError() }
}

@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
nonisolated extension Promise where Failure == any Swift.Error {
    /// Fails with ``PromiseError/timedOut``, cancelling the work, if it has not settled in time.
    ///
    /// For a chain that fails with `any Error`: `fetch(url).timeout(.seconds(9))`. On a chain with
    /// a typed error, say which error a timeout is with ``timeout(_:orFailWith:)``.
    @inlinable public func timeout(_ interval: Duration) -> Promise {
        timeout(interval, orFailWith: PromiseError.timedOut)
    }
}

// With a clock, a time operator waits on that clock instead of a Dispatch timer: a
// ``ManualClock`` keeps the timer itself, and moves only when a test says so; another clock
// sleeps in a `Task` that the run's cancel cancels. The steps after the wait run where the clock
// woke them: on the thread that advances a manual clock, on the task's thread otherwise.

/// A guarantee that succeeds after `interval` on `clock`, such as a test's ``ManualClock``.
///
/// The form of ``after(_:)`` for code whose time a test controls: the code takes a clock, an app
/// passes `ContinuousClock()`, and a test passes a manual clock that it advances:
/// `after(.seconds(1), clock: clock).then(poll)`. Cancelling the run cancels the wait.
@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
nonisolated public func after(
    _ interval: Duration, clock: some Clock<Duration>
) -> Guarantee<Void> {
    if let manual = clock as? ManualClock {
        return Guarantee { resolver in
            let timer = manual.schedule(at: manual.now.advanced(by: interval)) { _ in
                resolver.fulfill()
            }
            resolver.onCancel { _ in _ = manual.cancel(timer) }
        }
    }
    return Guarantee { resolver in
        let deadline = clock.now.advanced(by: interval)
        let task = Task {
            try? await clock.sleep(until: deadline, tolerance: nil)
            resolver.fulfill()  // ignored if the run was cancelled
        }
        resolver.onCancel { _ in task.cancel() }
    }
}

@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
nonisolated extension Promise where Value: Sendable {
    /// Passes the outcome, value or error, on after `interval` on `clock`.
    ///
    /// The form of ``delay(_:)`` for code whose time a test controls:
    /// `fetchStatus().delay(.milliseconds(300), clock: clock)`. The steps after it run where the
    /// clock woke the run: on the thread that advances a ``ManualClock``. (The value waits in a
    /// step of its own, which Swift checks: it must be `Sendable`.)
    public func delay(_ interval: Duration, clock: some Clock<Duration>) -> Promise {
        let pause = after(interval, clock: clock).setFailureType(to: Failure.self)
        return flatMap { value in pause.map { _ in value } }
            .recover { error -> Promise in
                let kept = Promise(error: error)
                return pause.flatMap { _ in kept }
            }
    }
}

@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
nonisolated extension Promise {

    /// Fails with `error()` unless the promise settles within `interval` on `clock`, and cancels
    /// the work.
    ///
    /// The form of ``timeout(_:orFailWith:)`` for code whose time a test controls:
    /// `download(url).timeout(.seconds(9), orFailWith: .slow, clock: clock)`.
    public func timeout(
        _ interval: Duration, orFailWith error: @autoclosure @escaping @Sendable () -> Failure,
        clock: some Clock<Duration>
    ) -> Promise {
        let timer = after(interval, clock: clock).flatMap { Promise(error: error()) }
        return RunHandle.join([self, timer]) { _, ended in
            if case .some((_, let outcome?)) = ended { .settle(outcome) } else { .cancel }
        }
    }

    /// Runs the work again after a failure, `attempts` times at most, waiting on `clock`.
    ///
    /// The form of ``retry(_:delay:while:)`` for code whose time a test controls: each wait of
    /// `delay` is a timer of `clock`:
    /// `fetchFeed().retry(3, delay: .seconds(1), clock: clock) { $0.isTransient }`.
    public func retry(
        _ attempts: Int, delay: Duration = .zero, clock: some Clock<Duration>,
        while shouldRetry: @escaping @Sendable (Failure) -> Bool = { _ in true }
    ) -> Promise {
        retrying(
            attempts, name: "retry(_:delay:clock:while:)",
            after: delay == .zero ? immediately : after(delay, clock: clock), while: shouldRetry)
    }

    /// Not for a chain with a typed error, which ``PromiseError/timedOut`` is not: say which error
    /// a timeout is, with ``timeout(_:orFailWith:clock:)``, or erase the type first.
    // swift-format-ignore
    @available(*, unavailable, message: "timeout(_:clock:) fails with PromiseError.timedOut, which this chain's error type is not: give the error with timeout(_:orFailWith:clock:) (on a Guarantee, after setFailureType(to:)), or call eraseToAnyError() first")
    public func timeout(_ interval: Duration, clock: some Clock<Duration>) -> Promise {
        fatalError()
    }
}

@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
nonisolated extension Promise where Failure == any Swift.Error {
    /// Fails with ``PromiseError/timedOut``, cancelling the work, unless it settles within
    /// `interval` on `clock`.
    ///
    /// The form of ``timeout(_:)`` for code whose time a test controls:
    /// `fetch(url).timeout(.seconds(9), clock: clock)`.
    public func timeout(_ interval: Duration, clock: some Clock<Duration>) -> Promise {
        timeout(interval, orFailWith: PromiseError.timedOut, clock: clock)
    }
}

// MARK: - A clock for tests

/// A clock whose time moves only when a test says so, to test time-based code in no wall time.
///
/// Pass it where the code takes a clock, start the work, then move time: ``advance(by:)``,
/// ``advance(to:)`` and ``run()`` fire the timers that fall due, earliest deadline first (timers
/// set for the same moment in the order they were set), on the thread that calls them. The
/// time operators set their timers on it as their run reaches them, with no task in between,
/// and cancelling a run removes its timers at once: ``timerCount`` shows it. In an `async` test,
/// `await` the advance (``advance(by:isolation:)``): it lets the work reach its next wait before
/// time moves, and after each timer fires.
///
/// ```swift
/// let clock = ManualClock()
/// let handle = after(.seconds(5), clock: clock).run { print("fired") }
/// await clock.advance(by: .seconds(4))  // nothing yet
/// await clock.advance(by: .seconds(1))  // prints "fired"
/// handle.cancel()
/// ```
@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
nonisolated public final class ManualClock: Clock, @unchecked Sendable {
    // Sendable by its lock, which guards all its state: the timers it holds are `@Sendable`
    // closures, called on the thread that advances the clock and released outside the lock.

    /// A moment of a manual clock: the time since the clock's start.
    public struct Instant: InstantProtocol {
        /// The time since the clock's start.
        public var offset: Duration

        /// The moment `offset` after the clock's start.
        public init(offset: Duration) { self.offset = offset }

        /// The moment `duration` after this one.
        public func advanced(by duration: Duration) -> Instant {
            Instant(offset: offset + duration)
        }

        /// The time from this moment to `other`.
        public func duration(to other: Instant) -> Duration { other.offset - offset }

        /// Whether `left` comes before `right`.
        public static func < (left: Instant, right: Instant) -> Bool { left.offset < right.offset }
    }

    private typealias Timer = (deadline: Instant, fire: @Sendable (_ fired: Bool) -> Void)
    private let lock = RunHandle.Lock()
    private var instant: Instant
    private var timers: [Int: Timer] = [:]  // by the order they were set
    private var timersSet = 0

    /// A clock at `now`, the clock's start unless given.
    public init(now: Instant = Instant(offset: .zero)) { instant = now }

    deinit { lock.free() }

    /// The clock's time: it moves only with ``advance(by:)``, ``advance(to:)`` and ``run()``.
    public var now: Instant { locked { instant } }

    /// Zero: a manual clock's time moves by as little as a test asks.
    public var minimumResolution: Duration { .zero }

    /// How many timers wait on the clock: sleeps, and the timers of runs not yet ended.
    public var timerCount: Int { locked { timers.count } }

    /// Suspends until the clock reaches `deadline`, or throws `CancellationError` if the task is
    /// cancelled first (which removes the timer).
    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        let timer = locked { () -> Int in
            timersSet += 1
            return timersSet
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation {
                (waiter: CheckedContinuation<Void, any Swift.Error>) in
                _ = schedule(at: deadline, as: timer) { fired in
                    fired ? waiter.resume() : waiter.resume(throwing: CancellationError())
                }
                if Task.isCancelled { cancel(timer)?(false) }
            }
        } onCancel: {
            cancel(timer)?(false)
        }
    }

    /// Moves time forward by `duration`, firing the timers that fall due on the way, in order.
    public func advance(by duration: Duration) {
        advance(to: now.advanced(by: Self.forward(duration)))
    }

    /// Moves time forward to `deadline`, firing the timers that fall due on the way, in order.
    public func advance(to deadline: Instant) {
        checkForward(to: deadline)
        while fireNext(until: deadline) {}
    }

    /// Fires every timer, the ones that firing sets included, moving time to each deadline.
    ///
    /// It returns when no timer is left: work that always sets a new timer, such as a poll that
    /// never stops, never lets it return.
    public func run() { while fireNext(until: nil) {} }

    /// Moves time forward by `duration` as ``advance(by:)`` does, letting the work under test go
    /// on before time moves and after each timer fires.
    ///
    /// Call it from an `async` test: `await clock.advance(by: .seconds(1))`. Steps that a timer's
    /// firing runs have run when it returns, and so has work that they queued on the caller's
    /// actor (such as a main-actor step, from a `@MainActor` test); other tasks get many
    /// `Task.yield()`s to reach their next wait, as swift-clocks' `TestClock` gives them.
    public func advance(by duration: Duration, isolation: isolated (any Actor)? = #isolation) async
    {
        await advance(to: now.advanced(by: Self.forward(duration)), isolation: isolation)
    }

    /// Moves time forward to `deadline` as ``advance(to:)`` does, letting the work under test go
    /// on before time moves and after each timer fires, as ``advance(by:isolation:)`` does.
    public func advance(to deadline: Instant, isolation: isolated (any Actor)? = #isolation) async {
        checkForward(to: deadline)
        await settle(isolation)
        while fireNext(until: deadline) { await settle(isolation) }
    }

    /// Fires every timer as ``run()`` does, letting the work under test go on before and after
    /// each, as ``advance(by:isolation:)`` does.
    public func run(isolation: isolated (any Actor)? = #isolation) async {
        await settle(isolation)
        while fireNext(until: nil) { await settle(isolation) }
    }

    // `fatalError`, not `precondition`: its message stays in a release build.
    private static func forward(_ duration: Duration) -> Duration {
        guard duration >= .zero else {
            fatalError("advance(by:) needs a duration of at least zero, not \(duration)")
        }
        return duration
    }

    private func checkForward(to deadline: Instant) {
        let now = now
        guard deadline >= now else {
            fatalError("advance(to:) cannot move a ManualClock back, from \(now) to \(deadline)")
        }
    }

    /// Lets other work run: the steps queued on the main queue, jobs queued on `isolation`'s
    /// executor, then other tasks.
    ///
    /// A main-actor step hops with `DispatchQueue.main.async`; the main actor's own jobs can pass
    /// such blocks (measured in release builds: a `catch(on: .main)` after a `done(on: .main)`
    /// had not run after 32 yields in up to a quarter of advances). So, on the main actor, each
    /// round also waits behind what the main queue holds, and a few rounds follow hops that queue
    /// further hops.
    private func settle(_ isolation: isolated (any Actor)?) async {
        for _ in 0..<4 {
            if isolation is MainActor {
                await withCheckedContinuation { (queued: CheckedContinuation<Void, Never>) in
                    DispatchQueue.main.async { queued.resume() }
                }
            }
            for _ in 0..<8 { await Task.yield() }
        }
    }

    /// Sets a timer that calls `fire(true)` when time reaches `deadline`, and returns its number.
    func schedule(
        at deadline: Instant, as number: Int? = nil, _ fire: @escaping @Sendable (Bool) -> Void
    ) -> Int {
        locked {
            timersSet += number == nil ? 1 : 0
            let number = number ?? timersSet
            timers[number] = (deadline, fire)
            return number
        }
    }

    /// Removes a timer if it has not fired, and returns it, to release or call outside the lock.
    func cancel(_ timer: Int) -> (@Sendable (Bool) -> Void)? {
        locked { timers.removeValue(forKey: timer)?.fire }
    }

    /// Fires the earliest timer due by `deadline` (any timer if `nil`) and says whether there was
    /// one; when there is none, time moves to `deadline`.
    private func fireNext(until deadline: Instant?) -> Bool {
        let due = locked { () -> Timer? in
            let next = timers.min { ($0.value.deadline, $0.key) < ($1.value.deadline, $1.key) }
            guard let next, deadline.map({ next.value.deadline <= $0 }) ?? true else {
                instant = max(instant, deadline ?? instant)
                return nil
            }
            timers[next.key] = nil
            instant = max(instant, next.value.deadline)
            return next.value
        }
        due?.fire(true)
        return due != nil
    }

    private func locked<T>(_ body: () -> T) -> T { lock.withLock(body) }
}

// MARK: - Where code runs

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
/// the main queue, in an app as in a command-line tool that calls `dispatchMain()`.
nonisolated public enum MainActorContext: Sendable {
    /// The main actor, whose code runs on the main queue.
    case main
}

// A step isolated to the main actor hops to the main queue, as `on(.main)` does, and calls its
// closure there as the main actor's: the values that cross are `Sendable`, which the compiler
// checks. A token's check is one lock, in tied steps alone.
nonisolated extension Promise where Value: Sendable {
    /// Whether a token has not been invalidated since a run started.
    typealias Validity = @Sendable () -> Bool

    /// Transforms the value on the main actor, where the closure may use main-actor state.
    ///
    /// The step hops to the main queue first, on every run; the steps after it run there too. With
    /// a `token`, an invalidated token cancels the run instead of calling `body`, as there is
    /// then no value to go on with: `loadItem(1).map(on: .main) { cell(for: $0) }`.
    public func map<NewValue: Sendable>(
        on _: MainActorContext, tiedTo token: InvalidationToken? = nil,
        _ body: @escaping @MainActor @Sendable (Value) -> NewValue
    ) -> Promise<NewValue, Failure> {
        onMain(tiedTo: token) { chain, valid in
            chain.flatMap { value in
                Self.asMainActor { valid() ? .value(body(value)) : .init { $0.cancel() } }
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
        onMain(tiedTo: token) { chain, valid in
            chain.done { value in Self.asMainActor { if valid() { body(value) } } }
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
        onMain(tiedTo: token) { chain, valid in
            chain.catch { error in Self.asMainActor { if valid() { body(error) } } }
        }
    }

    /// This promise with a hop to the main queue (the main actor's executor, so its steps may
    /// assume the main actor), then the steps `add` adds, which ask `valid` whether `token` was
    /// invalidated since the run started: added as each run starts, so that a promise kept and run
    /// again after an `invalidate()` is tied anew, but a retry inside the run is not.
    func onMain<NewValue, NewFailure>(
        tiedTo token: InvalidationToken?,
        _ add: @escaping @Sendable (Promise, @escaping Validity) -> Promise<NewValue, NewFailure>
    ) -> Promise<NewValue, NewFailure> {
        guard let token else { return add(on(.main), { true }) }
        let tie = Guarantee<Validity> { [weak token] resolver in
            resolver.fulfill(Self.validity(token, tiedBy: resolver.run))
        }
        return tie.flatMap { add(on(.main), $0) }
    }

    /// Calls `body` as the main actor's, on the main queue, the main actor's executor, where a hop
    /// to `.main` runs a step. Not `MainActor.assumeIsolated`: before macOS 15 and iOS 18 its check
    /// is "on the main thread", and after a tool's `dispatchMain()` another thread drains the queue.
    static func asMainActor<T>(_ body: @MainActor () -> T) -> T {
        dispatchPrecondition(condition: .onQueue(.main))
        return withoutActuallyEscaping(body) { unsafeBitCast($0, to: (() -> T).self)() }
    }

    /// Whether `token` has not been invalidated since `run`'s user tied it (one that went away
    /// has).
    static func validity(_ token: InvalidationToken?, tiedBy run: RunHandle) -> Validity {
        guard let token else { return { false } }
        let tied = run.generation(of: token)
        return { [weak token] in token?.current == tied }
    }
}

// MARK: - Cancelling a run

/// A run of a promise, returned by every terminal, to cancel it.
///
/// After ``cancel()`` no completion is delivered, the operation waiting gets its
/// ``Resolver/onCancel(_:)`` handlers called once, no later step starts, and the
/// ``Promise/ensure(_:)`` steps still ahead run once those handlers have returned. Cancelling is
/// idempotent and safe from any thread; dropping a handle does not cancel. A step that cancels its
/// own run stops it before the next step; from another thread, the run stops at its next operation,
/// hop, entered promise or end (steps take no lock).
///
/// Keep the handle where the run's owner can reach it, such as a property of a screen, or put it in
/// a ``RunBag``: `let lookup = lookUp(id: id).run(some: show, none: report)`. An awaited promise
/// needs no handle: cancelling the task cancels the run. See <doc:Cancellation>.
nonisolated public final class RunHandle: @unchecked Sendable {
    // No property here or in `Join` needs an exclusivity check: one thread at a time uses each (as
    // said below), and the checks cost a quarter of the time of a combination's members.
    @exclusivity(unchecked) private var slot: Slot
    @exclusivity(unchecked) private var slotSize: Int
    @exclusivity(unchecked) private var slotAlignment: Int
    /// The type of the run's outcome, to destroy one that arrives after the run was cancelled.
    @exclusivity(unchecked) private var output: any Outcome.Type
    /// Which member of a combination it runs (see `Join`).
    @exclusivity(unchecked) @usableFromInline var member = 0
    /// The run a user started, for a run Future started inside it (a combination's member, a
    /// shared or ignoring run): its tokens' ties are that run's.
    private let user: RunHandle?

    // Owned by the one thread that drives the run; ownership passes under `lock`.
    @exclusivity(unchecked) private var plan = Plan()
    @exclusivity(unchecked) private var finish: ((Slot?) -> Void)?

    // Guarded by `lock` (the flags last, side by side, to keep the handle small).
    private let lock = Lock(room: 16)
    @exclusivity(unchecked) private var operation = 0
    @exclusivity(unchecked) private var resolved = 0
    /// The first operation of the chain now running: the handle may have run others before.
    @exclusivity(unchecked) private var firstOperation = 1
    @exclusivity(unchecked) private var cancelHandlers: [@Sendable (RunHandle) -> Void] = []
    @exclusivity(unchecked) private var driver = pthread_self()
    /// What a run hopping to a queue waits for, and the type of the outcome it holds meanwhile.
    @exclusivity(unchecked) private var hop: (timer: DispatchSourceTimer?, held: any Outcome.Type)?
    @exclusivity(unchecked) private var phase = Phase.driving
    @exclusivity(unchecked) private var cancelRequested = false
    /// Set by a cancel that came after the run had finished: a combination that claimed the
    /// handle for its next member, and was cancelled before it started it, so it never starts.
    @exclusivity(unchecked) private var cancelledWhileFinished = false
    /// Set while a canceller calls the handlers; it then halts the run itself.
    @exclusivity(unchecked) private var cancelling = false
    /// Set when a step cancels its own run, so that the very next step does not start (read
    /// without the lock by the thread that drives the run, which is the one that sets it).
    @exclusivity(unchecked) private var cancelledByStep = false
    /// The generation of each token the steps of a user's run tied to, as of the first tie.
    @exclusivity(unchecked) private var ties: [Tie] = []

    private struct Tie {
        weak var token: InvalidationToken?
        let identity: ObjectIdentifier
        let generation: Int
    }

    private enum Phase { case driving, operating, waiting, finished }

    @usableFromInline init(last: Stage, inside outer: RunHandle? = nil) {
        user = outer.map { $0.user ?? $0 }
        // The slot starts in the 16 bytes after the mutex (see `Lock`): most outcomes fit there,
        // and then a run costs one allocation less. `start` grows it for larger ones.
        slotSize = 16
        slotAlignment = 8
        output = last.output
        slot = Slot(memory: lock.room)
    }

    deinit {
        if slot.memory != lock.room { slot.memory.deallocate() }
        lock.free()
    }

    /// Whether ``cancel()`` was called before the run finished, or its operation was abandoned.
    ///
    /// A run that ended with an outcome stays not cancelled, whatever is called later.
    public var isCancelled: Bool { locked { cancelRequested } }

    /// Whether the chain that operation `id` belongs to was cancelled: an operation of a chain
    /// this handle ran before ended with an outcome, so it was not.
    func isCancelled(since id: Int) -> Bool { locked { cancelRequested && id >= firstOperation } }

    /// Cancels the run; see ``RunHandle`` for what that does.
    ///
    /// Safe from any thread, and as often as you like:
    /// `lookUp(id: id).run(some: show, none: report).cancel()`. Only the first call does anything,
    /// and none after the run ended.
    public func cancel() { _ = cancel(operation: nil) }

    /// Puts the run in `bag`, to be cancelled with it.
    ///
    /// For runs that belong to an owner, such as a screen, whose bag cancels them when it goes
    /// away: `fetchFeed().run(some: show, none: report).store(in: model.runs)`. The bag forgets
    /// runs that ended, so storing many does not grow it without bound.
    @discardableResult public func store(in bag: RunBag) -> RunHandle {
        bag.lock.withLock {
            if bag.runs.count == bag.runs.capacity { bag.runs.removeAll { $0.isFinished } }
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
    fileprivate let lock = RunHandle.Lock()
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
    /// For a reset that keeps the bag, such as a search field whose old queries are stale:
    /// `model.runs.cancelAll()`.
    public func cancelAll() {
        let cancelled = lock.withLock { () -> [RunHandle] in
            defer { runs = [] }
            return runs
        }
        for run in cancelled { run.cancel() }
    }
}

/// Silences the callbacks tied to it once ``invalidate()`` is called, while the work goes on.
///
/// Tomorrowland's invalidation token. Tie the callbacks that update a screen to the screen's token,
/// and invalidate it when what they would show is stale: a new search started, a cell reused, the
/// screen gone (a token invalidates itself as it goes away). A tied callback does not run once the
/// token was invalidated after the callback was tied, even one already waiting for the main queue;
/// the run and the steps that are not tied go on. A token can be used again: callbacks tied after
/// an `invalidate()` run.
///
/// Tie a main-actor step with its `tiedTo:` argument, such as ``Promise/done(on:tiedTo:_:)``'s.
/// Each run ties it as the run starts (a step of a promise a step made, as the run first reaches
/// one), and keeps that tie through every retry, combination or shared run inside it: a run
/// started before an `invalidate()` skips it, a run started after does not, so a promise kept and
/// run again is not silenced for good. Keep the
/// token, in the object whose callbacks it silences: ties do not keep it, and a token that has
/// gone away silences them.
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
    fileprivate var generation = 0  // guarded by the bag's lock

    /// The generation now. A getter, so that its caller's reference keeps the token past the
    /// unlock: a token that goes away cancels its runs, which takes the lock again.
    fileprivate var current: Int { lock.withLock { generation } }

    /// Makes a token, which invalidates itself as it goes away.
    ///
    /// Keep it in the object whose callbacks it silences, such as a view controller: when it goes,
    /// so do the callbacks, and the runs stored in the token are cancelled, as a bag's are.
    override public init() {}

    /// Silences every callback tied so far, and cancels the runs stored in the token.
    ///
    /// Callbacks tied afterwards run: call it before starting the work that replaces stale work,
    /// such as the next search: `token.invalidate()`. To cancel the runs alone, as Tomorrowland's
    /// `cancelWithoutInvalidating()` does, call ``RunBag/cancelAll()``.
    public func invalidate() {
        lock.withLock { generation += 1 }
        cancelAll()
    }
}

nonisolated extension Promise {
    /// A promise whose work goes on when a run of it is cancelled; the run itself ends at once.
    ///
    /// For work worth finishing though nobody waits for it any more, such as an upload: each run
    /// starts the work in a run of its own, which the run's cancellation does not reach. So the
    /// uploads of a `when` go on after one failed:
    /// `when(fulfilled: files.map { upload($0).ignoringCancel() })`. Tomorrowland's
    /// `cancelOnFailure: false` is this. A run that reaches it starts the work even if the run
    /// was cancelled meanwhile, or before it started; and a combination that ends before its
    /// turn starts it all the same (see ``when(fulfilled:concurrently:)``).
    public func ignoringCancel() -> Promise {
        let operation: @Sendable (Resolver<Value, Failure>) -> Void = { [last] resolver in
            RunHandle(last: last, inside: resolver.run).start(last) { slot in
                if let slot { resolver(slot.take(Outcome.self)) } else { resolver.cancel() }
            }
        }
        let source = RunHandle.Source(operation, file: #fileID, line: #line, ignoring: last)
        return Promise(last: source)
    }
}

// MARK: - Sharing one run

nonisolated extension Promise where Value: Sendable {
    /// A promise whose work runs once for many runs: opt-in eagerness.
    ///
    /// Choose it for work that many parts of an app need the same answer from, such as a profile or
    /// a configuration, when running it again would be wasted or wrong: `fetchProfile().share()`.
    /// The first run starts the work, runs that come while it is under way wait and go on in turn,
    /// later runs get its outcome, value or error, at once. Cancelling a run leaves the others
    /// waiting. Once every waiting run is cancelled, so is the work, and the next run starts it
    /// again, as after work that ended by cancellation; with `cancelsWhenAbandoned: false`, the
    /// work goes on, and the next run waits for it or gets its outcome. Keep the shared promise,
    /// not the one it came from, which runs anew.
    ///
    /// That second form is PromiseKit's cached in-flight promise, such as a token refresh that
    /// callers who come while it is under way share, whether or not the first one stays:
    ///
    /// ```swift
    /// let refresh = fetchProfile().share(cancelsWhenAbandoned: false)
    /// ```
    public func share(cancelsWhenAbandoned: Bool = true) -> Promise {
        let shared = RunHandle.Shared(self, cancelsWhenAbandoned: cancelsWhenAbandoned)
        return Promise { shared.join($0) }
    }

    /// A promise and the resolver that settles it from outside, for work no run starts.
    ///
    /// Choose it for outcomes that arrive through a delegate or a notification, rather than an
    /// operation: `let (location, resolver) = Promise<Place, GPSError>.pending()`. Its runs wait
    /// for the resolver or get its outcome, as a shared promise's do; if the resolver goes unused,
    /// they end by cancellation.
    public static func pending(
        file: StaticString = #fileID, line: UInt = #line
    ) -> (promise: Promise, resolver: Resolver<Value, Failure>) {
        let shared = RunHandle.Shared<Value, Failure>(nil, cancelsWhenAbandoned: false)
        let source = Promise(file: file, line: line) { shared.outside = $0 }.last
        RunHandle(last: source).start(source, immediately: true) { shared.settle($0?.take(), 0) }
        return (Promise { shared.join($0) }, shared.outside.take()!)
    }
}

// MARK: - Swift concurrency

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
            let handle = RunHandle(last: last)
            // Named, because the cancellation handler's operation runs on the generic executor:
            // the continuation's body, which starts the run, is then sent back to the caller's.
            let isolation = #isolation
            return await withTaskCancellationHandler {
                await withUnsafeContinuation(isolation: isolation) { continuation in
                    handle.start(last) { continuation.resume(returning: $0?.take(Outcome.self)) }
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

// MARK: - Debug reports

/// Where debug builds of Future report misuse, such as an operation that let its resolver go
/// without resolving it.
///
/// Reports go to standard error unless you set ``handler``, say to your app's logger, as
/// PromiseKit's `conf.logHandler` does. Release builds check nothing and report nothing.
///
/// ```swift
/// PromiseDiagnostics.handler = { message in logger.warning("\(message)") }
/// ```
nonisolated public enum PromiseDiagnostics {
    /// Receives each report, on the thread that found the misuse.
    ///
    /// Set it once at launch, or from a test to collect reports; safe to read and set from any
    /// thread, and called outside Future's locks. The default writes `Future: ` and the message to
    /// standard error.
    public static var handler: @Sendable (String) -> Void {
        get { lock.withLock { current } }
        set {
            var replaced = newValue
            lock.withLock { swap(&replaced, &current) }
            // The old handler goes here, outside the lock: what it held may report or set one.
        }
    }

    nonisolated(unsafe) private static var current: @Sendable (String) -> Void = { message in
        _ = "Future: \(message)\n".withCString { write(2, $0, strlen($0)) }
    }
    nonisolated(unsafe) private static let lock = RunHandle.Lock()
}

// MARK: - Internals: how a chain is stored

// A chain is a list of stages linked from the last to the first, so that promises built on the
// same one share it. A run pushes the stages on a stack and pops them one at a time; a step that
// returns a promise pushes its stages instead of running it nested: so no step grows the stack.

nonisolated extension RunHandle {
    /// One step of a chain; `Node` adds what it keeps (usually your closure), which is `Sendable`.
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
        /// The chain this step runs in a run of its own, which cancelling does not reach: an
        /// `ignoringCancel()` promise's.
        @usableFromInline var ignoring: Stage? { nil }

        /// The work of the `ignoringCancel()` promise this chain starts with, if it does.
        @usableFromInline var ignoredWork: Stage? {
            var first = self
            while let parent = first.parent { first = parent }
            return first.ignoring
        }

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

        // Releasing a chain one link at a time, rather than each link releasing the one before it
        // from its own deinit, keeps dropping a 100,000-link chain off the stack.
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
    /// a reabstraction thunk: one more allocation for every promise made this way.)
    @usableFromInline final class Source<Value, Failure: Swift.Error>: Stage, @unchecked Sendable {
        /// A `var` only for `deinit`, which releases it as a level of releases (see `Nesting`).
        @exclusivity(unchecked) @usableFromInline var operation:
            @Sendable (Resolver<Value, Failure>) -> Void
        @usableFromInline let ignored: Stage?
        #if DEBUG
            @usableFromInline let origin: (file: StaticString, line: UInt)
        #endif

        @inlinable init(
            _ operation: @escaping @Sendable (Resolver<Value, Failure>) -> Void,
            file: StaticString, line: UInt, ignoring ignored: Stage? = nil
        ) {
            self.operation = operation
            self.ignored = ignored
            #if DEBUG
                origin = (file, line)
            #endif
            super.init(after: nil, output: Swift.Result<Value, Failure>.self, isEnsure: false) {
                stage, _, run in run.perform(unsafeDowncast(stage, to: Source.self))
            }
        }

        @usableFromInline override var ignoring: Stage? { ignored }

        // An operation may keep promises (a combination its members, a shared promise its work),
        // whose operations keep more: each is released as a level of releases, in this body (Swift
        // releases stored properties after every deinit has returned).
        deinit {
            let nested = Nesting.enterRelease()
            if !nested { Nesting.hold(operation) }  // for the bottom level to release
            operation = { _ in }
            Nesting.leaveRelease()
        }
    }

    /// A type whose values a slot can hold; `Box<T>` stands for `T`.
    @usableFromInline protocol Outcome { static func discard(from slot: Slot) }

    @usableFromInline enum Box<Output>: Outcome {
        @usableFromInline static func discard(from slot: Slot) { _ = slot.take(Output.self) }
    }

    /// What the loop does after a step: go on (the output is in the slot), run a chain whose
    /// outcome is the output, wait for an operation's resolver, stop (the run was cancelled), or
    /// go on on a queue (after a time), the output waiting in the slot.
    @usableFromInline enum Next {
        case proceed
        case enter(Stage)
        case suspend, halt
        case hop(DispatchQueue, DispatchTime?)
    }

    /// Where a step finds its input and leaves its output: raw memory sized for the largest outcome
    /// in the chain, so passing a value along costs no allocation and no cast.
    @usableFromInline struct Slot {
        @usableFromInline let memory: UnsafeMutableRawPointer

        @inlinable func put<Output>(_ output: Output) {
            memory.initializeMemory(as: Output.self, to: output)
        }

        /// Moves the value out; `sending`, as what a slot holds has no other owner (an operation's
        /// outcome comes `sending`, a constant is `Sendable`, a step's output is its own).
        @inlinable func take<Input>(_: Input.Type = Input.self) -> sending Input {
            nonisolated(unsafe) let input = memory.assumingMemoryBound(to: Input.self).move()
            return input
        }
    }

    /// The steps a run has still to take, the next on top, and the chains they belong to. Entering
    /// a chain pushes its stages, so a chain that ends by entering another leaves nothing behind,
    /// and a loop that recurses through `then` runs in constant memory.
    fileprivate struct Plan {
        /// Unretained, so that walking a chain costs no reference counting; `root` and `chains`
        /// keep them alive.
        private(set) var stages: [Unmanaged<Stage>] = []
        /// The run's own chain; and the last stage of each chain entered since that is still on
        /// the stack, with the height of the stack below it.
        private var root: Stage?
        private var chains: [(last: Stage, base: Int)] = []

        /// Forgets the chains of a run whose stack is empty, keeping the stack's memory for another
        /// run (8 bytes a step).
        mutating func end() { (root, chains) = (nil, []) }

        mutating func push(_ last: consuming Stage, isRoot: Bool = false) {
            // Chains whose stages have all run are released here, not while their last step runs.
            while let chain = chains.last, chain.base >= stages.count { chains.removeLast() }
            var stage = Unmanaged.passUnretained(last)
            let depth = last.depth
            if isRoot {
                stages.reserveCapacity(depth)  // in the memory a run before kept, if enough
                root = consume last
            } else {
                chains.append((consume last, stages.count))
            }
            for _ in 0..<depth {
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

nonisolated extension RunHandle {
    /// Drives a run of the chain `last`; `finish` gets the slot with the outcome, or `nil` if the
    /// run ended by cancellation (after its `ensure` steps), exactly once. A handle whose run
    /// ended with an outcome can run another chain so: how a combination runs the members that
    /// end at once, one after another, on one handle and in the same memory.
    /// `immediately` runs it on this stack even deep in nested runs (see `proceed`).
    @usableFromInline func start(
        _ last: consuming Stage, immediately: Bool = false, _ finish: @escaping (Slot?) -> Void
    ) {
        let cancelled = locked { () -> Bool in
            phase = .driving
            driver = pthread_self()
            firstOperation = operation + 1
            if cancelledWhileFinished {
                cancelRequested = true
                cancelledWhileFinished = false
            }
            return cancelRequested  // e.g. an awaiting task cancelled before the start
        }
        output = last.output
        self.finish = finish
        _ = fitSlot(to: last)
        plan.push(consume last, isRoot: true)  // the plan's alone, to let go of where the run ends
        let resumption = cancelled ? Resumption.halt : .drive
        immediately ? resume(resumption) : proceed(resumption)
    }

    /// The loop that runs a chain: one step after another, entering the chains that steps
    /// return, until the end, an operation that has not resolved yet, a hop, or cancellation.
    private func drive() {
        // Locals, not properties, in the loop: a property is read from memory at every use.
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
                slot = fitSlot(to: inner)
                if isCancelled { return halt(plan) }
            case .suspend: return
            case .halt: return halt(plan)
            case .hop(let queue, let deadline):
                // A move, not a copy: a thread that kept the plan could release the chain's
                // steps after the queue's thread has finished the run.
                swap(&plan, &self.plan)
                return hop(to: queue, at: deadline, holding: stage.takeUnretainedValue().output)
            }
        }
        swap(&plan, &self.plan)  // a move, so that its memory stays unshared for reuse
        complete()
    }

    /// Runs the operation of `source` with a fresh resolver.
    @inlinable func perform<Value, Failure>(_ source: Source<Value, Failure>) -> Next {
        guard let id = beginOperation() else {
            source.ignored.map(startIgnored)
            return .halt
        }
        #if DEBUG
            let (file, line) = source.origin
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
            phase = cancelRequested ? .driving : .waiting
            return cancelRequested ? .halt : .suspend
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
            unneeded = cancelHandlers
            cancelHandlers = []
            phase = .driving
            if wasWaiting { driver = pthread_self() }
            return wasWaiting
        }
        unneeded.removeAll()  // outside the lock: releasing a handler may run any deinit
        if resume { proceed(.drive) }
    }

    /// Whether operation `id` is the latest and has not resolved (under the lock).
    private func isPending(_ id: Int) -> Bool { id == operation && id != resolved }

    func onCancel(_ id: Int, _ handler: @escaping @Sendable (RunHandle) -> Void) {
        let callNow = locked { () -> Bool in
            guard isPending(id), !cancelRequested else { return isPending(id) }
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
        #if DEBUG
            PromiseDiagnostics.handler(
                "an operation of \(promise()) released its resolver without resolving it. "
                    + "Its run can never finish, so it was cancelled.")
        #endif
    }

    /// Cancels the run, if it is still going (and operation `id`, if given, still pending): calls
    /// the handlers, then halts the run if it waits, or once the thread driving it stops.
    private func cancel(operation id: Int?) -> Bool {
        let handlers = locked { () -> [@Sendable (RunHandle) -> Void]? in
            if id == nil, phase == .finished { cancelledWhileFinished = true }
            guard !cancelRequested, phase != .finished, id.map(isPending) ?? true else {
                return nil
            }
            if id == nil, phase == .driving, pthread_equal(driver, pthread_self()) != 0 {
                cancelledByStep = true
            }
            cancelRequested = true
            cancelling = true
            defer { cancelHandlers = [] }
            return cancelHandlers
        }
        guard let handlers else { return false }
        proceed(.cancel(handlers))
        return true
    }

    /// Calls a cancelled run's handlers, then halts the run if it waits.
    private func callCancelHandlers(_ handlers: [@Sendable (RunHandle) -> Void]) {
        for handler in handlers { handler(self) }
        let takeOver = locked { () -> Bool in
            cancelling = false
            guard phase == .waiting else { return false }
            phase = .driving
            return true
        }
        if takeOver { halt(plan) }
    }

    /// Parks the run, the step's output in the slot and its plan in `plan`, until `queue` carries
    /// it on, at `deadline` if given. A timer is a Dispatch source, not a delayed work item: when
    /// cancelled, a source lets go of its handler (and so of the run) at once, where a cancelled
    /// work item stays in Dispatch's timer list, holding the run, until its deadline.
    private func hop(
        to queue: DispatchQueue, at deadline: DispatchTime?, holding held: any Outcome.Type
    ) {
        let timer = deadline.map { _ in DispatchSource.makeTimerSource(queue: queue) }
        // Active before anyone can cancel or drop it (Dispatch traps on an inactive source's
        // release); with no deadline yet, it does not fire.
        timer?.activate()
        let parked = locked { () -> Bool in
            if !cancelRequested {
                phase = .waiting
                hop = (timer, held)
            }
            return !cancelRequested
        }
        guard parked else {
            held.discard(from: slot)
            return halt(plan)
        }
        guard let timer, let deadline else { return queue.async { [self] in endHop() } }
        timer.setEventHandler { [self] in endHop() }
        timer.schedule(deadline: deadline)
    }

    /// The queue of a hop carries the run on, unless it was cancelled meanwhile.
    private func endHop() {
        let timer = locked { () -> DispatchSourceTimer?? in
            guard phase == .waiting, let hop else { return .none }
            phase = .driving
            self.hop = nil
            driver = pthread_self()
            return .some(hop.timer)
        }
        guard let timer else { return }
        timer?.cancel()  // a fired timer's source keeps its handler, and so the run, until then
        proceed(.drive)
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
        let finish = self.finish.take()
        plan.end()
        finish?(slot)
    }

    /// Ends a cancelled run: runs the `ensure` steps still ahead, innermost chain first. While a
    /// canceller still calls handlers, it parks the run instead, for the canceller to halt.
    private func halt(_ rest: Plan) {
        self.plan = rest
        let hop = locked { () -> (timer: DispatchSourceTimer?, held: any Outcome.Type)?? in
            guard !cancelling else {
                phase = .waiting
                return .none
            }
            defer {
                phase = .finished
                self.hop = nil
            }
            return .some(self.hop)
        }
        guard let hop else { return }
        if let hop {
            hop.timer?.cancel()
            hop.held.discard(from: slot)
        }
        let finish = self.finish
        plan = Plan()
        self.finish = nil
        for stage in rest.stages.reversed() {
            let stage = stage.takeUnretainedValue()
            if stage.isEnsure { Node<@Sendable () -> Void>.payload(of: stage)() }
            stage.ignoring.map(startIgnored)
        }
        finish?(nil)
    }

    /// Starts the work of an `ignoringCancel()` promise that this run reached cancelled (or
    /// that a settled combination never started): cancelling does not reach it, and nobody
    /// waits for its outcome.
    @usableFromInline func startIgnored(_ work: Stage) {
        RunHandle(last: work, inside: self).start(work) { $0.map(work.output.discard) }
    }

    /// The slot, grown first if `chain` has larger outcomes (the slot is empty as a chain starts).
    private func fitSlot(to chain: Stage) -> Slot {
        guard chain.slotSize > slotSize || chain.slotAlignment > slotAlignment else { return slot }
        if slot.memory != lock.room { slot.memory.deallocate() }
        slotSize = max(chain.slotSize, slotSize)
        slotAlignment = max(chain.slotAlignment, slotAlignment)
        slot = Slot(memory: .allocate(byteCount: slotSize, alignment: slotAlignment))
        return slot
    }

    /// Whether the run has ended, one way or another.
    fileprivate var isFinished: Bool { locked { phase == .finished } }

    /// The generation of `token` for the user's run, which ties to a token once, however often
    /// its retries run a tied step.
    func generation(of token: InvalidationToken) -> Int {
        let user = user ?? self
        let identity = ObjectIdentifier(token)
        let current = token.current  // the token's lock, not taken inside the run's
        // One lock, so that steps tying at once on two threads agree on the first generation. A
        // tie's weak reference is read only when its identity is `token`'s, which the caller
        // holds: so it is never a token's last reference, let go of inside the lock.
        return user.locked {
            let tied = user.ties.first { $0.identity == identity && $0.token === token }
            if let tied { return tied.generation }
            user.ties.append(Tie(token: token, identity: identity, generation: current))
            return current
        }
    }

    private func locked<T>(_ body: () -> T) -> T { lock.withLock(body) }
}

// MARK: - Internals: nesting

// Runs and releases can nest without bound. A run started or resumed inside a step of another run
// (a combination's member, a shared run, a resolver called from a step, a cancel handler) runs on
// the same stack; and releasing an operation that holds promises (a combination's members, a
// shared promise's work) releases them from inside its own release. Nested 10,000 deep, either
// would overflow the stack. So past `limit` levels of either on a thread, the run or the release
// waits until the levels below have returned: the bottom level does it before it returns, so what
// a call started is done when the call returns. (A step's closure that captured a promise is
// still released recursively: see the README's "Nesting is flat".)

nonisolated extension RunHandle {
    /// What a run does next, once there is room on the stack.
    enum Resumption {
        case drive, halt
        case cancel([@Sendable (RunHandle) -> Void])
    }

    /// The levels of runs and of releases on one thread, and what waits for them to unwind.
    final class Nesting {
        /// A level takes about 2.5 KiB of stack in debug builds: 32 take 80 KiB at most, of the
        /// 512 KiB of a Dispatch thread on Apple's systems.
        static let limit = 32
        /// Each thread's own, made on first use, released when the thread ends.
        static let key = {
            var key = pthread_key_t()
            pthread_key_create(&key) {
                let nesting: UnsafeMutableRawPointer? = $0  // optional on Linux, not on Darwin
                nesting.map { Unmanaged<Nesting>.fromOpaque($0).release() }
            }
            return key
        }()

        // One thread uses these. The counters change only in the methods below, which are never
        // inlined, so that an optimizer cannot assume that a level's work, between two of them,
        // leaves them alone; and they skip exclusivity checks. The rest keep their checks: they
        // change around a release, which may run any deinit, and with the checks off the optimizer
        // assumed that a release cannot touch them (seen in Swift 6.3.1 release builds: a double
        // free of `held`).
        @exclusivity(unchecked) private var runs = 0
        @exclusivity(unchecked) private var releases = 0
        private var isDraining = false
        private var isReleasing = false
        private var waiting: [(RunHandle, Resumption)] = []
        private var held: [Any] = []

        /// Calls `body` with this thread's nesting (without retaining it: the thread keeps it).
        private static func withCurrent<T>(_ body: (Nesting) -> T) -> T {
            if let current = pthread_getspecific(key) {
                return Unmanaged<Nesting>.fromOpaque(current)._withUnsafeGuaranteedRef(body)
            }
            let nesting = Nesting()
            pthread_setspecific(key, Unmanaged.passRetained(nesting).toOpaque())
            return body(nesting)
        }

        /// Resumes `run` now, as one more level of runs, if there is room for it; else later.
        static func resume(_ run: RunHandle, _ resumption: Resumption) {
            withCurrent { nesting in
                guard nesting.enterRun() else { return nesting.wait(run, resumption) }
                run.resume(resumption)
                nesting.leaveRun()
            }
        }

        @inline(never) private func enterRun() -> Bool {
            guard runs < Nesting.limit else { return false }
            runs += 1
            return true
        }

        @inline(never) private func wait(_ run: RunHandle, _ resumption: Resumption) {
            waiting.append((run, resumption))
        }

        /// The bottom level resumes the runs that waited, unless it already does, further down.
        @inline(never) private func leaveRun() {
            runs -= 1
            guard runs == 0, !isDraining else { return }
            isDraining = true
            while !waiting.isEmpty {
                var batch: [(RunHandle, Resumption)] = []
                swap(&batch, &waiting)  // out first: resuming one may make more wait
                for (run, resumption) in batch { run.resume(resumption) }
            }
            isDraining = false
        }

        /// A source's deinit releases its operation as a level of releases: if there is no room
        /// for the level, it keeps it for the bottom level to release (`hold`).
        static func enterRelease() -> Bool { withCurrent { $0.enterRelease() } }

        static func hold(_ value: Any) { withCurrent { $0.hold(value) } }

        static func leaveRelease() { withCurrent { $0.leaveRelease() } }

        @inline(never) private func enterRelease() -> Bool {
            releases += 1
            return releases <= Nesting.limit
        }

        @inline(never) private func hold(_ value: Any) { held.append(value) }

        /// The bottom level releases what the levels above kept, unless it already does.
        @inline(never) private func leaveRelease() {
            releases -= 1
            guard releases == 0, !isReleasing else { return }
            isReleasing = true
            while !held.isEmpty {
                var batch: [Any] = []
                swap(&batch, &held)  // out first: releasing one may keep more
                batch.removeAll()
            }
            isReleasing = false
        }
    }

    /// Does `resumption` now if the thread's stack has room for one more run, else later.
    private func proceed(_ resumption: Resumption) { Nesting.resume(self, resumption) }

    fileprivate func resume(_ resumption: Resumption) {
        switch resumption {
        case .drive: drive()
        case .halt: halt(plan)
        case .cancel(let handlers): callCancelHandlers(handlers)
        }
    }
}

nonisolated extension RunHandle {
    /// What a combination does after a member ended: wait for more, or end its run.
    @usableFromInline enum Verdict<Output, Failure: Swift.Error> {
        case wait, cancel
        case settle(Swift.Result<Output, Failure>)
    }

    /// The members' outcomes so far, in input order: `nil` while running, or if cancelled.
    @usableFromInline struct Tally<Member, Failure: Swift.Error> {
        @usableFromInline var outcomes: [Swift.Result<Member, Failure>?]
        @usableFromInline var ended = 0
        @inlinable init(_ count: Int) { outcomes = Array(repeating: nil, count: count) }
        @inlinable var isComplete: Bool { ended == outcomes.count }
        @inlinable var results: [Swift.Result<Member, Failure>] { outcomes.map { $0! } }
        @inlinable var errors: [Failure] {
            outcomes.compactMap { if case .failure(let error)? = $0 { error } else { nil } }
        }
    }

    @usableFromInline typealias Policy<
        Member, Failure: Swift.Error, Output, OutFailure: Swift.Error
    > =
        @Sendable (
            Tally<Member, Failure>, (Int, Swift.Result<Member, Failure>?)?
        ) -> Verdict<Output, OutFailure>

    /// A promise whose every run runs `members` anew, at most `width` at once, and asks `decide`
    /// what to do each time one ends (with its index and outcome, `nil` if it was cancelled), or
    /// at once (with `nil`) if there are none: the one mechanism behind every combinator.
    @inlinable static func join<Member, Failure, Output, OutFailure>(
        _ members: [Promise<Member, Failure>], _ width: Int = .max,
        _ decide: @escaping Policy<Member, Failure, Output, OutFailure>
    ) -> Promise<Output, OutFailure> {
        Promise { Join(members, width, decide).start($0) }
    }

    /// One run of a combination.
    @usableFromInline
    final class Join<Member, Failure: Swift.Error, Output, OutFailure: Swift.Error>:
        @unchecked Sendable
    {
        @usableFromInline let lock = Lock()
        @usableFromInline let members: [Promise<Member, Failure>]
        @usableFromInline let width: Int
        @usableFromInline let decide: Policy<Member, Failure, Output, OutFailure>
        // Guarded by `lock`.
        @exclusivity(unchecked) @usableFromInline var tally: Tally<Member, Failure>
        @exclusivity(unchecked) @usableFromInline var running: [RunHandle?]
        /// Whether a thread runs the launch loop: at first, the one that starts the run.
        @exclusivity(unchecked) @usableFromInline var started = 0
        @exclusivity(unchecked) @usableFromInline var launching = true
        /// The combination's own resolver; `nil` once it has settled or been cancelled.
        @exclusivity(unchecked) @usableFromInline var resolver: Resolver<Output, OutFailure>?
        /// The combination's run, which its members' runs are inside.
        @usableFromInline var outer: RunHandle?

        @inlinable init(
            _ members: [Promise<Member, Failure>], _ width: Int,
            _ decide: @escaping Policy<Member, Failure, Output, OutFailure>
        ) {
            self.members = members
            self.width = width
            self.decide = decide
            tally = Tally(members.count)
            running = Array(repeating: nil, count: members.count)
        }

        deinit { lock.free() }

        @inlinable func start(_ resolver: Resolver<Output, OutFailure>) {
            self.resolver = resolver
            outer = resolver.run
            resolver.onCancel { [self] _ in stop() }
            if members.isEmpty { settle(decide(tally, nil), resolver) } else { launch() }
        }

        /// Starts members while there is room, in a loop rather than by recursion: members that
        /// end at once make room from inside `start`, and a hundred thousand must not nest. The
        /// caller has claimed the loop (`launching`), so that one thread at a time runs it.
        @inlinable func launch() {
            // The handle that runs members one after another while each ends at once (see `start`).
            var lane: (handle: RunHandle, finish: (Slot?) -> Void)?
            // A member's handle is in `running` from the moment it is claimed, before it starts,
            // so that `stop()` reaches it: a member cancelled before `start` never begins (even on
            // a handle whose last member has finished: see `cancelledWhileFinished`).
            while let (index, handle) = lock.withLock({ () -> (Int, RunHandle)? in
                guard resolver != nil, started < members.count, started - tally.ended < width else {
                    launching = false
                    return nil
                }
                // The lane goes on only if its member ended with an outcome: else it goes on
                // elsewhere, or was cancelled.
                if let last = lane?.handle.member, tally.outcomes[last] == nil { lane = nil }
                started += 1
                let handle =
                    lane?.handle ?? RunHandle(last: members[started - 1].last, inside: outer)
                running[started - 1] = handle
                return (started - 1, handle)
            }) {
                if lane == nil { lane = (handle, { [self] in end(handle.member, $0?.take()) }) }
                handle.member = index
                handle.start(members[index].last, lane!.finish)
            }
        }

        /// Member `index` ended, with `outcome` or (`nil`) by cancellation.
        @inlinable func end(_ index: Int, _ outcome: sending Swift.Result<Member, Failure>?) {
            var claimed = false  // the launch loop, if no thread runs it (one lock, not two)
            // The members' outcomes go outside the lock, after the combination settles.
            typealias Settled = (
                Verdict<Output, OutFailure>, Resolver<Output, OutFailure>, Tally<Member, Failure>
            )
            let settled = lock.withLock { () -> Settled? in
                guard let resolver else { return nil }
                running[index] = nil
                tally.ended += 1
                tally.outcomes[index] = outcome
                let verdict = decide(tally, (index, outcome))
                if case .wait = verdict {
                    claimed = !launching
                    launching = true
                    return nil
                }
                self.resolver = nil
                defer { tally.outcomes = [] }
                return (verdict, resolver, tally)
            }
            if let (verdict, resolver, _) = settled { settle(verdict, resolver) }
            if claimed { launch() }
        }

        /// Cancels the members still running, then settles the combination's run.
        @inlinable func settle(
            _ verdict: Verdict<Output, OutFailure>, _ resolver: Resolver<Output, OutFailure>
        ) {
            stop()
            guard case .settle(let settled) = verdict else { return resolver.cancel() }
            nonisolated(unsafe) let outcome = settled  // members' outcomes, which it let go of
            resolver(outcome)
        }

        /// Cancels every member still running: the combination settled, or was cancelled. Every
        /// call cancels them all, even after another: a cancel of the combination's run that
        /// comes while the run that settled it is still cancelling the members must not return
        /// before they are (cancelling one twice is a no-op). The members it never started that
        /// ignore cancel start now (see `startIgnored`).
        @inlinable func stop() {
            typealias Stopped = (
                [RunHandle], ArraySlice<Promise<Member, Failure>>, Resolver<Output, OutFailure>?
            )
            let (running, unstarted, _) = lock.withLock { () -> Stopped in
                defer { started = members.count }
                return (self.running.compactMap { $0 }, members[started...], resolver.take())
            }
            for handle in running { handle.cancel() }
            for member in unstarted { member.last.ignoredWork.map { outer?.startIgnored($0) } }
        }
    }

    /// What `share()` and `pending()` keep: the one run of the work, the runs waiting for it, and
    /// its outcome once it has one (`.some(nil)` if the resolver of `pending()` went away).
    final class Shared<Value: Sendable, Failure: Swift.Error>: @unchecked Sendable {
        private let lock = Lock()
        /// The work to run: `nil` once done, and for `pending()`, which has none.
        private var work: Promise<Value, Failure>?
        private var outcome: Swift.Result<Value, Failure>??
        /// The run of the work under way, numbered by the waiting run that started it.
        private var run: (number: Int, handle: RunHandle?)?
        /// Keyed by number: a run that leaves is removed at once however many wait.
        private var waiting: [Int: Resolver<Value, Failure>] = [:]
        private var lastNumber = 0
        /// The resolver that `pending()` hands out.
        var outside: Resolver<Value, Failure>?
        /// Whether the run of the work is cancelled when every waiting run has left.
        private let cancelsWhenAbandoned: Bool

        init(_ work: Promise<Value, Failure>?, cancelsWhenAbandoned: Bool) {
            self.work = work
            self.cancelsWhenAbandoned = cancelsWhenAbandoned
            if work == nil { run = (0, nil) }
        }

        deinit { lock.free() }

        /// The operation of every run of the shared promise.
        func join(_ resolver: Resolver<Value, Failure>) {
            // The run's handle is recorded before it starts, so that a joiner leaving meanwhile
            // cancels it, and the work does not begin.
            let (number, known, start) = lock.withLock {
                () -> (Int, Swift.Result<Value, Failure>??, (Stage, RunHandle)?) in
                lastNumber += 1
                if let outcome { return (lastNumber, outcome, nil) }
                waiting[lastNumber] = resolver
                guard run == nil, let work else { return (lastNumber, nil, nil) }
                run = (lastNumber, RunHandle(last: work.last, inside: resolver.run))
                return (lastNumber, nil, (work.last, run!.handle!))
            }
            if let known { return known.map { resolver($0) } ?? resolver.cancel() }
            resolver.onCancel { [weak self] _ in self?.leave(number) }
            guard let (work, handle) = start else { return }
            handle.start(work) { [weak self] in self?.settle($0?.take(), number) }
        }

        /// A waiting run was cancelled; when none is left, the work is cancelled, if it is to be.
        private func leave(_ number: Int) {
            // The resolver that left is let go of outside the lock, as it may be its run's last.
            let (_, abandoned) = lock.withLock { () -> (Resolver<Value, Failure>?, RunHandle?) in
                let left = waiting.removeValue(forKey: number)
                guard waiting.isEmpty, cancelsWhenAbandoned, work != nil, let run else {
                    return (left, nil)
                }
                self.run = nil
                return (left, run.handle)
            }
            abandoned?.cancel()
        }

        /// The run of the work numbered `number` ended, with `outcome` or (`nil`) by cancellation:
        /// the waiting runs go on in the order they came.
        func settle(_ outcome: sending Swift.Result<Value, Failure>?, _ number: Int) {
            // The work goes outside the lock: what its steps captured may run the shared promise.
            var done: Promise<Value, Failure>?
            let waiting = lock.withLock { () -> [Resolver<Value, Failure>] in
                guard run?.number == number else { return [] }
                run = nil
                if outcome != nil || work == nil {
                    self.outcome = .some(outcome)
                    swap(&done, &work)
                }
                defer { self.waiting = [:] }
                return self.waiting.sorted { $0.key < $1.key }.map(\.value)
            }
            done = nil
            for resolver in waiting {
                if let outcome { resolver(outcome) } else { resolver.cancel() }
            }
        }
    }

    /// A mutex for an object that frees it in its `deinit` (a class: one more allocation a run),
    /// with `room` bytes after it for the object's use, in the same allocation.
    @usableFromInline struct Lock {
        @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>

        @inlinable init(room: Int = 0) {
            let size = MemoryLayout<pthread_mutex_t>.stride + room
            let memory = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 16)
            mutex = memory.bindMemory(to: pthread_mutex_t.self, capacity: 1)
            pthread_mutex_init(mutex, nil)
        }

        /// The room after the mutex, aligned to 8 bytes, as a mutex is.
        var room: UnsafeMutableRawPointer { UnsafeMutableRawPointer(mutex + 1) }

        @usableFromInline func free() {
            pthread_mutex_destroy(mutex)
            mutex.deallocate()
        }

        @inlinable func withLock<T>(_ body: () -> T) -> T {
            pthread_mutex_lock(mutex)
            defer { pthread_mutex_unlock(mutex) }
            return body()
        }
    }

}
