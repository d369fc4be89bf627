// Every scenario of the Scenarios module, measured by package-benchmark: time and mallocs.
// (Ratios between systems come from the Ratios executable, which runs them in pairs.)
//
// BENCHMARK_SMOKE=1 runs each benchmark once, as CI does so they never rot;
// BENCHMARK_MILLISECONDS sets how long each one runs (3,000 by default).

import Benchmark
import Scenarios

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

let smoke = getenv("BENCHMARK_SMOKE") != nil
let milliseconds = getenv("BENCHMARK_MILLISECONDS").flatMap { Int(String(cString: $0)) } ?? 3_000

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .mallocCountTotal],
        timeUnits: .nanoseconds,
        warmupIterations: smoke ? 0 : 3,
        maxDuration: .milliseconds(smoke ? 1 : milliseconds),
        maxIterations: smoke ? 1 : 10_000
    )
    for scenario in allScenarios() {
        Benchmark(scenario.name) { _ in await scenario.run() }
    }
}
