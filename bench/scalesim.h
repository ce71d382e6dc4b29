/* scalesim.h — the bookkeeping of kl-scalesim's simulated nodes, apart from
 * its I/O so that it is tested alone (tests/unit/bench/test_bench_scalesim.c):
 * what a lease's run request says, which devices a run holds on its node
 * (and whether the gateway placed it on devices already busy: an
 * over-commit), how long it "runs", and the JSON a node sends back. */
#ifndef KL_SCALESIM_H
#define KL_SCALESIM_H

#include <jansson.h>
#include <stdint.h>

#define SS_MAX_GPUS 16
/* Runs one node holds at once (its slots are its GPUs, at most 16). */
#define SS_MAX_RUNS 32

typedef enum {
    SS_FREE = 0,     /* an unused entry */
    SS_RDV,          /* a gang part meeting its peers before it starts */
    SS_RUNNING,
    SS_ENDED,        /* ended here, report not yet recorded by the gateway */
} ss_state;

typedef struct ss_run {
    ss_state state;
    char job_id[37];
    int attempt;
    int node_rank;             /* -1: a whole job */
    int nodes;                 /* 1, or the gang's size */
    int ngpu;
    int gpu[SS_MAX_GPUS];
    double seconds;            /* params.seconds of the sleep kernel */
    int cancelled, failed;     /* how it ended, when not succeeded */
    int overcommit;            /* devices it was placed on that were busy or absent */
    int64_t t_lease;           /* epoch ms: the lease answer carrying it arrived */
    int64_t t_start, t_end;    /* epoch ms: started (after the rendezvous), ended */
    int64_t runnable;          /* epoch ms: its devices were all free from then */
    int64_t rdv_next;          /* epoch ms: the next rendezvous try */
    int rdv_nap;               /* ms, 2 doubling to 50 */
    int rdv_busy;              /* a rendezvous exchange is in flight */
    int rdv_step;              /* how far through the gang's meeting (ss_rdv_next) */
} ss_run;

typedef struct ss_node {
    int ngpus, slots;
    int gpu_busy[SS_MAX_GPUS];           /* runs on each device: 0 or 1 unless over-committed */
    int64_t gpu_free_since[SS_MAX_GPUS]; /* epoch ms the device last became free */
    ss_run runs[SS_MAX_RUNS];
    uint64_t seq;                        /* runs ended here so far */
    int overcommits;                     /* runs placed on busy or absent devices */
    int slot_overcommits;                /* runs beyond the node's slots */
} ss_node;

/* Fills r from one run request of a lease answer ({job_id, attempt,
 * params: {seconds}, gpus, gpu_ids, dist: {nodes, node_rank}}). 0, or -1
 * with a reason in err when it is not one the simulator can run. */
int ss_run_parse(const json_t *req, ss_run *r, char *err, size_t errlen);

/* Starts holding r's devices on n (r copied into a free entry, state SS_RDV
 * for a gang part, else SS_RUNNING from now). Counts an over-commit for a
 * device that is busy or that n does not have, and for a run beyond n's
 * slots. Sets runnable to when the last of its devices became free. The
 * entry, or NULL when n holds SS_MAX_RUNS runs already (the run is refused). */
ss_run *ss_node_take(ss_node *n, const ss_run *r, int64_t now);

/* The gang's meeting, as NCCL's start is one: rank 0 puts the unique id
 * ("ncclid"), every other rank gets it and then puts "ready-<rank>", and
 * rank 0 gets each of those; no part starts before the whole gang has met.
 * The next exchange of r: 1 and *put, key (64 bytes) for its step; 0 when
 * r has met its gang (its clock starts). Each step's exchange, once it
 * answers 200, moves r on (rdv_step++). */
int ss_rdv_next(const ss_run *r, int *put, char *key, size_t keylen);

/* A gang part met its peers: its clock starts now. */
void ss_run_start(ss_run *r, int64_t now);

/* How long a run of seconds lasts here with time compressed by factor
 * (> 0): seconds / factor, in ms, at least 1. */
int64_t ss_duration_ms(double seconds, double factor);

/* r ended at now (state SS_ENDED): its devices are free from now, n's seq
 * counts it. */
void ss_node_end(ss_node *n, ss_run *r, int64_t now);

/* r's report was recorded by the gateway: its entry is free again. */
void ss_node_forget(ss_node *n, ss_run *r);

/* Runs on n not yet ended (running or meeting peers). */
int ss_node_active(const ss_node *n);

/* The entry of n holding run "<job_id>.<attempt>", or NULL. */
ss_run *ss_node_find(ss_node *n, const char *job_id, int attempt);

/* The run id a node reports: "<job_id>.<attempt>" into out (48 bytes). */
void ss_run_id(const ss_run *r, char *out, size_t len);

/* A heartbeat body as a real node sends it: running, slots, runs (ids of
 * every run it holds), draining, and device state (each device's memory
 * and utilisation: 100 % while busy). New reference. */
json_t *ss_heartbeat_json(const ss_node *n, int64_t gpu_mem_bytes);

/* The report of an ended run (succeeded with the sleep kernel's output
 * and the usage a node of GPUs of model measures, or cancelled or failed
 * with an error). New reference. */
json_t *ss_report_json(const ss_run *r, const char *model);

/* The registration body of a node named name with n's GPUs of model and
 * memory. New reference. */
json_t *ss_register_json(const ss_node *n, const char *name, const char *model, int64_t gpu_mem_bytes);

/* Host name k of the gateway gw ("http://<IPv4>:<port>", nothing after):
 * base gets "http://node-<k>.sim:<port>" (the prefix of URLs under that
 * name), entry "node-<k>.sim:<port>:<IPv4>" (libcurl's CURLOPT_RESOLVE for
 * it). 0, or -1 for any other form of gw (used as it is). */
int ss_gw_host(const char *gw, int k, char *base, size_t baselen, char *entry, size_t entrylen);

#endif
