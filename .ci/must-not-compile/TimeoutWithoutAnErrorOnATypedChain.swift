// expect: error: 'timeout' is unavailable: timeout(_:) fails with PromiseError.timedOut, which this chain's error type is not: give the error with timeout(_:orFailWith:) (on a Guarantee, after setFailureType(to:)), or call eraseToAnyError() first
// timeout(_:) fails with PromiseError.timedOut, which only a chain failing with `any Error` can hold.
import Future

enum FetchError: Error { case offline, slow }

func fetchCount() -> Promise<Int, FetchError> { Promise(value: 1) }

let bounded = fetchCount().timeout(.seconds(5))
