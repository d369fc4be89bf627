// expect: error: 'then' is deprecated: the step's promise fails with another error type, so the chain's error becomes `any Error`; convert it with mapError(_:) (or setFailureType(to:) on a Guarantee), or call eraseToAnyError() to say so
// As StepResultOfAnotherErrorType.swift, for a step that returns a promise.
import Future

struct LookupError: Error {}
struct FetchError: Error {}

func fetch(_ id: String) -> Promise<Int, FetchError> { Promise(value: id.count) }

func lookUp() -> Promise<String, LookupError> { Promise(value: "909253") }

let count = lookUp().then { fetch($0) }
