/* dirwrite: a set of files written into a directory as a whole (kvc synth -o DIR), so that a failure part way
 * (a full disk, a signal) never leaves DIR holding files of two data sets.
 *
 * dirwrite_begin creates DIR when it is missing (one level) and a fresh temporary directory inside it,
 * "DIR/.kvc-tmp.XXXXXX" (inside, so that it is on DIR's filesystem and the moves below are renames); the
 * caller writes every file of the set into w.tmp. dirwrite_commit then moves them into DIR: it removes the
 * set's last name from DIR first (kvc synth's files.json, the file that refers to the others), renames the
 * others in, and the last one last. So DIR holds the old set untouched until every new file is written, and
 * a files.json in DIR always comes with all of its files. A failure while writing (the common one) leaves DIR
 * as it was; a failure while moving leaves DIR without the set's last file (not loadable, never a mix).
 * dirwrite_abort removes the temporary directory (and DIR when dirwrite_begin created it). The temporary
 * directory and its files are removed on SIGINT, SIGTERM and SIGHUP too (base/fileio.h).
 *
 * Files in DIR that are not in the set are left alone. A name of the set that exists in DIR as a directory is
 * refused by dirwrite_begin, before anything is written.
 *
 * Errors: -1 with kvc_fail set for what is wrong before writing (DIR is a file, cannot be created, ...: exit 2);
 * dirwrite_end returns 1 with kvc_fail set when moving the files in failed (exit 1). Messages name the files
 * by their final paths in DIR, never the temporary ones.
 */
#ifndef KVC_DIRWRITE_H
#define KVC_DIRWRITE_H

#include <stddef.h>

#define DIRWRITE_MAX 8   /* names in a set */

typedef struct DirWrite {
    const char *dir;     /* DIR as given */
    char *tmp;           /* the temporary directory: write the set here */
    int created;         /* DIR did not exist and was created */
    const char *const *names;
    size_t n;
} DirWrite;

/* names[0..n) (n <= DIRWRITE_MAX; plain file names, the last one committed last) stay the caller's. */
int dirwrite_begin(DirWrite *w, const char *dir, const char *const *names, size_t n);
/* rc == 0: moves the set into DIR (dirwrite_commit) and returns 0, or 1 when that failed; rc != 0 (writing
 * failed): dirwrite_abort and returns rc. Either way w is finished, and a message naming a temporary path is
 * rewritten to name the file in DIR. */
int dirwrite_end(DirWrite *w, int rc);
void dirwrite_abort(DirWrite *w);

#endif
