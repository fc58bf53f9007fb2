/* memlimit: how much memory this process may still take, and OpenBLAS under a memory limit.
 *
 * Bounds. Three things can stop an allocation: physical memory (the machine's RAM, or a cgroup v2 memory.max
 * when it is lower), the address-space limit RLIMIT_AS (`ulimit -v`: every mapping counts, reserved or not) and
 * the data limit RLIMIT_DATA (`ulimit -d`: private writable mappings and the heap). memlimit_check compares
 * what a run is about to allocate with the room each leaves (the bound minus what already counts against it:
 * the resident set, VmSize, VmData of /proc/self) and names the one that is too tight. Swap is not counted.
 *
 * OpenBLAS. Each thread that calls BLAS needs a buffer of MEMLIMIT_BLAS_BUFFER bytes (128 MiB in the OpenBLAS
 * 0.3 builds for x86-64 and arm64), mapped on its first large call. When the mapping fails OpenBLAS retries
 * forever at 100 % CPU. Its worker threads (one per core but one, started when the library loads, before
 * main) each map theirs at start, so under `ulimit -v` the address space can be gone before kvc runs a line;
 * kvc uses one BLAS thread anyway. So:
 *   memlimit_blas_reexec (first thing in main): under a finite RLIMIT_AS or RLIMIT_DATA, when OpenBLAS
 *     started worker threads, sets OPENBLAS_NUM_THREADS=1 and executes kvc again (/proc/self/exe, same
 *     arguments): the library then loads without workers. Nothing happens without such a limit.
 *   memlimit_blas_reserve (before the first BLAS call of a command that computes): under such a limit,
 *     refuses (exit 2) when the room left is below the buffer, naming the limit needed; else makes OpenBLAS
 *     map its buffer now (one small product), before kvc allocates the data, so that later BLAS calls reuse it
 *     and a shortage shows up as a failed xmalloc (exit 1, with where) instead of a hang.
 *
 * May include: base/util.h, base/linalg.h, OpenBLAS. Linux (/proc); elsewhere the bounds it cannot read count
 * as absent.
 */
#ifndef KVC_MEMLIMIT_H
#define KVC_MEMLIMIT_H

#include <stdint.h>

#define MEMLIMIT_BLAS_BUFFER ((uint64_t)128 << 20)
#define MEMLIMIT_NONE UINT64_MAX

typedef struct MemBound {
    const char *name;     /* "physical memory", "the cgroup memory limit", "the address-space limit (ulimit -v)",
                           * "the data-segment limit (ulimit -d)" */
    uint64_t limit;       /* bytes */
    uint64_t used;        /* bytes already counted against it */
} MemBound;

/* Does allocating `need` more bytes fit every bound? `limits_only` more bytes count against RLIMIT_AS and
 * RLIMIT_DATA only (address space that is mapped but mostly untouched: the OpenBLAS buffer, thread stacks).
 * Returns 0 when it fits; else -1 with *worst the bound with the least room (its room: limit - used, or 0). */
int memlimit_check(uint64_t need, uint64_t limits_only, MemBound *worst);

/* 1 when RLIMIT_AS or RLIMIT_DATA is finite. */
int memlimit_limited(void);

/* See the top of this file. argv: main's, NULL-terminated. Returns only when it did not execute kvc again. */
void memlimit_blas_reexec(char **argv);
/* 0, or -1 with kvc_fail("memory: ... (got ...)") when a limit leaves no room for the OpenBLAS buffer. */
int memlimit_blas_reserve(void);

/* n bytes as "1.5 GB", "312 MB", "12 kB" (decimal units, 2 significant digits at least). */
void memlimit_fmt(char *buf, unsigned long cap, uint64_t n);

#endif
