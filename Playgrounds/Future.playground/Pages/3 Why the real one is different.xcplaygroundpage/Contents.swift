//: # Why the real one is different
//:
//: The 30-line promise runs each step inside the callback of the step before: fine for a short
//: chain, but the stack grows with every step, and nothing can stop a run once it started.
//: Future keeps the same lazy recipe and runs it differently.

import Dispatch
import Foundation

/// The 30-line promise again, cut to what this page needs.
struct Toy<T> {
    let operation: (@escaping (T) -> Void) -> Void
    func run(_ completion: @escaping (T) -> Void) { operation(completion) }
    func then<U>(_ f: @escaping (T) -> Toy<U>) -> Toy<U> {
        Toy<U> { completion in run { f($0).run(completion) } }
    }
}

//: ## A deep loop
//: A loop that goes on through `then` (polling a server until it answers, say) nests one more
//: call at every step. Measure the toy's stack from here to the last step of a 2,000-step loop:

func toyLoop(_ n: Int) -> Toy<Int> {
    n == 0 ? Toy { $0(0) } : Toy { $0(n) }.then { toyLoop($0 - 1) }
}

func stackBytes(ofToyLoop steps: Int) -> Int {
    var here = 0
    let top = withUnsafeMutablePointer(to: &here) { Int(bitPattern: $0) }
    var deepest = 0
    toyLoop(steps).run { _ in
        var there = 0
        deepest = top - withUnsafeMutablePointer(to: &there) { Int(bitPattern: $0) }
    }
    return deepest
}

let perStep = max(1, stackBytes(ofToyLoop: 2_000) / 2_000)
print("every step of the toy's loop takes more stack:", perStep > 1)
print("a 512 KiB stack overflows before 100,000 steps:", 512 * 1024 / perStep < 100_000)
//> every step of the toy's loop takes more stack: true
//> a 512 KiB stack overflows before 100,000 steps: true

//: Future runs a chain from a loop over its steps, and a step that returns a promise hands its
//: steps to that loop instead of calling it: a million steps fit on a 512 KiB thread (the size of
//: a Dispatch worker's stack).

func loop(_ n: Int) -> Guarantee<Int> {
    n == 0 ? .value(0) : Guarantee(value: n).then { loop($0 - 1) }
}

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
//: Future's `run` returns a handle. Cancelling it tells the work (its `onCancel` handlers), runs
//: the `ensure` steps, and delivers nothing.

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

//: [Next: making and running promises](@next)
