/* api.h — the node's HTTP API: the run endpoints the gateway drives
 * (POST/GET/DELETE /v1/runs), GET /v1/info and the open GET /healthz. The
 * server's app pointer must be the node's cn_node. */
#ifndef CN_API_H
#define CN_API_H

#include "svc_http.h"

/* The route table, terminated by an entry with method NULL. */
extern const svc_route cn_api_routes[];

#endif
