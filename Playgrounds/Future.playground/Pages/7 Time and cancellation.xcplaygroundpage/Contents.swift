//: # Time and cancellation
//:
//: Because a promise is a recipe, a timeout can cancel the work it gave up on, and a retry can
//: run the work again. No thread waits for a timer, and cancelling a run cancels its timers.

import Dispatch
import Synchronization

enum FetchError: Error { case timedOut, unavailable }

//: `after` and `delay`:
let start = DispatchTime.now()
_ = await after(.milliseconds(50)).value
print(
    "waited at least 50 ms:",
    DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds >= 50_000_000)
//> waited at least 50 ms: true

//: A timeout fails, and cancels the work it gave up on:
let stuck = Promise<Int, FetchError> { resolver in
    let sleeper = Task {
        try? await Task.sleep(for: .seconds(60))
        resolver.fulfill(1)
    }
    resolver.onCancel { _ in
        sleeper.cancel()
        print("the stuck work was cancelled")
    }
}
do { _ = try await stuck.timeout(.milliseconds(30), orFailWith: .timedOut).value } catch {
    print("failed:", error)
}
//> the stuck work was cancelled
//> failed: timedOut

//: A retry runs the work again, here until the third attempt:
final class Attempts: Sendable { let count = Mutex(0) }
let attempts = Attempts()
let flaky = Promise<String, FetchError> { resolver in
    let attempt = attempts.count.withLock { count in
        count += 1
        return count
    }
    attempt < 3 ? resolver.reject(.unavailable) : resolver.fulfill("ok on attempt \(attempt)")
}
print(try await flaky.retry(5, delay: .milliseconds(10)).value ?? "")
//> ok on attempt 3

//: Where steps run: where the step before finished, unless `on(queue)` hops, every time.
let worker = DispatchQueue(label: "worker")
let key = DispatchSpecificKey<String>()
worker.setSpecific(key: key, value: "worker")
print(
    await Guarantee(value: 0).on(worker).map { _ in DispatchQueue.getSpecific(key: key) ?? "?" }
        .value ?? "")
//> worker

//: Cancelling: a handle cancels its run; a `RunBag` cancels many, also when it goes away, once
//: `store(in:)` has put each run in it.
func slow(_ name: String) -> Guarantee<Void> {
    after(.seconds(60)).ensure { print("\(name) cleaned up") }
}
var bag: RunBag? = RunBag()
slow("first").run().store(in: bag!)
slow("second").run().store(in: bag!)
bag = nil
//> first cleaned up
//> second cleaned up

//: A token does not cancel: it silences the main-actor steps tied to it in the runs started
//: before `invalidate()`, while the work and the rest of the chain go on. Runs started afterwards
//: are not silenced.
let token = InvalidationToken()
let (answer, reply) = Guarantee<String>.pending()
let show = answer.done(on: .main, tiedTo: token) { print("showing", $0) }
    .map { print("the run went on") }
show.run()
token.invalidate()
reply.fulfill("the answer")
//> the run went on
_ = await show.value
//> showing the answer
//> the run went on

//: A token is also a bag: `invalidate()` cancels the runs stored in it.
slow("stored").run().store(in: token)
token.invalidate()
//> stored cleaned up

//: Time you control: give a time operator a clock. A `ManualClock` moves only when told, and
//: fires the timers that fall due, in deadline order, on the thread that moves it. That is how
//: to test a retry's delays or a timeout without waiting for them.
let testClock = ManualClock()
let answering = Promise<String, PromiseError> { resolver in
    let now = testClock.now.offset
    now < .seconds(4) ? resolver.reject(.timedOut) : resolver.fulfill("answered at \(now)")
}
answering.retry(3, delay: .seconds(2), clock: testClock)
    .run(some: { print($0) }, none: { print($0) })
testClock.advance(by: .seconds(2))
print("after 2 s:", testClock.timerCount, "timer waiting")
testClock.advance(by: .seconds(2))
//> after 2 s: 1 timer waiting
//> answered at 4.0 seconds

//: [Next: Swift concurrency](@next)
