// Engine/MainActor.swift: how a step runs on the main actor (Queues.swift): a hop to the main
// queue, the main actor's executor, then the closure called as the main actor's; and, for a
// step tied to a token, the check there that the token was not invalidated since the user's run
// was made, as its terminal was called.

import Dispatch

nonisolated extension Promise where Value: Sendable {
    /// This promise with a hop to the main queue (the main actor's executor, so the steps after it
    /// may assume the main actor), then a step that makes its outcome with `next` there, or, if
    /// `next` returns `nil`, cancels its run. `next` is told whether `token` (if any) was not
    /// invalidated since the user's run was made (`Run.isValid(_:)`), so that a promise kept and
    /// run again after an `invalidate()` is heard, but a retry inside the run is not. A step of
    /// the chain, not a wrapper around it: a run that stops before it still reaches the chain's
    /// `ensure` steps.
    func onMain<NewValue, NewFailure>(
        tiedTo token: InvalidationToken?,
        _ next: @escaping @Sendable (Outcome, _ valid: Bool) -> Swift.Result<NewValue, NewFailure>?
    ) -> Promise<NewValue, NewFailure> {
        typealias Next = @Sendable (Outcome, Bool) -> Swift.Result<NewValue, NewFailure>?
        // The hop, then the step. The token is not kept by the chain: a token goes away,
        // invalidating itself, with what owns it.
        return on(.main).appending(next) { [weak token, tied = token != nil] stage, slot, run in
            let outcome = slot.take(Outcome.self)
            let valid = !tied || token.map { run.isValid($0) } ?? false
            guard let made = Node<Next>.payload(of: stage)(outcome, valid) else {
                _ = run.cancel(call: nil)  // as a step that cancels its own run: it stops here
                return .stop
            }
            slot.put(made)
            return .proceed
        }
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
