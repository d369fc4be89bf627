import Dispatch
import Testing

@testable import Future

/// Stress tests: CI runs this suite again under ThreadSanitizer.
@Suite struct Concurrency {
    @Test func manyThreadsResolvingAtOnceDeliverOneOutcome() {
        for _ in 0..<200 {
            let resolvers = Delivery<Resolver<Int, Never>>()
            let delivered = Delivery<Result<Int, Never>>()
            Promise<Int, Never> { resolvers.send($0) }.then { $0 * 2 }.run { delivered.send($0) }
            guard let resolver = resolvers.wait() else { return #expect(Bool(false)) }
            DispatchQueue.concurrentPerform(iterations: 8) { resolver.fulfill($0) }
            #expect(delivered.all.count == 1)
        }
    }

    @Test func cancelRacingTheOutcomeEndsTheRunExactlyOnce() {
        for _ in 0..<2_000 {
            let resolvers = Delivery<Resolver<Int, Never>>()
            let cancelled = Counter()
            let ensured = Counter()
            let delivered = Counter()
            let handle = Promise<Int, Never> { resolver in
                resolver.onCancel { _ in cancelled.increment() }
                resolvers.send(resolver)
            }.then { $0 + 1 }.ensure { ensured.increment() }.run { _ in delivered.increment() }
            guard let resolver = resolvers.wait() else { return #expect(Bool(false)) }
            DispatchQueue.concurrentPerform(iterations: 3) { index in
                switch index {
                case 0: resolver.fulfill(1)
                case 1: handle.cancel()
                default: resolver.onCancel { _ in cancelled.increment() }
                }
            }
            #expect(ensured.value == 1)
            #expect(delivered.value + cancelled.value <= 2)
            #expect(delivered.value <= 1)
            #expect(handle.isCancelled == (delivered.value == 0))
            if delivered.value == 1 { #expect(cancelled.value == 0) }
        }
    }

    @Test func onePromiseRunsOnManyThreadsAtOnce() {
        // A promise is Sendable: the compiler has checked that its closures are safe to share.
        let promise = Promise<Int, Never>(value: 1)
            .then { later($0 + 1) }
            .then { $0 * 10 }
        let results = Delivery<Result<Int, Never>>()
        DispatchQueue.concurrentPerform(iterations: 64) { _ in promise.run { results.send($0) } }
        let deadline = DispatchTime.now() + timeout
        while results.all.count < 64, DispatchTime.now() < deadline { _ = results.wait() }
        #expect(results.all.count == 64)
        #expect(results.all.allSatisfy { $0 == .success(20) })
    }

    @Test func cancellingManyRunsFromManyThreads() {
        let promise = Promise<Int, Never> { resolver in
            DispatchQueue.global().async { resolver.fulfill(1) }
        }.then { later($0) }
        let ended = Counter()
        let handles = (0..<100).map { _ in promise.ensure { ended.increment() }.run() }
        DispatchQueue.concurrentPerform(iterations: handles.count) { handles[$0].cancel() }
        #expect(eventually { ended.value == handles.count })
    }

    @Test func aResolverDroppedWhileCancellingEndsTheRunOnce() {
        _ = reports  // the thousand reports this test causes go there
        final class Holder: @unchecked Sendable { var resolver: Resolver<Int, Never>? }
        for _ in 0..<1_000 {
            let holder = Holder()
            let ensured = Counter()
            let cancelled = Counter()
            let handle = Promise<Int, Never> { resolver in
                resolver.onCancel { _ in cancelled.increment() }
                holder.resolver = resolver
            }.ensure { ensured.increment() }.run { _ in Issue.record("cannot complete") }
            DispatchQueue.concurrentPerform(iterations: 2) { index in
                if index == 0 { holder.resolver = nil } else { handle.cancel() }
            }
            #expect(ensured.value == 1)
            #expect(cancelled.value == 1)
            #expect(handle.isCancelled)
        }
    }
}
