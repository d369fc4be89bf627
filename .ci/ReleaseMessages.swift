// Each check of the library that a user's code can fail, run in a release build, where a
// `precondition` would stop with no message: .ci/run runs this program once for each case, and
// expects it to fail printing what went wrong and the fix.
import Dispatch

struct NetworkError: Error {}
struct LookupError: Error {}

func fetch(_ id: Int) -> Promise<Int, NetworkError> { Promise(value: id) }
func parsed<Failure>(_ chain: Promise<Int, Failure>) -> Promise<Int, Failure> {
    chain.then { _ in Result<Int, NetworkError>.success(1) }
}

@main enum ReleaseMessages {
    static let failures: [String: @Sendable () -> Void] = [
        "join": { _ = Promise<Int, LookupError>(value: 1).then { fetch($0) } },
        "join-in-generic-code": { _ = parsed(Guarantee(value: 1)) },
        "when-limit": { _ = when(fulfilled: [fetch(1)], concurrently: 0) },
        "when-resolved-limit": { _ = when(resolved: [fetch(1)], concurrently: 0) },
        "when-resolved-until-limit": {
            _ = when(resolved: [fetch(1)], concurrently: 0, until: Guarantee())
        },
        "thenMap-limit": {
            _ = Promise<[Int], NetworkError>(value: [1]).thenMap(concurrently: 0, fetch)
        },
        "retry-attempts": { _ = fetch(1).retry(0) },
        "retry-on-a-clock-attempts": { _ = fetch(1).retry(0, clock: ManualClock()) },
        "advance-back": {
            let clock = ManualClock(now: ManualClock.Instant(offset: .seconds(5)))
            clock.advance(to: ManualClock.Instant(offset: .seconds(1)))
        },
    ]

    static func main() {
        guard CommandLine.arguments.count == 2, let fail = failures[CommandLine.arguments[1]] else {
            print(failures.keys.sorted().joined(separator: " "))
            return
        }
        fail()
        print("\(CommandLine.arguments[1]): the check did not stop the program")
    }
}
