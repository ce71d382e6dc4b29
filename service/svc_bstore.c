/* svc_bstore.c — the directory backend of the blob store (svc_bstore.h). */
#include "svc_bstore.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "svc_log.h"
#include "svc_sha256.h"
#include "svc_util.h"

/* Written bytes are handed to the disk every WRITEBACK bytes as they
 * arrive (sync_file_range, asynchronous), so that the fsync at commit has
 * little left to wait for: the disk works while the network delivers. */
#define WRITEBACK ((uint64_t)8 << 20)

/* Appends are hashed and written this much at a time. */
#define PIECE ((size_t)1 << 20)

/* A buffer this large is hashed on a thread of its own while it is written. */
#define BUFFER_MIN ((size_t)4 << 20)

/* A streamed blob this large is hashed by a thread of its own behind the
 * writer; the hasher reads it back this much at a time. */
#define LAG_MIN ((uint64_t)8 << 20)
#define LAG_BLOCK ((size_t)1 << 20)

/* Temporary files older than this are a crashed writer's. */
#define STALE_TMP_S (24 * 3600)

/* Room after the directory for "/sha256/ab/" + 64 hex digits. */
#define DIR_MAX (PATH_MAX - 128)

struct svc_bstore {
    char dir[DIR_MAX];
    char id[33];   /* the store's identity (<dir>/store-id) */
};

struct svc_bwriter {
    svc_bstore *store;
    int fd;
    uint64_t size;
    svc_sha256 *hash;
    uint64_t flushed;          /* bytes already handed to writeback */
    char id[SVC_BLOB_ID_LEN];   /* set by commit */
    char tmp[PATH_MAX];
    /* Past LAG_MIN bytes of a streamed blob, a thread of its own hashes what
     * was written, reading it back from the page cache a little behind the
     * writer (lag_main): the receiving thread only copies to the file. */
    int lag;                   /* the hasher runs */
    pthread_t lag_thread;
    pthread_mutex_t lag_mu;    /* guards size (once lag), hashed, lag_end, lag_rc */
    pthread_cond_t lag_cv;
    uint64_t hashed;
    int lag_end;               /* 1: hash up to size and stop; 2: stop now */
    int lag_rc;
};


/* mkdir that tolerates an existing directory; 0 or -errno. */
static int ensure_dir(const char *path)
{
    if (mkdir(path, 0750) == 0 || errno == EEXIST)
        return 0;
    return -errno;
}

/* Flushes a directory's entries (a rename is durable only after this). */
static int fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    return rc;
}

static void remove_stale_tmp(const char *tmpdir)
{
    DIR *d = opendir(tmpdir);
    if (d == NULL)
        return;
    time_t now = time(NULL);
    int removed = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char path[PATH_MAX];
        struct stat st;
        if (e->d_name[0] == '.' ||
            snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name) >= (int)sizeof path ||
            stat(path, &st) != 0 || now - st.st_mtime < STALE_TMP_S)
            continue;
        removed += unlink(path) == 0;
    }
    closedir(d);
    if (removed > 0)
        svc_info("blobs: removed %d temporary files left by crashed uploads", removed);
}

/* Reads the store's identity from <dir>/store-id into s->id; 0 or -errno. */
static int id_read(svc_bstore *s)
{
    char path[PATH_MAX], buf[64];
    snprintf(path, sizeof path, "%s/store-id", s->dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n < 32)
        return -EINVAL;
    buf[32] = '\0';
    if (strspn(buf, "0123456789abcdef") != 32)
        return -EINVAL;
    memcpy(s->id, buf, 33);
    return 0;
}

/* Gives a new store its identity: written to a temporary file and linked,
 * so that of gateways starting together one wins and all read the same. */
static int id_create(svc_bstore *s)
{
    char tmp[PATH_MAX], path[PATH_MAX], rnd[33];
    int rc = 0;
    if (id_read(s) == 0)
        return 0;
    if (svc_random_hex(rnd, 16) != 0)
        return -EIO;
    snprintf(tmp, sizeof tmp, "%s/tmp/store-id.%s", s->dir, rnd);
    snprintf(path, sizeof path, "%s/store-id", s->dir);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    if (write(fd, rnd, 32) != 32 || write(fd, "\n", 1) != 1 || fsync(fd) != 0)
        rc = errno ? -errno : -EIO;
    close(fd);
    if (rc == 0 && link(tmp, path) != 0 && errno != EEXIST)
        rc = -errno;
    unlink(tmp);
    if (rc == 0)
        rc = fsync_dir(s->dir);
    return rc ? rc : id_read(s);
}

svc_bstore *svc_bstore_open(const char *dir, int flags, char *err, size_t errlen)
{
    svc_bstore *s = calloc(1, sizeof *s);
    static const char *const subdirs[] = {"tmp", "sha256"};
    char sub[PATH_MAX];
    struct stat st;
    int rc;
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (snprintf(s->dir, sizeof s->dir, "%s", dir) >= (int)sizeof s->dir) {
        snprintf(err, errlen, "blob directory path too long");
        goto fail;
    }
    if (!(flags & SVC_BSTORE_CREATE)) {
        for (int i = 0; i < 2; i++) {
            snprintf(sub, sizeof sub, "%s/%s", s->dir, subdirs[i]);
            if (stat(sub, &st) != 0 || !S_ISDIR(st.st_mode)) {
                snprintf(err, errlen, "%s is not a blob store (no %s/ in it)", s->dir, subdirs[i]);
                goto fail;
            }
        }
        if ((rc = id_read(s)) != 0) {
            snprintf(err, errlen, "%s is not a blob store (no store-id in it: %s)", s->dir,
                     strerror(-rc));
            goto fail;
        }
        return s;
    }
    /* mkdir -p: every missing parent of the directory too */
    for (char *p = s->dir + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        rc = ensure_dir(s->dir);
        *p = '/';
        if (rc != 0 && rc != -EACCES) /* a parent we may not create may well exist */
            break;
    }
    if ((rc = ensure_dir(s->dir)) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", s->dir, strerror(-rc));
        goto fail;
    }
    for (int i = 0; i < 2; i++) {
        snprintf(sub, sizeof sub, "%s/%s", s->dir, subdirs[i]);
        if ((rc = ensure_dir(sub)) != 0) {
            snprintf(err, errlen, "cannot create %s: %s", sub, strerror(-rc));
            goto fail;
        }
    }
    if ((rc = id_create(s)) != 0) {
        snprintf(err, errlen, "cannot give %s its store-id: %s", s->dir, strerror(-rc));
        goto fail;
    }
    snprintf(sub, sizeof sub, "%s/tmp", s->dir);
    remove_stale_tmp(sub);
    /* the creator (a gateway) announces the directory to nodes: absolute */
    if (realpath(s->dir, sub) != NULL && strlen(sub) < sizeof s->dir)
        memcpy(s->dir, sub, strlen(sub) + 1);
    return s;
fail:
    free(s);
    return NULL;
}

void svc_bstore_close(svc_bstore *s)
{
    free(s);
}

const char *svc_bstore_dir(const svc_bstore *s)
{
    return s->dir;
}

const char *svc_bstore_id(const svc_bstore *s)
{
    return s->id;
}

/* <dir>/sha256/<first 2 hex>/<64 hex> of a valid id. */
static void blob_path(const svc_bstore *s, const char *id, char *out, size_t len)
{
    snprintf(out, len, "%s/sha256/%.2s/%s", s->dir, id + 7, id + 7);
}

svc_bwriter *svc_bstore_write_begin(svc_bstore *s)
{
    svc_bwriter *w = calloc(1, sizeof *w);
    char rnd[33];
    if (w == NULL)
        return NULL;
    w->store = s;
    w->fd = -1;
    if (svc_random_hex(rnd, 16) != 0 || (w->hash = svc_sha256_new()) == NULL)
        goto fail;
    snprintf(w->tmp, sizeof w->tmp, "%s/tmp/%s", s->dir, rnd);
    /* read too: a lagging hasher reads the bytes back */
    w->fd = open(w->tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
    if (w->fd < 0)
        goto fail;
    return w;
fail:;
    int e = errno ? errno : ENOMEM;
    svc_sha256_free(w->hash);
    free(w);
    errno = e;
    return NULL;
}

/* Writes all n bytes at p to fd; 0 or -errno. */
static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* The lagging hasher: hashes [hashed, size) of the file as the writer
 * extends it, until told to end. */
static void *lag_main(void *arg)
{
    svc_bwriter *w = arg;
    char *buf = malloc(LAG_BLOCK);
    int rc = buf ? 0 : -ENOMEM;
    pthread_mutex_lock(&w->lag_mu);
    while (rc == 0) {
        while (w->hashed == w->size && !w->lag_end)
            pthread_cond_wait(&w->lag_cv, &w->lag_mu);
        if (w->lag_end == 2 || w->hashed == w->size)
            break;
        uint64_t from = w->hashed, to = w->size;
        pthread_mutex_unlock(&w->lag_mu);
        while (from < to && rc == 0) {
            size_t k = to - from < LAG_BLOCK ? (size_t)(to - from) : LAG_BLOCK;
            ssize_t got = pread(w->fd, buf, k, (off_t)from);
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0)
                rc = got < 0 ? -errno : -EIO;
            else if (svc_sha256_update(w->hash, buf, (size_t)got) != 0)
                rc = -EIO;
            else
                from += (uint64_t)got;
        }
        pthread_mutex_lock(&w->lag_mu);
        w->hashed = from;
    }
    w->lag_rc = rc;
    pthread_mutex_unlock(&w->lag_mu);
    free(buf);
    return NULL;
}

/* Starts the lagging hasher: everything appended so far is hashed, what
 * follows is only written. 0, or -errno (then hashing stays inline). */
static int lag_start(svc_bwriter *w)
{
    pthread_mutex_init(&w->lag_mu, NULL);
    pthread_cond_init(&w->lag_cv, NULL);
    w->hashed = w->size;
    if (pthread_create(&w->lag_thread, NULL, lag_main, w) != 0) {
        pthread_cond_destroy(&w->lag_cv);
        pthread_mutex_destroy(&w->lag_mu);
        return -EAGAIN;
    }
    w->lag = 1;
    return 0;
}

/* Ends the lagging hasher: how 1 = after hashing everything written, 2 =
 * at once. Returns its result (0 or -errno). */
static int lag_stop(svc_bwriter *w, int how)
{
    if (!w->lag)
        return 0;
    pthread_mutex_lock(&w->lag_mu);
    w->lag_end = how;
    pthread_cond_signal(&w->lag_cv);
    pthread_mutex_unlock(&w->lag_mu);
    pthread_join(w->lag_thread, NULL);
    pthread_cond_destroy(&w->lag_cv);
    pthread_mutex_destroy(&w->lag_mu);
    w->lag = 0;
    return w->lag_rc;
}

/* Writes k bytes at p for a writer whose hasher lags behind; 0 or -errno. */
static int lag_write(svc_bwriter *w, const char *p, size_t k)
{
    int rc = write_all(w->fd, p, k);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&w->lag_mu);
    w->size += k;
    pthread_cond_signal(&w->lag_cv);
    pthread_mutex_unlock(&w->lag_mu);
    return 0;
}

int svc_bwriter_append(svc_bwriter *w, const void *data, size_t n)
{
    const char *p = data;
    if (!w->lag && w->size + n >= LAG_MIN)
        lag_start(w);
    /* Piece by piece, so that the bytes just hashed are still in the CPU's
     * cache when they are copied to the file, and the disk starts on them
     * while the next piece is hashed. */
    while (n > 0) {
        size_t k = n < PIECE ? n : PIECE;
        int rc;
        if (w->lag) {
            if ((rc = lag_write(w, p, k)) != 0)
                return rc;
        } else {
            if (svc_sha256_update(w->hash, p, k) != 0)
                return -EIO;
            if ((rc = write_all(w->fd, p, k)) != 0)
                return rc;
            w->size += k;
        }
        p += k;
        n -= k;
        if (w->size - w->flushed >= WRITEBACK) {
            /* advice: a failure here only leaves more for the fsync */
            sync_file_range(w->fd, (off_t)w->flushed, (off_t)(w->size - w->flushed),
                            SYNC_FILE_RANGE_WRITE);
            w->flushed = w->size;
        }
    }
    return 0;
}

typedef struct hash_job {
    svc_sha256 *hash;
    const char *data;
    size_t n;
    const volatile int *stop;
    int rc;
} hash_job;

static void *hash_main(void *arg)
{
    hash_job *j = arg;
    /* rc is also raised by the writing thread when it fails */
    for (size_t off = 0; off < j->n && __atomic_load_n(&j->rc, __ATOMIC_ACQUIRE) == 0;
         off += WRITEBACK) {
        if (j->stop && __atomic_load_n(j->stop, __ATOMIC_ACQUIRE))
            __atomic_store_n(&j->rc, -ECANCELED, __ATOMIC_RELEASE);
        else if (svc_sha256_update(j->hash, j->data + off,
                                   j->n - off < WRITEBACK ? j->n - off : WRITEBACK) != 0)
            __atomic_store_n(&j->rc, -EIO, __ATOMIC_RELEASE);
    }
    return NULL;
}

int svc_bwriter_append_buffer(svc_bwriter *w, const void *data, size_t n,
                              const volatile int *stop)
{
    const char *p = data;
    hash_job j = {.hash = w->hash, .data = data, .n = n, .stop = stop};
    pthread_t th;
    int rc = 0;
    if (w->lag)   /* a hasher follows the file already */
        return stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE) ? -ECANCELED
                                                               : svc_bwriter_append(w, data, n);
    if (n < BUFFER_MIN || pthread_create(&th, NULL, hash_main, &j) != 0)
        return stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE) ? -ECANCELED
                                                               : svc_bwriter_append(w, data, n);
    for (size_t off = 0; off < n && rc == 0; off += WRITEBACK) {
        size_t k = n - off < WRITEBACK ? n - off : WRITEBACK;
        if (stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE)) {
            rc = -ECANCELED;
            break;
        }
        if ((rc = write_all(w->fd, p + off, k)) != 0)
            break;
        w->size += k;
        sync_file_range(w->fd, (off_t)w->flushed, (off_t)(w->size - w->flushed),
                        SYNC_FILE_RANGE_WRITE);
        w->flushed = w->size;
    }
    if (rc != 0)
        __atomic_store_n(&j.rc, rc, __ATOMIC_RELEASE);  /* the hash stops too */
    pthread_join(th, NULL);
    return rc ? rc : __atomic_load_n(&j.rc, __ATOMIC_ACQUIRE);
}

/* 1 when the file at path holds exactly the size bytes of fd, 0 when it
 * does not (another size, other bytes, gone), -errno when they cannot be
 * read. */
static int same_bytes(int fd, uint64_t size, const char *path)
{
    struct stat st;
    int other = open(path, O_RDONLY | O_CLOEXEC);
    if (other < 0)
        return errno == ENOENT ? 0 : -errno;
    int rc = fstat(other, &st) == 0 ? (uint64_t)st.st_size == size : -errno;
    char *a = rc == 1 ? malloc(2 * (size_t)PIECE) : NULL;
    if (rc == 1 && a == NULL)
        rc = -ENOMEM;
    for (uint64_t off = 0; rc == 1 && off < size;) {
        size_t want = size - off < PIECE ? (size_t)(size - off) : PIECE;
        ssize_t x = pread(fd, a, want, (off_t)off), y = pread(other, a + PIECE, want, (off_t)off);
        if (x < 0 || y < 0)
            rc = -errno;
        else if (x != (ssize_t)want || y != (ssize_t)want || memcmp(a, a + PIECE, want) != 0)
            rc = 0;
        off += want;
    }
    free(a);
    close(other);
    return rc;
}

/* Links the written file under its content address and makes the entry
 * durable; 0 or -errno. A file already there is kept only when it holds
 * these very bytes: a name whose bytes are not what it says (planted by
 * whoever can write the directory, or torn by a crash of a filesystem that
 * does not order writes) is replaced, atomically, by this one. */
static int publish(svc_bwriter *w)
{
    char dir[PATH_MAX], path[PATH_MAX], fresh[PATH_MAX + 8];
    int rc;
    blob_path(w->store, w->id, path, sizeof path);
    snprintf(dir, sizeof dir, "%s/sha256/%.2s", w->store->dir, w->id + 7);
    if ((rc = ensure_dir(dir)) != 0)
        return rc;
    if (link(w->tmp, path) != 0) {
        if (errno != EEXIST)
            return -errno;
        if ((rc = same_bytes(w->fd, w->size, path)) < 0)
            return rc;
        if (rc == 0) {
            svc_warn("blob store: %s held other bytes than its name says; replaced by the %llu "
                     "bytes just written", w->id, (unsigned long long)w->size);
            snprintf(fresh, sizeof fresh, "%s.fresh", w->tmp);
            unlink(fresh);
            if (link(w->tmp, fresh) != 0)
                return -errno;
            if (rename(fresh, path) != 0) {
                rc = -errno;
                unlink(fresh);
                return rc;
            }
        }
    }
    return fsync_dir(dir);
}

uint64_t svc_bwriter_size(const svc_bwriter *w)
{
    return w->size;
}

int svc_bwriter_commit(svc_bwriter *w, char id[SVC_BLOB_ID_LEN], uint64_t *size)
{
    char hex[65];
    int lrc = lag_stop(w, 1);
    if (lrc != 0)
        return lrc;
    svc_sha256 *h = w->hash;
    w->hash = NULL;
    if (svc_sha256_final_hex(h, hex) != 0)
        return -EIO;
    snprintf(w->id, sizeof w->id, "sha256:%s", hex);
    memcpy(id, w->id, SVC_BLOB_ID_LEN);
    *size = w->size;
    if (fsync(w->fd) != 0)
        return -errno;
    return publish(w);
}

int svc_bwriter_close(svc_bwriter *w)
{
    struct stat st;
    char path[PATH_MAX];
    int rc = 0;
    blob_path(w->store, w->id, path, sizeof path);
    /* A retention pass that removed an older copy of the same blob ends
     * before the caller's record of it commits; the bytes are put back. */
    if (stat(path, &st) != 0)
        rc = publish(w);
    svc_bwriter_abort(w);
    return rc;
}

void svc_bwriter_abort(svc_bwriter *w)
{
    if (w == NULL)
        return;
    lag_stop(w, 2);
    if (w->fd >= 0)
        close(w->fd);
    unlink(w->tmp);
    svc_sha256_free(w->hash);
    free(w);
}

int svc_bstore_open_read(svc_bstore *s, const char *id, int *fd, uint64_t *size)
{
    char path[PATH_MAX];
    struct stat st;
    if (!svc_blob_id_valid(id))
        return -ENOENT;
    blob_path(s, id, path, sizeof path);
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0)
        return -errno;
    if (fstat(*fd, &st) != 0) {
        int e = -errno;
        close(*fd);
        *fd = -1;
        return e;
    }
    *size = (uint64_t)st.st_size;
    return 0;
}

int svc_bstore_stat(svc_bstore *s, const char *id, uint64_t *size)
{
    return svc_bstore_path(s, id, NULL, 0, size);
}

int svc_bstore_verify(svc_bstore *s, const char *id, uint64_t max, uint64_t *size)
{
    char path[PATH_MAX], hex[65];
    struct stat st;
    if (!svc_blob_id_valid(id))
        return -ENOENT;
    blob_path(s, id, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fstat(fd, &st) != 0 ? -errno : !S_ISREG(st.st_mode) ? -ENOENT : 0;
    if (rc == 0 && (uint64_t)st.st_size > max)
        rc = -EFBIG;
    svc_sha256 *h = rc == 0 ? svc_sha256_new() : NULL;
    char *buf = h ? malloc(PIECE) : NULL;
    if (rc == 0 && buf == NULL)
        rc = -ENOMEM;
    uint64_t n = 0;
    while (rc == 0) {
        ssize_t got = read(fd, buf, PIECE);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            rc = -errno;
        else if (got == 0)
            break;
        else if (svc_sha256_update(h, buf, (size_t)got) != 0)
            rc = -EIO;
        n += got > 0 ? (uint64_t)got : 0;
    }
    if (rc == 0) {
        rc = svc_sha256_final_hex(h, hex) != 0 ? -EIO : strcmp(hex, id + 7) != 0 ? -EBADMSG : 0;
        h = NULL;
    }
    svc_sha256_free(h);
    free(buf);
    close(fd);
    if (rc == 0)
        *size = n;
    return rc;
}

int svc_bstore_path(svc_bstore *s, const char *id, char *out, size_t len, uint64_t *size)
{
    char path[PATH_MAX];
    struct stat st;
    if (!svc_blob_id_valid(id))
        return -ENOENT;
    blob_path(s, id, path, sizeof path);
    if (stat(path, &st) != 0)
        return -errno;
    if (!S_ISREG(st.st_mode))
        return -ENOENT;
    if (out != NULL && strlen(path) >= len)
        return -ENAMETOOLONG;
    if (out != NULL)
        snprintf(out, len, "%s", path);
    *size = (uint64_t)st.st_size;
    return 0;
}

int svc_bstore_remove(svc_bstore *s, const char *id)
{
    char path[PATH_MAX];
    if (!svc_blob_id_valid(id))
        return -ENOENT;
    blob_path(s, id, path, sizeof path);
    return unlink(path) == 0 ? 0 : -errno;
}
