// expect: error: 'resolve' is unavailable: a (Value?, Error?) handler's error is any Error: convert it with resolve(_:_:mapError:), as in { resolver.resolve($0, $1, mapError: MyError.init) }, or make the promise a Promise<_, any Error> and mapError(_:) after
// A `(Value?, Error?)` callback passes `any Error`, which a typed resolver cannot take as it is.
import Future

struct Details: Sendable { var name: String }
enum APIError: Error { case failed(any Error) }

func getDetails(completion: @escaping @Sendable (Details?, (any Error)?) -> Void) {
    completion(Details(name: "a"), nil)
}

let details = Promise<Details, APIError> { getDetails(completion: $0.resolve) }
