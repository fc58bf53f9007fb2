/* memlimit: the memory bounds of this process and the OpenBLAS buffer under a limit (see memlimit.h). */
#include "base/memlimit.h"
#include "base/linalg.h"
#include "base/util.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* A "Name:   123 kB" line of /proc/self/status, in bytes; 0 when it cannot be read. */
static uint64_t proc_status_kb(const char *name)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t nl = strlen(name);
    uint64_t v = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, name, nl) == 0 && line[nl] == ':') {
            v = strtoull(line + nl + 1, NULL, 10) * 1024;
            break;
        }
    fclose(f);
    return v;
}

/* The first number of a file (cgroup memory.max, memory.current); MEMLIMIT_NONE for "max" or none. */
static uint64_t file_number(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return MEMLIMIT_NONE;
    char buf[64] = "";
    int ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!ok || buf[0] < '0' || buf[0] > '9') return MEMLIMIT_NONE;
    return strtoull(buf, NULL, 10);
}

static uint64_t rlimit_of(int resource)
{
    struct rlimit r;
    if (getrlimit(resource, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return MEMLIMIT_NONE;
    return (uint64_t)r.rlim_cur;
}

int memlimit_limited(void)
{
    return rlimit_of(RLIMIT_AS) != MEMLIMIT_NONE || rlimit_of(RLIMIT_DATA) != MEMLIMIT_NONE;
}

static uint64_t room_of(const MemBound *b)
{
    return b->used < b->limit ? b->limit - b->used : 0;
}

int memlimit_check(uint64_t need, uint64_t limits_only, MemBound *worst)
{
    MemBound b[4];
    size_t n = 0;
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    uint64_t rss = proc_status_kb("VmRSS");
    if (pages > 0 && psize > 0) b[n++] = (MemBound){"physical memory", (uint64_t)pages * (uint64_t)psize, rss};
    uint64_t cg = file_number("/sys/fs/cgroup/memory.max");
    if (cg != MEMLIMIT_NONE) b[n++] = (MemBound){"the cgroup memory limit (memory.max)", cg, rss};
    uint64_t as = rlimit_of(RLIMIT_AS), data = rlimit_of(RLIMIT_DATA);
    if (as != MEMLIMIT_NONE) b[n++] = (MemBound){"the address-space limit (ulimit -v)", as, proc_status_kb("VmSize")};
    if (data != MEMLIMIT_NONE)
        b[n++] = (MemBound){"the data-segment limit (ulimit -d)", data, proc_status_kb("VmData")};
    int rc = 0;
    uint64_t short_by = 0;
    for (size_t i = 0; i < n; i++) {
        int is_limit = strstr(b[i].name, "ulimit") != NULL;
        uint64_t want = need + (is_limit ? limits_only : 0), room = room_of(&b[i]);
        if (want < need) want = MEMLIMIT_NONE;   /* overflow */
        if (want > room && (rc == 0 || want - room > short_by)) {
            rc = -1;
            short_by = want - room;
            *worst = b[i];
        }
    }
    return rc;
}

void memlimit_blas_reexec(char **argv)
{
    if (!memlimit_limited() || openblas_get_num_threads() <= 1) return;
    const char *e = getenv("OPENBLAS_NUM_THREADS");
    if (e && strcmp(e, "1") == 0) return;   /* already done once: never loop */
    if (setenv("OPENBLAS_NUM_THREADS", "1", 1) != 0) return;
    execv("/proc/self/exe", argv);
    /* not executed (no /proc): carry on; memlimit_blas_reserve still refuses when no room is left */
}

int memlimit_blas_reserve(void)
{
    if (!memlimit_limited()) return 0;
    MemBound b;
    uint64_t slack = (uint64_t)4 << 20;   /* the product's operands (2 MiB) and a little more */
    if (memlimit_check(0, MEMLIMIT_BLAS_BUFFER + slack, &b)) {
        char room[32], buf[32];
        memlimit_fmt(room, sizeof room, room_of(&b));
        memlimit_fmt(buf, sizeof buf, MEMLIMIT_BLAS_BUFFER);
        uint64_t want_kib = (b.used + MEMLIMIT_BLAS_BUFFER + slack + 1023) / 1024;
        return kvc_fail("memory: %s leaves %s, and OpenBLAS needs %s for its buffer before kvc can compute; raise "
                        "it to at least %llu KiB (more for the data) (got %s = %llu KiB)", b.name, room, buf,
                        (unsigned long long)want_kib, strstr(b.name, "-v") ? "ulimit -v" : "ulimit -d",
                        (unsigned long long)(b.limit / 1024));
    }
    /* a product large enough that OpenBLAS takes its buffer (not its small-size path on the stack) */
    enum { M = 512 };
    double *A = xcalloc((size_t)M * M, sizeof *A), *x = xcalloc(M, sizeof *x), *y = xmalloc(M * sizeof *y);
    la_matvec(y, A, x, M, M);
    free(A);
    free(x);
    free(y);
    return 0;
}

void memlimit_fmt(char *buf, unsigned long cap, uint64_t n)
{
    static const char *const units[] = {"bytes", "kB", "MB", "GB", "TB", "PB", "EB"};
    double v = (double)n;
    size_t u = 0;
    while (v >= 1000 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1000;
        u++;
    }
    if (u == 0) snprintf(buf, cap, "%llu bytes", (unsigned long long)n);
    else snprintf(buf, cap, v < 10 ? "%.1f %s" : "%.0f %s", v, units[u]);
}
