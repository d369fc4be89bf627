//: # Swift concurrency
//:
//: Promises are `Sendable`, and so is every closure they keep: a promise is a recipe, and two runs
//: may take the same step at once on two threads, so Swift checks what a step touches. Await a
//: promise from async code, and make one from async code.

import Dispatch

enum LookupError: Error { case notFound }

func lookUp(id: Int) -> Promise<String, LookupError> {
    Promise { resolver in
        DispatchQueue.global().async {
            id == 909253 ? resolver.fulfill("The Loud Ones") : resolver.reject(.notFound)
        }
    }
}

//: `value` throws the promise's own error type, and is `nil` if the run ended by cancellation;
//: `result` gives a `Result?`. (A guarantee's `value` needs no `try`.)
print(try await lookUp(id: 909253).value ?? "cancelled")
//> The Loud Ones
if case .failure(let error)? = await lookUp(id: 1).result { print("failed:", error) }
//> failed: notFound

//: Cancelling the awaiting task cancels the run: its `onCancel` handlers and `ensure` steps run,
//: then the await returns `nil`. An await never hangs. (`pending()` gives a promise and the
//: resolver that settles it from outside, as the Sharing page shows: here, a signal that the
//: work is under way.)
let (started, start) = Guarantee<Void>.pending()
let endless = Guarantee<Int> { resolver in
    let sleeper = Task {
        try? await Task.sleep(for: .seconds(60))
        resolver.fulfill(1)
    }
    resolver.onCancel { _ in sleeper.cancel() }
    start.fulfill()
}.ensure { print("ensure ran") }
let task = Task { await endless.value }
_ = await started.value  // the work is under way
task.cancel()
print("the await returned:", await task.value as Any)
//> ensure ran
//> the await returned: nil

//: Async code as a promise: each run starts a Task, and cancelling the run cancels that Task.
let slowSquare = Guarantee<Int> {
    try? await Task.sleep(for: .milliseconds(10))
    return 12 * 12
}
print(await slowSquare.value ?? 0)
//> 144

//: What Swift 6 checks for you: a step that mutated a captured `var` would not compile (two runs
//: could race on it), nor would a completion that set `@MainActor` state. From the main actor,
//: await instead: `text = (try? await lookUp(id: 909253).value) ?? ""`.

@MainActor final class ViewModel {
    var text = ""
    func load() async { text = (try? await lookUp(id: 909253).value) ?? "" }
}
let model = ViewModel()
await model.load()
print(model.text)
//> The Loud Ones

//: [Next: sharing](@next)
