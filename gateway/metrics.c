/* metrics.c — the gateway's metrics (metrics.h). The job path's counters
 * are lock-free series of the registry; the cluster's state comes from one
 * PostgreSQL query on the partial index of active jobs and one on the
 * nodes, asked by whichever scrape first finds the last answer older than
 * the refresh interval (the others use that answer meanwhile), so that
 * many scrapers, or several Prometheus servers, cost PostgreSQL one query
 * per interval and none when nobody scrapes. */
#include "metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl.h"
#include "gw_limits.h"
#include "redis.h"
#include "svc_log.h"
#include "svc_util.h"

#define PRIORITIES 10  /* 0-9, as request.c allows */

/* Run times and queue waits, seconds: from 5 ms to an hour. */
static const double job_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                    2.5,   5,    10,    30,   60,  300,  900, 3600};

struct gw_metrics {
    gw_app *app;
    svc_metrics *reg;
    svc_metric *submits, *results, *run_s, *wait_s, *lease, *node_auth, *preempted;
    /* The cluster's state as last counted; cache_mu guards it. refresh_mu
     * is held by the scrape that asks PostgreSQL again. */
    pthread_mutex_t cache_mu, refresh_mu;
    gw_active_count *active;
    int nactive;
    json_t *nodes;
    int64_t counted_ms;     /* monotonic; 0: never */
};

/* The kernel label: the name when the catalog has it, so that nothing a
 * caller sends can add series. */
static const char *kernel_label(const char *kernel)
{
    const kl_kernel *k = kernel != NULL ? kl_kernel_find(kernel) : NULL;
    return k != NULL ? k->name : "other";
}

void gw_metrics_submitted(gw_metrics *m, const char *kernel)
{
    if (m != NULL)
        svc_counter_add(svc_metric_with(m->submits, kernel_label(kernel)), 1);
}

void gw_metrics_reported(gw_metrics *m, const char *kernel, const char *state, double run_s)
{
    static const char *const states[] = {"succeeded", "failed", "cancelled", "refused", NULL};
    if (m == NULL)
        return;
    const char *st = "other";
    for (int i = 0; states[i] != NULL; i++)
        if (state != NULL && strcmp(state, states[i]) == 0)
            st = states[i];
    const char *k = kernel_label(kernel);
    svc_counter_add(svc_metric_with(m->results, k, st), 1);
    if (run_s >= 0)
        svc_histogram_observe(svc_metric_with(m->run_s, k), run_s);
}

void gw_metrics_started(gw_metrics *m, const char *kernel, double wait_s)
{
    if (m != NULL && wait_s >= 0)
        svc_histogram_observe(svc_metric_with(m->wait_s, kernel_label(kernel)), wait_s);
}

void gw_metrics_lease(gw_metrics *m, const char *how, int n)
{
    if (m != NULL && n > 0)
        svc_counter_add(svc_metric_with(m->lease, how), (uint64_t)n);
}

void gw_metrics_node_auth(gw_metrics *m, const char *how, int n)
{
    if (m != NULL && n > 0)
        svc_counter_add(svc_metric_with(m->node_auth, how), (uint64_t)n);
}

void gw_metrics_preempted(gw_metrics *m, int n)
{
    if (m != NULL && n > 0)
        svc_counter_add(svc_metric_series(m->preempted, NULL), (uint64_t)n);
}

/* ---- the cluster's state ---------------------------------------------- */

/* Asks PostgreSQL again when the last answer is older than the refresh
 * interval and no other scrape is asking; on failure the old answer stays
 * (its age says so). */
static void cluster_refresh(gw_metrics *m)
{
    int64_t now = svc_now_mono_ms();
    pthread_mutex_lock(&m->cache_mu);
    int due = m->counted_ms == 0 ||
              now - m->counted_ms >= (int64_t)m->app->cfg.metrics_refresh_s * 1000;
    pthread_mutex_unlock(&m->cache_mu);
    if (!due || pthread_mutex_trylock(&m->refresh_mu) != 0)
        return;
    gw_active_count *active = NULL;
    int nactive = 0;
    json_t *nodes = NULL;
    if (gw_store_jobs_active(m->app->store, &active, &nactive) == 0 &&
        gw_store_nodes_json(m->app->store, &nodes) == 0) {
        pthread_mutex_lock(&m->cache_mu);
        free(m->active);
        json_decref(m->nodes);
        m->active = active;
        m->nactive = nactive;
        m->nodes = nodes;
        m->counted_ms = svc_now_mono_ms();
        pthread_mutex_unlock(&m->cache_mu);
    } else {
        free(active);
        json_decref(nodes);
    }
    pthread_mutex_unlock(&m->refresh_mu);
}

static void write_jobs(svc_mwriter *w, const gw_metrics *m)
{
    static const char *const states[] = {"queued", "running"};
    const char *names[] = {"state", "kernel", NULL};
    int nk;
    const kl_kernel *const *cat = kl_catalog(&nk);
    svc_mwriter_family(w, "kowloon_jobs", "jobs queued or running, by kernel (from PostgreSQL)",
                       SVC_METRIC_GAUGE);
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < nk; k++) {
            int64_t n = 0;
            for (int i = 0; i < m->nactive; i++)
                if (strcmp(m->active[i].state, states[s]) == 0 &&
                    strcmp(m->active[i].kernel, cat[k]->name) == 0)
                    n += m->active[i].count;
            svc_mwriter_sample(w, "kowloon_jobs", names, (const char *[]){states[s], cat[k]->name},
                               (double)n);
        }
    int64_t depth[PRIORITIES] = {0};
    for (int i = 0; i < m->nactive; i++)
        if (strcmp(m->active[i].state, "queued") == 0 && m->active[i].priority >= 0 &&
            m->active[i].priority < PRIORITIES)
            depth[m->active[i].priority] += m->active[i].count;
    svc_mwriter_family(w, "kowloon_queue_depth",
                       "queued jobs by priority (9 most urgent), in retry back-off included",
                       SVC_METRIC_GAUGE);
    for (int p = 0; p < PRIORITIES; p++) {
        char pr[4];
        snprintf(pr, sizeof pr, "%d", p);
        svc_mwriter_sample(w, "kowloon_queue_depth", (const char *[]){"priority", NULL},
                           (const char *[]){pr}, (double)depth[p]);
    }
}

static void write_nodes(svc_mwriter *w, json_t *nodes)
{
    static const struct {
        const char *name, *help, *member;
    } gauges[] = {
        {"kowloon_cluster_node_slots", "runs a node can hold at once", "slots"},
        {"kowloon_cluster_node_slots_busy", "runs a node holds, as its last heartbeat said", "running"},
        {"kowloon_cluster_node_up", "1 while a node sends heartbeats, 0 once it is down", "state"},
        {"kowloon_cluster_node_draining", "1 while a node is draining (takes no new runs)", "draining"},
    };
    for (size_t g = 0; g < sizeof gauges / sizeof *gauges; g++) {
        svc_mwriter_family(w, gauges[g].name, gauges[g].help, SVC_METRIC_GAUGE);
        size_t i;
        json_t *n;
        json_array_foreach(nodes, i, n) {
            const char *name = json_string_value(json_object_get(n, "name"));
            const char *backend = json_string_value(json_object_get(n, "backend"));
            json_t *v = json_object_get(n, gauges[g].member);
            double x = json_is_string(v) ? strcmp(json_string_value(v), "up") == 0
                                         : json_is_boolean(v) ? json_is_true(v)
                                                              : (double)json_integer_value(v);
            if (name != NULL && backend != NULL)
                svc_mwriter_sample(w, gauges[g].name, (const char *[]){"node", "backend", NULL},
                                   (const char *[]){name, backend}, x);
        }
    }
}

static void collect_cluster(svc_mwriter *w, void *arg)
{
    gw_metrics *m = arg;
    cluster_refresh(m);
    pthread_mutex_lock(&m->cache_mu);
    if (m->counted_ms != 0) {
        write_jobs(w, m);
        write_nodes(w, m->nodes);
        svc_mwriter_family(w, "kowloon_cluster_state_age_seconds",
                           "age of the job and node figures above (PostgreSQL is asked again "
                           "every --metrics-refresh-s when scraped)",
                           SVC_METRIC_GAUGE);
        svc_mwriter_sample(w, "kowloon_cluster_state_age_seconds", NULL, NULL,
                           (double)(svc_now_mono_ms() - m->counted_ms) / 1000.0);
    }
    pthread_mutex_unlock(&m->cache_mu);
}

/* ---- connection pools ------------------------------------------------- */

static void collect_pools(svc_mwriter *w, void *arg)
{
    gw_metrics *m = arg;
    gw_store_stats ps;
    gw_store_stats_get(m->app->store, &ps);
    static const struct {
        const char *name, *help;
        svc_metric_type type;
    } pg[] = {
        {"kowloon_pg_errors_total", "PostgreSQL statements that failed or got no answer",
         SVC_METRIC_COUNTER},
        {"kowloon_pg_connect_errors_total", "PostgreSQL connections that could not be made",
         SVC_METRIC_COUNTER},
        {"kowloon_pg_pool_waits_total", "borrowers that found every PostgreSQL connection lent",
         SVC_METRIC_COUNTER},
        {"kowloon_pg_pool_wait_seconds_total", "time spent waiting for a PostgreSQL connection",
         SVC_METRIC_COUNTER},
        {"kowloon_pg_pool_connections", "PostgreSQL connections of the pool (--db-pool)",
         SVC_METRIC_GAUGE},
        {"kowloon_pg_pool_busy", "PostgreSQL connections lent now", SVC_METRIC_GAUGE},
    };
    const double pv[] = {(double)ps.errors, (double)ps.connect_errors, (double)ps.waits,
                         ps.wait_seconds, ps.size, ps.busy};
    for (size_t i = 0; i < sizeof pg / sizeof *pg; i++) {
        svc_mwriter_family(w, pg[i].name, pg[i].help, pg[i].type);
        svc_mwriter_sample(w, pg[i].name, NULL, NULL, pv[i]);
    }

    gw_redis_stats rs[2];
    gw_redis_stats_get(gw_queue_redis(m->app->queue), &rs[0]);
    gw_redis_stats_get(gw_limits_redis(m->app->limits), &rs[1]);
    static const struct {
        const char *name, *help;
        svc_metric_type type;
    } rd[] = {
        {"kowloon_redis_errors_total",
         "Redis commands that got no answer (down, timeout, backing off) or an error reply",
         SVC_METRIC_COUNTER},
        {"kowloon_redis_pool_waits_total", "borrowers that found every Redis connection lent",
         SVC_METRIC_COUNTER},
        {"kowloon_redis_pool_wait_seconds_total", "time spent waiting for a Redis connection",
         SVC_METRIC_COUNTER},
        {"kowloon_redis_pool_connections", "Redis connections of the pool", SVC_METRIC_GAUGE},
        {"kowloon_redis_pool_busy", "Redis connections lent now", SVC_METRIC_GAUGE},
    };
    for (size_t i = 0; i < sizeof rd / sizeof *rd; i++) {
        svc_mwriter_family(w, rd[i].name, rd[i].help, rd[i].type);
        for (int p = 0; p < 2; p++) {
            const double v[] = {(double)rs[p].errors, (double)rs[p].waits, rs[p].wait_seconds,
                                rs[p].size, rs[p].busy};
            svc_mwriter_sample(w, rd[i].name, (const char *[]){"pool", NULL},
                               (const char *[]){rs[p].name}, v[i]);
        }
    }
}

/* ---- the registry ----------------------------------------------------- */

gw_metrics *gw_metrics_new(gw_app *app)
{
    gw_metrics *m = calloc(1, sizeof *m);
    if (m == NULL || (m->reg = svc_metrics_new()) == NULL) {
        free(m);
        return NULL;
    }
    m->app = app;
    pthread_mutex_init(&m->cache_mu, NULL);
    pthread_mutex_init(&m->refresh_mu, NULL);
    const char *const kernel[] = {"kernel", NULL};
    const int nb = (int)(sizeof job_bounds / sizeof *job_bounds);
    m->submits = svc_metric_counter(m->reg, "kowloon_job_submits_total",
                                    "jobs accepted (committed) by this gateway", kernel);
    m->results = svc_metric_counter(m->reg, "kowloon_job_results_total",
                                    "run outcomes nodes reported and this gateway recorded, by "
                                    "the run's state (a failed run may be retried)",
                                    (const char *[]){"kernel", "state", NULL});
    m->run_s = svc_metric_histogram(m->reg, "kowloon_job_run_seconds",
                                    "run time of reported runs on their node, seconds", kernel,
                                    job_bounds, nb);
    m->wait_s = svc_metric_histogram(m->reg, "kowloon_job_queue_wait_seconds",
                                     "time from a job's submit to the start of its first "
                                     "attempt, for jobs this gateway's scheduler placed, seconds",
                                     kernel, job_bounds, nb);
    m->lease = svc_metric_counter(m->reg, "kowloon_lease_runs_total",
                                  "single-node and gang runs given to nodes' polls by this "
                                  "gateway: handed (at their claim, no lease look), looked "
                                  "(found by a lease look), taken_back (handed, then back to "
                                  "the claimed runs: its node held no poll here for 2 s, "
                                  "or 5 s passed unanswered)",
                                  (const char *[]){"how", NULL});
    m->node_auth = svc_metric_counter(m->reg, "kowloon_node_credential_lookups_total",
                                      "node credentials looked up in PostgreSQL by this gateway: "
                                      "request (a call found no live answer in the cache), "
                                      "refresh (asked again in a batch before they expired)",
                                      (const char *[]){"how", NULL});
    m->preempted = svc_metric_counter(m->reg, "kowloon_preempted_runs_total",
                                      "runs this gateway's scheduler stopped and queued again "
                                      "(--fair-preempt) to make room for a larger job of their "
                                      "tenant that took it past its share",
                                      NULL);
    if (m->submits == NULL || m->results == NULL || m->run_s == NULL || m->wait_s == NULL ||
        m->lease == NULL || m->node_auth == NULL || m->preempted == NULL ||
        svc_metrics_add_collector(m->reg, collect_cluster, m) != 0 ||
        svc_metrics_add_collector(m->reg, collect_pools, m) != 0 ||
        svc_metrics_add_process(m->reg) != 0) {
        gw_metrics_free(m);
        return NULL;
    }
    return m;
}

void gw_metrics_free(gw_metrics *m)
{
    if (m == NULL)
        return;
    svc_metrics_free(m->reg);
    free(m->active);
    json_decref(m->nodes);
    pthread_mutex_destroy(&m->cache_mu);
    pthread_mutex_destroy(&m->refresh_mu);
    free(m);
}

svc_metrics *gw_metrics_registry(gw_metrics *m)
{
    return m != NULL ? m->reg : NULL;
}
