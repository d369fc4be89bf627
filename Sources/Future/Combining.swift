// Combining.swift: `when`, `any` and `race`, each a policy for `Engine.join`
// (Engine/Join.swift), which runs the members and asks the policy as each ends. Join.swift's
// header tells a `when`, and a cancel of one, step by step.

// Every combinator runs its promises anew on each of its runs, all at once unless a limit says
// otherwise, cancels those it no longer needs (and starts none after it ended, but those that
// ignore cancel), settles once those have stopped (their `ensure` steps have run, an `ensure(on:)`
// cleanup queued), and keeps input order. The steps after a combination go on where the member that
// settled it ended (on its resolver's thread, or its run's) once the members it cancelled have
// stopped (a member in a step on another thread stops as the step returns; a cancel handler on
// another thread, as it returns): on that member's queue, if it ended on one (after `on(_:)`, say),
// else on the thread that stopped last: a call of a member that the combination was making as it
// decided (in its launch, or as another member ended) stops as it returns, on the thread that made
// it. A member made from an operation alone ends where its resolver is called, at once, even before
// its operation returned: the combination decides there, and cancels the other members (their
// handlers and `ensure` steps) and starts those that ignore cancel on that thread; resolved from
// another thread during its call, it leaves the steps after to whichever stops last: the thread
// that called it, as its operation returns, or the resolving thread, once the cancels it set off
// are done, or a member it cancelled that stops later elsewhere. A member that ends by cancellation
// ends a `when` or `any` as cancelled, and drops out of a race or of a
// `when(resolved:concurrently:until:)`, which a signal stops.

/// Succeeds with every value, in the order given, or fails with the first error to arrive.
///
/// The combinator for work that is all needed, such as the pages of a report: the first failure
/// decides, and the members still running are cancelled: `when(fulfilled: ids.map(fetchUser))`. No
/// promises succeed with `[]`. To keep going past failures, use
/// ``when(resolved:concurrently:)`` or ``any(_:)-([Promise<Value,Failure>])``; to take the first
/// to finish, ``race(_:)``.
///
/// With a `limit`, at most that many members run at once: the next starts as one finishes, in the
/// order given, so a long list does not flood a server:
/// `when(fulfilled: urls.map(download), concurrently: 4)`. A `limit` below 1 stops the program with
/// a message. On a promise of an array, ``Promise/thenMap(concurrently:_:)`` does the same as a
/// step.
///
/// To let the other members' work finish after one failed, such as uploads worth completing, make
/// each member ignore the cancel: `when(fulfilled: files.map { upload($0).ignoringCancel() })`.
/// The combination still fails without waiting for that work, which goes on, and whose outcome is
/// dropped. The members it has not started yet that begin with `ignoringCancel()` (or with a
/// combination of such members) start as it ends, all at once (the limit no longer holds); the
/// others never start. What such work does on the thread that starts it, before it first waits,
/// comes before the failure goes on. A run cancelled before it reaches the combination starts
/// them too.
@inlinable nonisolated public func when<Value, Failure>(
    fulfilled promises: [Promise<Value, Failure>], concurrently limit: Int = .max
) -> Promise<[Value], Failure> {
    Engine.join(promises, checkedLimit(limit, "when(fulfilled:concurrently:)")) { tally, ending in
        switch ending {
        case .outcome(_, .failure(let error)): .settle(.failure(error))
        case .cancelled: .cancel
        case .noMembers, .outcome: tally.isComplete ? .settle(.success(tally.values)) : .wait
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
///
/// With a `limit`, at most that many members run at once, the next starting as one finishes, in
/// the order given: `when(resolved: files.map(upload), concurrently: 4)`. A `limit` below 1
/// stops the program with a message.
@inlinable nonisolated public func when<Value, Failure>(
    resolved promises: [Promise<Value, Failure>], concurrently limit: Int = .max
) -> Guarantee<[Swift.Result<Value, Failure>]> {
    Engine.join(promises, checkedLimit(limit, "when(resolved:concurrently:)")) { tally, ending in
        if case .cancelled = ending { return .cancel }
        return tally.isComplete ? .settle(.success(tally.results)) : .wait
    }
}

/// Waits for every promise, as ``when(resolved:concurrently:)`` does, unless `stop` settles
/// first: then it cancels the members still running and succeeds with what finished.
///
/// For a batch that a deadline or an interrupt may cut short, whose finished items are still
/// worth reporting. The batch is stopped, not cancelled: it succeeds, so the steps after it run,
/// with an outcome for each member, `nil` for one that had not finished (cancelled, or never
/// started). A member whose run ends by cancellation of its own drops out with `nil`, as in a race.
///
/// ```swift
/// let (interrupt, resolver) = Guarantee<Void>.pending()  // `resolver.fulfill(())` on Ctrl-C
/// when(resolved: urls.map(download), concurrently: 4, until: race(interrupt, after(.seconds(30))))
///     .run(some: { outcomes in show(outcomes) })
/// ```
///
/// `stop` runs with each run of the batch, beside the members (the limit does not count it), and
/// is cancelled as the batch ends; if its run ends by cancellation (say a pending promise whose
/// resolver went unused), so does the batch's. The members it never started that begin with
/// `ignoringCancel()` start their work as it ends, as ``when(fulfilled:concurrently:)``'s do. A
/// run of the batch that is cancelled delivers nothing, as any run: to stop the batch when an
/// awaiting task is cancelled, await ``outcomes(of:concurrently:)``. With no promises, the batch
/// succeeds at once with `[]`, and `stop` does not run.
@inlinable nonisolated public func when<Value, Failure>(
    resolved promises: [Promise<Value, Failure>], concurrently limit: Int = .max,
    until stop: Guarantee<Void>
) -> Guarantee<[Swift.Result<Value, Failure>?]> {
    let limit = checkedLimit(limit, "when(resolved:concurrently:until:)")
    // The signal is member 0, started first, in a place of its own beside the limit's. With no
    // promises there is nothing to stop: the batch succeeds at once.
    let signal = stop.map { nil as Value? }.setFailureType(to: Failure.self)
    let members = promises.isEmpty ? [] : [signal] + promises.map { $0.map { $0 as Value? } }
    let count = promises.count  // (not the members, which the batch lets go of as it ends)
    return Engine.join(members, limit == .max ? limit : limit + 1, signals: 1) { tally, ending in
        if case .cancelled(0) = ending { return .cancel }
        // Settled once the signal came, or every member ended.
        guard tally.ended == count || tally.outcomes[0] != nil else { return .wait }
        return .settle(.success(tally.outcomes.dropFirst().map { $0?.map { $0! } }))
    }
}

/// Waits for every promise and succeeds with every outcome, in the order given, unless all failed.
///
/// Choose it to make the most of partial success, such as loading from several sources: it fails,
/// with an ``AllPromisesFailedError`` holding every error, only when nothing succeeded. No promises
/// succeed with `[]`. ``when(resolved:concurrently:)`` never fails; ``race(fulfilled:)`` stops at
/// the first success: `any(mirrors.map(download))`.
@inlinable nonisolated public func any<Value, Failure>(
    _ promises: [Promise<Value, Failure>]
) -> Promise<[Swift.Result<Value, Failure>], AllPromisesFailedError<Failure>> {
    Engine.join(promises) { tally, ending in
        if case .cancelled = ending { return .cancel }
        guard tally.isComplete else { return .wait }
        let errors = tally.errors
        guard errors.isEmpty || errors.count < tally.outcomes.count else {
            return .settle(.failure(AllPromisesFailedError(errors)))  // every member failed
        }
        return .settle(.success(tally.results))
    }
}

/// Waits for promises of any types and succeeds with a tuple of their outcomes, unless all failed.
///
/// The tuple form of ``any(_:)-([Promise<Value,Failure>])``, for a fixed number of different
/// sources: `any(fetchProfile(), fetchAvatar(id)).done { profile, avatar in
/// show(try? profile.get(), try? avatar.get()) }`. The promises share one error type, as with
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
/// Choose it when the fastest answer is the answer, failure included, as for the first mirror to
/// answer: `race(mirrors.map(download))`; to ignore failures until one succeeds, use
/// ``race(fulfilled:)``. When every member has ended by cancellation (or none was given), the race
/// ends so too. A race against ``after(_:)`` is a timeout, which ``Promise/timeout(_:orFailWith:)``
/// says in one step.
///
/// The losers' work is cancelled; to let it finish, such as downloads that fill a cache, make each
/// member ignore the cancel: `race(mirrors.map { download($0).ignoringCancel() })`. Such members
/// start even after a member before them won at once.
@inlinable nonisolated public func race<Value, Failure>(
    _ promises: [Promise<Value, Failure>]
) -> Promise<Value, Failure> {
    Engine.join(promises) { tally, ending in
        if case .outcome(_, let outcome) = ending { return .settle(outcome) }
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
    Engine.join(promises) { tally, ending in
        if case .outcome(_, .success(let value)) = ending { return .settle(.success(value)) }
        guard tally.isComplete else { return .wait }
        return tally.outcomes.contains { $0 == nil }
            ? .cancel : .settle(.failure(AllPromisesFailedError(tally.errors)))
    }
}

/// `limit`, checked to be at least 1, else the program stops with a message that names `function`.
/// (`fatalError`, not `precondition`: its message stays in a release build.)
@inlinable nonisolated func checkedLimit(_ limit: Int, _ function: StaticString) -> Int {
    guard limit > 0 else { fatalError("\(function) needs a limit of at least 1, not \(limit)") }
    return limit
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
