/* task_io.h — a task part's files on the node: its scratch directory (the
 * program's work, out and meta directories, owned by the task's uid), the
 * tenant's files placed in work, the .npy copy of an input that asked for
 * one, and the scan of out/ that turns what the program left into outputs
 * (regular files only, within a quota). Every path the program could have
 * touched is walked with openat and O_NOFOLLOW: a symlink it leaves never
 * takes the node (root) anywhere. No threads. */
#ifndef CN_TASK_IO_H
#define CN_TASK_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "svc_err.h"

enum {
    CN_TASK_EQUOTA = SVC_E_TASK_QUOTA, /* out/ holds more bytes or files than allowed */
};

#define CN_TASK_OUTPUTS_MAX 1024  /* files out/ may hold */
#define CN_TASK_DEPTH_MAX 32      /* directory levels walked under out/ */

/* Creates dir (mode, owned by uid:gid); an existing one is kept. 0 or
 * -errno. */
int cn_task_mkdir(const char *dir, mode_t mode, uid_t uid, gid_t gid);

/* Writes n bytes as the file rel (a path svc_task_path_check accepts)
 * under dirfd, making its directories; all owned by uid:gid. The file
 * must not exist. 0 or -errno. */
int cn_task_file_write(int dirfd, const char *rel, const void *data, size_t n, uid_t uid,
                       gid_t gid);

/* cn_task_file_write of the file at src's bytes (copy_file_range). */
int cn_task_file_copy(int dirfd, const char *rel, const char *src, uid_t uid, gid_t gid);

/* Writes path as an .npy file: a header for descr and shape, then the
 * bytes of src (a file) or of data[0..n). 0 or -errno. */
int cn_task_npy_write(const char *path, const char *descr, int ndim, const int64_t *shape,
                      const char *src, const void *data, size_t n);

/* An output the scan found. */
typedef struct cn_task_outfile {
    char name[4096];          /* its path under out/ */
    uint64_t size;
} cn_task_outfile;

/* Walks dir (out/). *files (malloc'd, the caller frees) gets its regular
 * files, *n how many, *total their bytes; *skipped (may be NULL) counts
 * what was not a regular file or directory, or was deeper than
 * CN_TASK_DEPTH_MAX. Returns 0; CN_TASK_EQUOTA as soon as the bytes pass
 * max_bytes or the files CN_TASK_OUTPUTS_MAX (*files NULL then); or
 * -errno. With files NULL it only adds up (the periodic check while the
 * program runs). */
int cn_task_outputs_scan(const char *dir, int64_t max_bytes, cn_task_outfile **files, int *n,
                         int64_t *total, int *skipped);

/* Removes path and everything under it, following no symlink. 0 or
 * -errno (the first failure; it goes on past it). */
int cn_task_tree_remove(const char *path);

#endif
