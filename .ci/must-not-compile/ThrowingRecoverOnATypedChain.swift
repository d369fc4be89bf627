// expect: error: 'recover' is unavailable: on a chain with a typed error, a recover closure cannot throw: return Promise(error:) instead, or erase the chain's error type first
// On a chain with a typed error, a recover closure returns Promise(error:) rather than throwing.
import Future

enum FetchError: Error { case offline, denied }

func fetchCount() -> Promise<Int, FetchError> { Promise(value: 1) }

let count = fetchCount().recover { error -> Promise<Int, FetchError> in
    guard error == .offline else { throw error }
    return fetchCount()
}
