// Engine/MainActor.swift: how a step runs on the main actor (Queues.swift): a hop to the main
// queue, the main actor's executor, then the closure called as the main actor's; and, for a
// step tied to a token, the check that the token was not invalidated since the run started.

import Dispatch

nonisolated extension Promise where Value: Sendable {
    /// Whether a token has not been invalidated since a run started.
    typealias Validity = @Sendable () -> Bool

    /// This promise with a hop to the main queue (the main actor's executor, so its steps may
    /// assume the main actor), then the steps `add` adds, which ask `valid` whether `token` was
    /// invalidated since the run started: added as each run starts, so that a promise kept and run
    /// again after an `invalidate()` is tied anew, but a retry inside the run is not.
    func onMain<NewValue, NewFailure>(
        tiedTo token: InvalidationToken?,
        _ add: @escaping @Sendable (Promise, @escaping Validity) -> Promise<NewValue, NewFailure>
    ) -> Promise<NewValue, NewFailure> {
        guard let token else { return add(on(.main), { true }) }
        // Whether the token has not been invalidated since the run's user tied it (one that went
        // away has).
        let tie = Guarantee<Validity> { [weak token] resolver in
            guard let token else { return resolver.fulfill { false } }
            let tied = resolver.run.generation(of: token)
            resolver.fulfill { [weak token] in token?.current == tied }
        }
        return tie.flatMap { add(on(.main), $0) }
    }

    /// Calls `body` as the main actor's, on the main queue, the main actor's executor, where a hop
    /// to `.main` runs a step. Not `MainActor.assumeIsolated`: before macOS 15 and iOS 18 its check
    /// is "on the main thread", and after a tool's `dispatchMain()` another thread drains the
    /// queue.
    static func asMainActor<T>(_ body: @MainActor () -> T) -> T {
        dispatchPrecondition(condition: .onQueue(.main))
        return withoutActuallyEscaping(body) { unsafeBitCast($0, to: (() -> T).self)() }
    }
}
