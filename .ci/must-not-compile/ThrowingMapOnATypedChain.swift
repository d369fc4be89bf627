// expect: error: 'map' is unavailable: on a chain with a typed error, a map closure that throws is a tryMap step: write its throws(Failure), or erase the chain's error type first
// On a chain with a typed error, a closure that throws is a tryMap step with its throws(…) written.
import Future

enum FetchError: Error { case invalid }
struct User: Sendable { var id: Int }

func fetchUser(_ id: Int) -> Promise<User, FetchError> { Promise(value: User(id: id)) }

let id = fetchUser(1).map { user -> Int in
    guard user.id > 0 else { throw FetchError.invalid }
    return user.id
}
