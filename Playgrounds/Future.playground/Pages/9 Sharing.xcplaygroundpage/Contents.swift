//: # Sharing one run
//:
//: A promise runs its work on every run. `share()` makes one that runs it once for many runs
//: (an eager promise, opt-in): the first run starts the work, runs that come meanwhile wait for it,
//: later runs get its outcome at once. `pending()` makes one settled from outside.

import Dispatch
import Synchronization

final class Requests: Sendable { let count = Mutex(0) }
let requests = Requests()

let profile = Guarantee<String> { resolver in
    requests.count.withLock { $0 += 1 }
    DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(20)) {
        resolver.fulfill("profile")
    }
}.share()

async let first = profile.value
async let second = profile.value
print(await first ?? "", await second ?? "")
print(await profile.value ?? "", "— requests made:", requests.count.withLock { $0 })
//> profile profile
//> profile — requests made: 1

//: A pending promise: for work no run starts, such as a delegate's callbacks.
let (location, resolver) = Guarantee<String>.pending()
location.run(some: { print("first run:", $0) })
location.run(some: { print("second run:", $0) })
resolver.fulfill("Paris")
//> first run: Paris
//> second run: Paris

//: [Next: the iTunes pipeline with Future](@next)
