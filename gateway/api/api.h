/* api.h — the gateway's HTTP handlers, grouped by resource: api_jobs.c
 * (the public job API), api_info.c (nodes, kernels, health, the spec),
 * api_admin.c (tenants, keys, node drain), api_nodes.c (what nodes call).
 * routes.c maps every path to its handler and says who may call it;
 * auth.c and auth_cluster.c check that from the head, once. */
#ifndef GW_API_H
#define GW_API_H

#include "gw.h"
#include "reply.h"
#include "svc_http.h"

/* What the gateway keeps on a request (its svc_req user slot): the caller
 * once authenticated, and a blob upload in progress. */
typedef struct gw_mpart gw_mpart;
typedef struct gw_reqctx {
    gw_caller who;
    int authenticated;
    struct svc_bwriter *upload;  /* POST /v1/blobs: the bytes so far */
    int upload_err;             /* -errno of the first failed write; -EDQUOT: past the quota */
    int quota_read;             /* used and room below were read at the head */
    uint64_t used, room;        /* the tenant's blob bytes then, and what it may add (quota.h) */
    gw_mpart *mpart;            /* a multipart POST /v1/jobs (freed with the request) */
    char node_id[37];           /* cluster listener: the node the credential names */
    char node_name[128];
    char *rdv;                  /* PUT rendezvous: the value so far (freed with the request) */
    size_t rdv_len;
    char job_id[37];            /* the path's {id}, lower-cased (gw_job_id_param) */
} gw_reqctx;
/* The request's context, created zeroed on first use; NULL on ENOMEM. */
gw_reqctx *gw_reqctx_of(svc_req *req);

/* Who a route is for (svc_route.access); the server checks it from the
 * head, before the body is read, through gw_authorize. A tenant or admin
 * route that changes something (a submit, a cancel, an upload, the admin
 * API's writes) adds GW_ACCESS_WRITE: its requests take their token from
 * the key's write bucket, every other one from its read bucket (gw_limits.h),
 * so that polling never starves the same key's submits. */
enum { GW_ACCESS_TENANT = 1, GW_ACCESS_ADMIN,
       GW_ACCESS_CLUSTER /* the cluster token: node registration only (cluster listener) */,
       GW_ACCESS_METRICS /* an admin key (public listener) or the cluster token (cluster
                            listener); anyone with --metrics-public */,
       GW_ACCESS_NODE    /* a node's own credential (cluster listener) */ };
/* Anyone (health, the spec, the dashboard's files). Every route says which
 * it is: one that says nothing does not start (svc_http.h), and a role
 * gw_authorize does not know is refused. */
#define GW_ACCESS_PUBLIC SVC_ACCESS_PUBLIC
#define GW_ACCESS_WRITE 0x100
/* GW_ACCESS_NODE routes: the query's job_id and attempt must name a run the
 * node holds (RUN), or the path's {id} and {attempt} a multi-node job's
 * attempt of which it holds a part (GANG); checked from the head too. */
#define GW_ACCESS_RUN 0x200
#define GW_ACCESS_GANG 0x400
#define GW_ACCESS_ROLE(access) ((access) == GW_ACCESS_PUBLIC ? GW_ACCESS_PUBLIC : (access) & 0xff)
/* svc_authorize_fn of the gateway: 0, or -1 after replying 401 (with
 * WWW-Authenticate), 403, 429 or 503. A tenant's or admin's route keeps
 * the caller on the request. */
int gw_authorize(svc_req *req, int access);
/* The caller gw_authorize found for this request (routes.c declares who
 * may call each route, and it is checked from the head once): handlers
 * read it here and never authenticate again. Zeroed on a public route. */
gw_caller gw_req_caller(svc_req *req);

/* Authenticates a tenant key and takes a token of its rate limit; on
 * failure replies 401 (429 over the rate limit or after too many failed
 * attempts from the address, 503 when PostgreSQL cannot be asked) and
 * returns -1. The caller found is kept on the request: a second call
 * answers from it without a lookup or another token. */
int gw_auth_tenant(svc_req *req, gw_caller *who);
/* Replies 401 unauthenticated with msg and the challenge RFC 6750 asks for
 * (WWW-Authenticate: challenge, the listener's Bearer realm), counts the
 * failure against the caller's address, and returns -1. */
int gw_reply_unauthenticated(svc_req *req, const char *challenge, const char *msg);
/* The {id} of the path when it is a job's UUID; NULL after replying 404. */
const char *gw_job_id_param(svc_req *req);
/* The tenant= argument an admin may give to read another tenant's figures
 * (what: "usage", "history"): 0 with *tenant (NULL when not given), or -1
 * after replying 403 (not an admin) or 400 (not a tenant's name). */
int gw_tenant_arg(svc_req *req, const gw_caller *who, const char *what, const char **tenant);
/* gw_auth_tenant taking the token from bucket (GW_RATE_READ, GW_RATE_WRITE)
 * of the key; gw_auth_tenant itself takes a read token (every tenant route
 * is authorized from its head first, with its own bucket, so handlers'
 * calls are answered from the request). */
int gw_auth_tenant_bucket(svc_req *req, gw_caller *who, int bucket);
/* auth_cluster.c: the svc_authorize_fn of the cluster listener. The
 * cluster token opens registration (GW_ACCESS_CLUSTER) and the cluster
 * listener's /metrics; a GW_ACCESS_NODE route needs the credential the
 * node got at registration, whose node must be the path's {node} where
 * there is one (403 otherwise), plus what GW_ACCESS_RUN / GW_ACCESS_GANG
 * ask. 0, or -1 after replying 400, 401, 403, 404, 409, 429 or 503. */
int gw_authorize_cluster(svc_req *req, int access);
/* The node a GW_ACCESS_NODE request was authorized for: its id, or NULL
 * (no node). */
const char *gw_req_node(svc_req *req);
/* Starts the node credential cache's batch refresh (nodecred.h) over
 * PostgreSQL. 0 or -errno. */
int gw_nodecreds_refresh_serve(gw_app *app);

/* Failed authentications per client address, in this process: burst at
 * once, rps a second after that (burst 0: no limit). NULL on ENOMEM. */
gw_authfail *gw_authfail_new(int burst, int rps);
void gw_authfail_free(gw_authfail *f);
/* Seconds the address must wait before its next attempt; 0: it may go on. */
int gw_authfail_blocked(gw_authfail *f, const char *ip, int64_t now_ms);
/* Counts one failed attempt (and logs, at most every 10 s per address,
 * when the address runs out of attempts). */
void gw_authfail_count(gw_authfail *f, const char *ip, int64_t now_ms);
/* A 429 before any lookup when the request's address has failed too often
 * (both listeners); 0 to go on. */
int gw_authfail_refuse(svc_req *req);

/* Starts and stops the group commit of submits (app->committer): POST
 * /v1/jobs suspends its request and the committer answers it once its batch
 * is committed. Stop after the HTTP server, which waits for suspended
 * requests, and before the scheduler. start: 0 or -ENOMEM. */
int gw_api_jobs_start(gw_app *app);
void gw_api_jobs_stop(gw_app *app);
int gw_api_jobs_submit(svc_req *req);
int gw_api_jobs_get(svc_req *req);
int gw_api_jobs_list(svc_req *req);
int gw_api_jobs_result(svc_req *req);
int gw_api_jobs_cancel(svc_req *req);
/* api_jobs_delete.c: DELETE /v1/jobs/{id}, an ended job of the caller's
 * tenant and everything of it but its usage (store_retention.c). */
int gw_api_jobs_delete(svc_req *req);
/* api_webhooks.c: GET /v1/jobs/{id}/deliveries, and the tenant's signing
 * secret: GET /v1/webhook-secret (made on first use), POST to rotate it. */
int gw_api_jobs_deliveries(svc_req *req);
int gw_api_webhook_secret_get(svc_req *req);
int gw_api_webhook_secret_rotate(svc_req *req);
/* submit_multipart.c: the streamed body of a multipart/form-data POST
 * /v1/jobs (tensor parts go to the blob store as they arrive), and at the
 * end the job's JSON with each {"part"} input turned into {"blob"}: a new
 * reference, or NULL after replying 4xx/5xx. */
int gw_mpart_body(svc_req *req, const char *data, size_t n);
json_t *gw_mpart_job(svc_req *req);
/* GET /v1/jobs/{id}/outputs/{name}: the output's raw bytes (sendfile), or
 * a .npy file with ?format=npy or Accept: application/x-npy. */
int gw_api_jobs_output(svc_req *req);

/* api_blobs.c: POST /v1/blobs streams the body (gw_api_blobs_body) into the
 * blob store, within the room of the tenant's quota read at the head
 * (gw_api_blobs_head: a Content-Length past it is refused before a byte is
 * read, a chunked body cut off once past it); GET/HEAD/DELETE
 * /v1/blobs/{id}. */
int gw_api_blobs_head(svc_req *req);
int gw_api_blobs_body(svc_req *req, const char *data, size_t n);
int gw_api_blobs_upload(svc_req *req);
int gw_api_blobs_get(svc_req *req);
int gw_api_blobs_delete(svc_req *req);
/* The nodes' side (a node's credential): POST /v1/cluster/blobs?job_id=
 * &attempt= takes an output of that run (no tenant owns it until its job
 * is recorded), GET /v1/cluster/blobs/{id} serves an input of a run the
 * node holds. */
int gw_api_cluster_blobs_upload(svc_req *req);
int gw_api_cluster_blobs_get(svc_req *req);
/* PUT /v1/cluster/blobs/{id}?job_id=&attempt= {"size": n}: a node that
 * shares the blob directory wrote the blob itself; recorded once its file
 * is there with that size and its bytes hash to its name. */
int gw_api_cluster_blobs_adopt(svc_req *req);
/* api_runs.c: POST /v1/cluster/nodes/{id}/lease ({"max", "wait_ms"}) holds
 * the node's poll until runs or cancels are there for it; POST
 * /v1/cluster/nodes/{id}/results ({"free", "results": [...]}) records the
 * runs that ended and answers {"recorded": [run ids]}. */
int gw_api_node_lease(svc_req *req);
int gw_api_node_results(svc_req *req);
/* Starts and stops the group commit of reports (app->results): the
 * succeeded runs of many nodes' exchanges go to PostgreSQL in one
 * statement, each request suspended until its batch is committed. Stop
 * after the HTTP server and before the store. start: 0 or -ENOMEM. */
int gw_api_results_start(gw_app *app);
void gw_api_results_stop(gw_app *app);
/* Tasks (api_tasks.c): a node's live logs, a task's logs, the images. */
int gw_api_node_logs(svc_req *req);
int gw_api_jobs_logs(svc_req *req);
int gw_api_images(svc_req *req);

/* api_events.c: Server-Sent Events of job state changes (events.h). */
int gw_api_events(svc_req *req);
int gw_api_job_events(svc_req *req);

int gw_api_kernels(svc_req *req);
int gw_api_nodes_list(svc_req *req);
/* api_nodes.c: a node registers (cluster token; its name is not taken from
 * a live holder), beats and leaves (its credential). */
int gw_api_node_register(svc_req *req);
int gw_api_node_heartbeat(svc_req *req);
/* Starts and stops the group commit of heartbeats (app->beats): a heartbeat
 * suspends its request and is answered once its batch is committed. Stop
 * after the HTTP server and before the store. start: 0 or -ENOMEM. */
int gw_api_beats_start(gw_app *app);
void gw_api_beats_stop(gw_app *app);
int gw_api_node_remove(svc_req *req);
int gw_api_healthz(svc_req *req);
int gw_api_readyz(svc_req *req);
int gw_api_openapi(svc_req *req);
/* GET /metrics: the Prometheus text exposition (metrics.h). */
int gw_api_metrics(svc_req *req);

/* api_usage.c: GET /v1/usage?from=&to=&group_by=&tenant= (tenant: admin
 * keys only). */
int gw_api_usage(svc_req *req);
/* api_stats.c: GET /v1/stats/history?minutes=&tenant= (tenant: admin
 * keys only), answers cached 5 s per tenant and window (stats.h) */
int gw_api_stats_history(svc_req *req);

/* api_ui.c: the dashboard's static files. GET /ui/{file} from --ui-dir,
 * GET /ui/ its index.html, GET /ui/vendor/chart.js/{file} from
 * --chartjs-dir; GET / (302) and GET /ui (301) send on to /ui/. */
int gw_api_ui_file(svc_req *req);
int gw_api_ui_index(svc_req *req);
int gw_api_ui_chartjs(svc_req *req);
int gw_api_ui_root(svc_req *req);
int gw_api_ui_slash(svc_req *req);
/* The Content-Type of a file the dashboard may serve, or NULL when name is
 * not one: empty, longer than 128, not all of A-Za-z0-9._-, starting with
 * '.' or '-', holding "..", or of an extension not served. */
const char *gw_ui_file_type(const char *name);
/* 1 if the If-None-Match header value (NULL: absent) names etag (a quoted
 * strong tag), weakly compared, or is "*". */
int gw_ui_etag_match(const char *if_none_match, const char *etag);

/* api_admin.c: admin keys only (403 for other keys). */
int gw_api_tenants_put(svc_req *req);
int gw_api_tenants_list(svc_req *req);
int gw_api_keys_create(svc_req *req);
int gw_api_keys_list(svc_req *req);
int gw_api_keys_revoke(svc_req *req);
int gw_api_node_drain(svc_req *req);
int gw_api_node_undrain(svc_req *req);

/* Parses a single "bytes=a-b" / "bytes=a-" / "bytes=-n" Range of a body
 * of size bytes into [*off, *off + *len): 1 for a range, 0 when absent or
 * not one served partially (the whole body goes out), -1 for 416. */
int gw_range_parse(const char *h, uint64_t size, uint64_t *off, uint64_t *len);
/* The bytes of blob id (fd, size bytes; the reply owns fd) as ctype:
 * all of them, or the single range the request's Range header asks for
 * (206), or 416; with its ETag (api_blobs.c). */
int gw_reply_blob_range(svc_req *req, const char *id, const char *ctype, int fd, uint64_t size);

/* routes.c: the route table of the public listener (tenants, admins,
 * health, metrics, the dashboard) and of the cluster listener (what nodes
 * call), each terminated by a NULL method. */
extern const svc_route gw_routes[];
extern const svc_route gw_cluster_routes[];

#endif
