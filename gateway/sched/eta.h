/* eta.h — where a queued job stands: its position in the ready queue (one
 * ZRANK) and an estimate of when it starts, from the recent run times of
 * its kernel and the slots of the nodes that take work. What the estimate
 * needs from PostgreSQL is kept a few seconds per kernel, so a client
 * polling a queued job costs one Redis round trip, not a query. */
#ifndef GW_ETA_H
#define GW_ETA_H

#include <jansson.h>
#include <stdint.h>

#include "gw.h"

typedef struct gw_eta gw_eta;

/* A cache whose answers are trusted ttl_ms. NULL on ENOMEM. */
gw_eta *gw_eta_new(int ttl_ms);
/* NULL is a no-op. */
void gw_eta_free(gw_eta *e);

/* Seconds until a job with ahead jobs before it starts when each takes
 * mean_ms on one of slots slots, rounded to a tenth; -1 when that cannot
 * be said (no recent run of the kernel, no slot up). */
double gw_eta_estimate(int64_t ahead, int64_t runs, int64_t mean_ms, int64_t slots);

/* The "queue" member of a queued job of tenant_id (job as kowloon_job_json
 * writes it): {"position": 1 for the next job to be placed, "eta_s":
 * seconds or null}. NULL when the job is not in the ready queue (waiting
 * out a retry's back-off, being placed) or Redis cannot be asked. New
 * reference. */
json_t *gw_eta_queue(gw_app *app, int64_t tenant_id, const json_t *job);

#endif
