// expect: error: capture of 'log' with non-Sendable type 'Log' in a '@Sendable' closure
// A step may not share unsynchronized state with the code that built it.
import Future

final class Log {
    var lines: [String] = []
}

func logged(_ promise: Guarantee<Int>, into log: Log) -> Guarantee<Int> {
    promise.get { log.lines.append("\($0)") }
}
