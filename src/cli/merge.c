/* merge: `kvc merge FILE...`, one results file from the files of shards or resumed runs: the options here, the
 * checks and the writing in src/report/merge.h. */
#include "cli/cli.h"
#include "base/util.h"
#include "cli/provenance.h"
#include "report/merge.h"

#include <stdlib.h>

const char cmd_merge_usage[] =
    "usage: kvc merge [--config CONFIG.json [--set PATH=JSON]...] [--out FILE] [-q] FILE...\n"
    "\n"
    "Combines the CSV (or JSONL) files of kvc run --shard or --resume into one, keyed by the id column.\n"
    "Refuses a torn last line, a row that appears twice and mixed formats. With --config (and the same\n"
    "--set values as the runs) it also refuses rows that are not in the config's grid, labels that\n"
    "changed and missing rows, and writes the rows in grid order: merged shards equal the unsharded run.\n"
    "\n"
    "  --config CONFIG.json  the config the files were run from; without it missing rows go unnoticed\n"
    "  --set PATH=JSON       the overrides the runs used (repeatable, needs --config)\n"
    "  --out FILE            write FILE whole (temporary file, then rename) instead of stdout\n"
    "  -q, --quiet           no notes on stderr\n"
    "  -h, --help            this help\n";

enum { MERGE_CONFIG, MERGE_SET, MERGE_OUT, MERGE_QUIET };
const OptSpec cmd_merge_opts[] = {
    [MERGE_CONFIG] = {"--config", NULL, 1},
    [MERGE_SET] = {"--set", NULL, 1},
    [MERGE_OUT] = {"--out", NULL, 1},
    [MERGE_QUIET] = {"-q", "--quiet", 0},
    {NULL, NULL, 0},
};

/* The RUN record of FILE.meta.json (provenance.h): the config and --set values, and each input file with the runs
 * of its own sidecar, so that the merged file says where every row was computed. An input that cannot be read
 * is left to merge_files to report. */
static cJSON *merge_provenance(const MergeArgs *a)
{
    cJSON *run = prov_run_new();
    if (a->config) {
        cJSON *cfg = prov_file(a->config);
        if (!cfg) cfg = cJSON_CreateObject(), cJSON_AddStringToObject(cfg, "path", a->config);
        cJSON *set = cJSON_AddArrayToObject(cfg, "sets");
        for (size_t i = 0; i < a->n_sets; i++) cJSON_AddItemToArray(set, cJSON_CreateString(a->sets[i]));
        cJSON_AddItemToObject(run, "config", cfg);
    }
    cJSON *inputs = cJSON_AddArrayToObject(run, "inputs");
    for (size_t i = 0; i < a->n_files; i++) {
        cJSON *in = prov_file(a->files[i]);
        if (!in) continue;
        cJSON *runs = prov_sidecar_runs(a->files[i]);
        if (runs) cJSON_AddItemToObject(in, "runs", runs);
        else cJSON_AddNullToObject(in, "runs");
        cJSON_AddItemToArray(inputs, in);
    }
    return run;
}

int cmd_merge(int argc, char **argv)
{
    MergeArgs a = {0};
    char **sets = xcalloc((size_t)argc, sizeof *sets);
    const char **files = xcalloc((size_t)argc, sizeof *files);
    int rc = EXIT_USAGE;
    OptParser p;
    opt_init(&p, "merge", argc, argv, cmd_merge_opts);
    for (int k; (k = opt_next(&p)) != OPT_END;) {
        if (k == OPT_ERROR) goto done;
        if (k == OPT_ARG) files[a.n_files++] = p.value;
        else if (k == MERGE_SET) sets[a.n_sets++] = (char *)p.value;
        else if (k == MERGE_QUIET) a.quiet = 1;
        else if (!*p.value) {
            kvc_fail("%s: needs a file name (got \"\")", p.where);
            goto done;
        } else if (k == MERGE_CONFIG) {
            a.config = p.value;
        } else {
            a.out = p.value;
        }
    }
    if (a.n_files == 0) {
        kvc_fail("merge: no input files; usage: kvc merge [--config CONFIG.json] FILE... (got nothing)");
        goto done;
    }
    if (a.n_sets > 0 && !a.config) {
        kvc_fail("merge: --set needs --config (got --set %s)", sets[0]);
        goto done;
    }
    a.sets = sets, a.files = files;
    cJSON *prov = a.out ? merge_provenance(&a) : NULL;   /* the inputs as they are before FILE is written */
    rc = merge_files(&a);
    if (prov && rc == EXIT_OK) {
        prov_run_finish(prov, rc);
        if (prov_sidecar(a.out, NULL, prov)) rc = EXIT_RUNTIME;   /* kvc_fail set: cmd_fail prints it */
    }
    cJSON_Delete(prov);
done:
    free(sets);
    free(files);
    return rc == EXIT_OK ? rc : cmd_fail(rc);
}
