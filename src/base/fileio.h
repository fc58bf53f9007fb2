/* fileio: how kvc opens the files it reads and the output files it writes, so that no file is replaced by
 * accident, nothing waits forever on a FIFO, and no temporary file outlives an interrupted run.
 *
 * Reading. fileio_open_regular opens a file without blocking (O_NONBLOCK), checks with fstat that it is a
 * regular file and only then makes it an ordinary blocking descriptor. A FIFO, a device or a directory is
 * refused at once ("<path>: not a regular file (got a FIFO (named pipe))") instead of blocking in open(2)
 * until a writer appears. Used for tensor files and `kvc merge` inputs.
 *
 * Output files (kvc run --out, kvc merge --out). What FILE names decides how it is written:
 *   missing                 created: appended to (FILEIO_APPEND) or written to a temporary file beside it
 *                           and renamed onto it at the end (FILEIO_REPLACE)
 *   regular file            the same; REPLACE leaves the old file whole until the rename
 *   symbolic link           followed to its final target, which is written as above; the link stays a link
 *   dangling symbolic link  refused (exit 2): name the target itself
 *   character device, FIFO  written through in place: no temporary, no lock, no rename (/dev/stdout, /dev/null,
 *                           a named pipe: opening a FIFO waits for its reader, as a shell redirection does)
 *   directory, block device, socket   refused (exit 2), before any work is done
 * Every writer of a regular FILE takes the same exclusive lock on it: an open-file-description lock (fcntl
 * F_OFD_SETLK; a POSIX record lock on kernels without it, and the two conflict). APPEND holds it on FILE for
 * as long as it writes; REPLACE holds it on the FILE it is going to replace from fileio_out_open to the
 * rename, and at the rename also locks whatever FILE names by then. A FILE locked by another process is
 * refused: "<FILE>: another kvc is writing this file (got a lock held by another process)". After taking a
 * lock the writer checks that FILE still names the locked file (and starts again if a rename replaced it),
 * so a replacing writer and an appending one can never both think they own FILE. Filesystems without locks
 * (ENOLCK) are let through.
 *
 * Signals. The temporaries of REPLACE (and any path given to fileio_cleanup_add: kvc synth's temporary
 * directory) are removed when SIGINT, SIGTERM or SIGHUP arrives, before the process dies of that signal
 * (the handler only calls unlink, rmdir and raise; it is installed with the first registered path, and a
 * signal that was ignored stays ignored). SIGKILL cannot be caught: then a FILE.tmp.XXXXXX can remain.
 * fileio_signal_hook lets one more piece of kvc act in the same handler, first (kvc run's progress line ends
 * itself there: src/report/sweep.c).
 *
 * Errors: functions return 0, or -1 after kvc_fail("<path>: <what> (got <value>)").
 */
#ifndef KVC_FILEIO_H
#define KVC_FILEIO_H

#include <stddef.h>
#include <sys/types.h>

/* Opens path read-only; it must be a regular file. *fd is the descriptor (blocking, close-on-exec). */
int fileio_open_regular(const char *path, int *fd);

/* "a directory", "a FIFO (named pipe)", "a character device", ... for the file type bits of a st_mode. */
const char *fileio_kind(mode_t mode);

typedef enum { FILEIO_APPEND, FILEIO_REPLACE } FileioMode;

typedef struct FileOut {
    int open;          /* 1 from fileio_out_open to fileio_out_commit / fileio_out_abort */
    int fd;            /* write here: FILE itself (APPEND, or a device/FIFO) or the temporary (REPLACE) */
    int regular;       /* FILE is (or will be) a regular file; 0: a character device or FIFO written through */
    int lock_fd;       /* REPLACE: FILE's current file, locked; -1 when there is none */
    char *target;      /* REPLACE: FILE with symbolic links resolved, what the temporary is renamed onto */
    char *tmp;         /* REPLACE: the temporary beside target, or NULL */
    const char *name;  /* FILE as given, for messages */
} FileOut;

/* Opens FILE for APPEND (O_APPEND, created 0666 & ~umask when missing, locked when regular; the caller may
 * read it back with pread and ftruncate it) or REPLACE (a temporary "<target>.tmp.XXXXXX" beside it, 0666 &
 * ~umask). A zeroed FileOut is "not open". */
int fileio_out_open(FileOut *o, const char *path, FileioMode mode);
/* fsyncs, closes and (REPLACE) renames the temporary onto FILE, after checking that no other process holds
 * a lock on what FILE names now. Write errors are runtime failures (the caller exits 1). Closes o either way. */
int fileio_out_commit(FileOut *o);
/* Drops the temporary (REPLACE) and closes; safe on a zeroed or already closed FileOut. */
void fileio_out_abort(FileOut *o);

/* Removes path (a file, or with dir != 0 an empty directory) if SIGINT, SIGTERM or SIGHUP arrives. At most 16
 * paths at once and PATH_MAX bytes each (a path beyond that is not registered). Files are removed before
 * directories, the latest registered directory first. fileio_cleanup_remove forgets path again. */
void fileio_cleanup_add(const char *path, int dir);
void fileio_cleanup_remove(const char *path);

/* Makes the handler call fn(sig) first, before it removes the registered paths and the process dies of sig
 * (installing the handlers now if no path did yet). fn must be async-signal-safe and must return. One hook at a
 * time: a second call replaces it, NULL removes it (the handlers stay; without paths they only re-raise). */
void fileio_signal_hook(void (*fn)(int sig));

#endif
