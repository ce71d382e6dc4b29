/* ttlcache.c — the secrets' answer cache (ttlcache.h). */
#include "ttlcache.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define WAYS 8

/* An entry: this header, then value_size bytes of value. */
typedef struct tc_entry {
    unsigned char digest[32];
    int64_t expires_ms;          /* 0: empty */
    int64_t used_ms;             /* its last read: a hit, or the lookup that put it */
    int known;                   /* 1: the value is the answer; 0: an unknown secret */
} tc_entry;

typedef struct tc_set {
    pthread_mutex_t mu;
    unsigned char *ways;         /* WAYS entries of esz bytes */
} tc_set;

struct gw_ttlcache {
    int ttl_ms;
    size_t value_size, esz, nsets;
    tc_set *sets;
    unsigned char *slab;         /* every set's ways */
};

/* The header is padded so that each value starts aligned. */
#define VALUE_OFF (((sizeof(tc_entry) + 15) / 16) * 16)

static tc_entry *way(const gw_ttlcache *c, const tc_set *s, int i)
{
    return (tc_entry *)(void *)(s->ways + (size_t)i * c->esz);
}

static void *value_of(tc_entry *e)
{
    return (unsigned char *)e + VALUE_OFF;
}

gw_ttlcache *gw_ttlcache_new(int capacity, int ttl_ms, size_t value_size)
{
    gw_ttlcache *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->ttl_ms = ttl_ms > 0 ? ttl_ms : 0;
    c->value_size = value_size;
    c->esz = ((VALUE_OFF + value_size + 15) / 16) * 16;
    c->nsets = capacity > 0 ? ((size_t)capacity + WAYS - 1) / WAYS : 1;
    c->sets = calloc(c->nsets, sizeof *c->sets);
    c->slab = calloc(c->nsets * WAYS, c->esz);
    if (c->sets == NULL || c->slab == NULL) {
        free(c->sets);
        free(c->slab);
        free(c);
        return NULL;
    }
    for (size_t i = 0; i < c->nsets; i++) {
        pthread_mutex_init(&c->sets[i].mu, NULL);
        c->sets[i].ways = c->slab + i * WAYS * c->esz;
    }
    return c;
}

void gw_ttlcache_free(gw_ttlcache *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->nsets; i++)
        pthread_mutex_destroy(&c->sets[i].mu);
    free(c->sets);
    free(c->slab);
    free(c);
}

int gw_ttlcache_ttl_ms(const gw_ttlcache *c)
{
    return c ? c->ttl_ms : 0;
}

/* The set of a digest: its leading bytes are uniform already. */
static tc_set *set_of(gw_ttlcache *c, const unsigned char digest[32])
{
    uint64_t h;
    memcpy(&h, digest, sizeof h);
    return &c->sets[h % c->nsets];
}

int gw_ttlcache_get(gw_ttlcache *c, const unsigned char digest[32], int64_t now_ms, void *value)
{
    if (c == NULL || c->ttl_ms == 0)
        return -ENOENT;
    tc_set *s = set_of(c, digest);
    int rc = -ENOENT;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < WAYS; i++) {
        tc_entry *e = way(c, s, i);
        if (e->expires_ms > now_ms && memcmp(e->digest, digest, 32) == 0) {
            rc = e->known;
            e->used_ms = now_ms;
            if (e->known && value != NULL)
                memcpy(value, value_of(e), c->value_size);
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int gw_ttlcache_was_known(gw_ttlcache *c, const unsigned char digest[32])
{
    if (c == NULL)
        return 0;
    tc_set *s = set_of(c, digest);
    int was = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < WAYS && !was; i++) {
        tc_entry *e = way(c, s, i);
        was = e->expires_ms != 0 && e->known && memcmp(e->digest, digest, 32) == 0;
    }
    pthread_mutex_unlock(&s->mu);
    return was;
}

/* The way an answer goes to, or NULL when an unknown secret would take the
 * place of a known one (live or expired). In order: the digest's own
 * entry, an empty one, the unknown one that expires (or expired) first,
 * and for a known secret only the known one that expires first. */
static tc_entry *way_for(gw_ttlcache *c, tc_set *s, const unsigned char digest[32], int known)
{
    tc_entry *empty = NULL, *old_unknown = NULL, *old_known = NULL;
    for (int i = 0; i < WAYS; i++) {
        tc_entry *e = way(c, s, i);
        if (e->expires_ms != 0 && memcmp(e->digest, digest, 32) == 0)
            return e;
        if (e->expires_ms == 0) {
            if (empty == NULL)
                empty = e;
        } else if (!e->known) {
            if (old_unknown == NULL || e->expires_ms < old_unknown->expires_ms)
                old_unknown = e;
        } else if (old_known == NULL || e->expires_ms < old_known->expires_ms) {
            old_known = e;
        }
    }
    if (empty != NULL)
        return empty;
    if (old_unknown != NULL)
        return old_unknown;
    return known ? old_known : NULL;
}

void gw_ttlcache_put(gw_ttlcache *c, const unsigned char digest[32], const void *value, int64_t asked_ms)
{
    if (c == NULL)
        return;
    tc_set *s = set_of(c, digest);
    pthread_mutex_lock(&s->mu);
    tc_entry *e = way_for(c, s, digest, value != NULL);
    /* A slow answer must not replace one asked after it. */
    if (e != NULL && e->expires_ms > asked_ms + c->ttl_ms && memcmp(e->digest, digest, 32) == 0)
        e = NULL;
    if (e != NULL) {
        /* the lookup that brings an answer was a read of it */
        if (memcmp(e->digest, digest, 32) != 0 || e->used_ms < asked_ms)
            e->used_ms = asked_ms;
        memcpy(e->digest, digest, 32);
        /* never 0, which marks an empty way */
        e->expires_ms = asked_ms + c->ttl_ms > 0 ? asked_ms + c->ttl_ms : 1;
        e->known = value != NULL;
        if (value != NULL)
            memcpy(value_of(e), value, c->value_size);
        else
            memset(value_of(e), 0, c->value_size);
    }
    pthread_mutex_unlock(&s->mu);
}

void gw_ttlcache_forget(gw_ttlcache *c, int (*match)(const void *value, const void *arg), const void *arg)
{
    if (c == NULL)
        return;
    for (size_t k = 0; k < c->nsets; k++) {
        tc_set *s = &c->sets[k];
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < WAYS; i++) {
            tc_entry *e = way(c, s, i);
            if (match == NULL || (e->expires_ms != 0 && e->known && match(value_of(e), arg)))
                memset(e, 0, c->esz);
        }
        pthread_mutex_unlock(&s->mu);
    }
}

int gw_ttlcache_due(gw_ttlcache *c, int64_t now_ms, int ahead_ms, int used_within_ms,
                    void (*each)(const unsigned char digest[32], void *arg), void *arg)
{
    if (c == NULL || c->ttl_ms == 0)
        return 0;
    int n = 0;
    for (size_t k = 0; k < c->nsets; k++) {
        tc_set *s = &c->sets[k];
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < WAYS; i++) {
            tc_entry *e = way(c, s, i);
            if (e->known && e->expires_ms > now_ms && e->expires_ms <= now_ms + ahead_ms &&
                e->used_ms >= now_ms - used_within_ms) {
                each(e->digest, arg);
                n++;
            }
        }
        pthread_mutex_unlock(&s->mu);
    }
    return n;
}

int gw_ttlcache_refresh(gw_ttlcache *c, const unsigned char digest[32], const void *value,
                        int64_t asked_ms)
{
    if (c == NULL || c->ttl_ms == 0)
        return 0;
    tc_set *s = set_of(c, digest);
    int done = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < WAYS && !done; i++) {
        tc_entry *e = way(c, s, i);
        if (e->expires_ms == 0 || !e->known || memcmp(e->digest, digest, 32) != 0)
            continue;
        if (e->expires_ms < asked_ms + c->ttl_ms) {
            e->expires_ms = asked_ms + c->ttl_ms;
            memcpy(value_of(e), value, c->value_size);
        }
        done = 1;
    }
    pthread_mutex_unlock(&s->mu);
    return done;
}
