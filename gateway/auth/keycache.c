/* keycache.c — the API key cache (keycache.h): a set-associative table of
 * SHA-256 digests of keys, 8 ways per set, one mutex per set so that
 * requests of different keys rarely meet. The key text itself is never
 * kept. */
#include "keycache.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "svc_sha256.h"

#define WAYS 8

typedef struct kc_entry {
    unsigned char digest[32];
    int64_t expires_ms;          /* 0: empty */
    int valid;                   /* 1: ka holds the key's answer; 0: unknown key */
    gw_key_auth ka;
} kc_entry;

typedef struct kc_set {
    pthread_mutex_t mu;
    kc_entry way[WAYS];
} kc_set;

struct gw_keycache {
    int ttl_ms;
    size_t nsets;
    kc_set *sets;
};

gw_keycache *gw_keycache_new(int capacity, int ttl_ms)
{
    gw_keycache *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->ttl_ms = ttl_ms > 0 ? ttl_ms : 0;
    c->nsets = capacity > 0 ? ((size_t)capacity + WAYS - 1) / WAYS : 1;
    if ((c->sets = calloc(c->nsets, sizeof *c->sets)) == NULL) {
        free(c);
        return NULL;
    }
    for (size_t i = 0; i < c->nsets; i++)
        pthread_mutex_init(&c->sets[i].mu, NULL);
    return c;
}

void gw_keycache_free(gw_keycache *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->nsets; i++)
        pthread_mutex_destroy(&c->sets[i].mu);
    free(c->sets);
    free(c);
}

/* The key's digest and the set it belongs to; NULL when libcrypto fails
 * (the key is then simply not cached). */
static kc_set *set_of(gw_keycache *c, const char *key, unsigned char digest[32])
{
    if (svc_sha256_digest(key, strlen(key), digest) != 0)
        return NULL;
    uint64_t h;
    memcpy(&h, digest, sizeof h);
    return &c->sets[h % c->nsets];
}

int gw_keycache_get(gw_keycache *c, const char *key, int64_t now_ms, gw_key_auth *out)
{
    unsigned char digest[32];
    kc_set *s;
    if (c == NULL || c->ttl_ms == 0 || (s = set_of(c, key, digest)) == NULL)
        return -ENOENT;
    int rc = -ENOENT;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < WAYS; i++) {
        kc_entry *e = &s->way[i];
        if (e->expires_ms > now_ms && memcmp(e->digest, digest, 32) == 0) {
            rc = e->valid;
            if (e->valid)
                *out = e->ka;
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* The way an answer goes to, or NULL when an unknown key would take the
 * place of a valid one (live or expired). In order: the key's own entry,
 * an empty one, an expired unknown one, the unknown key that expires
 * first, and for a valid key only the valid key that expired or expires
 * first. */
static kc_entry *way_for(kc_set *s, const unsigned char digest[32], int valid, int64_t now_ms)
{
    kc_entry *empty = NULL, *old_unknown = NULL, *old_valid = NULL;
    for (int i = 0; i < WAYS; i++) {
        kc_entry *e = &s->way[i];
        if (e->expires_ms != 0 && memcmp(e->digest, digest, 32) == 0)
            return e;
        if (e->expires_ms == 0) {
            if (empty == NULL)
                empty = e;
        } else if (!e->valid) {
            /* expired ones first, then the one that expires first */
            if (old_unknown == NULL || e->expires_ms < old_unknown->expires_ms)
                old_unknown = e;
        } else if (old_valid == NULL || e->expires_ms < old_valid->expires_ms) {
            old_valid = e;
        }
    }
    (void)now_ms;
    if (empty != NULL)
        return empty;
    if (old_unknown != NULL)
        return old_unknown;
    return valid ? old_valid : NULL;
}

int gw_keycache_was_valid(gw_keycache *c, const char *key)
{
    unsigned char digest[32];
    kc_set *s;
    if (c == NULL || (s = set_of(c, key, digest)) == NULL)
        return 0;
    int was = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < WAYS && !was; i++)
        was = s->way[i].expires_ms != 0 && s->way[i].valid &&
              memcmp(s->way[i].digest, digest, 32) == 0;
    pthread_mutex_unlock(&s->mu);
    return was;
}

void gw_keycache_put(gw_keycache *c, const char *key, const gw_key_auth *ka, int64_t asked_ms)
{
    unsigned char digest[32];
    kc_set *s;
    /* with a TTL of 0 an answer is kept too, expired at once: only the
     * memory of a valid key (gw_keycache_was_valid) is of use */
    if (c == NULL || (s = set_of(c, key, digest)) == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    kc_entry *e = way_for(s, digest, ka != NULL, asked_ms);
    /* A slow answer must not replace one asked after it. */
    if (e != NULL && e->expires_ms > asked_ms + c->ttl_ms && memcmp(e->digest, digest, 32) == 0)
        e = NULL;
    if (e != NULL) {
        memcpy(e->digest, digest, 32);
        /* never 0, which marks an empty way */
        e->expires_ms = asked_ms + c->ttl_ms > 0 ? asked_ms + c->ttl_ms : 1;
        e->valid = ka != NULL;
        if (ka != NULL)
            e->ka = *ka;
        else
            memset(&e->ka, 0, sizeof e->ka);
    }
    pthread_mutex_unlock(&s->mu);
}

void gw_keycache_clear(gw_keycache *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->nsets; i++) {
        pthread_mutex_lock(&c->sets[i].mu);
        memset(c->sets[i].way, 0, sizeof c->sets[i].way);
        pthread_mutex_unlock(&c->sets[i].mu);
    }
}
