/* cn_runs.h — the run manager: runs keyed "<job_id>.<attempt>", a worker pool
 * of --slots threads, per-run cancel flags, a watchdog for timeout_s, long
 * polls on a condition variable, and a sweeper that frees finished runs
 * after they have been kept for collection. A C API with no HTTP in it; the
 * node's handlers (cn_api.c) and the unit tests both drive it. */
#ifndef CN_RUNS_H
#define CN_RUNS_H

#include <errno.h>
#include <jansson.h>
#include <stdint.h>

#include "cn_args.h"
#include "cn_backend.h"
#include "cn_blobcache.h"
#include "cn_blobio.h"
#include "cn_rdv.h"
#include "svc_metrics.h"
#include "task.h"

typedef struct cn_runs cn_runs;

typedef struct cn_runs_opts {
    int slots;                  /* worker threads = concurrent runs, >= 1 */
    int threads;                /* CPU threads per run; <= 0: all cores */
    const cn_backend *backend;  /* borrowed; must outlive the manager */
    int64_t keep_ms;            /* how long finished runs stay; <= 0: 15 minutes */
    int64_t release_grace_ms;   /* how long released runs stay; <= 0: 60 seconds */
    const cn_blobio *blobio;    /* borrowed, may be NULL: where blob inputs come from
                                   and "output_blobs" outputs go; without it a run
                                   with a blob input fails with backend_error */
    cn_blobcache *cache;        /* borrowed, may be NULL: input blobs by hash */
    svc_metrics *metrics;       /* borrowed, may be NULL: where runs are counted by
                                   kernel and state, with their run time */
    const cn_dist_cfg *dist;    /* borrowed, may be NULL (then parts of multi-node
                                   jobs are refused): the rendezvous, the address
                                   and timeout of multi-node runs, read when one
                                   starts */
    /* May be NULL. Called once, on a worker thread with the manager's lock
     * held (so it must only note and wake), when the first run answers
     * KL_EDEVICE: the plugin has lost the GPU for the rest of the process.
     * That run ends device_error (final); runs that answer KL_EDEVICE after
     * it end backend_error (retryable: not theirs). why is the plugin's. */
    void (*on_device_lost)(void *ctx, const char *why);
    void *device_ctx;
    cn_task_cfg *tasks;         /* borrowed, may be NULL (then tasks are refused):
                                   the engine and everything tasks share */
} cn_runs_opts;

/* The run manager's answers: negative errno values, as everywhere in the
 * node (kl.h), named for what they mean here. */
enum {
    CN_RUN_NEW = 0,               /* submit accepted a new run */
    CN_RUN_EXISTING = 1,          /* submit found the same (job_id, attempt) */
    CN_ENOENT = -ENOENT,          /* no such run (never here, or swept) */
    CN_EOVERLOADED = -EAGAIN,     /* running + queued >= slots */
    CN_EDRAINING = -ESHUTDOWN,    /* the node is shutting down */
    CN_ENOTSUP = -ENOTSUP,        /* this node cannot serve the request (no CUDA, too few
                                     GPUs); err says why */
    CN_ENOMEM = -ENOMEM,
    CN_EBUSY = -EBUSY,            /* the run has not finished */
};

/* Starts the workers and the watchdog. Returns 0 and *out, or a negative
 * errno value. */
int cn_runs_create(const cn_runs_opts *opts, cn_runs **out);

/* Stops everything: refuses new runs, cancels queued and running ones as
 * cn_runs_cancel_all does, and wakes every long poll so that HTTP handlers
 * return. Idempotent. */
void cn_runs_shutdown(cn_runs *m);

/* Shuts down, joins the threads (a running kernel is waited for; it has been
 * asked to cancel) and frees every run. No caller may still be inside a
 * cn_runs_ function. NULL is a no-op. */
void cn_runs_destroy(cn_runs *m);

/* Queues the decoded request. On CN_RUN_NEW the manager has taken req's
 * inputs (req is left cleared); on any other result req is untouched and
 * the caller still clears it. *run_json (may be NULL) receives the run
 * object without outputs, a new reference, for CN_RUN_NEW and
 * CN_RUN_EXISTING. CN_ENOTSUP fills err (field "backend" or "gpus"). Submit
 * also cancels older attempts of the same job still held here: the gateway
 * has given up on them. */
int cn_runs_submit(cn_runs *m, cn_run_req *req, json_t **run_json, kl_err *err);

/* The run object, waiting up to wait_ms for the run to finish (0: answer at
 * once). With outputs != 0 a succeeded run carries its outputs in base64,
 * or as {"dtype","shape","blob"} references when it asked for output_blobs,
 * and a terminal answer marks the run collected (see cn_runs_load).
 * Returns 0 and *out (new reference), CN_ENOENT, or CN_ENOMEM. */
int cn_runs_get(cn_runs *m, const char *run_id, int64_t wait_ms, int outputs, json_t **out);

/* Cancels: a queued run ends "cancelled" at once, a running one has its flag
 * raised and ends when the kernel notices. Then as cn_runs_get with outputs.
 * A finished run is left as it is. */
int cn_runs_cancel(cn_runs *m, const char *run_id, int64_t wait_ms, json_t **out);

/* The gateway has recorded how the run ended: the run and its outputs are
 * freed after release_grace_ms instead of keep_ms. 0, CN_ENOENT, or
 * CN_EBUSY for a run that has not finished (nothing changes). */
int cn_runs_release(cn_runs *m, const char *run_id);

/* Waits up to wait_ms for runs that ended and were not taken yet, then
 * appends the run object of up to max of them (with outputs, as cn_runs_get
 * gives them) to out and returns how many were taken. A taken run is not
 * handed out again; it stays until cn_runs_release (or keep_ms) and counts
 * as unsettled until then. A run whose object cannot be built (ENOMEM) is
 * taken without one and logged. */
int cn_runs_take_ended(cn_runs *m, int64_t wait_ms, int max, json_t *out);

/* Appends {"job_id", "attempt", "progress"} for every run whose kernel
 * reported progress since the last call (the latest report only; a run
 * that has just ended too, so its last report goes with its end) and
 * returns how many. */
int cn_runs_take_progress(cn_runs *m, json_t *out);

/* Slots not taken by queued or running runs; 0 while draining. *ended
 * (may be NULL) gets how many runs have ended so far, read together: of two
 * answers, the one with more ended runs is the newer. */
int cn_runs_free_slots(cn_runs *m, uint64_t *ended);

/* Load for heartbeats: *active = queued + running; ids (may be NULL) gets
 * every run id the gateway still has to learn about (queued, running, and
 * finished but not yet collected). */
void cn_runs_load(cn_runs *m, int *active, json_t *ids);

/* Starts draining: submit answers CN_EDRAINING from now on. Returns how many
 * runs are unsettled (see cn_runs_unsettled). */
int cn_runs_drain(cn_runs *m);

/* Runs that were queued or running when draining began, or had just finished
 * uncollected, and are not yet both finished and collected. */
int cn_runs_unsettled(cn_runs *m);

/* Cancels every queued and running run for a shutdown (they end failed with
 * the retryable backend_error, not cancelled: nobody asked for that), then
 * waits up to wait_ms for the running ones to stop. Returns how many are
 * still running. */
int cn_runs_cancel_all(cn_runs *m, int64_t wait_ms);

#endif
