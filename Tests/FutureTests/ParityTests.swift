import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Main-actor state, as a screen has: only main-actor code may touch it.
@MainActor final class Screen {
    var items: [Int] = []
    var errors: [String] = []
}

/// A promise that fails with `error` from another thread.
func failingLater(_ error: TestError) -> Promise<Int, TestError> {
    Promise { resolver in DispatchQueue.global().async { resolver.reject(error) } }
}

@Suite("Main-actor steps") @MainActor struct MainActorSteps {
    @Test func doneOnMainSetsMainActorStateWithAValueResolvedElsewhere() async {
        let screen = Screen()
        let shown: Void? =
            await awaited("the chain") { @MainActor in
                await later(7).done(on: .main) { value in
                    dispatchPrecondition(condition: .onQueue(.main))
                    screen.items.append(value)
                }.value
            } ?? nil
        #expect(shown != nil)
        #expect(screen.items == [7])
    }

    @Test func mapOnMainTransformsOnTheMainQueueAndTheStepsAfterItStayThere() async {
        let screen = Screen()
        screen.items = [1, 2]
        let count =
            await awaited("the chain") { @MainActor in
                await later(10).map(on: .main) { $0 + screen.items.count }
                    .map { value -> Int in
                        dispatchPrecondition(condition: .onQueue(.main))
                        return value
                    }.value
            } ?? nil
        #expect(count == 12)
    }

    @Test func catchOnMainHandlesTheErrorOnMainAndLeavesAGuarantee() async {
        let screen = Screen()
        let handled: Guarantee<Void> = failingLater(TestError("offline")).done(on: .main) {
            screen.items.append($0)
        }.catch(on: .main) { screen.errors.append($0.name) }
        let ended: Void? = await awaited("the chain") { @MainActor in await handled.value } ?? nil
        #expect(ended != nil)
        #expect(screen.items.isEmpty)
        #expect(screen.errors == ["offline"])
    }

    @Test func aTiedCallbackAlreadyQueuedOnMainDoesNotRunOnceInvalidated() async {
        let screen = Screen()
        let token = InvalidationToken()
        let ended = Delivery<Void>()
        // Started on the main actor: the hop to the main queue is queued behind this code, which
        // invalidates the token before the main queue can run the tied step.
        Guarantee(value: 1).done(on: .main, tiedTo: token) { screen.items.append($0) }
            .map { _ in ended.send(()) }.run()
        token.invalidate()
        #expect(await ended.arrival() != nil)  // the rest of the chain went on
        #expect(screen.items.isEmpty)
    }

    @Test func anInvalidatedTiedCatchIsSkippedAndTheChainGoesOn() async {
        let screen = Screen()
        let token = InvalidationToken()
        let ended = Delivery<Void>()
        failingLater(TestError("stale")).catch(on: .main, tiedTo: token) {
            screen.errors.append($0.name)
        }.map { ended.send(()) }.run()
        token.invalidate()
        #expect(await ended.arrival() != nil)
        #expect(screen.errors.isEmpty)
    }

    @Test func anInvalidatedTiedMapCancelsTheRunForWantOfAValue() async {
        let token = InvalidationToken()
        let after = Delivery<String>()
        let handle = Guarantee(value: 1).map(on: .main, tiedTo: token) { $0 + 1 }
            .ensure { after.send("ensure") }
            .run { _ in after.send("completion") }
        token.invalidate()
        #expect(await after.arrival() == "ensure")
        #expect(handle.isCancelled)
        #expect(after.all == ["ensure"])
    }

    @Test func callbacksTiedAfterAnInvalidateRun() async {
        let screen = Screen()
        let token = InvalidationToken()
        token.invalidate()
        _ = await awaited("the tied chain") { @MainActor in
            await later(3).done(on: .main, tiedTo: token) { screen.items.append($0) }.value
        }
        #expect(screen.items == [3])
    }
}

@Suite("Invalidation tokens") @MainActor struct InvalidationTokens {
    @Test func aRunStartedBeforeTheInvalidateSkipsItsTiedStepAndAKeptPromiseRunsAgain() async {
        let screen = Screen()
        let token = InvalidationToken()
        let (answer, reply) = Guarantee<Int>.pending()
        // Built once and kept, as a screen keeps its reload.
        let show = answer.done(on: .main, tiedTo: token) { screen.items.append($0) }
        let first = Delivery<Void>()
        show.run(some: { first.send(()) })
        token.invalidate()  // the first run is stale: its answer comes after this
        reply.fulfill(1)
        #expect(await first.arrival() != nil)  // it went on, and skipped the tied step
        #expect(screen.items.isEmpty)
        let shown: Void? = await awaited("a second run") { @MainActor in await show.value } ?? nil
        #expect(shown != nil)  // a run started after the invalidate
        #expect(screen.items == [1])
    }

    @Test func aTokenThatGoesAwaySilencesItsStepsAndCancelsItsRuns() async {
        let screen = Screen()
        var token: InvalidationToken? = InvalidationToken()
        let (value, resolver) = Guarantee<Int>.pending()
        let seen = Delivery<String>()
        let stored = value.ensure { seen.send("stored run ended") }.run().store(in: token!)
        let tied = value.done(on: .main, tiedTo: token) { screen.items.append($0) }
            .map { seen.send("went on") }
        tied.run()
        token = nil
        #expect(stored.isCancelled)
        resolver.fulfill(2)
        #expect(await seen.arrival() == "stored run ended")
        #expect(eventually { seen.all.count == 2 })
        #expect(seen.all == ["stored run ended", "went on"])
        #expect(screen.items.isEmpty)
    }

    @Test func invalidatingCancelsTheStoredRunsAndCancelAllDoesNotInvalidate() async {
        let screen = Screen()
        let token = InvalidationToken()
        let (waiting, resolver) = Guarantee<Int>.pending()
        let first = waiting.run().store(in: token)
        let tied = waiting.done(on: .main, tiedTo: token) { screen.items.append($0) }
        tied.run()
        token.cancelAll()
        #expect(first.isCancelled)
        resolver.fulfill(4)
        _ = await awaited("a hop to main") { @MainActor in  // after the tied step's hop
            await Guarantee(value: ()).on(.main).value
        }
        #expect(screen.items == [4])  // cancelAll did not invalidate

        let (unanswered, keep) = Guarantee<Int>.pending()
        let second = unanswered.run().store(in: token)
        token.invalidate()
        #expect(second.isCancelled)
        keep.fulfill(0)
    }

    @Test func invalidatingFromManyThreadsWhileTiedStepsRunIsSafe() async {
        let screen = Screen()
        let token = InvalidationToken()
        let ended = Counter()
        let all = Delivery<Void>()
        for index in 0..<2_000 {
            DispatchQueue.global().async {
                if index % 10 == 0 { token.invalidate() }
                later(index).done(on: .main, tiedTo: token) { screen.items.append($0) }
                    .run(some: { if ended.increment() == 2_000 { all.send(()) } })
            }
        }
        #expect(await all.arrival() != nil)
        #expect(screen.items.count <= 2_000)
    }

    @Test func aRetryInsideARunStartedBeforeTheInvalidateSkipsTheTiedStep() async {
        let screen = Screen()
        let token = InvalidationToken()
        let attempts = Counter()
        let (gate, open) = Guarantee<Void>.pending()
        let flaky = gate.setFailureType(to: TestError.self).then { _ -> Result<Int, TestError> in
            let attempt = attempts.increment()
            return attempt == 1 ? .failure(TestError("flaky")) : .success(attempt)
        }
        let ended = Delivery<Void>()
        flaky.done(on: .main, tiedTo: token) { screen.items.append($0) }.retry(2)
            .run(some: { ended.send(()) }, none: { _ in ended.send(()) })
        token.invalidate()  // the run started before this: its retry is stale too
        open.fulfill(())
        #expect(await ended.arrival() != nil)
        #expect(attempts.value == 2)
        #expect(screen.items.isEmpty)
    }

    @Test func aMemberStartedAfterTheInvalidateKeepsTheTieOfItsCombinationsRun() async {
        let screen = Screen()
        let token = InvalidationToken()
        let (first, answer) = Guarantee<Int>.pending()
        let tiedFirst = first.done(on: .main, tiedTo: token) { screen.items.append($0) }
        let tiedLater = Guarantee(value: 2).done(on: .main, tiedTo: token) {
            screen.items.append($0)
        }
        let ended = Delivery<Void>()
        when(fulfilled: [tiedFirst, tiedLater], concurrently: 1)
            .run(some: { _ in ended.send(()) })
        token.invalidate()  // the run tied to the token before this, as its first member started
        answer.fulfill(1)
        #expect(await ended.arrival() != nil)
        #expect(screen.items.isEmpty)
        // A run of its own, started after the invalidate.
        let ran: Void? = await awaited("a later run") { @MainActor in await tiedLater.value } ?? nil
        #expect(ran != nil)
        #expect(screen.items == [2])
    }

    @Test nonisolated func aTokenGoingAwayAsMainChecksATieToItLetsMainGoOn() async {
        final class Tokens: @unchecked Sendable {
            var all: [InvalidationToken?] = (0..<500).map { _ in InvalidationToken() }
        }
        /// Takes one of `ended`'s signals: spinning first, to go on as soon as main signals, then
        /// blocking, so that a main queue busy with other tests' work costs no core. The spin
        /// tries the semaphore, which takes no lock: spinning on a lock that main takes starved
        /// main under ThreadSanitizer, and with it every main-actor test running beside this one.
        @Sendable func take(_ ended: DispatchSemaphore) -> Bool {
            for _ in 0..<10_000 where ended.wait(timeout: .now()) == .success { return true }
            return ended.wait(timeout: .now() + timeout) == .success
        }
        let rounds = 20
        let finished = Delivery<Int>()
        let stalled = Counter()  // main's waits for the gate that ran out
        DispatchQueue.global().async {
            for round in 0..<rounds {
                let tokens = Tokens()  // the tokens' only strong references
                let runs = tokens.all.map {
                    Guarantee(value: 1).done(on: .main, tiedTo: $0) { _ in }
                }
                let ended = DispatchSemaphore(value: 0)
                let gate = DispatchSemaphore(value: 0)
                DispatchQueue.main.async {  // every hop queued before main runs one
                    if gate.wait(timeout: .now() + timeout) == .timedOut { stalled.increment() }
                }
                for run in runs { run.run(some: { _ in ended.signal() }) }
                gate.signal()
                // Main ends run k - 1 just before it checks run k's tie: token k goes then.
                for index in runs.indices {
                    guard index == 0 || take(ended) else { return finished.send(round) }
                    for _ in 0..<Int.random(in: 0...200) { _ = DispatchTime.now() }
                    tokens.all[index] = nil
                }
                guard take(ended) else { return finished.send(round) }
            }
            finished.send(rounds)
        }
        #expect(await finished.arrival() == rounds)
        #expect(stalled.value == 0, "main waited in vain for the runs to be queued")
    }
}

@Suite("Ignoring cancel") struct IgnoringCancel {
    @Test func theWorkGoesOnWhenItsRunIsCancelledAndTheRunEndsAtOnce() {
        let seen = Delivery<String>()
        let resolvers = Delivery<Resolver<Int, Never>>()
        let work = Guarantee<Int> { resolver in
            resolver.onCancel { _ in seen.send("work cancelled") }
            resolvers.send(resolver)
        }
        let handle = work.get { seen.send("work finished \($0)") }.ignoringCancel()
            .ensure { seen.send("run ended") }
            .run(some: { _ in seen.send("completion") })
        handle.cancel()
        #expect(seen.all == ["run ended"])
        resolvers.wait()?.fulfill(3)
        #expect(seen.all == ["run ended", "work finished 3"])
    }

    @Test func theOtherUploadsOfAWhenFinishAfterOneFailed() {
        let finished = Counter()
        let cancelled = Counter()
        let gate = DispatchSemaphore(value: 0)
        let stalled = Counter()  // uploads whose wait for the gate ran out
        func upload(_ index: Int) -> Promise<Int, TestError> {
            Promise { resolver in
                resolver.onCancel { _ in cancelled.increment() }
                DispatchQueue.global().async {
                    if gate.wait(timeout: .now() + timeout) == .timedOut { stalled.increment() }
                    finished.increment()
                    resolver.fulfill(index)
                }
            }
        }
        let uploads = (0..<4).map { upload($0).ignoringCancel() }
        let all = when(fulfilled: uploads + [Promise(error: TestError("disk full"))])
        #expect(outcome(of: all) == .failure(TestError("disk full")))
        for _ in 0..<4 { gate.signal() }
        #expect(eventually { finished.value == 4 })
        #expect(stalled.value == 0, "the when's failure came only once the uploads gave up")
        #expect(cancelled.value == 0)
    }

    @Test func aRaceLetsTheLosersFinish() {
        let finished = Counter()
        func mirror(_ delay: Int) -> Guarantee<Int> {
            Guarantee { resolver in
                DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(delay)) {
                    finished.increment()
                    resolver.fulfill(delay)
                }
            }
        }
        let winner = value(of: race([mirror(0), mirror(50).ignoringCancel()]))
        #expect(winner == 0)
        #expect(eventually { finished.value == 2 })
    }

    @Test func theMembersAfterOneThatSettlesAtOnceStartAllTheSame() {
        let started = Log()
        func upload(_ name: String) -> Promise<String, TestError> {
            Promise { resolver in
                started.record(name)
                DispatchQueue.global().async { resolver.fulfill(name) }
            }
        }
        let uploads = when(
            fulfilled: [
                upload("upload 1").ignoringCancel(), Promise(error: TestError("missing")),
                upload("upload 2").ignoringCancel(), upload("plain"),
                upload("upload 3").ignoringCancel().map { $0 },
                upload("upload 4").ignoringCancel().timeout(
                    .seconds(3600), orFailWith: TestError("late")),
            ], concurrently: 2)
        #expect(outcome(of: uploads) == .failure(TestError("missing")))
        let downloads = race([Promise(value: "cached"), upload("download").ignoringCancel()])
        #expect(outcome(of: downloads) == .success("cached"))
        let expected: Set = ["upload 1", "upload 2", "upload 3", "upload 4", "download"]
        #expect(eventually { Set(started.all) == expected })
        #expect(started.all.count == 5)  // the member that does not ignore cancel never starts
    }

    @Test func everyMemberThatIgnoresCancelStartsWhenAnotherFailsMeanwhile() {
        for _ in 0..<5 {
            let started = Counter()
            let members = (0..<500).map { index in
                Promise<Int, TestError> { resolver in
                    started.increment()
                    DispatchQueue.global().async { resolver.fulfill(index) }
                }.ignoringCancel()
            }
            let all = when(fulfilled: [failingLater(TestError("lost"))] + members)
            #expect(outcome(of: all) == .failure(TestError("lost")))
            #expect(eventually { started.value == 500 })
        }
    }

    @Test func aRunCancelledBeforeItStartsStillStartsTheWork() async {
        let started = Delivery<Void>()
        let work = Guarantee<Int> { resolver in
            started.send(())
            resolver.fulfill(1)
        }
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await work.ignoringCancel().value
        }
        #expect(await bounded { await task.value } == .some(nil))  // (ended in time, cancelled)
        #expect(await started.arrival() != nil)
    }

    @Test func aCancelledRunOfTheWorkEndsTheRunAsCancelled() {
        let cancelledWork = Guarantee<Int> { $0.cancel() }.ignoringCancel()
        let seen = Delivery<String>()
        let handle = cancelledWork.ensure { seen.send("ensure") }.run { _ in seen.send("value") }
        #expect(seen.wait() == "ensure")
        #expect(handle.isCancelled)
    }
}

@Suite("Sequence helpers") struct SequenceHelpers {
    let numbers = Promise<[Int], TestError>(value: [3, 1, 2])

    @Test func valueHelpersTransformEachElementInOrder() {
        #expect(outcome(of: numbers.mapValues { $0 * 10 }) == .success([30, 10, 20]))
        #expect(outcome(of: numbers.flatMapValues { [$0, $0] }) == .success([3, 3, 1, 1, 2, 2]))
        #expect(
            outcome(of: numbers.compactMapValues { $0 == 1 ? nil : "\($0)" })
                == .success(["3", "2"]))
        #expect(outcome(of: numbers.filterValues { $0 > 1 }) == .success([3, 2]))
        #expect(outcome(of: numbers.sortedValues()) == .success([1, 2, 3]))
    }

    @Test func theyTakeAnySequenceAndPassAFailureThrough() {
        let letters = Guarantee(value: Set(["b", "a"]))
        #expect(value(of: letters.mapValues { $0.uppercased() }.sortedValues()) == ["A", "B"])
        let failed = Promise<[Int], TestError>(error: TestError("x"))
        #expect(outcome(of: failed.mapValues { $0 + 1 }) == .failure(TestError("x")))
    }

    @Test func thenFlatMapJoinsEachElementsPromiseOfASequence() {
        let running = Counter()
        let most = Counter()
        let pages = numbers.thenFlatMap(concurrently: 2) { count -> Promise<[Int], TestError> in
            Promise { resolver in
                most.raise(to: running.increment())
                DispatchQueue.global().async {
                    running.decrement()
                    resolver.fulfill(Array(repeating: count, count: count))
                }
            }
        }
        #expect(outcome(of: pages) == .success([3, 3, 3, 1, 2, 2]))
        #expect(most.value <= 2)
    }

    @Test func firstAndLastValueFailOnAnEmptySequence() throws {
        let list = Promise<[Int], any Error>(value: [4, 5, 6])
        #expect(try outcome(of: list.firstValue)?.get() == 4)
        #expect(try outcome(of: list.lastValue)?.get() == 6)
        let empty = Promise<[Int], any Error>(value: [])
        for promise in [empty.firstValue, empty.lastValue] {
            guard case .failure(let error)? = outcome(of: promise) else {
                Issue.record("an empty sequence did not fail")
                continue
            }
            #expect(error as? PromiseError == .emptySequence)
        }
    }
}

@Suite("Any over a pack") struct AnyOverAPack {
    @Test func itSucceedsWithEveryOutcomeInOrderUnlessAllFailed() {
        let some = any(
            later(1).setFailureType(to: TestError.self), failingLater(TestError("b")),
            Promise<String, TestError>(value: "c"))
        guard case .success(let (first, second, third))? = outcome(of: some) else {
            Issue.record("any failed")
            return
        }
        #expect(first == .success(1))
        #expect(second == .failure(TestError("b")))
        #expect(third == .success("c"))
    }

    @Test func itFailsWithEveryErrorWhenAllFailed() {
        let none = any(
            failingLater(TestError("a")), Promise<String, TestError>(error: TestError("b")))
        #expect(
            outcome(of: none).map { $0.map { _ in 0 } }
                == .failure(AllPromisesFailedError([TestError("a"), TestError("b")])))
    }

    @Test func aMemberEndingByCancellationEndsItSo() {
        let cancelled = Guarantee<Int> { $0.cancel() }
        let seen = Delivery<String>()
        let handle = any(later(1), cancelled).ensure { seen.send("ensure") }.run { _ in
            seen.send("value")
        }
        #expect(seen.wait() == "ensure")
        #expect(handle.isCancelled)
    }
}

/// A completion-handler API, as Foundation's and older ones are.
func fetch(_ outcome: Int, completion: @escaping @Sendable (String?, (any Error)?) -> Void) {
    DispatchQueue.global().async {
        switch outcome {
        case 0: completion("page", nil)
        case 1: completion(nil, TestError("404"))
        default: completion(nil, nil)
        }
    }
}

/// The error of a failed outcome, if any.
func failure<Value>(of outcome: Result<Value, any Error>?) -> (any Error)? {
    if case .failure(let error)? = outcome { error } else { nil }
}

@Suite("Resolvers passed point-free") struct PointFreeResolvers {
    @Test func resolveAndFulfillCanBePassedAsCompletionHandlers() throws {
        let page = Promise<String, any Error> { fetch(0, completion: $0.resolve) }
        #expect(try outcome(of: page)?.get() == "page")
        let failed = Promise<String, any Error> { fetch(1, completion: $0.resolve) }
        #expect(failure(of: outcome(of: failed)) as? TestError == TestError("404"))
        let missing = Promise<String, any Error> { fetch(2, completion: $0.resolve) }
        #expect(failure(of: outcome(of: missing)) as? PromiseError == .missingValue)

        @Sendable func count(completion: @escaping @Sendable (Int) -> Void) { completion(3) }
        #expect(value(of: Guarantee { count(completion: $0.fulfill) }) == 3)
        @Sendable func save(completion: @escaping @Sendable ((any Error)?) -> Void) {
            completion(nil)
        }
        let saved = Promise<Void, any Error> { save(completion: $0.resolve) }
        #expect(try outcome(of: saved)?.get() != nil)
    }
}

@Suite("Debug reports") struct DebugReports {
    #if os(macOS) || os(Linux)
        @Test func aHandlerReceivesTheReportsAndStandardErrorStaysQuiet() async {
            let result = await #expect(
                processExitsWith: .success, observing: [\.standardErrorContent]
            ) {
                exitTestWatchdog(expectsSuccess: true)
                let heard = Log()
                PromiseDiagnostics.handler = { heard.record($0) }
                Guarantee<Int> { _ in }.run()  // drops its resolver
                guard heard.all.count == 1, heard.all[0].contains("without resolving it") else {
                    exit(1)
                }
            }
            let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
            #expect(!text.contains("Future:"))
        }

        @Test func byDefaultReportsGoToStandardError() async {
            let result = await #expect(
                processExitsWith: .success, observing: [\.standardErrorContent]
            ) {
                exitTestWatchdog(expectsSuccess: true)
                Guarantee<Int> { _ in }.run()
            }
            let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
            #expect(text.contains("Future: an operation of Promise<Int, Never> made at"))
        }
    #endif

    @Test func theHandlerIsSafeToSetWhileReportsArrive() {
        _ = reports.all  // the test process's handler, set first
        let line = #line + 9
        let group = DispatchGroup()
        for index in 0..<1_000 {
            DispatchQueue.global().async(group: group) {
                if index % 100 == 0 {
                    // Other tests' reports may come here meanwhile: they go on to `reports`.
                    PromiseDiagnostics.handler = { reports.record($0) }
                }
                if index % 2 == 0 {
                    Guarantee<Int> { _ in }.run()  // drops its resolver: a report
                }
            }
        }
        #expect(group.wait(timeout: .now() + timeout) == .success)
        #expect(reports.reports(madeAt: line).count == 500)
    }

    /// Where the reports about promises of `Marker`, a type one test alone uses, say those
    /// promises were made: each maker's test drops a resolver and expects its own line here.
    func origins<Marker>(of _: Marker.Type) -> [String] {
        reports.all.filter { $0.contains("<\(Marker.self)") }.map { report in
            let words = report.split(separator: " ")
            return words.firstIndex(of: "at").map { String(words[$0 + 1]) } ?? report
        }
    }

    @Test func aReportNamesTheLineOfAnOperationsPromise() {
        _ = reports  // listening from now on
        struct MadeHere {}
        let line = #line + 1
        Promise<MadeHere, TestError> { _ in }.map { _ in 1 }.run { _ in }
        #expect(origins(of: MadeHere.self) == ["\(#fileID):\(line)"])
    }

    @Test func aReportNamesTheLineOfASharedPromisesWork() {
        _ = reports  // listening from now on
        struct SharedHere {}
        let line = #line + 1
        let shared = Promise<SharedHere, TestError> { _ in }.share()
        let handle = shared.run { _ in Issue.record("its work dropped its resolver") }
        #expect(handle.isCancelled)
        #expect(origins(of: SharedHere.self) == ["\(#fileID):\(line)"])
    }

    @Test func aSharedPromiseNobodyKeepsReportsNothingOfItsOwn() {
        _ = reports  // listening from now on
        struct KeptByNobody: Equatable {}
        let outcomes = Delivery<Result<KeptByNobody, TestError>>()
        Promise<KeptByNobody, TestError> { resolver in
            DispatchQueue.global().async { resolver.fulfill(KeptByNobody()) }
        }.share().run { outcomes.send($0) }
        #expect(outcomes.wait() == .success(KeptByNobody()))
        #expect(origins(of: KeptByNobody.self) == [])
    }

    @Test func aReportNamesTheLineOfAPendingPromiseAwaitedWhenItsResolverGoes() {
        _ = reports  // listening from now on
        struct AwaitedPending {}
        let line = #line + 1
        var pair = Optional(Promise<AwaitedPending, TestError>.pending())
        let handle = pair!.promise.run { _ in Issue.record("nothing can settle it") }
        pair = nil
        #expect(handle.isCancelled)
        #expect(origins(of: AwaitedPending.self) == ["\(#fileID):\(line)"])
    }

    @Test func aPendingPromiseNeverRunReportsNothingWhenItsResolverGoes() {
        _ = reports  // listening from now on
        struct NeverRun {}
        var pair = Optional(Promise<NeverRun, TestError>.pending())
        let promise = pair!.promise
        pair = nil
        #expect(origins(of: NeverRun.self) == [])
        #expect(promise.run { _ in Issue.record("nothing can settle it") }.isCancelled)
    }

    @Test func aPendingPromiseWhoseRunsLeftReportsNothingWhenItsResolverGoes() {
        _ = reports  // listening from now on
        struct NoLongerAwaited {}
        var pair = Optional(Promise<NoLongerAwaited, TestError>.pending())
        pair!.promise.run { _ in Issue.record("it was cancelled") }.cancel()
        pair = nil
        #expect(origins(of: NoLongerAwaited.self) == [])
    }

    @Test func aReportNamesTheLineOfAMemberOfEachCombination() {
        _ = reports  // listening from now on
        struct InWhen {}
        struct InTupleWhen {}
        struct InKeyedWhen {}
        struct InResolvedWhen {}
        struct InAny {}
        struct InTupleAny {}
        struct InRace {}
        struct InListedRace {}
        struct InFulfilledRace {}
        struct InThenMap {}
        struct InTimeout {}
        struct InIgnoringCancel {}
        typealias P<Marker> = Promise<Marker, TestError>
        let line = #line + 1
        when(fulfilled: [P<InWhen> { _ in }]).run { _ in }
        when(fulfilled: P<InTupleWhen> { _ in }, P<Int>(value: 1)).run { _ in }
        when(fulfilled: ["key": P<InKeyedWhen> { _ in }]).run { _ in }
        when(resolved: [P<InResolvedWhen> { _ in }], concurrently: 1).run()
        any([P<InAny> { _ in }]).run { _ in }
        any(P<InTupleAny> { _ in }, P<Int>(value: 1)).run { _ in }
        race([P<InRace> { _ in }]).run { _ in }
        race(P<InListedRace> { _ in }, P<InListedRace>(error: TestError("lost"))).run { _ in }
        race(fulfilled: [P<InFulfilledRace> { _ in }]).run { _ in }
        P<[Int]>(value: [1]).thenMap { _ in P<InThenMap> { _ in } }.run { _ in }
        P<InTimeout> { _ in }.timeout(.seconds(60), orFailWith: TestError("slow")).run { _ in }
        P<InIgnoringCancel> { _ in }.ignoringCancel().run { _ in }
        let made = [
            origins(of: InWhen.self), origins(of: InTupleWhen.self),
            origins(of: InKeyedWhen.self), origins(of: InResolvedWhen.self),
            origins(of: InAny.self), origins(of: InTupleAny.self), origins(of: InRace.self),
            origins(of: InListedRace.self), origins(of: InFulfilledRace.self),
            origins(of: InThenMap.self), origins(of: InTimeout.self),
            origins(of: InIgnoringCancel.self),
        ]
        #expect(made == (line..<line + 12).map { ["\(#fileID):\($0)"] })
    }

    @Test func aReportNamesTheLineOfAPromiseFirstlyMakes() {
        _ = reports  // listening from now on
        struct MadeFirst {}
        let line = #line + 1
        firstly { Promise<MadeFirst, TestError> { _ in } }.run { _ in }
        #expect(origins(of: MadeFirst.self) == ["\(#fileID):\(line)"])
    }

    @Test func aReportNamesTheLineOfAPromiseAwaitedInAsyncWork() async {
        _ = reports  // listening from now on
        struct AwaitedInTask {}
        let line = #line + 1
        let bridged = Guarantee { await Promise<AwaitedInTask, TestError> { _ in }.result == nil }
        #expect(await bounded { await bridged.value } == true)
        #expect(origins(of: AwaitedInTask.self) == ["\(#fileID):\(line)"])
    }

    #if os(macOS) || os(Linux)
        @Test func theOldHandlerGoesOutsideTheLockSoWhatItHeldMayReport() async {
            await #expect(processExitsWith: .success) {
                exitTestWatchdog(expectsSuccess: true)
                final class Logger: Sendable {
                    deinit { PromiseDiagnostics.handler("logger closed") }
                }
                let heard = Log()
                do {
                    let logger = Logger()
                    PromiseDiagnostics.handler = { [logger] in heard.record("\(logger): \($0)") }
                }
                let replaced = DispatchSemaphore(value: 0)
                DispatchQueue.global().async {
                    PromiseDiagnostics.handler = { heard.record($0) }  // the Logger goes
                    replaced.signal()
                }
                guard replaced.wait(timeout: .now() + timeout) == .success else { exit(1) }
                exit(heard.all == ["logger closed"] ? 0 : 2)
            }
        }
    #endif
}

/// The small names a PromiseKit port reaches for.
@Suite("PromiseKit's small names") struct SmallNames {
    @Test func aVoidPromiseOrGuaranteeNeedsNoValue() {
        #expect(value(of: Guarantee()) != nil)
        let promise: Promise<Void, TestError> = Promise()
        #expect(throws: Never.self) { try outcome(of: promise)?.get() }
    }

    @Test func asVoidForgetsTheValueAndKeepsTheFailure() {
        let done: Promise<Void, TestError> = Promise(value: 1).asVoid()
        #expect(throws: Never.self) { try outcome(of: done)?.get() }
        let failed = Promise<Int, TestError>(error: TestError("lost")).asVoid()
        #expect(throws: TestError("lost")) { try outcome(of: failed)?.get() }
    }

    @Test func raceOfPromisesWrittenOut() {
        let (slow, _) = Promise<Int, TestError>.pending()
        let fast = Promise<Int, TestError>(value: 2)
        #expect(outcome(of: race(slow, fast, slow)) == .success(2))
        #expect(outcome(of: race(fast, Promise(error: TestError("late")))) == .success(2))
    }

    /// PromiseKit's `ensure(on: .main)`: the cleanup may touch main-actor state, also when the
    /// run is cancelled.
    @MainActor @Test func ensureOnTheMainActorCleansUpMainActorState() async {
        final class Spinner { var spinning = true }
        let spinner = Spinner()
        let (never, resolver) = Guarantee<Int>.pending()
        let handle = never.ensure(on: .main) { spinner.spinning = false }.run()
        #expect(spinner.spinning)
        handle.cancel()
        _ = await awaited("the main queue") {
            await withCheckedContinuation { (queued: CheckedContinuation<Void, Never>) in
                DispatchQueue.main.async { queued.resume() }  // behind the cleanup
            }
        }
        #expect(!spinner.spinning)
        withExtendedLifetime(resolver) {}
    }

    /// PromiseKit's order: a chain awaited past `ensure(on:)` finds its cleanup done.
    @Test func ensureOnAQueueIsDoneOnceTheChainIsAwaited() async {
        let cleanedUp = Counter()
        let value = await awaited("the chain") {
            await Guarantee(value: 1)
                .ensure(on: DispatchQueue(label: "cleanup")) { cleanedUp.increment() }
                .value
        }
        #expect(value == 1)
        #expect(cleanedUp.value == 1)
    }

    /// The step after `ensure(on:)` starts once the cleanup has returned, also when the queue is
    /// busy as the chain gets there.
    @Test func theStepAfterEnsureOnAQueueStartsOnceTheCleanupHasReturned() {
        let queue = DispatchQueue(label: "cleanup")
        let busy = DispatchSemaphore(value: 0)
        let stalled = Counter()
        queue.async {  // a cleanup that nothing waits for is still queued behind it
            if busy.wait(timeout: .now() + timeout) == .timedOut { stalled.increment() }
        }
        let log = Log()
        let finished = Delivery<Void>()
        Guarantee(value: 1)
            .ensure(on: queue) { log.record("cleanup") }
            .map { _ in log.record("next step") }
            .run(some: { finished.send(()) })
        busy.signal()
        #expect(finished.wait() != nil)
        #expect(stalled.value == 0, "the run waited for the queue it had left busy")
        #expect(log.all == ["cleanup", "next step"])
    }

    /// After the cleanup, the chain goes back to the queue it was on.
    @Test func ensureOnAQueueGoesBackToTheQueueTheChainWasOn() {
        let key = DispatchSpecificKey<String>()
        let work = DispatchQueue(label: "work")
        work.setSpecific(key: key, value: "work")
        let cleanup = DispatchQueue(label: "cleanup")
        cleanup.setSpecific(key: key, value: "cleanup")
        let places = Log()
        let finished = Delivery<Void>()
        Guarantee(value: 1)
            .on(work)
            .ensure(on: cleanup) { places.record(DispatchQueue.getSpecific(key: key) ?? "none") }
            .map { _ in places.record(DispatchQueue.getSpecific(key: key) ?? "none") }
            .run(some: { finished.send(()) })
        #expect(finished.wait() != nil)
        #expect(places.all == ["cleanup", "work"])
    }

    /// A chain on the cleanup's queue already does not wait for itself: the cleanup and the way
    /// back are each queued, never a `sync`.
    @Test func ensureOnTheQueueTheChainIsOnGoesOn() {
        let queue = DispatchQueue(label: "store")
        let log = Log()
        let finished = Delivery<Void>()
        Guarantee(value: 1)
            .on(queue)
            .ensure(on: queue) { log.record("cleanup") }
            .map { _ in log.record("next step") }
            .run(some: { finished.send(()) })
        #expect(finished.wait() != nil)
        #expect(log.all == ["cleanup", "next step"])
    }

    /// A cancelled run still cleans up, on the queue, once; the step after it never starts.
    @Test func aCancelledRunStillCleansUpOnTheQueue() {
        let key = DispatchSpecificKey<Int>()
        let queue = DispatchQueue(label: "cleanup")
        queue.setSpecific(key: key, value: 1)
        let cleanedUp = Delivery<Bool>()
        let nextSteps = Counter()
        let (never, resolver) = Guarantee<Int>.pending()
        let handle =
            never
            .ensure(on: queue) { cleanedUp.send(DispatchQueue.getSpecific(key: key) == 1) }
            .map { _ in nextSteps.increment() }
            .run()
        handle.cancel()
        #expect(cleanedUp.wait() == true)
        queue.sync {}  // behind a second cleanup, were there one
        #expect(cleanedUp.all == [true])
        #expect(nextSteps.value == 0)
        withExtendedLifetime(resolver) {}
    }

    /// A run cancelled while it waits for the cleanup's queue cleans up once, there, and takes
    /// no step after it.
    @Test func aRunCancelledWhileItWaitsForTheCleanupsQueueCleansUpOnce() {
        let queue = DispatchQueue(label: "cleanup")
        let busy = DispatchSemaphore(value: 0)
        let stalled = Counter()
        queue.async {
            if busy.wait(timeout: .now() + timeout) == .timedOut { stalled.increment() }
        }
        let cleanups = Counter()
        let nextSteps = Counter()
        let handle = Guarantee(value: 1)
            .ensure(on: queue) { cleanups.increment() }
            .map { _ in nextSteps.increment() }
            .run()
        handle.cancel()
        busy.signal()
        queue.sync {}  // behind the cleanup, queued as the run was cancelled
        #expect(stalled.value == 0, "the run or its cancel waited for the queue it had left busy")
        #expect(cleanups.value == 1)
        #expect(nextSteps.value == 0)
    }

    /// PromiseKit's meaning: the cleanup runs on the queue; the chain does not move there.
    @Test func ensureOnAQueueRunsTheCleanupThereAndMovesNothing() {
        let key = DispatchSpecificKey<Int>()
        let queue = DispatchQueue(label: "cleanup")
        queue.setSpecific(key: key, value: 1)
        let cleanedUpOnTheQueue = Delivery<Bool>()
        let laterStepOffTheQueue = Delivery<Bool>()
        Guarantee(value: 1)
            .ensure(on: queue) {
                cleanedUpOnTheQueue.send(DispatchQueue.getSpecific(key: key) == 1)
            }
            .map { _ in
                let offTheQueue = DispatchQueue.getSpecific(key: key) == nil
                queue.sync { laterStepOffTheQueue.send(offTheQueue) }  // would deadlock on it
            }
            .run()
        #expect(cleanedUpOnTheQueue.wait() == true)
        #expect(laterStepOffTheQueue.wait() == true)
    }
}
