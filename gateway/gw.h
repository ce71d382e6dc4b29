/* gw.h — the gateway's shared state: configuration, the PostgreSQL store,
 * the Redis queue, and the scheduler. Every API handler reaches it through
 * svc_req_app(). */
#ifndef GW_H
#define GW_H

#include <stdint.h>

#include "queue.h"
#include "store.h"

typedef struct gw_sched gw_sched;
typedef struct gw_limits gw_limits;
typedef struct gw_authfail gw_authfail;
typedef struct gw_bstore gw_bstore;
typedef struct gw_leases gw_leases;
typedef struct gw_waits gw_waits;
typedef struct gw_keycache gw_keycache;
typedef struct gw_committer gw_committer;
typedef struct gw_events gw_events;

/* Every option of main.c's table, copied here once (config_load): the
 * rest of the gateway reads this, never the table. */
typedef struct gw_config {
    const char *listen;
    const char *database_url;
    const char *redis_url;
    const char *cluster_token;
    const char *migrations;  /* directory of NNN_name.sql (default beside the binary) */
    const char *openapi;     /* the spec to serve (default beside the binary) */
    const char *log_level;
    int conn_timeout_s, max_conns_per_ip, max_connections, max_header_kb;
    int http_threads;       /* threads of the HTTP server's pool */
    int auth_fail_burst, auth_fail_rps;
    int max_body_mb;
    int max_output_mb;      /* outputs of one job, all tensors together */
    int node_timeout_s;
    int reconcile_interval_s;
    int db_pool;
    int heartbeat_s;
    int drain_s;
    int retry_base_ms, retry_max_s;
    int rate_limit_rps, rate_limit_burst;            /* per API key; rps 0: off */
    int key_cache_ms;       /* how long an answer on an API key is kept; 0: not at all */
    int max_queued_per_tenant, max_running_per_tenant; /* 0: no quota */
    const char *blob_dir;   /* default beside the binary */
    int max_blob_mb;        /* largest upload */
    int blob_quota_mb;      /* blob bytes a tenant may reference; 0: none */
    int blob_retention_s;   /* unreferenced blobs live this long */
    int blob_sweep_s;       /* how often retention runs */
    int sse_heartbeat_s;    /* a quiet event stream gets a comment this often */
    int events_poll_ms;     /* the event log is read this often while Redis carries no wakes */
    int max_streams_per_tenant; /* open event streams on one gateway; 0: no limit */
    const char *key_tenant; /* keys create: --tenant */
    int key_admin;          /*              --admin */
} gw_config;

typedef struct gw_app {
    gw_config cfg;
    gw_store *store;
    gw_queue *queue;
    gw_sched *sched;
    gw_limits *limits;      /* rate limits and quotas (limits.h) */
    gw_authfail *authfail;  /* failed authentications per address (auth.c) */
    gw_keycache *keys;      /* PostgreSQL's answers on API keys, for a moment (keycache.h) */
    gw_bstore *blobs;       /* where blob bytes live (blobstore.h) */
    gw_leases *leases;      /* nodes' lease polls held here (lease.h) */
    gw_waits *waits;        /* requests waiting for a job to end (waits.h) */
    gw_committer *committer; /* group commit of submits (committer.h, api_jobs.c) */
    gw_events *events;      /* Server-Sent Events of job state changes (events.h) */
    char *openapi;          /* the spec served at /openapi.yaml */
    size_t openapi_len;
    volatile int draining;  /* set on SIGTERM: readyz answers 503 */
} gw_app;

/* The authenticated caller, set on the request by the auth check. */
typedef struct gw_caller {
    int64_t tenant_id;
    int admin;
    int64_t key_id;         /* api_keys.id: the rate-limit bucket */
    int rate_rps, rate_burst;   /* the tenant's overrides, -1 when not set */
    int max_queued;             /* the tenant's queued quota, -1 when not set */
} gw_caller;

#endif
