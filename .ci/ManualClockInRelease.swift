// A manual clock's awaited advance, in a release build: the main-actor steps that a fired timer
// queued have run when it returns, a `catch(on: .main)` after a `done(on: .main)` included (in
// release builds, the main actor's jobs passed such hops, which debug builds never showed).
import Dispatch

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

struct Failed: Error {}

@MainActor final class Screen {
    var text = ""
}

@main @MainActor enum ManualClockInRelease {
    static func main() async {
        var misses = 0
        let rounds = 500
        for round in 0..<rounds {
            let clock = ManualClock()
            let screen = Screen()
            let work =
                round.isMultiple(of: 2)
                ? Promise<Int, Failed>(error: Failed()) : Promise<Int, Failed>(value: round)
            work.delay(.seconds(1), clock: clock)
                .done(on: .main) { screen.text = "\($0)" }
                .catch(on: .main) { _ in screen.text = "failed" }
                .run()
            await clock.advance(by: .seconds(1))
            if screen.text != (round.isMultiple(of: 2) ? "failed" : "\(round)") { misses += 1 }
        }
        print("\(rounds - misses) of \(rounds) advances returned after the main-actor steps")
        if misses > 0 { exit(1) }
    }
}
