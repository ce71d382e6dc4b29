/* cn_blobcache.c — LRU of input blobs under one mutex. An entry is pending
 * (claimed: someone is fetching it; no bytes yet, none counted) or ready.
 * Copies in and out of the cache run without the lock: a ready entry being
 * copied out is pinned (refs) so eviction passes it by, and a pending entry
 * belongs to its claimer until fill or abandon. Inputs are copied rather
 * than shared because kernels may write their input buffers. */
#include "cn_blobcache.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "svc_util.h"

#define CN_BC_BUCKETS 1024
#define CN_BC_WAIT_MS 100

struct cn_blobcache_entry {
    char id[72];
    uint64_t size;
    void *data;                    /* NULL while pending */
    int ready;
    int refs;                      /* copies out in progress */
    struct cn_blobcache_entry *hnext;
    struct cn_blobcache_entry *prev, *next;  /* LRU of ready entries, newest at head */
};

struct cn_blobcache {
    pthread_mutex_t mu;
    pthread_cond_t changed;        /* a pending entry was filled or abandoned */
    struct cn_blobcache_entry *buckets[CN_BC_BUCKETS];
    struct cn_blobcache_entry *head, *tail;
    uint64_t budget, used, entries;
    uint64_t hits, misses, fetched, served;
};

typedef struct cn_blobcache_entry cn_bc_entry;

static unsigned cn__bc_hash(const char *s)
{
    return svc_fnv1a(s) % CN_BC_BUCKETS;
}

static cn_bc_entry *cn__bc_find(cn_blobcache *c, const char *id)
{
    for (cn_bc_entry *e = c->buckets[cn__bc_hash(id)]; e; e = e->hnext)
        if (strcmp(e->id, id) == 0)
            return e;
    return NULL;
}

static void cn__lru_unlink(cn_blobcache *c, cn_bc_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void cn__lru_push(cn_blobcache *c, cn_bc_entry *e)
{
    e->prev = NULL;
    e->next = c->head;
    if (c->head)
        c->head->prev = e;
    else
        c->tail = e;
    c->head = e;
}

/* Takes e out of the table (lock held) and frees it; a ready one gives its
 * bytes back to the budget. */
static void cn__bc_remove(cn_blobcache *c, cn_bc_entry *e)
{
    cn_bc_entry **pp = &c->buckets[cn__bc_hash(e->id)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    if (e->ready) {
        cn__lru_unlink(c, e);
        c->used -= e->size;
        c->entries--;
    }
    free(e->data);
    free(e);
}

int cn_blobcache_create(uint64_t budget, cn_blobcache **out)
{
    cn_blobcache *c = calloc(1, sizeof *c);

    *out = NULL;
    if (!c)
        return -ENOMEM;
    pthread_mutex_init(&c->mu, NULL);
    svc_cond_init_mono(&c->changed);
    c->budget = budget;
    *out = c;
    return 0;
}

void cn_blobcache_destroy(cn_blobcache *c)
{
    if (!c)
        return;
    for (int i = 0; i < CN_BC_BUCKETS; i++)
        while (c->buckets[i])
            cn__bc_remove(c, c->buckets[i]);
    pthread_cond_destroy(&c->changed);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

int cn_blobcache_get(cn_blobcache *c, const char *id, void *dst, size_t size,
                     const volatile int *cancel, cn_blobcache_claim **claim, uint64_t *actual)
{
    cn_bc_entry *e;
    int rc;

    *claim = NULL;
    pthread_mutex_lock(&c->mu);
    /* Someone else is fetching it: wait for their bytes rather than fetch
     * them a second time. */
    while ((e = cn__bc_find(c, id)) && !e->ready) {
        if (cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE)) {
            pthread_mutex_unlock(&c->mu);
            return CN_BLOB_ECANCELED;
        }
        int64_t until = svc_now_mono_ms() + CN_BC_WAIT_MS;
        struct timespec ts = {.tv_sec = until / 1000, .tv_nsec = (long)(until % 1000) * 1000000L};
        pthread_cond_timedwait(&c->changed, &c->mu, &ts);
    }
    if (e && e->size != size) {
        *actual = e->size;
        rc = CN_BLOB_ESIZE;
    } else if (e) {
        e->refs++;
        cn__lru_unlink(c, e);
        cn__lru_push(c, e);
        c->hits++;
        c->served += size;
        pthread_mutex_unlock(&c->mu);
        if (size)
            memcpy(dst, e->data, size);
        pthread_mutex_lock(&c->mu);
        e->refs--;
        rc = CN_BLOB_HIT;
    } else {
        c->misses++;
        if (size <= c->budget && (e = calloc(1, sizeof *e))) {
            snprintf(e->id, sizeof e->id, "%s", id);
            e->size = size;
            unsigned h = cn__bc_hash(id);
            e->hnext = c->buckets[h];
            c->buckets[h] = e;
            *claim = e;
        }
        rc = CN_BLOB_MISS;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void cn_blobcache_fill(cn_blobcache *c, cn_blobcache_claim *e, const void *data)
{
    /* The copy is made before the lock: a pending entry is its claimer's. */
    void *copy = e->size ? malloc(e->size) : NULL;
    if (copy)
        memcpy(copy, data, e->size);

    pthread_mutex_lock(&c->mu);
    cn_bc_entry *v = c->tail;
    while (v && c->used + e->size > c->budget) {
        cn_bc_entry *newer = v->prev;
        if (v->refs == 0)
            cn__bc_remove(c, v);
        v = newer;
    }
    if ((copy || !e->size) && c->used + e->size <= c->budget) {
        e->data = copy;
        e->ready = 1;
        c->used += e->size;
        c->entries++;
        cn__lru_push(c, e);
    } else {
        free(copy);
        cn__bc_remove(c, e);
    }
    pthread_cond_broadcast(&c->changed);
    pthread_mutex_unlock(&c->mu);
}

void cn_blobcache_abandon(cn_blobcache *c, cn_blobcache_claim *e)
{
    pthread_mutex_lock(&c->mu);
    cn__bc_remove(c, e);
    pthread_cond_broadcast(&c->changed);
    pthread_mutex_unlock(&c->mu);
}

void cn_blobcache_count_fetch(cn_blobcache *c, uint64_t n)
{
    pthread_mutex_lock(&c->mu);
    c->fetched += n;
    pthread_mutex_unlock(&c->mu);
}

void cn_blobcache_stats_get(cn_blobcache *c, cn_blobcache_stats *out)
{
    pthread_mutex_lock(&c->mu);
    *out = (cn_blobcache_stats){.budget_bytes = c->budget, .used_bytes = c->used,
                                .entries = c->entries, .hits = c->hits, .misses = c->misses,
                                .fetched_bytes = c->fetched, .served_bytes = c->served};
    pthread_mutex_unlock(&c->mu);
}
