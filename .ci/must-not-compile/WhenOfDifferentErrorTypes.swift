// expect: error: 'when(fulfilled:)' is unavailable: when(fulfilled:) needs promises of one error type: give a Guarantee the others' with setFailureType(to:), convert the others with mapError(_:), or call eraseToAnyError() on each
// A combination fails with the first error of its members, so they must share one error type.
import Future

struct Item: Sendable {}
enum FetchError: Error { case offline }
enum CacheError: Error { case missing }

func fetch() -> Promise<Item, FetchError> { Promise(value: Item()) }
func cached() -> Promise<Item, CacheError> { Promise(value: Item()) }

let both = when(fulfilled: fetch(), cached())
