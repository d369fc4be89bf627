import Dispatch
import Testing

@testable import Future

/// What tokens and bags promise where a run's steps come late or another thread's call is under
/// way (review 6 found both cases failing; the suites named for invalidation tokens run under
/// ThreadSanitizer in CI).
@Suite("Invalidation tokens and bags") @MainActor struct InvalidationTokensAndBags {
    /// `InvalidationToken`: "Each run ties it as the run starts ..., and keeps that tie through
    /// every retry, combination or shared run inside it: a run started before an `invalidate()`
    /// skips it". A member of a combination with a limit starts only as an earlier member ends,
    /// here after the `invalidate()`: the run's first tie, taken then, finds the token invalidated
    /// since the run started.
    @Test func aMemberStartedAfterTheInvalidateInARunStartedBeforeItSkipsItsTiedStep() async {
        let screen = Screen()
        let token = InvalidationToken()
        let (first, answer) = Guarantee<Int>.pending()
        let tiedLater = Guarantee(value: 2).done(on: .main, tiedTo: token) {
            screen.items.append($0)
        }
        let ended = Delivery<Void>()
        when(fulfilled: [first.asVoid(), tiedLater], concurrently: 1)
            .run(some: { _ in ended.send(()) })
        token.invalidate()  // the run started before this, its second member not yet
        answer.fulfill(1)
        #expect(await ended.arrival() != nil)
        #expect(screen.items.isEmpty, "a tied step of a run started before the invalidate ran")
    }

    /// `RunBag.cancelAll()`: "Cancels every run in the bag and empties it." While another
    /// thread's `cancelAll()` (or `invalidate()`) is in the cancel of an earlier run of the bag,
    /// a second `cancelAll()` cancels the later runs too before it returns (it found the bag
    /// emptied, and returned before they were cancelled: one delivered its outcome after).
    @Test nonisolated func aCancelAllThatReturnsHasCancelledEveryRunOfTheBag() {
        let bag = RunBag()
        let held = HeldCancelAll(storingIn: bag)
        let (second, answer) = Guarantee<Int>.pending()
        let delivered = Delivery<Int>()
        let later = second.run(some: delivered.send).store(in: bag)
        #expect(held.start(), "the first cancelAll() did not reach the held handler")
        bag.cancelAll()
        let cancelledOnReturn = later.isCancelled
        answer.fulfill(2)
        #expect(held.finish(), "the first cancelAll() did not return")
        #expect(cancelledOnReturn, "a run of the bag was not cancelled as cancelAll() returned")
        #expect(delivered.all.isEmpty, "a run of the bag delivered after cancelAll() returned")
    }

    /// `InvalidationToken`, as above, for a promise that a step makes after the `invalidate()`.
    @Test func aPromiseAStepMadeAfterTheInvalidateInARunStartedBeforeItSkipsItsTiedStep() async {
        let screen = Screen()
        let token = InvalidationToken()
        let (first, answer) = Guarantee<Int>.pending()
        let ended = Delivery<Void>()
        first.then { value in
            Guarantee(value: value).done(on: .main, tiedTo: token) { screen.items.append($0) }
        }.run(some: { ended.send(()) })
        token.invalidate()  // the run started before this, the step's promise not yet made
        answer.fulfill(1)
        #expect(await ended.arrival() != nil)
        #expect(screen.items.isEmpty, "a tied step of a run started before the invalidate ran")
    }

    /// A run stored while a `cancelAll()` is under way stays in the bag, for the next call.
    @Test nonisolated func aRunStoredWhileCancelAllIsUnderWayStaysForTheNextCall() {
        let bag = RunBag()
        let held = HeldCancelAll(storingIn: bag)
        #expect(held.start(), "the first cancelAll() did not reach the held handler")
        let (waiting, answer) = Guarantee<Int>.pending()
        let stored = waiting.run(some: { _ in }).store(in: bag)
        #expect(held.finish(), "the first cancelAll() did not return")
        #expect(!stored.isCancelled)
        bag.cancelAll()
        #expect(stored.isCancelled)
        answer.fulfill(0)
    }

    /// `InvalidationToken`: "a run started before an `invalidate()` skips it, ... a run started
    /// after does not". An await whose task is already cancelled cancels its run before the run
    /// starts; the run reaches its `ignoringCancel()` promise cancelled and starts the work,
    /// whose tied step ties in that run. The token was invalidated once, long before, and never
    /// again: the step runs. (`Run.start` recorded the count of invalidations only for a run it
    /// found idle, so this run's count stayed 0, and its first tie took the token as invalidated
    /// since the run started.)
    @Test func aTiedStepOfWorkThatACancelledAwaitStartsRunsAfterAnEarlierInvalidate() async {
        let screen = Screen()
        let token = InvalidationToken()
        token.invalidate()  // before the run is even made; nothing invalidates it after
        let ended = Delivery<Void>()
        let work = Guarantee(value: 1)
            .done(on: .main, tiedTo: token) { screen.items.append($0) }
            .map { ended.send(()) }
            .ignoringCancel()
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }  // cancelled before the run starts
            return await work.value
        }
        let awaited: Void?? = await bounded { await task.value }
        #expect(awaited != nil, "the task did not end")
        #expect(awaited.flatMap { $0 } == nil, "the awaited run was not cancelled")
        #expect(await ended.arrival() != nil)
        #expect(screen.items == [1], "a tied step of a run made after the invalidate was skipped")
    }
}

/// Another thread's `cancelAll()` of a bag, held inside the cancel handler of the bag's first run
/// (stored as this is made, its resolver kept unresolved) from `start()` until `finish()`.
private struct HeldCancelAll {
    let bag: RunBag
    let inHandler = DispatchSemaphore(value: 0)
    let leave = DispatchSemaphore(value: 0)
    /// The handler's waits for `leave` that ran out: bounded, so that a `cancelAll()` on this
    /// thread that waited for the handler would fail the test rather than hang it.
    let stalled = Counter()
    let returned = DispatchSemaphore(value: 0)
    let kept = Delivery<Resolver<Int, Never>>()

    init(storingIn bag: RunBag) {
        self.bag = bag
        let (inHandler, leave, stalled, kept) = (inHandler, leave, stalled, kept)
        Guarantee<Int> { resolver in
            resolver.onCancel { _ in
                inHandler.signal()
                if leave.wait(timeout: .now() + timeout) == .timedOut { stalled.increment() }
            }
            kept.send(resolver)
        }.run(some: { _ in }).store(in: bag)
    }

    /// Starts the cancelAll(); returns whether it reached the handler in time.
    func start() -> Bool {
        let (bag, returned) = (bag, returned)
        detachThread {
            bag.cancelAll()
            returned.signal()
        }
        return inHandler.wait(timeout: .now() + timeout) == .success
    }

    /// Lets the handler return; returns whether the cancelAll() returned in time, and the handler
    /// had waited for this.
    func finish() -> Bool {
        leave.signal()
        return returned.wait(timeout: .now() + timeout) == .success && stalled.value == 0
    }
}
