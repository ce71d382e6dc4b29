/* metrics.h — what the gateway serves at GET /metrics (README, Metrics):
 * counters and histograms of the job path (submits, results, run time,
 * queue wait) updated where they happen, the cluster's state (jobs by
 * state and kernel, queue depth per priority, node slots) counted in
 * PostgreSQL at most every --metrics-refresh-s when scraped, and the
 * figures of the PostgreSQL and Redis pools. The HTTP server adds its own
 * series to the same registry. */
#ifndef GW_METRICS_H
#define GW_METRICS_H

#include "gw.h"
#include "svc_metrics.h"

/* The gateway's registry and families, reading app's store, queue and
 * limiter when scraped (they must outlive it). NULL on ENOMEM. */
gw_metrics *gw_metrics_new(gw_app *app);
/* NULL is a no-op. */
void gw_metrics_free(gw_metrics *m);
/* The registry, for the HTTP server and for GET /metrics. */
svc_metrics *gw_metrics_registry(gw_metrics *m);

/* The updates below are no-ops on NULL (a gateway built without metrics,
 * unit tests). A kernel name outside the catalog is counted as "other". */

/* A job of kernel was committed (accepted with 202). */
void gw_metrics_submitted(gw_metrics *m, const char *kernel);
/* A node's report on a run of kernel was recorded: state is the run's
 * ("succeeded", "failed", "cancelled", "refused"); run_s its run time on the
 * node, < 0 when unknown. */
void gw_metrics_reported(gw_metrics *m, const char *kernel, const char *state, double run_s);
/* n runs were given to nodes' polls (how: "handed" at their claim,
 * "looked" by a lease look) or taken back from the handed ("taken_back"). */
void gw_metrics_lease(gw_metrics *m, const char *how, int n);
/* n node credentials were looked up in PostgreSQL (how: "request", by a
 * call the cache had no answer for; "refresh", by the cache's batch). */
void gw_metrics_node_auth(gw_metrics *m, const char *how, int n);
/* The scheduler preempted n runs (--fair-preempt). */
void gw_metrics_preempted(gw_metrics *m, int n);
/* A job of kernel started its first attempt wait_s after its submit. */
void gw_metrics_started(gw_metrics *m, const char *kernel, double wait_s);

#endif
