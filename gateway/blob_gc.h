/* blob_gc.h — retention of blobs: a thread that removes, every sweep
 * interval, the blobs nobody has referenced for the retention time (their
 * rows and their bytes, in one transaction; see gw_store_blob_sweep). Every
 * gateway may run one: a blob is swept by one of them, the others skip it. */
#ifndef GW_BLOB_GC_H
#define GW_BLOB_GC_H

#include "gw.h"

typedef struct gw_blob_gc gw_blob_gc;

/* Starts the thread; NULL (logged) when it cannot. */
gw_blob_gc *gw_blob_gc_start(gw_app *app);
/* Stops and joins it; NULL is a no-op. */
void gw_blob_gc_stop(gw_blob_gc *gc);

#endif
