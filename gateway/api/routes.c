/* routes.c — the gateway's front door: every route of its two listeners,
 * who may call it (access, checked from the head by gw_authorize or
 * gw_authorize_cluster before the body is read; a handler then reads the
 * caller with gw_req_caller and never authenticates again), and how its
 * body comes. The tables are constant: limits that depend on options
 * (uploads' --max-blob-mb) are the server's (big_body). */
#include "api.h"
#include "rendezvous.h"
#include "request.h"

/* The route table of the public listener; what nodes call is on the
 * cluster listener (api_nodes.c), and answers 404 here. access is checked
 * from the head before the body is read (gw_authorize); a tenant's or
 * admin's route that changes something is W (its rate limit is the key's
 * write bucket; reads have their own); reserved routes are served even on
 * a connection over the per-IP limit: health checks must not queue behind
 * clients on the same address. */
#define T GW_ACCESS_TENANT
#define A GW_ACCESS_ADMIN
#define W GW_ACCESS_WRITE
#define M GW_ACCESS_METRICS
#define P GW_ACCESS_PUBLIC
const svc_route gw_routes[] = {
    {.method = "POST", .pattern = "/v1/jobs", .handler = gw_api_jobs_submit, .json_body = 1, .access = T | W,
     .body = gw_mpart_body, .body_type = "multipart/form-data", .big_body = 1, .json_fields = gw_job_fields},
    {.method = "GET", .pattern = "/v1/jobs", .handler = gw_api_jobs_list, .access = T},
    {.method = "GET", .pattern = "/v1/jobs/{id}", .handler = gw_api_jobs_get, .access = T},
    {.method = "GET", .pattern = "/v1/jobs/{id}/result", .handler = gw_api_jobs_result, .access = T},
    {.method = "POST", .pattern = "/v1/jobs/{id}/cancel", .handler = gw_api_jobs_cancel, .access = T | W},
    {.method = "DELETE", .pattern = "/v1/jobs/{id}", .handler = gw_api_jobs_delete, .access = T | W},
    {.method = "GET", .pattern = "/v1/jobs/{id}/outputs/{name*}", .handler = gw_api_jobs_output, .access = T},
    {.method = "GET", .pattern = "/v1/jobs/{id}/logs", .handler = gw_api_jobs_logs, .access = T},
    {.method = "GET", .pattern = "/v1/images", .handler = gw_api_images, .access = T},
    {.method = "GET", .pattern = "/v1/jobs/{id}/events", .handler = gw_api_job_events, .access = T},
    {.method = "GET", .pattern = "/v1/events", .handler = gw_api_events, .access = T},
    {.method = "GET", .pattern = "/v1/jobs/{id}/deliveries", .handler = gw_api_jobs_deliveries, .access = T},
    {.method = "GET", .pattern = "/v1/webhook-secret", .handler = gw_api_webhook_secret_get, .access = T},
    {.method = "POST", .pattern = "/v1/webhook-secret", .handler = gw_api_webhook_secret_rotate, .access = T | W},
    {.method = "POST", .pattern = "/v1/blobs", .handler = gw_api_blobs_upload, .access = T | W,
     .body = gw_api_blobs_body, .body_type = "application/octet-stream", .big_body = 1,
     .head = gw_api_blobs_head},
    {.method = "GET", .pattern = "/v1/blobs/{id}", .handler = gw_api_blobs_get, .access = T},
    {.method = "DELETE", .pattern = "/v1/blobs/{id}", .handler = gw_api_blobs_delete, .access = T | W},
    {.method = "GET", .pattern = "/v1/kernels", .handler = gw_api_kernels, .access = T},
    {.method = "GET", .pattern = "/v1/nodes", .handler = gw_api_nodes_list, .access = T},
    {.method = "GET", .pattern = "/v1/usage", .handler = gw_api_usage, .access = T},
    {.method = "GET", .pattern = "/v1/stats/history", .handler = gw_api_stats_history, .access = T},
    {.method = "GET", .pattern = "/healthz", .handler = gw_api_healthz, .access = P, .reserved = 1},
    {.method = "GET", .pattern = "/readyz", .handler = gw_api_readyz, .access = P, .reserved = 1},
    {.method = "GET", .pattern = "/openapi.yaml", .handler = gw_api_openapi, .access = P},
    {.method = "GET", .pattern = "/metrics", .handler = gw_api_metrics, .access = M, .reserved = 1},
    {.method = "GET", .pattern = "/", .handler = gw_api_ui_root, .access = P},
    {.method = "GET", .pattern = "/ui", .handler = gw_api_ui_slash, .access = P},
    {.method = "GET", .pattern = "/ui/", .handler = gw_api_ui_index, .access = P},
    {.method = "GET", .pattern = "/ui/{file}", .handler = gw_api_ui_file, .access = P},
    {.method = "GET", .pattern = "/ui/vendor/chart.js/{file}", .handler = gw_api_ui_chartjs, .access = P},
    {.method = "POST", .pattern = "/v1/tenants", .handler = gw_api_tenants_put, .json_body = 1, .access = A | W},
    {.method = "GET", .pattern = "/v1/tenants", .handler = gw_api_tenants_list, .access = A},
    {.method = "POST", .pattern = "/v1/keys", .handler = gw_api_keys_create, .json_body = 1, .access = A | W},
    {.method = "GET", .pattern = "/v1/keys", .handler = gw_api_keys_list, .access = A},
    {.method = "DELETE", .pattern = "/v1/keys/{id}", .handler = gw_api_keys_revoke, .access = A | W},
    {.method = "POST", .pattern = "/v1/nodes/{id}/drain", .handler = gw_api_node_drain, .access = A | W},
    {.method = "DELETE", .pattern = "/v1/nodes/{id}/drain", .handler = gw_api_node_undrain, .access = A | W},
    {.method = NULL},
};
#undef T
#undef A
#undef W
#undef M
#undef P


/* The cluster listener's routes. C: the cluster token (registration only);
 * N: the node's credential, whose node the path's {node} must be; RUN /
 * GANG: the run or gang attempt named must be the node's (auth_cluster.c).
 * All checked from the head. Every route is reserved: a node must not
 * queue behind other clients of its address. */
#define C GW_ACCESS_CLUSTER
#define N GW_ACCESS_NODE
#define M GW_ACCESS_METRICS
const svc_route gw_cluster_routes[] = {
    {.method = "POST", .pattern = "/v1/cluster/nodes/register", .handler = gw_api_node_register,
     .json_body = 1, .access = C, .reserved = 1},
    {.method = "POST", .pattern = "/v1/cluster/nodes/{node}/heartbeat",
     .handler = gw_api_node_heartbeat, .json_body = 1, .access = N, .reserved = 1},
    {.method = "DELETE", .pattern = "/v1/cluster/nodes/{node}", .handler = gw_api_node_remove,
     .access = N, .reserved = 1},
    {.method = "POST", .pattern = "/v1/cluster/nodes/{node}/lease", .handler = gw_api_node_lease,
     .json_body = 1, .access = N, .reserved = 1},
    {.method = "POST", .pattern = "/v1/cluster/nodes/{node}/results", .handler = gw_api_node_results,
     .json_body = 1, .access = N, .reserved = 1, .json_bulk = 1},
    {.method = "POST", .pattern = "/v1/cluster/nodes/{node}/logs", .handler = gw_api_node_logs,
     .json_body = 1, .access = N, .reserved = 1, .json_bulk = 1},
    {.method = "POST", .pattern = "/v1/cluster/blobs", .handler = gw_api_cluster_blobs_upload,
     .access = N | GW_ACCESS_RUN, .reserved = 1, .body = gw_api_blobs_body,
     .body_type = "application/octet-stream", .big_body = 1},
    {.method = "GET", .pattern = "/v1/cluster/blobs/{id}", .handler = gw_api_cluster_blobs_get,
     .access = N, .reserved = 1},
    {.method = "PUT", .pattern = "/v1/cluster/blobs/{id}", .handler = gw_api_cluster_blobs_adopt,
     .json_body = 1, .access = N | GW_ACCESS_RUN, .reserved = 1},
    /* the value streams into a buffer of at most GW_RDV_VALUE_MAX: a larger
     * Content-Length is refused from the head */
    {.method = "PUT", .pattern = "/v1/cluster/rendezvous/{id}/{attempt}/{key}",
     .handler = gw_api_rendezvous_put, .access = N | GW_ACCESS_GANG, .reserved = 1,
     .body = gw_rdv_body, .max_body = GW_RDV_VALUE_MAX},
    {.method = "GET", .pattern = "/v1/cluster/rendezvous/{id}/{attempt}/{key}",
     .handler = gw_api_rendezvous_get, .access = N | GW_ACCESS_GANG, .reserved = 1},
    {.method = "GET", .pattern = "/healthz", .handler = gw_api_healthz, .access = GW_ACCESS_PUBLIC,
     .reserved = 1},
    {.method = "GET", .pattern = "/readyz", .handler = gw_api_readyz, .access = GW_ACCESS_PUBLIC,
     .reserved = 1},
    {.method = "GET", .pattern = "/metrics", .handler = gw_api_metrics, .access = M, .reserved = 1},
    {.method = NULL},
};
#undef C
#undef N
#undef M
