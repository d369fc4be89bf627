// expect: error: 'timeout(_:clock:)' is unavailable: timeout(_:clock:) fails with PromiseError.timedOut, which this chain's error type is not: give the error with timeout(_:orFailWith:clock:) (on a Guarantee, after setFailureType(to:)), or call eraseToAnyError() first
// A typed chain says which of its errors a timeout is, with a clock as without one.
import Future

enum FetchError: Error { case offline, slow }

func fetchCount() -> Promise<Int, FetchError> { Promise(value: 1) }

let clock = ContinuousClock()
let count = fetchCount().timeout(.seconds(5), clock: clock)
