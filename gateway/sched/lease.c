/* lease.c — nodes' lease polls held by this gateway (lease.h). A poll is a
 * waiter on a list; the thread picks the waiters that need a look, asks
 * PostgreSQL for their node's work without the lock, and answers those
 * that got some (or whose wait ended). A waiter being looked at stays on
 * the list, and a wake that comes meanwhile queues it again. Runs
 * the claim handed over (leased by the claim itself) wait in the outbox
 * for their node's next answer from here. */
#include "lease.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "kl.h"
#include "metrics.h"
#include "svc_log.h"
#include "svc_util.h"

/* How often the held polls are probed for work another gateway made for
 * them (one statement for all of them, ST_NODES_WITH_WORK; the polls it
 * names look): often while another gateway holds the scheduler lock (its
 * claims wake nothing here), rarely while this one does (its claims and
 * cancels wake the polls they concern; the rare probe finds a cancel asked
 * on another gateway, or a claim the previous holder made). A look per
 * held poll instead was the largest share of PostgreSQL's time at 1,000
 * nodes (ST_LEASE_TAKE, 200 a second, most finding nothing). */
#define LEASE_RECHECK_MS 500
#define LEASE_RECHECK_LEADER_MS 5000
/* Outputs of at most this many bytes come back inline with the node's
 * report and stay in the result row: a blob file of their own would cost
 * more than their bytes. */
#define GW_INLINE_OUTPUT_MAX ((size_t)64 << 10)
/* Most runs one answer carries. */
#define LEASE_MAX_RUNS 256
/* Nodes whose last report this gateway remembers (the scheduler places
 * on 4,096 at most). */
#define LEASE_ROOMS 4096
/* Chains of the node-id hashes of rooms and held polls (a power of two):
 * a claim, a report or a poll finds its node's entries in its chain, not
 * by comparing its id with every node's (at 1,000 nodes those scans were
 * most of the lease thread's CPU and of the gateway's strcmp). */
#define LEASE_BUCKETS 4096
/* How long a run handed to a node's poll at its claim may wait for an
 * answer here (the poll ended just before, or asked for fewer runs, and
 * the node's next poll went elsewhere) before it is taken back to the
 * claimed runs any gateway's look hands out. */
#define LEASE_HAND_MS 2000
/* A run is handed to a node that holds no poll here when its last poll
 * was answered here this recently (its next poll is on its way: between
 * two polls, under load, is where most claims find a node). */
#define LEASE_HAND_SOON_MS 1000
/* The longest a handed run waits for a poll here with room for it, well
 * within the heartbeats' grace (UNHELD_GRACE_S, 10 s) after which a run
 * leased and not listed by its node is re-queued as lost. */
#define LEASE_HAND_MAX_MS 5000
/* How long a node's last report speaks for it. A node's counts start again
 * with each process: a report of a node that restarted (seen by another
 * gateway, or lost) must not hold back the new process's polls. */
#define LEASE_ROOM_TRUST_MS 10000

typedef struct waiter {
    struct waiter *next, *prev;    /* the list of every held poll */
    struct waiter *hnext;          /* the chain of its node id's hash */
    char node_id[37];
    svc_req *req;
    int max;
    uint64_t seq;                  /* the node's ended runs when it sent the poll */
    int64_t deadline;              /* monotonic ms */
    int64_t woke;                  /* monotonic ms look was set: woken polls go in that order */
    int look;                      /* woken: look now */
    int give;                      /* a run was handed to its node: serve now */
    int end;                       /* answer now, with nothing (replaced, node left) */
    struct waiter *qnext;          /* the queue of woken polls (queued) */
    int queued;                    /* on that queue */
    int in_batch;                  /* in the batch the thread serves now (l->due) */
} waiter;

/* The free slots a node last reported, and how many of its runs had ended
 * then (seq): a poll that was sent before that report, and so asks for
 * fewer runs than the node has room for now, is given the report's figure. */
typedef struct node_room {
    char node_id[37];
    uint64_t seq;
    int free;
    int64_t at;                    /* monotonic ms of the report; the oldest is replaced */
    /* What the last look found, as long as nothing was claimed or
     * cancelled here since: no run left beyond those it took, no cancel. */
    int no_runs, no_cancels;
    /* Runs claimed for the node here and not yet taken by its polls: none
     * left means a look that filled the poll left nothing behind. Runs
     * claimed by another gateway are not counted; its polls there, or the
     * periodic look here, find them. */
    int unleased;
    int64_t seen;                  /* monotonic ms of the node's last poll here, or of its answer */
    int hnext;                     /* the next room in its hash chain: index + 1, 0 at the end */
} node_room;

/* A run handed to a node's poll at its claim (gw_leases_hold, then
 * gw_leases_hand), in the node's next answer from here. */
typedef struct handed {
    struct handed *next;
    char node_id[37], job_id[37];
    int attempt;                   /* 0 while the claim runs */
    json_t *run;                   /* the run as the node gets it; NULL while the claim runs */
    int cancel;                    /* a cancel taken meanwhile travels with it */
    int64_t at;                    /* monotonic ms the place was kept */
} handed;

struct gw_leases {
    gw_app *app;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    node_room rooms[LEASE_ROOMS];
    int nrooms;                    /* rooms[0..nrooms) have been used */
    int room_chain[LEASE_BUCKETS]; /* the first room of each hash: index + 1, 0 none */
    waiter *list;
    waiter *chain[LEASE_BUCKETS];  /* held polls by their node id's hash */
    /* The polls the thread serves next, in their order (next_waiter): one
     * walk of the list orders every poll due, not one walk per poll. */
    waiter **due;
    int ndue, idue, cap_due;
    /* Polls woken (look, give or end set) since the last batch, in that
     * order: a batch takes them, and walks every held poll only when the
     * earliest deadline (next_deadline) has passed. A walk per batch was
     * the lease thread's own CPU once most polls needed no look. */
    waiter *woken, **woken_tail;
    int64_t next_deadline;
    handed *outbox, **outbox_tail; /* in the order the places were kept */
    int nhanded;
    int64_t next_take_back;        /* monotonic ms: the next handed run due to be taken back */
    int stop;
    int leading;                   /* this gateway holds the scheduler lock */
    int64_t next_probe;            /* monotonic ms: the next probe of the held polls */
    pthread_t thread;
};

/* node_id's chain. */
static unsigned chain_of(const char *node_id)
{
    return svc_fnv1a(node_id) & (LEASE_BUCKETS - 1);
}

/* Takes room r out of its chain (a room in use); mu held. */
static void room_unchain(gw_leases *l, node_room *r)
{
    int at = (int)(r - l->rooms) + 1;
    for (int *p = &l->room_chain[chain_of(r->node_id)]; *p; p = &l->rooms[*p - 1].hnext)
        if (*p == at) {
            *p = r->hnext;
            return;
        }
}

/* What this gateway knows of node_id's room, or NULL; with create, a new
 * entry (taking the place of a forgotten one, or of the oldest, when all
 * are used) when there is none. mu held. */
static node_room *room_of(gw_leases *l, const char *node_id, int create)
{
    unsigned c = chain_of(node_id);
    for (int i = l->room_chain[c]; i; i = l->rooms[i - 1].hnext)
        if (strcmp(l->rooms[i - 1].node_id, node_id) == 0)
            return &l->rooms[i - 1];
    if (!create)
        return NULL;
    node_room *r = NULL;
    if (l->nrooms < LEASE_ROOMS) {
        r = &l->rooms[l->nrooms++];
    } else {
        for (int i = 0; i < LEASE_ROOMS && !(r && !r->node_id[0]); i++)
            if (!r || !l->rooms[i].node_id[0] || l->rooms[i].at < r->at)
                r = &l->rooms[i];
        if (r->node_id[0])
            room_unchain(l, r);
    }
    memset(r, 0, sizeof(*r));
    snprintf(r->node_id, sizeof(r->node_id), "%s", node_id);
    r->at = svc_now_mono_ms();
    r->hnext = l->room_chain[c];
    l->room_chain[c] = (int)(r - l->rooms) + 1;
    return r;
}

/* The first held poll in node_id's chain (not necessarily node_id's: check
 * with is_of, and go on with hnext); mu held. */
static waiter *chain_first(gw_leases *l, const char *node_id)
{
    return l->chain[chain_of(node_id)];
}

static int is_of(const waiter *x, const char *node_id)
{
    return strcmp(x->node_id, node_id) == 0;
}

/* The rows [*lo, *hi) of the shard inputs (dim 0, kl_io_spec.shard) that
 * node_rank g of a multi-node run holds (contract: kl_shard_rows over the
 * world's ranks); 0 and 0 when the kernel has none. */
static void shard_of(const gw_dispatch *d, int world, int64_t *lo, int64_t *hi)
{
    const kl_kernel *k = kl_kernel_find(d->kernel);
    int per = d->gpus > 0 ? d->gpus : 1;
    int64_t x;
    *lo = *hi = 0;
    for (int i = 0; k && i < k->ninputs; i++) {
        if (!k->inputs[i].shard)
            continue;
        size_t j;
        json_t *m;
        json_array_foreach(d->inputs_meta, j, m) {
            const char *name = json_string_value(json_object_get(m, "name"));
            json_t *dim0 = json_array_get(json_object_get(m, "shape"), 0);
            if (!name || strcmp(name, k->inputs[i].name) != 0 || !json_is_integer(dim0))
                continue;
            int64_t n = json_integer_value(dim0);
            kl_shard_rows(n, world, d->node_rank * per, lo, &x);
            kl_shard_rows(n, world, (d->node_rank + 1) * per - 1, &x, hi);
            return;
        }
    }
}

/* A multi-node run's "dist" (contract §3), or NULL for a whole job. */
static json_t *dist_json(const gw_dispatch *d)
{
    if (d->node_rank < 0)
        return NULL;
    int world = d->nodes * (d->gpus > 0 ? d->gpus : 1);
    int64_t lo, hi;
    shard_of(d, world, &lo, &hi);
    return json_pack("{s:i, s:i, s:i, s:I, s:I}", "nodes", d->nodes, "node_rank", d->node_rank,
                     "world", world, "shard_lo", (json_int_t)lo, "shard_hi", (json_int_t)hi);
}

/* The run as a node run request: with "dist" when it is one node's part
 * of a multi-node job, with "gpu_ids" when the scheduler chose the
 * devices. New reference or NULL. */
static json_t *run_json(const gw_dispatch *d)
{
    /* A task: its lease form as the submit made it (contract section 2);
     * inputs and files in it already. */
    json_t *o;
    if (d->task) {
        o = json_pack("{s:s, s:i, s:O, s:i, s:s, s:i, s:b, s:I}", "job_id", d->job_id, "attempt",
                      d->attempt, "task", d->task, "timeout_s", d->timeout_s, "backend", d->backend,
                      "gpus", d->gpus, "output_blobs", 1, "output_blob_min",
                      (json_int_t)GW_INLINE_OUTPUT_MAX + 1);
        goto envelope;
    }
    /* Inputs in the blob store go as references, which the node fetches as
     * raw bytes; small inputs kept in the row go inline, in base64. */
    json_t *inputs = gw_blob_to_json(d->inputs_meta, d->inputs, d->inputs_len, 1);
    if (!inputs)
        return NULL;
    o = json_pack("{s:s, s:i, s:s, s:O, s:o, s:i, s:s, s:i, s:b, s:I}", "job_id", d->job_id,
                          "attempt", d->attempt, "kernel", d->kernel, "params", d->params, "inputs",
                          inputs, "timeout_s", d->timeout_s, "backend", d->backend, "gpus", d->gpus,
                          "output_blobs", 1, "output_blob_min", (json_int_t)GW_INLINE_OUTPUT_MAX + 1);
envelope:
    if (o && d->node_rank >= 0) {
        json_t *dist = dist_json(d);
        if (!dist || json_object_set_new(o, "dist", dist) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    if (o && d->ngpu_ids > 0) {
        json_t *ids = json_array();
        for (int i = 0; ids && i < d->ngpu_ids; i++)
            json_array_append_new(ids, json_integer(d->gpu_ids[i]));
        if (!ids || json_object_set_new(o, "gpu_ids", ids) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

/* Takes node_id's work: the answer to its poll, or NULL when there is none
 * or PostgreSQL could not be asked (the next look tries again). *none = 1
 * when no run is left for the node after this. */
static json_t *take(gw_leases *l, const char *node_id, int max, int *none, int *taken)
{
    gw_dispatch *runs, *cancels;
    int nruns, ncancels;
    if (max > LEASE_MAX_RUNS)
        max = LEASE_MAX_RUNS;
    *none = *taken = 0;
    if (gw_store_lease_take(l->app->store, node_id, max, &runs, &nruns, &cancels, &ncancels) != 0)
        return NULL;
    /* Fewer runs than asked for: none is left behind. Cancels are all
     * taken at once. */
    *none = nruns < max;
    *taken = nruns;
    if (nruns + ncancels == 0)
        return NULL;
    json_t *rl = json_array(), *cl = json_array();
    for (int i = 0; i < nruns; i++) {
        json_t *r = run_json(&runs[i]);
        /* Left leased: the node's heartbeat shows it never arrived. */
        if (!r || json_array_append_new(rl, r) < 0)
            svc_error("lease: job %s attempt %d could not be encoded for node %s", runs[i].job_id,
                      runs[i].attempt, node_id);
    }
    for (int i = 0; i < ncancels; i++)
        json_array_append_new(cl, json_pack("{s:s, s:i}", "job_id", cancels[i].job_id, "attempt",
                                            cancels[i].attempt));
    gw_dispatch_free(runs, nruns);
    gw_dispatch_free(cancels, ncancels);
    return json_pack("{s:o, s:o}", "runs", rl, "cancel", cl);
}

/* Answers w's poll (with reply, or nothing) and frees w; not under mu. */
static void answer(waiter *w, json_t *reply)
{
    if (!reply)
        reply = json_pack("{s:[], s:[]}", "runs", "cancel");
    svc_reply_json(w->req, 200, reply);
    svc_req_resume(w->req);
    free(w);
}

/* Puts w on the list and in its chain; mu held. */
static void link_waiter(gw_leases *l, waiter *w)
{
    w->prev = NULL;
    w->next = l->list;
    if (l->list)
        l->list->prev = w;
    l->list = w;
    waiter **c = &l->chain[chain_of(w->node_id)];
    w->hnext = *c;
    *c = w;
}

/* Puts w on the queue of woken polls, once; mu held. */
static void queue_waiter(gw_leases *l, waiter *w)
{
    if (w->queued)
        return;
    w->queued = 1;
    w->qnext = NULL;
    *l->woken_tail = w;
    l->woken_tail = &w->qnext;
}

/* Takes w off the list, out of its chain and off the queue of woken
 * polls; mu held. */
static void unlink_waiter(gw_leases *l, waiter *w)
{
    for (waiter **pp = &l->woken; w->queued && *pp; pp = &(*pp)->qnext)
        if (*pp == w) {
            *pp = w->qnext;
            if (l->woken_tail == &w->qnext)
                l->woken_tail = pp;
            w->queued = 0;
            break;
        }
    if (w->prev)
        w->prev->next = w->next;
    else
        l->list = w->next;
    if (w->next)
        w->next->prev = w->prev;
    for (waiter **pp = &l->chain[chain_of(w->node_id)]; *pp; pp = &(*pp)->hnext)
        if (*pp == w) {
            *pp = w->hnext;
            return;
        }
}

/* Waits on cv until until_mono (monotonic ms) or a signal; mu held. */
static void wait_until(gw_leases *l, int64_t until_mono)
{
    struct timespec ts = {.tv_sec = until_mono / 1000, .tv_nsec = (long)(until_mono % 1000) * 1000000L};
    pthread_cond_timedwait(&l->cv, &l->mu, &ts);
}

/* How long until a held poll's next periodic look; mu held. */
static int64_t recheck_ms(const gw_leases *l)
{
    return l->leading ? LEASE_RECHECK_LEADER_MS : LEASE_RECHECK_MS;
}

/* Sets w's look, remembering when it was first woken; mu held. */
static void wake_waiter(gw_leases *l, waiter *w)
{
    if (!w->look)
        w->woke = svc_now_mono_ms();
    w->look = 1;
    queue_waiter(l, w);
}

/* Sets w's give (a run was handed to its node); mu held. */
static void give_waiter(gw_leases *l, waiter *w)
{
    if (!w->look && !w->give)
        w->woke = svc_now_mono_ms();
    w->give = 1;
    queue_waiter(l, w);
}

/* Sets w's end (answer it now, with nothing); mu held. */
static void end_waiter(gw_leases *l, waiter *w)
{
    w->end = 1;
    queue_waiter(l, w);
}

/* When a due poll's turn is: ended ones first, then woken ones by when
 * they were woken, or late ones by their deadline. */
static int64_t due_at(const waiter *x)
{
    return x->end ? 0 : x->look || x->give ? x->woke : x->deadline;
}

static int due_cmp(const void *a, const void *b)
{
    int64_t x = due_at(*(waiter *const *)a), y = due_at(*(waiter *const *)b);
    return x < y ? -1 : x > y;
}

/* Adds x to the batch; -1 when the batch cannot grow (x waits for the
 * next one). mu held. */
static int batch_add(gw_leases *l, waiter *x)
{
    if (l->ndue == l->cap_due) {
        int cap = l->cap_due ? 2 * l->cap_due : 64;
        waiter **d = realloc(l->due, sizeof(*d) * (size_t)cap);
        if (!d)
            return -1;
        l->due = d;
        l->cap_due = cap;
    }
    x->in_batch = 1;
    l->due[l->ndue++] = x;
    return 0;
}

/* The waiter to serve next, or NULL (then *next: when one is due); mu held.
 * Woken polls and ended ones first, the longest waiting first (a wake is a
 * claim or cancel the node waits for, a run handed to it, or a probe's
 * find). None is passed over for being late: under load every poll gets
 * its turn in order. A batch (l->due) takes every poll woken since the last
 * one (the queue) and, once the earliest deadline has passed, every poll
 * past its deadline (a walk of all of them, which also finds the next
 * deadline); its polls are served in order before the next batch: a poll
 * due stays due (only this thread looks, answers and frees), and one woken
 * meanwhile would have come after them. */
static waiter *next_waiter(gw_leases *l, int64_t now, int64_t *next)
{
    if (l->idue == l->ndue) {
        l->ndue = l->idue = 0;
        while (l->woken && batch_add(l, l->woken) == 0) {
            waiter *x = l->woken;
            x->queued = 0;
            if (!(l->woken = x->qnext))
                l->woken_tail = &l->woken;
        }
        if (now >= l->next_deadline) {
            l->next_deadline = INT64_MAX;
            for (waiter *x = l->list; x; x = x->next)
                if (!x->in_batch && x->deadline <= now && !x->queued && batch_add(l, x) != 0)
                    l->next_deadline = now;   /* no memory: again at the next turn */
                else if (x->deadline > now && x->deadline < l->next_deadline)
                    l->next_deadline = x->deadline;
        }
        if (l->ndue > 1)
            qsort(l->due, (size_t)l->ndue, sizeof(*l->due), due_cmp);
    }
    if (l->next_deadline < *next)
        *next = l->next_deadline;
    if (l->idue == l->ndue)
        return NULL;
    waiter *w = l->due[l->idue++];
    w->in_batch = 0;
    return w;
}

/* Takes e (at *pp) out of the outbox and frees it; mu held. */
static void outbox_drop(gw_leases *l, handed **pp)
{
    handed *e = *pp;
    *pp = e->next;
    if (l->outbox_tail == &e->next)
        l->outbox_tail = pp;
    l->nhanded--;
    json_decref(e->run);
    free(e);
}

/* Moves up to max runs handed to node_id into *given ({"runs", "cancel"},
 * made when there is one), each with its cancel when one came meanwhile;
 * how many. mu held. */
static int outbox_give(gw_leases *l, const char *node_id, int max, json_t **given)
{
    int n = 0;
    for (handed **pp = &l->outbox; *pp && n < max;) {
        handed *e = *pp;
        if (!e->run || strcmp(e->node_id, node_id) != 0) {
            pp = &e->next;
            continue;
        }
        if (!*given && !(*given = json_pack("{s:[], s:[]}", "runs", "cancel")))
            break;
        json_array_append(json_object_get(*given, "runs"), e->run);
        if (e->cancel)
            json_array_append_new(json_object_get(*given, "cancel"),
                                  json_pack("{s:s, s:i}", "job_id", e->job_id, "attempt", e->attempt));
        outbox_drop(l, pp);
        n++;
    }
    return n;
}

/* The cancels of reply that are for runs still in the outbox go with those
 * runs instead (a node takes a cancel only for a run it holds); reply, or
 * NULL when nothing is left in it. mu held. */
static json_t *outbox_keep_cancels(gw_leases *l, json_t *reply)
{
    json_t *cl = json_object_get(reply, "cancel");
    for (size_t i = json_array_size(cl); i-- > 0;) {
        json_t *c = json_array_get(cl, i);
        const char *job = json_string_value(json_object_get(c, "job_id"));
        int attempt = (int)json_integer_value(json_object_get(c, "attempt"));
        for (handed *e = l->outbox; job && e; e = e->next)
            if (strcmp(e->job_id, job) == 0 && (e->attempt == 0 || e->attempt == attempt)) {
                e->cancel = 1;
                json_array_remove(cl, i);
                break;
            }
    }
    if (json_array_size(cl) == 0 && json_array_size(json_object_get(reply, "runs")) == 0) {
        json_decref(reply);
        return NULL;
    }
    return reply;
}

/* given's runs and cancels, then reply's, in one answer. */
static json_t *merge(json_t *given, json_t *reply)
{
    if (!given || !reply)
        return given ? given : reply;
    json_array_extend(json_object_get(given, "runs"), json_object_get(reply, "runs"));
    json_array_extend(json_object_get(given, "cancel"), json_object_get(reply, "cancel"));
    json_decref(reply);
    return given;
}

/* When the next handed run is due to be taken back; mu held. */
static void outbox_next_due(gw_leases *l)
{
    l->next_take_back = INT64_MAX;
    for (handed *e = l->outbox; e; e = e->next)
        if (e->at + LEASE_HAND_MS < l->next_take_back)
            l->next_take_back = e->at + LEASE_HAND_MS;
}

/* 1 when e, handed LEASE_HAND_MS ago or more, waits for no poll here: its
 * node has no poll held here and neither sent one nor was answered for
 * LEASE_HAND_MS (its polls go to another gateway, or it left); or when it
 * waited LEASE_HAND_MAX_MS (the node's polls here ask for fewer runs). A
 * poll held here (not served yet: a burst of claims) takes it in its turn,
 * and one answered is followed by the node's next at once. mu held. */
static int outbox_stranded(gw_leases *l, const handed *e, int64_t now)
{
    if (e->at + LEASE_HAND_MS > now)
        return 0;
    if (e->at + LEASE_HAND_MAX_MS <= now)
        return 1;
    for (waiter *x = chain_first(l, e->node_id); x; x = x->hnext)
        if (is_of(x, e->node_id) && !x->end)
            return 0;
    const node_room *r = room_of(l, e->node_id, 0);
    return !r || r->seen + LEASE_HAND_MS <= now;
}

/* Takes the runs handed that no poll here takes (outbox_stranded; every
 * one when all) back to claimed, not leased, and wakes their nodes' polls
 * here (another gateway's probe finds them for polls held there). A run
 * whose claim is still running waits on. When PostgreSQL cannot be told,
 * the runs stay leased: the node's heartbeat shows they never arrived and
 * they are re-queued (gw_store_runs_unheld). Takes and gives back mu. */
static void outbox_take_back(gw_leases *l, int all)
{
    int64_t now = svc_now_mono_ms();
    int n = 0, waiting = 0;
    for (handed *e = l->outbox; e; e = e->next)
        n += e->attempt > 0 && (all || outbox_stranded(l, e, now));
    char(*jobs)[37] = n ? malloc(sizeof(*jobs) * (size_t)n) : NULL;
    char(*nodes)[37] = n ? malloc(sizeof(*nodes) * (size_t)n) : NULL;
    int *atts = n ? malloc(sizeof(*atts) * (size_t)n) : NULL;
    int k = 0;
    for (handed **pp = &l->outbox; *pp && (n == 0 || (jobs && nodes && atts));) {
        handed *e = *pp;
        if (!all && !outbox_stranded(l, e, now)) {
            waiting |= e->at + LEASE_HAND_MS <= now;
            pp = &e->next;
        } else if (e->attempt == 0) {
            e->at = now;           /* its claim is slow: looked at again later */
            pp = &e->next;
        } else {
            memcpy(jobs[k], e->job_id, sizeof(jobs[0]));
            memcpy(nodes[k], e->node_id, sizeof(nodes[0]));
            atts[k++] = e->attempt;
            outbox_drop(l, pp);
        }
    }
    outbox_next_due(l);
    /* runs past their time that a poll here will take: looked at again
     * soon (their node may stop polling here); no memory: again soon */
    if (waiting || (n && k < n))
        l->next_take_back = now + LEASE_HAND_MS / 4;
    if (k > 0) {
        pthread_mutex_unlock(&l->mu);
        int rc = gw_store_runs_unhand(l->app->store, (const char(*)[37])jobs, atts, k);
        gw_metrics_lease(l->app->metrics, "taken_back", rc == 0 ? k : 0);
        for (int i = 0; i < k; i++)
            svc_warn("lease: job %s attempt %d was handed to node %s and no poll here took it; %s",
                     jobs[i], atts[i], nodes[i],
                     rc == 0 ? "taken back for the node's next look"
                             : "PostgreSQL did not answer: re-queued once the node's heartbeat shows it");
        pthread_mutex_lock(&l->mu);
        for (int i = 0; rc == 0 && i < k; i++) {
            node_room *r = room_of(l, nodes[i], 1);
            r->no_runs = 0;
            r->unleased++;
            for (waiter *x = chain_first(l, nodes[i]); x; x = x->hnext)
                if (is_of(x, nodes[i]))
                    wake_waiter(l, x);
        }
    }
    free(jobs);
    free(nodes);
    free(atts);
}

/* 1 when nothing was found for node_id at its last look and nothing was
 * claimed or cancelled for it here since (for a poll of max runs): a look
 * would find only what another gateway made, which the probe finds. mu
 * held. */
static int quiet(gw_leases *l, const char *node_id, int max)
{
    const node_room *r = room_of(l, node_id, 0);
    return r && r->no_cancels && (r->no_runs || max == 0);
}

/* Asks PostgreSQL, in one statement, which held polls' nodes have work
 * now, and wakes those (their room forgotten: the look must happen). When
 * the probe could not be made, every held poll looks, as it would have
 * without the probe. Takes and gives back mu. */
static void probe(gw_leases *l)
{
    int n = 0;
    for (waiter *x = l->list; x; x = x->next)
        n += !x->end;
    if (n == 0)
        return;
    char(*ids)[37] = malloc(sizeof(*ids) * (size_t)n);
    int *has = malloc(sizeof(*has) * (size_t)n);
    int k = 0;
    for (waiter *x = l->list; ids && has && x && k < n; x = x->next)
        if (!x->end)
            memcpy(ids[k++], x->node_id, sizeof(ids[0]));
    pthread_mutex_unlock(&l->mu);
    int rc = ids && has ? gw_store_nodes_with_work(l->app->store, (const char(*)[37])ids, k, has)
                        : -ENOMEM;
    pthread_mutex_lock(&l->mu);
    for (int i = 0; i < k; i++) {
        if (rc == 0 && !has[i])
            continue;
        node_room *r = room_of(l, ids[i], 0);
        if (r)
            r->no_runs = r->no_cancels = 0;
        for (waiter *x = chain_first(l, ids[i]); x; x = x->hnext)
            if (is_of(x, ids[i]) && !x->end)
                wake_waiter(l, x);
    }
    free(ids);
    free(has);
}

/* The lease thread: looks for work for the polls that need a look, answers
 * those that got some or whose wait ended, and at a stop answers the rest. */
static void *leases_main(void *arg)
{
    gw_leases *l = arg;
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        int64_t now = svc_now_mono_ms();
        if (now >= l->next_probe) {
            l->next_probe = now + recheck_ms(l);
            probe(l);
            continue;
        }
        if (now >= l->next_take_back) {
            outbox_take_back(l, 0);
            continue;
        }
        int64_t next = l->next_probe < l->next_take_back ? l->next_probe : l->next_take_back;
        waiter *w = next_waiter(l, now, &next);
        if (!w) {
            wait_until(l, next);
            continue;
        }
        /* Runs handed to the node at their claim go first; a look is for
         * the room left. */
        json_t *given = NULL;
        int max = w->max;
        int ngiven = !w->end && l->nhanded > 0 ? outbox_give(l, w->node_id, max, &given) : 0;
        max -= ngiven;
        w->give = 0;
        /* A poll whose wait ended looks first only when something may be
         * there: woken, or its node not known to be quiet. */
        int look = !w->end && (w->look || !quiet(l, w->node_id, max));
        w->look = 0;
        char node[37];
        memcpy(node, w->node_id, sizeof node);
        pthread_mutex_unlock(&l->mu);
        int stale = 0, taken = 0;
        json_t *reply = look ? take(l, node, max, &stale, &taken) : NULL;
        pthread_mutex_lock(&l->mu);
        gw_metrics_lease(l->app->metrics, "handed", ngiven);
        gw_metrics_lease(l->app->metrics, "looked", taken);
        if (reply && l->nhanded > 0)
            reply = outbox_keep_cancels(l, reply);
        reply = merge(given, reply);
        node_room *r = look ? room_of(l, node, 1) : NULL;
        if (r)
            r->unleased = taken >= r->unleased ? 0 : r->unleased - taken;
        /* Nothing left for the node, and no wake came while it looked
         * (that would have set look again): remembered, so that its next
         * poll skips a look that would find nothing. */
        if (r && !w->look) {
            r->no_cancels = 1;
            r->no_runs |= stale || r->unleased == 0;
        }
        now = svc_now_mono_ms();
        if (reply || w->end || w->deadline <= now || l->stop) {
            if (!w->end)
                room_of(l, node, 1)->seen = now;
            unlink_waiter(l, w);
            pthread_mutex_unlock(&l->mu);
            answer(w, reply);
            pthread_mutex_lock(&l->mu);
        }
    }
    /* Stopping: the runs handed and not answered are taken back (another
     * gateway hands them out), and every poll held is answered with
     * nothing. */
    outbox_take_back(l, 1);
    while (l->list) {
        waiter *w = l->list;
        unlink_waiter(l, w);
        pthread_mutex_unlock(&l->mu);
        answer(w, NULL);
        pthread_mutex_lock(&l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

gw_leases *gw_leases_start(gw_app *app)
{
    gw_leases *l = calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->app = app;
    l->outbox_tail = &l->outbox;
    l->woken_tail = &l->woken;
    l->next_deadline = INT64_MAX;
    l->next_take_back = INT64_MAX;
    pthread_mutex_init(&l->mu, NULL);
    svc_cond_init_mono(&l->cv);
    if (pthread_create(&l->thread, NULL, leases_main, l) != 0) {
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
        free(l);
        return NULL;
    }
    return l;
}

void gw_leases_stop(gw_leases *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    int was = l->stop;
    l->stop = 1;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    if (!was)
        pthread_join(l->thread, NULL);
}

void gw_leases_free(gw_leases *l)
{
    if (!l)
        return;
    gw_leases_stop(l);
    while (l->outbox)
        outbox_drop(l, &l->outbox);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l->due);
    free(l);
}

int gw_leases_poll(gw_leases *l, svc_req *req, const char *node_id, int max, uint64_t seq,
                   int wait_ms)
{
    waiter *w = calloc(1, sizeof(*w));
    if (!w) {
        svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
        return -1;
    }
    if (svc_req_suspend(req) != 0) {
        free(w);
        svc_reply_header(req, "Retry-After", "1");
        svc_reply_error(req, 503, "unavailable", NULL, NULL, "this gateway is shutting down");
        return -1;
    }
    snprintf(w->node_id, sizeof(w->node_id), "%s", node_id);
    w->req = req;
    w->max = max;
    w->seq = seq;
    w->look = 1;
    w->woke = svc_now_mono_ms();
    w->deadline = w->woke + wait_ms;
    pthread_mutex_lock(&l->mu);
    w->give = l->nhanded > 0;      /* runs handed to the node after its last poll ended */
    if (!l->stop)
        room_of(l, node_id, 1)->seen = w->woke;
    int stopped = l->stop;
    if (!stopped) {
        /* A node keeps one poll: an older one here was given up. */
        for (waiter *x = chain_first(l, node_id); x; x = x->hnext)
            if (is_of(x, node_id))
                end_waiter(l, x);
        node_room *r = room_of(l, node_id, 0);
        if (r && r->seq > seq && svc_now_mono_ms() - r->at < LEASE_ROOM_TRUST_MS)
            w->max = r->free;
        /* Nothing was there at the last look and nothing came since: no
         * look now (a claim or cancel here wakes it; one made by another
         * gateway is found by the probe). */
        if (quiet(l, node_id, w->max))
            w->look = 0;
        link_waiter(l, w);
        if (w->look || w->give)
            queue_waiter(l, w);
        if (w->deadline < l->next_deadline)
            l->next_deadline = w->deadline;
        pthread_cond_signal(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    if (stopped) {
        svc_reply_header(req, "Retry-After", "1");
        svc_reply_error(req, 503, "unavailable", NULL, NULL, "this gateway is shutting down");
        svc_req_resume(req);
        free(w);
    }
    return 0;
}

/* Sets look on node_id's polls (and end when end) and wakes the thread. */
static void poke(gw_leases *l, const char *node_id, int end)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    int hit = 0;
    for (waiter *x = chain_first(l, node_id); x; x = x->hnext)
        if (is_of(x, node_id)) {
            wake_waiter(l, x);
            if (end)
                end_waiter(l, x);
            hit = 1;
        }
    if (hit)
        pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

void gw_leases_wake(gw_leases *l, const char *node_id, int claimed)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    node_room *r = room_of(l, node_id, claimed > 0);
    if (r) {
        r->no_runs = r->no_cancels = 0;
        r->unleased += claimed;
    }
    pthread_mutex_unlock(&l->mu);
    poke(l, node_id, 0);
}

int gw_leases_hold(gw_leases *l, const char *node_id, const char *job_id)
{
    if (!l)
        return 0;
    handed *e = calloc(1, sizeof(*e));
    if (!e)
        return 0;
    pthread_mutex_lock(&l->mu);
    int held = 0;
    for (waiter *x = chain_first(l, node_id); !l->stop && x && !held; x = x->hnext)
        held = is_of(x, node_id) && !x->end;
    /* or its poll was answered here just now: its next one comes at once */
    const node_room *r = held || l->stop ? NULL : room_of(l, node_id, 0);
    held |= r && svc_now_mono_ms() - r->seen < LEASE_HAND_SOON_MS;
    if (held) {
        snprintf(e->node_id, sizeof(e->node_id), "%s", node_id);
        snprintf(e->job_id, sizeof(e->job_id), "%s", job_id);
        e->at = svc_now_mono_ms();
        *l->outbox_tail = e;
        l->outbox_tail = &e->next;
        l->nhanded++;
        if (e->at + LEASE_HAND_MS < l->next_take_back)
            l->next_take_back = e->at + LEASE_HAND_MS;
    }
    pthread_mutex_unlock(&l->mu);
    if (!held)
        free(e);
    return held;
}

void gw_leases_hand(gw_leases *l, const char *job_id, int attempt, const gw_dispatch *run)
{
    if (!l)
        return;
    json_t *j = attempt > 0 && run ? run_json(run) : NULL;
    if (attempt > 0 && run && !j)
        svc_error("lease: job %s attempt %d could not be encoded for node %s", job_id, attempt,
                  run->node_id);
    pthread_mutex_lock(&l->mu);
    handed **pp = &l->outbox;
    while (*pp && !((*pp)->attempt == 0 && strcmp((*pp)->job_id, job_id) == 0))
        pp = &(*pp)->next;
    handed *e = *pp;
    if (e && attempt == 0) {
        outbox_drop(l, pp);
    } else if (e) {
        e->attempt = attempt;
        e->run = j;
        j = NULL;
        /* Not readable: taken back at once. */
        if (!e->run)
            e->at = l->next_take_back = 0;
        for (waiter *x = chain_first(l, e->node_id); e->run && x; x = x->hnext)
            if (is_of(x, e->node_id))
                give_waiter(l, x);
        pthread_cond_signal(&l->cv);
    }
    int stopped = l->stop;
    pthread_mutex_unlock(&l->mu);
    json_decref(j);
    /* After the thread stopped: taken back now. */
    if (stopped && e && attempt > 0) {
        pthread_mutex_lock(&l->mu);
        outbox_take_back(l, 1);
        pthread_mutex_unlock(&l->mu);
    }
}

void gw_leases_set_room(gw_leases *l, const char *node_id, int free_slots, uint64_t seq)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    node_room *r = room_of(l, node_id, 1);
    int hit = 0;
    if (seq >= r->seq || svc_now_mono_ms() - r->at >= LEASE_ROOM_TRUST_MS) {
        r->seq = seq;
        r->free = free_slots < 0 ? 0 : free_slots;
        r->at = svc_now_mono_ms();
        for (waiter *x = chain_first(l, node_id); x; x = x->hnext)
            if (is_of(x, node_id) && x->seq <= seq) {
                x->max = r->free;
                /* more room only helps if there is something to take */
                if (!r->no_runs) {
                    wake_waiter(l, x);
                    hit = 1;
                }
            }
    }
    if (hit)
        pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

void gw_leases_set_leading(gw_leases *l, int leading)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->leading = leading;
    /* Taking the lock: what the last holder claimed woke nothing here, so
     * every held poll looks once now. Losing it: the claims are now
     * another gateway's; the held polls are probed again soon. */
    int64_t soon = svc_now_mono_ms() + LEASE_RECHECK_MS;
    for (waiter *x = l->list; leading && x; x = x->next)
        wake_waiter(l, x);
    if (!leading && l->next_probe > soon)
        l->next_probe = soon;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

void gw_leases_forget(gw_leases *l, const char *node_id)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    node_room *r = room_of(l, node_id, 0);
    if (r) {
        room_unchain(l, r);
        memset(r, 0, sizeof(*r));
    }
    pthread_mutex_unlock(&l->mu);
}

void gw_leases_end(gw_leases *l, const char *node_id)
{
    gw_leases_forget(l, node_id);
    poke(l, node_id, 1);
}
