// expect: error: 'firstly' is unavailable: a firstly closure cannot throw: return Promise(error:) instead
// A firstly closure returns Promise(error:) rather than throwing.
import Future

struct Invalid: Error {}

func login() -> Promise<Int, any Error> { Promise(value: 1) }

let session = firstly { () throws -> Promise<Int, any Error> in
    guard Bool.random() else { throw Invalid() }
    return login()
}
