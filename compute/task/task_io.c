/* task_io.c — a task part's files on the node (task_io.h). */
#include "task_io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "svc_npy.h"

int cn_task_mkdir(const char *dir, mode_t mode, uid_t uid, gid_t gid)
{
    if (mkdir(dir, mode) != 0 && errno != EEXIST)
        return -errno;
    /* mkdir's mode passes through the umask; the one asked for is meant */
    if (chmod(dir, mode) != 0 || chown(dir, uid, gid) != 0)
        return -errno;
    return 0;
}

/* Opens (making it when missing) each directory of rel under dirfd and
 * returns the last one's fd with *base at the file's name, or -errno. */
static int open_parent(int dirfd, const char *rel, uid_t uid, gid_t gid, const char **base)
{
    char comp[256];
    int fd = dup(dirfd);
    const char *p = rel;
    if (fd < 0)
        return -errno;
    for (;;) {
        const char *slash = strchr(p, '/');
        if (!slash) {
            *base = p;
            return fd;
        }
        size_t len = (size_t)(slash - p);
        if (len == 0 || len >= sizeof comp) {
            close(fd);
            return -EINVAL;
        }
        memcpy(comp, p, len);
        comp[len] = '\0';
        if (mkdirat(fd, comp, 0755) == 0) {
            if (fchownat(fd, comp, uid, gid, AT_SYMLINK_NOFOLLOW) != 0) {
                int e = -errno;
                close(fd);
                return e;
            }
        } else if (errno != EEXIST) {
            int e = -errno;
            close(fd);
            return e;
        }
        int next = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = -errno;
        close(fd);
        if (next < 0)
            return e;
        fd = next;
        p = slash + 1;
    }
}

/* Creates rel under dirfd for writing; the fd or -errno. */
static int create_file(int dirfd, const char *rel, uid_t uid, gid_t gid)
{
    const char *base;
    int pfd = open_parent(dirfd, rel, uid, gid, &base);
    if (pfd < 0)
        return pfd;
    int fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    int e = -errno;
    close(pfd);
    if (fd < 0)
        return e;
    if (fchown(fd, uid, gid) != 0) {
        e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

static int write_all(int fd, const void *data, size_t n)
{
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Appends the whole file src to fd. */
static int copy_into(int fd, const char *src)
{
    struct stat st;
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -errno;
    int rc = fstat(in, &st) != 0 ? -errno : 0;
    off_t left = rc == 0 ? st.st_size : 0;
    while (rc == 0 && left > 0) {
        ssize_t c = copy_file_range(in, NULL, fd, NULL, (size_t)left, 0);
        if (c < 0 && errno == EINTR)
            continue;
        if (c < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL)) {
            /* across filesystems on older kernels: plain reads and writes */
            char buf[65536];
            ssize_t r = read(in, buf, sizeof buf);
            if (r <= 0) {
                rc = r < 0 ? -errno : -EIO;
                break;
            }
            rc = write_all(fd, buf, (size_t)r);
            left -= r;
            continue;
        }
        if (c <= 0) {
            rc = c < 0 ? -errno : -EIO;
            break;
        }
        left -= c;
    }
    close(in);
    return rc;
}

int cn_task_file_write(int dirfd, const char *rel, const void *data, size_t n, uid_t uid,
                       gid_t gid)
{
    int fd = create_file(dirfd, rel, uid, gid);
    if (fd < 0)
        return fd;
    int rc = write_all(fd, data, n);
    close(fd);
    return rc;
}

int cn_task_file_copy(int dirfd, const char *rel, const char *src, uid_t uid, gid_t gid)
{
    int fd = create_file(dirfd, rel, uid, gid);
    if (fd < 0)
        return fd;
    int rc = copy_into(fd, src);
    close(fd);
    return rc;
}

int cn_task_npy_write(const char *path, const char *descr, int ndim, const int64_t *shape,
                      const char *src, const void *data, size_t n)
{
    char header[1024];
    size_t hlen = svc_npy_header_descr(descr, ndim, shape, header, sizeof header);
    if (hlen == 0)
        return -EINVAL;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    int rc = write_all(fd, header, hlen);
    if (rc == 0)
        rc = src ? copy_into(fd, src) : write_all(fd, data, n);
    close(fd);
    return rc;
}

typedef struct scan {
    int64_t max_bytes, total;
    cn_task_outfile *files;
    int n, cap, skipped, listing;
} scan;

/* Walks the directory open at fd (taken: closed here), whose path under
 * out/ is prefix ("" at the top). 0, CN_TASK_EQUOTA or -errno. */
static int scan_dir(scan *s, int fd, const char *prefix, int depth)
{
    DIR *d = fdopendir(fd);
    int rc = 0;
    if (!d) {
        rc = -errno;
        close(fd);
        return rc;
    }
    for (struct dirent *de; rc == 0 && (de = readdir(d));) {
        const char *nm = de->d_name;
        struct stat st;
        if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0)
            continue;
        if (fstatat(dirfd(d), nm, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;   /* gone meanwhile: the program still writes */
        char name[4096];
        if ((size_t)snprintf(name, sizeof name, "%s%s%s", prefix, prefix[0] ? "/" : "", nm) >=
            sizeof name) {
            s->skipped++;
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            if (depth >= CN_TASK_DEPTH_MAX) {
                s->skipped++;
                continue;
            }
            int sub = openat(dirfd(d), nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                rc = scan_dir(s, sub, name, depth + 1);
            continue;
        }
        if (!S_ISREG(st.st_mode)) {
            s->skipped++;   /* symlinks, FIFOs, sockets, devices */
            continue;
        }
        s->total += st.st_size;
        if (s->total > s->max_bytes || s->n >= CN_TASK_OUTPUTS_MAX) {
            rc = CN_TASK_EQUOTA;
            break;
        }
        if (s->listing) {
            if (s->n == s->cap) {
                int cap = s->cap ? s->cap * 2 : 16;
                cn_task_outfile *f = realloc(s->files, (size_t)cap * sizeof *f);
                if (!f) {
                    rc = -ENOMEM;
                    break;
                }
                s->files = f;
                s->cap = cap;
            }
            snprintf(s->files[s->n].name, sizeof s->files[s->n].name, "%s", name);
            s->files[s->n].size = (uint64_t)st.st_size;
        }
        s->n++;
    }
    closedir(d);
    return rc;
}

int cn_task_outputs_scan(const char *dir, int64_t max_bytes, cn_task_outfile **files, int *n,
                         int64_t *total, int *skipped)
{
    scan s = {.max_bytes = max_bytes, .listing = files != NULL};
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int rc = fd < 0 ? -errno : scan_dir(&s, fd, "", 0);
    if (rc != 0) {
        free(s.files);
        s.files = NULL;
    }
    if (files)
        *files = s.files;
    if (n)
        *n = rc == 0 ? s.n : 0;
    if (total)
        *total = s.total;
    if (skipped)
        *skipped = s.skipped;
    return rc;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    /* a failure is seen at the end: the top is still there */
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

int cn_task_tree_remove(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -errno;
    /* FTW_PHYS: a symlink is removed, never followed; FTW_MOUNT: a mount
     * the engine left (a crash) is not walked into */
    nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
    return lstat(path, &st) == 0 ? -ENOTEMPTY : 0;
}
