/* scheduler.c — the scheduler loop, placement, and the reaper's duties (node
 * expiry, re-queueing the jobs of lost nodes, rebuilding the ready queue).
 * Runs only while this gateway holds the scheduler lock in Redis; every
 * other replica just serves the API. Run tracking is in track.c. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "limits.h"
#include "scheduler_int.h"
#include "svc_log.h"
#include "svc_util.h"

#define LOCK_NAME "kowloon:scheduler"
#define LOCK_TTL_MS 5000
#define PEEK_MAX 64
/* Ready entries one pass looks at, at most: jobs no free slot fits (a
 * backend no node offers, a tenant at its running quota) are passed over,
 * so that they cannot hold back the jobs behind them. */
#define SCAN_MAX 4096
/* A pass runs on every submit; only the first window is read each time,
 * the deeper ones at most this often. */
#define DEEP_SCAN_MS 200

int gw_place(const gw_place_node *nodes, int n, const char *backend, int gpus)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        const gw_place_node *c = &nodes[i];
        if (!c->available || c->running >= c->slots)
            continue;
        if (strcmp(backend, "any") != 0 && strcmp(backend, c->backend) != 0)
            continue;
        if (strcmp(backend, "cuda") == 0 && c->ngpus < gpus)
            continue;
        if (best < 0) {
            best = i;
            continue;
        }
        const gw_place_node *b = &nodes[best];
        /* running/slots compared without division. */
        long lhs = (long)c->running * b->slots, rhs = (long)b->running * c->slots;
        int c_free = c->slots - c->running, b_free = b->slots - b->running;
        if (lhs < rhs || (lhs == rhs && (c_free > b_free ||
                                          (c_free == b_free && strcmp(c->name, b->name) < 0))))
            best = i;
    }
    return best;
}

void gw_sched_wake(gw_sched *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->wake = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void gw_sched_nodes_changed(gw_sched *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->nodes_changed = 1;
    s->wake = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Reloads the node table from PostgreSQL, keeping back-off deadlines. */
static void nodes_refresh(gw_sched *s)
{
    gw_node *list;
    int n;
    if (gw_store_nodes_load(s->app->store, &list, &n) != 0)
        return;
    pthread_mutex_lock(&s->mu);
    sched__node fresh[SCHED_MAX_NODES];
    int m = 0;
    for (int i = 0; i < n && m < SCHED_MAX_NODES; i++, m++) {
        fresh[m].n = list[i];
        fresh[m].avoid_until_ms = 0;
        for (int j = 0; j < s->nnodes; j++)
            if (strcmp(s->nodes[j].n.id, list[i].id) == 0)
                fresh[m].avoid_until_ms = s->nodes[j].avoid_until_ms;
    }
    if (n > SCHED_MAX_NODES)
        svc_warn("scheduler: %d nodes are up; placing on the %d with the latest heartbeats",
                 n, SCHED_MAX_NODES);
    memcpy(s->nodes, fresh, sizeof(fresh[0]) * (size_t)m);
    s->nnodes = m;
    pthread_mutex_unlock(&s->mu);
    free(list);
}

static void reattach(gw_sched *s);

/* Marks silent nodes down and puts their running jobs back in the queue
 * (or fails them with node_lost when their attempts are spent), then
 * follows any running job that has no tracker here (its tracker's last
 * transition was lost with an asynchronous commit, or it ended early). */
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
    gw_dispatch *lost;
    int n;
    if (gw_store_jobs_on_down_nodes(s->app->store, &lost, &n) != 0)
        return;
    for (int i = 0; i < n; i++) {
        char msg[256];
        snprintf(msg, sizeof(msg), "node %s was lost while running attempt %d",
                 lost[i].node_name, lost[i].attempt);
        sched__requeue(s, lost[i].job_id, lost[i].attempt, 0, "node_lost", msg);
    }
    free(lost);
    if (marked || n)
        nodes_refresh(s);
    reattach(s);
}

/* Re-adds to Redis every job PostgreSQL says is queued: after a Redis
 * restart or FLUSHALL, or a crash between commit and enqueue. */
static void reconcile(gw_sched *s)
{
    gw_queued *list;
    int n, added = 0;
    if (gw_store_jobs_queued(s->app->store, &list, &n) != 0)
        return;
    if (n && gw_queue_push_missing(s->app->queue, list, n, &added) == 0 && added)
        svc_warn("ready queue: re-enqueued %d queued job(s) missing from Redis", added);
    free(list);
}

/* After taking the scheduler role: follow every run PostgreSQL says is on
 * a node, so a restarted gateway collects results it did not see. */
static void reattach(gw_sched *s)
{
    gw_dispatch *runs;
    int n;
    if (gw_store_jobs_running(s->app->store, &runs, &n) != 0)
        return;
    int attached = 0;
    for (int i = 0; i < n; i++)
        attached += sched__track(s, &runs[i], 0) == 0;
    free(runs);
    if (attached)
        svc_info("scheduler: re-attached to %d running job(s)", attached);
}

/* The placement view of the nodes; 1 when some node has a free slot. */
static int nodes_view(gw_sched *s, gw_place_node *view, int64_t now)
{
    int free_slot = 0;
    for (int k = 0; k < s->nnodes; k++) {
        const sched__node *sn = &s->nodes[k];
        view[k] = (gw_place_node){sn->n.name, sn->n.backend, sn->n.slots,
                                  sched__running_on(s, sn->n.id), sn->n.ngpus,
                                  sn->n.up && !sn->n.draining && sn->avoid_until_ms <= now};
        free_slot |= view[k].available && view[k].running < view[k].slots;
    }
    return free_slot;
}

/* One placement pass: walks the ready queue from the most urgent entry and
 * dispatches each job that some free slot fits, until no slot is free, the
 * queue ends, SCAN_MAX entries were looked at, or the clock reaches until
 * (the scheduler lock wants renewing). Returns how many were dispatched. */
static int dispatch_pass(gw_sched *s, int64_t until)
{
    gw_ready ready[PEEK_MAX];
    gw_place_node view[SCHED_MAX_NODES];
    int dispatched = 0, passed = 0, scanned = 0;
    int64_t now = svc_now_mono_ms();
    pthread_mutex_lock(&s->mu);
    int free_slot = nodes_view(s, view, now);
    pthread_mutex_unlock(&s->mu);
    if (!free_slot)
        return 0;
    while (!s->stop && scanned < SCAN_MAX) {
        int n = 0;
        if (scanned == PEEK_MAX) {
            if (now < s->next_deep_ms)
                break;
            s->next_deep_ms = now + DEEP_SCAN_MS;
        }
        /* Entries taken below leave the set; the ones passed over stay, so
         * the next window starts after them. */
        if (gw_queue_peek(s->app->queue, passed, ready, PEEK_MAX, &n) != 0 || n == 0)
            break;
        scanned += n;
        for (int i = 0; i < n && !s->stop && free_slot && svc_now_mono_ms() < until; i++) {
            char node_id[37];
            pthread_mutex_lock(&s->mu);
            nodes_view(s, view, now);
            int pick = gw_place(view, s->nnodes, ready[i].backend, ready[i].gpus);
            if (pick >= 0)
                memcpy(node_id, s->nodes[pick].n.id, sizeof(node_id));
            pthread_mutex_unlock(&s->mu);
            /* A job no free slot fits, or whose tenant is at its running
             * quota, waits; the jobs behind it go ahead. */
            if (pick < 0 || !gw_limits_running_allowed(s->app, ready[i].job_id)) {
                passed++;
                continue;
            }
            if (gw_queue_take(s->app->queue, ready[i].member) == 1) {
                gw_dispatch d;
                int rc = gw_store_job_claim(s->app->store, ready[i].job_id, node_id, &d);
                /* -EAGAIN: cancelled, or already running; nothing to dispatch.
                 * Another error: PostgreSQL is unavailable; the job is still
                 * queued there, and the reconciler puts it back in Redis
                 * with its own priority. */
                if (rc != 0 && rc != -EAGAIN)
                    return dispatched;
                if (rc == 0 && sched__track(s, &d, 1) == 0)
                    dispatched++;
            }
            pthread_mutex_lock(&s->mu);
            free_slot = nodes_view(s, view, now);
            pthread_mutex_unlock(&s->mu);
        }
        if (n < PEEK_MAX || !free_slot || svc_now_mono_ms() >= until)
            break;
    }
    return dispatched;
}

static void *sched_main(void *arg)
{
    gw_sched *s = arg;
    int64_t next_lock = 0, next_reap = 0, next_reconcile = 0;
    while (!s->stop) {
        int64_t now = svc_now_mono_ms();
        if (now >= next_lock) {
            int held = gw_queue_lock(s->app->queue, LOCK_NAME, s->owner, LOCK_TTL_MS) == 1;
            if (held && !s->leader) {
                svc_info("scheduler: this gateway holds the scheduler lock (%s)", s->owner);
                s->leader = 1;
                s->leader_since_ms = now;
                nodes_refresh(s);
                reattach(s);
                next_reconcile = 0;
            } else if (!held && s->leader) {
                svc_warn("scheduler: lost the scheduler lock; dispatching stops here");
                s->leader = 0;
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
                reap(s);
                next_reap = now + 1000;
            }
            if (now >= next_reconcile) {
                reconcile(s);
                next_reconcile = now + (int64_t)s->app->cfg.reconcile_interval_s * 1000;
            }
            int due = 0;
            gw_queue_promote_due(s->app->queue, &due);
            /* Back to the top for the lock's renewal in time, however long
             * the queue keeps the passes busy. */
            while (!s->stop && svc_now_mono_ms() < next_lock && dispatch_pass(s, next_lock) > 0)
                ;
        }
        pthread_mutex_lock(&s->mu);
        if (!s->wake && !s->stop) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        }
        s->wake = 0;
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
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
    return s;
}

int gw_sched_stop(gw_sched *s, int grace_ms)
{
    if (!s)
        return 0;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    /* Trackers notice stop at their next poll; runs keep going on the nodes
     * and the next scheduler re-attaches to them. */
    int64_t until = svc_now_mono_ms() + grace_ms;
    pthread_mutex_lock(&s->mu);
    while (s->ntracked > 0 && svc_now_mono_ms() < until) {
        pthread_mutex_unlock(&s->mu);
        svc_sleep_ms(20);
        pthread_mutex_lock(&s->mu);
    }
    int left = s->ntracked;
    pthread_mutex_unlock(&s->mu);
    if (left == 0) {
        free(s->tracked);
        free(s);
    }
    return left;
}
