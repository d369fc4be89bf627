// The memory a pending run holds: 100,000 runs of a prebuilt chain of three links, each parked on
// its operation (which keeps its resolver), against 100,000 Tasks each parked on a continuation,
// in one process. Each figure is the growth of the heap in use (glibc's `mallinfo2`, which counts
// every byte malloc handed out, the Swift runtime's task allocations included) and of the resident
// set (`/proc/self/statm`), divided by the count. What the measurement itself keeps (an array of
// resolvers or continuations) is reserved beforehand, so it is not counted.
//
//   swift run -c release PendingRuns        # 100,000 of each
//   PENDING_COUNT=1000 swift run PendingRuns   # fewer (CI's smoke run)

import Dispatch
import Future
import HeapInUse

#if canImport(Glibc)
    import Glibc
#endif

let count = getenv("PENDING_COUNT").map { Int(String(cString: $0)) ?? 100_000 } ?? 100_000

/// Keeps what the parked work will be resumed with, from any thread, in storage reserved up front.
final class Keeper<Item>: @unchecked Sendable {
    private let lock = NSLockLike()
    private var items: [Item] = []

    init(capacity: Int) { items.reserveCapacity(capacity) }

    func keep(_ item: Item) { lock.withLock { items.append(item) } }
    var count: Int { lock.withLock { items.count } }
    func takeAll() -> [Item] {
        lock.withLock {
            defer { items = [] }
            return items
        }
    }
}

/// A plain mutex.
final class NSLockLike: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    init() { pthread_mutex_init(&mutex, nil) }
    deinit { pthread_mutex_destroy(&mutex) }
    func withLock<T>(_ body: () -> T) -> T {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return body()
    }
}

/// Waits until `condition` holds, for at most 60 seconds.
func waitUntil(_ condition: () -> Bool) {
    let deadline = DispatchTime.now() + .seconds(60)
    while !condition() {
        precondition(DispatchTime.now() < deadline, "the parked work did not all park in 60 s")
        usleep(1_000)
    }
}

struct Measurement {
    let name: String, heap: Int, resident: Int
    init(name: String, heap: Int, resident: Int) {
        (self.name, self.heap, self.resident) = (name, heap, resident)
    }
    var row: String {
        "| \(name) | \(heap / count) | \(resident / count) |"
    }
}

/// Parks `count` of something with `park`, and measures what they hold while parked.
func measure(_ name: String, park: () -> Void, parked: () -> Bool) -> Measurement {
    let (heap, resident) = (heap_in_use(), resident_set())
    park()
    waitUntil(parked)
    return Measurement(name: name, heap: heap_in_use() - heap, resident: resident_set() - resident)
}

// Future: a chain of three links (an operation and two steps), built once, run `count` times.
let resolvers = Keeper<Resolver<Int, Never>>(capacity: count)
let chain = Guarantee<Int> { resolvers.keep($0) }.map { $0 + 1 }.map { $0 * 2 }
let finished = Keeper<Int>(capacity: count)
let future = measure(
    "Future: a run of a prebuilt chain of 3 links, parked on its operation",
    park: { for _ in 0..<count { chain.run(some: { finished.keep($0) }) } },
    parked: { resolvers.count == count })
for resolver in resolvers.takeAll() { resolver.fulfill(1) }
precondition(finished.count == count, "every run finishes once resumed")

// The peer: a Task parked on a continuation, its idiomatic form.
let continuations = Keeper<CheckedContinuation<Int, Never>>(capacity: count)
let resumed = Keeper<Int>(capacity: count)
let task = measure(
    "Task parked on a continuation (Task.detached, withCheckedContinuation)",
    park: {
        for _ in 0..<count {
            Task.detached { resumed.keep(await withCheckedContinuation { continuations.keep($0) }) }
        }
    },
    parked: { continuations.count == count })
for continuation in continuations.takeAll() { continuation.resume(returning: 1) }
waitUntil { resumed.count == count }

print("Bytes each pending run holds, \(count) of each, in one process:")
print("")
print("| pending work | heap in use (mallinfo2) | resident set |")
print("|---|---|---|")
print(future.row)
print(task.row)
