/* rendezvous.h — where the nodes of a multi-node job meet (contract §3):
 * PUT/GET /v1/cluster/rendezvous/{job_id}/{attempt}/{key}, values in a Redis
 * hash per job attempt with a TTL, fenced by the job's running attempt and
 * open only to the nodes holding a part of it. */
#ifndef GW_RENDEZVOUS_H
#define GW_RENDEZVOUS_H

#include "api.h"

/* Largest value one key may hold. */
#define GW_RDV_VALUE_MAX (64 * 1024)
/* Life of an attempt's values in Redis after their last write: a bound for
 * attempts whose end nobody saw; an attempt that ends drops them at once. */
#define GW_RDV_TTL_S 3600

/* The routes (api_nodes.c), for a node holding a part of the attempt
 * (checked from the head). PUT's value streams through gw_rdv_body into
 * the request's buffer, which the route's max_body bounds. */
int gw_rdv_body(svc_req *req, const char *data, size_t n);
int gw_api_rendezvous_put(svc_req *req);
int gw_api_rendezvous_get(svc_req *req);

/* Drops the values of attempt of job_id (its attempt ended); best effort:
 * the TTL removes what Redis did not take now. */
void gw_rdv_forget(gw_app *app, const char *job_id, int attempt);

#endif
