import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A second review of 76058c3 + 6adbae4 (where a timeout's or combination's steps go on).
// Where a run goes on when a user's resolver, or the library's own (a timeout's, a combination's,
// a shared promise's, `ignoringCancel()`'s), reports before its operation returned: a second
// review's tests of the fix that keeps work that starts with `on(queue)` on its queue.

/// A user's resolver never sends a run to a queue; the library's resolvers carry the queue their
/// work ended on (`Resolver.settle`).
@Suite struct ResolversAndQueues {
    /// How an operation that a user's step on w resolves before it returns is wrapped.
    enum Wrap: String, CaseIterable, Sendable {
        case alone, whenOfIt, whenOfItAndAValue, raceOfIt, whenOfItThenMapped
    }

    static func wrap(_ operation: Promise<Int, TestError>, _ wrap: Wrap) -> Promise<Int, TestError>
    {
        switch wrap {
        case .alone: operation
        case .whenOfIt: when(fulfilled: [operation]).map { $0[0] }
        case .whenOfItAndAValue:
            when(fulfilled: [Promise(value: 2), operation]).map { $0[1] }
        case .raceOfIt: race([operation])
        case .whenOfItThenMapped: when(fulfilled: [operation.map { $0 }]).map { $0[0] }
        }
    }

    /// A user's step on a serial queue that resolves an operation (alone, or a combination's
    /// member) before it returns, then waits for the steps after it: they run on the thread that
    /// called the operation, not in a later block of the queue (a deadlock).
    @Test(arguments: Wrap.allCases)
    func aStepOnASerialQueueResolvesAMemberAndWaitsForTheStepsAfter(wrap: Wrap) {
        let queues = NamedQueues()
        let w = queues.make("w")
        let after = DispatchSemaphore(value: 0)
        let waited = Delivery<Bool>()
        let operation: Promise<Int, TestError> = operationResolvedByAStep(on: w) {
            waited.send(after.wait(timeout: .now() + timeout) == .success)
        }
        let place = Delivery<String>()
        let returned = Counter()
        Self.wrap(operation, wrap).map { _ in
            place.send(queues.current + (returned.value == 0 ? ", inside run()" : ""))
            after.signal()
        }.run { _ in }
        returned.increment()
        #expect(waited.wait() == true, "the step on w waited in vain for the steps after")
        #expect(place.wait() == "none, inside run()")
    }

    /// Work resolved so (alone, or a combination of it) settles at once, without waiting: a
    /// timeout of zero lets it win.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test(arguments: Wrap.allCases)
    func aTimeoutOfZeroOfACombinationOfAnOperationResolvedOnAQueueBeforeItReturned(wrap: Wrap) {
        let queues = NamedQueues()
        let w = queues.make("w")
        let runReturned = DispatchSemaphore(value: 0)
        let operation: Promise<Int, TestError> = operationResolvedByAStep(on: w) {
            _ = runReturned.wait(timeout: .now() + timeout)
        }
        let delivery = Delivery<Result<Int, TestError>>()
        Self.wrap(operation, wrap).timeout(.zero, orFailWith: TestError("slow"))
            .run { delivery.send($0) }
        runReturned.signal()
        #expect(delivery.wait() == .success(1))
    }

    /// A run cancelled from another thread after its operation resolved but before it returned:
    /// resolved from another thread, it stops as the operation returns (the step after it does
    /// not run); resolved on the operation's own thread, the step may run (`RunHandle`: a cancel
    /// from another thread stops the run at its next check); neither delivers.
    @Test(arguments: [false, true])
    func aCancelBetweenAResolveOnTheOperationsOwnThreadAndItsReturn(otherThread: Bool) {
        var seen: [String: Int] = [:]
        for _ in 0..<20 {
            let log = Log()
            let done = Delivery<Void>()
            let operation = Promise<Int, Never> { r in
                let handle = RunHandle(r.run)
                let resolved = DispatchSemaphore(value: 0)
                let cancelled = DispatchSemaphore(value: 0)
                if otherThread {
                    // Resolved by another thread (not on a queue of the library's), then cancelled.
                    DispatchQueue.global().async {
                        r(.success(1))
                        resolved.signal()
                    }
                    _ = resolved.wait(timeout: .now() + timeout)
                } else {
                    r(.success(1))  // on the operation's own thread
                }
                DispatchQueue.global().async {
                    handle.cancel()
                    cancelled.signal()
                }
                _ = cancelled.wait(timeout: .now() + timeout)
            }
            Guarantee(value: ()).then { _ in operation }
                .map { value -> Int in
                    log.record("the step after ran")
                    return value
                }
                .ensure { done.send(()) }
                .run(some: { _ in log.record("delivered") })
            #expect(done.wait() != nil)
            seen[log.all.joined(separator: ", "), default: 0] += 1
        }
        let allowed: Set = otherThread ? [""] : ["", "the step after ran"]
        #expect(Set(seen.keys).isSubset(of: allowed), "\(seen)")
    }

    enum Work: String, CaseIterable, Sendable {
        case sharedWorkOnW, ignoringCancelOfWorkOnW
    }
    enum Around: String, CaseIterable, Sendable { case timeout, when }

    /// README: "work that starts so [with .on(queue)] keeps its queue through a timeout or a
    /// combination", behind `share()` or `ignoringCancel()` too (on the caller's thread in about a
    /// third of 300 rounds, before their resolvers carried the queue).
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test(arguments: Work.allCases, Around.allCases)
    func whereTheStepsAfterGoOn(work kind: Work, around: Around) {
        let queues = NamedQueues()
        let w = queues.make("w")
        var seen: [String: Int] = [:]
        for _ in 0..<300 {
            let place = Delivery<String>()
            let work: Promise<Int, TestError> =
                switch kind {
                case .sharedWorkOnW:
                    Guarantee(value: 1).on(w).setFailureType(to: TestError.self).share()
                case .ignoringCancelOfWorkOnW:
                    Guarantee(value: 1).on(w).setFailureType(to: TestError.self).ignoringCancel()
                }
            let wrapped: Promise<Int, TestError> =
                switch around {
                case .timeout: work.timeout(.seconds(60), orFailWith: TestError("slow"))
                case .when: when(fulfilled: [work]).map { $0[0] }
                }
            wrapped.map { _ in place.send(queues.current) }.run(some: { _ in }, none: { _ in })
            let got = place.wait() ?? "no outcome"
            seen[got, default: 0] += 1
            if got != "w" { break }
        }
        #expect(seen == ["w": 300], "\(kind.rawValue) in a \(around.rawValue): \(seen)")
    }

    typealias Shape = WhereARunGoesOnAfterAnOperationResolvedBeforeItReturned.Shape

    /// The new `cancelledHere` line of `operationReturned`: a run cancelled by another thread after
    /// its operation resolved (a user's resolver, no queue) but before it returned drops the
    /// outcome of the right type (debug builds check it) in every shape, releases it, runs its
    /// ensure steps and delivers nothing.
    @Test(arguments: Shape.allCases, [false, true])
    func aRunCancelledAfterItsOperationResolvedLetsGoOfTheOutcome(shape: Shape, carried: Bool) {
        let queues = NamedQueues()
        let w = queues.make("w")
        for _ in 0..<20 {
            let weak = WeakReference<QueuesTracked>()
            let log = Log()
            let operation = Promise<QueuesTracked, Never> { r in
                let resolved = DispatchSemaphore(value: 0)
                Guarantee(value: ()).on(w).map { _ in
                    let tracked = QueuesTracked()
                    weak.value = tracked
                    r.resolve(.success(tracked), carriedOnBy: carried ? w : nil)
                    RunHandle(r.run).cancel()
                    resolved.signal()
                }.run(some: { _ in })
                _ = resolved.wait(timeout: .now() + timeout)
            }
            let promise: Guarantee<QueuesTracked> =
                switch shape {
                case .operationAlone: operation
                case .sourceAlone: Promise(last: operation.last)
                case .sourceThenSteps:
                    operation.map { $0 }.ensure { log.record("ensure") }
                case .thenReturningAnOperation:
                    Guarantee(value: ()).then { _ in operation }.map { $0 }
                        .ensure { log.record("ensure") }
                case .enteredChainEndingWithTheSource:
                    Guarantee(value: ()).then { _ in Promise(last: operation.last) }.map { $0 }
                        .ensure { log.record("ensure") }
                }
            let handle = promise.run(some: { _ in log.record("delivered") })
            #expect(
                eventually {
                    handle.run.locked { if case .cancelled = $0.state { true } else { false } }
                })
            #expect(eventually { weak.value == nil }, "the outcome was let go of")
            w.sync {}
            let expected: [String] =
                switch shape {
                case .operationAlone, .sourceAlone: []
                default: ["ensure"]
                }
            #expect(log.all == expected)
            if log.all != expected { break }
        }
    }
}
