import Testing

@testable import Future

@Suite struct Chaining {
    func double(_ value: Int) -> Int { value * 2 }
    func half(_ value: Int) -> Result<Int, TestError> {
        value.isMultiple(of: 2) ? .success(value / 2) : .failure(TestError("odd"))
    }
    func soon(_ value: Int) -> Promise<Int, TestError> {
        Promise { resolver in resolver.fulfill(value) }
    }

    @Test func thenAcceptsPlainFunctionsOfEachShape() {
        let promise = Promise<Int, TestError>(value: 3)
            .then(double)
            .then(half)
            .then(soon)
        #expect(outcome(of: promise) == .success(3))
    }

    @Test func thenAcceptsClosuresWithoutTypeAnnotations() {
        let promise = Promise<Int, TestError>(value: 1)
            .then { $0 + 1 }
            .then { soon($0 * 10) }
            .then { $0 > 10 ? .success($0) : .failure(TestError("small")) }
            .then { value in
                let text = String(value)
                return text + "!"
            }
        #expect(outcome(of: promise) == .success("20!"))
    }

    @Test func aFailingStepSkipsTheStepsAfterIt() {
        let skipped = Counter()
        let promise = Promise<Int, TestError>(value: 3)
            .then(half)
            .then { value -> Int in
                skipped.increment()
                return value
            }
            .then { value in Promise<Int, TestError>(value: value) }
        #expect(outcome(of: promise) == .failure(TestError("odd")))
        #expect(skipped.value == 0)
    }

    @Test func mapAndFlatMapAreThen() {
        let promise = Promise<Int, TestError>(value: 2).map { $0 + 1 }.flatMap(soon)
        #expect(outcome(of: promise) == .success(3))
    }

    @Test func tryMapFailsWithTheTypedErrorThrown() {
        let promise = Promise<Int, TestError>(value: 5).tryMap { (value) throws(TestError) in
            if value > 3 { throw TestError("big") }
            return value
        }
        #expect(outcome(of: promise) == .failure(TestError("big")))
        #expect(outcome(of: Promise<Int, TestError>(value: 1).tryMap { $0 }) == .success(1))
    }

    @Test func compactMapFailsOnNil() throws {
        let typed = Promise<[Int], TestError>(value: [])
            .compactMap(orFailWith: TestError("empty")) { $0.first }
        #expect(outcome(of: typed) == .failure(TestError("empty")))
        let erased = Promise<String, any Error>(value: "x").compactMap { Int($0) }
        #expect(throws: PromiseError.compactMapReturnedNil) { try outcome(of: erased)?.get() }
        let found = Promise<String, any Error>(value: "7").compactMap { Int($0) }
        #expect(try outcome(of: found)?.get() == 7)
    }

    @Test func doneGetAndTapSeeWithoutChanging() {
        let log = Log()
        let promise = Promise<Int, TestError>(value: 4)
            .get { log.record("get \($0)") }
            .tap { log.record("tap \($0)") }
            .done { log.record("done \($0)") }
        #expect((try? outcome(of: promise)?.get()) != nil)
        #expect(log.all == ["get 4", "tap success(4)", "done 4"])
    }

    @Test func stepsRunInOrderAcrossOperations() {
        let log = Log()
        let promise = Promise<Int, Never>(value: 1)
            .get { log.record("a\($0)") }
            .then { later($0 + 1) }
            .get { log.record("b\($0)") }
            .then { value in Promise<Int, Never> { $0.fulfill(value + 1) } }
            .get { log.record("c\($0)") }
        #expect(outcome(of: promise) == .success(3))
        #expect(log.all == ["a1", "b2", "c3"])
    }

    @Test func promisesBuiltOnTheSameOneShareNothingWhenRun() {
        let base = Promise<Int, Never>(value: 1)
        let plusOne = base.then { $0 + 1 }
        let asText = base.then { "\($0)" }
        #expect(outcome(of: plusOne) == .success(2))
        #expect(outcome(of: asText) == .success("1"))
    }

    @Test func largeValuesPassThroughNestedChains() {
        struct Big: Equatable, Sendable { var a = 1, b = 2, c = 3, d = 4, e = 5, f = "six" }
        let promise = Promise<Int, Never>(value: 1)
            .then { _ in Promise<Big, Never>(value: Big()).then { big in later([big, big]) } }
            .then { $0[1] }
        #expect(outcome(of: promise) == .success(Big()))
    }
}

@Suite struct HandlingErrors {
    @Test func mapErrorTransformsOnlyFailures() {
        let failed = Promise<Int, TestError>(error: TestError("a")).mapError {
            TestError($0.name + "b")
        }
        #expect(outcome(of: failed) == .failure(TestError("ab")))
        let fine = Promise<Int, TestError>(value: 1).mapError { _ in TestError("never") }
        #expect(outcome(of: fine) == .success(1))
    }

    @Test func flatMapErrorTurnsAnErrorIntoAValueOrAnotherError() {
        let recovered = Promise<Int, TestError>(error: TestError("404"))
            .flatMapError { error -> Result<Int, Never> in .success(error.name.count) }
        #expect(outcome(of: recovered) == .success(3))
        let rethrown = Promise<Int, TestError>(error: TestError("500"))
            .flatMapError { _ -> Result<Int, any Error> in .failure(PromiseError.missingValue) }
        #expect(throws: PromiseError.missingValue) { try outcome(of: rethrown)?.get() }
    }

    @Test func recoverWithAPromiseContinuesTheChain() {
        let recovered: Guarantee<Int> = Promise<Int, TestError>(error: TestError("x"))
            .recover { _ in later(9) }
        #expect(outcome(of: recovered) == .success(9))
        let untouched = Promise<Int, TestError>(value: 1)
            .recover { _ in Promise<Int, TestError>(error: TestError("unused")) }
        #expect(outcome(of: untouched) == .success(1))
        let stillFailing = Promise<Int, TestError>(error: TestError("x"))
            .recover { _ in Promise<Int, TestError>(error: TestError("y")) }
        #expect(outcome(of: stillFailing) == .failure(TestError("y")))
    }

    @Test func recoverWithAValueCannotFail() {
        let recovered: Guarantee<Int> = Promise<Int, TestError>(error: TestError("x")).recover {
            _ in 0
        }
        #expect(outcome(of: recovered) == .success(0))
    }

    @Test func catchHandlesTheErrorAndLeavesAGuaranteeToRun() {
        let errors = Delivery<TestError>()
        let done = Counter()
        let chain: Guarantee<Void> = Promise<Int, TestError>(value: 1)
            .then { _ in Promise<Int, TestError>(error: TestError("boom")) }
            .done { _ in done.increment() }
            .catch { errors.send($0) }
        #expect(errors.all.isEmpty)
        chain.run()
        #expect(errors.all == [TestError("boom")])
        #expect(done.value == 0)
    }

    @Test func ensureRunsOnSuccessAndOnFailure() {
        let ensured = Counter()
        _ = outcome(of: Promise<Int, TestError>(value: 1).ensure { ensured.increment() })
        _ = outcome(
            of: Promise<Int, TestError>(error: TestError("x")).ensure { ensured.increment() })
        #expect(ensured.value == 2)
    }

    @Test func eraseToAnyErrorKeepsTheError() {
        let erased = Promise<Int, TestError>(error: TestError("typed")).eraseToAnyError()
            .then { value in Promise<Int, any Error>(value: value) }
        #expect(throws: TestError("typed")) { try outcome(of: erased)?.get() }
    }

    @Test func aGuaranteeJoinsATypedChain() {
        let chain = Promise<Int, TestError>(value: 1)
            .then { value in Guarantee(value: value + 1).setFailureType(to: TestError.self) }
        #expect(outcome(of: chain) == .success(2))
    }
}

/// `then` takes a step's promise or `Result` whatever its error type, so that it never becomes the
/// next value; the error type joins the chain as the chain is built (on a chain that cannot fail,
/// the chain takes it), or the build stops.
@Suite struct StepErrorTypes {
    struct OtherError: Error, Equatable {}

    func other(_ value: Int) -> Promise<Int, OtherError> { Promise(value: value) }
    func parse(_ value: Int) -> Result<Int, OtherError> { .failure(OtherError()) }
    func cached(_ value: Int) -> Guarantee<Int> { later(value) }
    func sure(_ value: Int) -> Result<Int, Never> { .success(value + 1) }

    @Test func aStepOfAnotherErrorTypeIsNeverTakenAsAValue() {
        let chain = Promise<Int, any Error>(value: 1)
        #expect(type(of: chain.then(other)) == Promise<Int, any Error>.self)
        #expect(type(of: chain.then { other($0) }) == Promise<Int, any Error>.self)
        #expect(type(of: chain.then(parse)) == Promise<Int, any Error>.self)
        #expect(type(of: chain.then { parse($0) }) == Promise<Int, any Error>.self)
    }

    @Test func aStepOfTheChainsOwnErrorTypeCostsOneStageAndNoConversion() {
        #expect(Guarantee(value: 1).then(cached).last.depth == 2)
        #expect(Promise<Int, OtherError>(value: 1).then(other).last.depth == 2)
        #expect(Promise<Int, OtherError>(value: 1).then(parse).last.depth == 2)
    }

    @Test func stepsThatCannotFailJoinAChainThatCan() {
        let chain = Promise<Int, TestError>(value: 1).then(cached).then(sure).then { cached($0) }
        #expect(type(of: chain) == Promise<Int, TestError>.self)
        #expect(outcome(of: chain) == .success(2))
    }

    @Test func aChainThatCannotFailTakesTheErrorTypeOfAStepThatCanThroughFlatMap() {
        let chain = Guarantee(value: 1).flatMap { other($0) }
        #expect(type(of: chain) == Promise<Int, OtherError>.self)
        #expect(outcome(of: chain) == .success(1))
        let guaranteed = Guarantee(value: 1).then(cached)
        #expect(type(of: guaranteed) == Guarantee<Int>.self)
    }

    @Test func aChainThatCannotFailTakesTheErrorTypeOfAThenStepThatCan() {
        let promised: Promise<Int, OtherError> = Guarantee(value: 1).then { other($0 + 1) }
        #expect(outcome(of: promised) == .success(2))
        let parsed: Promise<Int, OtherError> = Guarantee(value: 1).then { parse($0) }
        #expect(outcome(of: parsed) == .failure(OtherError()))
        let named: Promise<Int, OtherError> = Guarantee(value: 1).then(other).then(parse)
        #expect(outcome(of: named) == .failure(OtherError()))
        #expect(type(of: Guarantee(value: 1).then { cached($0) }.then(sure)) == Guarantee<Int>.self)
    }

    @Test func aRecoveredChainTakesTheErrorTypeOfTheNextStep() {
        let chain = Promise<Int, TestError>(error: TestError("offline"))
            .recover { _ in 0 }
            .then { n in n == 0 ? Promise<Int, OtherError>(error: OtherError()) : other(n) }
        #expect(type(of: chain) == Promise<Int, OtherError>.self)
        #expect(outcome(of: chain) == .failure(OtherError()))
    }

    @Test func afterThenAStepThatCanFail() {
        let chain = after(.milliseconds(1)).then { other(7) }.map { $0 * 6 }
        #expect(type(of: chain) == Promise<Int, OtherError>.self)
        #expect(outcome(of: chain) == .success(42))
    }

    @Test func whenResolvedThenAStepThatCanFail() {
        let chain = when(resolved: [other(1), other(2)]).then { results in other(results.count) }
        #expect(outcome(of: chain) == .success(2))
    }

    @Test func aChainThatFailsWithAnyErrorKeepsEachStepsError() throws {
        let failed = Promise<Int, any Error>(value: 1).then(parse).then { other($0) }
        #expect(throws: OtherError()) { try outcome(of: failed)?.get() }
        let chained = Promise<Int, any Error>(value: 1).then { other($0 + 1) }.then(sure)
        #expect(try outcome(of: chained)?.get() == 3)
    }

    static func parsed<Failure>(_ chain: Promise<Int, Failure>) -> Promise<Int, Failure> {
        chain.then { _ in Result<Int, PromiseError>.success(1) }
    }

    #if os(macOS) || os(Linux)
        @Test func aPromiseOfAnotherErrorTypeStopsTheBuildSayingHowToFixIt() async {
            let exit = await #expect(
                processExitsWith: .failure, observing: [\.standardErrorContent]
            ) {
                exitTestWatchdog(expectsSuccess: false)
                _ = Promise<Int, TestError>(value: 1).then { Promise<Int, PromiseError>(value: $0) }
            }
            let message = String(decoding: exit?.standardErrorContent ?? [], as: UTF8.self)
            #expect(message.contains("a step that fails with PromiseError cannot join a chain"))
            #expect(
                message.contains("fails with TestError. Convert the step's error with mapError"))
            #expect(message.contains("eraseToAnyError()"))
        }

        @Test func aResultOfAnotherErrorTypeStopsTheBuild() async {
            await #expect(processExitsWith: .failure) {
                exitTestWatchdog(expectsSuccess: false)
                _ = Promise<Int, TestError>(value: 1).then { _ in
                    Result<Int, PromiseError>.success(1)
                }
            }
        }

        /// Generic code cannot know that its chain cannot fail, so it takes the shape that keeps
        /// the chain's error type: there, a step that can fail stops the build.
        @Test func aStepThatCanFailStopsTheBuildOfAChainThatCannotInGenericCode() async {
            let exit = await #expect(
                processExitsWith: .failure, observing: [\.standardErrorContent]
            ) {
                exitTestWatchdog(expectsSuccess: false)
                _ = StepErrorTypes.parsed(Guarantee(value: 1))
            }
            let message = String(decoding: exit?.standardErrorContent ?? [], as: UTF8.self)
            #expect(message.contains("cannot join a chain that fails with Never"))
            #expect(message.contains("setFailureType(to:)"))
        }
    #endif
}

/// PromiseKit's closures may throw; here `map`, `done` and `recover` take such closures on a chain
/// that fails with `any Error`, and `done` on a typed one whose closure says `throws(Failure)`.
@Suite struct ClosuresThatThrow {
    struct Invalid: Error, Equatable {}

    func checked(_ value: Int) throws -> Int {
        guard value > 0 else { throw Invalid() }
        return value * 2
    }

    @Test func aMapThatThrowsFailsTheChain() throws {
        let doubled = Promise<Int, any Error>(value: 2).map { try checked($0) }
        #expect(try outcome(of: doubled)?.get() == 4)
        let failed = Promise<Int, any Error>(value: 0).map { try checked($0) }.map { $0 + 1 }
        #expect(throws: Invalid()) { try outcome(of: failed)?.get() }
    }

    @Test func aDoneThatThrowsFailsTheChain() {
        let seen = Counter()
        let failed = Promise<Int, any Error>(value: 0)
            .done { value in
                _ = try checked(value)
                seen.increment()
            }
        #expect(throws: Invalid()) { try outcome(of: failed)?.get() }
        #expect(seen.value == 0)
        let typed = Promise<Int, TestError>(value: 0).done { (value) throws(TestError) in
            if value == 0 { throw TestError("zero") }
        }
        #expect(throws: TestError("zero")) { try outcome(of: typed)?.get() }
    }

    @Test func aRecoverThatRethrowsPassesTheErrorOn() throws {
        @Sendable func fallback(_ error: any Error) throws -> Promise<Int, any Error> {
            guard error is Invalid else { throw error }
            return Promise(value: 7)
        }
        let recovered = Promise<Int, any Error>(error: Invalid()).recover { try fallback($0) }
        #expect(try outcome(of: recovered)?.get() == 7)
        let passed = Promise<Int, any Error>(error: TestError("other")).recover { try fallback($0) }
        #expect(throws: TestError("other")) { try outcome(of: passed)?.get() }
    }
}
