/* main.c — kowloon-gateway: `serve` (API, scheduler, reaper), `migrate`,
 * and `keys create|revoke`. Options come from one table; flags beat
 * environment variables, which beat defaults. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "adopt.h"
#include "api.h"
#include "blob_gc.h"
#include "svc_bstore.h"
#include "eta.h"
#include "stats.h"
#include "jobcache.h"
#include "events.h"
#include "keycache.h"
#include "lease.h"
#include "logfollow.h"
#include "gw_limits.h"
#include "resolver.h"
#include "metrics.h"
#include "nodecred.h"
#include "scheduler.h"
#include "usage.h"
#include "waits.h"
#include "webhook_net.h"
#include "webhooks.h"
#include "svc_client.h"
#include "svc_config.h"
#include "svc_log.h"
#include "svc_secret.h"
#include "svc_util.h"

static svc_opt opts[] = {
    {.flag = "listen", .env = "KOWLOON_LISTEN", .type = SVC_OPT_STRING,
     .at = SVC_OPT_STR(gw_config, listen), .def = "127.0.0.1:8080",
     .help = "address of the public listener: tenants, admins, health, metrics, the dashboard"},
    {.flag = "cluster-listen", .env = "KOWLOON_CLUSTER_LISTEN", .type = SVC_OPT_STRING,
     .at = SVC_OPT_STR(gw_config, cluster_listen),
     .def = "127.0.0.1:8081",
     .help = "address of the cluster listener, the only one nodes call (registration, "
             "heartbeats, leases, results, blobs, rendezvous); keep it on the cluster's network"},
    {.flag = "database-url", .env = "KOWLOON_DATABASE_URL", .type = SVC_OPT_STRING,
     .at = SVC_OPT_STR(gw_config, database_url),
     .def = "postgresql://kowloon@127.0.0.1:5432/kowloon",
     .help = "PostgreSQL connection (URI or key=value conninfo)"},
    {.flag = "redis-url", .env = "KOWLOON_REDIS_URL", .type = SVC_OPT_STRING,
     .at = SVC_OPT_STR(gw_config, redis_url),
     .def = "redis://127.0.0.1:6379/0",
     .help = "Redis server"},
    {.flag = "cluster-token", .env = "KOWLOON_CLUSTER_TOKEN", .type = SVC_OPT_STRING,
     .at = SVC_OPT_STR(gw_config, cluster_token),
     .help = "secret a node registers with (required for serve, here or in --cluster-token-file): "
             "at least 32 random characters; each node then gets a credential of its own"},
    {.flag = "cluster-token-file", .env = "KOWLOON_CLUSTER_TOKEN_FILE", .type = SVC_OPT_STRING,
     .at = SVC_OPT_STR(gw_config, cluster_token_file),
     .help = "file holding the cluster token (not readable by others), when --cluster-token is "
             "not given"},
    {.flag = "max-body-mb", .env = "KOWLOON_MAX_BODY_MB", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, max_body_mb), .def = "64",
     .min = 1, .max = 4096,
     .help = "largest request body, MiB"},
    {.flag = "max-json-body-mb", .env = "KOWLOON_MAX_JSON_BODY_MB", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, max_json_body_mb),
     .def = "4", .min = 1, .max = 4096,
     .help = "largest JSON body (and multipart job part), MiB; send large tensors as blobs"},
    {.flag = "body-timeout-s", .env = "KOWLOON_BODY_TIMEOUT_S", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, body_timeout_s), .def = "30",
     .min = 1, .max = 3600,
     .help = "a request body must come in windows of this long, each bringing "
             "--body-min-rate-kb KiB a second (or the body's end), however it trickles"},
    {.flag = "body-min-rate-kb", .env = "KOWLOON_BODY_MIN_RATE_KB", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, body_min_rate_kb),
     .def = "16", .min = 1, .max = 1048576,
     .help = "KiB a second a request body must bring in each --body-timeout-s window"},
    {.flag = "trusted-proxies", .env = "KOWLOON_TRUSTED_PROXIES", .type = SVC_OPT_STRING,
     .at = SVC_OPT_STR(gw_config, trusted_proxies),
     .help = "CIDR blocks of proxies (load balancer, Ingress) whose X-Forwarded-For names the "
             "client, for per-address limits and logs (e.g. 10.0.0.0/8)"},
    {.flag = "tls-cert", .env = "KOWLOON_TLS_CERT", .type = SVC_OPT_STRING,
     .at = SVC_OPT_STR(gw_config, tls_cert),
     .help = "PEM certificate (chain) to serve HTTPS with; with --tls-key; reread on SIGHUP"},
    {.flag = "tls-key", .env = "KOWLOON_TLS_KEY", .type = SVC_OPT_STRING,
     .at = SVC_OPT_STR(gw_config, tls_key),
     .help = "PEM private key of --tls-cert"},
    {.flag = "max-output-mb", .env = "KOWLOON_MAX_OUTPUT_MB", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, max_output_mb), .def = "256",
     .min = 1, .max = 65536,
     .help = "largest output of one job (all its tensors), MiB; a submit whose shapes exceed it "
             "gets 422"},
    {.flag = "task-images", .env = "KOWLOON_TASK_IMAGES", .type = SVC_OPT_STRING,
     .at = SVC_OPT_STR(gw_config, task_images), .def = "",
     .help = "comma-separated patterns (fnmatch; '*' stops at '/') of the images tasks may run, "
             "for tenants that have none of their own (POST /v1/tenants task_images); empty: no "
             "task runs until the operator names its images"},
    {.flag = "task-log-mb", .env = "KOWLOON_TASK_LOG_MB", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, task_log_mb), .def = "64",
     .min = 1, .max = 1024,
     .help = "log bytes kept per part of a task, MiB (the node drops the rest and says so in the "
             "log)"},
    {.flag = "conn-timeout-s", .env = "KOWLOON_CONN_TIMEOUT_S", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, conn_timeout_s), .def = "30",
     .min = 1, .max = 3600,
     .help = "an idle connection, or one whose request headers take longer, is closed"},
    {.flag = "max-conns-per-ip", .env = "KOWLOON_MAX_CONNS_PER_IP", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, max_conns_per_ip),
     .def = "64", .min = 0, .max = 100000,
     .help = "connections one client IP may hold; a request on one more gets 503 with Retry-After "
             "(health checks and nodes excepted) (0: no limit)"},
    {.flag = "max-connections", .env = "KOWLOON_MAX_CONNECTIONS", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, max_connections),
     .def = "1024", .min = 1, .max = 100000,
     .help = "connections in all; more are closed at once"},
    {.flag = "http-threads", .env = "KOWLOON_HTTP_THREADS", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, http_threads), .def = "0",
     .min = 0, .max = 256,
     .help = "threads serving every connection (epoll); 0 = two per core, at least 4"},
    {.flag = "max-header-kb", .env = "KOWLOON_MAX_HEADER_KB", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, max_header_kb), .def = "4",
     .min = 1, .max = 1024,
     .help = "largest request line + headers, KiB (431 above)"},
    {.flag = "node-timeout-s", .env = "KOWLOON_NODE_TIMEOUT_S", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, node_timeout_s), .def = "6",
     .min = 1, .max = 3600,
     .help = "a node silent this long is marked down and its jobs re-queued"},
    {.flag = "heartbeat-s", .env = "KOWLOON_HEARTBEAT_S", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, heartbeat_s), .def = "2",
     .min = 1, .max = 600,
     .help = "heartbeat interval told to nodes"},
    {.flag = "timeout-grace-s", .env = "KOWLOON_TIMEOUT_GRACE_S", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, timeout_grace_s), .def = "15",
     .min = 1, .max = 3600,
     .help = "a run with no report this long past its timeout_s is presumed stuck and its job "
             "fails with timeout (the node enforces timeout_s first)"},
    {.flag = "reconcile-interval-s", .env = "KOWLOON_RECONCILE_INTERVAL_S", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, reconcile_interval_s),
     .def = "3", .min = 1, .max = 3600,
     .help = "how often the ready queue is rebuilt from PostgreSQL"},
    {.flag = "analyze-min-rows", .env = "KOWLOON_ANALYZE_MIN_ROWS", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, analyze_min_rows), .def = "10000", .min = 0, .max = 1000000000,
     .help = "the scheduler's gateway runs ANALYZE jobs (at most every 10 s) once this many rows "
             "changed since its statistics and at least as many as they counted, so that plans "
             "follow a burst into a small table; 0: leave it to autovacuum"},
    {.flag = "fair-lump-wait-s", .env = "KOWLOON_FAIR_LUMP_WAIT_S", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, fair_lump_wait_s), .def = "30", .min = 0, .max = 86400,
     .help = "a job of more than half its tenant's share of the devices that would take the "
             "tenant past that share yields to tenants below theirs for this long at most, then "
             "goes (longer: shares kept closer, gangs waiting longer); 0: it never yields"},
    {.flag = "fair-repay-s", .env = "KOWLOON_FAIR_REPAY_S", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, fair_repay_s), .def = "0", .min = 0, .max = 86400,
     .help = "fair share on device-seconds: what a waiting tenant was short of its share (or "
             "past it) is repaid over about this many seconds; 0: devices held now only"},
    {.flag = "fair-reserve-pct", .env = "KOWLOON_FAIR_RESERVE_PCT", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, fair_reserve_pct), .def = "0", .min = 0, .max = 1000,
     .help = "a job that fits nowhere and reserves nodes does not count in its tenant's share "
             "while they drain (the tenant runs its smaller jobs meanwhile); a tenant reserves "
             "for at most this % of its share a pass (one job at least); 0: a reservation counts "
             "as if its job had started"},
    {.flag = "fair-preempt", .env = "KOWLOON_FAIR_PREEMPT", .type = SVC_OPT_BOOL,
     .at = SVC_OPT_BOOL(gw_config, fair_preempt), .def = "0",
     .help = "when a job of more than a quarter of its tenant's share starts and takes the tenant past "
             "that share, the tenant's youngest single-node runs are stopped and queued again "
             "(not counted against max_attempts) until it is back at its share"},
    {.flag = "db-pool", .env = "KOWLOON_DB_POOL", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, db_pool), .def = "8", .min = 1,
     .max = 256,
     .help = "PostgreSQL connections"},
    {.flag = "migrations", .env = "KOWLOON_MIGRATIONS", .type = SVC_OPT_STRING,
     .at = SVC_OPT_STR(gw_config, migrations),
     .help = "directory of NNN_name.sql migrations (default: <exe>/../sql)"},
    {.flag = "openapi", .env = "KOWLOON_OPENAPI", .type = SVC_OPT_STRING,
     .at = SVC_OPT_STR(gw_config, openapi),
     .help = "OpenAPI document to serve (default: <exe>/../openapi/openapi.yaml)"},
    {.flag = "ui-dir", .env = "KOWLOON_UI_DIR", .type = SVC_OPT_STRING,
     .at = SVC_OPT_STR(gw_config, ui_dir),
     .help = "the dashboard's files, served at /ui/ (default: <exe>/../ui)"},
    {.flag = "chartjs-dir", .env = "KOWLOON_CHARTJS_DIR", .type = SVC_OPT_STRING,
     .at = SVC_OPT_STR(gw_config, chartjs_dir),
     .def = "/usr/share/javascript/chart.js",
     .help = "Chart.js (Debian's libjs-chart.js), served at /ui/vendor/chart.js/; where it is "
             "missing the dashboard shows tables instead of charts"},
    {.flag = "tenant", .type = SVC_OPT_STRING,
     .at = SVC_OPT_STR(gw_config, key_tenant),
     .help = "keys create: tenant name"},
    {.flag = "admin", .type = SVC_OPT_BOOL,
     .at = SVC_OPT_BOOL(gw_config, key_admin), .def = "0",
     .help = "keys create: an admin key"},
    {.flag = "drain-s", .env = "KOWLOON_DRAIN_S", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, drain_s), .def = "2", .min = 0,
     .max = 600,
     .help = "on SIGTERM, seconds to keep answering (readyz 503, submits 503) before stopping"},
    {.flag = "retry-base-ms", .env = "KOWLOON_RETRY_BASE_MS", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, retry_base_ms), .def = "1000",
     .min = 0, .max = 3600000,
     .help = "first back-off before a retryable failure is re-run; doubles per attempt, with "
             "jitter"},
    {.flag = "retry-max-s", .env = "KOWLOON_RETRY_MAX_S", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, retry_max_s), .def = "60",
     .min = 0, .max = 86400,
     .help = "longest back-off"},
    {.flag = "rate-limit-rps", .env = "KOWLOON_RATE_LIMIT_RPS", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, rate_limit_rps), .def = "50",
     .min = 0, .max = 1000000,
     .help = "writes (submits, cancels, uploads, admin changes) per second per API key (token "
             "bucket refill); 0: writes are not rate-limited"},
    {.flag = "rate-limit-burst", .env = "KOWLOON_RATE_LIMIT_BURST", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, rate_limit_burst),
     .def = "100", .min = 0, .max = 1000000,
     .help = "write bucket size per API key (writes allowed at once)"},
    {.flag = "read-rate-limit-rps", .env = "KOWLOON_READ_RATE_LIMIT_RPS", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, read_rate_limit_rps),
     .def = "500", .min = 0, .max = 1000000,
     .help = "reads (every other request with an API key) per second per API key, a bucket apart "
             "from writes; 0: reads are not rate-limited"},
    {.flag = "read-rate-limit-burst", .env = "KOWLOON_READ_RATE_LIMIT_BURST", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, read_rate_limit_burst),
     .def = "1000", .min = 0, .max = 1000000,
     .help = "read bucket size per API key (reads allowed at once)"},
    {.flag = "key-cache-ms", .env = "KOWLOON_KEY_CACHE_MS", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, key_cache_ms), .def = "500",
     .min = 0, .max = 1000,
     .help = "how long an API key's lookup is reused; a key revoked on any gateway stops working "
             "on this one within this time (0: look up every request)"},
    {.flag = "stats-cache-ms", .env = "KOWLOON_STATS_CACHE_MS", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, stats_cache_ms), .def = "5000",
     .min = 0, .max = 60000,
     .help = "how long a GET /v1/stats/history answer is reused per tenant and window (0: "
             "queried every time)"},
    {.flag = "job-cache-mb", .env = "KOWLOON_JOB_CACHE_MB", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, job_cache_mb), .def = "64",
     .min = 0, .max = 65536,
     .help = "memory kept for ended jobs as GET /v1/jobs/{id} answers them (an ended job never "
             "changes, so a repeated read costs no PostgreSQL); 0: none"},
    {.flag = "auth-fail-burst", .env = "KOWLOON_AUTH_FAIL_BURST", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, auth_fail_burst), .def = "20",
     .min = 0, .max = 1000000,
     .help = "failed authentications one client address may make at once; more get 429 (0: no "
             "limit)"},
    {.flag = "auth-fail-rps", .env = "KOWLOON_AUTH_FAIL_RPS", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, auth_fail_rps), .def = "2",
     .min = 1, .max = 1000000,
     .help = "failed authentications per second a client address gets back"},
    {.flag = "blob-dir", .env = "KOWLOON_BLOB_DIR", .type = SVC_OPT_STRING,
     .at = SVC_OPT_STR(gw_config, blob_dir),
     .help = "directory of blob bytes, shared by every gateway (default: <exe>/../var/blobs)"},
    {.flag = "max-blob-mb", .env = "KOWLOON_MAX_BLOB_MB", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, max_blob_mb), .def = "4096",
     .min = 1, .max = 1048576,
     .help = "largest blob upload, MiB (413 above)"},
    {.flag = "blob-quota-mb", .env = "KOWLOON_BLOB_QUOTA_MB", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, blob_quota_mb), .def = "102400",
     .min = 0, .max = 1073741824,
     .help = "blob bytes one tenant may hold, MiB; an upload past it gets 413 quota_exceeded (0: "
             "none)"},
    {.flag = "blob-retention-s", .env = "KOWLOON_BLOB_RETENTION_S", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, blob_retention_s),
     .def = "86400", .min = 0, .max = 315360000,
     .help = "seconds a blob nobody references is kept before its bytes are removed"},
    {.flag = "blob-sweep-s", .env = "KOWLOON_BLOB_SWEEP_S", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, blob_sweep_s), .def = "60",
     .min = 1, .max = 86400,
     .help = "how often the retention pass runs (expired jobs, then unreferenced blobs)"},
    {.flag = "job-retention-days", .env = "KOWLOON_JOB_RETENTION_DAYS", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, job_retention_days),
     .def = "30", .min = 0, .max = 36500,
     .help = "days an ended job is kept (with its events, results and blob references) before "
             "the retention pass deletes it; its usage stays in GET /v1/usage (0: kept for ever)"},
    {.flag = "max-queued-per-tenant", .env = "KOWLOON_MAX_QUEUED_PER_TENANT", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, max_queued_per_tenant),
     .def = "10000", .min = 0, .max = 100000000,
     .help = "queued jobs a tenant may have; a submit over it gets 429 quota_queued (0: no quota)"},
    {.flag = "max-running-per-tenant", .env = "KOWLOON_MAX_RUNNING_PER_TENANT",
     .type = SVC_OPT_INT, .at = SVC_OPT_INT(gw_config, max_running_per_tenant), .def = "1000", .min = 0, .max = 100000000,
     .help = "running jobs a tenant may have; the scheduler leaves the rest queued (0: no quota)"},
    {.flag = "metrics-public", .env = "KOWLOON_METRICS_PUBLIC", .type = SVC_OPT_BOOL,
     .at = SVC_OPT_BOOL(gw_config, metrics_public), .def = "0",
     .help = "serve GET /metrics to anyone (default: the cluster token or an admin key only)"},
    {.flag = "metrics-refresh-s", .env = "KOWLOON_METRICS_REFRESH_S", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, metrics_refresh_s),
     .def = "5", .min = 1, .max = 3600,
     .help = "how old the job and node counts of /metrics may be before a scrape asks "
             "PostgreSQL again"},
    {.flag = "prices", .env = "KOWLOON_PRICES", .type = SVC_OPT_STRING,
     .at = SVC_OPT_STR(gw_config, prices),
     .help = "price table of usage cost: KEY=RATE,... with KEY cpu (per CPU-core-hour of CPU "
             "time), cuda (per GPU-hour) or cuda:<GPU model> (per GPU-hour of that model, its "
             "name as GET /v1/nodes shows it); no rate: cost 0"},
    {.flag = "currency", .env = "KOWLOON_CURRENCY", .type = SVC_OPT_STRING,
     .at = SVC_OPT_STR(gw_config, currency), .def = "USD",
     .help = "ISO 4217 code of the price table's rates"},
    {.flag = "webhook-allow-private", .env = "KOWLOON_WEBHOOK_ALLOW_PRIVATE", .type = SVC_OPT_BOOL,
     .at = SVC_OPT_BOOL(gw_config, webhook_allow_private),
     .def = "0",
     .help = "webhooks may reach loopback, link-local and private addresses (else refused at "
             "submit and at connect)"},
    {.flag = "webhook-allow-nets", .env = "KOWLOON_WEBHOOK_ALLOW_NETS", .type = SVC_OPT_STRING,
     .at = SVC_OPT_STR(gw_config, webhook_allow_nets),
     .help = "CIDR blocks webhooks may reach though they are internal, comma-separated "
             "(e.g. 10.20.0.0/16,fd00:1::/64)"},
    {.flag = "webhook-retry-base-ms", .env = "KOWLOON_WEBHOOK_RETRY_BASE_MS", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, webhook_retry_base_ms),
     .def = "5000", .min = 1, .max = 3600000,
     .help = "back-off after a webhook's first failed attempt; doubles per attempt up to an hour, "
             "with jitter"},
    {.flag = "webhook-max-age-s", .env = "KOWLOON_WEBHOOK_MAX_AGE_S", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, webhook_max_age_s),
     .def = "86400", .min = 1, .max = 2592000,
     .help = "a webhook delivery is retried this long after its event, then marked failed"},
    {.flag = "webhook-timeout-s", .env = "KOWLOON_WEBHOOK_TIMEOUT_S", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, webhook_timeout_s),
     .def = "10", .min = 1, .max = 300,
     .help = "longest webhook attempt, connecting included"},
    {.flag = "webhook-dns-servers", .env = "KOWLOON_WEBHOOK_DNS_SERVERS", .type = SVC_OPT_STRING,
     .at = SVC_OPT_STR(gw_config, webhook_dns_servers),
     .help = "name servers that resolve webhook hosts at submit, IP[:port] comma-separated "
             "(IPv6 as [IP]:port) (default: those of /etc/resolv.conf)"},
    {.flag = "webhook-dns-timeout-ms", .env = "KOWLOON_WEBHOOK_DNS_TIMEOUT_MS", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, webhook_dns_timeout_ms),
     .def = "2000", .min = 50, .max = 30000,
     .help = "a submit whose webhook host has not resolved this long after it arrived gets 422 "
             "(the lookup never holds an HTTP thread)"},
    {.flag = "webhook-max-inflight", .env = "KOWLOON_WEBHOOK_MAX_INFLIGHT", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, webhook_max_inflight),
     .def = "64", .min = 1, .max = 4096,
     .help = "webhook deliveries one gateway makes at once; a new one starts as soon as one ends"},
    {.flag = "webhook-tenant-inflight", .env = "KOWLOON_WEBHOOK_TENANT_INFLIGHT",
     .type = SVC_OPT_INT, .at = SVC_OPT_INT(gw_config, webhook_tenant_inflight), .def = "8", .min = 1, .max = 4096,
     .help = "of them, one tenant's at most: a tenant whose receivers hang fills only its own share"},
    {.flag = "webhook-retention-s", .env = "KOWLOON_WEBHOOK_RETENTION_S", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, webhook_retention_s),
     .def = "604800", .min = 60, .max = 315360000,
     .help = "delivered and failed webhook deliveries (with their attempts) are deleted this long "
             "after they ended"},
    {.flag = "sse-heartbeat-s", .env = "KOWLOON_SSE_HEARTBEAT_S", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, sse_heartbeat_s), .def = "15",
     .min = 1, .max = 3600,
     .help = "an event stream with nothing to say gets a comment line (: ping) this often"},
    {.flag = "events-poll-ms", .env = "KOWLOON_EVENTS_POLL_MS", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, events_poll_ms), .def = "500",
     .min = 10, .max = 60000,
     .help = "while Redis carries no wakes, event streams read PostgreSQL's event log this often "
             "(with Redis up, every fourth time as often, in case a wake was lost)"},
    {.flag = "max-streams-per-tenant", .env = "KOWLOON_MAX_STREAMS_PER_TENANT", .type = SVC_OPT_INT,
     .at = SVC_OPT_INT(gw_config, max_streams_per_tenant),
     .def = "64", .min = 0, .max = 100000,
     .help = "event streams one tenant may hold open on a gateway; more get 429 (0: no limit)"},
    {.flag = "log-level", .env = "KOWLOON_LOG_LEVEL", .type = SVC_OPT_STRING,
     .at = SVC_OPT_STR(gw_config, log_level), .def = "info",
     .help = "debug, info, warn or error"},
    {.flag = NULL},
};


/* Default path of a file shipped beside the binary: <exe>/../rel. */
static const char *beside_exe(const char *given, const char *rel, char *buf, size_t len)
{
    if (given)
        return given;
    char dir[512];
    if (svc_exe_dir(dir, sizeof(dir)) != 0)
        return rel;
    snprintf(buf, len, "%s/../%s", dir, rel);
    return buf;
}

/* --http-threads when given, else two per online core (handlers make short
 * blocking calls to PostgreSQL and Redis), at least 4. */
static int http_threads(int given)
{
    if (given > 0)
        return given;
    long n = 2 * sysconf(_SC_NPROCESSORS_ONLN);
    return n < 4 ? 4 : (int)n;
}

/* The one place where the parsed options become the gateway's config. The
 * strings point into argv, the environment, the table's defaults or the
 * static buffers here: they live as long as the process. */
static void config_load(gw_config *c)
{
    static char migrations[1024], openapi[1024], blob_dir[1024], ui_dir[1024];
    *c = (gw_config){0};
    /* an option bound to no field would be parsed and then ignored: a bug
     * every start shows at once */
    for (const svc_opt *o = opts; o->flag; o++)
        if (!o->at) {
            fprintf(stderr, "kowloon-gateway: option --%s is bound to no config field\n", o->flag);
            exit(70);
        }
    svc_config_bind(opts, c);
    c->migrations = beside_exe(c->migrations, "sql", migrations, sizeof(migrations));
    c->openapi = beside_exe(c->openapi, "openapi/openapi.yaml", openapi, sizeof(openapi));
    c->ui_dir = beside_exe(c->ui_dir, "ui", ui_dir, sizeof(ui_dir));
    c->http_threads = http_threads(c->http_threads);
    c->blob_dir = beside_exe(c->blob_dir, "var/blobs", blob_dir, sizeof(blob_dir));
}

static volatile sig_atomic_t stop_signal, reload_signal;

static void on_signal(int sig)
{
    if (sig == SIGHUP)
        reload_signal = 1;
    else
        stop_signal = sig;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: kowloon-gateway [serve|migrate] [options]\n"
                 "       kowloon-gateway keys create --tenant NAME [--admin]\n"
                 "       kowloon-gateway keys revoke ID|PREFIX\n"
                 "       kowloon-gateway keys revoke - <<<\"$KEY\"   (the whole key, on stdin)\n"
                 "\noptions:\n");
    svc_config_usage(opts, out);
}

static char *file_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0, got;
    do {
        if (n == cap) {
            char *p = realloc(buf, cap = cap ? cap * 2 : 65536);
            if (!p) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = p;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    fclose(f);
    *len = n;
    return buf;
}

/* keys revoke ID | PREFIX | -: by id, by prefix (only when one active key
 * has it), or the whole key read from stdin ("-"). A whole key is refused
 * as an argument: the process list shows arguments to every user of the
 * host. */
static int cmd_keys_revoke(gw_store *store, const char *what)
{
    char line[256], prefix[16] = "";
    int64_t id = 0;
    int rc;
    size_t len = strlen(what);
    if (strcmp(what, "-") == 0) {
        if (!fgets(line, sizeof line, stdin)) {
            fprintf(stderr, "keys revoke -: no key on stdin\n");
            return 2;
        }
        line[strcspn(line, "\r\n")] = '\0';
        rc = gw_store_key_revoke(store, line);
        snprintf(prefix, sizeof prefix, "%.11s", line);
        memset(line, 0, sizeof line);
    } else if (len >= 1 && len <= 18 && strspn(what, "0123456789") == len) {
        id = strtoll(what, NULL, 10);
        rc = gw_store_key_revoke_id(store, id, prefix);
    } else if (len > 11) {
        fprintf(stderr, "keys revoke: a whole key on the command line is visible to every user "
                        "of this host (ps); give its id or its 11-character prefix, or the key "
                        "on stdin: keys revoke - <<<\"$KEY\"\n");
        return 2;
    } else {
        rc = gw_store_key_revoke_prefix(store, what, &id);
        snprintf(prefix, sizeof prefix, "%s", what);
    }
    if (rc == -ENOENT) {
        fprintf(stderr, "keys revoke: no such active key\n");
        return 1;
    }
    if (rc == -EEXIST) {
        fprintf(stderr, "keys revoke: several active keys have prefix %s; none was revoked "
                        "(revoke by id: GET /v1/keys lists them)\n", what);
        return 1;
    }
    if (rc) {
        fprintf(stderr, "keys revoke: cannot write to PostgreSQL\n");
        return 1;
    }
    fprintf(stderr, "key %s revoked\n", prefix);
    return 0;
}

static int cmd_keys(const gw_config *cfg, gw_store *store, char **rest, int nrest)
{
    if (nrest >= 2 && strcmp(rest[1], "create") == 0) {
        const char *tenant = cfg->key_tenant;
        if (!tenant || !*tenant) {
            fprintf(stderr, "keys create needs --tenant NAME\n");
            return 2;
        }
        char hex[41], key[48];
        svc_random_hex(hex, 20);
        snprintf(key, sizeof(key), "kl_%s", hex);
        int rc = gw_store_key_create(store, tenant, cfg->key_admin, key);
        if (rc) {
            fprintf(stderr, "keys create: cannot write to PostgreSQL (%s)\n", strerror(-rc));
            return 1;
        }
        printf("%s\n", key);
        return 0;
    }
    if (nrest >= 3 && strcmp(rest[1], "revoke") == 0)
        return cmd_keys_revoke(store, rest[2]);
    usage(stderr);
    return 2;
}


/* The cluster token from --cluster-token, else --cluster-token-file, and
 * strong enough to guard the cluster; 0, or -1 after logging why not. */
static int cluster_token_load(gw_config *cfg)
{
    static char from_file[512];
    char why[256];
    if ((!cfg->cluster_token || !*cfg->cluster_token) && cfg->cluster_token_file &&
        *cfg->cluster_token_file) {
        if (svc_secret_read(cfg->cluster_token_file, from_file, sizeof from_file, why,
                            sizeof why) != 0) {
            svc_error("--cluster-token-file: %s", why);
            return -1;
        }
        cfg->cluster_token = from_file;
    }
    if (gw_cluster_token_check(cfg->cluster_token, why, sizeof why) != 0) {
        svc_error("serve refuses to start: %s. Give --cluster-token (KOWLOON_CLUSTER_TOKEN) or "
                  "--cluster-token-file (KOWLOON_CLUSTER_TOKEN_FILE); the nodes register with it",
                  why);
        return -1;
    }
    return 0;
}

/* What serve needs before its threads: the price table (recorded in
 * PostgreSQL), the job object's member order, the OpenAPI text, the blob store and the webhook resolver,
 * each kept in app. 0, or the exit status after logging why not. */
static int serve_prepare(gw_app *app)
{
    char err[256];
    char *prices;
    if (gw_prices_parse(app->cfg.prices, app->cfg.currency, &prices, err, sizeof(err)) != 0) {
        svc_error("--prices/--currency: %s", err);
        return 2;
    }
    int rc = gw_store_set_prices(app->store, prices);
    app->prices = json_loads(prices, 0, NULL);
    free(prices);
    if (rc || !app->prices)
        return 1;
    svc_info("usage priced by %s", app->cfg.prices && *app->cfg.prices ? app->cfg.prices
                                                                     : "no rates (cost 0)");
    /* sql/objects.sql decides the order; the 202 of a submit follows it */
    if (gw_store_job_fields(app->store, &app->job_fields) != 0) {
        svc_error("cannot read the job object's members from PostgreSQL (kowloon_job_json)");
        return 1;
    }
    if (!(app->openapi = file_slurp(app->cfg.openapi, &app->openapi_len)))
        svc_warn("cannot read %s: /openapi.yaml will answer 404", app->cfg.openapi);
    /* measured at 1,000 simulated nodes (README, Scale, "Stop 39") */
    if (app->cfg.fair_preempt && app->cfg.fair_reserve_pct == 0)
        svc_warn("--fair-preempt without --fair-reserve-pct: the devices preemption frees go to "
                 "any tenant whose jobs fit them, the preempting one's too (at 1,000 simulated "
                 "nodes it stopped 3-5 %% of the GPU-seconds' work and kept shares no closer)");
    if (!(app->blobs = svc_bstore_open(app->cfg.blob_dir, SVC_BSTORE_CREATE, err, sizeof(err)))) {
        svc_error("blob store: %s", err);
        return 1;
    }
    svc_info("blob store in %s (uploads up to %ld MiB, %ld MiB a tenant, unreferenced kept %ld s)",
             app->cfg.blob_dir, app->cfg.max_blob_mb, app->cfg.blob_quota_mb, app->cfg.blob_retention_s);
    if (app->cfg.job_retention_days > 0)
        svc_info("ended jobs kept %ld day%s", app->cfg.job_retention_days,
                 app->cfg.job_retention_days == 1 ? "" : "s");
    else
        svc_info("ended jobs kept for ever (--job-retention-days 0)");
    /* at most 1024 lookups at once (beyond that, submits with a webhook
     * host get 503 until some end: a lookup lasts the deadline at most),
     * GW_RESOLVE_PER_TENANT of them one tenant's (beyond that, 429) */
    if (!(app->resolver = gw_resolver_start(app->cfg.webhook_dns_servers,
                                            app->cfg.webhook_dns_timeout_ms, 1024,
                                            GW_RESOLVE_PER_TENANT, err, sizeof(err)))) {
        svc_error("--webhook-dns-servers: %s", err);
        return 1;
    }
    return 0;
}

/* Starts the scheduler, the lease, wait and event threads and the
 * committers. 0, or -1 after logging and stopping those that started. */
static int serve_threads_start(gw_app *app)
{
    app->sched = gw_sched_start(app);
    app->leases = gw_leases_start(app);
    app->waits = gw_waits_start(app);
    app->events = gw_events_start(app);
    if (!app->sched || !app->leases || !app->waits || !app->events || gw_api_jobs_start(app) != 0 ||
        gw_api_beats_start(app) != 0 || gw_api_results_start(app) != 0) {
        svc_error("cannot start the scheduler, the lease thread, the wait thread, the event "
                  "streams or the committer");
        gw_api_jobs_stop(app);
        gw_api_beats_stop(app);
        gw_api_results_stop(app);
        gw_events_free(app->events);
        gw_waits_free(app->waits);
        gw_leases_free(app->leases);
        gw_sched_stop(app->sched);
        return -1;
    }
    return 0;
}

/* Starts the public listener (*srv) and, once it and the output hashers
 * run, the cluster listener (*csrv); NULL for one that did not start, after
 * logging why. */
static void serve_listen(gw_app *app, svc_tls *tls, svc_server **srv, svc_server **csrv)
{
    char err[256];
    svc_server_opts so = {
        .listen = app->cfg.listen,
        .routes = gw_routes,
        .max_body = (size_t)app->cfg.max_body_mb << 20,
        .max_json_body = (size_t)app->cfg.max_json_body_mb << 20,
        .max_big_body = (size_t)app->cfg.max_blob_mb << 20,
        .body_timeout_s = (unsigned)app->cfg.body_timeout_s,
        .body_min_rate = (size_t)app->cfg.body_min_rate_kb << 10,
        .trusted_proxies = app->cfg.trusted_proxies,
        .tls = tls,
        .conn_timeout_s = (unsigned)app->cfg.conn_timeout_s,
        .per_ip_limit = (unsigned)app->cfg.max_conns_per_ip,
        .max_connections = (unsigned)app->cfg.max_connections,
        .max_header = (size_t)app->cfg.max_header_kb << 10,
        .authorize = gw_authorize,
        .threads = (unsigned)app->cfg.http_threads,
        .app = app,
        .metrics = gw_metrics_registry(app->metrics),
    };
    *srv = svc_server_start(&so, err, sizeof(err));
    if (!*srv)
        svc_error("cannot serve on %s: %s", app->cfg.listen, err);
    /* Nodes have a listener of their own, with its own routes and
     * authorization: the cluster token and nodes' credentials are never
     * taken on the public one. */
    svc_server_opts co = so;
    co.listen = app->cfg.cluster_listen;
    co.routes = gw_cluster_routes;
    co.authorize = gw_authorize_cluster;
    *csrv = *srv && app->adopter ? svc_server_start(&co, err, sizeof(err)) : NULL;
    if (!app->adopter)
        svc_error("cannot start the threads that hash nodes' outputs");
    if (*srv && app->adopter && !*csrv)
        svc_error("cannot serve the cluster listener on %s: %s", app->cfg.cluster_listen, err);
}

/* Stops and frees what cmd_serve started when the cluster listener did
 * not start (srv may be NULL). */
static void serve_unwind(gw_app *app, gw_blob_gc *gc, svc_server *srv, svc_tls *tls)
{
    gw_logfollow_stop(app->follow);
    svc_server_stop(srv);
    gw_logfollow_free(app->follow);
    gw_adopter_stop(app->adopter);
    gw_webhooks_stop(app->webhooks);
    gw_blob_gc_stop(gc);
    gw_api_jobs_stop(app);
    gw_api_beats_stop(app);
    gw_api_results_stop(app);
    gw_events_free(app->events);
    gw_waits_free(app->waits);
    gw_leases_free(app->leases);
    gw_sched_stop(app->sched);
    svc_tls_free(tls);
    gw_resolver_free(app->resolver);
}

/* Serves until SIGINT or SIGTERM (SIGHUP rereads the certificate), then
 * drains for --drain-s (readyz and submits answer 503; SIGINT skips it). */
static void serve_until_signal(gw_app *app, svc_tls *tls)
{
    char err[256];
    while (!stop_signal) {
        pause();
        if (reload_signal) {
            /* SIGHUP: new handshakes get the files' certificate; open
             * connections keep theirs */
            reload_signal = 0;
            if (tls && svc_tls_reload(tls, err, sizeof(err)) != 0)
                svc_error("SIGHUP: keeping the certificate in use: %s", err);
            else if (tls)
                svc_info("SIGHUP: certificate reread from %s", app->cfg.tls_cert);
        }
    }
    svc_info("signal %d: draining for %ld s (readyz and submits answer 503), then finishing requests in flight",
             (int)stop_signal, app->cfg.drain_s);
    app->draining = 1;
    for (int64_t until = svc_now_mono_ms() + (int64_t)app->cfg.drain_s * 1000;
         svc_now_mono_ms() < until && stop_signal != SIGINT;)
        svc_sleep_ms(50);
}

/* Stops and frees, in order, all that cmd_serve started once it served. */
static void serve_stop(gw_app *app, gw_blob_gc *gc, svc_server *srv, svc_server *csrv,
                       svc_tls *tls)
{
    /* Nodes' polls are answered first (they ask again elsewhere, or later),
     * then requests in flight finish. */
    gw_leases_stop(app->leases);
    gw_waits_stop(app->waits);
    gw_events_stop(app->events); /* streams end cleanly; clients resume elsewhere */
    gw_logfollow_stop(app->follow);
    svc_server_stop(csrv);
    gw_resolver_stop(app->resolver); /* submits waiting on a lookup get 503 */
    svc_server_stop(srv);
    gw_adopter_stop(app->adopter);
    gw_api_jobs_stop(app);
    gw_api_beats_stop(app);
    gw_api_results_stop(app);
    gw_events_free(app->events);
    gw_logfollow_free(app->follow);
    gw_leases_free(app->leases);
    gw_waits_free(app->waits);
    gw_webhooks_stop(app->webhooks);
    gw_blob_gc_stop(gc);
    gw_sched_stop(app->sched);
    svc_tls_free(tls);
    gw_resolver_free(app->resolver);
}

static int cmd_serve(gw_app *app)
{
    char err[256];
    int rc = serve_prepare(app);
    if (rc)
        return rc;

    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    svc_tls *tls = NULL;
    if (((app->cfg.tls_cert && *app->cfg.tls_cert) || (app->cfg.tls_key && *app->cfg.tls_key)) &&
        !(tls = svc_tls_new(app->cfg.tls_cert, app->cfg.tls_key, err, sizeof(err)))) {
        svc_error("--tls-cert/--tls-key: %s", err);
        return 2;
    }

    if (serve_threads_start(app) != 0) {
        svc_tls_free(tls);
        gw_resolver_free(app->resolver);
        return 1;
    }
    gw_blob_gc *gc = gw_blob_gc_start(app);
    app->follow = gw_logfollow_start(app);
    if (!app->follow)
        svc_error("cannot start the thread of followed task logs: ?follow=1 answers 503");
    app->webhooks = gw_webhooks_start(app);
    app->adopter = gw_adopter_start(app);
    svc_server *srv, *csrv;
    serve_listen(app, tls, &srv, &csrv);
    if (!csrv) {
        serve_unwind(app, gc, srv, tls);
        return 1;
    }
    svc_info("kowloon-gateway serving tenants on %s and nodes on %s, %s (max body %ld MiB, "
             "JSON %ld MiB)", app->cfg.listen, app->cfg.cluster_listen, tls ? "HTTPS" : "HTTP",
             app->cfg.max_body_mb, app->cfg.max_json_body_mb);
    gw_sched_serving(app->sched);
    serve_until_signal(app, tls);
    serve_stop(app, gc, srv, csrv, tls);
    svc_info("kowloon-gateway stopped");
    return 0;
}

int main(int argc, char **argv)
{
    char *rest[8];
    int nrest = 0;
    char err[256];
    int rc = svc_config_parse(opts, argc, argv, 1, rest, 8, &nrest, err, sizeof(err));
    if (rc == 1) {
        usage(stdout);
        return 0;
    }
    if (rc != 0) {
        fprintf(stderr, "kowloon-gateway: %s\n", err);
        usage(stderr);
        return 2;
    }
    const char *cmd = nrest > 0 ? rest[0] : "serve";
    gw_app app = {0};
    config_load(&app.cfg);
    int level = svc_log_level_parse(app.cfg.log_level);
    svc_log_init("gateway", level < 0 ? SVC_LOG_INFO : level);
    svc_client_global_init();
    /* before anything is opened: a weak token stops serve at once */
    if (strcmp(cmd, "serve") == 0 && cluster_token_load(&app.cfg) != 0)
        return 2;

    app.store = gw_store_open(app.cfg.database_url, app.cfg.db_pool);
    if (!app.store)
        return 1;
    if (strcmp(cmd, "keys") == 0) {
        rc = cmd_keys(&app.cfg, app.store, rest, nrest);
        gw_store_close(app.store);
        return rc;
    }
    /* PostgreSQL may still be starting (compose, systemd): wait a little. */
    for (int i = 0; (rc = gw_store_migrate(app.store, app.cfg.migrations, err, sizeof(err))) == -EIO &&
                    i < 30 && strstr(err, "connect"); i++)
        svc_sleep_ms(1000);
    if (rc) {
        svc_error("migrations failed: %s", err);
        gw_store_close(app.store);
        return 1;
    }
    if (strcmp(cmd, "migrate") == 0) {
        gw_store_close(app.store);
        return 0;
    }
    if (strcmp(cmd, "serve") != 0) {
        usage(stderr);
        gw_store_close(app.store);
        return 2;
    }
    app.queue = gw_queue_open(app.cfg.redis_url, app.cfg.db_pool + 4);
    app.limits = app.queue ? gw_limits_open(&app.cfg) : NULL;
    app.authfail = gw_authfail_new(app.cfg.auth_fail_burst, app.cfg.auth_fail_rps);
    /* 4096 keys: a few hundred KB, more keys than a gateway sees in a TTL */
    app.keys = gw_keycache_new(4096, app.cfg.key_cache_ms);
    /* node credentials: as many ways as nodes a gateway serves, and more */
    app.nodecreds = gw_nodecreds_new(4096, app.cfg.key_cache_ms);
    app.jobs = gw_jobcache_new((size_t)app.cfg.job_cache_mb << 20);
    app.eta = gw_eta_new(5000);
    /* 64 (tenant, window) answers of 5 s: a dashboard polls every 10 s */
    app.stats = gw_stats_new(64, app.cfg.stats_cache_ms);
    app.metrics = app.limits ? gw_metrics_new(&app) : NULL;
    app.whnet = gw_whnet_new(app.cfg.webhook_allow_private, app.cfg.webhook_allow_nets, err,
                             sizeof(err));
    if (!app.whnet)
        svc_error("%s", err);
    rc = app.limits && app.authfail && app.keys && app.nodecreds && app.jobs && app.eta && app.stats &&
                 app.metrics && app.whnet && gw_nodecreds_refresh_serve(&app) == 0
             ? cmd_serve(&app)
             : 1;
    gw_whnet_free(app.whnet);
    /* its refresh thread asks the store and counts in the metrics */
    gw_nodecreds_free(app.nodecreds);
    gw_metrics_free(app.metrics);
    gw_limits_close(app.limits);
    gw_authfail_free(app.authfail);
    gw_keycache_free(app.keys);
    gw_jobcache_free(app.jobs);
    gw_eta_free(app.eta);
    gw_stats_free(app.stats);
    gw_queue_close(app.queue);
    gw_store_close(app.store);
    svc_bstore_close(app.blobs);
    free(app.openapi);
    json_decref(app.prices);
    json_decref(app.job_fields);
    return rc;
}
