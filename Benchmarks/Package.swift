// swift-tools-version: 6.1
// Benchmarks for Future, against what a user would pick instead, measured in the same run.
// Its own package, so that its dependencies never reach the library's users.
import PackageDescription

let package = Package(
    name: "FutureBenchmarks",
    platforms: [.macOS(.v13)],
    dependencies: [
        .package(name: "Future", path: ".."),
        .package(
            url: "https://github.com/ordo-one/benchmark", from: "1.38.1",
            traits: ["MallocInterposer"]),
        .package(url: "https://github.com/OpenCombine/OpenCombine", from: "0.14.0"),
    ],
    targets: [
        // The nested-closure design of the tutorial Future grew from (seed 004), as a baseline.
        .target(name: "SeedPromise"),
        // Each scenario, for each system: what both executables below measure.
        .target(
            name: "Scenarios",
            dependencies: [
                .product(name: "Future", package: "Future"),
                "SeedPromise",
                .product(name: "OpenCombine", package: "OpenCombine"),
            ]
        ),
        // Time and mallocs of every scenario, with package-benchmark.
        .executableTarget(
            name: "FutureBenchmarks",
            dependencies: ["Scenarios", .product(name: "Benchmark", package: "benchmark")],
            path: "Benchmarks/FutureBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        // Future's ratio to each peer, from runs of the two interleaved in pairs.
        .executableTarget(name: "Ratios", dependencies: ["Scenarios"]),
        // One scenario run a given number of times, for callgrind's instruction counts.
        .executableTarget(name: "Instructions", dependencies: ["Scenarios"]),
        // The bytes a pending run holds, against a parked Task, measured in one process.
        .target(name: "HeapInUse"),
        .executableTarget(
            name: "PendingRuns",
            dependencies: [.product(name: "Future", package: "Future"), "HeapInUse"]),
    ]
)
