/* provenance: what made a result file, for `kvc --version` and the sidecar FILE.meta.json that kvc run --out,
 * kvc merge --out and kvc bench --csv-file write next to FILE (README "Provenance" is the user's manual).
 *
 * The sidecar is one JSON object, rewritten whole (temporary file, then rename):
 *   {"kvc_provenance": 1, "file": "<FILE as named>", "runs": [RUN, ...]}
 * one RUN per command that wrote rows into FILE (a --resume run appends its RUN to those already there):
 *   "command": the command line (a list of words), "started" / "finished": UTC, ISO 8601 to the second
 *   (finished null while the command runs or when it was killed), "exit_status" (null likewise),
 *   "kvc": {"version", "commit", "compiler", "build_flags", "blas", "blas_core", "decode_isa"},
 *   "machine": {"cpu", "logical_cpus", "os"}, and what the command adds: kvc run the config
 *   ({"path", "sha256", "bytes"} of the file as read, and the --set values) and its options, kvc merge its
 *   inputs (each {"path", "sha256", "bytes"} and the "runs" of its own sidecar when it has one).
 * The rows themselves are unchanged (CSV and JSONL keep the columns --resume and kvc merge check), so a row
 * file stays comparable across machines and the sidecar says where each run happened.
 *
 * Only a regular FILE gets a sidecar (--out /dev/null or a FIFO gets none). sha256 is FIPS 180-4 SHA-256 of
 * the bytes, in lower-case hex, what `sha256sum FILE` prints.
 */
#ifndef KVC_CLI_PROVENANCE_H
#define KVC_CLI_PROVENANCE_H

#include <cJSON.h>
#include <stddef.h>
#include <stdint.h>

/* The words of kvc's own command line (main.c sets them), for "command". */
extern int prov_argc;
extern char **prov_argv;

const char *prov_commit(void);     /* `git describe --always --dirty` when kvc was built, or "unknown" */
const char *prov_compiler(void);   /* "gcc 12.2.0" */
const char *prov_build_flags(void);
const char *prov_blas(void);       /* openblas_get_config() */
const char *prov_blas_core(void);  /* openblas_get_corename(): the kernels OpenBLAS chose on this CPU */

/* SHA-256 of data[0..n) as 64 hex digits and a NUL. */
void prov_sha256_hex(char out[65], const void *data, size_t n);
/* {"path": path, "sha256": ..., "bytes": n} of the file's bytes, or NULL with kvc_fail set. */
cJSON *prov_file(const char *path);

/* A new RUN: command, started (now), finished null, exit_status null, kvc, machine. */
cJSON *prov_run_new(void);
/* Sets RUN's finished to now and its exit_status. */
void prov_run_finish(cJSON *run, int exit_status);

/* The "runs" of FILE.meta.json (a copy), or NULL when there is no readable kvc sidecar. A resumed run reads them
 * before it writes its own. */
cJSON *prov_sidecar_runs(const char *file);

/* Writes FILE.meta.json: the runs in before (NULL: none), then RUN. Nothing is written when FILE is not a
 * regular file. Returns 0, or -1 with kvc_fail("FILE.meta.json: ...") on a write error. */
int prov_sidecar(const char *file, const cJSON *before, const cJSON *run);

#endif
