// Engine/Lock.swift: the mutex every object of the engine guards its state with.

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Bionic)
    import Bionic
#endif

nonisolated extension RunHandle {

    /// A mutex for an object that frees it in its `deinit` (a class: one more allocation a run),
    /// with `room` bytes after it for the object's use, in the same allocation.
    @usableFromInline struct Lock {
        @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>

        @inlinable init(room: Int = 0) {
            let size = MemoryLayout<pthread_mutex_t>.stride + room
            let memory = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 16)
            mutex = memory.bindMemory(to: pthread_mutex_t.self, capacity: 1)
            pthread_mutex_init(mutex, nil)
        }

        /// The room after the mutex, aligned to 8 bytes, as a mutex is.
        var room: UnsafeMutableRawPointer { UnsafeMutableRawPointer(mutex + 1) }

        @usableFromInline func free() {
            pthread_mutex_destroy(mutex)
            mutex.deallocate()
        }

        @inlinable func withLock<T>(_ body: () -> T) -> T {
            pthread_mutex_lock(mutex)
            defer { pthread_mutex_unlock(mutex) }
            return body()
        }
    }
}
