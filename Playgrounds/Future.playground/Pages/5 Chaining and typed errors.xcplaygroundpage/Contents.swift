//: # Chaining and typed errors
//:
//: `map` takes a step that returns a value; `then`, a step that returns a promise or a `Result`.
//: An error skips the steps after it, to the one place that handles it. Errors are typed: a
//: `Guarantee` (a `Promise<Value, Never>`) cannot fail, and the compiler knows it.

import Dispatch

enum LookupError: Error { case notFound, empty }

func lookUp(id: Int) -> Promise<String, LookupError> {
    Promise { resolver in
        id == 909253 ? resolver.fulfill("The Loud Ones") : resolver.reject(.notFound)
    }
}

func greeting(for name: String) -> Guarantee<String> { Guarantee(value: "Hello, \(name)!") }

let steps = lookUp(id: 909253)
    .map { $0.uppercased() }  // a value
    .then { $0.isEmpty ? .failure(LookupError.empty) : .success($0) }  // a Result
    .then { greeting(for: $0) }  // a Guarantee: it joins a chain that can fail
print(try await steps.value ?? "")
//> Hello, THE LOUD ONES!

//: Why `map` for values: Swift weighs each closure against every form of the method it is given
//: to, and `then` has three, so a long chain of `then` closures that return values can take
//: seconds to compile, or fail with "unable to type-check this expression in reasonable time".
//: `map` has one form. If Swift gives up on a chain, use `map` for its values, or split it into
//: `let`s. (`then { $0.uppercased() }` works too, only slower to compile.) A `Result` or promise
//: made in a closure names its error type, as `LookupError.empty` does above.
//:
//: `flatMap`, `tryMap`, `compactMap`, `get`, `tap` and `done` name other common steps.

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

//: A step of another error type than the chain's stops the program where the chain is built,
//: with a message that names both types: convert the step's error with `mapError`, or make the
//: chain's error `any Error` on purpose with `eraseToAnyError()`, which takes steps of any type.

let erased: Promise<String, any Error> = lookUp(id: 1).eraseToAnyError()
do { _ = try await erased.value } catch { print("any error:", error) }
//> any error: notFound

//: [Next: combining](@next)
