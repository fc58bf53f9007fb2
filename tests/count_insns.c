/* count_insns: the instructions the decode kernels execute per cached row, counted, not estimated. A forked child
 * runs one kernel call (the key kernel: scores of G heads, or the value kernel: the weighted sum for G heads) while
 * this process single-steps it with ptrace and records every instruction address; objdump names the instruction at
 * each address. Each count is taken for two call lengths (N1 and N2 rows) and reported as (count(N2) - count(N1)) /
 * (N2 - N1), so that a call's fixed work (entry, the scratch set-up, the signal that starts and stops the count)
 * drops out and what is left is the per-row cost, tile preparations included. The counts need no performance
 * counters (the VMs this project runs on have none) and do not depend on the machine's load: they are the same on
 * every run of the same binary on the same instruction set.
 *
 * Classes (by mnemonic): fma (vfmadd...), vnni (vpdp...: 4 byte or 2 word products per lane), amx (tile products,
 * loads and stores), cvt (vcvt..., vpmov...), shuf (permutes, shuffles, unpacks, inserts and extracts), bcast
 * (broadcasts), pf (prefetches), vec (other vector and mask instructions), scal (the rest: loop control, addresses,
 * and calls into the C library).
 *
 * Not a test by itself: tests/test_count_insns.sh checks its counts against what the kernels must do, and
 * scripts/bench.sh (make bench) writes its table to results/bench-insns.txt. Usage:
 *   count_insns [FORMAT [G [keys|vals]]] [--hot]   (default: f16 int8 e4m3 q8_0 int4 q4_0 kivi4, G 1 4 8, both sides;
 *   --hot: under each row, every instruction executed at least 0.05 times a row (once a 16-row tile: 0.0625), with its count and objdump's text)
 * Exit 0 with the table; 77 when single-stepping or objdump is not available here (the test then skips). */
#define _GNU_SOURCE
#include "base/rng.h"
#include "base/util.h"
#include "decode/decode.h"
#include "decode/kernels.h"
#include "eval/bench.h"
#include "store/store.h"

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

enum { W = 128, N1 = 128, N2 = 384, HBITS = 16 };
enum { C_FMA, C_VNNI, C_AMX, C_CVT, C_SHUF, C_BCAST, C_PF, C_VEC, C_SCAL, NCLASS };
static const char *const cname[NCLASS] = {"fma", "vnni", "amx", "cvt", "shuf", "bcast", "pf", "vec", "scal"};

/* ---- the binary's instructions: address -> class, from objdump ---------------------------------------------- */

typedef struct {
    uint64_t addr;
    int cls;
    char *text;      /* --hot: objdump's line */
    double hits;     /* --hot: times executed in the counted calls */
} Insn;
static int hot;      /* --hot: list the most executed instructions of the last count */
static Insn *insns;
static size_t n_insns;
static uint64_t load_bias;   /* run-time address - objdump's address */

static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static int classify(const char *m)
{
    if (starts(m, "vfmadd") || starts(m, "vfmsub") || starts(m, "vfnmadd") || starts(m, "vfnmsub")) return C_FMA;
    if (starts(m, "vpdp")) return C_VNNI;
    if (starts(m, "tdp") || starts(m, "tileload") || starts(m, "tilestore") || starts(m, "tilezero")) return C_AMX;
    if (starts(m, "vcvt") || starts(m, "vpmov")) return C_CVT;
    if (starts(m, "vperm") || starts(m, "vpperm") || starts(m, "vpshuf") || starts(m, "vpunpck") ||
        starts(m, "vunpck") || starts(m, "vshuf") || starts(m, "valign") || starts(m, "vpalignr") ||
        starts(m, "vinsert") || starts(m, "vextract") || starts(m, "vpermt2") || starts(m, "vpermi2"))
        return C_SHUF;
    if (starts(m, "vbroadcast") || starts(m, "vpbroadcast")) return C_BCAST;
    if (starts(m, "prefetch")) return C_PF;
    if (m[0] == 'v' || m[0] == 'k') return C_VEC;
    return C_SCAL;
}

static int by_addr(const void *a, const void *b)
{
    const Insn *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* Reads objdump's listing of this executable; 0, or -1 when objdump gives nothing. */
static int load_insns(void)
{
    char exe[4096], cmd[4200];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return -1;
    exe[len] = '\0';
    /* the ELF type: ET_DYN (position-independent, objdump's addresses from 0) or ET_EXEC (absolute) */
    FILE *f = fopen(exe, "rb");
    unsigned char hdr[18];
    if (!f || fread(hdr, 1, sizeof hdr, f) != sizeof hdr) {
        if (f) fclose(f);
        return -1;
    }
    fclose(f);
    const int pie = hdr[16] == 3;
    load_bias = 0;
    if (pie) {   /* the first mapping of the executable, file offset 0 */
        FILE *m = fopen("/proc/self/maps", "r");
        char line[4608];
        while (m && fgets(line, sizeof line, m)) {
            unsigned long lo, off;
            char path[4096] = "";
            if (sscanf(line, "%lx-%*x %*s %lx %*s %*s %4095s", &lo, &off, path) >= 2 && off == 0 && !strcmp(path, exe)) {
                load_bias = lo;
                break;
            }
        }
        if (m) fclose(m);
        if (!load_bias) return -1;
    }
    snprintf(cmd, sizeof cmd, "objdump -d --no-show-raw-insn '%s' 2>/dev/null", exe);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t cap = 1 << 16;
    insns = xmalloc(cap * sizeof *insns);
    char line[1024];
    while (fgets(line, sizeof line, p)) {
        char *s = line, *end;
        while (*s == ' ') s++;
        uint64_t a = strtoull(s, &end, 16);
        if (end == s || *end != ':' || end[1] != '\t') continue;
        char *tok = strtok(end + 2, " \t\n");
        while (tok && (tok[0] == '{' || !strcmp(tok, "notrack") || !strcmp(tok, "rep") || !strcmp(tok, "repz") ||
                       !strcmp(tok, "repnz") || !strcmp(tok, "lock") || !strcmp(tok, "bnd") || !strcmp(tok, "data16") ||
                       !strcmp(tok, "ds") || !strcmp(tok, "cs")))
            tok = strtok(NULL, " \t\n");
        if (!tok) continue;
        if (n_insns == cap) {
            Insn *more = xmalloc(2 * cap * sizeof *more);
            memcpy(more, insns, cap * sizeof *more);
            free(insns);
            insns = more, cap *= 2;
        }
        char *rest = strtok(NULL, "\n");
        insns[n_insns] = (Insn){a, classify(tok), NULL, 0};
        if (hot) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s %s", tok, rest ? rest : "");
            insns[n_insns].text = xmalloc(strlen(buf) + 1);
            memcpy(insns[n_insns].text, buf, strlen(buf) + 1);
        }
        n_insns++;
    }
    pclose(p);
    if (n_insns == 0) return -1;
    qsort(insns, n_insns, sizeof *insns, by_addr);
    return 0;
}

/* the class of the instruction at run-time address rip: scal outside this executable (the C library) */
static int class_at(uint64_t rip, double weight)
{
    const uint64_t a = rip - load_bias;
    size_t lo = 0, hi = n_insns;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (insns[mid].addr < a) lo = mid + 1;
        else hi = mid;
    }
    if (lo < n_insns && insns[lo].addr == a) {
        insns[lo].hits += weight;
        return insns[lo].cls;
    }
    return C_SCAL;
}

/* ---- one kernel call, single-stepped ------------------------------------------------------------------------- */

typedef struct {
    const KernelSet *ks;
    StoreType type;
    const KRows *k, *v;   /* the key rows, the value rows (the same but for kivi4) */
    size_t G;
    float *q, *s, *p, *acc, *scr;
    int vals;
} Call;

static void call(const Call *c, size_t n)
{
    if (c->vals) c->ks->vacc[c->type](c->acc, c->p, N2, c->G, c->v, 0, n, c->scr);
    else c->ks->scores[c->type](c->s, N2, c->q, c->G, c->k, 0, n, c->scr);
}

/* counts[cls] = the instructions of one call of n rows, with the fixed cost of the stops around it; 0, or -1 when
 * the child cannot be traced */
static int count_call(const Call *c, size_t n, double *counts, double weight)
{
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        call(c, n);   /* warm: one-time set-up (the tile permission, the tuning) is not counted */
        if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) != 0) _exit(3);
        raise(SIGSTOP);
        call(c, n);
        raise(SIGSTOP);
        _exit(0);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFSTOPPED(st)) {
        if (WIFEXITED(st) || WIFSIGNALED(st)) return -1;
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        return -1;
    }
    for (int i = 0; i < NCLASS; i++) counts[i] = 0;
    const long rip_off = (long)offsetof(struct user_regs_struct, rip);
    int done = 0;   /* 1 once the second SIGSTOP ends the call; anything else (a ptrace error) counts nothing */
    for (;;) {
        if (ptrace(PTRACE_SINGLESTEP, pid, NULL, NULL) != 0) break;
        if (waitpid(pid, &st, 0) != pid || !WIFSTOPPED(st)) break;
        if (WSTOPSIG(st) != SIGTRAP) {
            done = WSTOPSIG(st) == SIGSTOP;
            break;
        }
        errno = 0;
        long rip = ptrace(PTRACE_PEEKUSER, pid, (void *)rip_off, NULL);
        if (errno) break;
        counts[class_at((uint64_t)rip, weight)] += 1;
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return done && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL ? 0 : -1;
}

int main(int argc, char **argv)
{
    static const char *const fmts[] = {"f16", "int8", "e4m3", "q8_0", "int4", "q4_0", "kivi4"};
    static const size_t Gs[] = {1, 4, 8};
    if (argc > 1 && !strcmp(argv[argc - 1], "--hot")) hot = 1, argc--;
    const char *only_f = argc > 1 ? argv[1] : NULL;
    const size_t only_g = argc > 2 ? (size_t)strtoul(argv[2], NULL, 10) : 0;
    const char *only_side = argc > 3 ? argv[3] : NULL;
    int known_f = !only_f;
    for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) known_f |= only_f && !strcmp(only_f, fmts[i]);
    int ok = argc <= 4 && known_f && (argc <= 2 || (only_g >= 1 && only_g <= 64)) &&
             (!only_side || !strcmp(only_side, "keys") || !strcmp(only_side, "vals"));
    if (!ok) {
        fprintf(stderr, "count_insns: usage: count_insns [FORMAT [G [keys|vals]]] [--hot], FORMAT one of f16 int8 e4m3 q8_0 "
                        "int4 q4_0 kivi4, G 1..64\n");
        return 2;
    }
    if (load_insns()) {
        fprintf(stderr, "count_insns: objdump or /proc not available: nothing counted\n");
        return 77;
    }
    const KernelSet *ks = decode_fused_kernels();
    printf("# count_insns (tests/count_insns.c): instructions per cached row, single-stepped (ptrace), (count(%d rows)"
           " - count(%d rows)) / %d; kernel set %s%s%s%s; W = %d columns\n",
           N2, N1, N2 - N1, ks->name,
           decode_kernels_note(),
           decode_tune()[0] ? ", tuned for " : "", decode_tune(), W);
    printf("%-6s %3s %-4s %8s", "format", "G", "side", "total");
    for (int i = 0; i < NCLASS; i++) printf(" %7s", cname[i]);
    printf("\n");
    fflush(stdout);
    rng r;
    rng_seed_u64(&r, 5);
    double *x = xmalloc((size_t)N2 * W * sizeof *x);
    for (size_t fi = 0; fi < sizeof fmts / sizeof fmts[0]; fi++) {
        const char *name = fmts[fi];
        if (only_f && strcmp(only_f, name) != 0) continue;
        /* kivi4: kvc bench's KIVI cache without its FP16 residual (keys 4-bit per channel, values per token, groups of
         * BENCH_KIVI_GROUP, FP16 scales and mins); the others one format for both sides */
        const int kivi = !strcmp(name, "kivi4");
        StoreFormat fk, fv;
        if (kivi) {
            fk = store_intn_format(4, 1, STORE_AXIS_CHANNEL, BENCH_KIVI_GROUP, STORE_SCALE_F16);
            fv = store_intn_format(4, 1, STORE_AXIS_TOKEN, BENCH_KIVI_GROUP, STORE_SCALE_F16);
        } else if (store_format_parse(&fk, name, "format")) {
            return 2;
        } else {
            fv = fk;
        }
        StoreTensor st[2];
        KRows k[2];
        for (int i = 0; i < 2; i++) {
            rng_normal_fill(&r, x, (size_t)N2 * W);
            store_alloc(&st[i], i ? fv : fk, N2, W);
            store_quantize_f64(&st[i], x);
            if (!decode_rows(&k[i], &st[i])) {
                fprintf(stderr, "count_insns: %s: no kernel slot reads it\n", name);
                return 2;
            }
        }
        const StoreType type = fk.type;
        const size_t *gl = only_g ? &only_g : Gs, ng = only_g ? 1 : sizeof Gs / sizeof Gs[0];
        for (size_t gi = 0; gi < ng; gi++) {
            const size_t G = gl[gi];
            Call c = {.ks = ks, .type = type, .k = &k[0], .v = &k[1], .G = G};
            c.q = xmalloc(G * W * sizeof *c.q), c.s = xmalloc(G * N2 * sizeof *c.s), c.p = xmalloc(G * N2 * sizeof *c.p);
            c.acc = xcalloc(G * W, sizeof *c.acc), c.scr = xalloc64(DECODE_SCRATCH(G, W) * sizeof *c.scr);
            for (size_t i = 0; i < G * W; i++) c.q[i] = (float)rng_standard_normal(&r);
            for (size_t i = 0; i < G * N2; i++) c.p[i] = (float)rng_next_double(&r);
            for (int side = 0; side < 2; side++) {
                if (only_side && strcmp(only_side, side ? "vals" : "keys") != 0) continue;
                c.vals = side;
                double a[NCLASS], b[NCLASS];
                for (size_t i = 0; i < n_insns; i++) insns[i].hits = 0;
                if (count_call(&c, N1, a, -1.0 / (N2 - N1)) || count_call(&c, N2, b, 1.0 / (N2 - N1))) {
                    fprintf(stderr, "count_insns: the kernel call could not be single-stepped (ptrace)\n");
                    return 77;
                }
                double tot = 0;
                for (int i = 0; i < NCLASS; i++) tot += (b[i] - a[i]) / (N2 - N1);
                printf("%-6s %3zu %-4s %8.2f", name, G, side ? "vals" : "keys", tot);
                for (int i = 0; i < NCLASS; i++) printf(" %7.2f", (b[i] - a[i]) / (N2 - N1));
                printf("\n");
                if (hot) {   /* every instruction run at least 0.05 times a row (once a 16-row tile: 0.0625), in address order */
                    for (size_t i = 0; i < n_insns; i++)
                        if (insns[i].hits >= 0.05) printf("  %8.2f  %lx  %s\n", insns[i].hits, (unsigned long)insns[i].addr, insns[i].text);
                }
                fflush(stdout);
            }
            free(c.q), free(c.s), free(c.p), free(c.acc), free(c.scr);
        }
        store_free(&st[0]), store_free(&st[1]);
    }
    free(x);
    for (size_t i = 0; i < n_insns; i++) free(insns[i].text);
    free(insns);
    return 0;
}
