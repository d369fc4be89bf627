// Future against what a user would pick instead, scenario by scenario, in one run.
//
// Every benchmark is named "<scenario> | <system>". One iteration does a whole scenario (say,
// a 1,000-link chain); `compare.sh` divides by the scenario's units to report per link or per
// element. Set BENCHMARK_SMOKE=1 to run each benchmark once, as CI does so they never rot.

import Benchmark
import Dispatch
import Future
import OpenCombine
import SeedPromise

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

let links = 1_000
let fanOutWidth = 10_000
let loopSteps = 100_000

struct Failure: Error {}

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
    switch outcome {
    case .success(let value):
        addOne(value) { failingCallbackChain(.success($0), count - 1, completion: completion) }
    case .failure:
        failingCallbackChain(outcome, count - 1, completion: completion)
    }
}

// MARK: - Swift concurrency

@inline(never) func addOneAsync(_ value: Int) async -> Int { value + 1 }

@inline(never) func addOneThrowing(_ value: Int) async throws -> Int { value + 1 }

@inline(never) func failFirst() async throws -> Int { throw Failure() }

/// A callback API wrapped for async/await, as a promise step wraps one.
@inline(never) func addOneContinuation(_ value: Int) async -> Int {
    await withUnsafeContinuation { continuation in
        addOne(value) { continuation.resume(returning: $0) }
    }
}

func asyncLoop(_ n: Int) async -> Int { n == 0 ? 0 : await asyncLoop(n - 1) }

// MARK: - Recursive loops

func futureLoop(_ n: Int) -> Guarantee<Int> {
    n == 0 ? .value(0) : Promise(value: n).then { futureLoop($0 - 1) }
}

func seedLoop(_ n: Int) -> SeedPromise<Int, Never> {
    n == 0
        ? SeedPromise { $0(.success(0)) }
        : SeedPromise { $0(.success(n)) }.then { seedLoop($0 - 1) }
}

func combineLoop(_ n: Int) -> AnyPublisher<Int, Never> {
    n == 0
        ? Just(0).eraseToAnyPublisher()
        : Just(n).flatMap { combineLoop($0 - 1) }.eraseToAnyPublisher()
}

func callbackLoop(_ n: Int, completion: @escaping (Int) -> Void) {
    n == 0 ? completion(0) : addOne(n) { callbackLoop($0 - 2, completion: completion) }
}

/// Runs `body` on a thread with a 1 GiB stack: the designs whose recursion grows the stack
/// cannot run a 100,000-step loop on a normal one, and OpenCombine overflows the benchmark
/// thread's stack on a 1,000-operator chain. Starting the thread costs about 0.02 ms a run.
func onDeepStack(_ body: @escaping () -> Void) {
    final class Box: @unchecked Sendable {
        let body: () -> Void
        init(_ body: @escaping () -> Void) { self.body = body }
    }
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    pthread_attr_setstacksize(&attributes, 1 << 30)
    #if canImport(Darwin)
        var thread: pthread_t?
    #else
        var thread = pthread_t()
    #endif
    let box = Unmanaged.passRetained(Box(body)).toOpaque()
    pthread_create(
        &thread, &attributes,
        { raw in
            #if canImport(Darwin)
                Unmanaged<Box>.fromOpaque(raw).takeRetainedValue().body()
            #else
                Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue().body()
            #endif
            return nil
        }, box)
    #if canImport(Darwin)
        pthread_join(thread!, nil)
    #else
        pthread_join(thread, nil)
    #endif
    pthread_attr_destroy(&attributes)
}

/// Subscribes to `chain` on a deep stack and waits for it to finish (they all finish at once).
func sinkOnDeepStack<Failure: Error>(_ chain: AnyPublisher<Int, Failure>) {
    onDeepStack {
        let subscription = chain.sink(
            receiveCompletion: { blackHole($0) }, receiveValue: { blackHole($0) })
        blackHole(subscription)
    }
}

// MARK: - Chains, built the way each system builds them

func futureChain() -> Guarantee<Int> {
    var chain = Guarantee(value: 0)
    for _ in 0..<links { chain = chain.then { $0 + 1 } }
    return chain
}

func seedChain() -> SeedPromise<Int, Never> {
    var chain = SeedPromise<Int, Never> { $0(.success(0)) }
    for _ in 0..<links { chain = chain.then { $0 + 1 } }
    return chain
}

func combineChain() -> AnyPublisher<Int, Never> {
    var chain = Just(0).eraseToAnyPublisher()
    for _ in 0..<links { chain = chain.map { $0 + 1 }.eraseToAnyPublisher() }
    return chain
}

// MARK: - The benchmarks

let smoke = getenv("BENCHMARK_SMOKE") != nil

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .mallocCountTotal],
        timeUnits: .nanoseconds,
        warmupIterations: smoke ? 0 : 3,
        maxDuration: smoke ? .milliseconds(1) : .seconds(2),
        maxIterations: smoke ? 1 : 1_000
    )

    // (a) A 1,000-link chain of `then { $0 + 1 }`, built and run.
    Benchmark("chain build+run | Future") { _ in
        futureChain().run { blackHole($0) }
    }
    Benchmark("chain build+run | Callbacks") { _ in
        callbackChain(0, links) { blackHole($0) }
    }
    Benchmark("chain build+run | Seed 004") { _ in
        seedChain().run { blackHole($0) }
    }
    Benchmark("chain build+run | OpenCombine") { _ in
        sinkOnDeepStack(combineChain())
    }
    Benchmark("chain build+run | async/await") { _ in
        var value = 0
        for _ in 0..<links { value = await addOneAsync(value) }
        blackHole(value)
    }

    // (a) The same chain, built once and run: what running costs apart from describing.
    // Callbacks and async functions have nothing to build, so they do what they do above.
    let futureBuilt = futureChain()
    nonisolated(unsafe) let seedBuilt = seedChain()
    nonisolated(unsafe) let combineBuilt = combineChain()
    Benchmark("chain run | Future") { _ in futureBuilt.run { blackHole($0) } }
    Benchmark("chain run | Callbacks") { _ in callbackChain(0, links) { blackHole($0) } }
    Benchmark("chain run | Seed 004") { _ in seedBuilt.run { blackHole($0) } }
    Benchmark("chain run | OpenCombine") { _ in sinkOnDeepStack(combineBuilt) }
    Benchmark("chain run | async/await") { _ in
        var value = 0
        for _ in 0..<links { value = await addOneAsync(value) }
        blackHole(value)
    }

    // (a) The built chain awaited from async code, against awaiting 1,000 async calls.
    Benchmark("awaited chain | Future") { _ in blackHole(await futureBuilt.value) }
    Benchmark("awaited chain | async/await") { _ in
        var value = 0
        for _ in 0..<links { value = await addOneAsync(value) }
        blackHole(value)
    }

    // (f) Work written as async code, run 1,000 times: Future starts a Task per run.
    let asyncWork = Guarantee<Int> { await addOneAsync(1) }
    Benchmark("async work | Future") { _ in
        for _ in 0..<links { blackHole(await asyncWork.value) }
    }
    Benchmark("async work | async/await") { _ in
        for _ in 0..<links { blackHole(await Task { await addOneAsync(1) }.value) }
    }

    // (a) The same chain built alone: callbacks and async functions have nothing to build.
    Benchmark("chain build | Future") { _ in blackHole(futureChain()) }
    Benchmark("chain build | Seed 004") { _ in blackHole(seedChain()) }
    Benchmark("chain build | OpenCombine") { _ in blackHole(combineChain()) }

    // (b) 1,000 steps that each return a promise made by an operation.
    Benchmark("promise steps | Future") { _ in
        var chain = Guarantee(value: 0)
        for _ in 0..<links {
            chain = chain.then { value in Guarantee { $0.fulfill(value + 1) } }
        }
        chain.run { blackHole($0) }
    }
    Benchmark("promise steps | Callbacks") { _ in
        callbackChain(0, links) { blackHole($0) }
    }
    Benchmark("promise steps | Seed 004") { _ in
        var chain = SeedPromise<Int, Never> { $0(.success(0)) }
        for _ in 0..<links {
            chain = chain.then { value in SeedPromise { $0(.success(value + 1)) } }
        }
        chain.run { blackHole($0) }
    }
    Benchmark("promise steps | OpenCombine") { _ in
        var chain = Just(0).eraseToAnyPublisher()
        for _ in 0..<links {
            chain = chain.flatMap { value in
                OpenCombine.Future<Int, Never> { $0(.success(value + 1)) }
            }.eraseToAnyPublisher()
        }
        sinkOnDeepStack(chain)
    }
    Benchmark("promise steps | async/await") { _ in
        var value = 0
        for _ in 0..<links { value = await addOneContinuation(value) }
        blackHole(value)
    }

    // (c) Fan-out: 10,000 operations combined into one array, in order. Future has no
    // combinator yet, so its row is pending (see compare.sh).
    Benchmark("fan-out | Callbacks") { _ in
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
    Benchmark("fan-out | Seed 004") { _ in
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
    Benchmark("fan-out | OpenCombine") { _ in
        let subscription = Publishers.Sequence<[Int], Never>(sequence: Array(0..<fanOutWidth))
            .flatMap { index in OpenCombine.Future<Int, Never> { $0(.success(index + 1)) } }
            .collect()
            .sink { blackHole($0) }
        blackHole(subscription)
    }
    Benchmark("fan-out | async/await") { _ in
        let results = await withTaskGroup(of: (Int, Int).self) { group in
            for index in 0..<fanOutWidth {
                group.addTask { (index, await addOneAsync(index)) }
            }
            var results = [Int](repeating: 0, count: fanOutWidth)
            for await (index, value) in group { results[index] = value }
            return results
        }
        blackHole(results)
    }

    // (d) A 100,000-step recursive loop through a promise-returning step.
    Benchmark("recursive loop | Future") { _ in
        futureLoop(loopSteps).run { blackHole($0) }
    }
    Benchmark("recursive loop | Callbacks") { _ in
        onDeepStack { callbackLoop(loopSteps) { blackHole($0) } }
    }
    Benchmark("recursive loop | Seed 004") { _ in
        onDeepStack { seedLoop(loopSteps).run { blackHole($0) } }
    }
    Benchmark("recursive loop | OpenCombine") { _ in
        sinkOnDeepStack(combineLoop(loopSteps))
    }
    Benchmark("recursive loop | async/await") { _ in
        blackHole(await asyncLoop(loopSteps))
    }

    // (e) An error raised at the first of 1,000 links and handled at the end.
    Benchmark("error at first | Future") { _ in
        var chain = Promise<Int, Failure>(error: Failure())
        for _ in 0..<links { chain = chain.then { $0 + 1 } }
        chain.run(some: { blackHole($0) }, none: { blackHole($0) })
    }
    Benchmark("error at first | Callbacks") { _ in
        failingCallbackChain(.failure(Failure()), links) { blackHole($0) }
    }
    Benchmark("error at first | Seed 004") { _ in
        var chain = SeedPromise<Int, Failure> { $0(.failure(Failure())) }
        for _ in 0..<links { chain = chain.then { $0 + 1 } }
        chain.run(some: { blackHole($0) }, none: { blackHole($0) })
    }
    Benchmark("error at first | OpenCombine") { _ in
        var chain = Fail<Int, Failure>(error: Failure()).eraseToAnyPublisher()
        for _ in 0..<links { chain = chain.map { $0 + 1 }.eraseToAnyPublisher() }
        sinkOnDeepStack(chain)
    }
    Benchmark("error at first | async/await") { _ in
        do {
            var value = try await failFirst()
            for _ in 0..<links { value = try await addOneThrowing(value) }
            blackHole(value)
        } catch {
            blackHole(error)
        }
    }
}
