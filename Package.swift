// swift-tools-version: 6.2
import PackageDescription

let package = Package(
    name: "Future",
    platforms: [.macOS(.v13), .iOS(.v16), .tvOS(.v16), .watchOS(.v9), .visionOS(.v1)],
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
