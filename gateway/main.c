/* main.c — kowloon-gateway: `serve` (API, scheduler, reaper), `migrate`,
 * and `keys create|revoke`. Options come from one table; flags beat
 * environment variables, which beat defaults. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "blob_gc.h"
#include "blobstore.h"
#include "limits.h"
#include "scheduler.h"
#include "svc_client.h"
#include "svc_config.h"
#include "svc_log.h"
#include "svc_util.h"

static svc_opt opts[] = {
    {"listen", "KOWLOON_LISTEN", SVC_OPT_STRING, "127.0.0.1:8080", 0, 0, "address to serve the API on", NULL, 0},
    {"database-url", "KOWLOON_DATABASE_URL", SVC_OPT_STRING, "postgresql://kowloon@127.0.0.1:5432/kowloon", 0, 0,
     "PostgreSQL connection (URI or key=value conninfo)", NULL, 0},
    {"redis-url", "KOWLOON_REDIS_URL", SVC_OPT_STRING, "redis://127.0.0.1:6379/0", 0, 0, "Redis server", NULL, 0},
    {"cluster-token", "KOWLOON_CLUSTER_TOKEN", SVC_OPT_STRING, NULL, 0, 0,
     "shared secret of gateway and compute nodes (required for serve)", NULL, 0},
    {"max-body-mb", "KOWLOON_MAX_BODY_MB", SVC_OPT_INT, "64", 1, 4096, "largest request body, MiB", NULL, 0},
    {"max-output-mb", "KOWLOON_MAX_OUTPUT_MB", SVC_OPT_INT, "256", 1, 65536,
     "largest output of one job (all its tensors), MiB; a submit whose shapes exceed it gets 422", NULL, 0},
    {"conn-timeout-s", "KOWLOON_CONN_TIMEOUT_S", SVC_OPT_INT, "30", 1, 3600,
     "an idle connection, or one whose request headers take longer, is closed", NULL, 0},
    {"max-conns-per-ip", "KOWLOON_MAX_CONNS_PER_IP", SVC_OPT_INT, "64", 0, 100000,
     "connections one client IP may hold; a request on one more gets 503 with Retry-After "
     "(health checks and nodes excepted) (0: no limit)", NULL, 0},
    {"max-connections", "KOWLOON_MAX_CONNECTIONS", SVC_OPT_INT, "1024", 1, 100000,
     "connections in all; more are closed at once", NULL, 0},
    {"http-threads", "KOWLOON_HTTP_THREADS", SVC_OPT_INT, "0", 0, 256,
     "threads serving every connection (epoll); 0 = two per core, at least 4", NULL, 0},
    {"max-header-kb", "KOWLOON_MAX_HEADER_KB", SVC_OPT_INT, "16", 1, 1024,
     "largest request line + headers, KiB (431 above)", NULL, 0},
    {"node-timeout-s", "KOWLOON_NODE_TIMEOUT_S", SVC_OPT_INT, "6", 1, 3600,
     "a node silent this long is marked down and its jobs re-queued", NULL, 0},
    {"heartbeat-s", "KOWLOON_HEARTBEAT_S", SVC_OPT_INT, "2", 1, 600, "heartbeat interval told to nodes", NULL, 0},
    {"reconcile-interval-s", "KOWLOON_RECONCILE_INTERVAL_S", SVC_OPT_INT, "3", 1, 3600,
     "how often the ready queue is rebuilt from PostgreSQL", NULL, 0},
    {"db-pool", "KOWLOON_DB_POOL", SVC_OPT_INT, "8", 1, 256, "PostgreSQL connections", NULL, 0},
    {"migrations", "KOWLOON_MIGRATIONS", SVC_OPT_STRING, NULL, 0, 0,
     "directory of NNN_name.sql migrations (default: <exe>/../sql)", NULL, 0},
    {"openapi", "KOWLOON_OPENAPI", SVC_OPT_STRING, NULL, 0, 0,
     "OpenAPI document to serve (default: <exe>/../openapi/openapi.yaml)", NULL, 0},
    {"tenant", NULL, SVC_OPT_STRING, NULL, 0, 0, "keys create: tenant name", NULL, 0},
    {"admin", NULL, SVC_OPT_BOOL, "0", 0, 1, "keys create: an admin key", NULL, 0},
    {"drain-s", "KOWLOON_DRAIN_S", SVC_OPT_INT, "2", 0, 600,
     "on SIGTERM, seconds to keep answering (readyz 503, submits 503) before stopping", NULL, 0},
    {"retry-base-ms", "KOWLOON_RETRY_BASE_MS", SVC_OPT_INT, "1000", 0, 3600000,
     "first back-off before a retryable failure is re-run; doubles per attempt, with jitter", NULL, 0},
    {"retry-max-s", "KOWLOON_RETRY_MAX_S", SVC_OPT_INT, "60", 0, 86400, "longest back-off", NULL, 0},
    {"rate-limit-rps", "KOWLOON_RATE_LIMIT_RPS", SVC_OPT_INT, "50", 0, 1000000,
     "requests per second per API key (token bucket refill); 0 turns rate limits off", NULL, 0},
    {"rate-limit-burst", "KOWLOON_RATE_LIMIT_BURST", SVC_OPT_INT, "100", 0, 1000000,
     "token bucket size per API key (requests allowed at once)", NULL, 0},
    {"auth-fail-burst", "KOWLOON_AUTH_FAIL_BURST", SVC_OPT_INT, "20", 0, 1000000,
     "failed authentications one client address may make at once; more get 429 (0: no limit)",
     NULL, 0},
    {"auth-fail-rps", "KOWLOON_AUTH_FAIL_RPS", SVC_OPT_INT, "2", 1, 1000000,
     "failed authentications per second a client address gets back", NULL, 0},
    {"blob-dir", "KOWLOON_BLOB_DIR", SVC_OPT_STRING, NULL, 0, 0,
     "directory of blob bytes, shared by every gateway (default: <exe>/../var/blobs)", NULL, 0},
    {"max-blob-mb", "KOWLOON_MAX_BLOB_MB", SVC_OPT_INT, "4096", 1, 1048576,
     "largest blob upload, MiB (413 above)", NULL, 0},
    {"blob-quota-mb", "KOWLOON_BLOB_QUOTA_MB", SVC_OPT_INT, "102400", 0, 1073741824,
     "blob bytes one tenant may hold, MiB; an upload past it gets 413 quota_exceeded (0: none)", NULL, 0},
    {"blob-retention-s", "KOWLOON_BLOB_RETENTION_S", SVC_OPT_INT, "86400", 0, 315360000,
     "seconds a blob nobody references is kept before its bytes are removed", NULL, 0},
    {"blob-sweep-s", "KOWLOON_BLOB_SWEEP_S", SVC_OPT_INT, "60", 1, 86400,
     "how often the retention sweep runs", NULL, 0},
    {"max-queued-per-tenant", "KOWLOON_MAX_QUEUED_PER_TENANT", SVC_OPT_INT, "10000", 0, 100000000,
     "queued jobs a tenant may have; a submit over it gets 429 quota_queued (0: no quota)", NULL, 0},
    {"max-running-per-tenant", "KOWLOON_MAX_RUNNING_PER_TENANT", SVC_OPT_INT, "1000", 0, 100000000,
     "running jobs a tenant may have; the scheduler leaves the rest queued (0: no quota)", NULL, 0},
    {"log-level", "KOWLOON_LOG_LEVEL", SVC_OPT_STRING, "info", 0, 0, "debug, info, warn or error", NULL, 0},
    {NULL, NULL, 0, NULL, 0, 0, NULL, NULL, 0},
};

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    stop_signal = sig;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: kowloon-gateway [serve|migrate] [options]\n"
                 "       kowloon-gateway keys create --tenant NAME [--admin]\n"
                 "       kowloon-gateway keys revoke KEY\n\noptions:\n");
    svc_config_usage(opts, out);
}

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

static int cmd_keys(gw_store *store, char **rest, int nrest)
{
    if (nrest >= 2 && strcmp(rest[1], "create") == 0) {
        const char *tenant = svc_config_get(opts, "tenant")->str;
        if (!tenant || !*tenant) {
            fprintf(stderr, "keys create needs --tenant NAME\n");
            return 2;
        }
        char hex[41], key[48];
        svc_random_hex(hex, 20);
        snprintf(key, sizeof(key), "kl_%s", hex);
        int rc = gw_store_key_create(store, tenant, (int)svc_config_get(opts, "admin")->num, key);
        if (rc) {
            fprintf(stderr, "keys create: cannot write to PostgreSQL (%s)\n", strerror(-rc));
            return 1;
        }
        printf("%s\n", key);
        return 0;
    }
    if (nrest >= 3 && strcmp(rest[1], "revoke") == 0) {
        int rc = gw_store_key_revoke(store, rest[2]);
        if (rc == -ENOENT) {
            fprintf(stderr, "keys revoke: no such active key\n");
            return 1;
        }
        if (rc) {
            fprintf(stderr, "keys revoke: cannot write to PostgreSQL\n");
            return 1;
        }
        fprintf(stderr, "key revoked\n");
        return 0;
    }
    usage(stderr);
    return 2;
}

/* --http-threads, or two per online core (handlers make short blocking
 * calls to PostgreSQL and Redis), at least 4. */
static unsigned http_threads(void)
{
    long n = svc_config_get(opts, "http-threads")->num;
    if (n > 0)
        return (unsigned)n;
    n = 2 * sysconf(_SC_NPROCESSORS_ONLN);
    return n < 4 ? 4u : (unsigned)n;
}

static int cmd_serve(gw_app *app)
{
    char buf[1024], err[256];
    if (!app->cfg.cluster_token || strlen(app->cfg.cluster_token) < 16) {
        svc_error("serve needs --cluster-token (or KOWLOON_CLUSTER_TOKEN) of at least 16 characters");
        return 2;
    }
    const char *spec = beside_exe(svc_config_get(opts, "openapi")->str, "openapi/openapi.yaml", buf, sizeof(buf));
    if (!(app->openapi = file_slurp(spec, &app->openapi_len)))
        svc_warn("cannot read %s: /openapi.yaml will answer 404", spec);
    const char *blob_dir = beside_exe(svc_config_get(opts, "blob-dir")->str, "var/blobs", buf, sizeof(buf));
    if (!(app->blobs = gw_bstore_open(blob_dir, err, sizeof(err)))) {
        svc_error("blob store: %s", err);
        return 1;
    }
    svc_info("blob store in %s (uploads up to %d MiB, %d MiB a tenant, unreferenced kept %d s)",
             blob_dir, app->cfg.max_blob_mb, app->cfg.blob_quota_mb, app->cfg.blob_retention_s);
    gw_routes_set_blob_limit((size_t)app->cfg.max_blob_mb << 20);

    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    app->sched = gw_sched_start(app);
    if (gw_api_jobs_start(app) != 0) {
        svc_error("cannot start the committer of submits");
        gw_sched_stop(app->sched, 0);
        return 1;
    }
    gw_blob_gc *gc = gw_blob_gc_start(app);
    svc_server_opts so = {
        .listen = app->cfg.listen,
        .routes = gw_routes,
        .max_body = (size_t)app->cfg.max_body_mb << 20,
        .conn_timeout_s = (unsigned)svc_config_get(opts, "conn-timeout-s")->num,
        .per_ip_limit = (unsigned)svc_config_get(opts, "max-conns-per-ip")->num,
        .max_connections = (unsigned)svc_config_get(opts, "max-connections")->num,
        .max_header = (size_t)svc_config_get(opts, "max-header-kb")->num << 10,
        .authorize = gw_authorize,
        .threads = http_threads(),
        .app = app,
    };
    svc_server *srv = svc_server_start(&so, err, sizeof(err));
    if (!srv) {
        svc_error("cannot serve on %s: %s", app->cfg.listen, err);
        gw_blob_gc_stop(gc);
        gw_api_jobs_stop(app);
        gw_sched_stop(app->sched, 0);
        return 1;
    }
    svc_info("kowloon-gateway serving on %s (max body %d MiB)", app->cfg.listen, app->cfg.max_body_mb);
    while (!stop_signal)
        pause();
    svc_info("signal %d: draining for %d s (readyz and submits answer 503), then finishing requests in flight",
             (int)stop_signal, app->cfg.drain_s);
    app->draining = 1;
    for (int64_t until = svc_now_mono_ms() + (int64_t)app->cfg.drain_s * 1000;
         svc_now_mono_ms() < until && stop_signal != SIGINT;)
        svc_sleep_ms(50);
    svc_server_stop(srv);
    gw_api_jobs_stop(app);
    gw_blob_gc_stop(gc);
    app->trackers_left = gw_sched_stop(app->sched, 2000);
    if (app->trackers_left > 0)
        svc_info("kowloon-gateway stopped (%d run tracker(s) left to the next scheduler)",
                 app->trackers_left);
    else
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
    int level = svc_log_level_parse(svc_config_get(opts, "log-level")->str);
    svc_log_init("gateway", level < 0 ? SVC_LOG_INFO : level);
    svc_client_global_init();

    gw_app app = {0};
    app.cfg.listen = svc_config_get(opts, "listen")->str;
    app.cfg.database_url = svc_config_get(opts, "database-url")->str;
    app.cfg.redis_url = svc_config_get(opts, "redis-url")->str;
    app.cfg.cluster_token = svc_config_get(opts, "cluster-token")->str;
    app.cfg.max_body_mb = (int)svc_config_get(opts, "max-body-mb")->num;
    app.cfg.max_output_mb = (int)svc_config_get(opts, "max-output-mb")->num;
    app.cfg.node_timeout_s = (int)svc_config_get(opts, "node-timeout-s")->num;
    app.cfg.heartbeat_s = (int)svc_config_get(opts, "heartbeat-s")->num;
    app.cfg.reconcile_interval_s = (int)svc_config_get(opts, "reconcile-interval-s")->num;
    app.cfg.db_pool = (int)svc_config_get(opts, "db-pool")->num;
    app.cfg.drain_s = (int)svc_config_get(opts, "drain-s")->num;
    app.cfg.retry_base_ms = (int)svc_config_get(opts, "retry-base-ms")->num;
    app.cfg.retry_max_s = (int)svc_config_get(opts, "retry-max-s")->num;
    app.cfg.rate_limit_rps = (int)svc_config_get(opts, "rate-limit-rps")->num;
    app.cfg.rate_limit_burst = (int)svc_config_get(opts, "rate-limit-burst")->num;
    app.cfg.max_queued_per_tenant = (int)svc_config_get(opts, "max-queued-per-tenant")->num;
    app.cfg.max_running_per_tenant = (int)svc_config_get(opts, "max-running-per-tenant")->num;
    app.cfg.max_blob_mb = (int)svc_config_get(opts, "max-blob-mb")->num;
    app.cfg.blob_quota_mb = (int)svc_config_get(opts, "blob-quota-mb")->num;
    app.cfg.blob_retention_s = (int)svc_config_get(opts, "blob-retention-s")->num;
    app.cfg.blob_sweep_s = (int)svc_config_get(opts, "blob-sweep-s")->num;

    app.store = gw_store_open(app.cfg.database_url, app.cfg.db_pool);
    if (!app.store)
        return 1;
    if (strcmp(cmd, "keys") == 0) {
        rc = cmd_keys(app.store, rest, nrest);
        gw_store_close(app.store);
        return rc;
    }
    char buf[1024];
    const char *dir = beside_exe(svc_config_get(opts, "migrations")->str, "sql", buf, sizeof(buf));
    /* PostgreSQL may still be starting (compose, systemd): wait a little. */
    for (int i = 0; (rc = gw_store_migrate(app.store, dir, err, sizeof(err))) == -EIO && i < 30 &&
                    strstr(err, "connect"); i++)
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
    app.authfail = gw_authfail_new((int)svc_config_get(opts, "auth-fail-burst")->num,
                                   (int)svc_config_get(opts, "auth-fail-rps")->num);
    rc = app.limits && app.authfail ? cmd_serve(&app) : 1;
    if (app.trackers_left > 0)
        return rc; /* their runs go on; freeing what those threads use would race them */
    gw_limits_close(app.limits);
    gw_authfail_free(app.authfail);
    gw_queue_close(app.queue);
    gw_store_close(app.store);
    gw_bstore_close(app.blobs);
    free(app.openapi);
    return rc;
}
