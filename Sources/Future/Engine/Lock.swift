// Engine/Lock.swift: the mutex that joins, shared promises, deadlines, manual clocks, bags (and
// tokens), the count of invalidations and the diagnostics handler guard their state with (a run
// keeps its own among its fields, which need no allocation).

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Bionic)
    import Bionic
#endif

nonisolated extension Engine {

    /// A mutex for an object that frees it in its `deinit` (a class has no stable address for
    /// one: a run, which does, keeps its own in its fields).
    @usableFromInline struct Lock {
        @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>

        /// `recursive`: the thread that holds it may take it again (a manual clock's firing).
        init(recursive: Bool = false) {
            mutex = .allocate(capacity: 1)
            guard recursive else {  // no attributes to make and destroy: a combination makes one
                pthread_mutex_init(mutex, nil)
                return
            }
            var attributes = pthread_mutexattr_t()
            pthread_mutexattr_init(&attributes)
            pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_RECURSIVE))
            pthread_mutex_init(mutex, &attributes)
            pthread_mutexattr_destroy(&attributes)
        }

        func free() {
            pthread_mutex_destroy(mutex)
            mutex.deallocate()
        }

        /// Runs `body` with the mutex held.
        ///
        /// What `body` hands out to be let go of after the lock (a resolver, a cancel handler, a
        /// state whose release may run a user's deinit, which may call back in) is kept to there
        /// with `withExtendedLifetime`: an optimized build releases a value after its last use,
        /// and an unused one inside the lock, where a call back in deadlocks.
        @inlinable func withLock<T>(_ body: () -> T) -> T {
            pthread_mutex_lock(mutex)
            defer { pthread_mutex_unlock(mutex) }
            return body()
        }
    }
}
