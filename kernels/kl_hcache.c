/* kl_hcache.c — handles per (thread, device): a short array under one
 * mutex. A node has a few worker threads and a few devices, so a linear
 * scan is shorter than any hash; the lock is held only to look up and to
 * insert, never while a handle is created or destroyed. */
#include "kl_hcache.h"

#include "kl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct hc_entry {
    pthread_t thread;
    int dev;
    void *h;
} hc_entry;

struct kl_hcache {
    kl_hcache_ops ops;
    pthread_mutex_t mu;
    hc_entry *v;
    size_t n, cap;
};

kl_hcache *kl_hcache_new(const kl_hcache_ops *ops)
{
    kl_hcache *c = calloc(1, sizeof *c);
    if (!c || !ops || !ops->create || !ops->destroy) {
        free(c);
        return NULL;
    }
    c->ops = *ops;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

/* The entry of (self, dev), lock held; NULL when there is none. */
static hc_entry *hc_find(kl_hcache *c, pthread_t self, int dev)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->v[i].dev == dev && pthread_equal(c->v[i].thread, self))
            return &c->v[i];
    return NULL;
}

int kl_hcache_get(kl_hcache *c, int dev, void **h, char *err, size_t errlen)
{
    const pthread_t self = pthread_self();
    void *made = NULL;
    int rc = 0;

    *h = NULL;
    pthread_mutex_lock(&c->mu);
    hc_entry *e = hc_find(c, self, dev);
    if (e)
        *h = e->h;
    pthread_mutex_unlock(&c->mu);
    if (*h)
        return 0;
    /* Only this thread inserts (self, dev), so nobody else can add it
     * while the lock is dropped for the create. */
    if ((rc = c->ops.create(c->ops.ctx, dev, &made, err, errlen)) < 0)
        return rc;
    pthread_mutex_lock(&c->mu);
    if (c->n == c->cap && c->cap < KL_HCACHE_MAX) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        hc_entry *v = realloc(c->v, sizeof *v * cap);
        if (v) {
            c->v = v;
            c->cap = cap;
        }
    }
    if (c->n < c->cap) {
        c->v[c->n++] = (hc_entry){.thread = self, .dev = dev, .h = made};
        *h = made;
        made = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    if (made) {
        c->ops.destroy(c->ops.ctx, dev, made);
        if (err && errlen)
            snprintf(err, errlen, "handle cache full (%zu handles) or out of memory", c->n);
        return KL_ENOMEM;
    }
    return 0;
}

size_t kl_hcache_count(kl_hcache *c)
{
    pthread_mutex_lock(&c->mu);
    size_t n = c->n;
    pthread_mutex_unlock(&c->mu);
    return n;
}

void kl_hcache_free(kl_hcache *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++)
        c->ops.destroy(c->ops.ctx, c->v[i].dev, c->v[i].h);
    pthread_mutex_destroy(&c->mu);
    free(c->v);
    free(c);
}
