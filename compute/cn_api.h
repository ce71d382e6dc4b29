/* cn_api.h — the node's HTTP API: the run endpoints the gateway drives
 * (POST/GET/DELETE /v1/runs), GET /v1/info, GET /metrics and the open GET /healthz
 * (alive) and GET /readyz (registered, not draining). The server's app pointer
 * must be the node's cn_node. */
#ifndef CN_API_H
#define CN_API_H

#include "svc_http.h"

/* Who may call a route (svc_route.access): the cluster token, or for
 * GET /metrics the cluster token unless the node runs with
 * --metrics-public. */
enum { CN_ACCESS_TOKEN = 1, CN_ACCESS_METRICS = 2 };

/* The route table, terminated by an entry with method NULL. Every route
 * but /healthz and /readyz needs the cluster token, checked by cn_api_authorize from
 * the head before the body is read (GET /metrics: see above). */
extern const svc_route cn_api_routes[];

/* svc_authorize_fn of the node: 0 with the cluster token (or for a
 * public /metrics), else -1 after replying 401 with WWW-Authenticate. */
int cn_api_authorize(svc_req *req, int access);

#endif
