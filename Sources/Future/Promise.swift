// Promise.swift: the type, `Guarantee` (a promise that cannot fail), and the errors Future
// raises itself. Everything else is built from five primitives, each in one place:
// - the operation, the closure a promise is made from, called with a `Resolver` (Making.swift;
//   the engine calls it in `Run.perform`, Engine/Run.swift, or a combination's member in
//   `Join.launch`, Engine/Join.swift);
// - appending a stage, a step that reads the slot and writes it (`appending`,
//   Engine/Chain.swift; the idiom is explained where Making.swift first uses it), and, built on
//   it, `mapOutcome`, a step from the whole `Result` to the next;
// - entering, a step that runs the promise its closure makes in the same run (`entering`, beside
//   it), or calls it in place if it is an operation alone;
// - joining, running many promises and deciding as each ends (`Engine.join`,
//   Engine/Join.swift);
// - hopping, a step that has the run go on on a queue, maybe at a deadline (`Next.hop`, used by
//   `on(_:)` in Queues.swift and `delay(_:)` in Time.swift).
// A step that returns a promise enters it (`then`, Chaining.swift): its stages run in the
// same run, with no nested run; a promise of an operation alone is called in place. A `timeout`
// races its work against an alarm (Time.swift, Engine/Timeout.swift).

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
/// chain steps with ``map(_:)-k0ui`` and `then` (see <doc:ChoosingAStep>), handle errors with
/// `recover` or ``catch(_:)``, and run it with ``run(some:none:)`` or by awaiting ``value-7wpyp``.
nonisolated public struct Promise<Value, Failure: Swift.Error>: Sendable {
    /// The work: an operation alone, or a chain of steps (`Engine.Body` and `Engine.Operation`,
    /// the operation's closure, are in Engine/Chain.swift). A promise made from an operation
    /// keeps the operation alone, which costs nothing more: a run, a combination or a step that
    /// returns the promise calls it directly. Adding a step makes it the first stage of a chain,
    /// whose last stage knows the one before it.
    @usableFromInline let body: Engine.Body

    @inlinable init(last: Engine.Stage) { body = .chain(last: last) }

    @inlinable init(_ operation: Engine.Operation) { body = .operation(operation) }

    /// The last stage of the chain, if the promise is one; `nil` for an operation alone, which a
    /// run calls with no stage at all.
    @inlinable var chain: Engine.Stage? {
        if case .chain(let last) = body { last } else { nil }
    }

    /// The promise as a chain of stages, for a step to be added after it: an operation alone is
    /// made the first stage of a new chain, anew at each read.
    @inlinable var last: Engine.Stage {
        switch body {
        case .chain(let last): last
        case .operation(let operation): Engine.Source<Value, Failure>(operation)
        }
    }
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
