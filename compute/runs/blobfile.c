/* blobfile.c — blobs as files for tasks (blobfile.h). One mutex guards the
 * table; fetches run outside it. An entry is pending while its first
 * caller fetches it (others wait on changed), then ready. */
#include "blobfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "svc_log.h"
#include "svc_sha256.h"
#include "svc_util.h"

#define CN_BF_WAIT_MS 100

typedef struct cn_bf_entry {
    char id[CN_BLOB_ID_SIZE];
    uint64_t size;
    int ready;
    int pins;
    int64_t used_mono;            /* last pinned: the LRU order */
    struct cn_bf_entry *next;
} cn_bf_entry;

struct cn_blobfile {
    pthread_mutex_t mu;
    pthread_cond_t changed;
    char dir[4096];
    cn_bf_entry *head;
    uint64_t budget, used, files, hits, misses, fetched;
};

static cn_bf_entry *bf_find(cn_blobfile *c, const char *id)
{
    for (cn_bf_entry *e = c->head; e; e = e->next)
        if (strcmp(e->id, id) == 0)
            return e;
    return NULL;
}

static void bf_path(const cn_blobfile *c, const char *id, char *out, size_t len)
{
    snprintf(out, len, "%s/%s", c->dir, id + 7);
}

/* Takes e out of the table (lock held), removing its file when ready. */
static void bf_remove(cn_blobfile *c, cn_bf_entry *e)
{
    char path[4200];
    cn_bf_entry **pp = &c->head;
    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    if (e->ready) {
        bf_path(c, e->id, path, sizeof path);
        unlink(path);
        c->used -= e->size;
        c->files--;
    }
    free(e);
}

/* Removes unpinned files, least recently used first, while over budget. */
static void bf_trim(cn_blobfile *c)
{
    while (c->used > c->budget) {
        cn_bf_entry *lru = NULL;
        for (cn_bf_entry *e = c->head; e; e = e->next)
            if (e->ready && e->pins == 0 && (!lru || e->used_mono < lru->used_mono))
                lru = e;
        if (!lru)
            return;
        svc_debug("blob file evicted id=%s bytes=%llu", lru->id, (unsigned long long)lru->size);
        bf_remove(c, lru);
    }
}

int cn_blobfile_open(const char *dir, uint64_t budget, cn_blobfile **out)
{
    *out = NULL;
    if (strlen(dir) >= sizeof ((cn_blobfile *)0)->dir - 80)
        return -ENAMETOOLONG;
    /* a cache: whatever an earlier process left goes; the directory
     * itself is made by the first fetch */
    DIR *d = opendir(dir);
    if (!d && errno != ENOENT)
        return -errno;
    for (struct dirent *de; d && (de = readdir(d));)
        if (de->d_name[0] != '.' || strncmp(de->d_name, ".part-", 6) == 0)
            unlinkat(dirfd(d), de->d_name, 0);
    if (d)
        closedir(d);
    cn_blobfile *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    c->budget = budget;
    pthread_mutex_init(&c->mu, NULL);
    svc_cond_init_mono(&c->changed);
    *out = c;
    return 0;
}

void cn_blobfile_close(cn_blobfile *c)
{
    if (!c)
        return;
    while (c->head)
        bf_remove(c, c->head);
    pthread_cond_destroy(&c->changed);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static int bf_hash_chunk(void *cls, const void *data, size_t n)
{
    return svc_sha256_update(cls, data, n);
}

/* Fetches id into its file (no lock held). 0 or a KL_ code with err. */
static int bf_fetch(cn_blobfile *c, const cn_blobio *io, const char *id, uint64_t size,
                    const char *field, const volatile int *cancel, kl_err *err)
{
    char tmp[4200], path[4200], rnd[17], msg[256] = "", hex[65];
    int fd = -1, rc = KL_EBACKEND;
    void *map = NULL;
    svc_sha256 *h = NULL;
    int64_t got = 0;

    if (!io || !io->fetch) {
        kl_err_set(err, field, "%s: this node has no gateway to fetch %s from", field, id);
        return KL_EBACKEND;
    }
    svc_random_hex(rnd, 8);
    snprintf(tmp, sizeof tmp, "%s/.part-%s", c->dir, rnd);
    if (mkdir(c->dir, 0711) != 0 && errno != EEXIST) {
        kl_err_set(err, field, "%s: cannot make %s: %s", field, c->dir, strerror(errno));
        return KL_EBACKEND;
    }
    bf_path(c, id, path, sizeof path);
    fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 || (size > 0 && ftruncate(fd, (off_t)size) != 0)) {
        kl_err_set(err, field, "%s: cannot create %s: %s", field, tmp, strerror(errno));
        goto cleanup;
    }
    if (!(h = svc_sha256_new())) {
        kl_err_set(err, field, "%s: out of memory", field);
        goto cleanup;
    }
    if (size > 0) {
        /* the transfer writes straight into the file's pages */
        map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
            map = NULL;
            kl_err_set(err, field, "%s: cannot map %s: %s", field, tmp, strerror(errno));
            goto cleanup;
        }
        int f = io->fetch(io->cls, id, map, size, bf_hash_chunk, h, cancel, &got, msg, sizeof msg);
        if (got > 0) {
            pthread_mutex_lock(&c->mu);
            c->fetched += (uint64_t)got;
            pthread_mutex_unlock(&c->mu);
        }
        if (f == CN_BLOBIO_ECANCELED) {
            rc = KL_ECANCELED;
            goto cleanup;
        }
        if (f == CN_BLOBIO_ESIZE) {
            kl_err_set(err, field, "%s: blob %s is not %llu bytes long", field, id,
                       (unsigned long long)size);
            rc = KL_EINVAL;
            goto cleanup;
        }
        if (f != 0) {
            kl_err_set(err, field, "%s: %s", field, msg);
            goto cleanup;
        }
    }
    /* final frees the hash, whatever it answers */
    int fin = svc_sha256_final_hex(h, hex);
    h = NULL;
    if (fin < 0 || strcmp(hex, id + 7) != 0) {
        kl_err_set(err, field, "%s: the bytes fetched for %s hash to sha256:%s", field, id, hex);
        goto cleanup;
    }
    if (rename(tmp, path) != 0) {
        kl_err_set(err, field, "%s: cannot store %s: %s", field, path, strerror(errno));
        goto cleanup;
    }
    rc = 0;
cleanup:
    if (map)
        munmap(map, size);
    if (fd >= 0)
        close(fd);
    if (rc != 0)
        unlink(tmp);
    svc_sha256_free(h);
    return rc;
}

int cn_blobfile_get(cn_blobfile *c, const cn_blobio *io, const char *id, uint64_t size,
                    const char *field, const volatile int *cancel, char *path, size_t pathlen,
                    kl_err *err)
{
    cn_bf_entry *e;
    pthread_mutex_lock(&c->mu);
    while ((e = bf_find(c, id)) && !e->ready) {
        if (cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE)) {
            pthread_mutex_unlock(&c->mu);
            return KL_ECANCELED;
        }
        int64_t until = svc_now_mono_ms() + CN_BF_WAIT_MS;
        struct timespec ts = {.tv_sec = until / 1000, .tv_nsec = (long)(until % 1000) * 1000000L};
        pthread_cond_timedwait(&c->changed, &c->mu, &ts);
    }
    if (e && e->size != size) {
        pthread_mutex_unlock(&c->mu);
        kl_err_set(err, field, "%s: blob %s has %llu bytes, not %llu", field, id,
                   (unsigned long long)e->size, (unsigned long long)size);
        return KL_EINVAL;
    }
    if (e) {
        e->pins++;
        e->used_mono = svc_now_mono_ms();
        c->hits++;
        pthread_mutex_unlock(&c->mu);
        bf_path(c, id, path, pathlen);
        return 0;
    }
    if (!(e = calloc(1, sizeof *e))) {
        pthread_mutex_unlock(&c->mu);
        kl_err_set(err, field, "%s: out of memory", field);
        return KL_EBACKEND;
    }
    snprintf(e->id, sizeof e->id, "%s", id);
    e->size = size;
    e->next = c->head;
    c->head = e;
    c->misses++;
    pthread_mutex_unlock(&c->mu);

    int rc = bf_fetch(c, io, id, size, field, cancel, err);

    pthread_mutex_lock(&c->mu);
    if (rc == 0) {
        e->ready = 1;
        e->pins = 1;
        e->used_mono = svc_now_mono_ms();
        c->used += size;
        c->files++;
        bf_trim(c);
    } else {
        bf_remove(c, e);
    }
    pthread_cond_broadcast(&c->changed);
    pthread_mutex_unlock(&c->mu);
    if (rc == 0)
        bf_path(c, id, path, pathlen);
    return rc;
}

void cn_blobfile_unpin(cn_blobfile *c, const char *id)
{
    pthread_mutex_lock(&c->mu);
    cn_bf_entry *e = bf_find(c, id);
    if (e && e->pins > 0 && --e->pins == 0)
        bf_trim(c);
    pthread_mutex_unlock(&c->mu);
}

void cn_blobfile_stats_get(cn_blobfile *c, cn_blobfile_stats *out)
{
    pthread_mutex_lock(&c->mu);
    *out = (cn_blobfile_stats){.budget_bytes = c->budget, .used_bytes = c->used,
                               .files = c->files, .hits = c->hits, .misses = c->misses,
                               .fetched_bytes = c->fetched};
    pthread_mutex_unlock(&c->mu);
}
