/* merge: `kvc merge` (see merge.h). Reads every input whole, checks, writes once. */
#include "report/merge.h"
#include "config/config.h"
#include "config/expid.h"
#include "report/results.h"
#include "base/fileio.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct Input {
    const char *path;
    char *text;
    size_t len;
    ResultFile rf;
} Input;

typedef struct Ref {
    uint64_t id;
    size_t file, row;
} Ref;

static int by_id(const void *a, const void *b)
{
    const Ref *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    return (x->row > y->row) - (x->row < y->row);
}

static const char *const fmt_names[] = {"table", "csv", "jsonl"};

static int read_input(Input *in)
{
    if (!*in->path) return kvc_fail("merge: an input file name is empty (got \"\")");
    int fd;
    if (fileio_open_regular(in->path, &fd)) return -1;   /* a FIFO or device is refused, never waited on */
    int rc = results_read_fd(fd, in->path, &in->text, &in->len);
    close(fd);
    return rc;
}

/* The format of an input: by its name, else by its first byte ('{' is JSONL). */
static Format input_format(const Input *in)
{
    Format f;
    if (results_format_of_name(in->path, &f) == 0 && f != FORMAT_TABLE) return f;
    return in->len > 0 && in->text[0] == '{' ? FORMAT_JSONL : FORMAT_CSV;
}

static const ResultRow *row_of(const Input *in, const Ref *r)
{
    return &in[r->file].rf.rows[r->row];
}

/* Checks the rows against the grid of cfg (per rows per experiment: L x H with --per-head, layer slowest);
 * fills order[slot] (slot = experiment x per + row) with the ref of its row. */
static int check_grid(const Config *cfg, const char *cfg_path, int per_head, size_t per,
                      const Input *in, const Ref *refs, size_t n_refs, const Ref **order)
{
    size_t n = cfg->n_exps * per, H = per_head ? cfg->kv_heads : 1;
    uint64_t *eids = xmalloc(cfg->n_exps * sizeof *eids), *ids = xmalloc(n * sizeof *ids);
    Ref *grid = xmalloc(n * sizeof *grid);
    int rc = expid_all(eids, cfg);
    for (size_t i = 0; i < n; i++) {
        ids[i] = per_head ? expid_row(eids[i / per], i % per / H, i % per % H) : eids[i];
        grid[i].id = ids[i];
        grid[i].file = i;   /* the slot */
        grid[i].row = 0;
    }
    qsort(grid, n, sizeof *grid, by_id);
    for (size_t k = 0; k < n_refs && rc == 0; k++) {
        const ResultRow *row = row_of(in, &refs[k]);
        char hex[EXPID_HEX + 1];
        expid_format(hex, row->id);
        /* by_id compares file and row too: search on the id alone */
        size_t lo = 0, hi = n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (grid[mid].id < row->id) lo = mid + 1;
            else hi = mid;
        }
        if (lo == n || grid[lo].id != row->id) {
            rc = kvc_fail("merge: %s:%zu: row \"%s\" (id %s) is not %s of %s (with these --set values) "
                          "(got an unknown id)", in[refs[k].file].path, row->line, row->label, hex,
                          per_head ? "a --per-head row" : "an experiment", cfg_path);
            break;
        }
        size_t slot = grid[lo].file, gi = slot / per;
        if (strcmp(cfg->exps[gi].label, row->label) != 0) {
            rc = kvc_fail("merge: %s:%zu: row id %s is labelled \"%s\" there but \"%s\" in %s (got another label)",
                          in[refs[k].file].path, row->line, hex, row->label, cfg->exps[gi].label, cfg_path);
            break;
        }
        order[slot] = &refs[k];
    }
    if (rc == 0) {
        size_t missing = 0, first = 0;
        for (size_t i = 0; i < n; i++)
            if (!order[i] && missing++ == 0) first = i;
        if (missing > 0) {
            char hex[EXPID_HEX + 1];
            expid_format(hex, ids[first]);
            size_t e = first / per;
            char where[64] = "";
            if (per_head) snprintf(where, sizeof where, ", layer %zu, head %zu", first % per / H, first % per % H);
            rc = kvc_fail("merge: %zu of the %zu rows of %s are missing, the first at grid position %zu: \"%s\" "
                          "(experiments.%zu%s, id %s); run the shard that holds it (got %zu rows)",
                          missing, n, cfg_path, e, cfg->exps[e].label, cfg->exps[e].src, where, hex, n - missing);
        }
    }
    free(grid);
    free(ids);
    free(eids);
    return rc;
}

int merge_files(const MergeArgs *args)
{
    const char *cfg_path = args->config, *out = args->out;
    char *const *sets = args->sets;
    int quiet = args->quiet, rc = EXIT_USAGE;
    size_t n_sets = args->n_sets, n_in = args->n_files;
    Input *in = xcalloc(n_in, sizeof *in);
    for (size_t f = 0; f < n_in; f++) in[f].path = args->files[f];
    FileOut outf = {0};   /* --out FILE: checked, locked and its temporary made before any work (fileio.h) */

    if (out && fileio_out_open(&outf, out, FILEIO_REPLACE)) goto done;

    Format fmt = FORMAT_CSV;
    int per_head = 0;
    size_t n_refs = 0;
    for (size_t f = 0; f < n_in; f++) {
        if (read_input(&in[f])) goto done;
        Format ff = input_format(&in[f]);
        if (f == 0) fmt = ff;
        else if (ff != fmt) {
            kvc_fail("merge: %s is %s but %s is %s; merge files of one format (got mixed formats)", in[0].path,
                     fmt_names[fmt], in[f].path, fmt_names[ff]);
            goto done;
        }
        if (results_parse(&in[f].rf, in[f].path, in[f].text, in[f].len, fmt, f == 0 ? -1 : per_head)) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", kvc_errmsg());
            kvc_fail("merge: %s", msg);
            goto done;
        }
        if (f == 0) per_head = in[0].rf.per_head;
        if (in[f].rf.torn > 0) {
            kvc_fail("merge: %s: ends in a torn line (%zu bytes) from an interrupted run; finish that run with "
                     "kvc run ... --resume first (got no final newline)", in[f].path, in[f].rf.torn);
            goto done;
        }
        n_refs += in[f].rf.n;
    }
    Format of;
    if (out && results_format_of_name(out, &of) == 0 && of != fmt) {
        kvc_fail("merge: --out %s names %s output but the inputs are %s (got \"%s\")", out, fmt_names[of],
                 fmt_names[fmt], out);
        goto done;
    }

    Ref *refs = xmalloc(n_refs * sizeof *refs);
    size_t k = 0;
    for (size_t f = 0; f < n_in; f++)
        for (size_t r = 0; r < in[f].rf.n; r++) {
            refs[k].id = in[f].rf.rows[r].id;
            refs[k].file = f;
            refs[k].row = r;
            k++;
        }
    /* refs in input order, for the output without --config */
    const Ref **order = NULL;
    size_t n_out = n_refs;
    Ref *sorted = xmalloc(n_refs * sizeof *sorted);
    if (n_refs) memcpy(sorted, refs, n_refs * sizeof *refs);
    qsort(sorted, n_refs, sizeof *sorted, by_id);
    for (size_t i = 1; i < n_refs; i++)
        if (sorted[i].id == sorted[i - 1].id) {
            const ResultRow *a = row_of(in, &sorted[i - 1]), *b = row_of(in, &sorted[i]);
            char hex[EXPID_HEX + 1];
            expid_format(hex, a->id);
            kvc_fail("merge: %s:%zu and %s:%zu hold the same row \"%s\" (id %s); were shards run twice or "
                     "files given twice? (got a duplicate)", in[sorted[i - 1].file].path, a->line,
                     in[sorted[i].file].path, b->line, b->label, hex);
            goto free_refs;
        }

    Config cfg;
    memset(&cfg, 0, sizeof cfg);
    if (cfg_path) {
        if (config_load(&cfg, cfg_path, sets, n_sets)) goto free_cfg;
        size_t per = per_head ? cfg.layers * cfg.kv_heads : 1;
        order = xcalloc(cfg.n_exps * per, sizeof *order);
        if (check_grid(&cfg, cfg_path, per_head, per, in, refs, n_refs, order)) goto free_cfg;
        n_out = cfg.n_exps * per;
    } else if (!quiet) {
        fprintf(stderr, "kvc: merge: no --config, so missing rows were not checked and rows keep the order of "
                        "the inputs\n");
    }

    char *buf = NULL;
    size_t len = 0;
    FILE *mf = xmemstream(&buf, &len, "merge: the merged rows");
    if (fmt == FORMAT_CSV) {
        char *h = results_csv_header(per_head);
        fputs(h, mf);
        free(h);
    }
    for (size_t i = 0; i < n_out; i++) {
        const Ref *r = order ? order[i] : &refs[i];
        const ResultRow *row = row_of(in, r);
        fwrite(in[r->file].text + row->off, 1, row->len, mf);
    }
    fclose(mf);
    rc = EXIT_OK;
    if (out) {
        if (results_write_all(outf.fd, out, buf, len) || fileio_out_commit(&outf)) rc = EXIT_RUNTIME;
    } else if (fwrite(buf, 1, len, stdout) != len || fflush(stdout) != 0) {
        kvc_fail("stdout: write error (got %s)", strerror(errno));
        rc = EXIT_RUNTIME;
    }
    free(buf);
free_cfg:
    free(order);
    config_free(&cfg);
free_refs:
    free(sorted);
    free(refs);
done:
    fileio_out_abort(&outf);   /* a refused merge leaves FILE as it was */
    for (size_t f = 0; f < n_in; f++) {
        results_free(&in[f].rf);
        free(in[f].text);
    }
    free(in);
    return rc;
}
