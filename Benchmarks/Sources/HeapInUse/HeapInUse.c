#include "HeapInUse.h"
#include <stdio.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
long heap_in_use(void) {
    struct mallinfo2 info = mallinfo2();
    return (long)(info.uordblks + info.hblkhd);
}
#else
long heap_in_use(void) { return -1; }
#endif

long resident_set(void) {
    FILE *file = fopen("/proc/self/statm", "r");
    long size = 0, resident = 0;
    if (!file) return -1;
    int read = fscanf(file, "%ld %ld", &size, &resident);
    fclose(file);
    return read == 2 ? resident * sysconf(_SC_PAGESIZE) : -1;
}
