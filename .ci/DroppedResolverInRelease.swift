// An operation that lets its resolver go ends its run as cancelled, in a release build too. An
// optimized build releases a value at its last use, which may be inside the engine's lock, and
// the resolver's deinit then calls back into its run: this program hangs if the engine lets that
// happen (a watchdog turns the hang into a failure).
import Dispatch

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

struct Failed: Error {}

@main enum DroppedResolverInRelease {
    static func main() async throws {
        DispatchQueue.global().asyncAfter(deadline: .now() + 30) {
            print("a run whose operation let its resolver go never ended")
            exit(1)
        }
        var cancelled = 0
        for _ in 0..<1_000 {
            // Let go of as the operation returns, after, in a step, a combination's member, a share.
            if try await Promise<Int, Failed>({ _ in }).value == nil { cancelled += 1 }
            let later = Promise<Int, Failed> { resolver in
                DispatchQueue.global().async { withExtendedLifetime(resolver) {} }
            }
            if try await later.value == nil { cancelled += 1 }
            let step = Promise<Int, Failed>(value: 1).then { _ in Promise<Int, Failed> { _ in } }
            if try await step.value == nil { cancelled += 1 }
            let members = when(fulfilled: [Promise<Int, Failed>(value: 1), Promise { _ in }])
            if try await members.value == nil { cancelled += 1 }
            if try await Promise<Int, Failed>({ _ in }).share().value == nil { cancelled += 1 }
        }
        print("\(cancelled) of 5,000 runs whose operation let its resolver go ended as cancelled")
        if cancelled != 5_000 { exit(1) }
    }
}
