//: # Making and running promises
//:
//: A `Promise<Value, Failure>` describes work; a terminal runs it. Building runs nothing, and
//: every run runs the work again.

import Dispatch

enum LookupError: Error { case notFound }

//: An operation reports its outcome through a resolver, at once or later, from any thread:

func lookUp(id: Int) -> Promise<String, LookupError> {
    Promise { resolver in
        print("looking up \(id)")
        DispatchQueue.global().async {
            id == 909253 ? resolver.fulfill("The Loud Ones") : resolver.reject(.notFound)
        }
    }
}

let name = lookUp(id: 909253)
print("built, not run")
print(try await name.value ?? "cancelled")
print(try await name.value ?? "cancelled")
//> built, not run
//> looking up 909253
//> The Loud Ones
//> looking up 909253
//> The Loud Ones

//: Other ways to make one: a value or an error at once, a throwing function called on every run,
//: async code (each run starts a Task), and `firstly` to line a chain up.

let one = Promise<Int, LookupError>(value: 1)
let failed = Promise<Int, LookupError>(error: .notFound)
let parsed = Promise<Int, LookupError>(catching: { () throws(LookupError) in
    guard let number = Int("42") else { throw .notFound }
    return number
})
let computed = Guarantee<Int> {
    await Task.yield()
    return 7
}
print(try await one.value ?? 0, try await parsed.value ?? 0, await computed.value ?? 0)
//> 1 42 7
do {
    _ = try await failed.value
} catch {
    print("failed:", error)  // `error` is a LookupError: errors are typed
}
//> failed: notFound

//: Terminals: `run(some:none:)` (the tutorial's), `run(_:)` with a `Result`, and `run()` for a
//: guarantee run for its effects. Each returns a handle that cancels the run; dropping it does not.
//: The page awaits the callback's end with a continuation, as async code waits for any callback
//: (blocking on a semaphore here would block the async code; Swift 6 refuses it on Apple systems):

await withCheckedContinuation { (ran: CheckedContinuation<Void, Never>) in
    lookUp(id: 1).run(
        some: {
            print("found", $0)
            ran.resume()
        },
        none: {
            print("failed:", $0)
            ran.resume()
        })
}
//> looking up 1
//> failed: notFound

//: [Next: chaining and typed errors](@next)
