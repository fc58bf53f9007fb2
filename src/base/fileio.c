/* fileio: regular-file reading without blocking, the output-file protocol (classify, lock, temporary, rename)
 * and the signal handler that removes temporaries (see fileio.h). */
#define _GNU_SOURCE /* F_OFD_SETLK (Linux open-file-description locks) */
#include "base/fileio.h"

#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

const char *fileio_kind(mode_t mode)
{
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISLNK(mode)) return "a symbolic link";
    return "a special file";
}

/* ---- reading ---- */

static void set_blocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK)) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
}

int fileio_open_regular(const char *path, int *fd)
{
    struct stat st;
    *fd = -1;
    /* stat first, so that a device is never even opened (opening some has side effects) */
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return kvc_fail("%s: not a regular file (got %s)", path, fileio_kind(st.st_mode));
    int f = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (f < 0) return kvc_fail("%s: cannot open (got %s)", path, strerror(errno));
    if (fstat(f, &st) != 0) {
        int e = errno;
        close(f);
        return kvc_fail("%s: cannot stat (got %s)", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) { /* replaced between stat and open */
        close(f);
        return kvc_fail("%s: not a regular file (got %s)", path, fileio_kind(st.st_mode));
    }
    set_blocking(f);
    *fd = f;
    return 0;
}

/* ---- locks ---- */

/* An exclusive lock on the whole file: 0 (also where the filesystem has no locks), or -1 with kvc_fail. */
static int lock_excl(int fd, const char *name)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    int r = -1;
#ifdef F_OFD_SETLK
    r = fcntl(fd, F_OFD_SETLK, &fl);
    if (r != 0 && errno == EINVAL) { /* a kernel without OFD locks */
        memset(&fl, 0, sizeof fl);
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        r = fcntl(fd, F_SETLK, &fl);
    }
#else
    r = fcntl(fd, F_SETLK, &fl);
#endif
    if (r == 0 || errno == ENOLCK || errno == EINVAL) return 0;
    if (errno == EACCES || errno == EAGAIN)
        return kvc_fail("%s: another kvc is writing this file (got a lock held by another process)", name);
    return kvc_fail("%s: cannot lock the file (got %s)", name, strerror(errno));
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* Locks the regular file that path names now, if there is one we may open for writing: *lfd is its
 * descriptor, or -1 (no such file, or not writable: then nobody appends to it either). -1 with kvc_fail when
 * another process holds its lock. */
static int lock_existing(const char *path, const char *name, int *lfd)
{
    *lfd = -1;
    for (int tries = 0; tries < 100; tries++) {
        int fd = open(path, O_RDWR | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) return 0;
        struct stat a, b;
        if (fstat(fd, &a) != 0 || !S_ISREG(a.st_mode)) {
            close(fd);
            return 0;
        }
        if (lock_excl(fd, name)) {
            close(fd);
            return -1;
        }
        if (stat(path, &b) == 0 && same_file(&a, &b)) {
            *lfd = fd;
            return 0;
        }
        close(fd);   /* renamed over between open and lock: lock the new one */
    }
    return kvc_fail("%s: the file keeps being replaced while kvc locks it (got 100 tries)", name);
}

/* ---- output ---- */

static mode_t file_mode(void)
{
    mode_t um = umask(0);
    umask(um);
    return 0666 & ~um;
}

static int open_stream(FileOut *o, const char *path)
{
    int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);   /* a FIFO: waits for its reader, like `> FIFO` */
    if (fd < 0) return kvc_fail("%s: cannot open the --out file (got %s)", path, strerror(errno));
    o->fd = fd;
    o->regular = 0;
    o->open = 1;
    return 0;
}

static int open_append(FileOut *o, const char *path)
{
    for (int tries = 0; tries < 100; tries++) {
        int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_NOCTTY | O_CLOEXEC, 0666);
        if (fd < 0) return kvc_fail("%s: cannot open the --out file (got %s)", path, strerror(errno));
        struct stat a, b;
        if (fstat(fd, &a) != 0) {
            int e = errno;
            close(fd);
            return kvc_fail("%s: cannot stat the --out file (got %s)", path, strerror(e));
        }
        o->fd = fd;
        o->open = 1;
        if (!S_ISREG(a.st_mode)) { /* became a FIFO or device after the first look: write through */
            o->regular = 0;
            return 0;
        }
        if (lock_excl(fd, path)) {
            close(fd);
            o->fd = -1;
            o->open = 0;
            return -1;
        }
        if (stat(path, &b) == 0 && same_file(&a, &b)) return 0;
        close(fd);   /* a rename replaced FILE between open and lock: open what it names now */
        o->fd = -1;
        o->open = 0;
    }
    return kvc_fail("%s: the file keeps being replaced while kvc opens it (got 100 tries)", path);
}

static int open_replace(FileOut *o, const char *path, int is_link)
{
    o->target = is_link ? realpath(path, NULL) : xstrdup(path);
    if (!o->target) return kvc_fail("%s: cannot resolve the symbolic link (got %s)", path, strerror(errno));
    o->open = 1;
    if (lock_existing(o->target, path, &o->lock_fd)) goto fail;
    size_t n = strlen(o->target) + 16;
    o->tmp = xmalloc(n);
    snprintf(o->tmp, n, "%s.tmp.XXXXXX", o->target);
    o->fd = mkstemp(o->tmp);
    if (o->fd < 0) {
        kvc_fail("%s: cannot create a temporary file next to it (got %s)", path, strerror(errno));
        free(o->tmp);
        o->tmp = NULL;
        goto fail;
    }
    fileio_cleanup_add(o->tmp, 0);
    fcntl(o->fd, F_SETFD, FD_CLOEXEC);
    if (fchmod(o->fd, file_mode()) != 0) {
        kvc_fail("%s: chmod (got %s)", o->tmp, strerror(errno));
        goto fail;
    }
    return 0;
fail:
    fileio_out_abort(o);
    return -1;
}

int fileio_out_open(FileOut *o, const char *path, FileioMode mode)
{
    memset(o, 0, sizeof *o);
    o->fd = o->lock_fd = -1;
    o->name = path;
    o->regular = 1;
    struct stat lst, st;
    int exists = lstat(path, &lst) == 0, is_link = exists && S_ISLNK(lst.st_mode);
    st = lst;
    if (is_link && stat(path, &st) != 0) {
        if (errno == ENOENT)
            return kvc_fail("%s: a symbolic link to a file that does not exist; give the file's own name "
                            "(got a dangling link)", path);
        return kvc_fail("%s: cannot follow the symbolic link (got %s)", path, strerror(errno));
    }
    /* other lstat errors (a missing directory, no permission) are reported by the open or mkstemp below */
    if (exists && !S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode) && !S_ISFIFO(st.st_mode))
        return kvc_fail("%s: cannot write the output there: it must be a regular file, a character device or a "
                        "FIFO (got %s)", path, fileio_kind(st.st_mode));
    if (exists && !S_ISREG(st.st_mode)) return open_stream(o, path);
    return mode == FILEIO_APPEND ? open_append(o, path) : open_replace(o, path, is_link);
}

int fileio_out_commit(FileOut *o)
{
    if (!o->open) return 0;
    int rc = 0;
    if (o->regular && fsync(o->fd) != 0 && errno != EINVAL && errno != EROFS)
        rc = kvc_fail("%s: write error (got %s)", o->name, strerror(errno));
    if (close(o->fd) != 0 && rc == 0) rc = kvc_fail("%s: write error (got %s)", o->name, strerror(errno));
    o->fd = -1;
    if (rc == 0 && o->tmp) {
        /* whatever FILE names now must not be another writer's: lock it too (a no-op when it is ours) */
        struct stat cur, held;
        int extra = -1;
        if (stat(o->target, &cur) == 0 &&
            !(o->lock_fd >= 0 && fstat(o->lock_fd, &held) == 0 && same_file(&held, &cur))) {
            if (!S_ISREG(cur.st_mode))
                rc = kvc_fail("%s: became %s while kvc was writing the output; left as it is (got %s)", o->name,
                              fileio_kind(cur.st_mode), fileio_kind(cur.st_mode));
            else
                rc = lock_existing(o->target, o->name, &extra);
        }
        if (rc == 0 && rename(o->tmp, o->target) != 0)
            rc = kvc_fail("%s: cannot rename the finished file onto it (got %s)", o->name, strerror(errno));
        if (rc == 0) {
            fileio_cleanup_remove(o->tmp);
            free(o->tmp);
            o->tmp = NULL;
        }
        if (extra >= 0) close(extra);
    }
    fileio_out_abort(o);
    return rc;
}

void fileio_out_abort(FileOut *o)
{
    if (!o->open) return;
    if (o->fd >= 0) close(o->fd);
    if (o->tmp) {
        unlink(o->tmp);
        fileio_cleanup_remove(o->tmp);
        free(o->tmp);
    }
    if (o->lock_fd >= 0) close(o->lock_fd);   /* releases the lock */
    free(o->target);
    memset(o, 0, sizeof *o);
    o->fd = o->lock_fd = -1;
}

/* ---- signals ---- */

#define SLOTS 16
static char slot_path[SLOTS][PATH_MAX];
static volatile sig_atomic_t slot_state[SLOTS];   /* 0 free, 1 a file, 2 a directory */
static volatile sig_atomic_t slot_seq[SLOTS];     /* registration order, for directories */
static sig_atomic_t next_seq;
static void (*_Atomic sig_hook)(int);            /* fileio_signal_hook */

static void on_signal(int sig)
{
    unsigned char done[SLOTS] = {0};
    void (*hook)(int) = atomic_load(&sig_hook);
    if (hook) hook(sig);
    for (int k = 0; k < SLOTS; k++)
        if (slot_state[k] == 1) unlink(slot_path[k]);
    for (;;) { /* directories, the latest first (inner before outer) */
        int best = -1;
        for (int k = 0; k < SLOTS; k++)
            if (slot_state[k] == 2 && !done[k] && (best < 0 || slot_seq[k] > slot_seq[best])) best = k;
        if (best < 0) break;
        done[best] = 1;
        rmdir(slot_path[best]);
    }
    raise(sig);   /* SA_RESETHAND | SA_NODEFER: the default action now, which ends the process */
}

static void install_handlers(void)
{
    static int installed;
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    if (installed) return;
    installed = 1;
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old, sa;
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN) continue;   /* nohup stays nohup */
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        for (size_t j = 0; j < sizeof sigs / sizeof sigs[0]; j++) sigaddset(&sa.sa_mask, sigs[j]);
        sa.sa_flags = SA_RESETHAND | SA_NODEFER;
        sigaction(sigs[i], &sa, NULL);
    }
}

void fileio_cleanup_add(const char *path, int dir)
{
    size_t n = strlen(path);
    install_handlers();
    if (n >= PATH_MAX) return;
    for (int k = 0; k < SLOTS; k++)
        if (slot_state[k] == 0) {
            memcpy(slot_path[k], path, n + 1);
            slot_seq[k] = ++next_seq;
            atomic_signal_fence(memory_order_seq_cst);   /* the name is complete before the handler may read it */
            slot_state[k] = dir ? 2 : 1;
            return;
        }
}

void fileio_cleanup_remove(const char *path)
{
    for (int k = 0; k < SLOTS; k++)
        if (slot_state[k] != 0 && strcmp(slot_path[k], path) == 0) {
            slot_state[k] = 0;
            atomic_signal_fence(memory_order_seq_cst);
            return;
        }
}

void fileio_signal_hook(void (*fn)(int sig))
{
    atomic_store(&sig_hook, fn);
    if (fn) install_handlers();
}
