/* sweep: output file, resume, shards and the progress line of `kvc run` (see sweep.h). */
#include "report/sweep.h"
#include "config/expid.h"
#include "report/results.h"
#include "base/fileio.h"
#include "base/util.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
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
    double last_sync;          /* the last fsync of FILE */
    /* progress: a thread redraws the line on a clock; the fields from `total` on are shared with it, under mu */
    int progress;              /* stderr is a terminal and not -q (nor --list) */
    int running;               /* the thread runs (from the first sweep_phase / sweep_row to progress_end) */
    int tty_rows;              /* rows go to stdout, which is a terminal too: the line makes way for them */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;                  /* the thread is to end */
    size_t total, done;        /* experiments of this run, and those written */
    double start, rows_start, delay;   /* the first phase, the first row (0: none yet), KVC_PROGRESS_DELAY */
    const char *phase;         /* "making data", "reference"; NULL: rows */
    const char *label;         /* the row being run */
    const char *step;          /* a step of that row ("timing"), or NULL */
    int width;                 /* columns of the line now on the screen, cursor after it; 0: none */
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

static void make_way(Sweep *s, int *shown);
static void take_back(Sweep *s, int shown);

/* Sends one whole line (or header) to the output: one write(2) for a file. Rows written to a terminal's stdout
 * take the progress line's place, and it is drawn again below them. */
static int emit(Sweep *s, const char *buf, size_t n)
{
    if (s->out == NULL) {
        int shown = 0, rc = 0;
        make_way(s, &shown);
        if (fwrite(buf, 1, n, stdout) != n || fflush(stdout) != 0)
            rc = kvc_fail("stdout: write error (got %s)", strerror(errno));
        take_back(s, shown);
        return rc;
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

/* ---- progress ----
 * One line on stderr (a terminal), redrawn every PROGRESS_PERIOD seconds by a thread that only formats and writes
 * it, so that it keeps its clock during a long row. The cursor stays after the text (padding is taken back with
 * backspaces), so an interrupt's "^C" lands after it. On SIGINT, SIGTERM or SIGHUP the hook below, run by
 * base/fileio's handler before it removes temporaries and lets the signal end the process, ends the line with a
 * newline, so that the shell's prompt starts on a line of its own. Every write of the line happens between
 * line_writing = 1 and 0 and only while line_dying is 0 (sequentially consistent atomics: the hook either sees
 * the write in progress and waits for it, or the writer sees the hook and writes nothing); writers block the three
 * signals while they write, so the hook never waits for its own thread. */

#define PROGRESS_PERIOD 0.2   /* seconds between redraws */
#define PROGRESS_COLS 79      /* the line's width at most */

static atomic_int line_open;      /* the line is on the screen without its newline */
static atomic_int line_writing;   /* a writer is writing the line */
static atomic_int line_dying;     /* the signal hook runs: nothing more is written */

static void end_line_on_signal(int sig)
{
    (void)sig;
    atomic_store(&line_dying, 1);
    double until = now() + 0.5;   /* clock_gettime is async-signal-safe; a write held up by ^S is not waited out */
    while (atomic_load(&line_writing) && now() < until) {
    }
    if (atomic_load(&line_open)) {
        ssize_t w = write(STDERR_FILENO, "\n", 1);
        (void)w;
    }
}

static void block_signals(sigset_t *old)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, old);
}

/* Writes buf[0..n) to stderr, after which the line is open (open = 1: the cursor after the progress text) or not. */
static void tty_write(const char *buf, size_t n, int open)
{
    sigset_t old;
    block_signals(&old);
    atomic_store(&line_writing, 1);
    if (!atomic_load(&line_dying)) {
        write_all(STDERR_FILENO, buf, n);
        atomic_store(&line_open, open);
    }
    atomic_store(&line_writing, 0);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

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

/* Copies src into dst (cap bytes) up to `cols` characters: control characters become spaces, a UTF-8 character is
 * never cut. Returns the columns used (one per character). */
static int fit(char *dst, size_t cap, const char *src, int cols)
{
    size_t n = 0;
    int c = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p && n + 5 < cap; p++) {
        int cont = (*p & 0xC0) == 0x80;
        if (!cont && c == cols) break;
        c += !cont;
        dst[n++] = *p < 0x20 || *p == 0x7f ? ' ' : (char)*p;
    }
    dst[n] = '\0';
    return c;
}

/* The text of the line at time t (under mu); final: the summary at the end. */
static void compose(const Sweep *s, double t, int final, char *text, size_t cap)
{
    const char *unit = s->per_head ? "experiment" : "row";
    double rt = s->rows_start > 0 ? t - s->rows_start : 0, rate = rt > 0 ? (double)s->done / rt : 0;
    double pct = s->total ? 100.0 * (double)s->done / (double)s->total : 100.0;
    char el[32], eta[32];
    fmt_duration(el, sizeof el, t - s->start);
    if (final) {
        snprintf(text, cap, "kvc: %zu/%zu %ss (%.0f%%), %.*f %ss/s, in %s", s->done, s->total, unit, pct,
                 rate >= 100 ? 0 : rate >= 10 ? 1 : 2, rate, unit, el);
        return;
    }
    if (s->phase) {
        snprintf(text, cap, "kvc: %s  %s", el, s->phase);
        return;
    }
    if (s->done > 0 && rate > 0) fmt_duration(eta, sizeof eta, (double)(s->total - s->done) / rate);
    else snprintf(eta, sizeof eta, "?");
    size_t k = s->done < s->total ? s->done + 1 : s->total;
    int fp16 = s->step && strstr(s->step, "FP16");   /* the reference is nobody's row: no label */
    snprintf(text, cap, "kvc: %s  %s %zu/%zu (%.0f%%, ETA %s)  %s%s%s", el, unit, k, s->total, pct, eta,
             s->step ? s->step : "", s->step && !fp16 ? ": " : "", fp16 || !s->label ? "" : s->label);
}

/* Redraws the line (under mu): final ends it with the summary and a newline, close ends it as it is. */
static void draw(Sweep *s, int final, int close)
{
    char text[512], line[512 + 2 * PROGRESS_COLS + 8];
    compose(s, now(), final, text, sizeof text);
    size_t n = 0;
    line[n++] = '\r';
    int cols = fit(line + n, 512, text, PROGRESS_COLS);
    n += strlen(line + n);
    int pad = s->width > cols ? s->width - cols : 0;
    for (int k = 0; k < pad; k++) line[n++] = ' ';
    if (final || close) {
        line[n++] = '\n';
    } else {
        for (int k = 0; k < pad; k++) line[n++] = '\b';
    }
    tty_write(line, n, !(final || close));
    s->width = final || close ? 0 : cols;
}

/* Takes the line off the screen (under mu), so that other text can be written there. */
static void clear_line(Sweep *s)
{
    if (s->width == 0) return;
    char line[2 * PROGRESS_COLS + 4];
    size_t n = 0;
    line[n++] = '\r';
    for (int k = 0; k < s->width; k++) line[n++] = ' ';
    line[n++] = '\r';
    tty_write(line, n, 0);
    s->width = 0;
}

static int visible(const Sweep *s)
{
    return s->running && now() - s->start >= s->delay;
}

static void *progress_main(void *arg)
{
    Sweep *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        double t = now(), wake = t + PROGRESS_PERIOD;
        if (t - s->start >= s->delay) draw(s, 0, 0);
        else wake = s->start + s->delay;
        struct timespec ts = {(time_t)wake, (long)((wake - (double)(time_t)wake) * 1e9)};
        if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
        while (!s->stop && pthread_cond_timedwait(&s->cv, &s->mu, &ts) == 0) {
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Starts the clock and, on a terminal, the thread (at the first phase). */
static void progress_begin(Sweep *s)
{
    if (s->running || s->start > 0) return;
    s->start = now();
    if (!s->progress) return;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->mu, NULL);
    atomic_store(&line_dying, 0);
    fileio_signal_hook(end_line_on_signal);
    sigset_t old;
    block_signals(&old);   /* the thread inherits the mask: the signals go to the other threads */
    s->running = pthread_create(&s->thread, NULL, progress_main, s) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!s->running) {   /* no thread, no progress line; the run goes on */
        fileio_signal_hook(NULL);
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        s->progress = 0;
    }
}

/* Stops the thread and ends the line: with the summary (final) or as it stands. Later text goes below it. */
static void progress_end(Sweep *s, int final)
{
    if (!s->running) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    if (s->width > 0) draw(s, final, 1);   /* shown: leave the last state there */
    s->running = 0;
    fileio_signal_hook(NULL);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
}

static void lock(Sweep *s)
{
    if (s->running) pthread_mutex_lock(&s->mu);
}

static void unlock(Sweep *s)
{
    if (s->running) pthread_mutex_unlock(&s->mu);
}

void sweep_phase(Sweep *s, const char *phase)
{
    if (!s || s->list) return;
    lock(s);
    s->phase = phase;
    unlock(s);
    progress_begin(s);   /* at the first phase, which the thread then shows first */
    lock(s);
    if (visible(s)) draw(s, 0, 0);   /* every phase shows at once, however short */
    unlock(s);
}

void sweep_row(Sweep *s, size_t i)
{
    if (!s || s->list) return;
    lock(s);
    s->phase = NULL;
    s->label = s->cfg->exps[i].label;
    s->step = NULL;
    unlock(s);
    progress_begin(s);
    lock(s);
    if (s->rows_start == 0) s->rows_start = now();
    if (visible(s)) draw(s, 0, 0);   /* a new row shows at once */
    unlock(s);
}

void sweep_step(Sweep *s, const char *step)
{
    if (!s) return;
    lock(s);
    s->step = step;
    if (visible(s)) draw(s, 0, 0);
    unlock(s);
}

void sweep_note(Sweep *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (!s || !s->running) {
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
        return;
    }
    char msg[1024];
    int n = vsnprintf(msg, sizeof msg - 1, fmt, ap);
    va_end(ap);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof msg - 1 ? (size_t)n : sizeof msg - 2;
    msg[len++] = '\n';
    pthread_mutex_lock(&s->mu);
    int shown = s->width > 0;
    clear_line(s);
    tty_write(msg, len, 0);
    if (shown) draw(s, 0, 0);
    pthread_mutex_unlock(&s->mu);
}

void sweep_stop(Sweep *s)
{
    if (s) progress_end(s, 0);
}

/* Around rows written to stdout when it is the terminal too: the line is taken off (mu held until take_back). */
static void make_way(Sweep *s, int *shown)
{
    *shown = 0;
    if (!s->running || !s->tty_rows) return;
    pthread_mutex_lock(&s->mu);
    *shown = s->width > 0;
    clear_line(s);
}

static void take_back(Sweep *s, int shown)
{
    if (!s->running || !s->tty_rows) return;
    if (shown) draw(s, 0, 0);
    pthread_mutex_unlock(&s->mu);
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
            sweep_note(s, "kvc: %s: removed a torn last line (%zu bytes) left by an interrupted run", s->out,
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
    progress_end(s, 0);
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
    s->progress = !o->quiet && !o->list && isatty(STDERR_FILENO);
    s->tty_rows = !o->out && isatty(STDOUT_FILENO);
    const char *d = getenv("KVC_PROGRESS_DELAY");
    char *end;
    s->delay = d && *d ? strtod(d, &end) : 1.0;
    if (!d || !*d || *end || !(s->delay >= 0)) s->delay = 1.0;
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
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += s->want[i];
    lock(s);
    s->total = total;
    unlock(s);
    if (s->resume && present > 0 && !s->quiet)
        sweep_note(s, "kvc: %s: %zu %s already there; running the other %zu", s->out, present,
                   s->per_head ? "experiments" : "rows", total);
    progress_begin(s);   /* the clock starts here at the latest */
    s->last_sync = now();
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
        FILE *f = xmemstream(&buf, &len, "formatting a row");
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
    lock(s);
    s->done++;
    unlock(s);
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
    progress_end(s, ok);   /* the summary line, or the line as it stood */
    rc = header(s);
    if (rc == 0 && ok && s->fmt == FORMAT_TABLE) {
        if (!s->out) {
            report_table(stdout, s->rows, s->n_rows);
        } else {
            char *buf = NULL;
            size_t len = 0;
            FILE *f = xmemstream(&buf, &len, "formatting a row");
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
