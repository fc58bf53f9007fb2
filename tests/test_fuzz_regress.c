/* test_fuzz_regress: replays the fuzz corpora without libFuzzer, so every crasher ever found stays fixed.
 *
 * Without arguments (as tests/run.sh runs it): feeds every file under tests/fuzz/<target>/corpus/ and
 * tests/fuzz/<target>/crashers/ (target: config, npy, safetensors, results) through the same function the fuzzer
 * calls (tests/fuzz/fuzz_targets.c). That function aborts on a property violation; under `make sanitize`
 * ASan and UBSan check each input as the fuzzer did. Prints "PASS fuzz-<target>-corpus (N files)" and one
 * "PASS fuzz-<target>-crasher-<file>" per crasher. A missing directory counts as empty.
 *
 * With arguments it is a non-fuzzer driver for one file:
 *   test_fuzz_regress --run TARGET FILE      run one input through a target (0, or abort)
 *   test_fuzz_regress --read FILE [NAME]     read a tensor with tensor_read, as kvc will: prints its shape and
 *                                            exits 0, or prints "kvc: <message>" and exits 2 (used by
 *                                            tests/test_bad_input.py for the tensor-file cases)
 * Run from the project root.
 */
#include "fuzz/fuzz_targets.c"

#include <dirent.h>

static int read_file(const char *path, uint8_t **data, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 4096, n = 0;
    uint8_t *buf = xmalloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *nb = xmalloc(cap * 2);
            memcpy(nb, buf, n);
            free(buf);
            buf = nb;
            cap *= 2;
        }
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return -1;
    }
    *data = buf;
    *size = n;
    return 0;
}

typedef int (*Target)(const uint8_t *data, size_t size);

static Target find_target(const char *name)
{
    if (strcmp(name, "config") == 0) return fuzz_config;
    if (strcmp(name, "npy") == 0) return fuzz_npy;
    if (strcmp(name, "safetensors") == 0) return fuzz_safetensors;
    if (strcmp(name, "results") == 0) return fuzz_results;
    return NULL;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Runs every regular file of dir (sorted by name) through fn. Returns the number of files, or -1 on a read error. */
static long replay_dir(const char *dir, Target fn, int one_pass_each, const char *target, int *failed)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            char **nn = xmalloc(cap * sizeof *nn);
            if (n) memcpy(nn, names, n * sizeof *nn);
            free(names);
            names = nn;
        }
        names[n++] = xstrdup(e->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_str);
    long count = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        uint8_t *data;
        size_t size;
        if (read_file(path, &data, &size) != 0) {
            printf("FAIL fuzz-%s-read: cannot read %s\n", target, path);
            *failed = 1;
        } else {
            printf("# %s\n", path);   /* the last such line names the input if fn aborts */
            fflush(stdout);
            fn(data, size);
            free(data);
            count++;
            if (one_pass_each) printf("PASS fuzz-%s-crasher-%s\n", target, names[i]);
        }
        free(names[i]);
    }
    free(names);
    return count;
}

static int read_tensor(const char *path, const char *name)
{
    Tensor t;
    if (tensor_read(&t, path, name, CONFIG_MAX_NUMBERS) != 0) {
        fprintf(stderr, "kvc: %s\n", kvc_errmsg());
        return EXIT_USAGE;
    }
    char shape[128];
    tensorio_shape_str(shape, sizeof shape, t.shape, t.ndim);
    printf("%s\n", shape);
    tensor_free(&t);
    return EXIT_OK;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--read") == 0) return read_tensor(argv[2], argc > 3 ? argv[3] : NULL);
    if (argc == 4 && strcmp(argv[1], "--run") == 0) {
        Target fn = find_target(argv[2]);
        uint8_t *data;
        size_t size;
        if (!fn || read_file(argv[3], &data, &size) != 0) {
            fprintf(stderr, "usage: test_fuzz_regress --run config|npy|safetensors FILE\n");
            return EXIT_USAGE;
        }
        fn(data, size);
        free(data);
        return EXIT_OK;
    }
    if (argc != 1) {
        fprintf(stderr, "usage: test_fuzz_regress [--run TARGET FILE | --read FILE [NAME]]\n");
        return EXIT_USAGE;
    }
    static const char *const targets[] = {"config", "npy", "safetensors", "results"};
    int failed = 0;
    for (size_t k = 0; k < sizeof targets / sizeof targets[0]; k++) {
        char dir[256];
        Target fn = find_target(targets[k]);
        snprintf(dir, sizeof dir, "tests/fuzz/%s/corpus", targets[k]);
        long n = replay_dir(dir, fn, 0, targets[k], &failed);
        if (n > 0) printf("PASS fuzz-%s-corpus (%ld files)\n", targets[k], n);
        else printf("FAIL fuzz-%s-corpus: no seed files in %s (run from the project root)\n", targets[k], dir), failed = 1;
        snprintf(dir, sizeof dir, "tests/fuzz/%s/crashers", targets[k]);
        replay_dir(dir, fn, 1, targets[k], &failed);
    }
    return failed;
}
