/* placement.c — the scheduler's choices (placement.h): which nodes and
 * devices a job gets, when a job that fits nowhere may start, and whose
 * turn it is among tenants. */
#include "placement.h"
#include "svc_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The backends placement compares for every node of every job it looks
 * at: a string the caller passed through gw_place_backend is one of these
 * pointers, compared without strcmp (perf put strcmp at a quarter of the
 * scheduler's time at 300 nodes); any other string still compares right. */
static const char BACKEND_CUDA[] = "cuda", BACKEND_CPU[] = "cpu", BACKEND_ANY[] = "any";

const char *gw_place_backend(const char *b)
{
    if (!b)
        return b;
    return strcmp(b, BACKEND_CUDA) == 0  ? BACKEND_CUDA
           : strcmp(b, BACKEND_CPU) == 0 ? BACKEND_CPU
           : strcmp(b, BACKEND_ANY) == 0 ? BACKEND_ANY
                                         : b;
}

static int interned(const char *b)
{
    return b == BACKEND_CUDA || b == BACKEND_CPU || b == BACKEND_ANY;
}

/* 1 when backend b is the named one (one of the constants above). */
static int backend_is(const char *b, const char *name)
{
    return b == name || (!interned(b) && strcmp(b, name) == 0);
}

static int backend_ok(const gw_place_node *c, const char *want)
{
    if (want == c->backend || backend_is(want, BACKEND_ANY))
        return 1;
    return !(interned(want) && interned(c->backend)) && strcmp(want, c->backend) == 0;
}

/* Devices a part of r takes on c: none on a CPU node (its "gpus" are
 * ranks, threads of the run) nor for a task that asks for none (the node
 * passes it no device), else gpus (at least 1: a kernel on a GPU node
 * runs on one). */
static int devices_needed(const gw_place_node *c, const gw_place_req *r)
{
    if (!backend_is(c->backend, BACKEND_CUDA) || c->ngpus <= 0 || (r->image && r->gpus <= 0))
        return 0;
    return r->gpus > 0 ? r->gpus : 1;
}

static int gpu_fits(const gw_place_gpu *g, const gw_place_req *r)
{
    return r->gpu_mem_mb <= 0 || g->mem_mb <= 0 || g->mem_mb >= r->gpu_mem_mb;
}

static int image_listed(const gw_place_node *c, uint32_t image)
{
    for (int i = 0; i < c->nimages; i++)
        if (c->images[i] == image)
            return 1;
    return 0;
}

int gw_place_image_listed(const gw_place_node *nodes, int n, uint32_t image)
{
    for (int i = 0; i < n; i++)
        if (nodes[i].tasks && nodes[i].available && image_listed(&nodes[i], image))
            return 1;
    return 0;
}

/* A task goes to a node with an engine, one that lists its image when
 * any does (a node that does not list its images may have it). */
static int task_ok(const gw_place_node *c, const gw_place_req *r)
{
    if (!r->image)
        return 1;
    if (!c->tasks)
        return 0;
    return !r->image_anywhere || c->nimages < 0 || image_listed(c, r->image);
}

int gw_place_capable(const gw_place_node *c, const gw_place_req *r)
{
    if (!c->available || c->slots <= 0 || !backend_ok(c, r->backend) || !task_ok(c, r))
        return 0;
    /* A job that asks for CUDA needs the devices; one that may run
     * anywhere takes what a GPU node has when it lands on one. */
    if (backend_is(r->backend, BACKEND_CUDA) && c->ngpus < (r->gpus > 0 ? r->gpus : 1))
        return 0;
    int need = devices_needed(c, r), fit = 0;
    if (need > c->ngpus)
        return 0;
    for (int g = 0; g < c->ngpus && g < GW_PLACE_MAX_GPUS; g++)
        fit += gpu_fits(&c->gpu[g], r);
    return fit >= need;
}

/* 1 when c's devices hold one run each: a GPU node with no more slots
 * than devices (its operator did not ask for sharing). */
static int devices_exclusive(const gw_place_node *c)
{
    return backend_is(c->backend, BACKEND_CUDA) && c->ngpus > 0 && c->slots <= c->ngpus;
}

/* The idle fitting devices c would have left once a part of r took its
 * own: -1 where devices are shared or r takes none (the node fits while
 * it has a free slot), -2 where too few are idle (it does not fit now). */
static int devices_left(const gw_place_node *c, const gw_place_req *r)
{
    int need = devices_needed(c, r), idle = 0;
    if (need == 0 || !devices_exclusive(c))
        return -1;
    for (int g = 0; g < c->ngpus && g < GW_PLACE_MAX_GPUS; g++)
        idle += c->gpu[g].load == 0 && gpu_fits(&c->gpu[g], r);
    return idle >= need ? idle - need : -2;
}

/* 1 when a is the better node for a part, a_left and b_left their
 * devices_left: where both hold devices one run each, the one with fewer
 * idle devices left (best fit: a node the small jobs fill leaves whole
 * nodes to the jobs and gangs that need all of one's devices, where
 * spreading 1-GPU jobs over the least loaded nodes kept none whole); then
 * lower running/slots (compared without division), then more free slots,
 * then the first name. */
static int node_better(const gw_place_node *a, int a_left, const gw_place_node *b, int b_left)
{
    if (a_left >= 0 && b_left >= 0 && a_left != b_left)
        return a_left < b_left;
    long lhs = (long)a->running * b->slots, rhs = (long)b->running * a->slots;
    if (lhs != rhs)
        return lhs < rhs;
    int af = a->slots - a->running, bf = b->slots - b->running;
    if (af != bf)
        return af > bf;
    return strcmp(a->name, b->name) < 0;
}

static int gpu_better(const gw_place_gpu *a, int ai, const gw_place_gpu *b, int bi)
{
    if (a->load != b->load)
        return a->load < b->load;
    if (a->util != b->util)
        return (a->util < 0 ? 101 : a->util) < (b->util < 0 ? 101 : b->util);
    return ai < bi;
}

/* Fills ids with the need least loaded fitting devices of c, lowest index
 * first among equals. */
static void pick_devices(const gw_place_node *c, const gw_place_req *r, int need, int *ids)
{
    uint8_t used[GW_PLACE_MAX_GPUS] = {0};
    for (int k = 0; k < need; k++) {
        int best = -1;
        for (int g = 0; g < c->ngpus && g < GW_PLACE_MAX_GPUS; g++)
            if (!used[g] && gpu_fits(&c->gpu[g], r) &&
                (best < 0 || gpu_better(&c->gpu[g], g, &c->gpu[best], best)))
                best = g;
        used[best] = 1;
        ids[k] = best;
    }
}

int gw_place_job(const gw_place_node *nodes, int n, const gw_place_req *r, const uint8_t *allowed,
                 gw_place_pick *out)
{
    int want = r->nodes > 1 ? r->nodes : 1;
    if (want > GW_PLACE_MAX_NODES)
        return -1;
    memset(out, 0, sizeof(*out));
    /* The want best nodes with a free slot, kept in order (insertion),
     * with their devices_left in left. */
    int left[GW_PLACE_MAX_NODES];
    for (int i = 0; i < n; i++) {
        const gw_place_node *c = &nodes[i];
        if ((allowed && !allowed[i]) || c->running >= c->slots || !gw_place_capable(c, r))
            continue;
        int l = devices_left(c, r);
        if (l == -2)
            continue;
        int at = out->nnodes;
        while (at > 0 && node_better(c, l, &nodes[out->node[at - 1]], left[at - 1]))
            at--;
        if (at >= want)
            continue;
        int last = out->nnodes < want ? out->nnodes : want - 1;
        memmove(&out->node[at + 1], &out->node[at], sizeof(int) * (size_t)(last - at));
        memmove(&left[at + 1], &left[at], sizeof(int) * (size_t)(last - at));
        out->node[at] = i;
        left[at] = l;
        if (out->nnodes < want)
            out->nnodes++;
    }
    if (out->nnodes < want)
        return -1;
    /* Every part has the same devices per node; CPU nodes none. A gang
     * mixing CPU and GPU nodes (backend "any") takes devices where it
     * lands on GPUs: ngpu is the most any part got. */
    for (int k = 0; k < out->nnodes; k++) {
        const gw_place_node *c = &nodes[out->node[k]];
        int need = devices_needed(c, r);
        pick_devices(c, r, need, out->gpu[k]);
        if (need > out->ngpu)
            out->ngpu = need;
    }
    return 0;
}

/* Sorts the few times of a node's devices (at most GW_PLACE_MAX_GPUS). */
static void sort_few(int64_t *t, int n)
{
    for (int i = 1; i < n; i++) {
        int64_t x = t[i];
        int j = i;
        for (; j > 0 && t[j - 1] > x; j--)
            t[j] = t[j - 1];
        t[j] = x;
    }
}

/* The k-th smallest (0-based) of the n times t, which it reorders
 * (quickselect: linear on average, where sorting every node's time for
 * each reservation was a quarter of the scheduler's time). */
static int64_t select_kth(int64_t *t, int n, int k)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int64_t pivot = t[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (t[i] < pivot)
                i++;
            while (t[j] > pivot)
                j--;
            if (i <= j) {
                int64_t x = t[i];
                t[i++] = t[j];
                t[j--] = x;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return t[k];
    }
    return t[k];
}

/* When c has a free slot by its runs' ends: now when it has one, else the
 * end of the run that frees the first slot; INT64_MAX when that run's end
 * is not known. Where devices are not shared, no earlier than enough idle
 * fitting devices for r by their runs' ends. */
static int64_t free_at(const gw_place_node *c, const gw_place_req *r, int64_t now)
{
    int64_t at = now;
    if (c->running >= c->slots) {
        int k = c->running - c->slots;   /* runs that must end first, minus one */
        if (k >= c->nends)
            return INT64_MAX;
        at = c->ends[k] > now ? c->ends[k] : now;
    }
    int need = devices_needed(c, r), m = 0;
    if (need == 0 || !devices_exclusive(c))
        return at;
    int64_t dev[GW_PLACE_MAX_GPUS];
    for (int g = 0; g < c->ngpus && g < GW_PLACE_MAX_GPUS; g++)
        if (gpu_fits(&c->gpu[g], r))
            dev[m++] = c->gpu[g].load == 0   ? now
                       : c->gpu[g].end_ms > 0 ? c->gpu[g].end_ms
                                              : INT64_MAX;
    if (m < need)
        return INT64_MAX;
    sort_few(dev, m);
    int64_t d = dev[need - 1] > now ? dev[need - 1] : now;
    return d > at ? d : at;
}

int64_t gw_place_free_time(const gw_place_node *c, const gw_place_req *r, int64_t now)
{
    return gw_place_capable(c, r) ? free_at(c, r, now) : -1;
}

void gw_place_free_times(const gw_place_node *nodes, int n, const gw_place_req *r, int64_t now,
                         int64_t *at)
{
    for (int i = 0; i < n; i++)
        at[i] = gw_place_free_time(&nodes[i], r, now);
}

int64_t gw_place_reserve_at(const int64_t *at, int n, int want, const int64_t *held,
                            uint8_t *reserved, int64_t *times)
{
    int m = 0;
    memset(reserved, 0, (size_t)n);
    /* times: those of the nodes not held, for the selection */
    for (int i = 0; i < n; i++)
        if (at[i] >= 0 && (held == NULL || held[i] == 0))
            times[m++] = at[i];
    if (m < want)
        return -1;
    int64_t start = select_kth(times, m, want - 1);
    /* The nodes free by start, the earliest first, up to want of them
     * (at equal times, the view's order). */
    int taken = 0;
    for (int pass = 0; pass < 2 && taken < want; pass++)
        for (int i = 0; i < n && taken < want; i++) {
            if (reserved[i] || at[i] < 0 || (held && held[i] != 0))
                continue;
            if ((pass == 0 && at[i] < start) || (pass == 1 && at[i] == start)) {
                reserved[i] = 1;
                taken++;
            }
        }
    return start;
}

int64_t gw_place_reserve(const gw_place_node *nodes, int n, const gw_place_req *r, int64_t now,
                         const int64_t *held, uint8_t *reserved)
{
    /* at[i]: when node i frees (-1: it cannot take r); then the times of
     * the nodes not held */
    int64_t *at = malloc(sizeof(*at) * 2 * (size_t)(n ? n : 1));
    if (!at) {
        memset(reserved, 0, (size_t)n);
        return -1;
    }
    gw_place_free_times(nodes, n, r, now, at);
    int64_t start = gw_place_reserve_at(at, n, r->nodes > 1 ? r->nodes : 1, held, reserved, at + n);
    free(at);
    return start;
}

void gw_place_backfill_mask(int n, const int64_t *held, int64_t now, int timeout_s,
                            uint8_t *allowed)
{
    int64_t end = now + (int64_t)timeout_s * 1000;
    for (int i = 0; i < n; i++)
        allowed[i] = held[i] == 0 || (held[i] != INT64_MAX && end <= held[i]);
}

/* A deficit in whole units, rounded up: tenants within the same unit of
 * their targets are level (the virtual time decides), which is what lets
 * small clusters share fractions of a unit over time. */
static double deficit_units(double d)
{
    return ceil(d - 1e-9);
}

/* Tenant i's deficit as the pick compares it: in whole units, or with
 * targets, where a target is more than FAIR_WHOLE_UNITS, in parts of
 * FAIR_WHOLE_UNITS of it (a tenant 8 units short of a target of 16 is as
 * far behind as one 32 short of 64). Whole units alone hand what is left
 * over to the tenants of small targets, each of which a unit takes
 * furthest; parts of the target alone would not let two tenants of a
 * fraction of a unit each share one over time. */
#define FAIR_WHOLE_UNITS 8.0
static double deficit_rank(const double *deficit, const double *target, int i)
{
    double d = deficit_units(deficit[i]);
    return target && target[i] > FAIR_WHOLE_UNITS ? d * FAIR_WHOLE_UNITS / target[i] : d;
}

int gw_place_fair_pick(const double *deficit, const double *target, const double *vtime,
                       const double *head, const uint8_t *candidate, int k)
{
    int best = -1;
    for (int i = 0; i < k; i++) {
        if (!candidate[i])
            continue;
        if (best < 0) {
            best = i;
            continue;
        }
        double di = deficit_rank(deficit, target, i), db = deficit_rank(deficit, target, best);
        if (di > db || (di == db && (vtime[i] < vtime[best] ||
                                     (vtime[i] == vtime[best] && head[i] < head[best]))))
            best = i;
    }
    return best;
}

int gw_place_fair_waits(const double *deficit, const uint8_t *cut, int k, int pick)
{
    if (pick < 0 || deficit_units(deficit[pick]) > 0)
        return 0;
    for (int j = 0; j < k; j++)
        if (cut[j] && deficit_units(deficit[j]) > 0)
            return 1;
    return 0;
}

int gw_place_fair_lump_size(double units, double target)
{
    return units > target / 2;
}

int gw_place_preempt_pick(const gw_preempt_cand *c, int n, double over, uint8_t *take)
{
    int taken = 0;
    for (int i = 0; i < n; i++)
        take[i] = 0;
    /* n is a tenant's runs (hundreds at most): the youngest left, each time */
    for (;;) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (!take[i] && c[i].units > 0 && taken + c[i].units <= over &&
                (best < 0 || c[i].start_ms > c[best].start_ms))
                best = i;
        if (best < 0)
            return taken;
        take[best] = 1;
        taken += c[best].units;
    }
}

int gw_place_fair_defers(const double *deficit, const uint8_t *candidate, int k, int pick,
                         double units, double target)
{
    if (pick < 0 || units <= deficit_units(deficit[pick]) || !gw_place_fair_lump_size(units, target))
        return 0;
    for (int j = 0; j < k; j++)
        if (j != pick && candidate[j] && deficit_units(deficit[j]) > 0)
            return 1;
    return 0;
}

/* job_id's live entry, or NULL; *reuse (when not NULL) gets the first
 * entry of its probe that may take it: one not held for forget_ms, or never
 * used (which ends a probe: entries are never emptied). */
static struct gw_lump *lump_find(gw_lumps *t, const char *job_id, int64_t mono, int64_t forget_ms,
                                 struct gw_lump **reuse)
{
    uint32_t h = svc_fnv1a(job_id);
    for (int i = 0; i < GW_LUMP_SLOTS; i++) {
        struct gw_lump *l = &t->at[(h + (uint32_t)i) % GW_LUMP_SLOTS];
        int stale = !l->since || mono - l->seen >= forget_ms;
        if (!stale && strcmp(l->job_id, job_id) == 0)
            return l;
        if (stale && reuse && !*reuse)
            *reuse = l;
        if (!l->since)
            break;
    }
    return NULL;
}

int gw_lumps_waited(gw_lumps *t, const char *job_id, int64_t mono, int64_t wait_ms,
                    int64_t forget_ms)
{
    struct gw_lump *reuse = NULL, *l = lump_find(t, job_id, mono, forget_ms, &reuse);
    if (l) {
        l->seen = mono;
        return mono - l->since >= wait_ms;
    }
    if (!reuse)
        return 1;
    snprintf(reuse->job_id, sizeof reuse->job_id, "%s", job_id);
    reuse->since = reuse->seen = mono > 0 ? mono : 1;
    return 0;
}

void gw_lumps_placed(gw_lumps *t, const char *job_id, int64_t mono, int64_t forget_ms)
{
    struct gw_lump *l = lump_find(t, job_id, mono, forget_ms, NULL);
    if (l)
        l->seen = mono - forget_ms;
}

double gw_place_fair_target(double room, double weight, double wsum)
{
    return wsum > 0 ? room * (weight > 0 ? weight : 1) / wsum : 0;
}

double gw_place_fair_charge(double units, double weight)
{
    return units / (weight > 0 ? weight : 1);
}

double gw_place_fair_owed(double owed, double target, double units, double dt, double repay,
                          double half_life)
{
    if (dt <= 0)
        return owed;
    owed = owed * exp2(-dt / half_life) + (target - units) * dt;
    return owed > target * repay ? target * repay : owed;
}

double gw_place_fair_deficit(double target, double units, double owed, double repay)
{
    return target - units + (repay > 0 ? owed / repay : 0);
}

int gw_place(const gw_place_node *nodes, int n, const char *backend, int gpus)
{
    gw_place_req r = {.backend = backend, .gpus = gpus, .nodes = 1};
    gw_place_pick p;
    return gw_place_job(nodes, n, &r, NULL, &p) == 0 ? p.node[0] : -1;
}
