/* test_expid.c: unit test of src/config/expid.c, the stable experiment ids behind --resume, --shard and merge.
 * What must not change an id (labels, positions, how a value is written, parameter defaults given or left
 * out, JSON key order and whitespace, leading zeros of the seed) and what must (every data value, the seed,
 * the metrics block, the method and each parameter); repeats of one experiment; --per-head row ids; the CSV/JSONL reader of src/report/results.c on torn and bad
 * lines. The ids themselves are checked against an independent implementation in tests/test_expid.py.
 * Prints "PASS name" / "FAIL name: why"; exits 1 if any check failed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "eval/evaluate.h"
#include "config/expid.h"
#include "report/report.h"
#include "report/results.h"
#include "base/util.h"
#include "check.h"

#define DATA "\"data\": {\"tokens\": 64, \"head_dim\": 8, \"keys\": {\"generator\": \"lowrank\", \"rank\": 4, " \
             "\"scale\": 0.5, \"noise\": 0.1, \"outliers\": [{\"channel\": 5, \"scale\": 20}, {\"channel\": 1, " \
             "\"scale\": 8}]}, \"values\": {\"generator\": \"normal\"}, \"query\": {\"generator\": \"look_back\", " \
             "\"token\": 3, \"weight\": 0.5, \"noise\": 0.5}}"
#define BASE "{\"seed\": 42, " DATA ", \"experiments\": [{\"method\": \"quantize\", \"bits\": 4}]}"

/* The id of experiment `which` of config text `json` with --set values (NULL-terminated), or 0 on error. */
static uint64_t id_of(const char *json, size_t which, const char *const *sets)
{
    Config cfg;
    size_t n_sets = 0;
    while (sets && sets[n_sets]) n_sets++;
    if (config_parse(&cfg, "test", json, strlen(json), (char *const *)sets, n_sets)) {
        printf("  config error: %s\n", kvc_errmsg());
        config_free(&cfg);
        return 0;
    }
    uint64_t *ids = xmalloc(cfg.n_exps * sizeof *ids), id = 0;
    if (expid_all(ids, &cfg) == 0 && which < cfg.n_exps) id = ids[which];
    free(ids);
    config_free(&cfg);
    return id;
}

static void same(const char *name, const char *const *sets)
{
    uint64_t a = id_of(BASE, 0, NULL), b = id_of(BASE, 0, sets);
    check(a && a == b, name, "--set %s changed the id (%016llx -> %016llx)", sets[0], (unsigned long long)a,
          (unsigned long long)b);
}

static void differs(const char *name, const char *const *sets)
{
    uint64_t a = id_of(BASE, 0, NULL), b = id_of(BASE, 0, sets);
    check(a && b && a != b, name, "--set %s kept the id %016llx", sets[0], (unsigned long long)a);
}

static void ids(void)
{
    const char *label[] = {"experiments.0.label=\"anything {bits}\"", NULL};
    const char *bits_list[] = {"experiments.0.bits=[8, 4]", NULL};
    const char *axis_default[] = {"experiments.0.axis=\"token\"", "experiments.0.apply_to=\"kv\"", NULL};
    const char *scale_form[] = {"data.keys.scale=5e-1", NULL};
    const char *weight_int[] = {"data.query.weight=0.50", NULL};
    const char *key_order[] = {"data.query={\"noise\": 0.5, \"weight\": 0.5, \"token\": 3, \"generator\": \"look_back\"}",
                               NULL};
    const char *seed_str[] = {"seed=\"0042\"", NULL};
    same("expid-label-is-not-in-the-id", label);
    same("expid-default-given-or-not", axis_default);
    same("expid-number-spelling", scale_form);
    same("expid-number-spelling-2", weight_int);
    same("expid-json-key-order", key_order);
    same("expid-seed-leading-zeros", seed_str);
    uint64_t a = id_of(BASE, 0, NULL), b = id_of(BASE, 1, bits_list);
    check(a && a == b, "expid-list-or-scalar", "bits 4 as a scalar and as list item 1 differ");

    static const char *const change[][2] = {
        {"seed=43", "seed"},
        {"data.tokens=65", "tokens"},
        {"data.head_dim=9", "head_dim"},
        {"data.keys.rank=5", "keys-rank"},
        {"data.keys.scale=0.25", "keys-scale"},
        {"data.keys.noise=0", "keys-noise"},
        {"data.keys.outliers.0.scale=21", "outlier-scale"},
        {"data.keys.outliers.0.channel=6", "outlier-channel"},
        {"data.keys.outliers=[]", "outliers-none"},
        {"data.query.token=4", "query-token"},
        {"data.query.weight=1", "query-weight"},
        {"data.query.noise=0", "query-noise"},
        {"experiments.0.bits=5", "param-bits"},
        {"experiments.0.axis=\"channel\"", "param-axis"},
        {"experiments.0.apply_to=\"k\"", "param-apply-to"},
        {"experiments.0={\"method\": \"lowrank\", \"rank\": 4}", "method"},
    };
    for (size_t i = 0; i < sizeof change / sizeof change[0]; i++) {
        const char *sets[] = {change[i][0], NULL};
        char name[64];
        snprintf(name, sizeof name, "expid-changes-with-%s", change[i][1]);
        differs(name, sets);
    }
    const char *with_metrics[] = {"metrics={\"topk_recall_k\": 8}", NULL};
    differs("expid-changes-with-metrics", with_metrics);
    const char *explicit_default[] = {"data.layers=1", NULL};   /* conservative: the text changed */
    differs("expid-explicit-data-default-is-another-id", explicit_default);
    uint64_t spaced = id_of("{ \"experiments\" : [ {\"bits\": 4, \"method\": \"quantize\"} ] ,\n\t"
                            "\"seed\":42, " DATA " }", 0, NULL);
    check(spaced == a, "expid-whitespace-and-top-level-order", "%016llx vs %016llx", (unsigned long long)spaced,
          (unsigned long long)a);
    uint64_t h = expid_row(a, 1, 2);
    check(h != a && h != expid_row(a, 2, 1) && h == expid_fnv1a(a, "layer=1\nhead=2\n", 15), "expid-per-head-row",
          "%016llx", (unsigned long long)h);

    /* position: the same experiment after another one keeps its id */
    const char *moved = "{\"seed\": 42, " DATA ", \"experiments\": [{\"method\": \"sink_window\", \"window\": 8}, "
                        "{\"method\": \"quantize\", \"bits\": 4, \"label\": \"x\"}]}";
    check(id_of(moved, 1, NULL) == a, "expid-position-independent", "moving the experiment changed its id");

    /* repeats: the first keeps the id, the others get new distinct ones */
    const char *rep = "{\"seed\": 42, " DATA ", \"experiments\": [{\"method\": \"quantize\", \"bits\": 4}, "
                      "{\"method\": \"quantize\", \"bits\": [4, 4]}]}";
    uint64_t r0 = id_of(rep, 0, NULL), r1 = id_of(rep, 1, NULL), r2 = id_of(rep, 2, NULL);
    check(r0 == a && r1 && r2 && r1 != r0 && r2 != r0 && r1 != r2, "expid-repeats", "%016llx %016llx %016llx",
          (unsigned long long)r0, (unsigned long long)r1, (unsigned long long)r2);

    char hex[EXPID_HEX + 1];
    uint64_t back = 0;
    expid_format(hex, 0x00ab00cd00ef0012ULL);
    check(strcmp(hex, "00ab00cd00ef0012") == 0 && expid_parse(hex, 16, &back) == 0 && back == 0x00ab00cd00ef0012ULL &&
              expid_parse("00AB00CD00EF0012", 16, &back) != 0 && expid_parse(hex, 15, &back) != 0,
          "expid-format-parse", "got %s", hex);

}

/* ---- the results reader, on rows written by report.c ---- */

/* One row of a quantize experiment labelled `label` with attn_error 0.5, as report_row writes it. */
static char *row_text(Format fmt, const char *label, const char *id)
{
    Experiment ex;
    memset(&ex, 0, sizeof ex);
    ex.method = method_find("quantize");
    for (size_t i = 0; i < ex.method->n_params; i++) ex.p[i] = ex.method->params[i].def;
    ex.label = (char *)label;
    Row r;
    memset(&r, 0, sizeof r);
    r.ex = &ex;
    r.v[COL_ATTN_ERROR] = 0.5;
    r.has[COL_ATTN_ERROR] = 1;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    report_row(f, fmt, &r, id);
    fclose(f);
    return buf;
}

static void reader(void)
{
    char *h = results_csv_header(0);
    size_t hl = strlen(h);
    char *r1 = row_text(FORMAT_CSV, "a,\"b\"\nc", "0123456789abcdef");
    char *r2 = row_text(FORMAT_CSV, "plain", "fedcba9876543210");
    char buf[8192];
    ResultFile rf;

    snprintf(buf, sizeof buf, "%s%s%s", h, r1, r2);
    int rc = results_parse(&rf, "t.csv", buf, strlen(buf), FORMAT_CSV, 0);
    check(rc == 0 && rf.n == 2 && rf.torn == 0 && rf.rows[0].id == 0x0123456789abcdefULL &&
              strcmp(rf.rows[0].label, "a,\"b\"\nc") == 0 && rf.rows[1].line == 4 && rf.complete == strlen(buf),
          "results-csv-quoted-label", "rc %d n %zu: %s", rc, rf.n, rc ? kvc_errmsg() : "");
    results_free(&rf);

    /* torn inside the quoted label (after its embedded newline), in a plain row, in the header */
    size_t cut[] = {hl + 8, hl + strlen(r1) + 10, hl - 3};
    for (size_t k = 0; k < 3; k++) {
        rc = results_parse(&rf, "t.csv", buf, cut[k], FORMAT_CSV, 0);
        size_t want_n = k == 1 ? 1 : 0, want_complete = k == 0 ? hl : k == 1 ? hl + strlen(r1) : 0;
        char name[48];
        snprintf(name, sizeof name, "results-csv-torn-%zu", k);
        check(rc == 0 && rf.n == want_n && rf.complete == want_complete && rf.torn == cut[k] - want_complete, name,
              "rc %d n %zu complete %zu torn %zu", rc, rf.n, rf.complete, rf.torn);
        results_free(&rf);
    }

    snprintf(buf, sizeof buf, "%s%.*s\n", h, (int)(strlen(r2) - 18), r2);   /* the id cut off: one field short */
    rc = results_parse(&rf, "t.csv", buf, strlen(buf), FORMAT_CSV, 0);
    check(rc != 0 && strstr(kvc_errmsg(), "t.csv:2:"), "results-csv-short-row", "rc %d: %s", rc, kvc_errmsg());
    results_free(&rf);
    snprintf(buf, sizeof buf, "label,method\n%s", r2);
    rc = results_parse(&rf, "t.csv", buf, strlen(buf), FORMAT_CSV, 0);
    check(rc != 0 && strstr(kvc_errmsg(), "header"), "results-csv-other-header", "rc %d: %s", rc, kvc_errmsg());
    results_free(&rf);

    char *j1 = row_text(FORMAT_JSONL, "x\"\n\x01\xc3\xa9", "0123456789abcdef");
    snprintf(buf, sizeof buf, "%s%s", j1, j1);
    rc = results_parse(&rf, "t.jsonl", buf, strlen(buf) - 5, FORMAT_JSONL, -1);
    check(rc == 0 && rf.n == 1 && !rf.per_head && strcmp(rf.rows[0].label, "x\"\n\x01\xc3\xa9") == 0 &&
              rf.torn == strlen(j1) - 5 && rf.rows[0].id == 0x0123456789abcdefULL,
          "results-jsonl", "rc %d n %zu: %s", rc, rf.n, rc ? kvc_errmsg() : "");
    results_free(&rf);
    snprintf(buf, sizeof buf, "{\"label\":\"x\",\"id\":\"0123456789abcdef\"}\n");
    rc = results_parse(&rf, "t.jsonl", buf, strlen(buf), FORMAT_JSONL, 0);
    check(rc != 0 && strstr(kvc_errmsg(), "t.jsonl:1:"), "results-jsonl-other-keys", "rc %d", rc);
    results_free(&rf);

    Format f;
    check(results_format_of_name("a.csv", &f) == 0 && f == FORMAT_CSV && results_format_of_name("a.ndjson", &f) == 0 &&
              f == FORMAT_JSONL && results_format_of_name("a.txt", &f) == 0 && f == FORMAT_TABLE &&
              results_format_of_name("csv", &f) != 0 && results_format_of_name("a.json", &f) != 0,
          "results-format-of-name", "wrong format for a.csv, a.ndjson, a.txt, csv or a.json");
    free(h);
    free(r1);
    free(r2);
    free(j1);
}

int main(void)
{
    ids();
    reader();
    return check_failures ? 1 : 0;
}
