/* sweep: output file, resume, shards and the progress line of `kvc run` (see sweep.h). */
#include "report/sweep.h"
#include "config/expid.h"
#include "report/results.h"
#include "base/fileio.h"
#include "base/util.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct Sweep {
    Format fmt;
    const Config *cfg;
    const char *out;           /* NULL: stdout */
    int fd;                    /* CSV/JSONL file, or the table's temporary file; -1 for stdout */
    FileOut file;              /* --out FILE: appended to (CSV/JSONL) or replaced whole (table); fileio.h */
    int per_head;              /* --per-head rows: per = L x H rows per experiment */
    size_t per, H;
    uint64_t *ids;             /* (n_exps,) experiment ids */
    uint64_t *rid;             /* (n_exps, per) row ids with --per-head, else NULL (the row id is ids[i]) */
    unsigned char *want;       /* (n_exps,) in this shard and not (all) in the file */
    unsigned char *have;       /* (n_exps, per) the row is in the file already; NULL when none is */
    Row *rows;                 /* table: the rows written so far */
    size_t n_rows;
    int quiet;
    int need_header;           /* CSV: the header is still to be written (before the first row) */
    int list;                  /* --list: everything was printed by sweep_open */
    int started;               /* sweep_start opened the output */
    const char *cfg_name;      /* the config's name in messages */
    int resume;                /* --resume */
    /* progress */
    int progress;              /* stderr is a terminal and not -q */
    size_t total, done;        /* experiments */
    double start, last_draw, last_sync, delay;
    int drawn;                 /* the progress line is on the screen */
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- options ---- */

int sweep_parse_shard(const char *s, size_t *i, size_t *n)
{
    char *end;
    if (s[0] < '0' || s[0] > '9') return -1;
    errno = 0;
    unsigned long a = strtoul(s, &end, 10);
    if (errno || *end != '/' || end[1] < '0' || end[1] > '9') return -1;
    unsigned long b = strtoul(end + 1, &end, 10);
    if (errno || *end != '\0' || a < 1 || b < a || b > CONFIG_MAX_ROWS) return -1;
    *i = a;
    *n = b;
    return 0;
}

/* ---- writing ---- */

static int write_all(int fd, const char *buf, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Sends one whole line (or header) to the output: one write(2) for a file. */
static int emit(Sweep *s, const char *buf, size_t n)
{
    if (s->out == NULL) {
        if (fwrite(buf, 1, n, stdout) != n || fflush(stdout) != 0)
            return kvc_fail("stdout: write error (got %s)", strerror(errno));
        return 0;
    }
    if (write_all(s->fd, buf, n))
        return kvc_fail("%s: write error (got %s)", s->out, strerror(errno));
    return 0;
}

/* Writes the CSV header if it is still due; write errors show up here, at run time (exit 1). */
static int header(Sweep *s)
{
    if (!s->need_header) return 0;
    s->need_header = 0;
    char *h = results_csv_header(s->per_head);
    int rc = emit(s, h, strlen(h));
    free(h);
    return rc;
}

static FILE *memstream(char **buf, size_t *len)
{
    FILE *f = open_memstream(buf, len);
    if (!f) {
        fprintf(stderr, "kvc: out of memory (formatting a row)\n");
        abort();
    }
    return f;
}

/* ---- progress ---- */

static void fmt_duration(char *buf, size_t cap, double sec)
{
    if (!(sec < 1e9)) sec = 1e9;
    if (sec < 9.95) {
        snprintf(buf, cap, "%.1fs", sec);
        return;
    }
    unsigned long t = (unsigned long)(sec + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%luh%02lum", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(buf, cap, "%lum%02lus", t / 60, t % 60);
    else snprintf(buf, cap, "%lus", t);
}

static void draw(Sweep *s, double t, int final)
{
    double el = t - s->start, rate = el > 0 ? (double)s->done / el : 0;
    char when[32], line[160];
    if (final)
        fmt_duration(when, sizeof when, el);
    else if (s->done > 0)
        fmt_duration(when, sizeof when, (double)(s->total - s->done) / rate);
    else
        snprintf(when, sizeof when, "?");
    const char *unit = s->per_head ? "experiments" : "rows";
    int n = snprintf(line, sizeof line, "kvc: %zu/%zu %s (%.0f%%), %.*f %s/s, %s %s", s->done, s->total, unit,
                     s->total ? 100.0 * (double)s->done / (double)s->total : 100.0,
                     rate >= 100 ? 0 : rate >= 10 ? 1 : 2, rate, unit, final ? "in" : "ETA", when);
    /* pad over a longer previous line; the line stays under 80 columns */
    fprintf(stderr, "\r%s%*s%s", line, n < 79 ? 79 - n : 0, "", final ? "\n" : "\r");
    fflush(stderr);
    s->drawn = !final;
    s->last_draw = t;
}

static void progress(Sweep *s)
{
    if (!s->progress) return;
    double t = now();
    if (t - s->start < s->delay) return;
    if (s->drawn && t - s->last_draw < 0.25) return;
    draw(s, t, 0);
}

void sweep_message(Sweep *s)
{
    if (s && s->drawn) {
        fputc('\n', stderr);
        s->drawn = 0;
    }
}

/* ---- open ---- */

typedef struct Slot {
    uint64_t id;
    size_t i;
} Slot;

static int by_id(const void *a, const void *b)
{
    const Slot *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

static int resolve_format(const SweepOpts *o, Format *fmt, int fmt_given)
{
    static const char *const names[] = {"table", "csv", "jsonl"};
    if (o->list && (o->out || o->resume))
        return kvc_fail("run: --list writes no file; leave out --out and --resume (got --list with %s)",
                        o->out ? "--out" : "--resume");
    if (!o->out) {
        if (o->resume) return kvc_fail("run: --resume needs --out FILE (got no --out)");
        return 0;
    }
    Format byname;
    int known = results_format_of_name(o->out, &byname) == 0;
    if (fmt_given && known && byname != *fmt)
        return kvc_fail("run: --format %s contradicts the name of the --out file (got \"%s\")", names[*fmt], o->out);
    if (!fmt_given && !known)
        return kvc_fail("run: --out: cannot tell the format from the name; end it in .csv, .jsonl or .txt, or give "
                        "--format (got \"%s\")", o->out);
    if (!fmt_given) *fmt = byname;
    if (o->resume && *fmt == FORMAT_TABLE)
        return kvc_fail("run: --resume needs a CSV or JSONL --out file; a table is written whole at the end (got \"%s\")",
                        o->out);
    return 0;
}

static uint64_t row_id(const Sweep *s, size_t slot)
{
    return s->rid ? s->rid[slot] : s->ids[slot];
}

/* A torn last line may be dropped only when it is the beginning of a row of this config: its label (as far as
 * it goes) begins one of the config's labels. Anything else is not kvc's, and stays. */
static int torn_line_fits(const Config *cfg, const ResultFile *rf)
{
    if (!rf->torn_label) return 1;   /* a torn header, or NUL bytes a crash left after the last row */
    size_t n = strlen(rf->torn_label);
    for (size_t i = 0; i < cfg->n_exps; i++) {
        const char *l = cfg->exps[i].label;
        if (rf->torn_label_whole ? strcmp(l, rf->torn_label) == 0 : strncmp(l, rf->torn_label, n) == 0) return 1;
    }
    return 0;
}

/* --resume: reads FILE, truncates a torn last line, marks the rows it holds. */
static int resume(Sweep *s, const char *cfg_name, size_t *n_present)
{
    char *text;
    size_t len;
    ResultFile rf;
    *n_present = 0;
    if (results_read_fd(s->fd, s->out, &text, &len)) return -1;
    int rc = results_parse(&rf, s->out, text, len, s->fmt, s->per_head);
    size_t n = s->cfg->n_exps * s->per;   /* expected rows, grid order */
    Slot *slot = xmalloc(n * sizeof *slot);
    for (size_t k = 0; k < n; k++) {
        slot[k].id = row_id(s, k);
        slot[k].i = k;
    }
    qsort(slot, n, sizeof *slot, by_id);
    s->have = xcalloc(n, 1);
    for (size_t r = 0; r < rf.n && rc == 0; r++) {
        const ResultRow *row = &rf.rows[r];
        char hex[EXPID_HEX + 1];
        expid_format(hex, row->id);
        Slot key = {row->id, 0}, *hit = bsearch(&key, slot, n, sizeof *slot, by_id);
        if (!hit) {
            rc = kvc_fail("%s:%zu: row \"%s\" (id %s) is not %s of %s as configured now: the config or its "
                          "--set values changed since the file was written; write to a new --out file (got an "
                          "unknown id)", s->out, row->line, row->label, hex,
                          s->per_head ? "a --per-head row" : "an experiment", cfg_name);
            break;
        }
        size_t i = hit->i / s->per;
        const char *label = s->cfg->exps[i].label;
        if (strcmp(label, row->label) != 0) {
            rc = kvc_fail("%s:%zu: row id %s is labelled \"%s\" there but \"%s\" in %s: the labels changed since "
                          "the file was written; write to a new --out file (got another label)",
                          s->out, row->line, hex, row->label, label, cfg_name);
            break;
        }
        if (!s->want[i]) {
            rc = kvc_fail("%s:%zu: row \"%s\" (id %s) belongs to another shard than this run's (got grid position "
                          "%zu)", s->out, row->line, row->label, hex, i);
            break;
        }
        if (s->have[hit->i]) {
            rc = kvc_fail("%s:%zu: row \"%s\" (id %s) is in the file twice (got a duplicate)", s->out, row->line,
                          row->label, hex);
            break;
        }
        s->have[hit->i] = 1;
    }
    /* an experiment is done when all its rows are there */
    for (size_t i = 0; i < s->cfg->n_exps && rc == 0; i++) {
        if (!s->want[i]) continue;
        size_t k = 0;
        while (k < s->per && s->have[i * s->per + k]) k++;
        if (k == s->per) {
            s->want[i] = 0;
            (*n_present)++;
        }
    }
    if (rc == 0 && rf.torn > 0 && !torn_line_fits(s->cfg, &rf))
        rc = kvc_fail("%s:%zu: the last line has no final newline and is not the beginning of a row of %s; kvc "
                      "removes only rows it was cutting short (got a line beginning \"%.40s\")", s->out, rf.torn_line,
                      cfg_name, rf.torn_label);
    if (rc == 0 && rf.torn > 0) {
        if (ftruncate(s->fd, (off_t)rf.complete) != 0)
            rc = kvc_fail("%s: cannot truncate the torn last line (got %s)", s->out, strerror(errno));
        else if (!s->quiet)
            fprintf(stderr, "kvc: %s: removed a torn last line (%zu bytes) left by an interrupted run\n", s->out,
                    rf.torn);
    }
    s->need_header = s->fmt == FORMAT_CSV && rf.header_len == 0;   /* empty, or only a torn header */
    free(slot);
    results_free(&rf);
    free(text);
    return rc;
}

static void sweep_free(Sweep *s)
{
    fileio_out_abort(&s->file);   /* closes s->fd; drops a table's temporary file */
    free(s->ids);
    free(s->rid);
    free(s->want);
    free(s->have);
    free(s->rows);
    free(s);
}

Sweep *sweep_open(const SweepOpts *o, const SweepInput *in)
{
    Format fmt = in->fmt;
    const Config *cfg = in->cfg;
    if (resolve_format(o, &fmt, in->fmt_given)) return NULL;
    Sweep *s = xcalloc(1, sizeof *s);
    s->fmt = fmt;
    s->cfg = cfg;
    s->cfg_name = in->path;
    s->out = o->out;
    s->resume = o->resume;
    s->fd = -1;
    s->quiet = o->quiet;
    s->per_head = in->per_head;
    s->H = in->per_head ? cfg->kv_heads : 1;
    s->per = in->per_head ? cfg->layers * cfg->kv_heads : 1;
    size_t n = cfg->n_exps, nr;
    if (size_mul(n, s->per, &nr)) {
        kvc_fail("run: %zu experiments x %zu heads: too many rows (got an overflow)", n, s->per);
        goto fail;
    }
    s->ids = xmalloc(n * sizeof *s->ids);
    s->want = xmalloc(n);
    if (expid_all(s->ids, cfg)) goto fail;
    if (s->per_head) {
        s->rid = xmalloc(nr * sizeof *s->rid);
        for (size_t i = 0; i < n; i++)
            for (size_t k = 0; k < s->per; k++) s->rid[i * s->per + k] = expid_row(s->ids[i], k / s->H, k % s->H);
    }
    for (size_t i = 0; i < n; i++) s->want[i] = o->shard_n == 0 || i % o->shard_n == o->shard_i - 1;
    if (o->list) {
        for (size_t i = 0; i < n; i++) {
            if (!s->want[i]) continue;
            char hex[EXPID_HEX + 1];
            expid_format(hex, s->ids[i]);
            printf("%zu\t%s\texperiments.%zu\t", i, hex, cfg->exps[i].src);
            for (const char *c = cfg->exps[i].label; *c; c++) putchar(*c == '\t' || *c == '\n' || *c == '\r' ? ' ' : *c);
            putchar('\n');
            s->want[i] = 0;
        }
        s->list = 1;
    }
    return s;
fail:
    sweep_free(s);
    return NULL;
}

int sweep_start(Sweep *s)
{
    assert(!s->list && !s->started);
    size_t n = s->cfg->n_exps, present = 0;
    if (s->fmt == FORMAT_TABLE && !s->rows) s->rows = xcalloc(n * s->per, sizeof *s->rows);
    if (s->out && s->fmt == FORMAT_TABLE) {
        if (fileio_out_open(&s->file, s->out, FILEIO_REPLACE)) goto fail;   /* temporary, renamed at the end */
        s->fd = s->file.fd;
    } else if (s->out) {
        if (fileio_out_open(&s->file, s->out, FILEIO_APPEND)) goto fail;    /* locked when regular */
        s->fd = s->file.fd;
        int regular = s->file.regular;
        if (s->resume && !regular) {
            kvc_fail("%s: --resume needs a regular file (got a device, pipe or socket)", s->out);
            goto fail;
        }
        if (s->resume) {
            if (resume(s, s->cfg_name, &present)) goto fail;
        } else {
            if (regular && ftruncate(s->fd, 0) != 0) {
                kvc_fail("%s: cannot truncate the --out file (got %s)", s->out, strerror(errno));
                goto fail;
            }
            s->need_header = s->fmt == FORMAT_CSV;
        }
    } else {
        s->need_header = s->fmt == FORMAT_CSV;
    }
    for (size_t i = 0; i < n; i++) s->total += s->want[i];
    if (s->resume && present > 0 && !s->quiet)
        fprintf(stderr, "kvc: %s: %zu %s already there; running the other %zu\n", s->out, present,
                s->per_head ? "experiments" : "rows", s->total);

    const char *d = getenv("KVC_PROGRESS_DELAY");
    char *end;
    s->delay = d && *d ? strtod(d, &end) : 1.0;
    if (!d || !*d || *end || !(s->delay >= 0)) s->delay = 1.0;
    s->progress = !s->quiet && isatty(STDERR_FILENO);
    s->start = s->last_sync = now();
    s->started = 1;
    return 0;
fail:   /* as before sweep_start: sweep_close only frees */
    fileio_out_abort(&s->file);
    s->fd = -1;
    return -1;
}

int sweep_wants(const Sweep *s, size_t i)
{
    return s->want[i];
}

int sweep_rows(Sweep *s, const Row *rows, size_t n, size_t i)
{
    assert(s->started && n == s->per);
    int rc = 0;
    if (s->fmt == FORMAT_TABLE) {
        for (size_t k = 0; k < n; k++) s->rows[s->n_rows++] = rows[k];
    } else {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = memstream(&buf, &len);
        for (size_t k = 0; k < n; k++) {
            if (s->have && s->have[i * s->per + k]) continue;
            assert(!s->per_head || (rows[k].layer == k / s->H && rows[k].head == k % s->H));
            char hex[EXPID_HEX + 1];
            expid_format(hex, row_id(s, s->rid ? i * s->per + k : i));
            report_row(f, s->fmt, &rows[k], hex);
        }
        fclose(f);
        rc = header(s);
        if (rc == 0) rc = emit(s, buf, len);   /* every row of the experiment in one write */
        free(buf);
        if (rc == 0 && s->out) {
            double t = now();
            if (t - s->last_sync >= 1.0) {
                fsync(s->fd);
                s->last_sync = t;
            }
        }
    }
    s->done++;
    progress(s);
    return rc;
}

int sweep_close(Sweep *s, int ok)
{
    if (!s) return 0;
    int rc = 0;
    if (s->list || !s->started) {
        sweep_free(s);
        return 0;
    }
    if (s->drawn) draw(s, now(), 1);
    rc = header(s);
    if (rc == 0 && ok && s->fmt == FORMAT_TABLE) {
        if (!s->out) {
            report_table(stdout, s->rows, s->n_rows);
        } else {
            char *buf = NULL;
            size_t len = 0;
            FILE *f = memstream(&buf, &len);
            report_table(f, s->rows, s->n_rows);
            fclose(f);
            if (write_all(s->fd, buf, len))
                rc = kvc_fail("%s: write error (got %s)", s->out, strerror(errno));
            else
                rc = fileio_out_commit(&s->file);   /* fsync, lock check, rename onto FILE */
            s->fd = -1;
            free(buf);
        }
    } else if (rc == 0 && s->out && s->fmt != FORMAT_TABLE) {
        rc = fileio_out_commit(&s->file);   /* fsync and close */
        s->fd = -1;
    }
    sweep_free(s);
    return rc;
}
