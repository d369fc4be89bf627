import Dispatch
import Testing

@testable import Future

@Suite struct Laziness {
    @Test func nothingRunsBeforeATerminal() {
        let started = Counter()
        let promise = Promise<Int, Never> { resolver in
            started.increment()
            resolver.fulfill(1)
        }
        let chained = promise.then { $0 + 1 }.map { $0 * 2 }
        #expect(started.value == 0)
        #expect(outcome(of: chained) == .success(4))
        #expect(started.value == 1)
    }

    @Test func everyRunRunsTheWorkAgain() {
        let started = Counter()
        let promise = Promise<Int, Never> { resolver in
            resolver.fulfill(started.increment())
        }.then { $0 * 10 }
        #expect(outcome(of: promise) == .success(10))
        #expect(outcome(of: promise) == .success(20))
        #expect(started.value == 2)
    }

    @Test func firstlyCallsItsBodyOnEveryRunAndNotBefore() {
        let calls = Counter()
        let promise = firstly { () -> Promise<Int, Never> in
            Promise(value: calls.increment())
        }
        #expect(calls.value == 0)
        #expect(outcome(of: promise) == .success(1))
        #expect(outcome(of: promise) == .success(2))
    }

    @Test func catchingCallsItsBodyOnEveryRun() {
        let calls = Counter()
        let promise = Promise<Int, TestError>(catching: { () throws(TestError) -> Int in
            let call = calls.increment()
            if call == 2 { throw TestError("second") }
            return call
        })
        #expect(calls.value == 0)
        #expect(outcome(of: promise) == .success(1))
        #expect(outcome(of: promise) == .failure(TestError("second")))
        #expect(outcome(of: promise) == .success(3))
    }
}

@Suite struct MakingPromises {
    @Test func constantsSucceedOrFail() {
        #expect(outcome(of: Promise<Int, TestError>(value: 3)) == .success(3))
        #expect(outcome(of: Promise<Int, TestError>.value(4)) == .success(4))
        #expect(
            outcome(of: Promise<Int, TestError>(error: TestError("e"))) == .failure(TestError("e")))
        #expect(outcome(of: Promise<Int, TestError>(result: .success(5))) == .success(5))
    }

    @Test func resolverAcceptsAResultAsACallback() {
        let promise = Promise<Int, TestError> { callback in callback(.success(7)) }
        #expect(outcome(of: promise) == .success(7))
    }

    @Test func resolverAdaptsCompletionHandlers() throws {
        func fetch(_ value: Int?, _ error: (any Error)?) -> Promise<Int, any Error> {
            Promise { resolver in resolver.resolve(value, error) }
        }
        #expect(try outcome(of: fetch(1, nil))?.get() == 1)
        #expect(throws: TestError("e")) { try outcome(of: fetch(1, TestError("e")))?.get() }
        #expect(throws: PromiseError.missingValue) { try outcome(of: fetch(nil, nil))?.get() }

        func save(_ error: (any Error)?) -> Promise<Void, any Error> {
            Promise { resolver in resolver.resolve(error) }
        }
        #expect(throws: Never.self) { try outcome(of: save(nil))?.get() }
        #expect(throws: TestError("disk")) { try outcome(of: save(TestError("disk")))?.get() }
    }

    @Test func aTypedResolverAdaptsCompletionHandlersByConvertingTheirError() {
        func fetch(_ value: Int?, _ error: (any Error)?) -> Promise<Int, TestError> {
            Promise { resolver in
                resolver.resolve(value, error, mapError: { TestError("\($0)") })
            }
        }
        #expect(outcome(of: fetch(1, nil)) == .success(1))
        #expect(outcome(of: fetch(1, TestError("e"))) == .failure(TestError("\(TestError("e"))")))
        #expect(outcome(of: fetch(nil, nil)) == .failure(TestError("missingValue")))
    }

    @Test func operationsMayResolveLaterOnAnotherThread() {
        #expect(outcome(of: later(5).then { $0 + 1 }) == .success(6))
    }

    // A run's tail is aligned to 8 bytes; the slot checks its alignment in debug builds. Each
    // terminal keeps a completion of another size before the slot.
    @Test func valuesAlignedTo16BytesTravelAlone() async {
        // SIMD2<Double> as UInt128 would be: UInt128 needs macOS 15, the tests macOS 13.
        let wide = SIMD2<Double>(7, 100)
        let alone = Guarantee<SIMD2<Double>> { $0.fulfill(wide) }
        let delivered = Delivery<SIMD2<Double>>()
        alone.run { delivered.send($0) }
        #expect(await delivered.arrival() == wide)
        let outcomes = Delivery<Result<SIMD2<Double>, TestError>>()
        alone.setFailureType(to: TestError.self).run { outcomes.send($0) }
        #expect(await outcomes.arrival() == .success(wide))
        #expect(await awaited("the value") { await alone.value } == wide)
        #expect(await awaited("the mapped value") { await alone.map { $0 + 1 }.value } == wide + 1)
        let vectors = (0..<3).map { n in
            Guarantee<SIMD4<Float>> { $0.fulfill(SIMD4(repeating: Float(n))) }
        }
        let all = await awaited("the vectors") { await when(fulfilled: vectors).value }
        #expect(all??.map(\.x) == [0, 1, 2])
    }
}

@Suite struct Running {
    @Test func runSomeNoneCallsTheMatchingHandler() {
        let values = Delivery<Int>()
        let errors = Delivery<TestError>()
        Promise<Int, TestError>(value: 1).run(some: values.send, none: errors.send)
        Promise<Int, TestError>(error: TestError("x")).run(some: values.send, none: errors.send)
        #expect(values.all == [1])
        #expect(errors.all == [TestError("x")])
    }

    @Test func guaranteesRunWithoutAnErrorHandler() {
        let values = Delivery<Int>()
        Guarantee(value: 1).run(some: { values.send($0) })
        let effects = Counter()
        Guarantee<Void> { resolver in
            effects.increment()
            resolver.fulfill()
        }.run()
        #expect(values.all == [1])
        #expect(effects.value == 1)
    }

    @Test func aTrailingClosureGetsTheResult() {
        let results = Delivery<Result<Int, Never>>()
        Guarantee(value: 2).run { results.send($0) }
        #expect(results.all == [.success(2)])
    }
}

@Suite struct ExactlyOnce {
    @Test func onlyTheFirstOutcomeCounts() {
        let promise = Promise<Int, TestError> { resolver in
            resolver.fulfill(1)
            resolver.fulfill(2)
            resolver.reject(TestError("late"))
        }
        let delivery = Delivery<Result<Int, TestError>>()
        promise.run { delivery.send($0) }
        #expect(delivery.all == [.success(1)])
    }

    @Test func aResolverKeptAfterResolvingCannotResolveALaterOperation() {
        nonisolated(unsafe) var kept: Resolver<Int, Never>?
        let second = Delivery<Resolver<Int, Never>>()
        let promise = Promise<Int, Never> { resolver in
            kept = resolver
            resolver.fulfill(1)
        }.then { _ in
            Promise<Int, Never> { resolver in second.send(resolver) }
        }
        let delivery = Delivery<Result<Int, Never>>()
        promise.run { delivery.send($0) }
        kept?.fulfill(99)  // stale: belongs to the first operation
        #expect(delivery.all.isEmpty)
        second.wait()?.fulfill(2)
        #expect(delivery.all == [.success(2)])
    }
}
