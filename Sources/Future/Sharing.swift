// Sharing.swift: one run of the work for many runs, `share()`, and a promise settled from
// outside, `pending()`. Builds on `Engine.Shared` (Engine/Shared.swift).

nonisolated extension Promise where Value: Sendable {
    /// A promise whose work runs once for many runs: opt-in eagerness.
    ///
    /// Choose it for work that many parts of an app need the same answer from, such as a profile or
    /// a configuration, when running it again would be wasted or wrong: `fetchProfile().share()`.
    /// The first run starts the work, runs that come while it is under way wait and go on in turn
    /// (but for work that settles before the first run's call of the shared promise has returned:
    /// on that run's thread, the first run goes on as that call returns, after the others; on a
    /// queue of another thread, in a block of its own on that queue), later runs get its outcome,
    /// value or error, at once, on their own thread (an error is kept as a value is: to try again
    /// after one, share `work.retry(3)`, or make a new shared promise). Work that waits for its own
    /// shared promise (`work.then { _ in shared }`) waits for ever, and is never cancelled, as that
    /// wait is a run that never leaves. Cancelling a run leaves the others waiting. Once every
    /// waiting run is cancelled, so is the work (it runs apart from the runs that wait: the last of
    /// them, cancelled from another thread, may end before a step of the work under way has
    /// returned); with `cancelsWhenAbandoned: false`, the work goes on, and the next run waits for
    /// it or gets its outcome. Work that ends by cancellation, abandoned or cancelled by a step of
    /// its own, ends so the runs that waited for it as it was cancelled; a run that comes later
    /// waits for that end (the work's `ensure` steps still ahead), then starts the work again, so
    /// that its steps never run twice at once, but for what a run's end does not wait for: an
    /// `ensure(on:)` cleanup the cancel queued, work under `ignoringCancel()`. Keep the shared
    /// promise, not the one it came from, which runs anew.
    ///
    /// That second form is PromiseKit's cached in-flight promise, such as a token refresh that
    /// callers who come while it is under way share, whether or not the first one stays:
    ///
    /// ```swift
    /// let refresh = fetchProfile().share(cancelsWhenAbandoned: false)
    /// ```
    public func share(cancelsWhenAbandoned: Bool = true) -> Promise {
        let shared = Engine.Shared(self, cancelsWhenAbandoned: cancelsWhenAbandoned)
        return Promise { shared.join($0) }
    }

    /// A promise and the resolver that settles it from outside, for work no run starts.
    ///
    /// Choose it for outcomes that arrive through a delegate or a notification, rather than an
    /// operation: `let (location, resolver) = Promise<Place, GPSError>.pending()`. Its runs wait
    /// for the resolver or get its outcome, as a shared promise's do; if the resolver goes unused,
    /// or is cancelled, they end by cancellation, and so do the runs after them (a later outcome is
    /// ignored). Its runs that leave cancel nothing: the resolver's `onCancel` handlers are not
    /// called for them, as there is no work to stop (only its own ``Resolver/cancel()`` calls
    /// them). Debug builds report such a resolver if a run is waiting for it as it goes, but not
    /// one of a promise made and never run (or no longer).
    public static func pending(
        file: StaticString = #fileID, line: UInt = #line
    ) -> (promise: Promise, resolver: Resolver<Value, Failure>) {
        let (shared, resolver) = Engine.Shared<Value, Failure>.pending(file: file, line: line)
        return (Promise { shared.join($0) }, resolver)
    }
}
