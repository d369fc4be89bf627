import Dispatch
import Testing

@testable import Future

/// Documented behaviour of the API's corners, as a PromiseKit user would try them, that no other
/// test pinned: each test names the doc sentence it holds the library to.
@Suite struct APIAsDocumented {
    /// `ensure`: "Runs `body` when the chain gets here": an `ensure` before `catch` runs before the
    /// error handler, one after it (PromiseKit's `finally`, README's table) after it.
    @Test func anEnsureRunsWhereItStandsBeforeOrAfterCatch() {
        let log = Log()
        let chain = Promise<Int, TestError>(error: TestError("x"))
            .ensure { log.record("ensure before") }
            .done { _ in log.record("done") }
            .catch { _ in log.record("catch") }
            .ensure { log.record("ensure after") }
        #expect(outcome(of: chain) != nil)
        #expect(log.all == ["ensure before", "catch", "ensure after"])
    }

    /// Sharing.swift: "The first run starts the work, runs that come while it is under way wait":
    /// the same shared promise twice in one `when` runs its work once, and both members get its
    /// value, in input order.
    @Test func aSharedPromiseTwiceInOneWhenRunsItsWorkOnce() {
        let calls = Counter()
        let (gate, open) = Guarantee<Void>.pending()
        let shared = gate.map { calls.increment() }.share()
        let result = Delivery<Result<[Int], Never>>()
        when(fulfilled: [shared, shared, shared]).run { result.send($0) }
        open.fulfill(())
        #expect(result.wait() == .success([1, 1, 1]))
        #expect(calls.value == 1)
    }

    /// `when(fulfilled:concurrently:)`, which `thenMap` is the step form of: "the first failure
    /// decides ... the others never start". With a limit of 1, the elements after the one that
    /// failed are not made into work.
    @Test func thenMapStartsNoElementAfterTheFailureUnderALimit() {
        let started = Log()
        let mapped = Promise<[Int], TestError>(value: [1, 2, 3, 4]).thenMap(concurrently: 1) {
            element -> Promise<Int, TestError> in
            Promise { resolver in
                started.record("\(element)")
                element == 2 ? resolver.reject(TestError("2")) : resolver.fulfill(element)
            }
        }
        #expect(outcome(of: mapped) == .failure(TestError("2")))
        #expect(started.all == ["1", "2"])
        let empty = Promise<[Int], TestError>(value: []).thenMap {
            Promise<Int, TestError>(value: $0)
        }
        #expect(outcome(of: empty) == .success([]))
    }

    /// Combining.swift's header: every combinator "starts none after it ended, but those that
    /// ignore cancel": a member after one that wins a race at once is never called.
    @Test func aRaceWonAtOnceNeverStartsTheMembersAfterTheWinner() {
        let calls = Counter()
        let loser = Promise<Int, TestError> { resolver in
            calls.increment()
            resolver.fulfill(2)
        }
        #expect(outcome(of: race([Promise(value: 1), loser])) == .success(1))
        #expect(calls.value == 0)
    }

    /// `pending()`: "Its runs wait for the resolver or get its outcome, as a shared promise's do",
    /// and `share()`: "Cancelling a run leaves the others waiting": a pending promise whose only
    /// run was cancelled (by a timeout, here) still delivers the outcome that comes later.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test func aPendingPromiseWhoseOnlyRunTimedOutStillDeliversItsLaterOutcome() {
        let (promise, resolver) = Promise<Int, TestError>.pending()
        let first = Delivery<Result<Int, TestError>>()
        promise.timeout(.milliseconds(10), orFailWith: TestError("slow")).run { first.send($0) }
        #expect(first.wait() == .failure(TestError("slow")))
        resolver.fulfill(4)
        #expect(outcome(of: promise) == .success(4))
    }

    /// `when(fulfilled:)` with promises of different types: "Succeeds with a tuple of the values":
    /// optional values, nested ones too, come back as they went in, through the erasure to `Any`
    /// inside it; so do `any`'s outcomes.
    @Test func aTupleOfOptionalValuesKeepsEveryLevelOfNil() throws {
        let nested: Int?? = .some(nil)
        let both = when(
            fulfilled: Promise<Int?, TestError>(value: nil),
            Promise<Int??, TestError>(value: nested))
        guard case .success(let (plain, twice))? = outcome(of: both) else {
            Issue.record("the tuple did not succeed")
            return
        }
        #expect(plain == nil)
        #expect(twice == nested && twice != nil)
        let outcomes = any(
            Promise<Int??, TestError>(value: nested),
            Guarantee(value: 1).setFailureType(to: TestError.self))
        guard case .success(let (first, _))? = outcome(of: outcomes) else {
            Issue.record("any did not succeed")
            return
        }
        #expect(try first.get() == nested)
    }

    /// ComingFromPromiseKit: a body that lets go of its resolver "ends its run as cancelled at
    /// once, so a `timeout` or `retry` around it never acts (debug builds report where the promise
    /// was made)": one call, one report naming its line, for each.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test func aDroppedResolverUnderRetryOrTimeoutIsCalledAndReportedOnce() {
        _ = reports  // listening from now on
        let calls = Counter()
        let line = #line + 1
        let dropping = Promise<Int, any Error> { _ in calls.increment() }
        let retried = dropping.retry(3).run { _ in Issue.record("nothing can settle it") }
        #expect(retried.isCancelled)
        #expect(calls.value == 1)
        let timed = dropping.timeout(.seconds(60)).run { _ in Issue.record("nothing settles it") }
        #expect(eventually { timed.isCancelled })
        #expect(calls.value == 2)
        #if DEBUG
            #expect(eventually { reports.reports(madeAt: line).count == 2 })
        #endif
    }

    /// Resolver: "`isCancelled`: Whether the run this operation is part of (for a combination's
    /// member, the member) was cancelled before it ended": a member that ended with a value stays
    /// not cancelled though its `when` then failed and cancelled the others.
    @Test func aMemberThatSucceededIsNotCancelledByItsWhensLaterFailure() {
        let kept = Delivery<Resolver<Int, TestError>>()
        let (failing, fail) = Promise<Int, TestError>.pending()
        let member = Promise<Int, TestError> { resolver in
            kept.send(resolver)
            resolver.fulfill(1)
        }
        let result = Delivery<Result<[Int], TestError>>()
        when(fulfilled: [member, failing]).run { result.send($0) }
        fail.reject(TestError("x"))
        #expect(result.wait() == .failure(TestError("x")))
        #expect(kept.wait()?.isCancelled == false)
    }
}
