/* outcome.h — what the gateway does with runs once they are on nodes: records
 * the outcomes nodes report (fenced by job and attempt, so a late or
 * duplicate report changes nothing), and puts jobs back in the queue when a
 * run is lost. Used by the cluster API (reports, heartbeats) and by the
 * scheduler's reaper. */
#ifndef GW_OUTCOME_H
#define GW_OUTCOME_H

#include <jansson.h>

#include "gw.h"

/* Fenced: back to queued (and into the ready queue) when attempts remain,
 * failed when they are spent, cancelled when a cancel was asked for;
 * uncounted gives the attempt back (a run that never started). Returns the
 * store's answer: 0, -EAGAIN (the attempt is no longer current), -EIO,
 * -EPROTO. */
int gw_outcome_requeue(gw_app *app, const char *job_id, int attempt, int uncounted, const char *code,
                    const char *message);

/* Records one report of node node_id ({"job_id", "attempt", "state",
 * "kernel", "outputs", "info", "error", "backend"}; state "refused" with
 * "retry" for a run the node did not take): only for a run that node holds
 * (else it is ignored), and a success only with the outputs the catalog
 * spec of the job's kernel names. Returns 1 when PostgreSQL has the outcome
 * or has moved on from this attempt, or refused the outcome for good (the
 * node may forget the run), 0 when it could not be recorded now (the node
 * reports it again), -1 when the report is not one (no job_id or attempt). */
int gw_outcome_record(gw_app *app, const char *node_id, const json_t *report);

/* An exchange's array of reports is recorded in three steps, out[i] being
 * what gw_outcome_record would answer for the i-th: the succeeded runs
 * with small outputs of many nodes' exchanges go to PostgreSQL together,
 * in one statement (the cluster API's group commit of reports). */
typedef struct gw_outcome_batch gw_outcome_batch;
/* Records at once the reports that cannot wait in a batch (out[i]) and
 * returns the others, the succeeded runs with small outputs, as a batch;
 * NULL when there are none (or without memory: then each was recorded
 * alone). reports and out must live until gw_outcome_batch_finish. */
gw_outcome_batch *gw_outcome_batch_prepare(gw_app *app, const char *node_id, const json_t *reports,
                                           int *out);
/* Records the successes of bs[0..n), of any nodes, in one statement: 0,
 * -EIO (PostgreSQL unreachable) or -EPROTO (refused) for all. */
int gw_outcome_batch_commit(gw_app *app, gw_outcome_batch *const *bs, int n);
/* Fills the batch's out[] from rc, the answer of the commit it was in
 * (each report recorded alone where PostgreSQL refused it), and frees it. */
void gw_outcome_batch_finish(gw_app *app, gw_outcome_batch *b, int rc);

#endif
