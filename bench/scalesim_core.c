/* scalesim_core.c — a simulated node's bookkeeping (scalesim.h): devices
 * held, over-commits seen, and the JSON of its exchanges. No I/O here. */
#include "scalesim.h"

#include <stdio.h>
#include <string.h>

int ss_run_parse(const json_t *req, ss_run *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof(*r));
    r->node_rank = -1;
    r->nodes = 1;
    const char *job = json_string_value(json_object_get(req, "job_id"));
    json_t *att = json_object_get(req, "attempt");
    json_t *secs = json_object_get(json_object_get(req, "params"), "seconds");
    if (!job || strlen(job) != 36 || !json_is_integer(att)) {
        snprintf(err, errlen, "no job_id or attempt");
        return -1;
    }
    memcpy(r->job_id, job, 37);
    r->attempt = (int)json_integer_value(att);
    r->seconds = json_is_number(secs) ? json_number_value(secs) : 0;
    if (r->seconds < 0)
        r->seconds = 0;
    const json_t *ids = json_object_get(req, "gpu_ids");
    if (json_array_size(ids) > SS_MAX_GPUS) {
        snprintf(err, errlen, "%zu gpu_ids", json_array_size(ids));
        return -1;
    }
    size_t i;
    const json_t *g;
    json_array_foreach(ids, i, g)
        r->gpu[r->ngpu++] = json_is_integer(g) ? (int)json_integer_value(g) : -1;
    const json_t *dist = json_object_get(req, "dist");
    if (dist) {
        r->nodes = (int)json_integer_value(json_object_get(dist, "nodes"));
        r->node_rank = (int)json_integer_value(json_object_get(dist, "node_rank"));
        if (r->nodes < 1 || r->node_rank < 0 || r->node_rank >= r->nodes) {
            snprintf(err, errlen, "dist: node_rank %d of %d", r->node_rank, r->nodes);
            return -1;
        }
        if (r->nodes == 1)
            r->node_rank = -1;
    }
    return 0;
}

int ss_node_active(const ss_node *n)
{
    int k = 0;
    for (int i = 0; i < SS_MAX_RUNS; i++)
        k += n->runs[i].state == SS_RDV || n->runs[i].state == SS_RUNNING;
    return k;
}

ss_run *ss_node_take(ss_node *n, const ss_run *r, int64_t now)
{
    ss_run *slot = NULL;
    for (int i = 0; i < SS_MAX_RUNS && !slot; i++)
        if (n->runs[i].state == SS_FREE)
            slot = &n->runs[i];
    if (!slot)
        return NULL;
    if (ss_node_active(n) >= n->slots)
        n->slot_overcommits++;
    *slot = *r;
    slot->t_lease = now;
    slot->runnable = 0;
    slot->overcommit = 0;
    for (int k = 0; k < slot->ngpu; k++) {
        int g = slot->gpu[k];
        if (g < 0 || g >= n->ngpus) {
            slot->overcommit++;
            continue;
        }
        if (n->gpu_busy[g]++ > 0)
            slot->overcommit++;
        if (n->gpu_free_since[g] > slot->runnable)
            slot->runnable = n->gpu_free_since[g];
    }
    if (slot->overcommit)
        n->overcommits++;
    if (slot->node_rank >= 0) {
        slot->state = SS_RDV;
        slot->rdv_next = now;
        slot->rdv_nap = 2;
        slot->rdv_step = 0;
    } else {
        ss_run_start(slot, now);
    }
    return slot;
}

int ss_rdv_next(const ss_run *r, int *put, char *key, size_t keylen)
{
    int step = r->rdv_step;
    if (r->node_rank == 0) {
        if (step == 0) {
            *put = 1;
            snprintf(key, keylen, "ncclid");
            return 1;
        }
        if (step >= r->nodes)
            return 0;
        *put = 0;
        snprintf(key, keylen, "ready-%d", step);
        return 1;
    }
    if (step >= 2)
        return 0;
    *put = step == 1;
    if (step == 0)
        snprintf(key, keylen, "ncclid");
    else
        snprintf(key, keylen, "ready-%d", r->node_rank);
    return 1;
}

void ss_run_start(ss_run *r, int64_t now)
{
    r->state = SS_RUNNING;
    r->t_start = now;
}

int64_t ss_duration_ms(double seconds, double factor)
{
    double ms = seconds * 1000.0 / (factor > 0 ? factor : 1);
    return ms < 1 ? 1 : (int64_t)(ms + 0.5);
}

void ss_node_end(ss_node *n, ss_run *r, int64_t now)
{
    if (r->state != SS_RUNNING && r->state != SS_RDV)
        return;
    r->state = SS_ENDED;
    r->t_end = now;
    for (int k = 0; k < r->ngpu; k++) {
        int g = r->gpu[k];
        if (g < 0 || g >= n->ngpus)
            continue;
        if (n->gpu_busy[g] > 0 && --n->gpu_busy[g] == 0)
            n->gpu_free_since[g] = now;
    }
    n->seq++;
}

void ss_node_forget(ss_node *n, ss_run *r)
{
    (void)n;
    memset(r, 0, sizeof(*r));
}

ss_run *ss_node_find(ss_node *n, const char *job_id, int attempt)
{
    for (int i = 0; i < SS_MAX_RUNS; i++)
        if (n->runs[i].state != SS_FREE && n->runs[i].attempt == attempt &&
            strcmp(n->runs[i].job_id, job_id) == 0)
            return &n->runs[i];
    return NULL;
}

void ss_run_id(const ss_run *r, char *out, size_t len)
{
    snprintf(out, len, "%s.%d", r->job_id, r->attempt);
}

json_t *ss_heartbeat_json(const ss_node *n, int64_t gpu_mem_bytes)
{
    json_t *runs = json_array(), *gpus = json_array();
    char rid[64];
    for (int i = 0; i < SS_MAX_RUNS; i++)
        if (n->runs[i].state != SS_FREE) {
            ss_run_id(&n->runs[i], rid, sizeof rid);
            json_array_append_new(runs, json_string(rid));
        }
    for (int g = 0; g < n->ngpus; g++) {
        int busy = n->gpu_busy[g] > 0;
        json_array_append_new(
            gpus, json_pack("{s:i, s:I, s:I, s:i}", "index", g, "memory_total", (json_int_t)gpu_mem_bytes,
                            "memory_free", (json_int_t)(busy ? gpu_mem_bytes / 8 : gpu_mem_bytes),
                            "util", busy ? 100 : 0));
    }
    return json_pack("{s:i, s:i, s:o, s:b, s:{s:o, s:{s:i, s:f}}}", "running", ss_node_active(n),
                     "slots", n->slots, "runs", runs, "draining", 0, "state", "gpus", gpus, "cpu",
                     "cores", 64, "load1", (double)ss_node_active(n));
}

json_t *ss_report_json(const ss_run *r, const char *model)
{
    char rid[64];
    ss_run_id(r, rid, sizeof rid);
    const char *state = r->cancelled ? "cancelled" : r->failed ? "failed" : "succeeded";
    json_t *o = json_pack("{s:s, s:s, s:i, s:s, s:s}", "run_id", rid, "job_id", r->job_id, "attempt",
                          r->attempt, "kernel", "sleep", "state", state);
    if (!o)
        return NULL;
    if (r->node_rank >= 0)
        json_object_set_new(o, "node_rank", json_integer(r->node_rank));
    if (!r->cancelled && !r->failed) {
        double slept = (double)(r->t_end - r->t_start) / 1000.0;
        json_object_set_new(o, "backend", json_string("cuda"));
        json_object_set_new(o, "outputs",
                            json_pack("{s:{s:s, s:[i], s:[f]}}", "slept", "dtype", "float32", "shape", 1,
                                      "data", slept));
        json_object_set_new(o, "info", json_object());
        /* what a real node measures (cn_runs.c): with it the gateway writes
         * the usage itself, without it PostgreSQL works it out */
        json_object_set_new(o, "usage", json_pack("{s:f, s:f, s:i, s:s}", "run_s", slept, "cpu_s", 0.0,
                                                  "gpus", r->ngpu > 0 ? r->ngpu : 1, "gpu_model",
                                                  model));
    } else {
        json_object_set_new(o, "error", json_pack("{s:s, s:s}", "code", r->cancelled ? "cancelled" : "rendezvous",
                                                  "message", r->cancelled ? "cancelled"
                                                                          : "the gang's peers did not meet"));
    }
    return o;
}

json_t *ss_register_json(const ss_node *n, const char *name, const char *model, int64_t gpu_mem_bytes)
{
    json_t *gpus = json_array();
    for (int g = 0; g < n->ngpus; g++)
        json_array_append_new(gpus, json_pack("{s:s, s:I}", "name", model, "memory_bytes",
                                              (json_int_t)gpu_mem_bytes));
    return json_pack("{s:s, s:s, s:s, s:i, s:[s], s:o}", "name", name, "url", "http://127.0.0.1:9",
                     "backend", "cuda", "slots", n->slots, "kernels", "sleep", "gpus", gpus);
}

int ss_gw_host(const char *gw, int k, char *base, size_t baselen, char *entry, size_t entrylen)
{
    char ip[64], rest[8];
    int port, end = 0;
    if (sscanf(gw, "http://%63[0-9.]:%d%n%7s", ip, &port, &end, rest) != 2 || gw[end] != '\0' ||
        port <= 0 || port > 65535)
        return -1;
    snprintf(base, baselen, "http://node-%d.sim:%d", k, port);
    snprintf(entry, entrylen, "node-%d.sim:%d:%s", k, port, ip);
    return 0;
}
