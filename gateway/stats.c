/* stats.c — the history answers' cache (stats.h): a small table scanned
 * under one lock; a dashboard polls one or two windows per tenant. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"

typedef struct stats_entry {
    char key[160];
    char *body;          /* NULL: empty */
    size_t len;
    int64_t at_ms;       /* monotonic, when body was asked for */
} stats_entry;

struct gw_stats {
    int n, ttl_ms;
    pthread_mutex_t mu;  /* guards e[] */
    stats_entry e[];
};

gw_stats *gw_stats_new(int slots, int ttl_ms)
{
    if (slots < 1)
        slots = 1;
    gw_stats *c = calloc(1, sizeof *c + (size_t)slots * sizeof(stats_entry));
    if (c == NULL)
        return NULL;
    c->n = slots;
    c->ttl_ms = ttl_ms;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void gw_stats_free(gw_stats *c)
{
    if (c == NULL)
        return;
    for (int i = 0; i < c->n; i++)
        free(c->e[i].body);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

int gw_stats_minutes_parse(const char *s, int *out)
{
    if (s == NULL) {
        *out = 60;
        return 0;
    }
    /* digits only (no sign, space or exponent), and short enough that the
     * value cannot overflow before the range check */
    size_t n = strlen(s);
    if (n == 0 || n > 4 || strspn(s, "0123456789") != n)
        return -EINVAL;
    int v = atoi(s);
    if (v < 1 || v > GW_STATS_MINUTES_MAX)
        return -EINVAL;
    *out = v;
    return 0;
}

/* The entry of key, or NULL. Called with c->mu held. */
static stats_entry *entry_of(gw_stats *c, const char *key)
{
    for (int i = 0; i < c->n; i++)
        if (c->e[i].body && strcmp(c->e[i].key, key) == 0)
            return &c->e[i];
    return NULL;
}

char *gw_stats_get(gw_stats *c, const char *key, int64_t now_ms, size_t *len)
{
    char *copy = NULL;
    pthread_mutex_lock(&c->mu);
    stats_entry *e = entry_of(c, key);
    if (e && now_ms - e->at_ms < c->ttl_ms && (copy = malloc(e->len + 1))) {
        memcpy(copy, e->body, e->len + 1);
        *len = e->len;
    }
    pthread_mutex_unlock(&c->mu);
    return copy;
}

int gw_stats_put(gw_stats *c, const char *key, const char *body, size_t len, int64_t now_ms)
{
    if (strlen(key) >= sizeof c->e[0].key)
        return 0;  /* not kept: such a key is never asked for again */
    char *copy = malloc(len + 1);
    if (copy == NULL)
        return -ENOMEM;
    memcpy(copy, body, len);
    copy[len] = '\0';
    pthread_mutex_lock(&c->mu);
    stats_entry *e = entry_of(c, key);
    for (int i = 0; e == NULL && i < c->n; i++)
        if (c->e[i].body == NULL)
            e = &c->e[i];
    if (e == NULL) {
        e = &c->e[0];
        for (int i = 1; i < c->n; i++)
            if (c->e[i].at_ms < e->at_ms)
                e = &c->e[i];
    }
    free(e->body);
    snprintf(e->key, sizeof e->key, "%s", key);
    e->body = copy;
    e->len = len;
    e->at_ms = now_ms;
    pthread_mutex_unlock(&c->mu);
    return 0;
}
