/* blob_gc.c — the retention pass (blob_gc.h): ended jobs past
 * --job-retention-days, then blobs nobody references any more, then
 * Idempotency-Keys past their 24 hours. */
#include "blob_gc.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "svc_bstore.h"
#include "svc_log.h"
#include "svc_util.h"

/* Blobs removed per transaction: rows stay locked while their files go. */
#define SWEEP_BATCH 500
/* Jobs deleted per statement: each takes its events, inputs, results and
 * deliveries along, so a page stays a short transaction however many
 * expired jobs wait (the first pass after enabling retention). */
#define JOB_PAGE 200

struct gw_blob_gc {
    gw_app *app;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int stopping;  /* read without mu between pages */
};

static int remove_bytes(const char *id, void *arg)
{
    return svc_bstore_remove(arg, id);
}

/* Expired Idempotency-Keys, SWEEP_BATCH per statement so that a day's
 * worth of keys never makes one long transaction. */
static void idem_sweep(gw_app *app)
{
    int removed = 0, total = 0, rc;
    do {
        rc = gw_store_idem_sweep(app->store, SWEEP_BATCH, &removed);
        total += removed;
    } while (rc == 0 && removed == SWEEP_BATCH);
    if (total > 0)
        svc_debug("submits: %d Idempotency-Key%s past 24 hours removed", total, total == 1 ? "" : "s");
}

/* Ended jobs past the retention, a page at a time, until none is left or
 * the thread is asked to stop; their blob references go with them, so the
 * blob sweep that follows finds the bytes nobody holds any more. */
static void jobs_expire(gw_blob_gc *gc)
{
    gw_app *app = gc->app;
    int deleted = 0, tenants = 0, total = 0, rc;
    if (app->cfg.job_retention_days <= 0)
        return;
    do {
        rc = gw_store_jobs_expire(app->store, app->cfg.job_retention_days, JOB_PAGE, &deleted,
                                  &tenants);
        total += deleted;
        if (deleted > 0)
            svc_debug("jobs: retention deleted %d job%s of %d tenant%s", deleted,
                      deleted == 1 ? "" : "s", tenants, tenants == 1 ? "" : "s");
    } while (rc == 0 && deleted == JOB_PAGE && !atomic_load(&gc->stopping));
    if (total > 0)
        svc_info("jobs: retention deleted %d job%s ended more than %ld day%s ago", total,
                 total == 1 ? "" : "s", app->cfg.job_retention_days,
                 app->cfg.job_retention_days == 1 ? "" : "s");
    if (rc != 0)
        svc_warn("jobs: retention pass failed (%s); tried again next time", strerror(-rc));
}

static void *gc_main(void *arg)
{
    gw_blob_gc *gc = arg;
    gw_app *app = gc->app;
    pthread_mutex_lock(&gc->mu);
    while (!gc->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += app->cfg.blob_sweep_s;
        while (!gc->stopping && pthread_cond_timedwait(&gc->cv, &gc->mu, &ts) != ETIMEDOUT)
            ;
        if (gc->stopping)
            break;
        pthread_mutex_unlock(&gc->mu);
        jobs_expire(gc);
        int removed = 0, total = 0, rc;
        do {
            rc = gw_store_blob_sweep(app->store, app->cfg.blob_retention_s, SWEEP_BATCH,
                                     remove_bytes, app->blobs, &removed);
            total += removed;
        } while (rc == 0 && removed == SWEEP_BATCH);
        if (total > 0)
            svc_info("blobs: retention removed %d blob%s unreferenced for %ld s", total,
                     total == 1 ? "" : "s", app->cfg.blob_retention_s);
        if (rc != 0 && rc != -EIO)
            svc_warn("blobs: retention sweep failed (%s); tried again next time", strerror(-rc));
        idem_sweep(app);
        pthread_mutex_lock(&gc->mu);
    }
    pthread_mutex_unlock(&gc->mu);
    return NULL;
}

gw_blob_gc *gw_blob_gc_start(gw_app *app)
{
    gw_blob_gc *gc = calloc(1, sizeof *gc);
    if (gc == NULL)
        return NULL;
    gc->app = app;
    svc_cond_init_mono(&gc->cv);
    pthread_mutex_init(&gc->mu, NULL);
    int e = pthread_create(&gc->thread, NULL, gc_main, gc);
    if (e != 0) {
        svc_error("blobs: cannot start the retention thread: %s", strerror(e));
        pthread_cond_destroy(&gc->cv);
        pthread_mutex_destroy(&gc->mu);
        free(gc);
        return NULL;
    }
    return gc;
}

void gw_blob_gc_stop(gw_blob_gc *gc)
{
    if (gc == NULL)
        return;
    pthread_mutex_lock(&gc->mu);
    gc->stopping = 1;
    pthread_cond_signal(&gc->cv);
    pthread_mutex_unlock(&gc->mu);
    pthread_join(gc->thread, NULL);
    pthread_cond_destroy(&gc->cv);
    pthread_mutex_destroy(&gc->mu);
    free(gc);
}
