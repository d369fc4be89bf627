// expect: error: 'then' is unavailable: a then closure cannot throw: return Promise(error:) instead, or throw in a map or tryMap step before it
// A then closure returns Promise(error:) rather than throwing.
import Future

struct Invalid: Error {}
struct User: Sendable { var id: Int }

func fetchUser(_ id: Int) -> Promise<User, any Error> { Promise(value: User(id: id)) }

let user = fetchUser(1).then { user -> Promise<User, any Error> in
    guard user.id > 0 else { throw Invalid() }
    return fetchUser(user.id + 1)
}
