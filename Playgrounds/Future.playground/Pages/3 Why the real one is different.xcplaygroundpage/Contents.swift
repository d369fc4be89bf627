//: # Why the real one is different
//:
//: The 30-line promise runs each step inside the callback of the step before: fine for a short
//: chain, but the stack grows with every step, nothing can stop a run once it started, and
//: nothing says which errors a chain still owes. Future keeps the same lazy recipe and runs it
//: differently. This page shows the three differences by running them; the pages after it tour
//: the library.

import Dispatch
import Foundation

//: ## The real promise, in brief
//: Its type is `Promise<Value, Failure>`, with the error type in it, and a `Guarantee<Value>` is
//: a `Promise<Value, Never>`: one that cannot fail. `Promise { resolver in … }` makes one from an
//: operation, as the toy's `Promise { callback in … }` does; the operation reports a value with
//: `resolver.fulfill(_:)`, or an error with `resolver.reject(_:)`. `Guarantee(value:)`, or
//: `.value(_:)` where the type is known, makes one that succeeds at once. `then` chains a step,
//: and `run(some:)` runs a guarantee and gets its value.

let answer = Guarantee(value: 41).then { Guarantee(value: $0 + 1) }
answer.run(some: { print("the answer:", $0) })
//> the answer: 42

/// The 30-line promise again, cut to what this page needs, counting how deep its steps nest.
@MainActor struct Toy<T> {
    let operation: (@escaping (T) -> Void) -> Void

    func run(_ completion: @escaping (T) -> Void) { operation(completion) }

    func then<U>(_ f: @escaping (T) -> Toy<U>) -> Toy<U> {
        Toy<U> { completion in
            nesting.now += 1
            nesting.deepest = max(nesting.deepest, nesting.now)
            run { f($0).run(completion) }
            nesting.now -= 1
        }
    }
}

/// How many of the toy's steps are running, one inside the other, and the most there were.
var nesting = (now: 0, deepest: 0)

//: ## A deep loop
//: A loop that goes on through `then` (polling a server until it answers, say) nests one more
//: run inside the last at every step of the toy, each on the stack of the one before:

@MainActor func toyLoop(_ n: Int) -> Toy<Int> {
    n == 0 ? Toy { $0(0) } : Toy { $0(n) }.then { toyLoop($0 - 1) }
}

toyLoop(2_000).run { _ in }
print("the toy's 2,000-step loop ran \(nesting.deepest) steps deep, each inside the one before")
//> the toy's 2,000-step loop ran 2000 steps deep, each inside the one before

//: So on the 512 KiB stack of a Dispatch worker, the toy's loop overflows after some thousands of
//: steps (this page does not try: the crash would end it). Future runs a chain from a loop over
//: its steps, and a step that returns a promise hands its steps to that loop instead of calling
//: it: a million steps fit on a 512 KiB thread. The same loop with Future is in the playground's
//: Sources folder (`DeepLoop.swift`), where Xcode does not record each of its million steps for
//: the results sidebar, as it does on a page:
//:
//:     func loop(_ n: Int) -> Guarantee<Int> {
//:         n == 0 ? .value(0) : Guarantee(value: n).then { loop($0 - 1) }
//:     }

let finished = DispatchSemaphore(value: 0)
let thread = Thread {
    loop(1_000_000).run(some: {
        print("Future ran 1,000,000 steps on a 512 KiB thread, down to", $0)
        finished.signal()
    })
}
thread.stackSize = 512 * 1024
thread.start()
finished.wait()
//> Future ran 1,000,000 steps on a 512 KiB thread, down to 0

//: ## Cancelling
//: The toy's `run` returns nothing: once started, the work runs to its end, wanted or not.
//: Future's `run` returns a handle, whose `cancel()` stops the run. The work hears it through
//: `resolver.onCancel { … }`, which registers what to do then; `ensure { … }` adds a step that
//: runs however the run ends, cancelled included; and nothing is delivered.

let work = Guarantee<Int> { resolver in
    let sleeper = Task {
        try? await Task.sleep(for: .seconds(60))
        resolver.fulfill(1)
    }
    resolver.onCancel { _ in
        sleeper.cancel()
        print("the work heard it and stopped")
    }
}
let handle = work.ensure { print("ensure ran: clean up") }.run(some: { print("never", $0) })
handle.cancel()
//> the work heard it and stopped
//> ensure ran: clean up

//: ## Typed errors
//: The toy's error is whatever the callback passes, and nothing checks that someone handles it.
//: Future's failure type is part of the promise's type. `resolver.reject(_:)` fails the work;
//: `recover { … }` turns the error into a value, and leaves a `Guarantee`, which cannot fail.

enum LookupError: Error { case notFound }

let lookup = Promise<String, LookupError> { resolver in resolver.reject(.notFound) }
let handled: Guarantee<String> = lookup.recover { error in "nobody (\(error))" }
handled.run(some: { print("found", $0) })
//> found nobody (notFound)

//: Only a guarantee has `run(some:)`: on `lookup`, which can still fail, the compiler refuses it
//: and says to handle the error first, or to run it with `run(some:none:)`, which takes both.

//: [Next: making and running promises](@next)
