import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Polls `condition` until it holds, for at most `limit`; returns whether it held.
func holds(within limit: DispatchTimeInterval, _ condition: () -> Bool) -> Bool {
    let deadline = DispatchTime.now() + limit
    while !condition() {
        guard DispatchTime.now() < deadline else { return false }
        usleep(10_000)
    }
    return true
}

/// The bytes the process has allocated with `malloc` and not freed, in every arena and mapping,
/// from glibc's `malloc_info` (looked up at run time: Swift's Glibc module leaves `malloc.h`
/// out); `nil` without glibc.
func allocatedBytes() -> Int? {
    #if canImport(Glibc)
        typealias MallocInfo = @convention(c) (Int32, UnsafeMutablePointer<FILE>?) -> Int32
        guard let symbol = dlsym(nil, "malloc_info") else { return nil }
        var buffer: UnsafeMutablePointer<CChar>?
        var length = 0
        guard let stream = open_memstream(&buffer, &length) else { return nil }
        _ = unsafeBitCast(symbol, to: MallocInfo.self)(0, stream)
        fclose(stream)
        defer { free(buffer) }
        guard let buffer else { return nil }
        // The process's totals follow the last arena's: free chunks ("fast", "rest", with the
        // top chunk), the memory the arenas hold from the system, and the chunks mapped alone.
        guard let totals = String(cString: buffer).components(separatedBy: "</heap>").last
        else { return nil }
        func size(of element: String) -> Int? {
            guard let start = totals.range(of: element)?.upperBound,
                let quote = totals[start...].range(of: "size=\"")?.upperBound
            else { return nil }
            return Int(totals[quote...].prefix { $0.isNumber })
        }
        guard let system = size(of: "<system type=\"current\""),
            let fast = size(of: "<total type=\"fast\""),
            let rest = size(of: "<total type=\"rest\""),
            let mapped = size(of: "<total type=\"mmap\"")
        else { return nil }
        return system - fast - rest + mapped
    #else
        return nil
    #endif
}

@Suite struct CancelledTimers {
    /// A weak reference, for many of them in an array.
    struct Weak {
        weak var run: Engine.Run?
    }

    /// Cancelling an `after` frees its run at once, not when the timer's deadline comes: ten
    /// thousand `after(.seconds(3600))` runs, cancelled, and a thousand `delay`s, leave no handle
    /// alive.
    @Test func cancelledAftersAndDelaysReleaseTheirRunsAtOnce() {
        var handles: [Weak] = []
        for _ in 0..<10_000 {
            let handle = after(.seconds(3600)).run { _ in Issue.record("cancelled") }
            handle.cancel()
            handles.append(Weak(run: handle.run))
        }
        for _ in 0..<1_000 {
            let handle = Promise<Int, TestError>(value: 1).delay(.seconds(3600)).map { $0 + 1 }
                .run { _ in Issue.record("cancelled") }
            handle.cancel()
            handles.append(Weak(run: handle.run))
        }
        #expect(holds(within: timeout) { handles.allSatisfy { $0.run == nil } })
        #expect(handles.filter { $0.run != nil }.count == 0, "runs still alive")
    }

    /// A retry cancelled while it waits before its next attempt frees its run at once.
    @Test func aRetryCancelledDuringItsDelayReleasesItsRunAtOnce() {
        let attempts = Counter()
        weak var released: Engine.Run?
        do {
            let handle = Promise<Int, TestError> { resolver in
                attempts.increment()
                resolver.reject(TestError("again"))
            }.retry(2, delay: .seconds(3600)).run { _ in Issue.record("cancelled") }
            #expect(attempts.value == 1)  // the first attempt failed: it waits for the second
            handle.cancel()
            released = handle.run
        }
        #expect(holds(within: timeout) { released == nil })
        #expect(attempts.value == 1)
    }

    /// What a test measures: timers cancelled, ten thousand times.
    enum Timers: String, CaseIterable, Codable, Sendable {
        /// `timeout(.seconds(3600))` whose work wins, which cancels the timer.
        case timeoutWhoseWorkWins
        /// `after(.seconds(3600))`, cancelled.
        case cancelledAfter

        /// Runs the timers `count` times and waits for the runs to end.
        func run(_ count: Int) {
            let ended = DispatchSemaphore(value: 0)
            let remaining = Counter()
            for index in 0..<count {
                remaining.increment()
                let end = { @Sendable in if remaining.decrement() == 0 { ended.signal() } }
                switch self {
                case .timeoutWhoseWorkWins:
                    later(index).setFailureType(to: TestError.self)
                        .timeout(.seconds(3600), orFailWith: TestError("late")).run { _ in end() }
                case .cancelledAfter:
                    after(.seconds(3600)).ensure(end).run { _ in Issue.record("cancelled") }
                        .cancel()
                }
            }
            #expect(ended.wait(timeout: .now() + timeout) == .success)
        }
    }

    #if os(macOS) || os(Linux)
        /// Nothing of a cancelled timer's run stays allocated until its deadline: neither its
        /// handle, nor its slot, nor Dispatch's timer. Ten thousand timers of an hour, cancelled,
        /// keep less than 100 bytes each on average (today: about 900), once Dispatch has let go of
        /// them. In a child process, where no other test allocates meanwhile.
        @Test(.enabled(if: allocatedBytes() != nil), arguments: Timers.allCases)
        func cancelledTimersKeepNoMemory(timers: Timers) async {
            await #expect(processExitsWith: .success) { [timers] in
                exitTestWatchdog(expectsSuccess: true)
                timers.run(100)  // Dispatch's threads and timer queues, made once
                let before = allocatedBytes() ?? 0
                timers.run(10_000)
                let kept = { (allocatedBytes() ?? 0) - before }
                #expect(holds(within: timeout) { kept() < 10_000 * 100 })
                #expect(kept() / 10_000 < 100, "bytes kept for each timer: \(kept() / 10_000)")
            }
        }
    #endif
}
