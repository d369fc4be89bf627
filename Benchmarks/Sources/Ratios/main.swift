// Future's ratio to each peer, scenario by scenario, measured in pairs.
//
// A shared machine's speed drifts by tens of percent over seconds, so two benchmarks measured
// a minute apart compare badly. Here each pair runs one iteration of Future's scenario and one
// of the peer's, back to back (in alternating order), and the ratio is the median of the pairs'
// ratios: drift slower than a pair cancels out. The pairs of each scenario are spread over
// several rounds through all the scenarios, so that a slower minute does not fall on one alone.
// Pairs of synchronous scenarios run on one thread (the deep stack's, which the designs that
// recurse need), so that both halves of a pair run on the same core.
//
// Prints one line per peer and scenario, tab-separated: "<scenario> ×<length> | <system>", the
// median ratio (the peer's time over Future's: above 1, Future is faster), the number of pairs,
// and the median nanoseconds of an iteration of the peer and of Future in those pairs.
//
//   swift run -c release Ratios               # 2 rounds, 1.2 s for each peer and scenario
//   ROUNDS=4 RATIO_MILLISECONDS=3000 swift run -c release Ratios
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

/// Whether to go on measuring pairs: at least 4, then while the round's budget lasts.
func more(_ pairs: Int, since start: UInt64) -> Bool {
    !smoke && pairs < 10_000
        && (pairs < 4 || DispatchTime.now().uptimeNanoseconds - start < budget)
}

/// The peer's time and Future's in each pair measured in a round, Future running first in
/// every other pair.
func measure(_ peer: Scenario, against future: Scenario) async -> [(peer: Double, future: Double)] {
    var times: [(peer: Double, future: Double)] = []
    let start = DispatchTime.now().uptimeNanoseconds
    switch (peer.body, future.body) {
    case (.sync(let peer), .sync(let future)), (.deep(let peer), .sync(let future)):
        DeepStack.shared.run {
            for _ in 0..<(smoke ? 0 : 2) {
                future()
                peer()
            }
            repeat {
                let peerFirst = times.count % 2 == 1
                let before = peerFirst ? nanoseconds(peer) : 0
                let futureTime = nanoseconds(future)
                let peerTime = peerFirst ? before : nanoseconds(peer)
                times.append((peerTime, futureTime))
            } while more(times.count, since: start)
        }
    default:
        for _ in 0..<(smoke ? 0 : 2) {
            await future.run()
            await peer.run()
        }
        repeat {
            let peerFirst = times.count % 2 == 1
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

let task = Task.detached {
    var measured: [String: [(peer: Double, future: Double)]] = [:]
    var names: [String] = []
    for _ in 0..<rounds {
        for (peer, future) in scenarioPairs() {
            if measured[peer.name] == nil { names.append(peer.name) }
            measured[peer.name, default: []] += await measure(peer, against: future)
        }
    }
    for name in names {
        let times = measured[name]!
        let ratio = median(times.map { $0.peer / $0.future })
        let (peer, future) = (median(times.map(\.peer)), median(times.map(\.future)))
        print("\(name)\t\(ratio)\t\(times.count)\t\(peer)\t\(future)")
    }
}
await task.value
