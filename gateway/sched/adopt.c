/* adopt.c — blobs a node wrote into the shared directory, hashed before
 * they are recorded (adopt.h): a queue and two threads. */
#include "adopt.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_bstore.h"
#include "reply.h"
#include "svc_log.h"

#define ADOPT_THREADS 2
/* Adoptions waiting at most; past it a node is told to try again (503). */
#define ADOPT_QUEUE_MAX 256

typedef struct adoption {
    struct adoption *next;
    svc_req *req;             /* suspended; answered and resumed by a worker */
    char id[SVC_BLOB_ID_LEN];
    uint64_t size;
    char job_id[37], node_id[37];
    int attempt;
} adoption;

struct gw_adopter {
    gw_app *app;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    adoption *head, *tail;
    int queued, stop;
    int nthreads;
    pthread_t threads[ADOPT_THREADS];
};

/* Hashes the file, records the output when its bytes are what the node
 * says, and answers. */
static void adopt_one(gw_app *app, adoption *a)
{
    svc_req *req = a->req;
    uint64_t size = 0, max = (uint64_t)app->cfg.max_blob_mb << 20;
    int rc = svc_bstore_verify(app->blobs, a->id, max, &size);
    if (rc == -ENOENT) {
        svc_reply_error(req, 404, "not_found", NULL, NULL,
                        "the blob store has no file for %s: does the node share this gateway's "
                        "blob directory?", a->id);
    } else if (rc == -EFBIG) {
        svc_reply_error(req, 413, "payload_too_large", NULL, NULL,
                        "the file of %s is larger than the upload limit of %ld MiB", a->id,
                        app->cfg.max_blob_mb);
    } else if (rc == -EBADMSG) {
        /* planted or torn: a name must never serve other bytes */
        int gone = svc_bstore_remove(app->blobs, a->id);
        svc_warn("blobs: node %s asked to record %s, whose file does not hash to its name; %s",
                 a->node_id, a->id, gone == 0 ? "file removed" : "the file could not be removed");
        svc_reply_error(req, 422, "invalid_argument", "id", NULL,
                        "the bytes of the file named %s do not hash to that name; it was removed "
                        "and nothing was recorded", a->id);
    } else if (rc != 0) {
        svc_reply_error(req, 500, "internal", NULL, NULL, "cannot read the blob: %s", strerror(-rc));
    } else if (size != a->size) {
        svc_reply_error(req, 422, "invalid_argument", "size", NULL,
                        "the blob store's %s has %" PRIu64 " bytes, not %" PRIu64, a->id, size,
                        a->size);
    } else if (gw_store_run_output(app->store, a->job_id, a->attempt, a->id, size, a->node_id) != 0) {
        gw_reply_unavailable(req, "PostgreSQL");
    } else {
        svc_reply_json(req, 201, json_pack("{s:s, s:I}", "id", a->id, "size", (json_int_t)size));
    }
    svc_req_resume(req);
}

static void *adopter_main(void *arg)
{
    gw_adopter *ad = arg;
    pthread_mutex_lock(&ad->mu);
    for (;;) {
        while (!ad->stop && ad->head == NULL)
            pthread_cond_wait(&ad->cv, &ad->mu);
        if (ad->stop)
            break;
        adoption *a = ad->head;
        ad->head = a->next;
        if (ad->head == NULL)
            ad->tail = NULL;
        ad->queued--;
        pthread_mutex_unlock(&ad->mu);
        adopt_one(ad->app, a);
        free(a);
        pthread_mutex_lock(&ad->mu);
    }
    pthread_mutex_unlock(&ad->mu);
    return NULL;
}

gw_adopter *gw_adopter_start(gw_app *app)
{
    gw_adopter *ad = calloc(1, sizeof *ad);
    if (ad == NULL)
        return NULL;
    ad->app = app;
    pthread_mutex_init(&ad->mu, NULL);
    pthread_cond_init(&ad->cv, NULL);
    for (; ad->nthreads < ADOPT_THREADS; ad->nthreads++)
        if (pthread_create(&ad->threads[ad->nthreads], NULL, adopter_main, ad) != 0)
            break;
    if (ad->nthreads == 0) {
        gw_adopter_stop(ad);
        return NULL;
    }
    return ad;
}

void gw_adopter_stop(gw_adopter *ad)
{
    if (ad == NULL)
        return;
    pthread_mutex_lock(&ad->mu);
    ad->stop = 1;
    pthread_cond_broadcast(&ad->cv);
    pthread_mutex_unlock(&ad->mu);
    for (int i = 0; i < ad->nthreads; i++)
        pthread_join(ad->threads[i], NULL);
    for (adoption *a = ad->head, *next; a != NULL; a = next) {
        next = a->next;
        gw_reply_unavailable(a->req, "this gateway (shutting down)");
        svc_req_resume(a->req);
        free(a);
    }
    pthread_cond_destroy(&ad->cv);
    pthread_mutex_destroy(&ad->mu);
    free(ad);
}

int gw_adopter_submit(gw_adopter *ad, svc_req *req, const char *id, uint64_t size,
                      const char *job_id, int attempt, const char *node_id)
{
    adoption *a = calloc(1, sizeof *a);
    if (a == NULL)
        return -1;
    snprintf(a->id, sizeof a->id, "%s", id);
    snprintf(a->job_id, sizeof a->job_id, "%s", job_id);
    snprintf(a->node_id, sizeof a->node_id, "%s", node_id);
    a->size = size;
    a->attempt = attempt;
    a->req = req;
    pthread_mutex_lock(&ad->mu);
    int ok = !ad->stop && ad->queued < ADOPT_QUEUE_MAX;
    pthread_mutex_unlock(&ad->mu);
    /* Suspended before it is queued, so a worker never answers a request
     * that is not suspended yet. */
    if (!ok || svc_req_suspend(req) != 0) {
        free(a);
        return -1;
    }
    pthread_mutex_lock(&ad->mu);
    if (ad->stop) {
        pthread_mutex_unlock(&ad->mu);
        free(a);
        gw_reply_unavailable(req, "this gateway (shutting down)");
        svc_req_resume(req);
        return 0;
    }
    if (ad->tail)
        ad->tail->next = a;
    else
        ad->head = a;
    ad->tail = a;
    ad->queued++;
    pthread_cond_signal(&ad->cv);
    pthread_mutex_unlock(&ad->mu);
    return 0;
}
