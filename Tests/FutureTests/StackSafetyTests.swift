import Testing

@testable import Future

/// Apple's Dispatch worker threads have 512 KiB stacks; a chain must run on one.
let smallStack = 512 * 1024

@Suite struct StackSafety {
    func loop(_ n: Int) -> Promise<Int, Never> {
        n == 0 ? .value(0) : Promise(value: n).then { loop($0 - 1) }
    }

    @Test func aMillionStepRecursiveLoopRunsOnASmallStack() async {
        let delivered = Delivery<Result<Int, Never>>()
        await onThread(stackSize: smallStack) { loop(1_000_000).run { delivered.send($0) } }
        #expect(delivered.all == [.success(0)])
    }

    static func count(_ n: Int) -> Promise<Int, Never> {
        Promise { $0.fulfill(n) }.then { value in value == 0 ? .value(0) : count(value - 1) }
    }

    @Test func aRecursiveLoopThroughOperationsRunsOnASmallStack() async {
        let delivered = Delivery<Result<Int, Never>>()
        await onThread(stackSize: smallStack) { Self.count(100_000).run { delivered.send($0) } }
        #expect(delivered.all == [.success(0)])
    }

    @Test func aTenThousandLinkChainRunsOnASmallStack() async {
        let delivered = Delivery<Result<Int, Never>>()
        await onThread(stackSize: smallStack) {
            let chain = (0..<10_000).reduce(Guarantee(value: 0)) { chain, _ in chain.then { $0 + 1 }
            }
            chain.run { delivered.send($0) }
        }
        #expect(delivered.all == [.success(10_000)])
    }

    @Test func aHundredThousandLinkChainIsBuiltRunAndDropped() async {
        let delivered = Delivery<Result<Int, TestError>>()
        await onThread(stackSize: 8 * 1024 * 1024) {
            var chain = Promise<Int, TestError>(value: 0)
            for index in 0..<100_000 {
                chain =
                    index.isMultiple(of: 2)
                    ? chain.then { $0 + 1 }
                    : chain.then { later($0 + 1).setFailureType(to: TestError.self) }
            }
            chain.run { delivered.send($0) }
        }
        #expect(await delivered.arrival() == .success(100_000))
    }

    /// A fallback list built in a loop nests promises through closures: each level's `recover`
    /// closure keeps the promise before it, so releasing the list releases 2,000 promises, one
    /// inside the other. It is built, run and released on a small stack, resolving through every
    /// fallback or by the first attempt.
    @Test(arguments: [false, true])
    func twoThousandPromisesNestedThroughClosuresRunAndAreReleasedOnASmallStack(
        firstSucceeds: Bool
    ) async {
        let delivered = Delivery<Result<Int, Never>>()
        await onThread(stackSize: smallStack) {
            var promise = Promise<Int, TestError>(value: 0)
            for level in 1...2_000 {
                let previous = promise
                let attempt =
                    firstSucceeds
                    ? Promise<Int, TestError>(value: level) : Promise(error: TestError("again"))
                promise = attempt.recover { _ in previous }
            }
            promise.recover { _ in -1 }.run { delivered.send($0) }
        }
        #expect(delivered.all == [.success(firstSucceeds ? 2_000 : 0)])
    }
}
