import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// How long, in seconds, a test waits for asynchronous work before it fails instead of hanging:
/// generous, because on a loaded 2-core machine the heavy tests running beside it can take
/// seconds. Four times as long under ThreadSanitizer, where the whole run slows: there a
/// main-actor test waited more than a minute for the pool's threads that the others kept busy.
let timeoutSeconds = MCSeeds.underThreadSanitizer ? 240 : 60

/// `timeoutSeconds`, for Dispatch's waits.
let timeout = DispatchTimeInterval.seconds(timeoutSeconds)

/// Waits until `condition` holds, for at most `timeout`; returns whether it held. For state that
/// another thread settles with no event to wait on (a weak reference clearing, a count reached).
@discardableResult func eventually(_ condition: () -> Bool) -> Bool {
    let deadline = DispatchTime.now() + timeout
    while !condition() {
        guard DispatchTime.now() < deadline else { return false }
        usleep(1_000)
    }
    return true
}

/// A value delivered once, possibly from another thread, that a test waits for with a timeout.
final class Delivery<Value>: @unchecked Sendable {
    private let lock = TestLock()
    private let arrived = DispatchSemaphore(value: 0)
    private var values: [Value] = []
    /// What `arrival()`s waiting for the first value do with it.
    private var waiters: [(Value) -> Void] = []

    func send(_ value: Value) {
        let waiting = lock.withLock { () -> [(Value) -> Void] in
            values.append(value)
            defer { waiters = [] }
            return waiters
        }
        arrived.signal()
        for waiter in waiting { waiter(value) }
    }

    /// Waits for the first value; `nil` if none came within `timeout`.
    func wait() -> Value? {
        guard arrived.wait(timeout: .now() + timeout) == .success else { return nil }
        return lock.withLock { values.first }
    }

    /// Waits like `wait()`, holding up no thread: neither one of Swift's concurrency pool nor one
    /// of Dispatch's, which the work a test waits for may need (on 2 cores, a few tests each
    /// blocking a Dispatch thread here stalled every timer of the test run for a minute).
    func arrival() async -> Value? where Value: Sendable {
        await withCheckedContinuation { continuation in
            let once = ResumedOnce(continuation)
            let first = lock.withLock { () -> Value?? in
                if let first = values.first { return .some(first) }
                waiters.append { once.resume($0) }
                return .none
            }
            if let first { return once.resume(first) }
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { once.resume(nil) }
        }
    }

    /// Forgets everything delivered.
    func clear() { lock.withLock { values = [] } }

    /// Everything delivered so far.
    var all: [Value] { lock.withLock { values } }
}

/// Waits for `body` for at most `timeout`; `nil` if it did not finish, so a hang fails the test.
/// It holds up no thread while it waits (see `Delivery.arrival()`): on 2 cores, one Dispatch
/// thread blocked here for each test awaiting `body` stalled the run for 20 s.
func bounded<T: Sendable>(_ body: @escaping @Sendable () async -> T) async -> T? {
    let first = Delivery<T>()
    Task { first.send(await body()) }
    return await first.arrival()
}

/// Awaits `body` for at most `timeout`, as `bounded` does, and if it has not ended by then
/// records an issue that names `what` it waited for, and returns `nil`: a fault fails the test
/// instead of hanging it. A throwing `body` throws its error here (a promise's throwing `value`);
/// a `body` isolated to the main actor (`{ @MainActor in ... }`) runs there, as the await of a
/// main-actor test did.
func awaited<T: Sendable, Failure: Error>(
    _ what: String, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: @escaping @Sendable () async throws(Failure) -> T
) async throws(Failure) -> T? {
    let outcome = await bounded { () async -> Result<T, Failure> in
        do throws(Failure) { return .success(try await body()) } catch { return .failure(error) }
    }
    guard let outcome else {
        Issue.record(
            "\(what) did not end within \(timeoutSeconds) s", sourceLocation: sourceLocation)
        return nil
    }
    return try outcome.get()
}

/// A continuation resumed by whichever comes first: a value, or the timeout's `nil`.
final class ResumedOnce<Value: Sendable>: @unchecked Sendable {
    private let lock = TestLock()
    private var continuation: CheckedContinuation<Value?, Never>?

    init(_ continuation: CheckedContinuation<Value?, Never>) { self.continuation = continuation }

    func resume(_ value: Value?) {
        lock.withLock { continuation.take() }?.resume(returning: value)
    }
}

/// A counter that many threads can bump.
final class Counter: @unchecked Sendable {
    private let lock = TestLock()
    private var count = 0

    @discardableResult func increment() -> Int {
        lock.withLock {
            count += 1
            return count
        }
    }
    @discardableResult func decrement() -> Int {
        lock.withLock {
            count -= 1
            return count
        }
    }

    /// Raises the count to `value` if it is lower: to keep a maximum.
    func raise(to value: Int) { lock.withLock { count = max(count, value) } }

    var value: Int { lock.withLock { count } }
}

/// Every debug report of the test process, from the first test that reads it on: tests that
/// drop resolvers on purpose read their own reports here, and standard error stays quiet.
let reports: Log = {
    let log = Log()
    PromiseDiagnostics.handler = { log.record($0) }
    return log
}()

/// A log of events, in the order they happened, from any thread.
final class Log: @unchecked Sendable {
    private let lock = TestLock()
    private var events: [String] = []

    func record(_ event: String) { lock.withLock { events.append(event) } }
    var all: [String] { lock.withLock { events } }

    /// The debug reports about a promise made at `line` of `file`: tests run in parallel, and a
    /// listener hears every test's reports.
    func reports(madeAt line: Int, in file: String = #fileID) -> [String] {
        all.filter { $0.contains("made at \(file):\(line) ") }
    }
}

/// A plain mutex.
final class TestLock: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    init() { pthread_mutex_init(&mutex, nil) }
    deinit { pthread_mutex_destroy(&mutex) }
    func withLock<T>(_ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return try body()
    }
}

/// Runs `body` on a new thread with a stack of `stackSize` bytes and waits for it.
func onThread(stackSize: Int, _ body: @escaping @Sendable () -> Void) {
    #if canImport(Darwin)
        pthread_join(startThread(stackSize: stackSize, body)!, nil)
    #else
        pthread_join(startThread(stackSize: stackSize, body), nil)
    #endif
}

/// Runs `body` on a new thread of its own, and returns at once.
func detachThread(_ body: @escaping @Sendable () -> Void) {
    #if canImport(Darwin)
        pthread_detach(startThread(stackSize: 1 << 20, body)!)
    #else
        pthread_detach(startThread(stackSize: 1 << 20, body))
    #endif
}

/// For the body of an exit test, whose child process no bound of the test's own process reaches:
/// ends that process once `timeout` has passed, with a message on standard error and the exit
/// status its test does not expect, so that a child that hangs fails its test instead of holding
/// the run for ever. It waits on a thread of its own, which a stalled pool cannot keep from it.
func exitTestWatchdog(expectsSuccess: Bool) {
    let never = DispatchSemaphore(value: 0)  // made here: the watchdog's thread allocates nothing
    detachThread {
        guard never.wait(timeout: .now() + timeout) == .timedOut else { return }
        let message = "exit test watchdog: the child did not end within \(timeoutSeconds) s\n"
        _ = message.withCString { write(2, $0, strlen($0)) }
        _exit(expectsSuccess ? EXIT_FAILURE : EXIT_SUCCESS)
    }
}

/// Runs `body` on a new thread with a stack of `stackSize` bytes and awaits it, holding up no
/// thread of Swift's concurrency pool meanwhile: on Linux that pool is Dispatch's global one,
/// which replaces a thread blocked for long only about once a second, if at all while another
/// of its threads is busy, so that a few tests each blocked for seconds here stall the run.
func onThread(stackSize: Int, _ body: @escaping @Sendable () -> Void) async {
    await withCheckedContinuation { continuation in
        let thread = startThread(stackSize: stackSize) {
            body()
            continuation.resume()
        }
        #if canImport(Darwin)
            pthread_detach(thread!)
        #else
            pthread_detach(thread)
        #endif
    }
}

/// Runs `body` for each index below `iterations` on `threads` threads of their own at once, each
/// taking the next index, and awaits them: like `DispatchQueue.concurrentPerform`, but holding no
/// thread of Dispatch's global pool, so that iterations that wait for a timer or for work on a
/// global queue do not keep that work from the threads it needs.
func concurrentlyOnThreads(
    iterations: Int, threads: Int = 4, _ body: @escaping @Sendable (Int) -> Void
) async {
    let taken = Counter()
    await withTaskGroup(of: Void.self) { group in
        for _ in 0..<threads {
            group.addTask {
                await onThread(stackSize: 1 << 20) {
                    while true {
                        let index = taken.increment() - 1
                        guard index < iterations else { return }
                        body(index)
                    }
                }
            }
        }
    }
}

#if canImport(Darwin)
    typealias PThread = pthread_t?
#else
    typealias PThread = pthread_t
#endif

/// Starts `body` on a new thread with a stack of `stackSize` bytes, to join or detach.
private func startThread(stackSize: Int, _ body: @escaping @Sendable () -> Void) -> PThread {
    final class Box: @unchecked Sendable {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    defer { pthread_attr_destroy(&attributes) }
    pthread_attr_setstacksize(&attributes, stackSize)
    var thread = PThread()
    let box = Unmanaged.passRetained(Box(body)).toOpaque()
    let created = pthread_create(
        &thread, &attributes,
        { raw in
            #if canImport(Darwin)
                let box = Unmanaged<Box>.fromOpaque(raw).takeRetainedValue()
            #else
                let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
            #endif
            box.body()
            return nil
        }, box)
    precondition(created == 0, "pthread_create failed: \(created)")
    return thread
}

/// A promise that resolves with `value` from another thread, as network calls do.
func later<Value: Sendable>(_ value: Value) -> Promise<Value, Never> {
    Promise { resolver in
        DispatchQueue.global().async { resolver.fulfill(value) }
    }
}

/// Runs `promise` and waits for its outcome.
func outcome<Value, Failure>(of promise: Promise<Value, Failure>) -> Result<Value, Failure>? {
    let delivery = Delivery<Result<Value, Failure>>()
    promise.run { delivery.send($0) }
    return delivery.wait()
}

/// Runs `guarantee` and waits for its value.
func value<Value>(of guarantee: Guarantee<Value>) -> Value? {
    if case .success(let value)? = outcome(of: guarantee) { value } else { nil }
}

/// An error with a name, for tests.
struct TestError: Error, Equatable {
    let name: String
    init(_ name: String) { self.name = name }
}

/// A weak reference that a `@Sendable` step may set, to check later that its object was released.
final class WeakReference<Object: AnyObject>: @unchecked Sendable {
    private let lock = TestLock()
    private weak var object: Object?

    var value: Object? {
        get { lock.withLock { object } }
        set { lock.withLock { object = newValue } }
    }
}

/// The rounds of a stress test, which stop at the first wait that ran out of `timeout`: a fault
/// that stalls every round would otherwise hold the test for hours (a thousand rounds, each
/// waiting a minute in vain), and CI until its time limit, instead of failing it.
final class Rounds: @unchecked Sendable {
    private let lock = TestLock()
    private var stalled = false

    /// Whether every wait so far ended in time: the rounds go on while it holds.
    var goOn: Bool { lock.withLock { !stalled } }

    /// Notes whether a bounded wait ended in time, and returns it.
    @discardableResult func waited(_ inTime: Bool) -> Bool {
        if !inTime { lock.withLock { stalled = true } }
        return inTime
    }
}

/// Queues that a step can tell it runs on, by name: for where `ensure(on:)` goes back to.
final class NamedQueues: Sendable {
    let key = DispatchSpecificKey<String>()

    func make(_ name: String) -> DispatchQueue {
        let queue = DispatchQueue(label: "tests.\(name)")
        queue.setSpecific(key: key, value: name)
        return queue
    }

    /// The name of the queue this thread is in the block of, or "none".
    var current: String { DispatchQueue.getSpecific(key: key) ?? "none" }
}

/// An operation that a user's step on `queue` resolves with 1 before the operation returns (it
/// returns once the step has resolved it); the step then calls `andThen`, holding `queue` until
/// that returns.
func operationResolvedByAStep<Failure: Error>(
    on queue: DispatchQueue, andThen: @escaping @Sendable () -> Void
) -> Promise<Int, Failure> {
    Promise { r in
        let resolved = DispatchSemaphore(value: 0)
        Guarantee(value: ()).on(queue).map { _ in
            r(.success(1))
            resolved.signal()
            andThen()
        }.run(some: { _ in })
        _ = resolved.wait(timeout: .now() + timeout)
    }
}
