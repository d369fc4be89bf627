import Dispatch
import Testing

@testable import Future

/// A run, and a combination, give each operation a resolver of its own: a late report through
/// the resolver of an earlier operation, which work on another thread still holds, counts for
/// nothing, however it is held (an Objective-C weak reference, which no reference count shows,
/// would keep it as this strong one does). (In the TSan run: the suite's name holds
/// "Concurrency".)
@Suite struct ResolverPerCallConcurrency {
    /// An operation that resolves at once and reports again, late: once the next operation has
    /// started, and before it resolves.
    static func reportingLate(
        _ value: Int, once next: DispatchSemaphore, then done: DispatchSemaphore
    ) -> Guarantee<Int> {
        Guarantee { resolver in
            resolver.fulfill(value)
            DispatchQueue.global().async {
                _ = next.wait(timeout: .now() + timeout)
                resolver.fulfill(666)
                done.signal()
            }
        }
    }

    /// An operation that lets the late report come before it resolves with `value`; a report
    /// that did not come in time ends the `rounds` (the round tested nothing: a stall of Dispatch's
    /// global pool, or a fault, would otherwise cost every round the wait).
    static func waitingForTheLateReport(
        _ value: Int, signal next: DispatchSemaphore, wait done: DispatchSemaphore, _ rounds: Rounds
    ) -> Guarantee<Int> {
        Guarantee { resolver in
            next.signal()
            rounds.waited(done.wait(timeout: .now() + timeout) == .success)
            resolver.fulfill(value)
        }
    }

    @Test func aResolverHeldElsewhereDoesNotServeTheRunsNextOperation() {
        let rounds = Rounds()
        for _ in 0..<20 where rounds.goOn {
            let next = DispatchSemaphore(value: 0)
            let done = DispatchSemaphore(value: 0)
            let chain = Self.reportingLate(1, once: next, then: done).then { value in
                Self.waitingForTheLateReport(value + 1, signal: next, wait: done, rounds)
            }
            #expect(value(of: chain) == 2)
        }
        #expect(rounds.goOn, "a late report that did not come in time")
    }

    @Test func aResolverHeldElsewhereDoesNotServeTheNextMember() {
        let rounds = Rounds()
        for _ in 0..<20 where rounds.goOn {
            let next = DispatchSemaphore(value: 0)
            let done = DispatchSemaphore(value: 0)
            let members = [
                Self.reportingLate(1, once: next, then: done),
                Self.waitingForTheLateReport(2, signal: next, wait: done, rounds),
            ]
            #expect(value(of: when(fulfilled: members, concurrently: 1)) == [1, 2])
        }
        #expect(rounds.goOn, "a late report that did not come in time")
    }

    /// A run does not keep its call's resolver: one resolved from another thread before its
    /// operation returned is let go of as the operation returns, not while the run goes on.
    @Test func aResolverResolvedElsewhereIsNotKeptByTheRun() {
        let weak = WeakReference<Resolver<Int, Never>>()
        let queue = DispatchQueue(label: "held")
        queue.suspend()
        let done = Delivery<Int>()
        Guarantee<Int> { resolver in
            weak.value = resolver
            DispatchQueue.global().sync { resolver.fulfill(1) }
        }.on(queue).run { done.send($0) }
        let kept = weak.value != nil
        queue.resume()
        #expect(done.wait() == 1)
        #expect(!kept, "kept while the run waited for its queue")
    }
}
