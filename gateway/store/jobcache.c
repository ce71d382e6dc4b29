/* jobcache.c — the ended-job cache (jobcache.h). */
#include "jobcache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "svc_util.h"

#define WAYS 8
/* The budget is split in sets of this many bytes at least, so that a set
 * holds several answers of a few KiB. */
#define SET_BYTES_MIN (64 << 10)

typedef struct jc_entry {
    char id[37];          /* "": empty */
    int64_t tenant, gen;
    char *json;
    size_t len;
    uint64_t used;        /* the set's clock when last read or written */
} jc_entry;

typedef struct jc_set {
    pthread_mutex_t mu;
    size_t bytes;
    uint64_t clock;
    jc_entry way[WAYS];
} jc_set;

struct gw_jobcache {
    size_t nsets, set_max;
    jc_set *sets;
};

gw_jobcache *gw_jobcache_new(size_t max_bytes)
{
    gw_jobcache *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->nsets = max_bytes / SET_BYTES_MIN;
    c->set_max = c->nsets ? max_bytes / c->nsets : 0;
    if (c->nsets && !(c->sets = calloc(c->nsets, sizeof(*c->sets)))) {
        free(c);
        return NULL;
    }
    for (size_t i = 0; i < c->nsets; i++)
        pthread_mutex_init(&c->sets[i].mu, NULL);
    return c;
}

void gw_jobcache_free(gw_jobcache *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nsets; i++) {
        for (int w = 0; w < WAYS; w++)
            free(c->sets[i].way[w].json);
        pthread_mutex_destroy(&c->sets[i].mu);
    }
    free(c->sets);
    free(c);
}

static jc_set *set_of(gw_jobcache *c, const char *id)
{
    return c && c->nsets ? &c->sets[svc_fnv1a(id) % c->nsets] : NULL;
}

/* The entry of id in s, or NULL; mu held. */
static jc_entry *find(jc_set *s, const char *id)
{
    for (int w = 0; w < WAYS; w++)
        if (strcmp(s->way[w].id, id) == 0)
            return &s->way[w];
    return NULL;
}

static void drop(jc_set *s, jc_entry *e)
{
    s->bytes -= e->len;
    free(e->json);
    memset(e, 0, sizeof(*e));
}

char *gw_jobcache_get(gw_jobcache *c, int64_t tenant, int64_t gen, const char *id, size_t *len)
{
    jc_set *s = set_of(c, id);
    char *copy = NULL;
    if (!s || !id[0])
        return NULL;
    pthread_mutex_lock(&s->mu);
    jc_entry *e = find(s, id);
    if (e && e->tenant == tenant && e->gen < gen)
        drop(s, e); /* a job of the tenant was deleted since: read again */
    else if (e && e->tenant == tenant && e->gen == gen && (copy = malloc(e->len ? e->len : 1))) {
        e->used = ++s->clock;
        memcpy(copy, e->json, e->len);
        *len = e->len;
    }
    pthread_mutex_unlock(&s->mu);
    return copy;
}

void gw_jobcache_put(gw_jobcache *c, int64_t tenant, int64_t gen, const char *id, const char *json,
                     size_t len)
{
    jc_set *s = set_of(c, id);
    if (!s || len > c->set_max || !id[0] || strlen(id) >= sizeof(s->way[0].id))
        return;
    char *copy = malloc(len ? len : 1);
    if (!copy)
        return;
    memcpy(copy, json, len);
    pthread_mutex_lock(&s->mu);
    jc_entry *e = find(s, id);
    if (e)
        drop(s, e);
    /* The least recently used leave until the answer fits and a way is free. */
    for (;;) {
        jc_entry *victim = NULL, *empty = NULL;
        for (int w = 0; w < WAYS; w++) {
            jc_entry *x = &s->way[w];
            if (!x->id[0])
                empty = empty ? empty : x;
            else if (!victim || x->used < victim->used)
                victim = x;
        }
        if (empty && s->bytes + len <= c->set_max) {
            e = empty;
            break;
        }
        drop(s, victim);
    }
    memcpy(e->id, id, strlen(id) + 1);
    e->tenant = tenant;
    e->gen = gen;
    e->json = copy;
    e->len = len;
    e->used = ++s->clock;
    s->bytes += len;
    pthread_mutex_unlock(&s->mu);
}

void gw_jobcache_drop(gw_jobcache *c, const char *id)
{
    jc_set *s = set_of(c, id);
    if (!s || !id[0])
        return;
    pthread_mutex_lock(&s->mu);
    jc_entry *e = find(s, id);
    if (e)
        drop(s, e);
    pthread_mutex_unlock(&s->mu);
}
