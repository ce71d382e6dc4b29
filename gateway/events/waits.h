/* waits.h — requests waiting for a job to end (`Prefer: wait=N`, RFC 7240),
 * held suspended: no thread waits on them. The job is answered as it is
 * once it has ended or N seconds have passed, with Preference-Applied. A
 * job that ends on this gateway wakes its waiters at once; one that ends on
 * another gateway is found by a look every WAITS_RECHECK_MS, one query for
 * every waiter together. */
#ifndef GW_WAITS_H
#define GW_WAITS_H

#include <stdint.h>

#include "gw.h"
#include "svc_http.h"

/* Longest wait a client may ask for, seconds. */
#define GW_WAIT_MAX_S 60

typedef struct gw_waits gw_waits;

/* Starts the thread. NULL on failure. */
gw_waits *gw_waits_start(gw_app *app);
/* Answers every waiting request with its job as it is now, stops the
 * thread; from then on gw_waits_add answers at once. NULL is a no-op. */
void gw_waits_stop(gw_waits *w);
/* Stops (if not yet) and frees; NULL is a no-op. */
void gw_waits_free(gw_waits *w);

/* The seconds of a `Prefer: wait=N` header (clamped to GW_WAIT_MAX_S), 0
 * when the header asks no wait, -1 when absent. */
int gw_waits_prefer(const char *prefer);

/* Takes over req to answer it with job_id (of tenant_id) once the job has
 * ended or wait_s passed: 200 with the job, or, when pending_status is not
 * 200, that status while the job has not ended (a submit's 202, with its
 * Location). key_id: the request's API key, re-checked while it waits
 * (every --key-cache-ms): once revoked, the request gets 401
 * unauthenticated. suspended: req is suspended already (its owner hands
 * it on); else it is suspended here, and when that cannot be (the server
 * stops) it is answered at once. */
void gw_waits_add(gw_waits *w, svc_req *req, int suspended, int64_t tenant_id, int64_t key_id,
                  const char *job_id, int wait_s, int pending_status);

/* job_id changed state on this gateway: its waiters look now. */
void gw_waits_job_changed(gw_waits *w, const char *job_id);

#endif
