import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `ignoringCancel()`: "A run that reaches it starts the work even if the run was cancelled
/// meanwhile, or before it started; and a combination that ends before its turn starts it all the
/// same"; `when(fulfilled:concurrently:)`: "The members it has not started yet that begin with
/// `ignoringCancel()` start as it ends". A run cancelled before it starts skips its stages, and
/// starts the ignored work of each (`Run.skip`), walking into a `timeout`'s work, which it never
/// started; it does not walk into a combination's members, so uploads made members of a `when`
/// (the README's way to let them finish) never start when the awaiting task was cancelled before
/// the run started, where the same upload alone, or in a `timeout`, does.
@Suite struct IgnoringCancelMembersNeverReached {
    /// Awaits `promise` in a task cancelled before the run starts; whether the await ended.
    static func awaitCancelled<Value: Sendable>(_ promise: Promise<Value, TestError>) async -> Bool
    {
        await bounded {
            await Task {
                withUnsafeCurrentTask { $0?.cancel() }  // cancelled before the run starts
                return (try? await promise.value) == nil
            }.value
        } == true
    }

    enum Shape: String, CaseIterable, Codable, Sendable {
        case alone, timeout, when, whenLimited, race
    }

    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test(arguments: Shape.allCases)
    func anUploadThatIgnoresCancelStartsThoughTheAwaitingTaskWasCancelledFirst(shape: Shape) async {
        let started = Delivery<Void>()
        let upload = Promise<Int, TestError> { resolver in
            started.send(())
            resolver.fulfill(1)
        }.ignoringCancel()
        let clock = ManualClock()
        let ran: Bool
        switch shape {
        case .alone: ran = await Self.awaitCancelled(upload)
        case .timeout:
            ran = await Self.awaitCancelled(
                upload.timeout(.seconds(1), orFailWith: TestError("slow"), clock: clock))
        case .when: ran = await Self.awaitCancelled(when(fulfilled: [upload, upload]))
        case .whenLimited:
            ran = await Self.awaitCancelled(when(fulfilled: [upload, upload], concurrently: 1))
        case .race: ran = await Self.awaitCancelled(race([upload, upload]))
        }
        #expect(ran, "the await did not end, or its run was not cancelled")
        // The work starts as the cancelled run skips it, before the run's end: already here.
        let expected = shape == .alone || shape == .timeout ? 1 : 2
        #expect(
            started.all.count == expected,
            "\(shape): the ignoringCancel() work started \(started.all.count) times")
    }

    /// The same without a task: a step that cancels its own run stops it before the next step
    /// (`RunHandle`), and the chain that step returned is skipped as the run enters it. The
    /// `ignoringCancel()` work that chain begins with starts; the members of a `when` (the
    /// `thenMap` of uploads) that the chain is never start.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test(arguments: [Shape.alone, .timeout, .when, .whenLimited, .race])
    func anIgnoringUploadStartsWhenTheStepReturningItCancelledTheRun(shape: Shape) async {
        let started = Delivery<Void>()
        let upload = Promise<Int, TestError> { resolver in
            started.send(())
            resolver.fulfill(1)
        }.ignoringCancel()
        let clock = ManualClock()
        let handles = Delivery<RunHandle>()
        let ended = Delivery<Void>()
        // The step runs once the handle is here: a gate the test opens after `run` returned (a
        // step that waited for the handle ran inside `run` when its work resolved at once).
        let (gate, open) = Promise<Void, TestError>.pending()
        handles.send(
            gate
                .then { _ -> Promise<Int, TestError> in
                    handles.all.first?.cancel()  // the run's own step cancels it
                    switch shape {
                    case .alone: return upload
                    case .timeout:
                        return upload.timeout(
                            .seconds(1), orFailWith: TestError("slow"), clock: clock)
                    case .when: return when(fulfilled: [upload, upload]).map { $0[0] }
                    case .whenLimited:
                        return when(fulfilled: [upload, upload], concurrently: 1).map { $0[0] }
                    case .race: return race([upload, upload])
                    }
                }
                .ensure { ended.send(()) }
                .run { _ in })
        open.fulfill(())
        #expect(await ended.arrival() != nil, "the run did not end")
        let expected = shape == .alone || shape == .timeout ? 1 : 2
        #expect(
            started.all.count == expected,
            "\(shape): the ignoringCancel() work started \(started.all.count) times")
    }

    /// A member whose turn never comes and that begins with a combination of members that ignore
    /// cancel: their work starts as the outer combination ends, as a run cancelled before the
    /// inner combination would start it.
    @Test func aMemberThatBeginsWithACombinationOfIgnoringMembersStartsThemWhenItsTurnNeverComes() {
        let started = Counter()
        let upload = Promise<Int, TestError> { resolver in
            started.increment()
            resolver.fulfill(1)
        }.ignoringCancel()
        let inner = when(fulfilled: [upload, upload]).map { $0[0] }
        let failing = Promise<Int, TestError>(error: TestError("offline"))
        let delivered = Log()
        when(fulfilled: [failing, inner], concurrently: 1).run { delivered.record("\($0)") }
        #expect(delivered.all.count == 1)
        #expect(started.value == 2)
    }

    /// `when(resolved:concurrently:until:)`: a batch stopped by its signal starts the work of the
    /// members it never started that begin with `ignoringCancel()`, and has `nil` for each.
    @Test func aStoppedBatchStartsTheWorkOfItsUnstartedMembersThatIgnoreCancel() {
        let started = Counter()
        let upload = Promise<Int, TestError> { resolver in
            started.increment()
            resolver.fulfill(1)
        }.ignoringCancel()
        let waiting = Pending<Int>()
        let (stop, stopper) = Guarantee<Void>.pending()
        let delivered = Log()
        when(resolved: [waiting.promise, upload, upload], concurrently: 1, until: stop)
            .run { delivered.record("\($0.map { $0.map { $0.map { _ in "done" } } })") }
        #expect(waiting.resolvers.wait() != nil)
        #expect(started.value == 0)
        stopper.fulfill(())
        #expect(delivered.all == ["success([nil, nil, nil])"])
        #expect(started.value == 2)
    }
}
