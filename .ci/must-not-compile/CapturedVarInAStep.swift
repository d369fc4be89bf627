// expect: error: mutation of captured var 'count' in concurrently-executing code
// Two runs of one promise may take the same step at once, on two threads.
import Future

func countRuns(_ promise: Guarantee<Int>) -> Guarantee<Int> {
    var count = 0
    return promise.map { value in
        count += 1
        return value
    }
}
