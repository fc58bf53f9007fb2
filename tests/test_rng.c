/* test_rng.c: unit test of src/base/rng.c (numpy-compatible SeedSequence -> PCG64 -> normal) against numpy
 * 1.24.2's own vectors in tests/data/rng/ (seeds 0 and 42), plus seeding edge cases, plus rng_normal_fill (which
 * draws its raw outputs a block ahead) against rng_standard_normal one at a time: the values and the state after,
 * for many lengths and seeds, with the tail and wedge paths counted to show they ran. Run from the
 * project root. Prints "PASS name" or "FAIL name: why" per check; exits 1 if any check failed.
 *
 * test_rng --dump SEED N  writes N doubles of rng_normal_fill (SEED: decimal of any size) to stdout
 * as raw little-endian float64, for tests/test_rng_numpy.py. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "base/rng_tables.h"
#include "check.h"

#define DATA "tests/data/rng/"
#define MAXV 1000


/* Reads the first token of each line: as a decimal u64 (hex == 0) or a hex float (hex == 1,
 * returned as its bits). Returns the count, or -1 if the file cannot be read or a token is bad. */
static int read_column(const char *file, int hex, uint64_t *out, int max)
{
    char path[256], line[256];
    snprintf(path, sizeof path, DATA "%s", file);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        char *end;
        errno = 0;
        if (hex)
            out[n] = dbits(strtod(line, &end));
        else
            out[n] = strtoull(line, &end, 10);
        if (end == line || errno || (*end != ' ' && *end != '\n' && *end != '\0')) {
            n = -1;
            break;
        }
        n++;
    }
    fclose(f);
    return n;
}

/* Parses "0x<hex>" (up to 128 bits) into hi:lo. */
static int parse_hex128(const char *s, uint64_t *hi, uint64_t *lo)
{
    *hi = *lo = 0;
    if (strncmp(s, "0x", 2) != 0)
        return -1;
    int nd = 0;
    for (s += 2; *s && *s != '\n'; s++, nd++) {
        const char *digits = "0123456789abcdef", *p = strchr(digits, *s);
        if (!p || nd >= 32)
            return -1;
        *hi = *hi << 4 | *lo >> 60;
        *lo = *lo << 4 | (uint64_t)(p - digits);
    }
    return nd > 0 ? 0 : -1;
}

/* Reads the PCG64 state file: "state <dec> <hex128>" then "inc <dec> <hex128>". */
static int read_state(const char *file, rng *want)
{
    char path[256], line[256], key[16], dec[64], hex[64];
    snprintf(path, sizeof path, DATA "%s", file);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int got = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%15s %63s %63s", key, dec, hex) != 3)
            continue;
        if (!strcmp(key, "state") && !parse_hex128(hex, &want->state_hi, &want->state_lo))
            got |= 1;
        else if (!strcmp(key, "inc") && !parse_hex128(hex, &want->inc_hi, &want->inc_lo))
            got |= 2;
    }
    fclose(f);
    return got == 3 ? 0 : -1;
}

static int same_rng(const rng *a, const rng *b)
{
    return a->state_hi == b->state_hi && a->state_lo == b->state_lo && a->inc_hi == b->inc_hi &&
           a->inc_lo == b->inc_lo;
}

/* Compares got[0..n) with the first column of FILE; reports the first difference. */
static void check_column(const char *name, const char *file, int hex, const uint64_t *got, int n)
{
    static uint64_t want[MAXV];
    int m = read_column(file, hex, want, MAXV);
    if (m != n) {
        check(0, name, "cannot read %d values from " DATA "%s (got %d)", n, file, m);
        return;
    }
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) {
            check(0, name, "index %d: got 0x%016llx, numpy 0x%016llx", i,
                  (unsigned long long)got[i], (unsigned long long)want[i]);
            return;
        }
    check(1, name, "matches numpy");
}

static void check_seed(unsigned seed)
{
    char name[64], file[64], dec[32];
    uint64_t got[MAXV], ent[8];
    uint32_t words[8], pool[4], s32[8];
    double d[MAXV];
    rng r, r2;

    /* Entropy words: numpy's file, and all three seeding paths agree on them. */
    snprintf(name, sizeof name, "seed%u_entropy", seed);
    snprintf(file, sizeof file, "seed%u_entropy_u32.txt", seed);
    int nw = read_column(file, 0, ent, 8);
    if (nw != 1 || ent[0] != seed) {
        check(0, name, DATA "%s: want the single word %u (read %d words)", file, seed, nw);
        return;
    }
    words[0] = (uint32_t)ent[0];
    rng_seed_words(&r, words, 1);
    rng_seed_u64(&r2, seed);
    snprintf(dec, sizeof dec, "%u", seed);
    rng rd;
    int rc = rng_seed_decimal(&rd, dec);
    check(rc == 0 && same_rng(&r, &r2) && same_rng(&r, &rd), name,
          "rng_seed_words, rng_seed_u64 and rng_seed_decimal disagree");

    rng_seedseq_pool(words, 1, pool);
    for (int i = 0; i < 4; i++)
        got[i] = pool[i];
    snprintf(name, sizeof name, "seed%u_pool", seed);
    snprintf(file, sizeof file, "seed%u_pool_u32.txt", seed);
    check_column(name, file, 0, got, 4);

    rng_seedseq_generate_u32(pool, s32, 8);
    for (int i = 0; i < 8; i++)
        got[i] = s32[i];
    snprintf(name, sizeof name, "seed%u_generate_state_8_u32", seed);
    snprintf(file, sizeof file, "seed%u_generate_state_8_u32.txt", seed);
    check_column(name, file, 0, got, 8);

    for (int i = 0; i < 4; i++)
        got[i] = (uint64_t)s32[2 * i] | (uint64_t)s32[2 * i + 1] << 32;
    snprintf(name, sizeof name, "seed%u_generate_state_4_u64", seed);
    snprintf(file, sizeof file, "seed%u_generate_state_4_u64.txt", seed);
    check_column(name, file, 0, got, 4);

    rng want;
    snprintf(name, sizeof name, "seed%u_pcg64_state", seed);
    snprintf(file, sizeof file, "seed%u_pcg64_state_after_seeding.txt", seed);
    rng_seed_u64(&r, seed);
    if (read_state(file, &want))
        check(0, name, "cannot read " DATA "%s", file);
    else
        check(same_rng(&r, &want), name, "state 0x%016llx%016llx inc 0x%016llx%016llx",
              (unsigned long long)r.state_hi, (unsigned long long)r.state_lo,
              (unsigned long long)r.inc_hi, (unsigned long long)r.inc_lo);

    for (int i = 0; i < 16; i++)
        got[i] = rng_next_u64(&r);
    snprintf(name, sizeof name, "seed%u_random_raw_16", seed);
    snprintf(file, sizeof file, "seed%u_random_raw_16.txt", seed);
    check_column(name, file, 0, got, 16);

    rng_seed_u64(&r, seed);
    for (int i = 0; i < 16; i++)
        got[i] = dbits(rng_next_double(&r));
    snprintf(name, sizeof name, "seed%u_random_16", seed);
    snprintf(file, sizeof file, "seed%u_random_16.hex", seed);
    check_column(name, file, 1, got, 16);

    rng_seed_u64(&r, seed);
    rng_normal_fill(&r, d, MAXV);
    for (int i = 0; i < MAXV; i++)
        got[i] = dbits(d[i]);
    snprintf(name, sizeof name, "seed%u_normal_1000", seed);
    snprintf(file, sizeof file, "seed%u_normal_1000.hex", seed);
    check_column(name, file, 1, got, MAXV);

    /* standard_normal gives the same values (they differ only in the sign of zero). */
    rng_seed_u64(&r, seed);
    for (int i = 0; i < MAXV; i++)
        got[i] = dbits(rng_standard_normal(&r));
    snprintf(name, sizeof name, "seed%u_standard_normal_1000", seed);
    check_column(name, file, 1, got, MAXV);
}

static void check_decimal(const char *name, const char *digits, uint64_t seed)
{
    rng a, b;
    int rc = rng_seed_decimal(&a, digits);
    rng_seed_u64(&b, seed);
    check(rc == 0 && same_rng(&a, &b), name, "rng_seed_decimal(\"%s\") rc %d, differs from seed %llu",
          digits, rc, (unsigned long long)seed);
}

static void check_edges(void)
{
    rng a, b;
    uint32_t w[2] = { 0, 1 };

    rng_seed_u64(&a, 4294967296ULL);
    rng_seed_words(&b, w, 2);
    check(same_rng(&a, &b), "seed_2^32_words_0_1", "rng_seed_u64(2^32) != words [0, 1]");

    rng_seed_words(&a, NULL, 0);
    rng_seed_u64(&b, 0);
    check(same_rng(&a, &b), "seed_words_empty_is_0", "n == 0 differs from [0]");

    check_decimal("decimal_4294967296", "4294967296", 4294967296ULL);
    check_decimal("decimal_u64max", "18446744073709551615", UINT64_MAX);
    check_decimal("decimal_007", "007", 7);
    check_decimal("decimal_0", "0", 0);
    check_decimal("decimal_000", "000", 0);

    /* 100 digits (11 words: SeedSequence phase 3) vs numpy: PCG64(S).state, random_raw(2). */
    const char *big = "7319428605172934861093274560128374650918273645019283746501928374650192837465019283746501928374650193";
    rng want = { 0x20d4a07ca3e6dfe0ULL, 0xac3a540e5da1259aULL, 0x8b67b3d08296509cULL, 0x535e96357e7bd299ULL };
    int rc = rng_seed_decimal(&a, big);
    check(rc == 0 && same_rng(&a, &want), "decimal_100_digits_state", "rc %d, state differs from numpy", rc);
    uint64_t r0 = rng_next_u64(&a), r1 = rng_next_u64(&a);
    check(r0 == 0x2c5b8156452e598bULL && r1 == 0x9af36f5fc61f23d6ULL, "decimal_100_digits_random_raw",
          "got 0x%016llx 0x%016llx", (unsigned long long)r0, (unsigned long long)r1);

    static const char *bad[][2] = { { "", "empty" },      { "-1", "minus_1" },    { "12a", "12a" },
                                    { " 1", "space_1" },  { "1.0", "1.0" },       { "+1", "plus_1" },
                                    { "1 ", "1_space" },  { "0x10", "0x10" } };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[64];
        rng_seed_u64(&a, 99);
        b = a;
        rc = rng_seed_decimal(&a, bad[i][0]);
        snprintf(name, sizeof name, "decimal_rejects_%s", bad[i][1]);
        check(rc == -1 && same_rng(&a, &b), name, "\"%s\": rc %d, rng %s", bad[i][0], rc,
              same_rng(&a, &b) ? "untouched" : "changed");
    }
}

/* What one normal after another drew (ref_normals): the normals whose first raw output failed the fast test, by
 * path (tail: strip 0, wedge: the others); the normals whose raw outputs straddle a multiple of 256 outputs from
 * the start of the call (rng_normal_fill's block edge, so its slow path refilled the block); the calls whose last
 * normal took more than one output (the refill of a block near the end); the raw outputs used. */
typedef struct draw_stats {
    long tail, wedge, straddle, last_multi, used;
} draw_stats;

/* The reference for rng_normal_fill(r, out, n): rng_standard_normal n times, written as 0.0 + 1.0 * z. */
static void ref_normals(rng *r, double *out, size_t n, draw_stats *st)
{
    long start = st->used;
    for (size_t i = 0; i < n; i++) {
        rng t = *r;
        uint64_t u = rng_next_u64(&t);
        size_t idx = (size_t)(u & 0xff);
        if (((u >> 9) & 0x000fffffffffffffULL) >= rng_ki_double[idx]) {
            if (idx == 0)
                st->tail++;
            else
                st->wedge++;
        }
        out[i] = 0.0 + 1.0 * rng_standard_normal(r);
        long k = 1;
        while (!same_rng(&t, r) && k < 100000) {
            rng_next_u64(&t);
            k++;
        }
        long a = st->used - start, b = a + k - 1;
        if (a / 256 != b / 256)
            st->straddle++;
        if (i + 1 == n && k > 1)
            st->last_multi++;
        st->used += k;
    }
}

/* Index of the first difference between got[0..n) and want[0..n) as bits, or -1. */
static long first_diff(const double *got, const double *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (dbits(got[i]) != dbits(want[i]))
            return (long)i;
    return -1;
}

#define FILL_MAX 100000
static double fill_got[FILL_MAX], fill_want[FILL_MAX];

/* rng_normal_fill == rng_standard_normal in a loop: values, the state after, and the next raw output. */
static void check_fill(void)
{
    static const uint64_t seeds[] = { 0, 1, 42, 12345, 4294967303ULL, 987654321987654321ULL };
    static const size_t lens[] = { 0, 1, 2, 3, 4, 5, 7, 8, 9, 63, 64, 65, 255, 256, 257, 258, 511, 512, 513,
                                   1000, 4097, 33333, 100000 };
    static const size_t chunks[] = { 1, 2, 3, 4, 5, 1, 7, 13, 63, 64, 65, 1, 255, 256, 257, 2, 1000 };
    draw_stats st = { 0 };
    char name[64];
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++) {
        const char *why = NULL;
        size_t bad_n = 0;
        long bad_i = -1;
        for (size_t l = 0; l < sizeof lens / sizeof lens[0] && !why; l++) {
            size_t n = lens[l];
            rng a, b;
            rng_seed_u64(&a, seeds[s]);
            b = a;
            rng_normal_fill(&a, fill_got, n);
            st.used = 0;
            ref_normals(&b, fill_want, n, &st);
            bad_n = n;
            if ((bad_i = first_diff(fill_got, fill_want, n)) >= 0)
                why = "values differ";
            else if (!same_rng(&a, &b))
                why = "state after differs";
            else if (rng_next_u64(&a) != rng_next_u64(&b))
                why = "next raw output differs";
        }
        snprintf(name, sizeof name, "fill_vs_one_at_a_time_seed_%llu", (unsigned long long)seeds[s]);
        check(!why, name, "n %zu: %s (first differing value at %ld, -1: none)", bad_n, why ? why : "", bad_i);

        /* The same stream in calls of many sizes, against one reference run over the same sizes. */
        rng a, b;
        rng_seed_u64(&a, seeds[s]);
        b = a;
        size_t done = 0, c = 0;
        why = NULL;
        while (done < FILL_MAX && !why) {
            size_t k = chunks[c++ % (sizeof chunks / sizeof chunks[0])];
            if (k > FILL_MAX - done)
                k = FILL_MAX - done;
            rng_normal_fill(&a, fill_got + done, k);
            st.used = 0;
            ref_normals(&b, fill_want + done, k, &st);
            if (!same_rng(&a, &b))
                why = "state after a call differs";
            done += k;
        }
        bad_i = first_diff(fill_got, fill_want, done);
        if (!why && bad_i >= 0)
            why = "values differ";
        if (!why && rng_next_u64(&a) != rng_next_u64(&b))
            why = "next raw output differs";
        snprintf(name, sizeof name, "fill_in_chunks_seed_%llu", (unsigned long long)seeds[s]);
        check(!why, name, "%s (after %zu normals; first differing value at %ld, -1: none)", why ? why : "", done, bad_i);
    }
    /* The slow paths ran, also across a block edge and on the last normal of a call. */
    check(st.tail >= 10 && st.wedge >= 1000 && st.straddle >= 5 && st.last_multi >= 5, "fill_paths_exercised",
          "tail %ld, wedge %ld, straddling 256 outputs %ld, last normal of a call slow %ld", st.tail, st.wedge,
          st.straddle, st.last_multi);
}

/* --dump SEED N: N normals as little-endian float64 on stdout. */
static int dump(const char *seed, const char *count)
{
    rng r;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(count, &end, 10);
    if (rng_seed_decimal(&r, seed) || *count < '0' || *count > '9' || *end || errno) {
        fprintf(stderr, "test_rng --dump: want a decimal SEED and N, got \"%s\" \"%s\"\n", seed, count);
        return 2;
    }
    double buf[4096];
    unsigned char bytes[sizeof buf];
    while (n > 0) {
        size_t k = n < 4096 ? (size_t)n : 4096;
        rng_normal_fill(&r, buf, k);
        for (size_t i = 0; i < k; i++) {
            uint64_t b = dbits(buf[i]);
            for (int j = 0; j < 8; j++)
                bytes[8 * i + (size_t)j] = (unsigned char)(b >> (8 * j));
        }
        if (fwrite(bytes, 8, k, stdout) != k) {
            perror("test_rng --dump");
            return 1;
        }
        n -= k;
    }
    return fflush(stdout) ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--dump"))
        return dump(argv[2], argv[3]);
    if (argc != 1) {
        fprintf(stderr, "usage: test_rng [--dump SEED N]\n");
        return 2;
    }
    check_seed(0);
    check_seed(42);
    check_edges();
    check_fill();
    return check_failures ? 1 : 0;
}
