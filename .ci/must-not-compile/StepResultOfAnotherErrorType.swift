// expect: error: 'then' is deprecated: the step's result fails with another error type, so the chain's error becomes `any Error`; convert it with mapError(_:), or call eraseToAnyError() on the chain to say so
// Swift cannot reject this `then` while the value-taking `then` exists, so it warns, with the fix;
// CI, like any project built with warnings as errors, turns the warning into this error.
import Future

struct LookupError: Error {}
struct ParseError: Error {}

func parse(_ data: String) -> Result<Int, ParseError> { .success(data.count) }

func lookUp() -> Promise<String, LookupError> { Promise(value: "909253") }

let count = lookUp().then(parse)
