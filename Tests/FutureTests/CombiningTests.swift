import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A promise that settles with `outcome` after `delay` milliseconds, on a global queue.
func settling<Value: Sendable, Failure>(
    in delay: Int, _ outcome: Result<Value, Failure>
) -> Promise<Value, Failure> {
    Promise { resolver in
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(delay)) {
            resolver(outcome)
        }
    }
}

/// Members a test can settle one by one, in any order, and whose cancellations it counts.
final class Members: @unchecked Sendable {
    let pending = (0..<4).map { _ in Pending<Int>() }
    let ensured = (0..<4).map { _ in Counter() }

    var promises: [Promise<Int, TestError>] {
        pending.indices.map { index in
            pending[index].promise.ensure { self.ensured[index].increment() }
        }
    }

    /// The resolver of member `index`, once its run has started.
    func resolver(_ index: Int) -> Resolver<Int, TestError>? {
        pending[index].resolvers.all.first ?? pending[index].resolvers.wait()
    }
    var cancelled: [Int] { pending.map(\.cancelled.value) }
    var started: [Int] { pending.map(\.resolvers.all.count) }
}

@Suite struct WhenFulfilled {
    @Test func valuesComeInInputOrderWhateverOrderTheyFinishIn() {
        let members = Members()
        let result = Delivery<Result<[Int], TestError>>()
        when(fulfilled: members.promises).run { result.send($0) }
        for index in [2, 0, 3, 1] { members.resolver(index)?.fulfill(index * 10) }
        #expect(result.wait() == .success([0, 10, 20, 30]))
    }

    @Test func theFirstFailureDecidesAndTheOthersAreCancelled() {
        let members = Members()
        let result = Delivery<Result<[Int], TestError>>()
        when(fulfilled: members.promises).run { result.send($0) }
        members.resolver(1)?.fulfill(1)
        members.resolver(2)?.reject(TestError("two"))
        members.resolver(3)?.reject(TestError("three"))  // too late: already decided
        #expect(result.wait() == .failure(TestError("two")))
        #expect(members.cancelled == [1, 0, 0, 1])  // those still running
        #expect(members.ensured.map(\.value) == [1, 1, 1, 1])
        #expect(result.all.count == 1)
    }

    @Test func noPromisesSucceedAtOnce() {
        #expect(outcome(of: when(fulfilled: [Promise<Int, TestError>]())) == .success([]))
    }

    @Test func promisesOfDifferentTypesGiveATuple() {
        let three = value(of: when(fulfilled: later(1), later("two"), later(3.0)))
        #expect(three?.0 == 1)
        #expect(three?.1 == "two")
        #expect(three?.2 == 3.0)
        let one = value(of: when(fulfilled: later(true)))
        #expect(one == true)
        let thirteen = when(
            fulfilled: later(1), later(2), later(3), later(4), later(5), later(6), later(7),
            later(8), later(9), later(10), later(11), later(12), later("thirteen"))
        let values = value(of: thirteen)
        #expect(values?.12 == "thirteen")
        #expect(values.map { $0.0 + $0.11 } == 13)
    }

    @Test func aDictionaryKeepsItsKeys() {
        let sizes = when(fulfilled: ["small": later(1), "large": later(100)])
        #expect(outcome(of: sizes) == .success(["small": 1, "large": 100]))
    }

    @Test func atMostNRunAtOnceAndTheNextStartsAsOneFinishes() {
        let members = Members()
        let result = Delivery<Result<[Int], TestError>>()
        when(fulfilled: members.promises, concurrently: 2).run { result.send($0) }
        #expect(members.started == [1, 1, 0, 0])
        members.resolver(1)?.fulfill(1)
        #expect(members.started == [1, 1, 1, 0])
        members.resolver(2)?.fulfill(2)
        #expect(members.started == [1, 1, 1, 1])
        members.resolver(3)?.fulfill(3)
        members.resolver(0)?.fulfill(0)
        #expect(result.wait() == .success([0, 1, 2, 3]))
    }

    #if os(macOS) || os(Linux)
        @Test func aLimitBelowOneIsAPreconditionFailure() async {
            await #expect(processExitsWith: .failure) {
                exitTestWatchdog(expectsSuccess: false)
                _ = when(fulfilled: [Promise<Int, Never>](), concurrently: 0)
            }
        }

        /// The message names the function called, not the one it is built on.
        @Test func thenFlatMapsLimitBelowOneStopsWithAMessageNamingIt() async {
            let exit = await #expect(
                processExitsWith: .failure, observing: [\.standardErrorContent]
            ) {
                exitTestWatchdog(expectsSuccess: false)
                _ = Guarantee(value: [1]).thenFlatMap(concurrently: 0) { Guarantee(value: [$0]) }
            }
            let message = String(decoding: exit?.standardErrorContent ?? [], as: UTF8.self)
            #expect(message.contains("thenFlatMap(concurrently:_:) needs a limit of at least 1"))
        }
    #endif

    @Test func thenMapJoinsAPromiseForEachElement() {
        let running = Counter()
        let most = Counter()
        let doubled = Promise<[Int], Never>(value: Array(1...20)).thenMap(concurrently: 3) {
            value in
            Promise { resolver in
                most.raise(to: running.increment())
                DispatchQueue.global().async {
                    running.decrement()
                    resolver.fulfill(value * 2)
                }
            }
        }
        #expect(outcome(of: doubled) == .success(Array(1...20).map { $0 * 2 }))
        #expect(most.value <= 3)
    }

    /// A cancelled `when` holds its run's end until its member runs have stopped: it counts them
    /// down as they end, in about the work it took to start them. (Looking for one still going
    /// at each end made the cancel quadratic: for these 20,000 in a debug build, 12 to 20 s, 150
    /// times their start or more.) Both happen on this thread, whose own processor time is
    /// compared: other work on a loaded machine does not count.
    @Test func aCancelOfManyWaitingMemberRunsTakesAboutAsLongAsTheirStart() {
        let pending = Pending<Int>()
        let count = 20_000
        let members = (0..<count).map { _ in pending.promise.map { $0 } }
        let start = threadTime()
        let handle = when(fulfilled: members).run { _ in Issue.record("cancelled: no outcome") }
        let started = threadTime()
        handle.cancel()
        let cancelled = threadTime()
        #expect(pending.cancelled.value == count)
        #expect(cancelled - started < 20 * (started - start))
    }

    /// The processor time this thread has used, in nanoseconds.
    private func threadTime() -> Int {
        var now = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
        return now.tv_sec * 1_000_000_000 + now.tv_nsec
    }
}

/// An object that calls `body` as it goes away.
final class Farewell: Sendable {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    deinit { body() }
}

extension WhenFulfilled {
    @Test func aMemberValueThatGoesAsTheCombinationFailsMayCancelIt() {
        let handles = Delivery<RunHandle>()
        let (failure, resolver) = Promise<Farewell, TestError>.pending()
        let first = Promise<Farewell, TestError> { resolver in
            resolver.fulfill(Farewell { handles.all[0].cancel() })
        }
        let ended = Delivery<Void>()
        handles.send(when(fulfilled: [first, failure]).ensure { ended.send(()) }.run { _ in })
        DispatchQueue.global().async { resolver.reject(TestError("failed")) }  // `first` goes
        #expect(ended.wait() != nil)
    }
}

@Suite struct EveryOutcome {
    @Test func whenResolvedWaitsForEveryOutcomeAndNeverFails() {
        let all = when(resolved: [
            settling(in: 20, .success(1)), settling(in: 0, .failure(TestError("x"))),
            settling(in: 10, .success(3)),
        ])
        #expect(outcome(of: all) == .success([.success(1), .failure(TestError("x")), .success(3)]))
    }

    @Test func anyGivesEveryOutcomeInInputOrderOnceAllHaveSettled() {
        // Members resolve later, from several threads, in an order unlike the input's: a version
        // that decided early, or collected in completion order, would fail here.
        for _ in 0..<20 {
            let delays = [30, 0, 20, 10].shuffled()
            let outcomes: [Result<Int, TestError>] = [
                .success(0), .failure(TestError("1")), .success(2), .failure(TestError("3")),
            ]
            let promise = any(zip(delays, outcomes).map { settling(in: $0, $1) })
            #expect(outcome(of: promise) == .success(outcomes))
        }
    }

    @Test func anyFailsOnlyWhenEveryMemberFailsWithAllTheirErrors() {
        let promise = any([
            settling(in: 10, Result<Int, TestError>.failure(TestError("a"))),
            settling(in: 0, .failure(TestError("b"))),
        ])
        #expect(
            outcome(of: promise)
                == .failure(AllPromisesFailedError([TestError("a"), TestError("b")])))
        #expect(outcome(of: any([Promise<Int, TestError>]())) == .success([]))
    }

    @Test func whenResolvedWithALimitRunsAtMostThatManyAndKeepsEveryOutcome() {
        let members = Members()
        let result = Delivery<[Result<Int, TestError>]>()
        when(resolved: members.promises, concurrently: 2).run { result.send($0) }
        #expect(members.started == [1, 1, 0, 0])
        members.resolver(1)?.reject(TestError("1"))  // a failure starts the next all the same
        #expect(members.started == [1, 1, 1, 0])
        members.resolver(2)?.fulfill(2)
        #expect(members.started == [1, 1, 1, 1])
        members.resolver(3)?.reject(TestError("3"))
        members.resolver(0)?.fulfill(0)
        #expect(
            result.wait() == [
                .success(0), .failure(TestError("1")), .success(2), .failure(TestError("3")),
            ])
        #expect(members.cancelled == [0, 0, 0, 0])
    }
}

/// A batch stopped rather than cancelled: by a signal (`when(resolved:concurrently:until:)`) or
/// by its awaiting task's cancellation (`outcomes(of:concurrently:)`), it settles with what
/// finished, and cancels the rest.
@Suite struct StoppingACombination {
    @Test func aTaskCancelledMidBatchGetsWhatFinishedAndTheRestAreCancelled() async {
        let members = Members()
        let task = Task { await outcomes(of: members.promises, concurrently: 3) }
        await members.pending[0].resolvers.arrival()?.fulfill(0)
        await members.pending[2].resolvers.arrival()?.reject(TestError("2"))
        _ = await members.pending[3].resolvers.arrival()  // started as 0 ended
        task.cancel()
        let finished = await bounded { await task.value }
        #expect(finished == [.success(0), nil, .failure(TestError("2")), nil])
        // The await returned after the unfinished members' cancel handlers and `ensure` steps.
        #expect(members.cancelled == [0, 1, 0, 1])
        #expect(members.ensured.map(\.value) == [1, 1, 1, 1])
    }

    @Test func aTaskCancelledBeforeItAwaitsStartsNoMember() async {
        let members = Members()
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await outcomes(of: members.promises)
        }
        #expect(await bounded { await task.value } == [nil, nil, nil, nil])
        #expect(members.started == [0, 0, 0, 0])
    }

    @Test func aBatchThatFinishesBeforeTheCancelGetsEveryOutcome() async {
        let task = Task {
            await outcomes(of: [later(1), later(2).map { $0 * 10 }], concurrently: 1)
        }
        let finished = await bounded { await task.value }
        task.cancel()  // too late: nothing to stop
        #expect(finished == [.success(1), .success(20)])
    }

    @Test func anEmptyBatchSettlesAtOnceWithNothing() async {
        let (never, resolver) = Guarantee<Void>.pending()
        #expect(value(of: when(resolved: [Promise<Int, TestError>](), until: never)) == [])
        #expect(await bounded { await outcomes(of: [Promise<Int, TestError>]()) } == [])
        withExtendedLifetime(resolver) {}
    }

    @Test func aSignalStopsTheBatchWithWhatFinishedAndStartsNoMore() {
        let members = Members()
        let (stop, stopper) = Guarantee<Void>.pending()
        let result = Delivery<[Result<Int, TestError>?]>()
        when(resolved: members.promises, concurrently: 2, until: stop).run(some: result.send)
        #expect(members.started == [1, 1, 0, 0])  // the signal takes no place in the limit
        members.resolver(1)?.fulfill(1)
        #expect(members.started == [1, 1, 1, 0])
        stopper.fulfill(())
        #expect(result.wait() == [nil, .success(1), nil, nil])
        #expect(members.cancelled == [1, 0, 1, 0])
        #expect(members.started == [1, 1, 1, 0])
        #expect(members.ensured.map(\.value) == [1, 1, 1, 0])
    }

    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func aDeadlineStopsTheBatch() {
        let clock = ManualClock()
        let members = Members()
        let result = Delivery<[Result<Int, TestError>?]>()
        let deadline = after(.seconds(30), clock: clock)
        when(resolved: members.promises, until: deadline).run(some: result.send)
        members.resolver(3)?.fulfill(3)
        clock.advance(by: .seconds(30))
        #expect(result.wait() == [nil, nil, nil, .success(3)])
        #expect(members.cancelled == [1, 1, 1, 0])
    }

    @Test func aBatchThatFinishesBeforeTheSignalGetsEveryOutcomeAndNoReport() {
        _ = reports  // listening from now on
        let members = [later(1).setFailureType(to: TestError.self), Promise(value: 2)]
        let line = #line + 2
        do {
            let (stop, stopper) = Guarantee<Void>.pending()
            #expect(value(of: when(resolved: members, until: stop)) == [.success(1), .success(2)])
            withExtendedLifetime(stopper) {}
        }
        // The signal's run was cancelled with the batch: its resolver, never used, is no fault.
        #expect(reports.reports(madeAt: line).isEmpty)
    }

    @Test func aMemberThatCancelsItsOwnRunDropsOutAndTheOthersGoOn() async {
        let (stop, stopper) = Guarantee<Void>.pending()
        let members = [
            Promise<Int, TestError> { $0.cancel() }, later(2).setFailureType(to: TestError.self),
        ]
        let batch = when(resolved: members, until: stop)
        #expect(await bounded { await batch.value } == [nil, .success(2)])
        withExtendedLifetime(stopper) {}
        #expect(await bounded { await outcomes(of: members) } == [nil, .success(2)])
    }

    @Test func aSignalThatEndsByCancellationEndsTheBatchSo() {
        let members = Members()
        let ended = Delivery<Void>()
        let (stop, stopper) = Guarantee<Void>.pending()
        when(resolved: members.promises, until: stop).ensure { ended.send(()) }
            .run(some: { _ in Issue.record("cancelled: no outcome") })
        members.resolver(0)?.fulfill(0)
        stopper.cancel()
        #expect(ended.wait() != nil)
        #expect(members.cancelled == [0, 1, 1, 1])
    }

    @Test func aStopRacingTheMembersGivesEachOutcomeOrACancelNeverBoth() {
        for _ in 0..<300 {
            let resolvers = (0..<3).map { _ in Delivery<Resolver<Int, TestError>>() }
            let cancelled = (0..<3).map { _ in Counter() }
            let members = (0..<3).map { index in
                Promise<Int, TestError> { resolver in
                    resolver.onCancel { _ in cancelled[index].increment() }
                    resolvers[index].send(resolver)
                }
            }
            let (stop, stopper) = Guarantee<Void>.pending()
            let result = Delivery<[Result<Int, TestError>?]>()
            when(resolved: members, until: stop).run(some: result.send)
            let started = resolvers.compactMap { $0.wait() }
            DispatchQueue.concurrentPerform(iterations: 4) { index in
                if index == 3 { stopper.fulfill(()) } else { started[index].fulfill(index) }
            }
            guard let finished = result.wait() else { return #expect(Bool(false)) }
            for index in 0..<3 {
                #expect(finished[index] == nil || finished[index] == .success(index))
                if finished[index] != nil { #expect(cancelled[index].value == 0) }
                #expect(cancelled[index].value <= 1)
            }
        }
    }
}

@Suite struct Racing {
    @Test func theFirstToSettleWinsAndTheOthersAreCancelled() {
        let members = Members()
        let result = Delivery<Result<Int, TestError>>()
        race(members.promises).run { result.send($0) }
        members.resolver(2)?.reject(TestError("first"))
        #expect(result.wait() == .failure(TestError("first")))
        #expect(members.cancelled == [1, 1, 0, 1])
        #expect(members.ensured.map(\.value) == [1, 1, 1, 1])
    }

    @Test func raceFulfilledSkipsFailuresAndFailsOnlyWhenAllFail() {
        let members = Members()
        let result = Delivery<Result<Int, AllPromisesFailedError<TestError>>>()
        race(fulfilled: members.promises).run { result.send($0) }
        members.resolver(0)?.reject(TestError("0"))
        members.resolver(3)?.fulfill(3)
        #expect(result.wait() == .success(3))
        #expect(members.cancelled == [0, 1, 1, 0])

        let failing = race(fulfilled: [
            settling(in: 10, Result<Int, TestError>.failure(TestError("a"))),
            settling(in: 0, .failure(TestError("b"))),
        ])
        #expect(
            outcome(of: failing)
                == .failure(AllPromisesFailedError([TestError("a"), TestError("b")])))
    }

    @Test func racingNothing() {
        let ensured = Counter()
        let handle = race([Promise<Int, TestError>]()).ensure { ensured.increment() }.run { _ in
            Issue.record("nothing can win")
        }
        #expect(handle.isCancelled)  // nothing can win, so the race ends by cancellation
        #expect(ensured.value == 1)
        #expect(outcome(of: race(fulfilled: [Promise<Int, TestError>]())) == .failure(.init([])))
    }
}

@Suite struct CombinedRuns {
    @Test func buildingRunsNothingAndEveryRunRunsEveryMemberAnew() {
        let runs = Counter()
        let member = Promise<Int, Never> { $0.fulfill(runs.increment()) }
        let combined = when(fulfilled: [member, member]).map { $0.reduce(0, +) }
        #expect(runs.value == 0)
        #expect(outcome(of: combined) == .success(3))
        #expect(outcome(of: combined) == .success(7))
    }

    @Test func aCombinationChainsAndNestsLikeAnyPromise() {
        let inner = when(fulfilled: [later(1), later(2)]).map { $0.reduce(0, +) }
        let log = Log()
        let outer = race([inner, later(10).then { later($0) }])
            .then { value in when(fulfilled: later(value), later("x")) }
            .map { "\($0.0)\($0.1)" }
            .ensure { log.record("ensure") }
        let result = outcome(of: outer)
        #expect(result == .success("3x") || result == .success("10x"))
        #expect(log.all == ["ensure"])
    }

    @Test func cancellingTheCombinationCancelsEveryMemberStillRunning() {
        let members = Members()
        let ensured = Counter()
        let handle = when(fulfilled: members.promises).ensure { ensured.increment() }
            .run { _ in Issue.record("cancelled: no completion") }
        members.resolver(0)?.fulfill(0)
        for index in 1..<4 { _ = members.resolver(index) }
        handle.cancel()
        #expect(members.cancelled == [0, 1, 1, 1])
        #expect(members.ensured.map(\.value) == [1, 1, 1, 1])
        #expect(ensured.value == 1)
        members.resolver(1)?.fulfill(1)  // too late: ignored
    }

    // Members that end at once, each in a run of its own (see `Join.launch`), or called: these
    // check that no member sees what the one before it left there.
    @Test func membersThatEndAtOnceAreRunsOfTheirOwn() {
        let ensured = Counter()
        let members: [Promise<[String], TestError>] = [
            Promise(value: ["a"]),
            Promise(value: ["b"]).ensure { ensured.increment() }.map { $0 + $0 },
            Promise(error: TestError("c")),
            later(3).setFailureType(to: TestError.self).map { _ in ["d"] },
            Promise(value: 1).then { _ in
                Promise<[String], TestError>(value: (1...3).map(String.init))
            },
            Promise(value: (1, 2, 3, 4, 5, 6, 7, 8)).map { ["\($0.0 + $0.7)"] },  // a larger slot
            Promise { $0.fulfill(["f"]) }.then { $0 + ["g"] },
        ]
        let expected: [Result<[String], TestError>] = [
            .success(["a"]), .success(["b", "b"]), .failure(TestError("c")), .success(["d"]),
            .success(["1", "2", "3"]), .success(["9"]), .success(["f", "g"]),
        ]
        #expect(outcome(of: when(resolved: members)) == .success(expected))
        let cancelled = Promise<[String], TestError> { $0.cancel() }
        #expect(outcome(of: race([cancelled, cancelled, members[6]])) == .success(["f", "g"]))
        #expect(ensured.value == 1)
    }

    @Test func aResolverKeptByAMemberThatEndedCannotTouchTheNext() {
        let kept = Delivery<Resolver<Int, TestError>>()
        let first = Promise<Int, TestError> { resolver in
            resolver.fulfill(1)
            kept.send(resolver)
        }
        let second = Pending<Int>()
        let result = Delivery<Result<[Int], TestError>>()
        let handle = when(fulfilled: [first, second.promise]).run { result.send($0) }
        let stale = kept.wait()
        let next = second.resolvers.wait()
        stale?.cancel()
        stale?.reject(TestError("stale"))
        stale?.onCancel { _ in Issue.record("not the stale member's run") }
        kept.clear()
        #expect(!handle.isCancelled)
        #expect(second.cancelled.value == 0)
        next?.fulfill(2)
        #expect(result.wait() == .success([1, 2]))
    }

    @Test func aMemberEndingByCancellationEndsAWhenButNotARace() {
        let abandoned = Promise<Int, TestError> { $0.cancel() }
        let whenHandle = when(fulfilled: [abandoned, later(1).setFailureType(to: TestError.self)])
            .run { _ in Issue.record("cancelled: no completion") }
        #expect(whenHandle.isCancelled)
        #expect(outcome(of: race([abandoned, settling(in: 5, .success(2))])) == .success(2))
        let allCancelled = race([abandoned, abandoned]).run { _ in Issue.record("nothing won") }
        #expect(allCancelled.isCancelled)
    }

    /// A member's resolver let go of unresolved ends the member as its operation returns: a
    /// `when` that it ends, cancelled, calls no operation after it.
    @Test func aMemberThatLetsGoOfItsResolverEndsAWhenBeforeTheNextMemberStarts() {
        _ = reports  // listening from now on
        let line = #line + 1
        let dropping = Promise<Int, TestError> { _ in }
        let called = Counter()
        let next = Promise<Int, TestError> { resolver in
            called.increment()
            resolver.fulfill(1)
        }
        let handle = when(fulfilled: [dropping, next])
            .run { _ in Issue.record("cancelled: no completion") }
        #expect(handle.isCancelled)
        #expect(called.value == 0)
        #expect(reports.reports(madeAt: line).count == 1)
    }

    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func aMemberThatCancelsItsOwnRunHearsItsCancelHandler() {
        /// How many times a member that cancels its own run hears its cancel handler, in the run
        /// that `run` starts.
        func heard(_ run: (Promise<Int, TestError>) -> RunHandle) -> Int {
            let heard = Counter()
            let member = Promise<Int, TestError> { resolver in
                resolver.onCancel { _ in heard.increment() }
                resolver.cancel()
            }
            _ = run(member)
            return heard.value
        }
        let other = Promise<Int, TestError>(value: 1)
        #expect(heard { $0.run { _ in } } == 1)  // as a plain run does
        #expect(heard { when(resolved: [$0, other]).run { _ in } } == 1)
        #expect(heard { when(fulfilled: [$0, other]).run { _ in } } == 1)
        #expect(heard { when(fulfilled: [other, $0], concurrently: 1).run { _ in } } == 1)
        #expect(heard { when(fulfilled: ["a": $0, "b": other]).run { _ in } } == 1)
        #expect(heard { when(fulfilled: $0, other).run { _ in } } == 1)
        #expect(heard { any([$0, other]).run { _ in } } == 1)
        #expect(heard { race([$0, other]).run { _ in } } == 1)
        #expect(heard { race(fulfilled: [$0, other]).run { _ in } } == 1)
        let clock = ManualClock()
        let slow = TestError("slow")
        #expect(heard { $0.timeout(.seconds(1), orFailWith: slow, clock: clock).run { _ in } } == 1)
    }
}

/// Stress tests: CI runs this suite again under ThreadSanitizer.
/// Stress tests. Each runs on a thread of its own, which it may block and spin on while the members
/// end on Dispatch's global queues: a test blocking a thread of Swift's concurrency pool would
/// hold up those queues, which on Linux are the same pool. CI runs them again under
/// ThreadSanitizer.
@Suite struct CombiningConcurrency {
    @Test func everyMemberHearsItsCancelHandlerOnceThoughItAndTheCombinationCancelAtOnce() async {
        let unheard = Counter()
        let startedTwice = Counter()
        let delivered = Counter()  // every member cancels: no completion
        await onThread(stackSize: 1 << 20) {
            for round in 0..<300 {
                let started = (0..<8).map { _ in Counter() }
                let heard = (0..<8).map { _ in Counter() }
                let members = (0..<8).map { index in
                    Promise<Int, Never> { resolver in
                        started[index].increment()
                        resolver.onCancel { _ in heard[index].increment() }
                        DispatchQueue.global().async { resolver.cancel() }
                    }
                }
                // A race starts every member at once; the limited `when` starts them as others
                // end.
                let combined =
                    round.isMultiple(of: 2)
                    ? race(members) : when(fulfilled: members, concurrently: 2).map { $0[0] }
                let handle = combined.run { _ in delivered.increment() }
                usleep(UInt32.random(in: 0...50))
                handle.cancel()
                guard eventually({ zip(started, heard).allSatisfy { $0.value == $1.value } }) else {
                    unheard.increment()
                    return
                }
                if !(started.allSatisfy { $0.value <= 1 } && started[0].value == 1) {
                    startedTwice.increment()
                }
            }
        }
        #expect(unheard.value == 0, "a started member that did not hear its cancel handler")
        #expect(startedTwice.value == 0, "a member started twice, or the first never")
        #expect(delivered.value == 0, "a completion, though every member cancels")
    }

    @Test func everyRunEndsOnceAndEveryMemberEnsuresOnceUnderRandomCancels() async {
        let wrong = Counter()
        let rounds = Rounds()
        await onThread(stackSize: 1 << 20) {
            for round in 0..<1_000 where rounds.goOn {
                let ensured = (0..<16).map { _ in Counter() }
                let delivered = Counter()
                let members = (0..<16).map { index in
                    Promise<Int, Never> { resolver in
                        DispatchQueue.global().async { resolver.fulfill(index) }
                    }.ensure { ensured[index].increment() }
                }
                let handle = when(fulfilled: members).run { _ in delivered.increment() }
                if round.isMultiple(of: 2) {
                    usleep(UInt32.random(in: 0...50))
                    handle.cancel()
                }
                let ensuredOnce =
                    rounds.waited(eventually { ensured.allSatisfy { $0.value > 0 } })
                    && ensured.allSatisfy { $0.value == 1 }
                // A cancel that took effect: nothing delivered; else the outcome, once.
                let deliveredRight =
                    handle.isCancelled
                    ? delivered.value == 0 : rounds.waited(eventually { delivered.value == 1 })
                if !ensuredOnce || !deliveredRight { wrong.increment() }
            }
        }
        #expect(wrong.value == 0, "rounds with an ensure not run once, or a wrong delivery")
        #expect(rounds.goOn, "a round did not end in time")
    }
}

extension CombiningConcurrency {
    /// Members end at once, on another thread while their operation runs, or later: racing the
    /// combination as it decides whether the next member can run on the same handle.
    @Test func membersEndingAtOnceOrNotKeepTheirOrder() async {
        let wrong = Counter()
        let rounds = Rounds()
        await onThread(stackSize: 1 << 20) {
            for round in 0..<1_000 where rounds.goOn {
                let ensured = Counter()
                let members = (0..<16).map { index in
                    Promise<Int, Never> { resolver in
                        switch (index + round) % 3 {
                        case 0: resolver.fulfill(index)
                        case 1:
                            DispatchQueue.global().async { resolver.fulfill(index) }
                            usleep(UInt32.random(in: 0...20))
                        default: DispatchQueue.global().async { resolver.fulfill(index) }
                        }
                    }.ensure { ensured.increment() }
                }
                let combined = value(of: when(fulfilled: members))
                rounds.waited(combined != nil)
                let ordered = combined == Array(0..<16)
                if !ordered || ensured.value != 16 { wrong.increment() }
            }
        }
        #expect(wrong.value == 0, "rounds out of order, or with an ensure not run")
        #expect(rounds.goOn, "a round did not end in time")
    }
}

@Suite struct CombiningStackAndMemory {
    @Test func aHundredThousandMembersThatResolveAtOnceJoinOnASmallStack() async {
        let delivered = Delivery<Result<Int, Never>>()
        await onThread(stackSize: smallStack) {
            let members = (0..<100_000).map { value in Guarantee { $0.fulfill(value) } }
            when(fulfilled: members).map { $0.count }.run { delivered.send($0) }
        }
        #expect(delivered.all == [.success(100_000)])
    }

    static func loop(_ n: Int) -> Guarantee<Int> {
        when(fulfilled: Guarantee(value: n), Guarantee { $0.fulfill(1) })
            .then { pair in pair.0 == 0 ? .value(0) : loop(pair.0 - pair.1) }
    }

    @Test func aLoopWhoseEveryStepIsACombinationRunsOnASmallStack() async {
        let delivered = Delivery<Result<Int, Never>>()
        await onThread(stackSize: smallStack) { Self.loop(10_000).run { delivered.send($0) } }
        #expect(delivered.all == [.success(0)])
    }

    @Test func nothingTheMembersCapturedStaysAliveAfterTheRun() {
        let witness = WeakReference<Memory.Witness>()
        let members = Members()
        do {
            let captured = Memory.Witness()
            witness.value = captured
            let settles = when(fulfilled: [later(1).map { _ in captured }, later(captured)])
            _ = outcome(of: settles)
            let cancelled = when(fulfilled: members.promises.map { $0.map { _ in captured } })
                .run { _ in }
            _ = members.resolver(0)
            cancelled.cancel()
        }
        #expect(eventually { witness.value == nil })
    }

    /// Whether the combination `combine` makes of a member that never answers lets go of what
    /// the member captured once `end` has ended its run, while the member's resolver, which
    /// reports to the combination, is still kept (as a cancelled `DispatchWorkItem` keeps its
    /// block until its deadline).
    func letsGoOfItsMembers<Value, Failure>(
        _ combine: (Promise<Memory.Witness, TestError>, Memory.Witness) -> Promise<Value, Failure>,
        end: (RunHandle) -> Void = { _ in }
    ) -> Bool {
        let witness = WeakReference<Memory.Witness>()
        let kept = Delivery<Resolver<Memory.Witness, TestError>>()
        let ended = Delivery<Void>()
        do {
            let captured = Memory.Witness()
            witness.value = captured
            let unanswered = Promise<Memory.Witness, TestError> { resolver in
                resolver.onCancel { _ in _ = captured }
                kept.send(resolver)
            }
            end(combine(unanswered, captured).ensure { ended.send(()) }.run { _ in })
        }
        #expect(ended.wait() != nil)
        #expect(kept.all.count == 1)
        return eventually { witness.value == nil }
    }

    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test
    func aCombinationThatEndedLetsGoOfItsMembersThoughOneKeepsItsResolver() {
        let other = Promise<Memory.Witness, TestError>(value: Memory.Witness())
        let failure = Promise<Memory.Witness, TestError>(error: TestError("failed"))
        #expect(letsGoOfItsMembers { unanswered, _ in race([unanswered, other]) })
        #expect(letsGoOfItsMembers { unanswered, _ in when(fulfilled: [unanswered, failure]) })
        #expect(letsGoOfItsMembers { unanswered, _ in race(fulfilled: [unanswered, other]) })
        let clock = ManualClock()
        #expect(
            letsGoOfItsMembers(
                { unanswered, _ in
                    unanswered.timeout(.seconds(1), orFailWith: TestError("slow"), clock: clock)
                }, end: { _ in clock.advance(by: .seconds(1)) }))
        // Cancelled, with the outcome of a member that ended.
        #expect(
            letsGoOfItsMembers(
                { unanswered, captured in when(resolved: [Promise(value: captured), unanswered]) },
                end: { $0.cancel() }))
        // Stopped by its signal, with the outcome of a member that ended.
        let stop = Promise<Void, Never>(value: ()).delay(.milliseconds(10), clock: clock)
        #expect(
            letsGoOfItsMembers(
                { unanswered, captured in
                    when(resolved: [Promise(value: captured), unanswered], until: stop)
                }, end: { _ in clock.advance(by: .milliseconds(10)) }))
    }
}
