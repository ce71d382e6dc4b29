/* api_nodes.c — the cluster listener: a node registers with the cluster
 * token and gets a credential of its own (nodecred.h); with it, it beats,
 * takes runs by lease and reports them (api_runs.c), moves blobs
 * (api_blobs.c), meets its gang (rendezvous.c) and leaves. The cluster
 * listener serves only these (routes.c); the public listener serves none
 * of them. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "committer.h"
#include "svc_bstore.h"
#include "lease.h"
#include "nodecred.h"
#include "outcome.h"
#include "rendezvous.h"
#include "scheduler.h"
#include "svc_task.h"
#include "svc_log.h"
#include "svc_util.h"

/* How long a run may be leased and not yet listed by its node's heartbeat:
 * the heartbeat's list may have been taken just before the run arrived. */
#define UNHELD_GRACE_S 10
/* A node's heartbeat looks for runs it does not hold at most this often
 * (and at its first beat after registering): a query per beat held a
 * thousand nodes' heartbeats back (bench/scale.sh). */
#define UNHELD_EVERY_MS 5000
/* Heartbeats are committed together (committer.h): one statement for all
 * that arrived while the last one ran. */
#define BEAT_COMMIT_THREADS 1
#define BEAT_BATCH_MAX 1024
/* Nodes whose last look for unheld runs this gateway remembers. */
#define UNHELD_SLOTS 8192

/* When each node last looked for runs it does not hold (monotonic ms), by
 * its id; open addressing, an entry dropped when the table is full (that
 * node looks at its next beat: more often, never less). */
static struct {
    pthread_mutex_t mu;
    struct { char id[37]; int64_t at; } e[UNHELD_SLOTS];
} unheld = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* 1 when node id should look for unheld runs now (and it is noted as
 * done); forget: its next beat looks (it registered anew). */
static int unheld_due(const char *id, int64_t now, int forget)
{
    unsigned h = svc_fnv1a(id);
    int due = 1;
    pthread_mutex_lock(&unheld.mu);
    for (int k = 0; k < 16; k++) {
        int i = (int)((h + (unsigned)k) % UNHELD_SLOTS);
        if (unheld.e[i].id[0] && strcmp(unheld.e[i].id, id) != 0)
            continue;
        if (forget) {
            unheld.e[i].at = 0;
            break;
        }
        due = !unheld.e[i].id[0] || unheld.e[i].at == 0 || now - unheld.e[i].at >= UNHELD_EVERY_MS;
        if (due) {
            snprintf(unheld.e[i].id, sizeof unheld.e[i].id, "%s", id);
            unheld.e[i].at = now;
        }
        break;
    }
    pthread_mutex_unlock(&unheld.mu);
    return due;
}

/* The gpus of a registration, checked and reduced to what GET /v1/nodes
 * shows ({name, memory_bytes}); NULL after replying 400. */
static json_t *node_gpus(svc_req *req, json_t *gpus)
{
    if (gpus && !json_is_array(gpus)) {
        svc_reply_error(req, 400, "invalid_argument", "gpus", NULL, "gpus must be an array");
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *g;
    json_array_foreach(gpus, i, g) {
        json_t *name = json_object_get(g, "name"), *mem = json_object_get(g, "memory_bytes");
        if (!json_is_string(name) || !json_is_integer(mem) || json_integer_value(mem) < 0) {
            json_decref(out);
            svc_reply_error(req, 400, "invalid_argument", "gpus", NULL,
                            "gpus[%zu] must be {\"name\": string, \"memory_bytes\": integer >= 0}", i);
            return NULL;
        }
        json_array_append_new(out, json_pack("{s:O, s:O}", "name", name, "memory_bytes", mem));
    }
    return out;
}

/* A node's "tasks" (registration, heartbeat; docs/tasks_contract.md
 * section 7): {engine, version?, images?: [strings], ...}, kept as sent.
 * 0 (JSON text in *out, NULL when absent; the caller frees it), or -1
 * after replying 400. */
static int node_tasks(svc_req *req, const json_t *tasks, char **out)
{
    *out = NULL;
    if (!tasks || json_is_null(tasks))
        return 0;
    const json_t *engine = json_object_get(tasks, "engine"), *images = json_object_get(tasks, "images");
    int ok = json_is_object(tasks) && json_is_string(engine) && json_string_length(engine) <= 32 &&
             (!images || (json_is_array(images) && json_array_size(images) <= 4096));
    static const char *const texts[] = {"version", "reason", "gang_network", "allowed", NULL};
    for (int k = 0; ok && texts[k]; k++) {
        const json_t *t = json_object_get(tasks, texts[k]);
        ok = !t || (json_is_string(t) && json_string_length(t) <= 4096);
    }
    size_t i;
    json_t *im;
    json_array_foreach(ok ? images : NULL, i, im)
        ok &= json_is_string(im) && json_string_length(im) <= SVC_TASK_IMAGE_MAX;
    if (!ok) {
        svc_reply_error(req, 400, "invalid_argument", "tasks", NULL,
                        "tasks must be {engine: string, version: string, images: [image "
                        "references]} or {engine: \"none\", reason}");
        return -1;
    }
    if (!(*out = json_dumps(tasks, JSON_COMPACT))) {
        svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
        return -1;
    }
    return 0;
}

/* Replies 400 invalid_argument on field with msg; returns -1. */
static int register_bad(svc_req *req, const char *field, const char *msg)
{
    svc_reply_error(req, 400, "invalid_argument", field, NULL, "%s", msg);
    return -1;
}

/* Checks a registration's name, url, backend, backend_reason, slots,
 * credential and kernels (tasks and gpus: node_tasks, node_gpus) and
 * fills reg's name, url, backend, reason and slots and *presented (the
 * credential presented; NULL: none) from them. 0, or -1 after replying 400
 * on the first that is wrong. */
static int register_check(svc_req *req, json_t *b, gw_node_reg *reg, const char **presented)
{
    const char *name = json_string_value(json_object_get(b, "name"));
    const char *url = json_string_value(json_object_get(b, "url"));
    const char *backend = json_string_value(json_object_get(b, "backend"));
    json_t *jreason = json_object_get(b, "backend_reason");
    json_t *kernels = json_object_get(b, "kernels");
    json_t *slots = json_object_get(b, "slots");
    if (!name || !*name || svc_utf8_chars(name) > 120)
        return register_bad(req, "name", "name: 1-120 characters");
    if (!url || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) ||
        strlen(url) > 500)
        return register_bad(req, "url", "url must be an http(s) URL of at most 500 bytes");
    if (!backend || (strcmp(backend, "cpu") && strcmp(backend, "cuda")))
        return register_bad(req, "backend", "backend must be cpu or cuda");
    if (jreason && !json_string_value(jreason))
        return register_bad(req, "backend_reason", "backend_reason must be a string");
    if (!json_is_integer(slots) || json_integer_value(slots) < 1 || json_integer_value(slots) > 1024)
        return register_bad(req, "slots", "slots must be 1-1024");
    /* A node that registered before (a restart, a gateway that forgot it)
     * proves it is the name's holder with the credential it was given. */
    json_t *jcred = json_object_get(b, "credential");
    if (jcred && !json_is_null(jcred) && !gw_nodecred_valid(json_string_value(jcred)))
        return register_bad(req, "credential",
                            "credential must be the one an earlier registration of this node "
                            "gave it");
    size_t i;
    json_t *k;
    int kernels_ok = json_is_array(kernels);
    json_array_foreach(kernels, i, k)
        kernels_ok &= json_is_string(k);
    if (!kernels_ok)
        return register_bad(req, "kernels", "kernels must be an array of kernel names");
    const char *reason = json_string_value(jreason);
    reg->name = name;
    reg->url = url;
    reg->backend = backend;
    reg->reason = reason ? reason : "";
    reg->slots = (int)json_integer_value(slots);
    *presented = json_string_value(jcred);
    return 0;
}

/* Makes a credential (into cred) and records the registration reg, to
 * which it adds the gpus (taken: freed here) and kernels as JSON text, the
 * new credential's hash and that of the one presented (NULL: none). 0 (id
 * and *issued as gw_store_node_register sets them) or a negative code:
 * -EEXIST the name is held by a live node, -EIO PostgreSQL. */
static int register_store(gw_app *app, gw_node_reg *reg, json_t *gpus, const json_t *kernels,
                          const char *presented, char cred[GW_NODECRED_SIZE], char id[37],
                          int *issued)
{
    char *gpus_s = json_dumps(gpus, JSON_COMPACT);
    char *kernels_s = json_dumps(kernels, JSON_COMPACT);
    json_decref(gpus);
    char new_hash[GW_NODECRED_HASH_SIZE], old_hash[GW_NODECRED_HASH_SIZE];
    int rc = gpus_s && kernels_s ? gw_nodecred_make(cred) : -ENOMEM;
    if (rc == 0 && (gw_nodecred_hash(cred, new_hash) != 0 ||
                    (presented && gw_nodecred_hash(presented, old_hash) != 0)))
        rc = -ENOMEM;
    if (rc == 0) {
        reg->gpus_json = gpus_s;
        reg->kernels_json = kernels_s;
        reg->presented_hash = presented ? old_hash : NULL;
        reg->new_hash = new_hash;
        rc = gw_store_node_register(app->store, reg, id, issued);
    }
    free(gpus_s);
    free(kernels_s);
    return rc;
}

/* Replies to a registration that register_store refused with rc. */
static int register_refused(svc_req *req, gw_app *app, const char *name, const char *presented,
                            int rc)
{
    if (rc == -EEXIST) {
        char after[16];
        snprintf(after, sizeof after, "%ld", app->cfg.node_timeout_s);
        svc_warn("node registration refused: %s is held by a live node and %s from %s",
                 name, presented ? "the credential presented is not its" : "no credential came",
                 svc_req_client_ip(req));
        svc_reply_header(req, "Retry-After", after);
        return svc_reply_error(req, 409, "node_name_in_use", "name", NULL,
                               "node %s is registered and alive; only it may register that name "
                               "again (with its credential) until it leaves or is silent for %ld s",
                               name, app->cfg.node_timeout_s);
    }
    if (rc == -EIO)
        return gw_reply_unavailable(req, "PostgreSQL");
    return svc_reply_error(req, 500, "internal", NULL, NULL, "cannot make a credential (%d)", rc);
}

int gw_api_node_register(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    json_t *b = svc_req_json(req);
    gw_node_reg reg = {.timeout_s = app->cfg.node_timeout_s};
    const char *presented;
    if (register_check(req, b, &reg, &presented) != 0)
        return 0;
    char *tasks_s;
    if (node_tasks(req, json_object_get(b, "tasks"), &tasks_s) != 0)
        return 0;
    json_t *gpus = node_gpus(req, json_object_get(b, "gpus"));
    if (!gpus) {
        free(tasks_s);
        return 0;
    }
    char id[37], cred[GW_NODECRED_SIZE];
    int issued = 0;
    reg.tasks_json = tasks_s;
    int rc = register_store(app, &reg, gpus, json_object_get(b, "kernels"), presented, cred, id,
                            &issued);
    free(tasks_s);
    if (rc)
        return register_refused(req, app, reg.name, presented, rc);
    svc_info("node registered: %s (%s) at %s backend=%s slots=%d%s%s%s", reg.name, id, reg.url,
             reg.backend, reg.slots, issued ? " with a new credential" : " with its credential",
             *reg.reason ? " reason=" : "", reg.reason);
    gw_nodecreds_forget(app->nodecreds, id);
    gw_leases_forget(app->leases, id);
    unheld_due(id, 0, 1);
    gw_sched_nodes_changed(app->sched);
    /* A node on a host that sees the blob directory under this path, with
     * this identity, maps inputs from it and writes outputs to it. */
    json_t *reply = json_pack("{s:s, s:i, s:{s:s, s:s}}", "id", id, "heartbeat_s",
                              app->cfg.heartbeat_s, "blob_store", "dir", svc_bstore_dir(app->blobs),
                              "id", svc_bstore_id(app->blobs));
    /* only a new credential travels; one the node proved it has stays */
    if (issued)
        json_object_set_new(reply, "credential", json_string(cred));
    memset(cred, 0, sizeof cred);
    svc_reply_header(req, "Cache-Control", "no-store");
    return svc_reply_json(req, 200, reply);
}

/* 1 when v is absent or a number within [lo, hi]. */
static int number_in(const json_t *v, double lo, double hi)
{
    return !v || json_is_null(v) || (json_is_number(v) && json_number_value(v) >= lo && json_number_value(v) <= hi);
}

/* A heartbeat's device state: {gpus: [{index, memory_total, memory_free,
 * util}], cpu: {cores, load1}}, every member optional. 0 or -1. */
static int node_state_check(const json_t *state)
{
    const json_t *gpus = json_object_get(state, "gpus"), *cpu = json_object_get(state, "cpu"), *d;
    size_t i;
    if (!json_is_object(state) || (gpus && (!json_is_array(gpus) || json_array_size(gpus) > 16)) ||
        (cpu && !json_is_object(cpu)))
        return -1;
    json_array_foreach(gpus, i, d)
        if (!json_is_object(d) || !json_is_integer(json_object_get(d, "index")) ||
            !number_in(json_object_get(d, "index"), 0, 15) ||
            !number_in(json_object_get(d, "memory_total"), 0, 1e15) ||
            !number_in(json_object_get(d, "memory_free"), 0, 1e15) ||
            !number_in(json_object_get(d, "util"), 0, 100) ||
            (json_object_get(d, "model") && !json_is_string(json_object_get(d, "model"))))
            return -1;
    if (cpu && (!number_in(json_object_get(cpu, "cores"), 0, 1e6) ||
                !number_in(json_object_get(cpu, "load1"), 0, 1e6)))
        return -1;
    /* a node that lost its GPU says why; it is placed nothing while so */
    const json_t *fault = json_object_get(state, "fault");
    if (fault && (!json_is_string(fault) || json_string_length(fault) > 512))
        return -1;
    return 0;
}

/* A heartbeat waiting for its batch's commit (committer.h). */
typedef struct beat {
    gw_commit_item item;      /* first: the committer hands this back */
    gw_app *app;
    svc_req *req;
    char id[37];
    int running, fault, found;
    json_t *state;            /* the device state, or NULL (keep the last) */
    json_t *tasks;            /* the task images, when they changed, or NULL */
    json_t *held;             /* its run ids when its look for unheld runs is due, or NULL */
} beat;

static void beat_free(beat *bt)
{
    json_decref(bt->state);
    json_decref(bt->tasks);
    json_decref(bt->held);
    free(bt);
}

/* Runs leased a while ago to the nodes of a batch of heartbeats that are
 * due a look (held set) which their heartbeat does not list never reached
 * them, or the node restarted and lost them: they go back to the queue,
 * counted like a node lost. One query for the whole batch (a query per
 * beat was 170 a second at 1,000 nodes). */
static void requeue_unheld(gw_app *app, gw_commit_item *const *items, int n)
{
    json_t *arr = json_array();
    for (int i = 0; arr && i < n; i++) {
        const beat *bt = (const beat *)items[i];
        if (bt->held)
            json_array_append_new(arr, json_pack("{s:s, s:O}", "id", bt->id, "held", bt->held));
    }
    char *text = arr && json_array_size(arr) > 0 ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    if (!text)
        return;
    gw_dispatch *lost;
    int nlost;
    if (gw_store_runs_unheld(app->store, text, UNHELD_GRACE_S, &lost, &nlost) == 0) {
        for (int k = 0; k < nlost; k++) {
            svc_warn("job %s attempt %d: node %s does not hold the run leased to it; re-queued",
                     lost[k].job_id, lost[k].attempt, lost[k].node_name);
            gw_outcome_requeue(app, lost[k].job_id, lost[k].attempt, 0, "node_lost",
                               "the node lost the run (it restarted, or never received it)");
        }
        gw_dispatch_free(lost, nlost);
    }
    free(text);
}

int gw_api_node_heartbeat(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    const char *id = gw_req_node(req);
    json_t *b = svc_req_json(req);
    json_t *running = json_object_get(b, "running"), *slots = json_object_get(b, "slots");
    json_t *runs = json_object_get(b, "runs"), *draining = json_object_get(b, "draining"), *r;
    size_t i;
    int runs_ok = json_is_array(runs);
    json_array_foreach(runs, i, r)
        runs_ok &= json_is_string(r);
    if (!json_is_integer(running) || json_integer_value(running) < 0 ||
        json_integer_value(running) > 1024 || !json_is_integer(slots) ||
        json_integer_value(slots) < 0 || json_integer_value(slots) > 1024 || !runs_ok ||
        (draining && !json_is_boolean(draining)))
        return svc_reply_error(req, 400, "invalid_argument", NULL, NULL,
                               "a heartbeat is {running: 0-1024, slots: 0-1024, runs: [strings], "
                               "draining: boolean (optional)}");
    json_t *state = json_object_get(b, "state");
    if (state && node_state_check(state) != 0)
        return svc_reply_error(req, 400, "invalid_argument", "state", NULL,
                               "state is {gpus: [{index: 0-15, model, memory_total, memory_free: "
                               "bytes, util: 0-100}] (at most 16), cpu: {cores, load1}, fault: "
                               "string of at most 512 (optional)}");
    char *tasks_s;
    if (node_tasks(req, json_object_get(b, "tasks"), &tasks_s) != 0)
        return 0;
    json_t *tasks = tasks_s ? json_loads(tasks_s, 0, NULL) : NULL;
    int tasks_bad = tasks_s && !tasks;
    free(tasks_s);
    if (tasks_bad)
        return svc_reply_error(req, 503, "unavailable", NULL, NULL, "out of memory; send again");
    beat *bt = calloc(1, sizeof(*bt));
    if (!bt) {
        json_decref(tasks);
        return svc_reply_error(req, 503, "unavailable", NULL, NULL, "out of memory; send again");
    }
    bt->tasks = tasks;
    if (unheld_due(id, svc_now_mono_ms(), 0))
        bt->held = json_incref(runs);
    bt->app = app;
    bt->req = req;
    snprintf(bt->id, sizeof bt->id, "%s", id);
    bt->running = (int)json_integer_value(running);
    bt->state = json_incref(state);
    bt->fault = json_object_get(state, "fault") != NULL;
    /* answered by beats_done once its batch is committed */
    if (svc_req_suspend(req) != 0) {
        beat_free(bt);
        svc_reply_header(req, "Retry-After", "1");
        return svc_reply_error(req, 503, "unavailable", NULL, NULL, "this gateway is shutting down");
    }
    if (gw_committer_add(app->beats, &bt->item) != 0) {
        beat_free(bt);
        svc_reply_header(req, "Retry-After", "1");
        svc_reply_error(req, 503, "unavailable", NULL, NULL, "this gateway is shutting down");
        svc_req_resume(req);
    }
    return 0;
}

/* committer op: every heartbeat of the batch in one statement; each
 * learns whether its node exists. */
static int beats_commit(void *arg, gw_commit_item *const *items, int n)
{
    gw_app *app = arg;
    json_t *arr = json_array();
    for (int i = 0; arr && i < n; i++) {
        beat *bt = (beat *)items[i];
        json_t *o = json_pack("{s:s, s:i}", "id", bt->id, "running", bt->running);
        if (o && bt->state)
            json_object_set(o, "state", bt->state);
        if (o && bt->tasks)
            json_object_set(o, "tasks", bt->tasks);
        if (!o || json_array_append_new(arr, o) != 0) {
            json_decref(arr);
            return -ENOMEM;
        }
    }
    char *text = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    if (!text)
        return -ENOMEM;
    char(*found)[37];
    int nfound;
    int rc = gw_store_nodes_heartbeat(app->store, text, &found, &nfound);
    free(text);
    if (rc == 0)
        requeue_unheld(app, items, n);
    for (int i = 0; rc == 0 && i < n; i++) {
        beat *bt = (beat *)items[i];
        for (int k = 0; k < nfound && !bt->found; k++)
            bt->found = strcmp(found[k], bt->id) == 0;
    }
    free(found);
    return rc;
}

/* committer op: answers one heartbeat (200, 404 for a node that is not
 * there, 503 when PostgreSQL could not record it). */
static void beats_done(void *arg, gw_commit_item *item)
{
    gw_app *app = arg;
    beat *bt = (beat *)item;
    if (item->rc == 0 && bt->found) {
        /* out of service, or its task images changed: the scheduler
         * looks again now */
        if (bt->fault || bt->tasks)
            gw_sched_nodes_changed(app->sched);
        svc_reply_json(bt->req, 200, json_object());
    } else if (item->rc == 0) {
        svc_reply_error(bt->req, 404, "not_found", NULL, NULL, "unknown node; register again");
    } else {
        gw_reply_unavailable(bt->req, "PostgreSQL");
    }
    svc_req_resume(bt->req);
    beat_free(bt);
}

int gw_api_beats_start(gw_app *app)
{
    static const gw_committer_ops ops = {.commit = beats_commit, .done = beats_done};
    app->beats = gw_committer_start(&ops, app, BEAT_COMMIT_THREADS, BEAT_BATCH_MAX);
    return app->beats ? 0 : -ENOMEM;
}

void gw_api_beats_stop(gw_app *app)
{
    gw_committer_stop(app->beats);
    app->beats = NULL;
}

int gw_api_node_remove(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    const char *id = gw_req_node(req);
    int rc = id ? gw_store_node_remove(app->store, id) : -ENOENT;
    if (rc == -ENOENT)
        return svc_reply_error(req, 404, "not_found", NULL, NULL, "unknown node");
    if (rc)
        return gw_reply_unavailable(req, "PostgreSQL");
    gw_nodecreds_forget(app->nodecreds, id);
    svc_info("node %s deregistered; its name is free and its credential no longer valid", id);
    gw_leases_end(app->leases, id);
    gw_sched_nodes_changed(app->sched);
    return svc_reply_json(req, 200, json_object());
}
