//: # Chaining and typed errors
//:
//: `then` takes a step that returns a value, a promise, or a `Result`; an error skips the steps
//: after it, to the one place that handles it. Errors are typed: a `Guarantee` (a
//: `Promise<Value, Never>`) cannot fail, and the compiler knows it.

import Dispatch

enum LookupError: Error { case notFound, empty }

func lookUp(id: Int) -> Promise<String, LookupError> {
    Promise { resolver in
        id == 909253 ? resolver.fulfill("The Loud Ones") : resolver.reject(.notFound)
    }
}

func greeting(for name: String) -> Guarantee<String> { Guarantee(value: "Hello, \(name)!") }

let steps = lookUp(id: 909253)
    .then { $0.uppercased() }  // a value
    .then { $0.isEmpty ? .failure(.empty) : .success($0) }  // a Result
    .then { greeting(for: $0) }  // a Guarantee: it joins a chain that can fail
print(try await steps.value ?? "")
//> Hello, THE LOUD ONES!

//: `map`, `flatMap`, `tryMap`, `compactMap`, `get`, `tap` and `done` name the common steps.

let length = lookUp(id: 909253).map { $0.count }.get { print("length", $0) }
_ = try await length.value
//> length 13

//: Handling errors: `recover` (to a guarantee when it cannot fail), `mapError`, `catch`, and
//: `ensure`, which runs however the chain ends.

let recovered: Guarantee<String> = lookUp(id: 1).recover { _ in "someone" }
print(await recovered.value ?? "")
//> someone

let handled = lookUp(id: 1)
    .done { print("found", $0) }
    .catch { print("could not find:", $0) }
    .ensure { print("done looking") }
_ = await handled.value
//> could not find: notFound
//> done looking

//: A step of another error type makes the chain's error `any Error`, and Swift warns you at that
//: `then` (convert it with `mapError` to keep the type); `eraseToAnyError()` says so on purpose.

let erased: Promise<String, any Error> = lookUp(id: 1).eraseToAnyError()
do { _ = try await erased.value } catch { print("any error:", error) }
//> any error: notFound

//: [Next: combining](@next)
