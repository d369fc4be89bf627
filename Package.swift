// swift-tools-version: 6.2
import PackageDescription

let package = Package(
    name: "Future",
    products: [
        .library(name: "Future", targets: ["Future"])
    ],
    targets: [
        .target(name: "Future"),
        .executableTarget(
            name: "itunes-lookup", dependencies: ["Future"], path: "Examples/ITunesLookup"),
        .testTarget(
            name: "FutureTests",
            dependencies: ["Future"],
            resources: [.copy("Fixtures")]
        ),
    ]
)
