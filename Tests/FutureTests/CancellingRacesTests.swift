import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Spins for `microseconds`: a synchronous step that takes a while, without yielding the thread.
func spin(microseconds: Int) {
    let end = DispatchTime.now().uptimeNanoseconds + UInt64(microseconds) * 1_000
    while DispatchTime.now().uptimeNanoseconds < end {}
}

/// Spins until `condition` holds, for at most `limit`; returns whether it held. For a thread that
/// must react within microseconds, which a thread woken from a wait does not.
@discardableResult func spin(
    until condition: () -> Bool, for limit: DispatchTimeInterval = timeout
) -> Bool {
    let deadline = DispatchTime.now() + limit
    while !condition() {
        guard DispatchTime.now() < deadline else { return false }
        sched_yield()  // to a thread that waits for this core, on a loaded machine
    }
    return true
}

/// One run whose cancellation is checked: whether `cancel()` has returned, and the operations
/// that started after that as if nothing had happened (each one a broken promise of
/// ``RunHandle/cancel()``).
final class CancelCheck: @unchecked Sendable {
    private let lock = TestLock()
    private var cancelReturned = false, workStarted = false, memberStarting = false
    private var held: [Resolver<Int, TestError>] = []
    private let holds: Bool
    /// The run, for a step to cancel.
    private var run: RunHandle?
    /// Operations started after `cancel()` returned, their run not cancelled.
    let late = Counter()
    /// Every operation started and not yet settled, for the test to wait for.
    let operating = DispatchGroup()
    /// Sent by the run's last `ensure`: the thread that drove the run is done with it.
    let ended = Delivery<Void>()

    /// With `holds`, operations settle only when the test calls `settleHeldOperations()`;
    /// otherwise from another thread, at once.
    init(holds: Bool = false) { self.holds = holds }

    var handle: RunHandle? {
        get { lock.withLock { run } }
        set { lock.withLock { run = newValue } }
    }

    /// Called once `cancel()` has returned, on the thread that called it.
    func cancelHasReturned() { lock.withLock { cancelReturned = true } }

    /// Called on the thread that runs the work, just before it starts it.
    func workStarts() { lock.withLock { workStarted = true } }

    /// Spins until the work starts, so that a cancel lands while it does. Call it on a thread
    /// of one's own: Dispatch counts a thread of its pool that spins as busy, and may start no
    /// other.
    @discardableResult func waitForTheWork() -> Bool {
        spin(until: { lock.withLock { workStarted } })
    }

    /// Spins until a member announces it is starting (see `member`), or the run has ended
    /// without starting it.
    @discardableResult func waitForTheMemberToStart() -> Bool {
        spin(until: { lock.withLock { memberStarting } || !ended.all.isEmpty })
    }

    /// An operation that checks that it does not start after `cancel()` returned, and settles,
    /// succeeding with `value` or failing.
    func operation(_ value: Int, fails: Bool = false) -> Promise<Int, TestError> {
        Promise { resolver in
            self.operating.enter()
            // One that began just before the cancel may get here after it returned, but then
            // its run is cancelled already.
            if self.lock.withLock({ self.cancelReturned }), !resolver.isCancelled {
                self.late.increment()
            }
            if self.holds { return self.lock.withLock { self.held.append(resolver) } }
            DispatchQueue.global().async {
                fails ? resolver.reject(TestError("\(value)")) : resolver.fulfill(value)
                self.operating.leave()
            }
        }
    }

    /// Settles the operations that wait for it (see `init(holds:)`).
    func settleHeldOperations() {
        for resolver in lock.withLock({ held }) {
            resolver.fulfill(0)
            operating.leave()
        }
    }

    /// A member: a synchronous step, then the operation. The step takes a random few
    /// microseconds, so that a cancel from another thread often lands while the member starts;
    /// or, if `announces`, it announces that the member is starting and waits (a while at
    /// most) for `cancel()` to return, so that the cancel lands just then.
    func member(
        _ value: Int, fails: Bool = false, announces: Bool = false
    ) -> Promise<Int, TestError> {
        Promise<Void, TestError>(value: ()).map {
            guard announces else { return spin(microseconds: Int.random(in: 10...50)) }
            self.lock.withLock { self.memberStarting = true }
            spin(until: { self.lock.withLock { self.cancelReturned } }, for: .milliseconds(100))
        }.then { self.operation(value, fails: fails) }
    }

    /// A member whose first step cancels the run, then starts the operation.
    func cancellingMember(_ value: Int, fails: Bool = false) -> Promise<Int, TestError> {
        Promise<Void, TestError>(value: ()).map {
            self.handle?.cancel()
            self.cancelHasReturned()
        }.then { self.operation(value, fails: fails) }
    }

    /// Waits until the run has ended and every operation it started has settled.
    func waitForTheEnd() -> Bool { ended.wait() != nil && waitForTheOperations() }

    /// Waits until every operation started has settled.
    func waitForTheOperations() -> Bool { operating.wait(timeout: .now() + timeout) == .success }
}

/// Stress tests: CI runs this suite again under ThreadSanitizer.
@Suite(.serialized) struct CancellingRaces {
    /// Work whose operations must not start once its run is cancelled.
    enum Work: String, CaseIterable, Sendable {
        case whenFulfilledTwoAtATime, whenFulfilled, whenResolved, race, raceFulfilled, any
        case timeout, retry, delay, share

        /// How many members it has (work that is no combination has one).
        var count: Int {
            switch self {
            case .whenFulfilledTwoAtATime: 6
            case .whenFulfilled, .whenResolved, .race, .raceFulfilled, .any: 4
            case .timeout, .retry, .delay, .share: 1
            }
        }

        /// The work, with members `member(index)`.
        func promise(_ member: (Int) -> Promise<Int, TestError>) -> Promise<Int, TestError> {
            let members = (0..<count).map(member)
            let firstError = { @Sendable (error: AllPromisesFailedError<TestError>) in
                error.errors[0]
            }
            switch self {
            case .whenFulfilledTwoAtATime:
                return when(fulfilled: members, concurrently: 2).map { $0.count }
            case .whenFulfilled: return when(fulfilled: members).map { $0.count }
            case .whenResolved:
                return when(resolved: members).map { $0.count }.setFailureType(to: TestError.self)
            case .race: return Future.race(members)
            case .raceFulfilled: return Future.race(fulfilled: members).mapError(firstError)
            case .any: return Future.any(members).map { $0.count }.mapError(firstError)
            case .timeout:
                return members[0].timeout(.seconds(3600), orFailWith: TestError("late"))
            case .retry: return members[0].retry(4)  // its member fails
            case .delay:
                return Promise<Void, TestError>(value: ())
                    .delay(.microseconds(Int.random(in: 0...20))).then { members[0] }
            case .share: return members[0].share()  // a new share, this run its only joiner
            }
        }
    }

    /// The rounds of every case of `noOperationStartsAfterCancelReturned`, which run one after
    /// another: once one case stalls, the others stop at once too, instead of a minute each.
    static let stalls = Rounds()

    /// `RunHandle.cancel()` promises that no later step starts once it has returned. The work
    /// starts on a global queue while another thread cancels its run, in a thousand rounds: a
    /// quarter of them just as a random member starts (it waits for the cancel), the others at
    /// a random moment, as the work starts or before. No operation may start after `cancel()`
    /// returned, unless it began just before and its run is cancelled already (as when a
    /// combination claimed a member as the cancel came, or the only joiner of a `share()` left).
    @Test(arguments: Work.allCases)
    func noOperationStartsAfterCancelReturned(work: Work) async {
        let late = Counter()
        let rounds = Self.stalls
        await onThread(stackSize: 1 << 20) {  // a thread of its own, to spin on
            for index in 0..<1_000 where rounds.goOn {
                let check = CancelCheck()
                let announcing = index.isMultiple(of: 4) ? Int.random(in: 0..<work.count) : nil
                let handle = on(.global()).map { check.workStarts() }
                    .flatMap {
                        work.promise {
                            check.member($0, fails: work == .retry, announces: $0 == announcing)
                        }
                    }
                    .ensure { check.ended.send(()) }.run { _ in }
                if announcing != nil {
                    rounds.waited(check.waitForTheMemberToStart())
                } else {
                    // Else before the work starts.
                    if index.isMultiple(of: 2) { rounds.waited(check.waitForTheWork()) }
                    spin(microseconds: Int.random(in: 0...40))
                }
                handle.cancel()
                check.cancelHasReturned()
                rounds.waited(check.waitForTheEnd())
                for _ in 0..<check.late.value { late.increment() }
            }
        }
        #expect(rounds.goOn, "rounds that did not end, in this case or an earlier one")
        #expect(late.value == 0, "operations started after cancel() returned")
    }

    /// The same without a race: the first step of member 1 of a combination (of the only
    /// member of the rest: the work of the `share()`, of the `timeout`…) cancels the run, and
    /// after that `cancel()` has returned no operation may start: the member's own operation is
    /// a later step of the cancelled run.
    @Test(arguments: Work.allCases)
    func noOperationStartsAfterAStepCancelledTheRun(work: Work) {
        let check = CancelCheck(holds: true)
        let second = min(1, work.count - 1)
        let failing = work == .retry
        let (gate, opened) = Promise<Void, TestError>.pending()
        let promise = gate.then {
            work.promise {
                $0 == second
                    ? check.cancellingMember($0, fails: failing) : check.member($0, fails: failing)
            }
        }
        check.handle = promise.ensure { check.ended.send(()) }.run { _ in }
        opened.fulfill()  // starts the work, now that its step can cancel it
        #expect(check.ended.wait() != nil)
        #expect(check.late.value == 0, "operations started after cancel() returned")
        #expect(check.handle?.isCancelled == true)
        check.settleHeldOperations()
        #expect(check.waitForTheOperations())
    }
    /// A step of a shared promise's work that cancels the one run waiting for it stops the work
    /// before its next step, even as another thread's cancel of that run, which came first, is
    /// still on its way down to the work. Found by the model checker (seed 49).
    @Test func aStepOfSharedWorkThatCancelsItsRunAsAnotherThreadDoesStopsTheWork() {
        let canceller = DispatchQueue(label: "canceller")
        let rounds = Rounds()
        for round in 1...2_000 where rounds.goOn {
            let h = MCHarness(pendings: 0, token: false)
            let armed = Counter()
            let cancelled = DispatchSemaphore(value: 0)
            canceller.async {
                rounds.waited(spin(until: { armed.value > 0 }))
                h.cancelRun(by: "thread")
                cancelled.signal()
            }
            let cancelling = h.effect(2, .cancelRun)
            let work = h.op(1, .later)
                .map { value -> Int in
                    armed.increment()  // the other thread's cancel begins about now
                    spin(microseconds: .random(in: 0...4))
                    return cancelling(value)
                }
                .map(h.map(3))
            h.start(work.share(cancelsWhenAbandoned: true).ensure(h.ensure(0)))
            h.resolve(1, .value(1))
            #expect(rounds.waited(cancelled.wait(timeout: .now() + timeout) == .success))
            #expect(rounds.waited(mcEventually { h.log.contains("ensure 0") }))
            h.finish()
            if !h.late.isEmpty {
                Issue.record("round \(round): went on after cancel() returned: \(h.late)")
                return
            }
        }
    }

    /// A cancelled `when` holds its run's end until every member run still going as the cancel
    /// came has stopped (it counts them down, `Join.State.holding(going:)`): its `ensure` step
    /// runs after every member's steps and `ensure` steps, and always comes. Members end at once
    /// or after a hop, each spinning in a step, while this thread cancels, with and without a
    /// limit. (A count that released the end one member run early failed here, with 379 member
    /// steps after the end.)
    @Test func aCancelledWhenEndsOnceEveryMemberRunHasStopped() async {
        let early = Counter()
        let rounds = Rounds()
        await onThread(stackSize: 1 << 20) {  // a thread of its own, to spin on
            for round in 0..<1_000 where rounds.goOn {
                let ended = Counter()
                let stepping = Counter()
                let check = { @Sendable in if ended.value > 0 { early.increment() } }
                let members = (0..<8).map { index -> Guarantee<Int> in
                    let member =
                        index.isMultiple(of: 3)
                        ? Guarantee(value: index).map { value -> Int in
                            check()
                            return value
                        }
                        : on(.global()).map { () -> Int in
                            check()
                            stepping.increment()
                            spin(microseconds: Int.random(in: 0...200))
                            check()
                            return index
                        }
                    return member.ensure { check() }
                }
                let done = Delivery<Void>()
                let handle = when(fulfilled: members, concurrently: round.isMultiple(of: 2) ? 3 : 8)
                    .ensure {
                        ended.increment()
                        done.send(())
                    }
                    .run { _ in }
                rounds.waited(spin(until: { stepping.value > 0 }))
                spin(microseconds: Int.random(in: 0...100))
                handle.cancel()
                rounds.waited(done.wait() != nil)
            }
        }
        #expect(early.value == 0, "member steps after the when ended")
        #expect(rounds.goOn, "rounds that did not end")
    }

    /// A cancelled combination ends once the members it calls itself (operations alone, which
    /// run in no run of their own) have returned, as it does for its member runs: its `ensure`
    /// step comes after every member operation called, even one called on a thread other than
    /// the combination's run's. Each member of a `when(fulfilled:concurrently: 1)` settles on a
    /// global queue, whose thread then calls the next one while the combination's run waits,
    /// and this thread cancels the run: in half the rounds once a member announced that it is
    /// in its operation (it spins there until `cancel()` has returned, a while at most), else at
    /// a random moment, which may land as the next member is claimed, before its call.
    @Test func aCancelledWhenEndsOnceTheOperationsItCalledHaveReturned() async {
        let early = Counter()
        let rounds = Rounds()
        await onThread(stackSize: 1 << 20) {  // a thread of its own, to spin on
            for round in 0..<500 where rounds.goOn {
                let ended = Counter()
                let started = Counter()
                let cancelReturned = Counter()
                let announcing = round.isMultiple(of: 2) ? Int.random(in: 1..<4) : nil
                let members = (0..<4).map { index in
                    Guarantee<Int> { resolver in
                        if ended.value > 0 { early.increment() }
                        started.increment()
                        if index == announcing {
                            spin(until: { cancelReturned.value > 0 }, for: .milliseconds(100))
                        } else {
                            spin(microseconds: Int.random(in: 0...20))
                        }
                        if ended.value > 0 { early.increment() }
                        DispatchQueue.global().async { resolver.fulfill(index) }
                    }
                }
                let done = Delivery<Void>()
                let handle = when(fulfilled: members, concurrently: 1)
                    .ensure {
                        ended.increment()
                        done.send(())
                    }
                    .run { _ in }
                rounds.waited(spin(until: { started.value > (announcing ?? 0) }))
                if announcing == nil { spin(microseconds: Int.random(in: 0...60)) }
                handle.cancel()
                cancelReturned.increment()
                rounds.waited(done.wait() != nil)
            }
        }
        #expect(early.value == 0, "member operations that ran after the when ended")
        #expect(rounds.goOn, "rounds that did not end")
    }

    /// The same as the combination settles: a member's failure settles a `when` while the launch
    /// loop, on another thread, is in a member's operation, and the run is cancelled before the
    /// failure reaches it (as the failure cancels that member, whose cancel handler waits for
    /// `cancel()` to return, a while at most). The combination closed, but its launch loop still
    /// runs, and the run's end waits for it.
    @Test func aWhenCancelledAsItSettlesEndsOnceTheOperationItCalledHasReturned() async {
        let early = Counter()
        let rounds = Rounds()
        await onThread(stackSize: 1 << 20) {  // a thread of its own, to spin on
            for _ in 0..<200 where rounds.goOn {
                let ended = Counter()
                let calling = Counter()  // member 2 is in its operation
                let settling = Counter()  // member 1's failure cancels member 2
                let cancelReturned = Counter()
                let waitForTheCancel = { @Sendable in
                    _ = spin(until: { cancelReturned.value > 0 }, for: .milliseconds(100))
                }
                let first = Delivery<Resolver<Int, TestError>>()
                let failing = Delivery<Resolver<Int, TestError>>()
                let members = [
                    Promise<Int, TestError> { first.send($0) },
                    Promise { failing.send($0) },
                    Promise { resolver in  // called on member 0's thread, by the launch loop
                        resolver.onCancel { _ in
                            settling.increment()
                            waitForTheCancel()
                        }
                        calling.increment()
                        // Until the cancel, however late member 1's failure comes: resolved
                        // first, this member would end before the failure could cancel it.
                        rounds.waited(spin(until: { cancelReturned.value > 0 }))
                        if ended.value > 0 { early.increment() }
                        resolver.fulfill(2)
                    },
                ]
                let done = Delivery<Void>()
                let handle = when(fulfilled: members, concurrently: 2)
                    .ensure {
                        ended.increment()
                        done.send(())
                    }
                    .run { _ in }
                // Once the first launch loop has ended: the next one runs on member 0's thread.
                let zero = first.wait()
                DispatchQueue.global().async { zero?.fulfill(0) }
                rounds.waited(spin(until: { calling.value > 0 }))
                let resolver = failing.wait()
                // A thread of its own: Dispatch may start none while member 2 spins on one of its.
                detachThread { resolver?.reject(TestError("1")) }
                rounds.waited(spin(until: { settling.value > 0 }))
                handle.cancel()
                cancelReturned.increment()
                rounds.waited(done.wait() != nil)
            }
        }
        #expect(early.value == 0, "member operations that ran after the when ended")
        #expect(rounds.goOn, "rounds that did not end")
    }

    /// A combination that settles on another thread as its run is cancelled ends once the
    /// cancel handlers of its waiting members have returned, as for a cancel of the run alone:
    /// member 0's failure settles a `when` on a thread of its own, which calls member 1's cancel
    /// handler; the handler waits for this thread's `cancel()` of the run to return (a while at
    /// most), and the run's `ensure` step must come after it.
    @Test func aWhenThatSettlesAsItIsCancelledEndsAfterItsMembersHandlers() async {
        let early = Counter()
        let rounds = Rounds()
        await onThread(stackSize: 1 << 20) {  // a thread of its own, to spin on
            for _ in 0..<50 where rounds.goOn {
                let ended = Counter()
                let inHandler = Counter()
                let cancelReturned = Counter()
                let failing = Delivery<Resolver<Int, TestError>>()
                let waiting = Delivery<Resolver<Int, TestError>>()  // keeps member 1's resolver
                let members = [
                    Promise<Int, TestError> { failing.send($0) },
                    Promise { resolver in
                        waiting.send(resolver)
                        resolver.onCancel { _ in
                            inHandler.increment()
                            _ = spin(until: { cancelReturned.value > 0 }, for: .milliseconds(100))
                            if ended.value > 0 { early.increment() }
                        }
                    },
                ]
                let done = Delivery<Void>()
                let handle = when(fulfilled: members)
                    .ensure {
                        ended.increment()
                        done.send(())
                    }
                    .run { _ in }
                let resolver = failing.wait()
                detachThread { resolver?.reject(TestError("0")) }
                rounds.waited(spin(until: { inHandler.value > 0 }))
                handle.cancel()
                cancelReturned.increment()
                rounds.waited(done.wait() != nil)
            }
        }
        #expect(early.value == 0, "member cancel handlers that ran after the when ended")
        #expect(rounds.goOn, "rounds that did not end")
    }

    /// A combination's member that cancels itself (its resolver's `cancel()`) and drops out of a
    /// race that goes on has its cancel handlers called on that resolver's thread; when the
    /// race's run is cancelled meanwhile, the run ends once those handlers have returned, as an
    /// operation run alone that cancels itself does (its `ensure` steps run once the handlers
    /// have returned, `RunHandle`). Member 0 cancels itself on a thread of its own while the
    /// launch loop, on this thread, is in member 1's operation (so that thread does not run the
    /// loop itself); its handler waits a while for the run's end, which must not come, and this
    /// thread cancels the run as the handler runs.
    @Test func aRaceCancelledAsAMemberCancelsItselfEndsAfterThatMembersHandlers() async {
        let early = Counter()
        let rounds = Rounds()
        await onThread(stackSize: 1 << 20) {  // a thread of its own, to spin on
            for _ in 0..<25 where rounds.goOn {
                let ended = Counter()
                let inHandler = Counter()
                let handlerReturned = Counter()
                let cancelling = Delivery<Resolver<Int, TestError>>()
                let waiting = Delivery<Resolver<Int, TestError>>()  // keeps member 1's resolver
                let members = [
                    Promise<Int, TestError> { resolver in
                        resolver.onCancel { _ in
                            inHandler.increment()
                            _ = spin(until: { ended.value > 0 }, for: .milliseconds(20))
                            if ended.value > 0 { early.increment() }
                            handlerReturned.increment()
                        }
                        cancelling.send(resolver)
                    },
                    Promise { resolver in  // called by the launch loop, on this thread
                        waiting.send(resolver)
                        _ = spin(until: { inHandler.value > 0 }, for: .seconds(1))
                    },
                ]
                detachThread { cancelling.wait()?.cancel() }
                let done = Delivery<Void>()
                let handle = race(members)
                    .ensure {
                        ended.increment()
                        done.send(())
                    }
                    .run { _ in }
                rounds.waited(spin(until: { inHandler.value > 0 }))
                handle.cancel()
                rounds.waited(done.wait() != nil)
                rounds.waited(spin(until: { handlerReturned.value > 0 }))
            }
        }
        #expect(early.value == 0, "member cancel handlers that ran after the race ended")
        #expect(rounds.goOn, "rounds that did not end")
    }
}
