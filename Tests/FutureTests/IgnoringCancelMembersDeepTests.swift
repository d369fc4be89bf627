import Dispatch
import Testing

@testable import Future

/// Combinations nested deep, and a batch's signal, and the `ignoringCancel()` work of their
/// members. The README: "Combinations nested in combinations (`when`, …) run, complete, cancel and
/// are released on a 512 KiB stack at any depth (tested 10,000 deep …)". `ignoringCancel()`'s doc:
/// "So does a run cancelled before it reaches a combination that has it as a member, at any
/// depth." (A review found that starting 10,000 levels' work nested on the stack, each level's
/// start calling the next; the tests run in a child process, where a stack overflow fails them.)
@Suite struct IgnoringCancelMembersDeep {
    static let depth = 10_000

    /// `innermost` in a `when` in a `when` … `depth` deep.
    static func nested(_ innermost: Promise<Int, TestError>) -> Promise<Int, TestError> {
        (0..<depth).reduce(innermost) { promise, _ in when(fulfilled: [promise]).map { $0[0] + 1 } }
    }

    /// Work that ignores cancel, counting its starts.
    static func upload(_ started: Counter) -> Promise<Int, TestError> {
        Promise<Int, TestError> { resolver in
            started.increment()
            resolver.fulfill(0)
        }.ignoringCancel()
    }

    #if os(macOS) || os(Linux)
        /// A run whose step cancels it and returns the nested combinations, driven on a 512 KiB
        /// stack (built on a large one): the skip starts the innermost work, once.
        @Test(arguments: [false, true])
        func aRunCancelledBeforeTenThousandNestedWhensStartsTheWorkOnASmallStack(ignoring: Bool)
            async
        {
            await #expect(processExitsWith: .success) { [ignoring] in
                exitTestWatchdog(expectsSuccess: true)
                let started = Counter()
                let ended = Delivery<Void>()
                onThread(stackSize: largeStack) {
                    let innermost =
                        ignoring ? Self.upload(started) : Promise<Int, TestError>(value: 0)
                    let promise = Self.nested(innermost)
                    let handles = Delivery<RunHandle>()
                    let (gate, opener) = Guarantee<Void>.pending()
                    handles.send(
                        gate.setFailureType(to: TestError.self)
                            .then { _ -> Promise<Int, TestError> in
                                handles.wait()?.cancel()  // the run's own step cancels it
                                return promise
                            }
                            .ensure { ended.send(()) }
                            .run { _ in })
                    onThread(stackSize: smallStack) { opener.fulfill(()) }
                }
                #expect(ended.wait() != nil)
                #expect(started.value == (ignoring ? 1 : 0))
            }
        }

        /// A race won at once by its first member, on a 512 KiB stack: its second member, never
        /// started, begins with the nested combinations, whose innermost work starts, once.
        @Test(arguments: [false, true])
        func aRaceWonAtOnceStartsTheWorkOfTenThousandNestedWhensOnASmallStack(ignoring: Bool)
            async
        {
            await #expect(processExitsWith: .success) { [ignoring] in
                exitTestWatchdog(expectsSuccess: true)
                let started = Counter()
                let delivered = Delivery<Result<Int, TestError>>()
                onThread(stackSize: largeStack) {
                    let innermost =
                        ignoring ? Self.upload(started) : Promise<Int, TestError>(value: 0)
                    let promise = race([Promise(value: -1), Self.nested(innermost)])
                    onThread(stackSize: smallStack) { promise.run { delivered.send($0) } }
                }
                #expect(delivered.wait() == .success(-1))
                #expect(started.value == (ignoring ? 1 : 0))
            }
        }

        /// The nested combinations built and dropped on a 512 KiB stack, never run.
        @Test(arguments: [false, true])
        func tenThousandNestedWhensOfWorkThatIgnoresCancelAreReleasedOnASmallStack(ignoring: Bool)
            async
        {
            await #expect(processExitsWith: .success) { [ignoring] in
                exitTestWatchdog(expectsSuccess: true)
                let started = Counter()
                onThread(stackSize: smallStack) {
                    let innermost =
                        ignoring ? Self.upload(started) : Promise<Int, TestError>(value: 0)
                    _ = Self.nested(innermost)
                }
                #expect(started.value == 0)
            }
        }
    #endif

    /// `when(resolved:concurrently:until:)`: "`stop` runs with each run of the batch, beside the
    /// members"; `when(fulfilled:concurrently:)`: the members a combination never started "that
    /// begin with `ignoringCancel()` (or with a combination of such members) start as it ends; the
    /// others never start". A race won at once never starts its second member, a batch whose
    /// signal ignores cancel: the signal is no member, and the batch's members (none, or one that
    /// does not ignore cancel) are no such members, so the signal's work should not start. It
    /// starts when the batch has promises (the signal is the join's member 0, and `Engine.join`
    /// gives its first stage the work of every member that ignores cancel), not when it has none
    /// (no join members): the model checker's `ignoredWork` starts it in both.
    @Test(arguments: [0, 1])
    func aRaceWonAtOnceStartsNoWorkOfTheSignalOfABatchItNeverStarted(promises: Int) {
        let signalled = Counter()
        let signal = Guarantee<Void> { resolver in
            signalled.increment()
            resolver.fulfill(())
        }.ignoringCancel()
        let batch = when(
            resolved: Array(repeating: Promise<Int, TestError>(value: 1), count: promises),
            until: signal
        ).map { $0.count }
        let delivered = Log()
        race([Guarantee(value: -1), batch]).run { delivered.record("\($0)") }
        #expect(delivered.all == ["success(-1)"])
        #expect(
            signalled.value == 0,
            "with \(promises) promises, the signal's work started \(signalled.value) times")
    }
}
