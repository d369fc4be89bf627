import Dispatch
import Testing

@testable import Future

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Pins every thread of the process (and so the threads they start) to one CPU, as on a
/// single-core device: a thread that wakes another is then often preempted by it at once, which
/// makes races between them common rather than rare. For a child process: it cannot be undone.
/// Linux only (through `dlsym`: Swift's Glibc module leaves out `sched_setaffinity`).
func pinToOneCPU() {
    #if os(Linux)
        typealias Affinity = @convention(c) (pid_t, Int, UnsafeMutableRawPointer) -> Int32
        guard let get = dlsym(nil, "sched_getaffinity"), let set = dlsym(nil, "sched_setaffinity"),
            let tasks = opendir("/proc/self/task")
        else { return }
        defer { closedir(tasks) }
        var allowed = cpu_set_t()
        let size = MemoryLayout<cpu_set_t>.size
        guard unsafeBitCast(get, to: Affinity.self)(0, size, &allowed) == 0 else { return }
        // The first CPU the process may use, alone.
        var one = cpu_set_t()
        withUnsafeBytes(of: allowed) { allowed in
            withUnsafeMutableBytes(of: &one) { one in
                guard let byte = allowed.firstIndex(where: { $0 != 0 }) else { return }
                one[byte] = allowed[byte] & (0 &- allowed[byte])  // its lowest bit
            }
        }
        while let entry = readdir(tasks) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard let thread = pid_t(name) else { continue }
            _ = unsafeBitCast(set, to: Affinity.self)(thread, size, &one)
        }
    #endif
}

/// An object that records, as it goes, whether it went on the main queue.
final class MainQueueWitness: Sendable {
    let offMain: Counter
    let released: DispatchSemaphore

    init(offMain: Counter, released: DispatchSemaphore) {
        (self.offMain, self.released) = (offMain, released)
    }

    deinit {
        if !isOnMainQueue { offMain.increment() }
        released.signal()
    }
}

/// Races between the thread that hops and the main queue: CI runs this suite again under
/// ThreadSanitizer.
@Suite struct LifetimesOnMain {
    static let runs = 2_000

    /// Calls `start` on a global queue `runs` times, each time once the witness of the run
    /// before was released (so that the main queue is idle as the hop comes, and wakes for it);
    /// returns whether every witness was released.
    static func oneAfterAnother(
        released: DispatchSemaphore, _ start: @escaping @Sendable () -> Void
    ) -> Bool {
        let done = Delivery<Bool>()
        DispatchQueue.global().async {
            for _ in 0..<runs {
                start()
                guard released.wait(timeout: .now() + timeout) == .success else {
                    return done.send(false)
                }
            }
            done.send(true)
        }
        return done.wait() == true
    }

    #if os(macOS) || os(Linux)
        /// A step after `.on(.main)` is released on the main queue, where the run ends, however
        /// the thread that hopped fares: so a view a step captured is released where UIKit wants it.
        /// Two thousand runs started from a global queue; the step and the witness it captures are
        /// made by a step of the run, so that only the run holds them. (In a child process pinned
        /// to one CPU, where the hopping thread is often preempted by the main one it wakes.)
        @Test func aStepAfterAHopToMainIsReleasedOnMain() async {
            await #expect(processExitsWith: .success) {
                exitTestWatchdog(expectsSuccess: true)
                _ = mainQueueKey
                pinToOneCPU()
                let offMain = Counter()
                let released = DispatchSemaphore(value: 0)
                let promise = Guarantee(value: ()).then { _ -> Guarantee<Void> in
                    let witness = MainQueueWitness(offMain: offMain, released: released)
                    return Guarantee(value: ()).on(.main).map { _ = witness }
                }
                #expect(Self.oneAfterAnother(released: released) { promise.run() })
                #expect(offMain.value == 0, "\(offMain.value) of \(Self.runs) released off main")
            }
        }

        /// The same for a chain its caller built, ran, and let go of before it resolved the
        /// chain's operation: the run alone holds the step after the hop.
        @Test func aStepOfAChainItsCallerLetGoOfIsReleasedOnMain() async {
            await #expect(processExitsWith: .success) {
                exitTestWatchdog(expectsSuccess: true)
                _ = mainQueueKey
                pinToOneCPU()
                let offMain = Counter()
                let released = DispatchSemaphore(value: 0)
                #expect(
                    Self.oneAfterAnother(released: released) {
                        let kept = Delivery<Resolver<Void, Never>>()
                        do {
                            let witness = MainQueueWitness(offMain: offMain, released: released)
                            Guarantee<Void> { kept.send($0) }.on(.main).map { _ = witness }.run()
                        }
                        kept.all.first?.fulfill()  // the caller holds nothing of the chain any more
                    })
                #expect(offMain.value == 0, "\(offMain.value) of \(Self.runs) released off main")
            }
        }

        /// The same for a step tied to an invalidation token, whose tie builds the steps after the
        /// hop as each run starts: Tomorrowland's test of its main-context blocks with a token.
        @Test(arguments: [false, true])
        func aStepTiedToATokenIsReleasedOnMain(invalidated: Bool) async {
            await #expect(processExitsWith: .success) { [invalidated] in
                exitTestWatchdog(expectsSuccess: true)
                _ = mainQueueKey
                pinToOneCPU()
                let offMain = Counter()
                let released = DispatchSemaphore(value: 0)
                let token = InvalidationToken()
                if invalidated { token.invalidate() }
                let promise = Guarantee(value: ()).then { _ -> Guarantee<Void> in
                    let witness = MainQueueWitness(offMain: offMain, released: released)
                    return Guarantee(value: ()).done(on: .main, tiedTo: token) { _ = witness }
                }
                #expect(Self.oneAfterAnother(released: released) { promise.run() })
                #expect(offMain.value == 0, "\(offMain.value) of \(Self.runs) released off main")
            }
        }

        /// The same for a tied step of a chain its caller let go of before it resolved.
        @Test(arguments: [false, true])
        func aTiedStepOfAChainItsCallerLetGoOfIsReleasedOnMain(invalidated: Bool) async {
            await #expect(processExitsWith: .success) { [invalidated] in
                exitTestWatchdog(expectsSuccess: true)
                _ = mainQueueKey
                pinToOneCPU()
                let offMain = Counter()
                let released = DispatchSemaphore(value: 0)
                let token = InvalidationToken()
                #expect(
                    Self.oneAfterAnother(released: released) {
                        let kept = Delivery<Resolver<Void, Never>>()
                        do {
                            let witness = MainQueueWitness(offMain: offMain, released: released)
                            Guarantee<Void> { kept.send($0) }
                                .done(on: .main, tiedTo: token) { _ = witness }.run()
                        }
                        if invalidated { token.invalidate() }
                        kept.all.first?.fulfill()  // the caller holds nothing of the chain any more
                    })
                #expect(offMain.value == 0, "\(offMain.value) of \(Self.runs) released off main")
            }
        }
    #endif
}
