/* eta.c — a queued job's position and start estimate (eta.h). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eta.h"
#include "svc_util.h"

#define ETA_KERNELS 64   /* kernels kept; the catalog has a dozen */

typedef struct kernel_runs {
    char name[64];
    int64_t runs, mean_ms;
    int64_t at_ms;       /* monotonic; 0: empty */
} kernel_runs;

struct gw_eta {
    int ttl_ms;
    pthread_mutex_t mu;  /* guards the rest */
    int64_t slots, slots_at_ms;
    kernel_runs k[ETA_KERNELS];
};

gw_eta *gw_eta_new(int ttl_ms)
{
    gw_eta *e = calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    e->ttl_ms = ttl_ms;
    pthread_mutex_init(&e->mu, NULL);
    return e;
}

void gw_eta_free(gw_eta *e)
{
    if (e == NULL)
        return;
    pthread_mutex_destroy(&e->mu);
    free(e);
}

double gw_eta_estimate(int64_t ahead, int64_t runs, int64_t mean_ms, int64_t slots)
{
    if (runs <= 0 || slots <= 0 || ahead < 0)
        return -1;
    /* the jobs ahead run slots at a time, each about as long as this
     * kernel's recent runs (their own kernels are not looked at) */
    return round((double)ahead * (double)mean_ms / (double)slots / 100.0) / 10.0;
}

/* The slot of kernel (an empty or the oldest one when it has none, marked
 * stale). Called with e->mu held. */
static kernel_runs *kernel_slot(gw_eta *e, const char *kernel)
{
    kernel_runs *oldest = &e->k[0];
    for (int i = 0; i < ETA_KERNELS; i++) {
        if (e->k[i].at_ms != 0 && strcmp(e->k[i].name, kernel) == 0)
            return &e->k[i];
        if (e->k[i].at_ms < oldest->at_ms)
            oldest = &e->k[i];
    }
    snprintf(oldest->name, sizeof oldest->name, "%s", kernel);
    oldest->at_ms = 0;
    return oldest;
}

/* The kernel's recent runs and the slots up, from the cache or, when
 * older than the TTL, from PostgreSQL (asked without the lock; two threads
 * may both ask, which costs a query, not a wrong answer). 0 or -EIO. */
static int inputs_of(gw_app *app, const char *kernel, int64_t *runs, int64_t *mean_ms,
                     int64_t *slots)
{
    gw_eta *e = app->eta;
    int64_t now = svc_now_mono_ms();
    pthread_mutex_lock(&e->mu);
    kernel_runs *k = kernel_slot(e, kernel);
    int kernel_fresh = k->at_ms != 0 && now - k->at_ms < e->ttl_ms;
    int slots_fresh = e->slots_at_ms != 0 && now - e->slots_at_ms < e->ttl_ms;
    *runs = k->runs;
    *mean_ms = k->mean_ms;
    *slots = e->slots;
    pthread_mutex_unlock(&e->mu);
    if (!kernel_fresh && gw_store_kernel_run_ms(app->store, kernel, runs, mean_ms) != 0)
        return -EIO;
    if (!slots_fresh && gw_store_slots_up(app->store, slots) != 0)
        return -EIO;
    pthread_mutex_lock(&e->mu);
    if (!kernel_fresh) {
        k = kernel_slot(e, kernel);
        *k = (kernel_runs){.runs = *runs, .mean_ms = *mean_ms, .at_ms = now};
        snprintf(k->name, sizeof k->name, "%s", kernel);
    }
    if (!slots_fresh) {
        e->slots = *slots;
        e->slots_at_ms = now;
    }
    pthread_mutex_unlock(&e->mu);
    return 0;
}

json_t *gw_eta_queue(gw_app *app, int64_t tenant_id, const json_t *job)
{
    const json_t *res = json_object_get(job, "resources");
    const char *id = json_string_value(json_object_get(job, "id"));
    const char *kernel = json_string_value(json_object_get(job, "kernel"));
    const char *backend = json_string_value(json_object_get(res, "backend"));
    if (app->eta == NULL || !id || !kernel || !backend)
        return NULL;
    int64_t ahead, runs = 0, mean_ms = 0, slots = 0;
    gw_queued e;
    gw_queued_from_job(job, tenant_id, &e);
    if (gw_queue_rank(app->queue, &e, &ahead) != 0)
        return NULL;
    double eta = inputs_of(app, kernel, &runs, &mean_ms, &slots) == 0
                     ? gw_eta_estimate(ahead, runs, mean_ms, slots)
                     : -1;
    return json_pack("{s:I, s:o}", "position", (json_int_t)(ahead + 1), "eta_s",
                     eta < 0 ? json_null() : json_real(eta));
}
