/* progress.h — running jobs' progress as nodes report it (with their run
 * results, POST /v1/cluster/nodes/{id}/results, "progress": [...]): kept
 * on the job (its "progress" member) and streamed as `event: progress`. */
#ifndef GW_PROGRESS_H
#define GW_PROGRESS_H

#include <jansson.h>

#include "gw.h"
#include "svc_http.h"

/* Most members of one progress object. */
#define GW_PROGRESS_MEMBERS 16

/* Checks a report's "progress" (NULL: none): an array of at most max
 * {"job_id", "attempt", "progress": {"fraction": 0..1, name: number...}}.
 * 0, or -1 after replying 400 naming the bad member. */
int gw_progress_check(svc_req *req, const json_t *progress, size_t max);
/* Records node_id's checked reports in one statement (those of attempts
 * no longer running, or not on that node, change nothing), with the last
 * progress that run reports in
 * results carry (it wins: a run's last word), and hands what changed to
 * the event streams. Call it before the results are recorded, while those
 * jobs still run. Progress is not worth a retry: a failure is logged and
 * the next report brings the next value. */
void gw_progress_record(gw_app *app, const char *node_id, const json_t *progress,
                        const json_t *results);

#endif
