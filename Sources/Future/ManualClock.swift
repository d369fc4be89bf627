// ManualClock.swift: a clock whose time moves only when a test says so. The time operators of
// Time.swift set their timers on it directly.

import Dispatch

/// A clock whose time moves only when a test says so, to test time-based code in no wall time.
///
/// Pass it where the code takes a clock, start the work, then move time: ``advance(by:)``,
/// ``advance(to:)`` and ``run()`` fire the timers that fall due, earliest deadline first (timers
/// set for the same moment in the order they were set), on the thread that calls them. The
/// time operators set their timers on it as their run reaches them, with no task in between (a
/// wait whose deadline the clock has reached, such as `after(.zero, clock:)`, sets none and ends
/// at once, as on every clock), and cancelling a run removes its timers at once: ``timerCount`` shows it as `cancel()` returns.
/// (When the run goes on on another thread, a timer it is setting as you cancel, or whose work is
/// ending just then, goes a moment later; so does one a `cancel()` inside a cancel handler
/// removes, as that cancel is done once the handler returns.) In an `async` test,
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
nonisolated public final class ManualClock: Clock, Sendable {

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

    /// The clock's time and timers (Engine/Timeline.swift).
    let timeline: Timeline

    /// A clock at `now`, the clock's start unless given.
    public init(now: Instant = Instant(offset: .zero)) { timeline = Timeline(now: now) }

    /// The clock's time: it moves only with ``advance(by:)``, ``advance(to:)`` and ``run()``.
    public var now: Instant { timeline.now }

    /// Zero: a manual clock's time moves by as little as a test asks.
    public var minimumResolution: Duration { .zero }

    /// How many timers wait on the clock: sleeps, and the timers of runs not yet ended.
    public var timerCount: Int { timeline.count }

    /// Suspends until the clock reaches `deadline`, or throws `CancellationError` if the task is
    /// cancelled first (which removes the timer). It returns at once for a deadline the clock
    /// has reached.
    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        // The time operators' alarm, in a run that the task's cancellation cancels.
        guard await Engine.pause(on: self, until: { deadline }).value != nil else {
            throw CancellationError()
        }
    }

    /// Moves time forward by `duration`, firing the timers that fall due on the way, in order.
    ///
    /// Advances from several threads at once add up: two threads that each advance by a second
    /// move the clock by two, and an advance from a timer's firing adds to the one that fired it.
    /// One timer fires at a time, each at its deadline: an advance waits while another thread's
    /// timer fires. So a timer's step that waits for another thread's advance of this clock (or
    /// of a clock whose timers advance this one) waits for ever: advance from the step itself.
    /// Each returns once no timer due by its own target is left. A negative `duration` stops the
    /// program with a message.
    public func advance(by duration: Duration) { fire(until: claim(by: duration)) }

    /// Moves time forward to `deadline`, firing the timers that fall due on the way, in order.
    ///
    /// A `deadline` before ``now`` stops the program with a message: time does not go back. So,
    /// while other threads advance the clock, move it with ``advance(by:)``, which adds up.
    public func advance(to deadline: Instant) { fire(until: claim(deadline)) }

    /// Fires every timer, the ones that firing sets included, moving time to each deadline.
    ///
    /// It returns when no timer is left: work that always sets a new timer, such as a poll that
    /// never stops, never lets it return.
    public func run() { fire(until: nil) }

    /// Moves time forward by `duration` as ``advance(by:)`` does, letting the work under test go
    /// on before time moves and after each timer fires.
    ///
    /// Call it from an `async` test: `await clock.advance(by: .seconds(1))`. Steps that a timer's
    /// firing runs have run when it returns, and so has work that they queued on the caller's
    /// actor (such as a main-actor step, from a `@MainActor` test); other tasks get many
    /// `Task.yield()`s to reach their next wait, as swift-clocks' `TestClock` gives them. Yields
    /// promise no order on a loaded machine: before the first advance, wait until work started in
    /// a new `Task` has set its timers (``timerCount``).
    public func advance(by duration: Duration, isolation: isolated (any Actor)? = #isolation) async
    {
        await fire(until: claim(by: duration), isolation)
    }

    /// Moves time forward to `deadline` as ``advance(to:)`` does, letting the work under test go
    /// on before time moves and after each timer fires, as ``advance(by:isolation:)`` does.
    public func advance(to deadline: Instant, isolation: isolated (any Actor)? = #isolation) async {
        await fire(until: claim(deadline), isolation)
    }

    /// Fires every timer as ``run()`` does, letting the work under test go on before and after
    /// each, as ``advance(by:isolation:)`` does.
    public func run(isolation: isolated (any Actor)? = #isolation) async {
        await fire(until: nil, isolation)
    }

    private func fire(until deadline: Instant?) { while timeline.fireNext(until: deadline) {} }

    private func fire(until deadline: Instant?, _ isolation: isolated (any Actor)?) async {
        await Timeline.settle(isolation)
        while timeline.fireNext(until: deadline) { await Timeline.settle(isolation) }
    }

    // `fatalError`, not `precondition`: its message stays in a release build.
    private func claim(by duration: Duration) -> Instant {
        guard duration >= .zero else {
            fatalError("advance(by:) needs a duration of at least zero, not \(duration)")
        }
        return timeline.claim(nil, by: duration).horizon
    }

    private func claim(_ deadline: Instant) -> Instant {
        let now = timeline.claim(deadline, by: .zero).now
        guard deadline >= now else {
            fatalError("advance(to:) cannot move a ManualClock back, from \(now) to \(deadline)")
        }
        return deadline
    }
}
