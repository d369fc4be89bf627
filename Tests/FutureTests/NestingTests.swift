import Dispatch
import Testing

@testable import Future

/// A stack large enough to build and drop ten thousand nested promises: releasing nested
/// closures recurses (see the README), and that is not what these tests are about.
let largeStack = 256 << 20

@Suite struct Nesting {
    /// A combinator that a promise nests in, ten thousand times (as recursive fan-outs and tree
    /// walks do), each level adding 1 to the value but `share`, which passes it on.
    enum Level: String, CaseIterable, Codable, Sendable {
        case when, whenResolved, race, raceFulfilled, any, timeout, share, stackedShare

        func nest(_ promise: Promise<Int, TestError>) -> Promise<Int, TestError> {
            switch self {
            case .when: return Future.when(fulfilled: [promise]).map { $0[0] + 1 }
            case .whenResolved:
                return Future.when(resolved: [promise]).setFailureType(to: TestError.self)
                    .then { $0[0].map { $0 + 1 } }
            case .race: return Future.race([promise]).map { $0 + 1 }
            case .raceFulfilled:
                return Future.race(fulfilled: [promise]).mapError { $0.errors[0] }.map { $0 + 1 }
            case .any:
                return Future.any([promise]).mapError { $0.errors[0] }.then { $0[0].map { $0 + 1 } }
            case .timeout:
                return promise.timeout(.seconds(3600), orFailWith: TestError("late")).map { $0 + 1 }
            case .share: return promise.share()
            case .stackedShare: return promise.map { $0 + 1 }.share()  // as in the issue
            }
        }

        /// The value of `depth` levels around a promise of 0.
        func value(_ depth: Int) -> Int { self == .share ? 0 : depth }
    }

    static let depth = 10_000

    /// `innermost` nested `depth` times in `level`.
    static func nested(
        _ level: Level, _ innermost: Promise<Int, TestError>
    ) -> Promise<Int, TestError> {
        (0..<depth).reduce(innermost) { promise, _ in level.nest(promise) }
    }

    #if os(macOS) || os(Linux)
        /// Nesting is flat, as chains are: a `when` whose member is a `when` whose member is … ten
        /// thousand deep (and so for each combinator, for `timeout`, `share`, and the stacked
        /// `map { $0 + 1 }.share()` of the issue) runs and completes on a 512 KiB stack, with the
        /// right value. (Built and dropped on a large stack; run in a child process, where a stack
        /// overflow fails the test instead of ending the test run.)
        @Test(arguments: Level.allCases)
        func tenThousandLevelsRunOnASmallStack(level: Level) async {
            await #expect(processExitsWith: .success) { [level] in
                exitTestWatchdog(expectsSuccess: true)
                let delivered = Delivery<Result<Int, TestError>>()
                onThread(stackSize: largeStack) {
                    let promise = Self.nested(level, Promise(value: 0))
                    onThread(stackSize: smallStack) { promise.run { delivered.send($0) } }
                }
                #expect(delivered.wait() == .success(level.value(Self.depth)))
            }
        }

        /// The same when the innermost promise settles later, from another thread: its outcome
        /// climbs back through the ten thousand levels on the resolving thread, whose stack is
        /// 512 KiB. (The run starts on a large stack, to test the way back alone.)
        @Test(arguments: Level.allCases)
        func tenThousandLevelsSettleLaterOnASmallStack(level: Level) async {
            await #expect(processExitsWith: .success) { [level] in
                exitTestWatchdog(expectsSuccess: true)
                let resolvers = Delivery<Resolver<Int, TestError>>()
                let delivered = Delivery<Result<Int, TestError>>()
                onThread(stackSize: largeStack) {
                    let promise = Self.nested(level, Promise { resolvers.send($0) })
                    promise.run { delivered.send($0) }
                    guard let resolver = resolvers.wait() else { return }
                    onThread(stackSize: smallStack) { resolver.fulfill(0) }
                }
                #expect(delivered.wait() == .success(level.value(Self.depth)))
            }
        }

        /// Tomorrowland's test of deep taps: ten thousand shared promises, each a `tap` of the one
        /// before, each run as it is made and so observed at every level, settle on a thread with a
        /// 64 KiB stack (in a child process, where an overflow fails the test). Tomorrowland runs
        /// it on 32 KiB, but a debug build on Linux needs 32.5 to 32.75 KiB for it, for one tap as
        /// for 50,000: a new process's first use, not the taps (after a warm-up, 24 KiB). 32 KiB
        /// left it no margin; 64 KiB leaves half, and still proves the settling flat: 10,000
        /// levels in it leave 6.5 bytes a level, less than a call's return address, and a debug
        /// build's recursion takes some 400 (1,300 levels of recursive release fill 512 KiB).
        @Test func tenThousandSharedTapsRunAtOnceSettleOnA64KiBStack() async {
            await #expect(processExitsWith: .success) {
                exitTestWatchdog(expectsSuccess: true)
                let observed = Counter()
                onThread(stackSize: 64 * 1024) {
                    let (root, resolver) = Guarantee<Int>.pending()
                    var promise = root
                    for _ in 0..<Self.depth {
                        promise = promise.tap { _ in }.share()
                        promise.run { _ in observed.increment() }
                    }
                    resolver.fulfill(1)
                }
                #expect(observed.value == Self.depth)
            }
        }
    #endif
}

/// README's "Nesting is flat": "past 32 levels on one thread, a nested run or release waits until
/// the levels below have returned, and a level below does it before it returns". So a run that
/// settles at once (`Guarantee(value:)`), started in the completion of a run 32 levels deep, ends
/// after its `run(some:)` has returned, where the runs above it end inside theirs, and before the
/// bottom level returns (hunt64c: the initialisers' "at once" had read otherwise, and a
/// synchronous wait there for the completion waits for ever; README now says so).
@Suite struct RunsPastTheLimit {
    @Test func aRunStartedPastTheLimitEndsAfterItsRunReturnsAndBeforeTheBottomLevelDoes() {
        let late = Log()  // the depths whose completion came after their `run(some:)` returned
        let ended = Counter()
        @Sendable func level(_ depth: Int) {
            guard depth < 40 else { return }
            let delivered = Counter()
            Guarantee(value: depth).run(some: { _ in
                delivered.increment()
                ended.increment()
                level(depth + 1)
            })
            if delivered.value == 0 { late.record("\(depth)") }
        }
        onThread(stackSize: 1 << 20) {
            level(0)
            #expect(ended.value == 40, "the bottom level returned before every run ended")
        }
        #expect(late.all == ["32"])
    }
}
