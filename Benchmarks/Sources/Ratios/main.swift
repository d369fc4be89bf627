// Future's ratio to each peer, scenario by scenario, measured in pairs.
//
// A shared machine's speed drifts by tens of percent over seconds, so two benchmarks measured
// a minute apart compare badly. Here each pair runs one iteration of Future's scenario and one
// of the peer's, back to back (in alternating order): drift slower than a pair cancels out.
// Pairs of synchronous scenarios run on one thread (the deep stack's, which the designs that
// recurse need), so that both halves of a pair run on the same core.
//
// The measurement goes round all the scenarios several times, building every scenario anew in
// each round, after one warm-up pair (skipping it for slow scenarios biased them: the seed
// design's 100,000-step loop moved by 22 %). Where a build lands in memory matters: some chains
// run at one of two speeds (up to 2.8 times apart) depending on it, the same in every pair of a
// round. So a round gives one ratio, the median of its pairs, and the result is the geometric
// mean of the rounds' ratios: it converges as rounds add up, where a median over pooled pairs
// would jump from one speed to the other.
//
// Prints one line per peer and scenario, tab-separated: "<scenario> ×<length> | <system>", the
// ratio (the peer's time over Future's: above 1, Future is faster), the number of pairs, the
// nanoseconds of an iteration of the peer and of Future (geometric means of the rounds'
// medians), and each round's ratio, space-separated.
//
//   swift run -c release Ratios               # 2 rounds, 1.2 s for each peer and scenario
//   ROUNDS=20 RATIO_MILLISECONDS=400 swift run -c release Ratios   # what compare.sh runs
//   RATIO_FILTER="chain run" swift run -c release Ratios   # the scenarios so named
//   BENCHMARK_SMOKE=1 swift run -c release Ratios   # one pair each: proves they run

import Dispatch
import Scenarios

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

let smoke = getenv("BENCHMARK_SMOKE") != nil
func setting(_ name: String, _ otherwise: Int) -> Int {
    getenv(name).flatMap { Int(String(cString: $0)) } ?? otherwise
}
let rounds = smoke ? 1 : setting("ROUNDS", 2)
let budget = UInt64(setting("RATIO_MILLISECONDS", 1_200) / rounds) * 1_000_000  // a round's
let filter = getenv("RATIO_FILTER").map { String(cString: $0) }  // names that contain it

func asyncNanoseconds(_ run: () async -> Void) async -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    await run()
    return Double(DispatchTime.now().uptimeNanoseconds - start)
}

func nanoseconds(_ run: () -> Void) -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    run()
    return Double(DispatchTime.now().uptimeNanoseconds - start)
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    let middle = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

/// Whether to go on measuring pairs: at least one, then while the round's budget lasts.
func more(_ pairs: Int, since start: UInt64) -> Bool {
    !smoke && pairs < 10_000 && DispatchTime.now().uptimeNanoseconds - start < budget
}

/// The peer's time and Future's in each pair measured in round `round`, after a warm-up pair,
/// Future running first in every other pair (in every other round, for a scenario so slow that
/// a round has one pair).
func measure(
    _ peer: Scenario, against future: Scenario, round: Int
) async -> [(peer: Double, future: Double)] {
    var times: [(peer: Double, future: Double)] = []
    let start = DispatchTime.now().uptimeNanoseconds
    switch (peer.body, future.body) {
    case (.sync(let peer), .sync(let future)), (.deep(let peer), .sync(let future)):
        DeepStack.shared.run {
            if !smoke {
                future()
                peer()
            }
            repeat {
                let peerFirst = (times.count + round) % 2 == 1
                let before = peerFirst ? nanoseconds(peer) : 0
                let futureTime = nanoseconds(future)
                let peerTime = peerFirst ? before : nanoseconds(peer)
                times.append((peerTime, futureTime))
            } while more(times.count, since: start)
        }
    default:
        if !smoke {
            await future.run()
            await peer.run()
        }
        repeat {
            let peerFirst = (times.count + round) % 2 == 1
            let before = peerFirst ? await asyncNanoseconds(peer.run) : 0
            let futureTime = await asyncNanoseconds(future.run)
            let peerTime = peerFirst ? before : await asyncNanoseconds(peer.run)
            times.append((peerTime, futureTime))
        } while more(times.count, since: start)
    }
    return times
}

/// Each peer's scenario with Future's of the same name and length, made anew: the chains a
/// scenario builds beforehand get a new place in memory, which matters to some of the peers.
func scenarioPairs() -> [(peer: Scenario, future: Scenario)] {
    let scenarios = allScenarios()
    let futures = Dictionary(
        uniqueKeysWithValues: scenarios.filter { $0.system == "Future" }.map {
            ("\($0.scenario) ×\($0.length)", $0)
        })
    return scenarios.compactMap { peer in
        guard peer.system != "Future", filter.map({ peer.name.contains($0) }) ?? true
        else { return nil }
        return futures["\(peer.scenario) ×\(peer.length)"].map { (peer, $0) }
    }
}

func geometricMean(_ values: [Double]) -> Double {
    exp(values.map { log($0) }.reduce(0, +) / Double(values.count))
}

let task = Task.detached {
    var measured: [String: [[(peer: Double, future: Double)]]] = [:]
    var names: [String] = []
    for round in 0..<rounds {
        for (peer, future) in scenarioPairs() {
            if measured[peer.name] == nil { names.append(peer.name) }
            measured[peer.name, default: []].append(
                await measure(peer, against: future, round: round))
        }
    }
    for name in names {
        let rounds = measured[name]!
        let ratios = rounds.map { round in median(round.map { $0.peer / $0.future }) }
        let medians = rounds.map { round in
            (median(round.map(\.peer)), median(round.map(\.future)))
        }
        let (peer, future) = (geometricMean(medians.map(\.0)), geometricMean(medians.map(\.1)))
        let count = rounds.map(\.count).reduce(0, +)
        let each = ratios.map { "\($0)" }.joined(separator: " ")
        print("\(name)\t\(geometricMean(ratios))\t\(count)\t\(peer)\t\(future)\t\(each)")
    }
}
await task.value
