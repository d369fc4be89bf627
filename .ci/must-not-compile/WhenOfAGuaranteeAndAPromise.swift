// expect: error: 'when(fulfilled:)' is unavailable: when(fulfilled:) needs promises of one error type: give a Guarantee the others' with setFailureType(to:), convert the others with mapError(_:), or call eraseToAnyError() on each
// A guarantee among promises that can fail takes their error type first.
import Future

struct User: Sendable {}
enum FetchError: Error { case offline }

func fetchUser(_ id: Int) -> Promise<User, FetchError> { Promise(value: User()) }

let both = when(fulfilled: Guarantee(value: 1), fetchUser(1))
