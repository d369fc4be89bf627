import Dispatch
import Testing

@testable import Future

/// A serial executor that runs its jobs on a dispatch queue it marks, so that code can tell
/// whether it runs there. `ExecutorJob` needs macOS 14 and its peers, later than the package's
/// minimums: the tests that use it run there and later.
@available(macOS 14, iOS 17, tvOS 17, watchOS 10, *)
final class MarkedQueueExecutor: SerialExecutor {
    private static let key = DispatchSpecificKey<String>()
    private let queue: DispatchQueue
    private let name: String

    init(_ name: String) {
        (queue, self.name) = (DispatchQueue(label: name), name)
        queue.setSpecific(key: Self.key, value: name)
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedSerialExecutor()) }
    }

    /// Whether the calling code runs on this executor's queue.
    var isCurrent: Bool { DispatchQueue.getSpecific(key: Self.key) == name }
}

/// An actor whose code runs on a `MarkedQueueExecutor`.
@available(macOS 14, iOS 17, tvOS 17, watchOS 10, *)
actor OnAMarkedQueue {
    let executor: MarkedQueueExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    init(_ executor: MarkedQueueExecutor) { self.executor = executor }

    /// Awaits `promise.value` here, and whether the actor's code ran on its queue before and
    /// after the await (a check of the test itself).
    func value<Value: Sendable>(of promise: Guarantee<Value>) async -> (Value?, isolated: Bool) {
        let before = executor.isCurrent
        let value = await promise.value
        return (value, before && executor.isCurrent)
    }

    /// Awaits `promise.result` here, and whether the actor's code ran on its queue.
    func result<Value: Sendable>(
        of promise: Promise<Value, TestError>
    ) async -> (Result<Value, TestError>?, isolated: Bool) {
        let before = executor.isCurrent
        let result = await promise.result
        return (result, before && executor.isCurrent)
    }

    /// Awaits the throwing `promise.value` here, and whether the actor's code ran on its queue.
    func throwingValue<Value: Sendable>(
        of promise: Promise<Value, TestError>
    ) async -> (Value?, isolated: Bool) {
        let before = executor.isCurrent
        let value = try? await promise.value
        return (value ?? nil, before && executor.isCurrent)
    }
}

/// The main queue, marked, so that code can tell whether it runs there.
let mainQueueKey: DispatchSpecificKey<Bool> = {
    let key = DispatchSpecificKey<Bool>()
    DispatchQueue.main.setSpecific(key: key, value: true)
    return key
}()

/// Whether the calling code runs on the main queue.
var isOnMainQueue: Bool { DispatchQueue.getSpecific(key: mainQueueKey) == true }

@Suite struct AwaitingOnTheCallersExecutor {
    /// A promise whose operation resolves at once, and whose operation and step log where they
    /// ran, as `where` tells.
    static func logged(
        _ log: Log, _ where: @escaping @Sendable () -> String
    ) -> Promise<Int, TestError> {
        Promise<Int, TestError> { resolver in
            log.record("operation: \(`where`())")
            resolver.fulfill(1)
        }.map { value in
            log.record("step: \(`where`())")
            return value + 1
        }
    }

    /// `await promise.value` runs the promise on the awaiting task's executor: from an actor
    /// with a custom serial executor, the operation and the synchronous steps after it run on
    /// that executor's queue, for `value` on a guarantee, the throwing `value`, and `result`.
    @available(macOS 14, iOS 17, tvOS 17, watchOS 10, *)
    @Test func valueAndResultRunThePromiseOnTheActorsExecutor() async {
        let executor = MarkedQueueExecutor("the actor's queue")
        let actor = OnAMarkedQueue(executor)
        let logs = (Log(), Log(), Log())
        let marked = { @Sendable in executor.isCurrent ? "actor" : "elsewhere" }
        let expected = ["operation: actor", "step: actor"]

        // Each await is the actor's, wherever the bounded wait for it runs.
        let guaranteed = await awaited("Guarantee.value") {
            await actor.value(of: Self.logged(logs.0, marked).recover { _ in 0 })
        }
        #expect(guaranteed?.isolated == true)
        #expect(guaranteed?.0 == 2)
        #expect(logs.0.all == expected, "Guarantee.value")

        let thrown = await awaited("Promise.value") {
            await actor.throwingValue(of: Self.logged(logs.1, marked))
        }
        #expect(thrown?.0 == 2)
        #expect(logs.1.all == expected, "Promise.value")

        let result = await awaited("Promise.result") {
            await actor.result(of: Self.logged(logs.2, marked))
        }
        #expect(result?.0 == .success(2))
        #expect(logs.2.all == expected, "Promise.result")
    }

    /// The same from the main actor: the promise runs on the main queue.
    @Test @MainActor func valueRunsThePromiseOnTheMainActor() async throws {
        _ = mainQueueKey
        #expect(isOnMainQueue)  // a check of the test itself
        let log = Log()
        let promise = Self.logged(log) { isOnMainQueue ? "main" : "elsewhere" }
        // Awaited on the main actor, as the test's own await was.
        #expect(try await awaited("the value") { @MainActor in try await promise.value } == 2)
        #expect(log.all == ["operation: main", "step: main"])
    }
}
