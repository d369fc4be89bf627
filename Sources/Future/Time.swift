// Time.swift: `after`, `delay`, `timeout` and `retry`, on Dispatch's clock or on a clock you pass.
// Builds on the hop (`Next.hop`) for `after` and `delay`, on `Engine.timeout` (the work raced
// against an alarm: Engine/Timeout.swift, whose header tells a timeout that fires step by step)
// for `timeout`, both waiting in Engine/Deadlines.swift or on your clock (Engine/Timeline.swift);
// and on `recover` for `retry`.

import Dispatch

// `Duration` needs macOS 13, iOS 16, tvOS 16 and watchOS 9, the package's minimums. An app with a
// lower deployment target can copy the file in: these declarations alone are then unavailable.

/// A guarantee that succeeds after `interval`, holding no thread.
///
/// Start a chain with it to wait first, as a poll does; a step that can fail gives the chain its
/// error type: `after(.seconds(1)).then(poll)`. Cancelling the run cancels the timer. To wait in
/// the middle of a chain, use ``Promise/delay(_:)``.
@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
nonisolated public func after(_ interval: Duration) -> Guarantee<Void> {
    interval > .zero ? immediately.delay(interval) : nextTurn
}

/// Not Future's spelling: ``after(_:)`` takes a `Duration`.
// swift-format-ignore
@available(*, unavailable, message: "Future's after takes a Duration: after(.seconds(1)), after(.milliseconds(500))")
nonisolated public func after(seconds: Double) -> Guarantee<Void> { fatalError() }

/// The first step of every `after`, made once rather than at every call.
nonisolated private let immediately = Guarantee(value: ())

/// `after(.zero)`: a hop to a global queue, which lets the caller's work go on first. Made once, as
/// it is a common call.
nonisolated private let nextTurn = immediately.on(.global())

@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
nonisolated extension Promise {
    /// Passes the outcome, value or error, on after `interval`, on a global queue.
    ///
    /// Choose it to pace a chain, such as a pause before showing a result; cancelling the run
    /// meanwhile cancels the timer: `fetchStatus().delay(.milliseconds(300))`. The steps after it
    /// run on a global queue: add ``on(_:)`` to go on elsewhere. To start with a wait, use
    /// ``after(_:)``; to wait between attempts, ``retry(_:delay:while:)``.
    public func delay(_ interval: Duration) -> Promise {
        appending(Self.nanoseconds(interval)) { stage, _, _ in
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
    ///
    /// The clock is raced only once the work waits (for an operation's resolver, or a queue): work
    /// that settles without waiting settles so, however long its steps took. When the deadline
    /// passes first, the work is cancelled, as a cancel from another thread cancels it: at its next
    /// operation, hop or entered promise, or as it ends. Synchronous steps that run past the
    /// deadline (after the work waited) finish first, and the work's `ensure` steps run (an
    /// `ensure(on:)` cleanup is queued on its queue, not waited for); the promise then fails, and
    /// the chain goes on, on the thread that lets go of the work last: the alarm's (a global
    /// queue's) for work that waits; for work that runs, the work's own as it stops, or the
    /// alarm's if the alarm's cancel has not returned by then (as when the work's cancel
    /// handlers, which that cancel calls, run longer). Work that wins goes on where it ended:
    /// on the queue its steps ran on (work that starts with ``on(_:)``, say), even if it ended
    /// before the timeout had set its alarm (then in a block of its own on that queue); work that
    /// ended on a thread of its own before then (a resolver's) goes on on the thread that started
    /// the timeout. An interval of zero or less lets work that settles at once, without waiting,
    /// win, as on every clock, and fails the work as soon as it waits (for an operation's resolver,
    /// or a queue), unless another thread settles it in that instant: the chain then goes on as
    /// after work that wins.
    @inlinable public func timeout(
        _ interval: Duration, orFailWith error: @autoclosure @escaping @Sendable () -> Failure
    ) -> Promise {
        Engine.timeout(
            self, failingWith: error, after: Self.nanoseconds(interval),
            deadline: { .now() + .nanoseconds($0) },
            alarm: { deadline, fire in Engine.setAlarm(at: deadline, fire) })
    }

    /// `interval` in nanoseconds, within what a `DispatchTime` holds, and not negative.
    @usableFromInline static func nanoseconds(_ interval: Duration) -> Int {
        // Compared before `components`, which divides, and traps past `Int64.max` seconds.
        guard interval > .zero else { return 0 }
        guard interval < .seconds(9_000_000_000) else { return 9_000_000_000_000_000_000 }
        let (seconds, attoseconds) = interval.components
        return Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
    }

    /// Runs the work again after a failure, `attempts` times at most in all.
    ///
    /// As a promise is lazy, a retry runs the whole chain before it again, not a stored result. It
    /// waits `delay` before each new attempt (not at all, at zero or less), and retries while
    /// `shouldRetry` accepts the error; `attempts` below 1 stops the program with a message:
    /// `fetchFeed().retry(3, delay: .seconds(1), while: { $0.isTransient })`. The last attempt's
    /// error is the chain's.
    public func retry(
        _ attempts: Int, delay: Duration = .zero,
        while shouldRetry: @escaping @Sendable (Failure) -> Bool = { _ in true }
    ) -> Promise {
        retrying(
            attempts, name: "retry(_:delay:while:)",
            after: delay <= .zero ? immediately : after(delay), while: shouldRetry)
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

// With a clock, a time operator waits on that clock (Engine/Timeline.swift): a ``ManualClock``
// keeps the timer itself, and moves only when a test says so; `ContinuousClock` and
// `SuspendingClock` wait on Dispatch's timers, as with no clock; another clock sleeps in a `Task`
// that the run's cancel cancels (a sleep that throws for another reason ends the wait, as one
// that slept would). The steps after the wait run where the clock woke them: on the
// thread that advances a manual clock (at once, for a deadline it has reached), on a global queue
// for the standard clocks (`after(_:clock:)` is `after(_:)` for them), on the task's thread
// otherwise.

/// A guarantee that succeeds after `interval` on `clock`, such as a test's ``ManualClock``.
///
/// The form of ``after(_:)`` for code whose time a test controls: the code takes a clock, an app
/// passes `ContinuousClock()`, and a test passes a manual clock that it advances:
/// `after(.seconds(1), clock: clock).then(poll)`. Cancelling the run cancels the wait.
/// `ContinuousClock` and `SuspendingClock` wait on Dispatch's timers, as ``after(_:)`` does, in
/// Dispatch's time, which stops while the machine sleeps (see
/// ``Promise/timeout(_:orFailWith:clock:)``).
@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
nonisolated public func after(
    _ interval: Duration, clock: some Clock<Duration>
) -> Guarantee<Void> {
    if clock is ContinuousClock || clock is SuspendingClock { return after(interval) }
    return Engine.pause(on: clock) { clock.now.advanced(by: interval) }
}

@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
nonisolated extension Promise where Value: Sendable {
    /// Passes the outcome, value or error, on after `interval` on `clock`.
    ///
    /// The form of ``delay(_:)`` for code whose time a test controls:
    /// `fetchStatus().delay(.milliseconds(300), clock: clock)`. The steps after it run where the
    /// clock woke the run: on the thread that advances a ``ManualClock``, on a global queue for
    /// `ContinuousClock` and `SuspendingClock`, which wait on Dispatch's timers as ``delay(_:)``
    /// does (see ``timeout(_:orFailWith:clock:)``). (The value waits in a step of its own, which
    /// Swift checks: it must be `Sendable`.)
    public func delay(_ interval: Duration, clock: some Clock<Duration>) -> Promise {
        let pause = after(interval, clock: clock)
        let outcome: Guarantee<Outcome> = mapOutcome { .success($0) }
        return outcome.then { outcome in pause.then { Promise(result: outcome) } }
    }
}

@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
nonisolated extension Promise {

    /// Fails with `error()` unless the promise settles within `interval` on `clock`, and cancels
    /// the work.
    ///
    /// The form of ``timeout(_:orFailWith:)`` for code whose time a test controls:
    /// `download(url).timeout(.seconds(9), orFailWith: .slow, clock: clock)`. Its timer races the
    /// work: with an interval of zero or less, work that settles at once still wins.
    ///
    /// `ContinuousClock` and `SuspendingClock` set their timer on Dispatch's, as
    /// ``timeout(_:orFailWith:)`` does, at the same cost; another clock sleeps in a task, whose
    /// sleep, if it throws for a reason other than the run's cancel, ends the wait as if it had
    /// slept.
    /// Dispatch's time stops while the machine sleeps, as `SuspendingClock`'s does: a
    /// `ContinuousClock` deadline is converted to it once, as the timer is set, so a wait that
    /// spans a sleep of the machine ends later by the time slept.
    @inlinable public func timeout(
        _ interval: Duration, orFailWith error: @autoclosure @escaping @Sendable () -> Failure,
        clock: some Clock<Duration>
    ) -> Promise {
        Engine.timeout(
            self, failingWith: error, after: interval, deadline: { clock.now.advanced(by: $0) },
            alarm: { deadline, fire in Engine.setAlarm(at: deadline, on: clock, fire) })
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
            after: delay <= .zero ? immediately : after(delay, clock: clock), while: shouldRetry)
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
    @inlinable public func timeout(_ interval: Duration, clock: some Clock<Duration>) -> Promise {
        timeout(interval, orFailWith: PromiseError.timedOut, clock: clock)
    }
}
