//: # Combining
//:
//: Combinators run many promises at once and keep their input order, whatever order they finish
//: in; they cancel what they no longer need. A combination is a promise like any other: lazy,
//: run anew each time, cancellable.

import Dispatch

enum LookupError: Error { case notFound }

/// A square, computed on another thread after `delay` milliseconds.
func square(_ n: Int, after delay: Int = 0) -> Promise<Int, LookupError> {
    Promise { resolver in
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(delay)) {
            n < 0 ? resolver.reject(.notFound) : resolver.fulfill(n * n)
        }
    }
}

//: Every value, in input order (the first finishes last):
print(try await when(fulfilled: [square(1, after: 30), square(2), square(3)]).value ?? [])
//> [1, 4, 9]

//: Promises of different types, as a tuple; a dictionary; and at most two running at once:
if let (word, number) = try await when(fulfilled: Promise(value: "four"), square(2)).value {
    print(word, number)
}
//> four 4
print(
    try await when(fulfilled: ["a": square(1), "b": square(2)]).value?.sorted { $0.key < $1.key }
        ?? [])
//> [(key: "a", value: 1), (key: "b", value: 4)]
print(try await when(fulfilled: (1...5).map { square($0) }, concurrently: 2).value ?? [])
//> [1, 4, 9, 16, 25]

//: The first error decides a `when`; `when(resolved:)` waits for every outcome and never fails:
do { _ = try await when(fulfilled: [square(1), square(-1)]).value } catch {
    print("failed:", error)
}
//> failed: notFound
let outcomes = await when(resolved: [square(1), square(-1)]).value ?? []
print(outcomes.map { (try? $0.get()).map(String.init) ?? "failed" })
//> ["1", "failed"]

//: `any` waits for every outcome and fails only if all failed; `race` takes the first to settle;
//: `race(fulfilled:)` the first value, skipping errors:
print(try await any([square(-1), square(3)]).value?.count ?? 0)
//> 2
print(try await race([square(4, after: 60_000), square(5)]).value ?? 0)
//> 25
print(try await race(fulfilled: [square(-1), square(6, after: 20)]).value ?? 0)
//> 36

//: `thenMap` makes a promise of each element and joins them:
print(try await Promise<[Int], LookupError>(value: [7, 8]).thenMap { square($0) }.value ?? [])
//> [49, 64]

//: On a promise of a list, PromiseKit's helpers: each a `map` or a `thenMap` of what a
//: sequence does:
let numbers = Promise<[Int], LookupError>(value: [3, -1, 2])
print(try await numbers.filterValues { $0 > 0 }.mapValues { $0 * 10 }.sortedValues().value ?? [])
//> [20, 30]
let pairs = numbers.filterValues { $0 > 0 }.thenFlatMap { n in square(n).map { [n, $0] } }
print(try await pairs.value ?? [])
//> [3, 9, 2, 4]

//: `any` of promises of different types gives a tuple of `Result`s:
if let (word, number) = try await any(Promise(value: "four"), square(-1)).value {
    print(try word.get(), (try? number.get()).map(String.init) ?? "failed")
}
//> four failed

//: A failed `when` cancels the members still running; `ignoringCancel()` lets a member's work
//: finish anyway, as an upload should (Tomorrowland's `cancelOnFailure: false`):
let (network, respond) = Guarantee<Void>.pending()
let upload = network.map { print("uploaded") }.setFailureType(to: LookupError.self)
do {
    _ = try await when(fulfilled: [upload.ignoringCancel(), square(-1).map { _ in }]).value
} catch {
    print("failed:", error)
}
respond.fulfill()  // the upload was not cancelled
//> failed: notFound
//> uploaded

//: [Next: time and cancellation](@next)
