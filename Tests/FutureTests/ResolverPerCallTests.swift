import Dispatch
import Testing

@testable import Future

/// A run, and a combination, give each operation a resolver of its own: a late report through
/// the resolver of an earlier operation, which work on another thread still holds `weak`, counts
/// for nothing. (In the TSan run: the suite's name holds "Concurrency".)
@Suite struct ResolverPerCallConcurrency {
    /// An operation that resolves at once and reports again, late, through a weak reference: once
    /// the next operation has started, and before it resolves.
    static func reportingLate(
        _ value: Int, once next: DispatchSemaphore, then done: DispatchSemaphore
    ) -> Guarantee<Int> {
        Guarantee { resolver in
            resolver.fulfill(value)
            DispatchQueue.global().async { [weak resolver] in
                _ = next.wait(timeout: .now() + .seconds(10))
                resolver?.fulfill(666)
                done.signal()
            }
        }
    }

    /// An operation that lets the late report come before it resolves with `value`.
    static func waitingForTheLateReport(
        _ value: Int, signal next: DispatchSemaphore, wait done: DispatchSemaphore
    ) -> Guarantee<Int> {
        Guarantee { resolver in
            next.signal()
            _ = done.wait(timeout: .now() + .seconds(10))
            resolver.fulfill(value)
        }
    }

    @Test func aResolverHeldWeaklyElsewhereDoesNotServeTheRunsNextOperation() {
        for _ in 0..<20 {
            let next = DispatchSemaphore(value: 0)
            let done = DispatchSemaphore(value: 0)
            let chain = Self.reportingLate(1, once: next, then: done).then { value in
                Self.waitingForTheLateReport(value + 1, signal: next, wait: done)
            }
            #expect(value(of: chain) == 2)
        }
    }

    @Test func aResolverHeldWeaklyElsewhereDoesNotServeTheNextMember() {
        for _ in 0..<20 {
            let next = DispatchSemaphore(value: 0)
            let done = DispatchSemaphore(value: 0)
            let members = [
                Self.reportingLate(1, once: next, then: done),
                Self.waitingForTheLateReport(2, signal: next, wait: done),
            ]
            #expect(value(of: when(fulfilled: members, concurrently: 1)) == [1, 2])
        }
    }
}
