// Runs one scenario a given number of times, for valgrind's callgrind to count its
// instructions: `instructions.sh` runs it twice, with two counts, and divides the difference,
// so that the process's start-up and the scenario's building drop out.
//
//   swift build -c release --product Instructions
//   valgrind --tool=callgrind .build/release/Instructions "fan-out ×10000 | Future" 3

import Dispatch
import Scenarios

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

let arguments = CommandLine.arguments
guard arguments.count == 3, let iterations = Int(arguments[2]) else {
    fatalError("usage: Instructions \"<scenario> ×<length> | <system>\" <iterations>")
}
guard let scenario = allScenarios().first(where: { $0.name == arguments[1] }) else {
    fatalError("no scenario named \(arguments[1])")
}
let done = DispatchSemaphore(value: 0)
Task.detached {
    for _ in 0..<iterations { await scenario.run() }
    done.signal()
}
done.wait()
