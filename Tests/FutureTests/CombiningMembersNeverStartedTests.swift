import Testing

@testable import Future

/// A member that its combination ends before the member starts runs none of its steps, not even
/// its `ensure` steps (`ensure`, and the Cancellation article): only a member that started runs
/// them, and a member starts when its combination starts the member's run. The window is a
/// member the launch loop has taken, whose run has not started. It is narrow now (about 1 round in
/// 4,000), as a run's start takes its lock section before it sets out its steps; it was wide (26
/// to 155 rounds in 1,000) when a run set out its steps first, and this member's many steps took
/// long. (A member cancelled once its run started runs its `ensure` steps; a cancel from another
/// thread stops it at its next operation, hop or entered promise, which may come before its first
/// step. This member has none of those, so once started it takes every step.)
@Suite struct CombiningMembersNeverStarted {
    /// Member 0, an operation alone, fails on another thread as soon as it is called, while the
    /// launch loop goes on to member 1: the failure decides the `when` and cancels member 1, which
    /// either started, and then takes every step, as it has no operation to stop at, or did not,
    /// and then takes none, its `ensure` step included.
    @Test func aMemberCancelledBeforeItsFirstStepRunsNoneOfItsSteps() async {
        let rounds = Rounds()
        let strays = Counter()  // `ensure` steps of a member whose first step never ran
        let neverStarted = Counter()  // rounds in which member 1 never started
        await onThread(stackSize: 1 << 20) {
            for _ in 0..<1000 where rounds.goOn {
                let resolvers = Delivery<Resolver<Int, TestError>>()
                let called = Counter()
                let firstStepRan = Counter()
                let ensured = Counter()
                // No operation, so no cancel stops it once started: it either takes every
                // step or, never started, none.
                var second = Promise<Int, TestError>(value: 0).map { value in
                    firstStepRan.increment()
                    return value
                }
                for _ in 0..<300 { second = second.map { $0 + 1 } }
                second = second.ensure { ensured.increment() }
                let first = Promise<Int, TestError> { resolver in
                    resolvers.send(resolver)
                    called.increment()
                }
                detachThread {
                    guard spin(until: { called.value > 0 }) else { return }
                    resolvers.wait()?.reject(TestError("0"))
                }
                let done = Delivery<Void>()
                when(fulfilled: [first, second]).run { _ in done.send(()) }
                guard rounds.waited(done.wait() != nil) else { break }
                if firstStepRan.value == 0 {
                    neverStarted.increment()
                    if ensured.value > 0 { strays.increment() }
                }
            }
        }
        #expect(
            strays.value == 0,
            "ensure steps of members that never started, in \(neverStarted.value) such rounds")
        #expect(rounds.goOn, "rounds that did not end")
    }
}
