// expect: error: 'after(seconds:)' is unavailable: Future's after takes a Duration: after(.seconds(1)), after(.milliseconds(500))
// PromiseKit's after(seconds:) is after(.seconds(_:)) here.
import Future

func poll() -> Promise<Int, any Error> { Promise(value: 1) }

let status = after(seconds: 1).then { poll() }
