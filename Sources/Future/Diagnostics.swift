// Diagnostics.swift: where debug builds report misuse, such as a resolver let go of unresolved.

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Bionic)
    import Bionic
#endif

/// Where debug builds of Future report misuse, such as an operation that let its resolver go
/// without resolving it.
///
/// Reports go to standard error unless you set ``handler``, say to your app's logger, as
/// PromiseKit's `conf.logHandler` does. Release builds report nothing (a resolver let go of
/// unresolved still cancels its run). A misuse that stops the program with a message, such as a
/// combination's `limit` below 1, stops it in every build.
///
/// ```swift
/// PromiseDiagnostics.handler = { message in logger.warning("\(message)") }
/// ```
nonisolated public enum PromiseDiagnostics {
    /// Receives each report, on the thread that found the misuse.
    ///
    /// Set it once at launch, or from a test to collect reports; safe to read and set from any
    /// thread, and called outside Future's locks. The default writes `Future: ` and the message to
    /// standard error.
    public static var handler: @Sendable (String) -> Void {
        get { lock.withLock { current } }
        set {
            var replaced = newValue
            lock.withLock { swap(&replaced, &current) }
            // The old handler goes here, outside the lock: what it held may report or set one.
        }
    }

    nonisolated(unsafe) private static var current: @Sendable (String) -> Void = { message in
        _ = "Future: \(message)\n".withCString { write(2, $0, strlen($0)) }
    }
    nonisolated(unsafe) private static let lock = Engine.Lock()
}
