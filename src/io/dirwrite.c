/* dirwrite: write a set of files into a temporary directory inside DIR, then move them in (see dirwrite.h). */
#include "io/dirwrite.h"

#include "base/fileio.h"
#include "base/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* "<dir>/<name>" (no doubled slash). */
static char *path_in(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = xmalloc(n);
    snprintf(p, n, "%s%s%s", dir, dir[0] && dir[strlen(dir) - 1] == '/' ? "" : "/", name);
    return p;
}

/* Registers (add) or forgets the temporary files and directories for the signal handler. */
static void track(const DirWrite *w, int add)
{
    if (add) {
        if (w->created) fileio_cleanup_add(w->dir, 1);
        fileio_cleanup_add(w->tmp, 1);
    }
    for (size_t k = 0; k < w->n; k++) {
        char *p = path_in(w->tmp, w->names[k]);
        if (add) fileio_cleanup_add(p, 0);
        else fileio_cleanup_remove(p);
        free(p);
    }
    if (!add) {
        fileio_cleanup_remove(w->tmp);
        if (w->created) fileio_cleanup_remove(w->dir);
    }
}

int dirwrite_begin(DirWrite *w, const char *dir, const char *const *names, size_t n)
{
    struct stat st;
    memset(w, 0, sizeof *w);
    w->dir = dir;
    w->names = names;
    w->n = n < DIRWRITE_MAX ? n : DIRWRITE_MAX;
    if (!dir[0]) return kvc_fail("synth: -o: the directory name is empty (got \"\")");
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) return kvc_fail("%s: -o: not a directory (got %s)", dir, fileio_kind(st.st_mode));
    } else if (errno != ENOENT || mkdir(dir, 0777) != 0) {
        return kvc_fail("%s: -o: cannot create the output directory (got %s)", dir, strerror(errno));
    } else {
        w->created = 1;
    }
    for (size_t k = 0; k < w->n; k++) { /* a name that is a directory in DIR could not be replaced at the end */
        char *p = path_in(dir, names[k]);
        int isdir = lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
        if (isdir) {
            kvc_fail("%s: -o: cannot replace it with a file: it is a directory (got a directory)", p);
            free(p);
            dirwrite_abort(w);
            return -1;
        }
        free(p);
    }
    w->tmp = path_in(dir, ".kvc-tmp.XXXXXX");
    if (!mkdtemp(w->tmp)) {
        kvc_fail("%s: -o: cannot create a temporary directory in it (got %s)", dir, strerror(errno));
        free(w->tmp);
        w->tmp = NULL;
        dirwrite_abort(w);
        return -1;
    }
    track(w, 1);
    return 0;
}

void dirwrite_abort(DirWrite *w)
{
    if (w->tmp) {
        for (size_t k = 0; k < w->n; k++) {
            char *p = path_in(w->tmp, w->names[k]);
            unlink(p);
            free(p);
        }
        rmdir(w->tmp);
        track(w, 0);
        free(w->tmp);
        w->tmp = NULL;
    }
    if (w->created) rmdir(w->dir);   /* only when empty: nothing else was put there meanwhile */
    w->created = 0;
}

/* Moves the set in: the last name out of DIR first, the others in, the last one last. */
static int commit(DirWrite *w)
{
    char *last = path_in(w->dir, w->names[w->n - 1]);
    int rc = 0;
    if (unlink(last) != 0 && errno != ENOENT)
        rc = kvc_fail("%s: cannot remove the previous one (got %s)", last, strerror(errno));
    free(last);
    for (size_t k = 0; k < w->n && rc == 0; k++) {
        char *from = path_in(w->tmp, w->names[k]), *to = path_in(w->dir, w->names[k]);
        struct stat st;
        if (lstat(from, &st) == 0 && rename(from, to) != 0)
            rc = kvc_fail("%s: cannot move the new file into place (got %s)", to, strerror(errno));
        free(from);
        free(to);
    }
    if (w->created) fileio_cleanup_remove(w->dir);
    w->created = 0;   /* DIR now holds the set (or part of it): never removed */
    dirwrite_abort(w);
    return rc;
}

/* Rewrites "<tmp>/" in the current message to "<dir>/". */
static void name_final(const DirWrite *w)
{
    char *from = path_in(w->tmp, ""), *to = path_in(w->dir, "");
    const char *m = kvc_errmsg();
    size_t lf = strlen(from), lt = strlen(to), len = 0;
    char buf[1024];
    while (*m && len + lt + 1 < sizeof buf) {
        if (strncmp(m, from, lf) == 0) {
            memcpy(buf + len, to, lt);
            len += lt;
            m += lf;
        } else {
            buf[len++] = *m++;
        }
    }
    buf[len] = '\0';
    kvc_fail("%s", buf);
    free(from);
    free(to);
}

int dirwrite_end(DirWrite *w, int rc)
{
    if (rc == 0 && w->n > 0) rc = commit(w) ? 1 : 0;
    else if (rc != 0 && w->tmp) name_final(w);
    dirwrite_abort(w);
    return rc;
}
