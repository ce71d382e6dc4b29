/* scheduler.c — the scheduler loop, placement, and the reaper's duties (node
 * expiry, re-queueing the jobs of lost nodes and of runs past their
 * deadline, rebuilding the ready queue). Runs only while this gateway holds
 * the scheduler lock in Redis; every other replica just serves the API.
 * Placement decides which node gets which job and claims them in batches;
 * the nodes' lease polls carry the runs to them (lease.c). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "events.h"
#include "lease.h"
#include "gw_limits.h"
#include "metrics.h"
#include "outcome.h"
#include "scheduler.h"
#include "svc_log.h"
#include "svc_util.h"
#include "waits.h"

#define LOCK_NAME "kowloon:scheduler"
#define LOCK_TTL_MS 5000
#define PEEK_MAX 64
/* A pass reads of each tenant's ready queue PEEK_MIN entries and one more
 * per PEEK_PER_FREE free slots, at most PEEK_MAX: it places at most one
 * job a free slot, shared among the tenants. Reading PEEK_MAX of each
 * tenant's whatever was free (3,200 entries at 50 tenants, for the ~35
 * slots a pass finds free at the 1,000-node ceiling) was the largest part
 * of Redis's CPU (the Lua script's ranges, their scores printed as
 * doubles) and of the scheduler's parsing and allocations. A tenant whose
 * whole window was placed makes another pass follow at once. */
#define PEEK_MIN 8
#define PEEK_PER_FREE 4
/* Ready entries one pass looks at, at most: jobs no free slot fits (a
 * backend no node offers, a tenant at its running quota) are passed over,
 * so that they cannot hold back the jobs behind them. */
#define SCAN_MAX 4096
/* A pass runs on every submit; only the first window is read each time,
 * the deeper ones at most this often. */
#define DEEP_SCAN_MS 200
#define SCHED_MAX_NODES 4096
/* Reservations one pass makes at most (dispatch_pass). */
#define RESERVE_MAX 64
/* Shapes of jobs that fit nowhere a pass remembers (pass_res). */
#define UNFIT_MAX 16
/* Shapes whose nodes' free times a pass keeps for its reservations. */
#define FREE_SHAPES 4
/* How often retries whose back-off has ended move to the ready queue. */
#define PROMOTE_MS 100
/* how often the scheduler looks whether jobs grew enough to analyze */
#define ANALYZE_CHECK_MS 10000
/* Least time between two placement passes that claimed something. Under
 * load every finished run frees a slot and wakes the scheduler; claiming
 * each alone cost a statement, a Redis call and a node's poll per job.
 * Waiting this long gathers the slots freed meanwhile into one claim, while
 * an idle scheduler (the last claim further back) places at once. */
#define PASS_GAP_MS 2
/* A job that yields to other tenants' windows (gw_place_fair_defers: it
 * would take its tenant past its share) does so for --fair-lump-wait-s at
 * most from the first pass that held it back; then it goes in its tenant's
 * turn, and reserves nodes when it fits nowhere, as any job. Jobs held
 * back are remembered in GW_LUMP_SLOTS entries (gw_lumps), each forgotten
 * when its job is placed, or once no pass held it back for
 * LUMP_FORGET_MS, or the wait if longer (it was cancelled; longer than
 * passes are apart on a quiet cluster, where a pass comes only with a
 * submit or an end, so that its wait does not start again); when no entry
 * is free a job does not yield. */
#define LUMP_FORGET_MS 600000
/* --fair-preempt: a job of more than this part of its tenant's share that
 * takes the tenant past the share stops the tenant's youngest runs
 * (pass_preempt). Not only lumps (more than half): at 1,000 simulated
 * nodes a weight-1 tenant's 4-node gang of exactly half its share, started
 * beside its other runs, was the worst tenant at 1.055; with a quarter
 * the worst was 0.031 in both runs of that day (250-285 runs stopped in
 * 120 s, 0.25 % of the GPU-seconds). */
#define PREEMPT_MIN_SHARE 0.25
/* What a tenant is owed (--fair-repay-s) halves over this long, and a gap
 * between passes counts this long at most (a new leader's first pass, a
 * cluster full for long: its units then were not seen). */
#define FAIR_OWED_HALF_LIFE_S 300.0
#define FAIR_ACCRUE_MAX_S 5.0
/* The reconciler reads queued jobs this many per page, this many pages a
 * call. */
#define RECONCILE_PAGE 512
#define RECONCILE_PAGES 4

/* A run the scheduler knows on a node: which devices it holds there, so
 * that its report frees them at once (not at the next refresh). */
typedef struct sched_run {
    char job_id[37];
    uint16_t devices;         /* bit g: device g */
    int units;                /* what it counts in its tenant's units (fair share) */
    int64_t tenant_id;
    int64_t start_ms;         /* when it was placed (started), epoch ms */
    int stop;                 /* a single-node run: 1, 2 once preemption stops it; a part: 0 */
} sched_run;

typedef struct sched_node {
    gw_node n;
    int running;              /* runs on it: PostgreSQL's count at the last
                                 refresh, plus claims, less reports since */
    int gpu_load[GW_PLACE_MAX_GPUS];   /* runs on each device (same refresh) */
    int64_t gpu_end[GW_PLACE_MAX_GPUS]; /* the latest end of a run placed on each */
    int64_t *ends;            /* when its runs end at the latest, ascending */
    int nends, cap_ends;
    sched_run *runs;          /* the runs counted in running, where known */
    int nruns, cap_runs;
} sched_node;

/* A tenant's fair-share record (placement.h): its virtual time, and what
 * it is owed in device-seconds (--fair-repay-s): its target less its units,
 * summed over the passes while it waits (fair_accrue). */
struct tenant_fair {
    int64_t tenant_id;
    double vt;
    double owed;
    uint64_t pass;            /* the last accrual it waited at: owed holds only while it is the latest */
};

struct gw_sched {
    gw_app *app;
    pthread_t thread;
    pthread_mutex_t mu;       /* guards nodes */
    pthread_cond_t cv;
    volatile int stop;
    int wake;
    int nodes_changed;        /* reload the node table before placing */
    int tenants_changed;      /* reload the tenants before the next pass */
    int serving;              /* the API serves: the lock may be taken */
    volatile int leader;
    int64_t leader_since_ms;  /* monotonic: when this gateway took the lock */
    int64_t next_deep_ms;     /* monotonic: earliest next scan past the first window */
    int64_t reconcile_seq;    /* where the reconciler's pass has got to */
    char owner[96];
    sched_node nodes[SCHED_MAX_NODES];
    int nnodes;
    /* nodes' places in nodes, in the order of their ids (mu held): a
     * report or a run of the reload finds its node by a binary search, not
     * by comparing its id with every node's (strcmp was 12 % of the
     * gateway's CPU at 1,000 nodes) */
    struct node_ref { const char *id; int at; } by_id[SCHED_MAX_NODES];
    /* Counts every change to nodes (mu held): a pass rebuilds its view of
     * the nodes only when it moved (pass_place), not for every job. */
    uint64_t nodes_gen;
    /* Every tenant's running quota and running jobs (counted in the runs
     * of the last reload of the nodes, plus claims since; sorted by id): a
     * placement checks the quota here, not with a query. Only the
     * scheduler thread uses it, but for the units (fair share), which the
     * runs' reports also change: those under mu. */
    gw_tenant_run *tenants;
    int ntenants;
    /* each tenant's running jobs in the last reload of the runs (tenant_id
     * and running set; sorted by id); the scheduler thread's */
    gw_tenant_run *counts;
    int ncounts;
    gw_ready ready[SCAN_MAX]; /* what the last peek saw */
    /* Fair share (placement.h): each tenant's virtual time, sorted by id,
     * and the floor a tenant back from idle starts from. Only the
     * scheduler thread uses them; a new leader starts them afresh. */
    struct tenant_fair *vts;
    int nvts, cap_vts;
    double vfloor;
    int64_t owed_at_ms;       /* monotonic: the last pass's accrual of what tenants are owed */
    uint64_t fair_pass;       /* counts those accruals */
    /* Runs whose ends were reported while a reload of the runs was under
     * way (refreshing, mu held): its query may have read them before
     * their ends were committed, and the reload leaves them out rather
     * than hold their devices until the next one. */
    int refreshing;
    gw_ended_run *ended;
    int nended, cap_ended;
    int ended_lost;           /* one did not fit (ENOMEM): the reload takes all */
    /* Jobs held back by fair share as lumps (--fair-lump-wait-s); the
     * scheduler thread's. */
    gw_lumps lumps;
};

/* Sets *flag (one of s's; NULL: none) and wakes the scheduler. */
static void sched_set_wake(gw_sched *s, int *flag)
{
    pthread_mutex_lock(&s->mu);
    if (flag)
        *flag = 1;
    s->wake = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void gw_sched_wake(gw_sched *s)
{
    if (s)
        sched_set_wake(s, NULL);
}

void gw_sched_serving(gw_sched *s)
{
    if (s)
        sched_set_wake(s, &s->serving);
}

void gw_sched_nodes_changed(gw_sched *s)
{
    if (s)
        sched_set_wake(s, &s->nodes_changed);
}

void gw_sched_tenants_changed(gw_sched *s)
{
    if (s)
        sched_set_wake(s, &s->tenants_changed);
}

static void node_run_end(gw_sched *s, sched_node *sn, const char *job_id);
static sched_node *node_by_id(gw_sched *s, const char *id);

/* Notes that the run of job_id's attempt on node_id ended, for the reload
 * under way. mu held. */
static void ended_note(gw_sched *s, const char *node_id, const char *job_id, int attempt)
{
    if (s->nended == s->cap_ended) {
        int cap = s->cap_ended ? 2 * s->cap_ended : 64;
        gw_ended_run *e = realloc(s->ended, sizeof(*e) * (size_t)cap);
        if (!e) {
            s->ended_lost = 1;
            return;
        }
        s->ended = e;
        s->cap_ended = cap;
    }
    gw_ended_run *e = &s->ended[s->nended++];
    snprintf(e->node_id, sizeof(e->node_id), "%s", node_id);
    snprintf(e->job_id, sizeof(e->job_id), "%s", job_id);
    e->attempt = attempt;
}

void gw_sched_runs_ended(gw_sched *s, const char *node_id, const char *const *job_ids,
                         const int *attempts, int n)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    for (int k = 0; s->refreshing && k < n; k++)
        ended_note(s, node_id, job_ids[k], attempts[k]);
    sched_node *sn = node_by_id(s, node_id);
    for (int k = 0; sn && k < n; k++)
        node_run_end(s, sn, job_ids[k]);
    s->nodes_gen++;
    s->wake = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static int tenant_cmp(const void *a, const void *b)
{
    int64_t x = ((const gw_tenant_run *)a)->tenant_id, y = ((const gw_tenant_run *)b)->tenant_id;
    return x < y ? -1 : x > y;
}

/* Sets each tenant's running count and units to the last reload's. mu
 * held. */
static void tenants_count(gw_sched *s)
{
    for (int i = 0; i < s->ntenants; i++) {
        gw_tenant_run *c = s->ncounts ? bsearch(&s->tenants[i], s->counts, (size_t)s->ncounts,
                                                sizeof(*c), tenant_cmp)
                                      : NULL;
        s->tenants[i].running = c ? c->running : 0;
        s->tenants[i].units = c ? c->units : 0;
    }
}

/* Reloads the tenants' running quotas and weights (their counts come with
 * the runs, nodes_refresh); on failure the old ones stay. */
static void tenants_refresh(gw_sched *s)
{
    gw_tenant_run *list;
    int n;
    if (gw_store_tenants_quotas(s->app->store, s->app->cfg.max_running_per_tenant, &list, &n) != 0)
        return;
    if (n > 1)
        qsort(list, (size_t)n, sizeof(*list), tenant_cmp);
    pthread_mutex_lock(&s->mu);
    free(s->tenants);
    s->tenants = list;
    s->ntenants = n;
    tenants_count(s);
    pthread_mutex_unlock(&s->mu);
}

static int run_job_cmp(const void *a, const void *b)
{
    return strcmp(((const gw_run_place *)a)->job_id, ((const gw_run_place *)b)->job_id);
}

static int ended_cmp(const void *a, const void *b)
{
    const gw_ended_run *x = a, *y = b;
    int c = strcmp(x->node_id, y->node_id);
    if (c == 0)
        c = strcmp(x->job_id, y->job_id);
    return c != 0 ? c : (x->attempt > y->attempt) - (x->attempt < y->attempt);
}

int gw_sched_runs_drop_ended(gw_run_place *runs, int nr, gw_ended_run *ended, int nended)
{
    if (nended <= 0)
        return 0;
    qsort(ended, (size_t)nended, sizeof(*ended), ended_cmp);
    int dropped = 0;
    for (int k = 0; k < nr; k++) {
        gw_ended_run key;
        memcpy(key.node_id, runs[k].node_id, sizeof(key.node_id));
        memcpy(key.job_id, runs[k].job_id, sizeof(key.job_id));
        key.attempt = runs[k].attempt;
        if (runs[k].node_id[0] &&
            bsearch(&key, ended, (size_t)nended, sizeof(*ended), ended_cmp)) {
            runs[k].node_id[0] = '\0';
            runs[k].live = 0;
            dropped++;
        }
    }
    return dropped;
}

int gw_sched_run_units(int ngpu)
{
    return ngpu > 1 ? ngpu : 1;
}

int gw_sched_count_running(gw_run_place *runs, int nr, gw_tenant_run **out)
{
    *out = NULL;
    if (nr > 1)
        qsort(runs, (size_t)nr, sizeof(*runs), run_job_cmp);
    int m = 0;
    gw_tenant_run *c = calloc((size_t)(nr > 0 ? nr : 1), sizeof(*c));
    if (!c)
        return -1;
    const char *last = "";   /* the job counted last: its other runs follow it */
    for (int k = 0; k < nr; k++) {
        if (!runs[k].live || !runs[k].tenant_id)
            continue;
        if (strcmp(last, runs[k].job_id) == 0) {
            c[m - 1].units += gw_sched_run_units(runs[k].ngpu);   /* another node of its gang */
            continue;
        }
        last = runs[k].job_id;
        c[m].tenant_id = runs[k].tenant_id;
        c[m].units = gw_sched_run_units(runs[k].ngpu);
        c[m++].running = 1;
    }
    if (m > 1)
        qsort(c, (size_t)m, sizeof(*c), tenant_cmp);
    int u = 0;
    for (int k = 0; k < m; k++) {
        if (u > 0 && c[u - 1].tenant_id == c[k].tenant_id) {
            c[u - 1].running++;
            c[u - 1].units += c[k].units;
        } else {
            c[u++] = c[k];
        }
    }
    *out = c;
    return u;
}

/* Keeps c (u tenants, from gw_sched_count_running) as the last reload's
 * counts and sets the tenants' entries from them. mu held. */
static void tenants_count_runs(gw_sched *s, gw_tenant_run *c, int u)
{
    free(s->counts);
    s->counts = c;
    s->ncounts = u;
    tenants_count(s);
}

/* The quota and count of tenant_id, or NULL when unknown here (a tenant
 * made since the last refresh, or an entry without its tenant). */
static gw_tenant_run *tenant_of(gw_sched *s, int64_t tenant_id)
{
    gw_tenant_run key = {.tenant_id = tenant_id};
    if (!tenant_id || s->ntenants == 0)
        return NULL;
    return bsearch(&key, s->tenants, (size_t)s->ntenants, sizeof(key), tenant_cmp);
}

/* 1 when a job of tenant_id (0: not known from the queue entry) may start
 * under its tenant's running quota. */
static int running_allowed(gw_sched *s, const gw_ready *e)
{
    gw_tenant_run *t = tenant_of(s, e->tenant_id);
    if (t)
        return t->limit == 0 || t->running < t->limit;
    return gw_limits_running_allowed(s->app, e->job_id);
}

/* Adds a run ending at end_ms to sn's ends (kept ascending). mu held. */
static void node_add_end(sched_node *sn, int64_t end_ms)
{
    if (sn->nends == sn->cap_ends) {
        int cap = sn->cap_ends ? 2 * sn->cap_ends : 16;
        int64_t *e = realloc(sn->ends, sizeof(*e) * (size_t)cap);
        if (!e)
            return;   /* counted as never ending: a later reservation, never a wrong start */
        sn->ends = e;
        sn->cap_ends = cap;
    }
    int at = sn->nends++;
    while (at > 0 && sn->ends[at - 1] > end_ms) {
        sn->ends[at] = sn->ends[at - 1];
        at--;
    }
    sn->ends[at] = end_ms;
}

/* Counts a run of job_id (of tenant_id) on sn holding ngpu devices ids,
 * placed at start_ms and ending at end_ms at the latest; stop as
 * sched_run's. mu held. */
static void node_run_add(sched_node *sn, const char *job_id, int64_t tenant_id, const int *ids,
                         int ngpu, int64_t start_ms, int64_t end_ms, int stop)
{
    uint16_t mask = 0;
    sn->running++;
    for (int g = 0; g < ngpu; g++)
        if (ids[g] >= 0 && ids[g] < GW_PLACE_MAX_GPUS) {
            sn->gpu_load[ids[g]]++;
            mask |= (uint16_t)(1u << ids[g]);
            if (end_ms > sn->gpu_end[ids[g]])
                sn->gpu_end[ids[g]] = end_ms;
        }
    node_add_end(sn, end_ms);
    if (sn->nruns == sn->cap_runs) {
        int cap = sn->cap_runs ? 2 * sn->cap_runs : 8;
        sched_run *r = realloc(sn->runs, sizeof(*r) * (size_t)cap);
        if (!r)
            return;   /* its devices stay counted until the next refresh: never a double booking */
        sn->runs = r;
        sn->cap_runs = cap;
    }
    sched_run *r = &sn->runs[sn->nruns++];
    memcpy(r->job_id, job_id, 37);
    r->devices = mask;
    r->units = gw_sched_run_units(ngpu);
    r->tenant_id = tenant_id;
    r->start_ms = start_ms;
    r->stop = stop;
}

/* job_id's run on sn ended (or its claim did not happen): its slot and its
 * devices are free, and its tenant holds its units no more. A run not
 * known here frees a slot; its devices and units wait for the next
 * refresh. mu held. */
static void node_run_end(gw_sched *s, sched_node *sn, const char *job_id)
{
    if (sn->running > 0)
        sn->running--;
    for (int i = 0; job_id && i < sn->nruns; i++)
        if (strcmp(sn->runs[i].job_id, job_id) == 0) {
            for (int g = 0; g < GW_PLACE_MAX_GPUS; g++)
                if ((sn->runs[i].devices & (1u << g)) && sn->gpu_load[g] > 0)
                    sn->gpu_load[g]--;
            gw_tenant_run *t = tenant_of(s, sn->runs[i].tenant_id);
            if (t && t->units >= sn->runs[i].units)
                t->units -= sn->runs[i].units;
            sn->runs[i] = sn->runs[--sn->nruns];
            return;
        }
}

/* The node of id, or NULL. mu held. */
static sched_node *node_by_id(gw_sched *s, const char *id)
{
    int lo = 0, hi = s->nnodes;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(s->by_id[mid].id, id);
        if (c == 0)
            return &s->nodes[s->by_id[mid].at];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static int node_ref_cmp(const void *a, const void *b)
{
    return strcmp(((const struct node_ref *)a)->id, ((const struct node_ref *)b)->id);
}

/* Reloads the node table and the runs on each node (their devices and
 * ends) from PostgreSQL. */
static void nodes_refresh(gw_sched *s)
{
    gw_node *list;
    gw_run_place *runs;
    int n, nr;
    pthread_mutex_lock(&s->mu);
    s->refreshing = 1;
    s->nended = s->ended_lost = 0;
    pthread_mutex_unlock(&s->mu);
    if (gw_store_nodes_load(s->app->store, &list, &n) != 0)
        goto done;
    if (gw_store_runs_placed(s->app->store, &runs, &nr) != 0) {
        free(list);
        goto done;
    }
    pthread_mutex_lock(&s->mu);
    /* ends reported since the query began: their runs may be in it */
    if (!s->ended_lost)
        gw_sched_runs_drop_ended(runs, nr, s->ended, s->nended);
    s->refreshing = 0;
    gw_tenant_run *counts;
    int ncounts = gw_sched_count_running(runs, nr, &counts);
    int m = 0;
    for (int i = 0; i < n && m < SCHED_MAX_NODES; i++, m++) {
        sched_node *sn = &s->nodes[m];
        sn->n = list[i];
        sn->running = sn->nends = sn->nruns = 0;
        memset(sn->gpu_load, 0, sizeof(sn->gpu_load));
        memset(sn->gpu_end, 0, sizeof(sn->gpu_end));
    }
    if (n > SCHED_MAX_NODES)
        svc_warn("scheduler: %d nodes are up; placing on the %d with the latest heartbeats",
                 n, SCHED_MAX_NODES);
    s->nnodes = m;
    s->nodes_gen++;
    for (int k = 0; k < m; k++)
        s->by_id[k] = (struct node_ref){s->nodes[k].n.id, k};
    qsort(s->by_id, (size_t)m, sizeof(s->by_id[0]), node_ref_cmp);
    for (int k = 0; k < nr; k++) {
        sched_node *sn = node_by_id(s, runs[k].node_id);
        if (sn)
            node_run_add(sn, runs[k].job_id, runs[k].tenant_id, runs[k].gpu_ids, runs[k].ngpu,
                         runs[k].start_ms, runs[k].end_ms, runs[k].stop);
    }
    if (ncounts >= 0)   /* on ENOMEM the old counts stay */
        tenants_count_runs(s, counts, ncounts);
    pthread_mutex_unlock(&s->mu);
    free(list);
    free(runs);
    return;
done:
    pthread_mutex_lock(&s->mu);
    s->refreshing = 0;
    pthread_mutex_unlock(&s->mu);
}

/* Reloads the tenants when gw_sched_tenants_changed asked: before every
 * pass, so that a pass that peeks the queue after a change of weights (or
 * a new tenant's first submit) places with them. The runs first: a
 * tenant's units and running count come from the last reload of the runs,
 * and the claims since it would not be counted. */
static void tenants_if_changed(gw_sched *s)
{
    pthread_mutex_lock(&s->mu);
    int changed = s->tenants_changed;
    s->tenants_changed = 0;
    pthread_mutex_unlock(&s->mu);
    if (changed) {
        nodes_refresh(s);
        tenants_refresh(s);
    }
}

/* Requeues (counted, with code) every run of list, freeing it. */
static void requeue_all(gw_sched *s, gw_dispatch *list, int n, const char *code, const char *why)
{
    for (int i = 0; i < n; i++) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s (attempt %d on %s)", why, list[i].attempt, list[i].node_name);
        gw_outcome_requeue(s->app, list[i].job_id, list[i].attempt, 0, code, msg);
    }
    gw_dispatch_free(list, n);
}

/* Marks silent nodes down and puts their running jobs back in the queue
 * (or fails them with node_lost when their attempts are spent); fails runs
 * that went past their timeout without a report. */
static void reap(gw_sched *s)
{
    int marked = 0;
    /* Heartbeats that arrived while PostgreSQL was down, or while no
     * gateway held the lock, could not be recorded: a node is judged only
     * on a full timeout of heartbeats that had a chance to be written. */
    int64_t now = svc_now_mono_ms(), window = (int64_t)s->app->cfg.node_timeout_s * 1000;
    int64_t failed = gw_store_last_failure_ms(s->app->store);
    if ((!failed || now - failed >= window) && now - s->leader_since_ms >= window)
        gw_store_nodes_expire(s->app->store, s->app->cfg.node_timeout_s, &marked);
    /* The nodes just marked down leave placement before their jobs are
     * queued again: a pass with the old view put a lost gang's next
     * attempt back on the lost node (test_task_gang saw a third attempt). */
    if (marked > 0)
        nodes_refresh(s);
    gw_dispatch *list;
    int n;
    if (gw_store_jobs_on_down_nodes(s->app->store, &list, &n) == 0)
        requeue_all(s, list, n, "node_lost", "the node was lost");
    /* A new scheduler first gives nodes a node timeout to report runs that
     * ended while no gateway could record them. */
    if (now - s->leader_since_ms >= window &&
        gw_store_runs_overdue(s->app->store, s->app->cfg.timeout_grace_s, &list, &n) == 0) {
        for (int i = 0; i < n; i++)
            if (gw_store_job_fail(s->app->store, list[i].job_id, list[i].attempt, "failed",
                                  "timeout", "no result from the node within timeout_s plus grace",
                                  NULL, NULL, NULL) == 0) {
                gw_waits_job_changed(s->app->waits, list[i].job_id);
                gw_events_written(s->app->events);
            }
        gw_dispatch_free(list, n);
    }
}

/* Re-adds to Redis the jobs PostgreSQL says are queued: after a Redis
 * restart or FLUSHALL, or a crash between commit and enqueue. Each call
 * looks at RECONCILE_PAGES pages of RECONCILE_PAGE jobs from where the last
 * one stopped (s->reconcile_seq), so no call holds up placement for long
 * however deep the queue; a pass over the whole queue ends when a page
 * comes back short. Returns 1 when the pass is complete. */
static int reconcile(gw_sched *s)
{
    int added = 0, done = 0;
    for (int page = 0; page < RECONCILE_PAGES && !done; page++) {
        gw_queued *list;
        int n, more = 0;
        if (gw_store_jobs_queued(s->app->store, s->reconcile_seq, RECONCILE_PAGE, &list, &n) != 0)
            return 0;
        if (n && gw_queue_push_missing(s->app->queue, list, n, &more) == 0)
            added += more;
        if (n > 0)
            s->reconcile_seq = list[n - 1].seq;
        done = n < RECONCILE_PAGE;
        free(list);
    }
    if (added)
        svc_warn("ready queue: re-enqueued %d queued job(s) missing from Redis", added);
    if (done)
        s->reconcile_seq = 0;
    return done;
}

/* Node k's entry of the placement view. mu held (the view points into
 * the node's ends). */
static void node_view(const gw_sched *s, int k, gw_place_node *v)
{
    const sched_node *sn = &s->nodes[k];
    *v = (gw_place_node){.name = sn->n.name, .backend = gw_place_backend(sn->n.backend),
                         .slots = sn->n.slots, .running = sn->running,
                         .ngpus = sn->n.ngpus < GW_PLACE_MAX_GPUS ? sn->n.ngpus : GW_PLACE_MAX_GPUS,
                         .available = sn->n.up && !sn->n.draining, .tasks = sn->n.tasks,
                         .images = sn->n.images, .nimages = sn->n.nimages};
    for (int g = 0; g < v->ngpus; g++)
        v->gpu[g] = (gw_place_gpu){sn->n.gpu_mem_mb[g], sn->gpu_load[g], sn->n.gpu_util[g],
                                   sn->gpu_end[g]};
    v->ends = sn->ends;
    v->nends = sn->nends;
}

/* The free slots of the view's nodes that take work, counted until they
 * reach enough (1: whether there is one, found at the first such node). */
static int view_free_slots(const gw_place_node *view, int n, int enough)
{
    int free = 0;
    for (int k = 0; k < n && free < enough; k++)
        if (view[k].available && view[k].running < view[k].slots)
            free += view[k].slots - view[k].running;
    return free;
}

/* The placement view of the nodes, and the nodes_gen it shows (*gen);
 * returns the free slots of the nodes that take work. mu held. */
static int nodes_view(gw_sched *s, gw_place_node *view, uint64_t *gen)
{
    for (int k = 0; k < s->nnodes; k++)
        node_view(s, k, &view[k]);
    *gen = s->nodes_gen;
    return view_free_slots(view, s->nnodes, INT_MAX);
}

/* Gives back what placement counted for a claim that did not happen. mu
 * held. */
static void unplace(gw_sched *s, const gw_claim *c)
{
    int parts = c->nnodes > 1 ? c->nnodes : 1;
    for (int p = 0; p < parts; p++) {
        sched_node *sn = node_by_id(s, parts > 1 ? c->gang[p].node_id : c->node_id);
        if (sn)
            node_run_end(s, sn, c->job_id);
    }
    s->nodes_gen++;
}

/* Wakes the polls here of the nodes that got runs of claims[0..n) (a
 * handed run woke its poll already): one wake per node, with how many
 * runs it got. */
static void wake_claimed(gw_sched *s, const gw_claim *keep, int k)
{
    char woken[SCHED_MAX_NODES][37];
    int count[SCHED_MAX_NODES], nw = 0;
    for (int i = 0; i < k; i++) {
        int parts = keep[i].nnodes > 1 ? keep[i].nnodes : 1;
        for (int p = 0; keep[i].claimed && !keep[i].hand && p < parts; p++) {
            const char *node = parts > 1 ? keep[i].gang[p].node_id : keep[i].node_id;
            int w = 0;
            while (w < nw && strcmp(woken[w], node) != 0)
                w++;
            if (w == nw && nw < SCHED_MAX_NODES) {
                memcpy(woken[nw], node, 37);
                count[nw++] = 0;
            }
            if (w < nw)
                count[w]++;
        }
    }
    for (int w = 0; w < nw; w++)
        gw_leases_wake(s->app->leases, woken[w], count[w]);
}

/* Claims the placed jobs of batch (taken out of Redis first, so that no
 * other pass places them too) in one statement, and wakes the polls of the
 * nodes that got runs. A job no longer in Redis or no longer queued (a
 * cancel) goes nowhere; its slots are given back. Returns how many were
 * claimed, or -EIO when PostgreSQL failed (the reconciler puts those jobs
 * back in Redis from PostgreSQL, where they are still queued). */
static int claim_batch(gw_sched *s, gw_claim *batch, const char *const *members, int n)
{
    int taken[PEEK_MAX];
    gw_claim keep[PEEK_MAX];
    int k = 0, rc = gw_queue_take_many(s->app->queue, members, n, taken);
    for (int i = 0; rc == 0 && i < n; i++)
        if (taken[i])
            keep[k++] = batch[i];
    /* A single-node run whose node's poll this gateway holds is handed to
     * it by the claim itself (leased with it: no lease look). */
    for (int i = 0; i < k; i++)
        keep[i].hand = keep[i].nnodes <= 1 &&
                       gw_leases_hold(s->app->leases, keep[i].node_id, keep[i].job_id);
    if (rc == 0 && k > 0 && (rc = gw_store_jobs_claim(s->app->store, keep, k)) == 0)
        gw_events_written(s->app->events);
    for (int i = 0; i < k; i++)
        if (keep[i].hand) {
            gw_leases_hand(s->app->leases, keep[i].job_id,
                           rc == 0 && keep[i].claimed ? keep[i].attempt : 0, keep[i].run);
            gw_dispatch_free(keep[i].run, 1);
            keep[i].run = NULL;
        }
    int claimed = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < n; i++) {
        int ok = 0;
        for (int j = 0; rc == 0 && j < k; j++)
            if (strcmp(keep[j].job_id, batch[i].job_id) == 0)
                ok = keep[j].claimed;
        claimed += ok;
        if (!ok)
            unplace(s, &batch[i]);
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < k; i++)
        if (keep[i].claimed)
            gw_metrics_started(s->app->metrics, keep[i].kernel, keep[i].first_wait_s);
    wake_claimed(s, keep, k);
    return rc == 0 ? claimed : -EIO;
}

/* A tenant's entries in the peek: ready[start..end), pos the next to look
 * at. */
typedef struct pass_tenant {
    int start, end, pos;
    int held_back;            /* at its running quota, or banking for a lump: the rest of its window waits */
    int placed;               /* jobs placed this pass */
    gw_tenant_run *t;         /* NULL: not known since the last refresh */
    struct tenant_fair *f;    /* its virtual time and what it is owed */
    double target;            /* its share of the devices (units) at the pass's start */
    double reserve_left;      /* --fair-reserve-pct: units it may still reserve for this pass */
} pass_tenant;

/* tenant_id's fair-share record, made with its virtual time at the floor
 * when it has none; NULL on ENOMEM. The array may move: pointers last
 * until the next call. */
static struct tenant_fair *fair_of(gw_sched *s, int64_t tenant_id)
{
    int lo = 0, hi = s->nvts;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (s->vts[mid].tenant_id < tenant_id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < s->nvts && s->vts[lo].tenant_id == tenant_id)
        return &s->vts[lo];
    if (s->nvts == s->cap_vts) {
        int cap = s->cap_vts ? 2 * s->cap_vts : 64;
        struct tenant_fair *v = realloc(s->vts, sizeof(*v) * (size_t)cap);
        if (!v)
            return NULL;
        s->vts = v;
        s->cap_vts = cap;
    }
    memmove(&s->vts[lo + 1], &s->vts[lo], sizeof(*s->vts) * (size_t)(s->nvts - lo));
    s->nvts++;
    s->vts[lo] = (struct tenant_fair){.tenant_id = tenant_id, .vt = s->vfloor};
    return &s->vts[lo];
}

/* Counts a placement of e in the scheduler's view: a slot on each node,
 * the devices, the run's end, its tenant's units. mu held. */
static void place_count(gw_sched *s, const gw_ready *e, const gw_place_pick *p, int64_t now)
{
    gw_tenant_run *t = tenant_of(s, e->tenant_id);
    for (int k = 0; k < p->nnodes; k++) {
        sched_node *sn = &s->nodes[p->node[k]];
        int ngpu = p->ngpu < sn->n.ngpus ? p->ngpu : sn->n.ngpus;
        node_run_add(sn, e->job_id, e->tenant_id, p->gpu[k], ngpu, now,
                     now + (int64_t)e->timeout_s * 1000, p->nnodes <= 1);
        if (t)
            t->units += gw_sched_run_units(ngpu);
    }
    s->nodes_gen++;
}

/* Fills c (gang: malloc'd, freed by the caller) from p. mu held. */
static int claim_fill(gw_sched *s, gw_claim *c, const gw_ready *e, const gw_place_pick *p)
{
    memset(c, 0, sizeof(*c));
    memcpy(c->job_id, e->job_id, sizeof(c->job_id));
    memcpy(c->node_id, s->nodes[p->node[0]].n.id, sizeof(c->node_id));
    c->nnodes = p->nnodes;
    c->ngpu = p->ngpu;
    memcpy(c->gpu_ids, p->gpu[0], sizeof(int) * (size_t)p->ngpu);
    if (p->nnodes <= 1)
        return 0;
    if (!(c->gang = calloc((size_t)p->nnodes, sizeof(*c->gang))))
        return -ENOMEM;
    for (int k = 0; k < p->nnodes; k++) {
        memcpy(c->gang[k].node_id, s->nodes[p->node[k]].n.id, sizeof(c->gang[k].node_id));
        c->gang[k].ngpu = p->ngpu;
        memcpy(c->gang[k].gpu_ids, p->gpu[k], sizeof(int) * (size_t)p->ngpu);
    }
    return 0;
}

/* Claims what the batch holds and frees its gangs; the claimed count, or
 * -EIO. */
static int flush_batch(gw_sched *s, gw_claim *batch, const char **members, int *nb)
{
    int got = *nb ? claim_batch(s, batch, members, *nb) : 0;
    for (int i = 0; i < *nb; i++)
        free(batch[i].gang);
    *nb = 0;
    return got;
}

/* What the k waiting tenants (those waiting at accrual `pass` only, when
 * latest is set) are owed a unit of their targets. */
static double owed_per_unit(const pass_tenant *pt, int k, int latest, uint64_t pass)
{
    double owed = 0, target = 0;
    for (int j = 0; j < k; j++)
        if (!latest || pt[j].f->pass == pass) {
            owed += pt[j].f->owed;
            target += pt[j].target;
        }
    return target > 0 ? owed / target : 0;
}

/* Adds each of the k waiting tenants' target less its units over the time
 * since the last accrual to what it is owed (at most its target over
 * --fair-repay-s, which repays that at twice its share; halved every
 * FAIR_OWED_HALF_LIFE_S). A tenant that was not waiting at the last
 * accrual is owed nothing and owes nothing from its time away (fair share
 * is among the tenants with work waiting: idling banks no credit, and a
 * debt ends with the busy spell that ran it up): it starts level with
 * those that were, as its virtual time starts at the floor (in a cluster
 * the waiting tenants do not fill, each of them is owed, and a newcomer at
 * 0 would be behind them all while it holds nothing). mu held. */
static void fair_accrue(gw_sched *s, pass_tenant *pt, int k, int64_t mono)
{
    double repay = (double)s->app->cfg.fair_repay_s;
    if (repay <= 0)
        return;
    double dt = s->owed_at_ms ? (double)(mono - s->owed_at_ms) / 1000.0 : 0;
    s->owed_at_ms = mono;
    double level = owed_per_unit(pt, k, 1, s->fair_pass);
    for (int j = 0; j < k; j++)
        if (pt[j].f->pass != s->fair_pass) {
            pt[j].f->owed = level * pt[j].target;
            pt[j].f->pass = s->fair_pass;
        }
    if (dt <= 0)
        return;
    if (dt > FAIR_ACCRUE_MAX_S)
        dt = FAIR_ACCRUE_MAX_S;
    uint64_t pass = ++s->fair_pass;
    for (int j = 0; j < k; j++) {
        pt[j].f->owed = gw_place_fair_owed(pt[j].f->owed, pt[j].target,
                                           pt[j].t ? pt[j].t->units : 0, dt, repay,
                                           FAIR_OWED_HALF_LIFE_S);
        pt[j].f->pass = pass;
    }
}

/* Each waiting tenant's deficit in units (fair share, placement.h): the
 * capacity of the nodes that take work (each node's devices, or its slots
 * where it has none), less what the tenants not waiting hold, shared among
 * the k waiting ones by weight, less what each holds. */
static void pass_deficits(gw_sched *s, const gw_place_node *view, pass_tenant *pt, int k,
                          double *deficit, double *target, int64_t mono)
{
    double cap = 0, wsum = 0, waiting = 0, held = 0;
    for (int i = 0; i < s->nnodes; i++)
        if (view[i].available)
            cap += view[i].ngpus > 0 ? view[i].ngpus : view[i].slots;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->ntenants; i++)
        held += s->tenants[i].units;
    for (int j = 0; j < k; j++) {
        wsum += pt[j].t ? pt[j].t->weight : 1;
        waiting += pt[j].t ? pt[j].t->units : 0;
    }
    double room = cap - (held - waiting);
    for (int j = 0; j < k; j++)
        target[j] = pt[j].target = gw_place_fair_target(room, pt[j].t ? pt[j].t->weight : 1, wsum);
    fair_accrue(s, pt, k, mono);
    /* What the waiting tenants are owed is shared among them: in a
     * cluster they do not fill (short jobs, gaps between runs) every one
     * is owed, and only what one is owed beyond the others' (by weight)
     * puts it ahead. */
    double per_unit = owed_per_unit(pt, k, 0, 0);
    for (int j = 0; j < k; j++)
        deficit[j] = gw_place_fair_deficit(pt[j].target, pt[j].t ? pt[j].t->units : 0,
                                           pt[j].f->owed - pt[j].target * per_unit,
                                           (double)s->app->cfg.fair_repay_s);
    pthread_mutex_unlock(&s->mu);
}

/* Groups the peek's n entries (each tenant's together) into pt, gives each
 * tenant its virtual time in vt[k], raised to the floor (the floor rises
 * to the least of them: a tenant back from idle thus starts at the least
 * virtual time of the tenants that were waiting at the last pass), and its
 * deficit in deficit[k]. The number of tenants, or -1 on ENOMEM. */
static int pass_tenants(gw_sched *s, const gw_place_node *view, int n, pass_tenant *pt,
                        double *vt, double *deficit, double *target, int64_t mono)
{
    int nt = 0;
    for (int i = 0; i < n; i++) {
        if (nt == 0 || s->ready[i].tenant_id != s->ready[pt[nt - 1].start].tenant_id) {
            pt[nt] = (pass_tenant){.start = i, .pos = i, .t = tenant_of(s, s->ready[i].tenant_id)};
            nt++;
        }
        pt[nt - 1].end = i + 1;
    }
    for (int k = 0; k < nt; k++)
        if (!fair_of(s, s->ready[pt[k].start].tenant_id))
            return -1;
    double floor = -1;
    for (int k = 0; k < nt; k++) {
        pt[k].f = fair_of(s, s->ready[pt[k].start].tenant_id);   /* no more inserts: stable */
        if (pt[k].f->vt < s->vfloor)
            pt[k].f->vt = s->vfloor;
        vt[k] = pt[k].f->vt;
        floor = floor < 0 || vt[k] < floor ? vt[k] : floor;
    }
    if (floor > s->vfloor)
        s->vfloor = floor;
    pass_deficits(s, view, pt, nt, deficit, target, mono);
    for (int k = 0; k < nt; k++)
        pt[k].reserve_left = pt[k].target * (double)s->app->cfg.fair_reserve_pct / 100.0;
    return nt;
}

/* The reservations of a pass: a job that fits nowhere now reserves the
 * nodes that free first among those no earlier reservation of the pass
 * holds (held[i]: the start of the reservation holding node i, 0 when
 * none); allowed: the nodes the job being placed may use (backfill); mask:
 * the nodes a reservation being made takes. */
typedef struct pass_res {
    int n;
    int64_t *held;
    int64_t *scratch;         /* gw_place_reserve_at's: a time a node */
    /* When each node frees for a shape (devices a node, memory, backend,
     * image: not the number of nodes), kept while the view is: a pass
     * reserves for up to RESERVE_MAX jobs, most of a few shapes, and
     * working out every node's free time for each was the scheduler's
     * largest cost at 1,000 nodes. The nodes a placement changes are
     * worked out again (pass_place). */
    struct free_shape { gw_place_req req; int64_t *at; } shapes[FREE_SHAPES];
    int nshapes, next_shape;
    uint8_t *allowed, *mask;
    uint64_t gen;             /* the nodes_gen the pass's view shows */
    /* Shapes that fitted nowhere since the view was built, with the least
     * timeout_s that did not: within a pass the nodes only fill up and
     * reservations only grow (a longer timeout_s is allowed on fewer
     * reserved nodes), so a job of that shape and timeout_s fits nowhere
     * either, and is not placed again over every node. */
    struct unfit { gw_place_req req; int timeout_s; } unfit[UNFIT_MAX];
    int nunfit;
} pass_res;

/* 1 when a and b need the same of each node (backend, devices, memory,
 * image); image_anywhere follows from the image and the pass's view. */
static int same_node_needs(const gw_place_req *a, const gw_place_req *b)
{
    return a->backend == b->backend && a->gpus == b->gpus && a->gpu_mem_mb == b->gpu_mem_mb &&
           a->image == b->image;
}

/* The pass's entry for r's shape (its node needs and nodes), or NULL. */
static struct unfit *unfit_of(pass_res *res, const gw_place_req *r)
{
    for (int i = 0; i < res->nunfit; i++)
        if (same_node_needs(&res->unfit[i].req, r) && res->unfit[i].req.nodes == r->nodes)
            return &res->unfit[i];
    return NULL;
}

/* 1 when the pass already saw a job of r's shape that fitted nowhere
 * with no more timeout_s than timeout_s. */
static int unfit_known(pass_res *res, const gw_place_req *r, int timeout_s)
{
    const struct unfit *u = unfit_of(res, r);
    return u && u->timeout_s <= timeout_s;
}

/* Remembers that r fitted nowhere with timeout_s (while there is room). */
static void unfit_add(pass_res *res, const gw_place_req *r, int timeout_s)
{
    struct unfit *u = unfit_of(res, r);
    if (u && timeout_s < u->timeout_s)
        u->timeout_s = timeout_s;
    else if (!u && res->nunfit < UNFIT_MAX)
        res->unfit[res->nunfit++] = (struct unfit){*r, timeout_s};
}

/* The free times of the view's nodes for r's shape (kept in res, worked
 * out when new, in the place of the oldest shape when all are taken). */
static const int64_t *shape_times(pass_res *res, const gw_place_node *view, int n,
                                  const gw_place_req *r, int64_t now)
{
    for (int i = 0; i < res->nshapes; i++)
        if (same_node_needs(&res->shapes[i].req, r))
            return res->shapes[i].at;
    int at = res->nshapes < FREE_SHAPES ? res->nshapes++ : res->next_shape++ % FREE_SHAPES;
    res->shapes[at].req = *r;
    gw_place_free_times(view, n, r, now, res->shapes[at].at);
    return res->shapes[at].at;
}

/* Node k of the view changed (a placement): its free times again. */
static void shapes_node_changed(pass_res *res, const gw_place_node *view, int k, int64_t now)
{
    for (int i = 0; i < res->nshapes; i++)
        res->shapes[i].at[k] = gw_place_free_time(&view[k], &res->shapes[i].req, now);
}

/* What pass_place did with a job. */
enum { PASS_SKIPPED, PASS_PLACED, PASS_RESERVED };

/* Places e on the nodes as they are now (view refreshed), within the
 * reservations of the pass, filling c; counts the placement in the
 * scheduler's view and sets *free_slot. When e does not fit, it reserves
 * the nodes that free first among those not held yet (at most RESERVE_MAX
 * reservations a pass). Takes mu. */
static int pass_place(gw_sched *s, const gw_ready *e, gw_place_node *view, gw_claim *c,
                      int64_t now, pass_res *res, int *free_slot, int may_reserve)
{
    gw_place_req req = {.backend = gw_place_backend(e->backend), .gpus = e->gpus, .nodes = e->nodes,
                        .gpu_mem_mb = e->gpu_mem_mb, .image = e->image};
    gw_place_pick pick;
    int how = PASS_SKIPPED;
    pthread_mutex_lock(&s->mu);
    /* rebuilt only when a node changed since (a report, a refresh): a
     * copy of every node for every job was 38 % of the scheduler's time */
    if (res->gen != s->nodes_gen) {
        *free_slot = nodes_view(s, view, &res->gen);
        res->nunfit = res->nshapes = 0;
    }
    if (req.image)
        req.image_anywhere = gw_place_image_listed(view, s->nnodes, req.image);
    int fits = 0;
    if (!unfit_known(res, &req, e->timeout_s)) {
        if (res->n)
            gw_place_backfill_mask(s->nnodes, res->held, now, e->timeout_s, res->allowed);
        fits = gw_place_job(view, s->nnodes, &req, res->n ? res->allowed : NULL, &pick) == 0;
        if (!fits)
            unfit_add(res, &req, e->timeout_s);
    }
    if (fits && claim_fill(s, c, e, &pick) == 0) {
        place_count(s, e, &pick, now);
        for (int k = 0; k < pick.nnodes; k++) {
            node_view(s, pick.node[k], &view[pick.node[k]]);
            shapes_node_changed(res, view, pick.node[k], now);
        }
        res->gen = s->nodes_gen;   /* the view was current before the count */
        *free_slot = view_free_slots(view, s->nnodes, 1);
        how = PASS_PLACED;
    } else if (may_reserve && res->n < RESERVE_MAX) {
        int64_t at = gw_place_reserve_at(shape_times(res, view, s->nnodes, &req, now), s->nnodes,
                                         req.nodes > 1 ? req.nodes : 1, res->held, res->mask,
                                         res->scratch);
        if (at >= 0) {
            for (int i = 0; i < s->nnodes; i++)
                if (res->mask[i])
                    res->held[i] = at;
            res->n++;
            how = PASS_RESERVED;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return how;
}

/* The units e holds once placed. */
static double pass_units(const gw_ready *e)
{
    return (double)(e->nodes > 1 ? e->nodes : 1) * gw_sched_run_units(e->gpus);
}

/* How long a lump yields at most (--fair-lump-wait-s), and how long its
 * entry is kept unseen. */
static int64_t lump_wait_ms(const gw_sched *s)
{
    return (int64_t)s->app->cfg.fair_lump_wait_s * 1000;
}

static int64_t lump_forget_ms(const gw_sched *s)
{
    return lump_wait_ms(s) > LUMP_FORGET_MS ? lump_wait_ms(s) : LUMP_FORGET_MS;
}

/* e, tenant k's, was placed: a lump's entry is forgotten (only a job of
 * a lump's size can have one). */
static void lump_placed(gw_sched *s, const pass_tenant *pt, int k, const gw_ready *e, int64_t mono)
{
    if (gw_place_fair_lump_size(pass_units(e), pt[k].target))
        gw_lumps_placed(&s->lumps, e->job_id, mono, lump_forget_ms(s));
}

/* The lumps a pass holds back (gw_place_fair_defers), in order, with
 * their tenants; next: how many have had their turn after the windows. */
typedef struct pass_lumps {
    struct held_lump { int k; const gw_ready *e; } at[PEEK_MAX];
    int n, next;
} pass_lumps;

/* 1 when e, tenant k's next entry, is a lump the pass holds back (noted
 * in l) while tenants below their share (deficit) have entries left
 * (cand); never once the lumps' turns began. */
static int lump_held(gw_sched *s, pass_lumps *l, const pass_tenant *pt, int nt, int k,
                     const gw_ready *e, const double *deficit, const uint8_t *cand, int64_t mono)
{
    if (l->next > 0 || l->n == PEEK_MAX || lump_wait_ms(s) <= 0 ||
        !gw_place_fair_defers(deficit, cand, nt, k, pass_units(e), pt[k].target) ||
        gw_lumps_waited(&s->lumps, e->job_id, mono, lump_wait_ms(s), lump_forget_ms(s)))
        return 0;
    l->at[l->n++] = (struct held_lump){k, e};
    return 1;
}

/* 1 when e, tenant k's next entry, is passed over in this pass: its
 * tenant is at its running quota (the rest of its window waits), or e is
 * a lump held back (lump_held). On device-seconds the tenant then banks
 * for its lump: its later jobs wait too, and what it is owed grows
 * meanwhile, until the lump fits its deficit (or its wait ends). */
static int pass_over(gw_sched *s, pass_lumps *l, pass_tenant *pt, int nt, int k,
                     const gw_ready *e, const double *deficit, const uint8_t *cand, int64_t mono)
{
    int quota = !running_allowed(s, e);
    if (!quota && !lump_held(s, l, pt, nt, k, e, deficit, cand, mono))
        return 0;
    if (quota || s->app->cfg.fair_repay_s > 0) {
        pt[k].pos = pt[k].end;
        pt[k].held_back = 1;
    }
    return 1;
}

/* The pass's next entry, its tenant in *k: the next of tenant *k's
 * window, or (*k < 0: no window has any left) the next lump held back;
 * NULL when none is left. */
static const gw_ready *pass_entry(gw_sched *s, pass_tenant *pt, pass_lumps *l, int *k)
{
    if (*k >= 0)
        return &s->ready[pt[*k].pos++];
    if (l->next == l->n)
        return NULL;
    *k = l->at[l->next].k;
    return l->at[l->next++].e;
}

/* Counts e, placed or reserved for in this pass, in its tenant's turn: its
 * deficit and its virtual time in the pass, and for a placement the
 * virtual time kept between passes. */
static void pass_charge(pass_tenant *t, double *vt, double *deficit, const gw_ready *e, int placed)
{
    double units = pass_units(e), cost = gw_place_fair_charge(units, t->t ? t->t->weight : 1);
    *deficit -= units;
    *vt += cost;
    if (placed)
        t->f->vt += cost;
}

/* 1 when tenant t may reserve nodes for a job in this pass: always by
 * default, with --fair-reserve-pct while it has some of its allowance left
 * (its first reservation of a pass always). */
static int pass_may_reserve(const gw_sched *s, const pass_tenant *t)
{
    return s->app->cfg.fair_reserve_pct <= 0 || t->reserve_left > 0;
}

/* e, tenant t's, reserved nodes in this pass. By default that counts in
 * its tenant's turn as if e had started (pass_charge); with
 * --fair-reserve-pct it counts against what the tenant may reserve for in
 * the pass instead, and the tenant goes on to its smaller jobs up to its
 * share. */
static void pass_reserved(const gw_sched *s, pass_tenant *t, double *vt, double *deficit,
                          const gw_ready *e)
{
    if (s->app->cfg.fair_reserve_pct > 0)
        t->reserve_left -= pass_units(e);
    else
        pass_charge(t, vt, deficit, e, 0);
}

/* Where each of the pass's nt tenants stands before the next pick: it
 * has an entry left (cand), the score of that entry (head), and it placed
 * all of a full window (ranout: its queue may hold more). With
 * --fair-reserve-pct and the pass's reservations all made (res_full), a
 * tenant that looked at all of a full window and placed nothing has run
 * out too: its jobs fit none of the devices free and could reserve none,
 * and those devices went to tenants past their shares (1,600 placements
 * in a 360 s run at 1,000 nodes); the next pass (a deep one within
 * DEEP_SCAN_MS) reads more of its queue. While reservations are left,
 * the others take what its jobs cannot use (around its reservations):
 * ending the pass for it then left free devices idle until its runs
 * ended, when its queue was deeper than the deepest look. */
static void pass_turns(const gw_sched *s, const pass_tenant *pt, int nt, int window, int res_full,
                       uint8_t *cand, double *head, uint8_t *ranout)
{
    int none_left = s->app->cfg.fair_reserve_pct > 0 && res_full;
    for (int k = 0; k < nt; k++) {
        cand[k] = pt[k].pos < pt[k].end;
        head[k] = cand[k] ? s->ready[pt[k].pos].score : 0;
        ranout[k] = !cand[k] && !pt[k].held_back && (pt[k].placed > 0 || none_left) &&
                    pt[k].end - pt[k].start >= window;
    }
}

/* --fair-preempt: the runs a pass stops to make room for its big jobs,
 * each with the job it makes room for (its job and first node: one whose
 * claim failed stops nothing; "lump" below), its tenant and size. */
#define PREEMPT_MAX 256
typedef struct pass_preempts {
    struct preempt {
        char job_id[37], node_id[37], lump_id[37], lump_node[37];
        int64_t tenant_id;
        double lump_units, target;
    } at[PREEMPT_MAX];
    int n;
} pass_preempts;

/* Sets stop of job_id's run on node_id (a single-node run) to v. mu held. */
static void run_stop_mark(gw_sched *s, const char *node_id, const char *job_id, int v)
{
    sched_node *sn = node_by_id(s, node_id);
    for (int i = 0; sn && i < sn->nruns; i++)
        if (sn->runs[i].stop && strcmp(sn->runs[i].job_id, job_id) == 0)
            sn->runs[i].stop = v;
}

/* 1 when node_id counts a run of job_id. mu held. */
static int node_has_run(gw_sched *s, const char *node_id, const char *job_id)
{
    sched_node *sn = node_by_id(s, node_id);
    for (int i = 0; sn && i < sn->nruns; i++)
        if (strcmp(sn->runs[i].job_id, job_id) == 0)
            return 1;
    return 0;
}

/* e, tenant t's, was placed this pass (claim c, its first node). With
 * --fair-preempt, when e is more than PREEMPT_MIN_SHARE of t's share and
 * t now holds more than its share, t's youngest single-node runs placed before
 * this pass (those of this pass, at now, are not claimed yet) are to stop
 * until it is back at its share (gw_place_preempt_pick; runs already
 * stopping count as stopped): noted in pp and marked stopping (stop 2),
 * stopped once the pass's claims are made (pass_preempt_send). A lump
 * started beside its tenant's other runs held the tenant past its share
 * for as long as they ran (at 1,000 nodes, a weight-1 tenant's gang of
 * its whole share put it at 1.24-1.33 of it over two minutes), which no
 * turn order can give back. */
static void pass_preempt(gw_sched *s, const pass_tenant *t, const gw_ready *e, const gw_claim *c,
                         int64_t now, pass_preempts *pp)
{
    if (!s->app->cfg.fair_preempt || !t->t || pp->n == PREEMPT_MAX ||
        pass_units(e) <= t->target * PREEMPT_MIN_SHARE)
        return;
    gw_preempt_cand *cand = NULL;
    struct victim { sched_run *r; int node; } *who = NULL;
    int n = 0, cap = 0;
    pthread_mutex_lock(&s->mu);
    double over = t->t->units - t->target;
    if (over < 1) {   /* within its share: nothing to stop, no walk of every run */
        pthread_mutex_unlock(&s->mu);
        return;
    }
    for (int k = 0; k < s->nnodes; k++)
        for (int i = 0; i < s->nodes[k].nruns; i++) {
            sched_run *r = &s->nodes[k].runs[i];
            if (r->tenant_id != e->tenant_id || !r->stop)
                continue;
            if (r->stop == 2) {
                over -= r->units;
                continue;
            }
            if (r->start_ms >= now)
                continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                gw_preempt_cand *nc = realloc(cand, sizeof(*nc) * (size_t)cap);
                if (nc)
                    cand = nc;
                struct victim *nw = nc ? realloc(who, sizeof(*nw) * (size_t)cap) : NULL;
                if (!nw)
                    goto out;   /* nothing stopped: the tenant stays past its share a while */
                who = nw;
            }
            cand[n] = (gw_preempt_cand){.start_ms = r->start_ms, .units = r->units};
            who[n++] = (struct victim){r, k};
        }
    uint8_t *take = n && over >= 1 ? malloc((size_t)n) : NULL;
    if (take && gw_place_preempt_pick(cand, n, over, take) > 0)
        for (int i = 0; i < n && pp->n < PREEMPT_MAX; i++) {
            if (!take[i])
                continue;
            struct preempt *p = &pp->at[pp->n++];
            who[i].r->stop = 2;
            memcpy(p->job_id, who[i].r->job_id, 37);
            memcpy(p->node_id, s->nodes[who[i].node].n.id, 37);
            memcpy(p->lump_id, e->job_id, 37);
            memcpy(p->lump_node, c->node_id, 37);
            p->tenant_id = e->tenant_id;
            p->lump_units = pass_units(e);
            p->target = t->target;
        }
    free(take);
out:
    pthread_mutex_unlock(&s->mu);
    free(cand);
    free(who);
}

/* Stops the runs pp noted for lumps that were claimed (the others go on:
 * their marks are taken back): each job marked in PostgreSQL, its node's
 * poll woken to carry the cancel; the run's report queues the job again.
 * One line logged a lump. */
static void pass_preempt_send(gw_sched *s, pass_preempts *pp)
{
    static char jobs[PREEMPT_MAX][37], nodes[PREEMPT_MAX][37];
    static int lump_of[PREEMPT_MAX], marked[PREEMPT_MAX];
    int m = 0;
    if (pp->n == 0)
        return;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < pp->n; i++) {
        const struct preempt *p = &pp->at[i];
        if (!node_has_run(s, p->lump_node, p->lump_id)) {
            run_stop_mark(s, p->node_id, p->job_id, 1);
            continue;
        }
        memcpy(jobs[m], p->job_id, 37);
        memcpy(nodes[m], p->node_id, 37);
        lump_of[m++] = i;
    }
    pthread_mutex_unlock(&s->mu);
    int rc = gw_store_jobs_preempt(s->app->store, jobs, nodes, m, marked);
    if (rc != 0) {
        svc_warn("scheduler: %d runs to preempt could not be marked (%s); the next lump tries "
                 "again", m, strerror(-rc));
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < m; i++)
            run_stop_mark(s, nodes[i], jobs[i], 1);
        pthread_mutex_unlock(&s->mu);
        pp->n = 0;
        return;
    }
    int sent = 0;
    for (int i = 0; i < m; i++) {
        if (marked[i]) {
            gw_leases_wake(s->app->leases, nodes[i], 0);
            sent++;
        }
        const struct preempt *p = &pp->at[lump_of[i]];
        if (i + 1 == m || strcmp(pp->at[lump_of[i + 1]].lump_id, p->lump_id) != 0) {
            svc_info("scheduler: job %s (%.0f devices) took tenant %lld past its share (%.1f): "
                     "%d of its youngest runs preempted (stopped, to be queued again)",
                     p->lump_id, p->lump_units, (long long)p->tenant_id, p->target, sent);
            gw_metrics_preempted(s->app->metrics, sent);
            sent = 0;
        }
    }
    pp->n = 0;
}

/* One placement pass. The heads of every tenant's ready queue are looked
 * at in fair-share order (placement.h): the tenant furthest below its
 * target of devices next, then the least virtual time (placements of this
 * pass counted), within a tenant the most urgent first. Each job that
 * fits goes where gw_place_job puts it (placement.h: best fit where
 * devices are not shared, else the least loaded). A job
 * that fits nowhere now but could once nodes free up reserves the nodes
 * that free first, and its tenant's turn in this pass is counted as if it
 * had started (not between passes: it has not): a tenant whose next jobs
 * are too big for the devices free now thus holds nodes in proportion to
 * its share while they drain, instead of seeing lighter tenants take
 * every device that frees (each pass used to make one reservation, and a
 * tenant of weight 1 got 1.7 times its share in test_scale_sim). With
 * --fair-reserve-pct a reservation does not count in the turn: the tenant
 * goes on to the jobs behind it that fit, up to its share, and reserves
 * for that % of its share a pass at most (pass_reserved). From
 * then on a job goes on a reserved node only when its
 * timeout_s ends before that reservation's start (backfill). A lump
 * (gw_place_fair_defers: more than half its tenant's share, past its
 * deficit) yields while tenants below their share have entries left: it is
 * placed once every window was looked at, if room is left, and neither
 * reserves nor counts in its tenant's turn meanwhile; after --fair-lump-wait-s of
 * that it goes in its tenant's turn.
 * Each tenant's window is PEEK_MIN + free slots / PEEK_PER_FREE entries
 * (PEEK_MAX at most; deeper every DEEP_SCAN_MS); when a tenant below its
 * share placed its whole window, the pass ends before a tenant at its
 * share gets more (gw_place_fair_waits) and the next reads on. Claims go
 * in batches of PEEK_MAX, until no slot is free, every entry was looked
 * at, or the clock reaches until. Returns how many were claimed; *more is
 * 1 when slots were left and some tenant's window was all placed or
 * passed over (its queue may hold more: the caller passes again). */
static int dispatch_pass(gw_sched *s, int64_t until, int *more)
{
    static gw_place_node view[SCHED_MAX_NODES];
    static pass_tenant pt[SCAN_MAX];
    static double vt[SCAN_MAX], deficit[SCAN_MAX], head[SCAN_MAX], target[SCAN_MAX];
    static uint8_t cand[SCAN_MAX], ranout[SCAN_MAX];
    static uint8_t mask[SCHED_MAX_NODES], allowed[SCHED_MAX_NODES];
    static int64_t held[SCHED_MAX_NODES], scratch[SCHED_MAX_NODES];
    static int64_t shape_at[FREE_SHAPES][SCHED_MAX_NODES];
    gw_claim batch[PEEK_MAX];
    const char *members[PEEK_MAX];
    static pass_lumps lumps;
    static pass_preempts preempts;
    int dispatched = 0, nb = 0, n = 0, cut = 0;
    pass_res res = {.held = held, .allowed = allowed, .mask = mask, .scratch = scratch};
    for (int i = 0; i < FREE_SHAPES; i++)
        res.shapes[i].at = shape_at[i];
    int64_t mono = svc_now_mono_ms(), now = svc_now_wall_ms();
    pthread_mutex_lock(&s->mu);
    int free_slot = nodes_view(s, view, &res.gen);
    pthread_mutex_unlock(&s->mu);
    int per_tenant = PEEK_MIN + free_slot / PEEK_PER_FREE;
    if (per_tenant > PEEK_MAX)
        per_tenant = PEEK_MAX;
    if (mono >= s->next_deep_ms) {
        per_tenant = SCAN_MAX / 8;
        s->next_deep_ms = mono + DEEP_SCAN_MS;
    }
    *more = 0;
    if (!free_slot || gw_queue_peek(s->app->queue, per_tenant, s->ready, SCAN_MAX, &n) != 0)
        return 0;
    int nt = pass_tenants(s, view, n, pt, vt, deficit, target, mono);
    if (nt < 0)
        return 0;
    /* each tenant's share of the peek (gw_queue_peek): a tenant given all
     * of it may have more queued */
    int window = nt > 0 && SCAN_MAX / nt < per_tenant ? SCAN_MAX / nt : per_tenant;
    if (window < 1)
        window = 1;
    memset(held, 0, sizeof(held[0]) * (size_t)s->nnodes);
    lumps.n = lumps.next = 0;
    /* on device-seconds, deficits rank against the targets */
    const double *ranked = s->app->cfg.fair_repay_s > 0 ? target : NULL;
    while (free_slot && !s->stop && svc_now_mono_ms() < until) {
        pass_turns(s, pt, nt, window, res.n >= RESERVE_MAX, cand, head, ranout);
        int k = gw_place_fair_pick(deficit, ranked, vt, head, cand, nt);
        /* a tenant below its share ran out of window: the next pass reads
         * more of its queue before anyone past its share gets more (the
         * window's tenants had placements: each such pass makes progress) */
        if (k >= 0 && gw_place_fair_waits(deficit, ranout, nt, k))
            break;
        const gw_ready *e = pass_entry(s, pt, &lumps, &k);
        if (!e)
            break;
        if (pass_over(s, &lumps, pt, nt, k, e, deficit, cand, mono))
            continue;
        int how = pass_place(s, e, view, &batch[nb], now, &res, &free_slot,
                             pass_may_reserve(s, &pt[k]));
        if (how == PASS_RESERVED)
            pass_reserved(s, &pt[k], &vt[k], &deficit[k], e);
        if (how != PASS_PLACED)
            continue;
        /* its units are counted in its tenant's (place_count); the pass
         * goes on from the deficit the tenant had at its start */
        pass_charge(&pt[k], &vt[k], &deficit[k], e, 1);
        lump_placed(s, pt, k, e, mono);
        pass_preempt(s, &pt[k], e, &batch[nb], now, &preempts);
        pt[k].placed++;
        /* A tenant made since the last refresh had its quota asked of
         * PostgreSQL (running_allowed), which does not see this pass's
         * claims until they are made: one job of it a pass, then (two
         * submitted together once both started under max_running 1); the
         * next pass follows at once (*more). */
        if (pt[k].t) {
            pt[k].t->running++;   /* counted at placement; the next refresh corrects */
        } else if (pt[k].pos < pt[k].end) {
            pt[k].pos = pt[k].end;
            cut = 1;
        }
        members[nb++] = e->member;
        if (nb == PEEK_MAX) {
            int got = flush_batch(s, batch, members, &nb);
            if (got < 0) {
                pass_preempt_send(s, &preempts);
                return dispatched;
            }
            dispatched += got;
        }
    }
    int got = flush_batch(s, batch, members, &nb);
    pass_preempt_send(s, &preempts);
    /* a tenant's window ran out while slots were left: it may have more */
    *more = free_slot && cut;
    for (int k = 0; free_slot && k < nt; k++)
        if (!pt[k].held_back && pt[k].end - pt[k].start >= window)
            *more = 1;
    return got < 0 ? dispatched : dispatched + got;
}

/* Waits on cv (mu held) until signalled or ms pass. */
static void cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(cv, mu, &ts);
}

/* A burst of submits into a small jobs table leaves the prepared
 * statements on plans made for the small table (generic plans: a
 * sequential scan of jobs in the claim and the results, 13-36 ms a call
 * at 40,000 jobs in the scale bench) until autovacuum analyzes it, within
 * its one-minute nap. The scheduler's gateway looks every 10 s and
 * analyzes once the table doubled (--analyze-min-rows). */
static void analyze_if_grown(gw_sched *s)
{
    int64_t changed = 0, expected = 0, running = 0;
    if (s->app->cfg.analyze_min_rows <= 0)
        return; /* left to autovacuum: nothing to look at */
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->ntenants; i++)
        running += s->tenants[i].running;
    pthread_mutex_unlock(&s->mu);
    int rc = gw_store_jobs_analyze_if_grown(s->app->store, s->app->cfg.analyze_min_rows, running,
                                            &changed, &expected);
    if (rc == 1)
        svc_info("scheduler: analyzed jobs (%lld rows changed since its statistics): plans follow "
                 "its size", (long long)changed);
    else if (rc == 2)
        svc_info("scheduler: analyzed jobs (%lld running, its statistics expected %lld): plans "
                 "follow the running jobs", (long long)running, (long long)expected);
}

static void *sched_main(void *arg)
{
    gw_sched *s = arg;
    int64_t next_lock = 0, next_reap = 0, next_reconcile = 0, next_promote = 0, next_pass = 0,
            next_analyze = 0;
    while (!s->stop) {
        int64_t now = svc_now_mono_ms();
        pthread_mutex_lock(&s->mu);
        int serving = s->serving;
        pthread_mutex_unlock(&s->mu);
        /* Not before the API serves: nodes must be able to reach this
         * gateway from the moment it judges their heartbeats. */
        if (serving && now >= next_lock) {
            int held = gw_queue_lock(s->app->queue, LOCK_NAME, s->owner, LOCK_TTL_MS) == 1;
            if (held && !s->leader) {
                svc_info("scheduler: this gateway holds the scheduler lock (%s)", s->owner);
                s->leader = 1;
                s->leader_since_ms = now;
                /* The reconciler below puts the old set's jobs in their
                 * tenants' sets. */
                gw_queue_forget_legacy(s->app->queue);
                nodes_refresh(s);
                next_reconcile = 0;
                gw_leases_set_leading(s->app->leases, 1);
            } else if (!held && s->leader) {
                svc_warn("scheduler: lost the scheduler lock; dispatching stops here");
                s->leader = 0;
                gw_leases_set_leading(s->app->leases, 0);
            }
            next_lock = now + LOCK_TTL_MS / 5;
        }
        if (s->leader) {
            pthread_mutex_lock(&s->mu);
            int changed = s->nodes_changed;
            s->nodes_changed = 0;
            pthread_mutex_unlock(&s->mu);
            if (changed)
                nodes_refresh(s);
            if (now >= next_reap) {
                nodes_refresh(s);
                tenants_refresh(s);
                reap(s);
                next_reap = now + 1000;
            }
            if (now >= next_reconcile)
                next_reconcile = reconcile(s) ? now + (int64_t)s->app->cfg.reconcile_interval_s * 1000
                                              : now + 50;
            if (now >= next_analyze) {
                analyze_if_grown(s);
                next_analyze = now + ANALYZE_CHECK_MS;
            }
            if (now >= next_promote) {
                int due = 0;
                gw_queue_promote_due(s->app->queue, &due);
                next_promote = now + PROMOTE_MS;
            }
            /* A pass walks the queue until no slot is free; another follows
             * only when it filled a whole window (more may fit than it saw).
             * Back to the top for the lock's renewal in time, however long
             * the queue keeps the passes busy. */
            if (now >= next_pass) {
                int got, claimed = 0, more = 0;
                while (!s->stop && svc_now_mono_ms() < next_lock) {
                    tenants_if_changed(s);
                    if ((got = dispatch_pass(s, next_lock, &more)) < 0)
                        break;
                    claimed += got;
                    if (got < PEEK_MAX && !(more && got > 0))
                        break;
                }
                if (claimed > 0)
                    next_pass = svc_now_mono_ms() + PASS_GAP_MS;
            }
        }
        pthread_mutex_lock(&s->mu);
        /* A wake before the gap has passed is kept for the pass at its end. */
        int64_t t = svc_now_mono_ms();
        if (!s->stop && (!s->wake || t < next_pass))
            cond_wait_ms(&s->cv, &s->mu, s->wake ? next_pass - t : 50);
        if (svc_now_mono_ms() >= next_pass)
            s->wake = 0;
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

static void sched_wake_hook(void *arg)
{
    gw_sched_wake(arg);
}

gw_sched *gw_sched_start(gw_app *app)
{
    gw_sched *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->app = app;
    char host[64] = "gateway", rnd[9];
    gethostname(host, sizeof(host) - 1);
    svc_random_hex(rnd, 4);
    snprintf(s->owner, sizeof(s->owner), "%s:%d:%s", host, (int)getpid(), rnd);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, sched_main, s) != 0) {
        free(s);
        return NULL;
    }
    /* a job requeued anywhere (outcome.c) wakes this scheduler */
    gw_queue_on_push(app->queue, sched_wake_hook, s);
    return s;
}

void gw_sched_stop(gw_sched *s)
{
    if (!s)
        return;
    gw_queue_on_push(s->app->queue, NULL, NULL);
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    free(s->tenants);
    free(s->counts);
    free(s->ended);
    free(s->vts);
    for (int k = 0; k < SCHED_MAX_NODES; k++) {
        free(s->nodes[k].ends);
        free(s->nodes[k].runs);
    }
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
