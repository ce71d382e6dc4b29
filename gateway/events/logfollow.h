/* logfollow.h — GET /v1/jobs/{id}/logs?follow=1: a task's log streamed
 * (chunked text) as its node ships it, until the job ends. One thread per
 * gateway reads what is new for every follower from PostgreSQL when this
 * gateway takes log bytes for the job (gw_logfollow_wake) and every
 * LOGFOLLOW_POLL_MS for what other gateways took; a follower costs no
 * thread (a suspended live stream). At the end, the rest comes from the
 * log blob the node stored. */
#ifndef GW_LOGFOLLOW_H
#define GW_LOGFOLLOW_H

#include <stdint.h>

#include "gw.h"
#include "svc_http.h"

typedef struct gw_logfollow gw_logfollow;

/* Starts the thread; NULL on failure. */
gw_logfollow *gw_logfollow_start(gw_app *app);
/* Ends every stream cleanly and stops the thread; later opens get 503.
 * NULL is a no-op. Call before svc_server_stop. */
void gw_logfollow_stop(gw_logfollow *f);
void gw_logfollow_free(gw_logfollow *f);
/* Answers req (a job of tenant_id, a task's part) with the stream of its
 * log from the first byte on. Returns 0 (the reply is made either way). */
int gw_logfollow_open(gw_logfollow *f, svc_req *req, int64_t tenant_id, int64_t key_id,
                      const char *job_id, int part);
/* This gateway took log bytes of job_id: its followers look now. NULL f is
 * a no-op. */
void gw_logfollow_wake(gw_logfollow *f, const char *job_id);

#endif
