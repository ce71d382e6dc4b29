/* blob_gc.h — retention: a thread that, every --blob-sweep-s, deletes the
 * jobs that ended more than --job-retention-days ago (a page of them per
 * statement, with their events, results and blob references; see
 * gw_store_jobs_expire), then removes the blobs nobody has referenced for
 * --blob-retention-s (their rows and their bytes, in one transaction; see
 * gw_store_blob_sweep). Every gateway may run one: a job or blob is
 * deleted by one of them, the others skip it. Off the HTTP threads: a
 * backlog of expired jobs takes as many pages as it needs here. */
#ifndef GW_BLOB_GC_H
#define GW_BLOB_GC_H

#include "gw.h"

typedef struct gw_blob_gc gw_blob_gc;

/* Starts the thread; NULL (logged) when it cannot. */
gw_blob_gc *gw_blob_gc_start(gw_app *app);
/* Stops and joins it; NULL is a no-op. */
void gw_blob_gc_stop(gw_blob_gc *gc);

#endif
