// The benchmarks' workloads, each system in its best idiomatic form (see README.md): one list of
// scenarios that package-benchmark measures (FutureBenchmarks) and that Ratios runs in pairs.
//
// Every scenario is named "<scenario> ×<length> | <system>". One run does a fixed amount of work
// whatever the length (say, 10,000 links: 1,000 chains of 10, or 10 chains of 1,000), so that
// every system and length is divided by the same number of units.

import Dispatch
import Future
import OpenCombine
import SeedPromise

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// One workload of one system.
public struct Scenario: Sendable {
    /// How an iteration runs.
    public enum Body: Sendable {
        /// On the calling thread.
        case sync(@Sendable () -> Void)
        /// On the deep stack's thread, for the designs that recurse on the call stack.
        case deep(@Sendable () -> Void)
        /// From async code.
        case async(@Sendable () async -> Void)
    }

    public let name: String
    public let scenario: String
    public let length: Int
    public let system: String
    public let body: Body

    init(_ name: String, _ body: Body) {
        let halves = name.split(separator: " | ")
        let words = halves[0].split(separator: " ×")
        (self.name, scenario, length) = (name, String(words[0]), Int(words[1])!)
        system = String(halves[1])
        self.body = body
    }

    /// Runs one iteration.
    public func run() async {
        switch body {
        case .sync(let body): body()
        case .deep(let body): DeepStack.shared.run(body)
        case .async(let body): await body()
        }
    }
}

/// Keeps the optimizer from deleting the work that made `value`.
@_optimize(none) @inline(never) public func blackHole<T>(_ value: T) {}

/// A value of a type that is not `Sendable`, for a workload that only one thread runs at a time.
struct Unchecked<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

/// Links (or steps) in one iteration of a chain scenario, whatever the chain's length.
let linksPerIteration = 10_000
let fanOutWidth = 10_000
let stepsPerLoopIteration = 100_000
let runsPerIteration = 1_000

struct Failure: Error {}

/// The resolver of a call that answers later, kept until the test answers it from its thread.
final class Call: @unchecked Sendable {
    var resolver: Resolver<Int, Failure>?
}

// MARK: - The floor: hand-written completion callbacks

@inline(never) func addOne(_ value: Int, completion: @escaping (Int) -> Void) {
    completion(value + 1)
}

/// `count` nested callbacks, each handing its value to the next.
func callbackChain(_ value: Int, _ count: Int, completion: @escaping (Int) -> Void) {
    guard count > 0 else { return completion(value) }
    addOne(value) { callbackChain($0, count - 1, completion: completion) }
}

/// The same with an error raised by the first step, passed along by every later one.
func failingCallbackChain(
    _ outcome: Result<Int, Failure>, _ count: Int,
    completion: @escaping (Result<Int, Failure>) -> Void
) {
    guard count > 0 else { return completion(outcome) }
    guard case .success(let value) = outcome else {
        return failingCallbackChain(outcome, count - 1, completion: completion)
    }
    addOne(value) { failingCallbackChain(.success($0), count - 1, completion: completion) }
}

func callbackLoop(_ n: Int, completion: @escaping (Int) -> Void) {
    n == 0 ? completion(0) : addOne(n) { callbackLoop($0 - 2, completion: completion) }
}

// MARK: - Swift concurrency, in its two kinds of async function

@inline(never) func addOneAsync(_ value: Int) async -> Int { value + 1 }

@inline(never) nonisolated(nonsending) func addOneNonsending(_ value: Int) async -> Int {
    value + 1
}

@inline(never) func addOneThrowing(_ value: Int) async throws -> Int { value + 1 }

@inline(never) nonisolated(nonsending) func addOneThrowingNonsending(_ value: Int) async throws
    -> Int
{ value + 1 }

@inline(never) func failFirst() async throws -> Int { throw Failure() }

/// A callback API wrapped for async/await, as a promise step wraps one.
@inline(never) func addOneContinuation(_ value: Int) async -> Int {
    await withUnsafeContinuation { continuation in
        addOne(value) { continuation.resume(returning: $0) }
    }
}

@inline(never) nonisolated(nonsending) func addOneContinuationNonsending(_ value: Int) async
    -> Int
{
    await withUnsafeContinuation { continuation in
        addOne(value) { continuation.resume(returning: $0) }
    }
}

func asyncLoop(_ n: Int) async -> Int { n == 0 ? 0 : await asyncLoop(n - 1) }

nonisolated(nonsending) func nonsendingLoop(_ n: Int) async -> Int {
    n == 0 ? 0 : await nonsendingLoop(n - 1)
}

/// The same number resolved on a global queue, as work done elsewhere would be.
func onGlobalQueue(_ value: Int) async -> Int {
    await withUnsafeContinuation { continuation in
        DispatchQueue.global().async { continuation.resume(returning: value) }
    }
}

// MARK: - The other designs

func futureChain(_ length: Int) -> Guarantee<Int> {
    var chain = Guarantee(value: 0)
    for _ in 0..<length { chain = chain.then { $0 + 1 } }
    return chain
}

func futureLoop(_ n: Int) -> Guarantee<Int> {
    n == 0 ? .value(0) : Promise(value: n).then { futureLoop($0 - 1) }
}

func seedChain(_ length: Int) -> SeedPromise<Int, Never> {
    var chain = SeedPromise<Int, Never> { $0(.success(0)) }
    for _ in 0..<length { chain = chain.then { $0 + 1 } }
    return chain
}

func seedLoop(_ n: Int) -> SeedPromise<Int, Never> {
    n == 0
        ? SeedPromise { $0(.success(0)) }
        : SeedPromise { $0(.success(n)) }.then { seedLoop($0 - 1) }
}

/// OpenCombine's best form for a chain built in a loop: `map` on a `map` fuses into one
/// `Publishers.Map` whose transform composes the closures, so nothing is erased. (`Deferred`
/// keeps it lazy: `Just` would run each `map` at once, as it is built.)
func combineChain(_ length: Int) -> Publishers.Map<Deferred<Just<Int>>, Int> {
    var chain = Deferred { Just(0) }.map { $0 }
    for _ in 0..<length { chain = chain.map { $0 + 1 } }
    return chain
}

/// The same chain with each operator erased, as a chain of different operators would need.
func erasedCombineChain(_ length: Int) -> AnyPublisher<Int, Never> {
    var chain = Just(0).eraseToAnyPublisher()
    for _ in 0..<length { chain = chain.map { $0 + 1 }.eraseToAnyPublisher() }
    return chain
}

func combineLoop(_ n: Int) -> AnyPublisher<Int, Never> {
    n == 0
        ? Just(0).eraseToAnyPublisher()
        : Just(n).flatMap { combineLoop($0 - 1) }.eraseToAnyPublisher()
}

func sink<P: Publisher>(_ publisher: P) {
    blackHole(publisher.sink(receiveCompletion: { blackHole($0) }, receiveValue: { blackHole($0) }))
}

/// One thread with a 1 GiB stack, created once and reused by every iteration that needs it:
/// the designs that recurse on the call stack overflow a normal one, and starting a thread per
/// run would measure the thread. Its stack is touched once, before any measurement.
public final class DeepStack: @unchecked Sendable {
    public static let shared = DeepStack()
    private let request = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)
    private var job: () -> Void = {}

    private init() {
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        pthread_attr_setstacksize(&attributes, 1 << 30)
        #if canImport(Darwin)
            var thread: pthread_t?
        #else
            var thread = pthread_t()
        #endif
        let me = Unmanaged.passRetained(self).toOpaque()
        pthread_create(
            &thread, &attributes,
            { raw in
                #if canImport(Darwin)
                    let stack = Unmanaged<DeepStack>.fromOpaque(raw).takeRetainedValue()
                #else
                    let stack = Unmanaged<DeepStack>.fromOpaque(raw!).takeRetainedValue()
                #endif
                while true {
                    stack.request.wait()
                    stack.job()
                    stack.done.signal()
                }
            }, me)
        pthread_attr_destroy(&attributes)
        run { blackHole(touch(1_500_000)) }  // about 700 MB of frames
    }

    /// Runs `body` on the deep stack and waits for it. (Not from the deep stack itself.)
    public func run(_ body: @escaping () -> Void) {
        job = body
        request.signal()
        done.wait()
    }
}

/// Recurses `depth` times with a few hundred bytes a frame, so that the stack's pages exist.
@inline(never) func touch(_ depth: Int) -> Int {
    var frame = (depth, depth, depth, depth, depth, depth, depth, depth)
    return withUnsafeMutableBytes(of: &frame) { bytes in
        depth == 0 ? Int(bytes[0]) : touch(depth - 1) &+ Int(bytes[1])
    }
}

// MARK: - The scenarios

/// Every scenario, for each system, each with its lengths.
public func allScenarios() -> [Scenario] {
    var scenarios: [Scenario] = []
    /// Adds a scenario named "<scenario> ×<length> | <system>".
    func add(_ name: String, _ body: @escaping @Sendable () -> Void) {
        scenarios.append(Scenario(name, .sync(body)))
    }
    func addDeep(_ name: String, _ body: @escaping @Sendable () -> Void) {
        scenarios.append(Scenario(name, .deep(body)))
    }
    func addAsync(_ name: String, _ body: @escaping @Sendable () async -> Void) {
        scenarios.append(Scenario(name, .async(body)))
    }

    // (a) Chains of `+ 1` steps at three lengths, built and run, run when built beforehand, and
    // built alone: per link, the cost of a chain should not depend on its length.
    for length in [10, 100, 1_000] {
        let chains = linksPerIteration / length
        let name = { (scenario: String, system: String) in "\(scenario) ×\(length) | \(system)" }
        add(name("chain build+run", "Future")) {
            for _ in 0..<chains { futureChain(length).run { blackHole($0) } }
        }
        add(name("chain build+run", "Seed 004")) {
            for _ in 0..<chains { seedChain(length).run { blackHole($0) } }
        }
        addDeep(name("chain build+run", "OpenCombine")) {
            for _ in 0..<chains { sink(combineChain(length)) }
        }
        addDeep(name("chain build+run", "OpenCombine erased")) {
            for _ in 0..<chains { sink(erasedCombineChain(length)) }
        }
        // Callbacks and async functions have nothing to build: their chain runs as it is written.
        for scenario in ["chain build+run", "chain run"] {
            add(name(scenario, "Callbacks")) {
                for _ in 0..<chains { callbackChain(0, length) { blackHole($0) } }
            }
            addAsync(name(scenario, "async/await")) {
                for _ in 0..<chains {
                    var value = 0
                    for _ in 0..<length { value = await addOneAsync(value) }
                    blackHole(value)
                }
            }
            addAsync(name(scenario, "async nonsending")) {
                for _ in 0..<chains {
                    var value = 0
                    for _ in 0..<length { value = await addOneNonsending(value) }
                    blackHole(value)
                }
            }
        }
        let future = futureChain(length)
        let (seed, combine, erased) = (
            Unchecked(seedChain(length)), Unchecked(combineChain(length)),
            Unchecked(erasedCombineChain(length))
        )
        add(name("chain run", "Future")) {
            for _ in 0..<chains { future.run { blackHole($0) } }
        }
        add(name("chain run", "Seed 004")) {
            for _ in 0..<chains { seed.value.run { blackHole($0) } }
        }
        addDeep(name("chain run", "OpenCombine")) {
            for _ in 0..<chains { sink(combine.value) }
        }
        addDeep(name("chain run", "OpenCombine erased")) {
            for _ in 0..<chains { sink(erased.value) }
        }
        guard length == 1_000 else { continue }
        add(name("chain build", "Future")) {
            for _ in 0..<chains { blackHole(futureChain(length)) }
        }
        add(name("chain build", "Seed 004")) {
            for _ in 0..<chains { blackHole(seedChain(length)) }
        }
        add(name("chain build", "OpenCombine")) {
            for _ in 0..<chains { blackHole(combineChain(length)) }
        }
        add(name("chain build", "OpenCombine erased")) {
            for _ in 0..<chains { blackHole(erasedCombineChain(length)) }
        }
        // The built chain awaited from async code, against awaiting the calls one by one.
        addAsync(name("awaited chain", "Future")) {
            for _ in 0..<chains { blackHole(await future.value) }
        }
        addAsync(name("awaited chain", "async/await")) {
            for _ in 0..<chains {
                var value = 0
                for _ in 0..<length { value = await addOneAsync(value) }
                blackHole(value)
            }
        }
        addAsync(name("awaited chain", "async nonsending")) {
            for _ in 0..<chains {
                var value = 0
                for _ in 0..<length { value = await addOneNonsending(value) }
                blackHole(value)
            }
        }
    }

    // (b) 1,000 steps that each return a promise made by an operation (a wrapped callback).
    add("promise steps ×1000 | Future") {
        var chain = Guarantee(value: 0)
        for _ in 0..<1_000 { chain = chain.then { value in Guarantee { $0.fulfill(value + 1) } } }
        chain.run { blackHole($0) }
    }
    add("promise steps ×1000 | Callbacks") {
        callbackChain(0, 1_000) { blackHole($0) }
    }
    add("promise steps ×1000 | Seed 004") {
        var chain = SeedPromise<Int, Never> { $0(.success(0)) }
        for _ in 0..<1_000 {
            chain = chain.then { value in SeedPromise { $0(.success(value + 1)) } }
        }
        chain.run { blackHole($0) }
    }
    addDeep("promise steps ×1000 | OpenCombine erased") {
        var chain = Just(0).eraseToAnyPublisher()
        for _ in 0..<1_000 {
            chain = chain.flatMap { value in
                OpenCombine.Future<Int, Never> { $0(.success(value + 1)) }
            }.eraseToAnyPublisher()
        }
        sink(chain)
    }
    addAsync("promise steps ×1000 | async/await") {
        var value = 0
        for _ in 0..<1_000 { value = await addOneContinuation(value) }
        blackHole(value)
    }
    addAsync("promise steps ×1000 | async nonsending") {
        var value = 0
        for _ in 0..<1_000 { value = await addOneContinuationNonsending(value) }
        blackHole(value)
    }

    // (c) Fan-out: 10,000 operations combined into one array, in input order.
    add("fan-out ×10000 | Future") {
        let members = (0..<fanOutWidth).map { index in Guarantee { $0.fulfill(index + 1) } }
        when(fulfilled: members).run { blackHole($0) }
    }
    // What Future's fan-out spends before any joining: building its 10,000 members.
    add("fan-out ×10000 | Future, building alone") {
        blackHole((0..<fanOutWidth).map { index in Guarantee { $0.fulfill(index + 1) } })
    }
    add("fan-out ×10000 | Callbacks") {
        var results = [Int](repeating: 0, count: fanOutWidth)
        var remaining = fanOutWidth
        for index in 0..<fanOutWidth {
            addOne(index) { value in
                results[index] = value
                remaining -= 1
                if remaining == 0 { blackHole(results) }
            }
        }
    }
    add("fan-out ×10000 | Seed 004") {
        var results = [Int](repeating: 0, count: fanOutWidth)
        var remaining = fanOutWidth
        for index in 0..<fanOutWidth {
            SeedPromise<Int, Never> { $0(.success(index + 1)) }.run { outcome in
                if case .success(let value) = outcome { results[index] = value }
                remaining -= 1
                if remaining == 0 { blackHole(results) }
            }
        }
    }
    add("fan-out ×10000 | OpenCombine") {
        sink(
            Publishers.Sequence<[Int], Never>(sequence: Array(0..<fanOutWidth))
                .flatMap { index in OpenCombine.Future<Int, Never> { $0(.success(index + 1)) } }
                .collect())
    }
    addAsync("fan-out ×10000 | async/await") {
        blackHole(
            await withTaskGroup(of: (Int, Int).self) { group in
                for index in 0..<fanOutWidth {
                    group.addTask { (index, await addOneAsync(index)) }
                }
                var results = [Int](repeating: 0, count: fanOutWidth)
                for await (index, value) in group { results[index] = value }
                return results
            })
    }

    // (c) The same fan-out of work that resolves on a global queue, all at once and 4 at a time.
    for limit in [Int.max, 4] {
        let scenario = limit == 4 ? "fan-out 4 at once" : "fan-out on a queue"
        addAsync("\(scenario) ×10000 | Future") {
            let members = (0..<fanOutWidth).map { index in
                Guarantee { resolver in DispatchQueue.global().async { resolver.fulfill(index) } }
            }
            blackHole(await when(fulfilled: members, concurrently: limit).value)
        }
        addAsync("\(scenario) ×10000 | async/await") {
            blackHole(
                await withTaskGroup(of: (Int, Int).self) { group in
                    var results = [Int](repeating: 0, count: fanOutWidth)
                    var next = 0
                    while next < min(limit, fanOutWidth) {
                        let index = next
                        group.addTask { (index, await onGlobalQueue(index)) }
                        next += 1
                    }
                    while let (index, value) = await group.next() {
                        results[index] = value
                        guard next < fanOutWidth else { continue }
                        let index = next
                        group.addTask { (index, await onGlobalQueue(index)) }
                        next += 1
                    }
                    return results
                })
        }
    }

    // (d) A recursive loop through a promise-returning step, at two depths.
    for steps in [1_000, 100_000] {
        let loops = stepsPerLoopIteration / steps
        let name = { (system: String) in "recursive loop ×\(steps) | \(system)" }
        add(name("Future")) {
            for _ in 0..<loops { futureLoop(steps).run { blackHole($0) } }
        }
        addDeep(name("Callbacks")) {
            for _ in 0..<loops { callbackLoop(steps * 2) { blackHole($0) } }
        }
        addDeep(name("Seed 004")) {
            for _ in 0..<loops { seedLoop(steps).run { blackHole($0) } }
        }
        addDeep(name("OpenCombine erased")) {
            for _ in 0..<loops { sink(combineLoop(steps)) }
        }
        addAsync(name("async/await")) {
            for _ in 0..<loops { blackHole(await asyncLoop(steps)) }
        }
        addAsync(name("async nonsending")) {
            for _ in 0..<loops { blackHole(await nonsendingLoop(steps)) }
        }
    }

    // (e) An error raised at the first of 1,000 links and handled at the end.
    add("error at first ×1000 | Future") {
        var chain = Promise<Int, Failure>(error: Failure())
        for _ in 0..<1_000 { chain = chain.map { $0 + 1 } }
        chain.run(some: { blackHole($0) }, none: { blackHole($0) })
    }
    add("error at first ×1000 | Callbacks") {
        failingCallbackChain(.failure(Failure()), 1_000) { blackHole($0) }
    }
    add("error at first ×1000 | Seed 004") {
        var chain = SeedPromise<Int, Failure> { $0(.failure(Failure())) }
        for _ in 0..<1_000 { chain = chain.then { $0 + 1 } }
        chain.run(some: { blackHole($0) }, none: { blackHole($0) })
    }
    addDeep("error at first ×1000 | OpenCombine") {
        var chain = Deferred { Fail<Int, Failure>(error: Failure()) }.map { $0 }
        for _ in 0..<1_000 { chain = chain.map { $0 + 1 } }
        sink(chain)
    }
    addAsync("error at first ×1000 | async/await") {
        do {
            var value = try await failFirst()
            for _ in 0..<1_000 { value = try await addOneThrowing(value) }
            blackHole(value)
        } catch {
            blackHole(error)
        }
    }
    addAsync("error at first ×1000 | async nonsending") {
        do {
            var value = try await failFirst()
            for _ in 0..<1_000 { value = try await addOneThrowingNonsending(value) }
            blackHole(value)
        } catch {
            blackHole(error)
        }
    }

    // (f) Work written as async code, run and awaited: Future starts a Task per run.
    let asyncWork = Guarantee<Int> { await addOneAsync(1) }
    addAsync("async work ×1000 | Future") {
        for _ in 0..<runsPerIteration { blackHole(await asyncWork.value) }
    }
    addAsync("async work ×1000 | async/await") {
        for _ in 0..<runsPerIteration { blackHole(await Task { await addOneAsync(1) }.value) }
    }

    // (g) Timers: a 60 s timeout that does not fire, with no clock and on each standard clock,
    // against a DispatchWorkItem scheduled and cancelled: on work that settles at once (no alarm
    // is set), and on work that waits and answers once its run has returned, as a server's calls
    // do (the alarm is set, then cancelled; the peer's answer cancels the work item). Then
    // `after(.zero)` against `asyncAfter(.now())`.
    let timeouts: [(String, @Sendable (Promise<Int, Failure>) -> Promise<Int, Failure>)] = [
        ("", { $0.timeout(.seconds(60), orFailWith: Failure()) }),
        (
            ", ContinuousClock",
            { $0.timeout(.seconds(60), orFailWith: Failure(), clock: ContinuousClock()) }
        ),
        (
            ", SuspendingClock",
            { $0.timeout(.seconds(60), orFailWith: Failure(), clock: SuspendingClock()) }
        ),
    ]
    for (clock, timeout) in timeouts {
        add("timeout unfired\(clock) ×1000 | Future") {
            for _ in 0..<runsPerIteration { timeout(Promise(value: 1)).run { blackHole($0) } }
        }
        add("timeout unfired\(clock) ×1000 | Dispatch") {
            for _ in 0..<runsPerIteration {
                let timer = DispatchWorkItem { blackHole(0) }
                DispatchQueue.global().asyncAfter(deadline: .now() + 60, execute: timer)
                timer.cancel()
            }
        }
        add("timeout, work waits\(clock) ×1000 | Future") {
            for _ in 0..<runsPerIteration {
                let call = Call()
                timeout(Promise { call.resolver = $0 }).run { blackHole($0) }
                call.resolver?.fulfill(1)
            }
        }
        add("timeout, work waits\(clock) ×1000 | Dispatch") {
            for _ in 0..<runsPerIteration {
                let timer = DispatchWorkItem { blackHole(0) }
                DispatchQueue.global().asyncAfter(deadline: .now() + 60, execute: timer)
                let answer = Unchecked { (value: Int) in
                    timer.cancel()
                    blackHole(value)
                }
                answer.value(1)
            }
        }
    }
    add("after zero ×1000 | Future") {
        let fired = DispatchSemaphore(value: 0)
        for _ in 0..<runsPerIteration {
            after(.zero).run { _ in fired.signal() }
            fired.wait()
        }
    }
    add("after zero ×1000 | Dispatch") {
        let fired = DispatchSemaphore(value: 0)
        for _ in 0..<runsPerIteration {
            DispatchQueue.global().asyncAfter(deadline: .now()) { fired.signal() }
            fired.wait()
        }
    }
    return scenarios
}
