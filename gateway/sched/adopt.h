/* adopt.h — a node that shares the blob directory writes an output there
 * itself and asks the gateway to record it (PUT /v1/cluster/blobs/{id}).
 * The gateway trusts no file it did not write: it reads the file through
 * and hashes it before the blob is recorded, and removes a file whose bytes
 * are not what its name says. Hashing takes time in proportion to the
 * blob (a second or more per GiB), so it runs on threads of its own: the
 * request is suspended meanwhile and holds no HTTP thread. */
#ifndef GW_ADOPT_H
#define GW_ADOPT_H

#include <stdint.h>

#include "gw.h"
#include "svc_http.h"

typedef struct gw_adopter gw_adopter;

/* Starts the hashing threads. NULL on failure. */
gw_adopter *gw_adopter_start(gw_app *app);
/* Stops them once the HTTP servers have stopped: what is still queued is
 * answered 503 (the node pushes the bytes instead, or tries again). NULL is
 * a no-op. */
void gw_adopter_stop(gw_adopter *a);

/* Queues the adoption of blob id (size bytes, as the node says) as an
 * output node_id stored for attempt of job_id, and suspends req: a hashing
 * thread answers it (201, 404 no such file, 413 larger than the upload
 * limit, 422 another size or bytes that do not hash to id, 503). 0, or -1
 * when it cannot be queued now (full, stopping): the caller answers. */
int gw_adopter_submit(gw_adopter *a, svc_req *req, const char *id, uint64_t size,
                      const char *job_id, int attempt, const char *node_id);

#endif
