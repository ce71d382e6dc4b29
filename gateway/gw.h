/* gw.h — the gateway's shared state: configuration, the PostgreSQL store,
 * the Redis queue, and the scheduler. Every API handler reaches it through
 * svc_req_app(). */
#ifndef GW_H
#define GW_H

#include <jansson.h>
#include <stdint.h>

#include "queue.h"
#include "store.h"
#include "svc_bstore.h"

typedef struct gw_sched gw_sched;
typedef struct gw_limits gw_limits;
typedef struct gw_authfail gw_authfail;
typedef struct gw_leases gw_leases;
typedef struct gw_waits gw_waits;
typedef struct gw_keycache gw_keycache;
typedef struct gw_jobcache gw_jobcache;
typedef struct gw_committer gw_committer;
typedef struct gw_eta gw_eta;
typedef struct gw_stats gw_stats;
typedef struct gw_metrics gw_metrics;
typedef struct gw_whnet gw_whnet;
typedef struct gw_webhooks gw_webhooks;
typedef struct gw_resolver gw_resolver;
typedef struct gw_events gw_events;
typedef struct gw_nodecreds gw_nodecreds;
typedef struct gw_adopter gw_adopter;
typedef struct gw_logfollow gw_logfollow;

/* Every option of main.c's table, copied here once (config_load): the
 * rest of the gateway reads this, never the table. */
typedef struct gw_config {
    const char *listen;          /* the public listener: tenants, admins, health, metrics, UI */
    const char *cluster_listen;  /* the cluster listener: what nodes call */
    const char *database_url;
    const char *redis_url;
    const char *cluster_token;   /* --cluster-token, or read from --cluster-token-file */
    const char *cluster_token_file;
    const char *migrations;  /* directory of NNN_name.sql (default beside the binary) */
    const char *openapi;     /* the spec to serve (default beside the binary) */
    const char *ui_dir;      /* the dashboard's files (default beside the binary) */
    const char *chartjs_dir; /* Chart.js for the dashboard (Debian's libjs-chart.js) */
    const char *log_level;
    long conn_timeout_s, max_conns_per_ip, max_connections, max_header_kb;
    long http_threads;       /* threads of the HTTP server's pool */
    long auth_fail_burst, auth_fail_rps;
    long max_body_mb;
    long max_json_body_mb;   /* a JSON body (and a multipart submit's job part) */
    long body_timeout_s, body_min_rate_kb; /* a body's windows and the bytes each brings */
    const char *trusted_proxies; /* CIDRs whose X-Forwarded-For names the client */
    const char *tls_cert, *tls_key; /* HTTPS when both are given; reread on SIGHUP */
    long max_output_mb;      /* outputs of one job, all tensors together; a task's default quota */
    const char *task_images;/* images tasks may run (patterns), for tenants without their own */
    long task_log_mb;        /* a task part's log, at most */
    long node_timeout_s;
    long reconcile_interval_s;
    long analyze_min_rows;      /* ANALYZE jobs once this many rows changed and the table doubled */
    long fair_lump_wait_s;   /* how long a lump yields to tenants below their share at most */
    long fair_repay_s;       /* what a tenant is owed counts as owed / this many units; 0: off */
    long fair_reserve_pct;   /* a reservation is not its tenant's turn; this % of its target a pass; 0: off */
    int fair_preempt;        /* a job of over a quarter of its tenant's share that takes the tenant
                                past it stops the tenant's youngest runs */
    long timeout_grace_s;    /* a run this long past its timeout_s without a report is failed */
    long db_pool;
    long heartbeat_s;
    long drain_s;
    long retry_base_ms, retry_max_s;
    long rate_limit_rps, rate_limit_burst;            /* writes, per API key; rps 0: off */
    long read_rate_limit_rps, read_rate_limit_burst;  /* reads, per API key; rps 0: off */
    long key_cache_ms;       /* how long an answer on an API key is kept; 0: not at all */
    long stats_cache_ms;     /* how long a stats history answer is kept; 0: not at all */
    long job_cache_mb;       /* memory for ended jobs' answers (jobcache.h); 0: none */
    long max_queued_per_tenant, max_running_per_tenant; /* 0: no quota */
    const char *blob_dir;   /* default beside the binary */
    long max_blob_mb;        /* largest upload */
    long blob_quota_mb;      /* blob bytes a tenant may reference; 0: none */
    long blob_retention_s;   /* unreferenced blobs live this long */
    long blob_sweep_s;       /* how often retention runs (jobs, then blobs) */
    long job_retention_days; /* ended jobs are deleted this long after; 0: kept */
    int metrics_public;     /* GET /metrics without the cluster token or an admin key */
    long metrics_refresh_s;  /* how old the job and node figures of /metrics may be */
    const char *prices;     /* the price table (usage.h, gw_prices_parse) */
    const char *currency;
    int webhook_allow_private;      /* webhooks may reach any address */
    const char *webhook_allow_nets; /* CIDR blocks webhooks may reach though internal */
    long webhook_retry_base_ms;      /* first back-off of a failed delivery; doubles */
    long webhook_max_age_s;          /* a delivery is retried this long, then failed */
    long webhook_timeout_s;          /* one attempt, connection included */
    const char *webhook_dns_servers;/* name servers of webhook lookups; NULL: resolv.conf's */
    long webhook_dns_timeout_ms;     /* a webhook host's lookup at submit, at most */
    long webhook_max_inflight;       /* deliveries in flight on one gateway */
    long webhook_tenant_inflight;    /* of them, one tenant's at most */
    long webhook_retention_s;        /* ended deliveries are kept this long */
    long sse_heartbeat_s;    /* a quiet event stream gets a comment this often */
    long events_poll_ms;     /* the event log is read this often while Redis carries no wakes */
    long max_streams_per_tenant; /* open event streams on one gateway; 0: no limit */
    const char *key_tenant; /* keys create: --tenant */
    int key_admin;          /*              --admin */
} gw_config;

typedef struct gw_app {
    gw_config cfg;
    gw_store *store;
    gw_queue *queue;
    gw_sched *sched;
    gw_limits *limits;      /* rate limits and quotas (gw_limits.h) */
    gw_authfail *authfail;  /* failed authentications per address (auth.c) */
    gw_keycache *keys;      /* PostgreSQL's answers on API keys, for a moment (keycache.h) */
    gw_nodecreds *nodecreds; /* which node a credential names, for a moment (nodecred.h) */
    gw_adopter *adopter;    /* nodes' outputs in the shared directory, hashed (adopt.h) */
    gw_jobcache *jobs;      /* ended jobs as GET answers them (jobcache.h) */
    svc_bstore *blobs;      /* where blob bytes live (svc_bstore.h) */
    gw_leases *leases;      /* nodes' lease polls held here (lease.h) */
    gw_waits *waits;        /* requests waiting for a job to end (waits.h) */
    gw_committer *committer; /* group commit of submits (committer.h, api_jobs.c) */
    gw_committer *beats;    /* group commit of heartbeats (committer.h, api_nodes.c) */
    gw_committer *results;  /* group commit of nodes' reports (committer.h, api_runs.c) */
    gw_eta *eta;            /* queued jobs' position and start estimate (eta.h) */
    gw_stats *stats;        /* GET /v1/stats/history's answers, for a moment (stats.h) */
    gw_metrics *metrics;    /* what GET /metrics serves (metrics.h); NULL: nothing counted */
    json_t *prices;         /* the parsed price table: {"currency", "rates"} */
    json_t *job_fields;     /* the job object's members in kowloon_job_json's order */
    gw_whnet *whnet;        /* where webhooks may go (webhook_net.h) */
    gw_webhooks *webhooks;  /* the delivery worker (webhooks.h) */
    gw_resolver *resolver;  /* webhook hosts' lookups, off the HTTP threads (resolver.h) */
    gw_events *events;      /* Server-Sent Events of job state changes (events.h) */
    gw_logfollow *follow;   /* followed task logs (logfollow.h) */
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
    int64_t jobs_deleted;       /* the tenant's deleted jobs so far (jobcache.h) */
} gw_caller;

#endif
