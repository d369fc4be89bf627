// Chaining.swift: steps that transform the value, `map` and its kin, and the three shapes of
// `then`, whose promise shape (and `flatMap`, its other name) is the step that enters a promise
// (or calls in place one of an operation alone).
// Builds on `appending`, `mapOutcome` and `entering` (Engine/Chain.swift).

// The builders are `@inlinable`, so that a chain built in your module is compiled for your types:
// each step costs one allocation to build, and no dynamic cast to run.
//
// `then` has three shapes, for a step that returns a value, a promise or a `Result`, and no more:
// Swift weighs every overload of a name against every closure in a chain, so each shape more
// multiplies the time a long chain takes to type-check. `map` has one shape: the fast way to write
// a value step in a closure. The promise and `Result` shapes take any error type, so that such a
// step is never taken for a value. On a chain that cannot fail, the `Failure == Never` extension
// below gives those two shapes again, taking the step's error type as PromiseKit's
// `Guarantee.then` does: Swift prefers them there, as the more constrained overload of each pair
// (both promise shapes are disfavored, neither `Result` shape is), and they cost a chain that
// can fail nothing.
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
    /// it may fail with any error, and the chain takes its type (there Swift picks the overload of
    /// the `Failure == Never` extension, below, which does it):
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
        guard let convert = Self.errorConversion(from: StepFailure.self) else {
            // One error type (no conversion: `StepFailure` is `Failure`, checked above, so the
            // stages are retyped as they are): the step enters the promise `next` makes (see
            // `Run.callOrEnter`), or passes a failure on.
            typealias Entry = Engine.Entry<Value, NewValue, StepFailure>
            let chained: Promise<NewValue, StepFailure> = entering(next) { stage, slot, run in
                switch slot.take(Swift.Result<Value, StepFailure>.self) {
                case .success(let value): return run.callOrEnter(Entry.next(of: stage)(value))
                case .failure(let error):
                    slot.put(Swift.Result<NewValue, StepFailure>.failure(error))
                    return .proceed
                }
            }
            return Promise<NewValue, Failure>(last: chained.last)
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
        guard let convert = Self.errorConversion(from: StepFailure.self) else {
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
    ) -> Promise<NewValue, Failure> { then(next) }

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
    // On a guarantee, Swift picks this one over the promise shape that takes any error type:
    // both are disfavored, and this one is the more constrained (see the file's header).
    @inlinable @_disfavoredOverload public func then<NewValue, NewFailure>(
        _ next: @escaping @Sendable (Value) -> Promise<NewValue, NewFailure>
    ) -> Promise<NewValue, NewFailure> {
        typealias Entry = Engine.Entry<Value, NewValue, NewFailure>
        return entering(next) { stage, slot, run in
            run.callOrEnter(Entry.next(of: stage)(slot.take(Outcome.self).get()))
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
