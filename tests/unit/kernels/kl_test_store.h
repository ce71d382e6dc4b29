/* kl_test_store.h — an in-process kl_store for the tests of multi-node runs
 * (a map under a mutex; get waits on a condition variable, as the gateway's
 * rendezvous holds a GET until the key is set), and a helper that runs one
 * "node" of a multi-node run per thread, as separate processes would. */
#ifndef KL_TEST_STORE_H
#define KL_TEST_STORE_H

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kl.h"

#define KL_TEST_STORE_MAX 256

typedef struct kl_test_store {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;
    char *keys[KL_TEST_STORE_MAX];
    void *vals[KL_TEST_STORE_MAX];
    size_t lens[KL_TEST_STORE_MAX];
    int sets, gets;           /* calls seen, for the tests' checks */
    kl_store store;           /* the face the kernels see */
} kl_test_store;

static inline int kl_test_store_find(kl_test_store *s, const char *key)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->keys[i], key) == 0)
            return i;
    return -1;
}

static inline int kl_test_store_set(void *ctx, const char *key, const void *data, size_t len)
{
    kl_test_store *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->sets++;
    int i = kl_test_store_find(s, key);
    if (i < 0) {
        if (s->n == KL_TEST_STORE_MAX) {
            pthread_mutex_unlock(&s->mu);
            return KL_ENOMEM;
        }
        i = s->n++;
        s->keys[i] = strdup(key);
    } else {
        free(s->vals[i]);
    }
    s->vals[i] = malloc(len ? len : 1);
    memcpy(s->vals[i], data, len);
    s->lens[i] = len;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static inline int kl_test_store_get(void *ctx, const char *key, void **data, size_t *len, int timeout_ms)
{
    kl_test_store *s = ctx;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->mu);
    s->gets++;
    int i, rc = 0;
    while ((i = kl_test_store_find(s, key)) < 0 && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&s->cv, &s->mu, &dl);
    if (i < 0) {
        pthread_mutex_unlock(&s->mu);
        return KL_ETIMEDOUT;
    }
    *data = malloc(s->lens[i] ? s->lens[i] : 1);
    memcpy(*data, s->vals[i], s->lens[i]);
    *len = s->lens[i];
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static inline void kl_test_store_init(kl_test_store *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->store = (kl_store){.ctx = s, .set = kl_test_store_set, .get = kl_test_store_get};
}

static inline void kl_test_store_free(kl_test_store *s)
{
    for (int i = 0; i < s->n; i++) {
        free(s->keys[i]);
        free(s->vals[i]);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
}

/* A kl_dist for node `node` of `nodes` x `local` ranks over s, on loopback. */
static inline kl_dist kl_test_dist(kl_test_store *s, int nodes, int node, int local, int timeout_ms)
{
    return (kl_dist){.nodes = nodes, .node_rank = node, .local_ranks = local, .store = &s->store,
                     .host = "127.0.0.1", .timeout_ms = timeout_ms};
}

/* One node of a multi-node run, run on its own thread: kl_run_cpu(args). */
typedef struct kl_test_node {
    kl_args args;
    kl_dist dist;
    kl_tensor outs[KL_MAX_IO];
    kl_err err;
    int rc;
    pthread_t tid;
} kl_test_node;

static inline void *kl_test_node_main(void *p)
{
    kl_test_node *n = p;
    n->args.dist = &n->dist;
    n->rc = kl_run_cpu(&n->args, n->outs, &n->err);
    return NULL;
}

/* Runs nodes[0..count) at once and waits for all. */
static inline void kl_test_nodes_run(kl_test_node *nodes, int count)
{
    for (int i = 0; i < count; i++)
        pthread_create(&nodes[i].tid, NULL, kl_test_node_main, &nodes[i]);
    for (int i = 0; i < count; i++)
        pthread_join(nodes[i].tid, NULL);
}

#endif
