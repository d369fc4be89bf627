// What the PendingRuns measurement reads, in C: Swift's Glibc module leaves malloc.h out.

/// Bytes malloc has handed out and not had back (glibc's mallinfo2); -1 without glibc.
long heap_in_use(void);

/// Bytes of the process's resident set (/proc/self/statm); -1 where it cannot be read.
long resident_set(void);
