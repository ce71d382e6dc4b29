/* store.h — every PostgreSQL access of the gateway: a pool of libpq
 * connections, statements prepared once per connection with bound
 * parameters, migrations, keys, jobs and nodes. Functions return 0 or a
 * negative errno: -ENOENT (no such row, or not this tenant's), -EIO
 * (PostgreSQL unreachable or failed, worth trying again), -EPROTO
 * (PostgreSQL refused the statement; trying again would not help),
 * -EAGAIN (the row is not in a state that allows the change), -EINVAL. */
#ifndef GW_STORE_H
#define GW_STORE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gw_store gw_store;

gw_store *gw_store_open(const char *conninfo, int pool_size);
void gw_store_close(gw_store *s);
/* 0 when a round trip to PostgreSQL succeeds. */
int gw_store_ping(gw_store *s);
/* 1 when an error of this SQLSTATE may pass if the statement is tried
 * again (classes 08 connection, 25 transaction state (a read-only standby),
 * 40 rollback, 53 resources, 57 operator intervention, 58 system, 55P03
 * lock not available, 26000 prepared statement missing; "" = no answer). */
int gw_store_sqlstate_transient(const char *sqlstate);
/* Monotonic ms when PostgreSQL was last found unreachable; 0 if never. */
int64_t gw_store_last_failure_ms(const gw_store *s);

/* The pool's figures since it opened, for /metrics. */
typedef struct gw_store_stats {
    uint64_t errors;          /* statements PostgreSQL failed or did not answer */
    uint64_t connect_errors;  /* connections that could not be made */
    uint64_t waits;           /* borrowers that found every connection lent */
    double wait_seconds;      /* how long they waited, in all */
    int size, busy;           /* connections, and those lent now */
} gw_store_stats;
void gw_store_stats_get(gw_store *s, gw_store_stats *out);

/* Queued and running jobs counted by (state, kernel, priority), for the
 * gauges of /metrics; the partial index of active jobs answers it without
 * reading finished ones. */
typedef struct gw_active_count {
    char state[16];
    char kernel[64];
    int priority;
    int64_t count;
} gw_active_count;
/* *rows (n of them) is malloc'd; the caller frees it. 0, -EIO, -ENOMEM. */
int gw_store_jobs_active(gw_store *s, gw_active_count **rows, int *n);
/* The price table that jobs ending from now on are billed by: JSON text
 * {"currency", "rates": {...}} as gw_prices_parse writes it (copied). Set
 * once before serving; without it, jobs end with usage but cost 0 and no
 * currency. 0 or -ENOMEM. */
int gw_store_set_prices(gw_store *s, const char *prices_json);

/* Applies the pending sql/NNN_*.sql files of dir, each in its own
 * transaction, under an advisory lock; logs each one applied. */
int gw_store_migrate(gw_store *s, const char *dir, char *err, size_t errlen);

/* Keys: the key text is hashed (SHA-256) by PostgreSQL; only the hash is
 * stored. create makes the tenant when it is new. */
int gw_store_key_create(gw_store *s, const char *tenant, int admin, const char *key);
int gw_store_key_revoke(gw_store *s, const char *key);

/* A validated job ready to be written; every pointer is borrowed. */
typedef struct gw_job_new {
    char id[37];              /* chosen by the gateway (a random UUID) */
    int64_t tenant_id;
    const char *kernel;
    const char *params_json;  /* resolved params, JSON text */
    int priority, timeout_s, max_attempts, gpus;
    int nodes;                /* resources.nodes (gpus is per node) */
    double gpu_memory_gb;     /* resources.gpu_memory_gb; 0: not given */
    const char *backend;      /* any|cpu|cuda */
    const char *labels_json;
    const char *inputs_meta;  /* JSON text: [{name,dtype,shape,offset,nbytes} | {..,blob,nbytes}] */
    const void *inputs_data;  /* the bytes of the offset entries */
    size_t inputs_len;
    const char *const *blob_ids;  /* the blob entries' ids and sizes */
    const uint64_t *blob_sizes;
    int nblobs;
    const char *idem_key;     /* Idempotency-Key, or NULL */
    const char *idem_hash;    /* with a key: the request's fingerprint, 64 hex digits */
    const char *webhook;          /* NULL: none */
    const char *webhook_events;   /* the states it gets, comma-separated */
    const char *task_json;        /* a task: its object as shown (task.h); NULL: a kernel job */
    const char *task_run_json;    /*         and as a node leases it */
    uint32_t image_key;           /*         gw_task_image_key of its image */
    /* filled by gw_store_jobs_insert */
    int64_t seq;              /* queue order (not for GW_IDEM_REPLAY/REUSED) */
    int64_t created_ms;       /* created_at, epoch ms by PostgreSQL's clock */
    int idem;                 /* GW_IDEM_* */
    char idem_job[37];        /* REPLAY, REUSED: the job the key names */
} gw_job_new;

/* What became of a submit's row: inserted; not inserted because its
 * Idempotency-Key already names a job made from the same request (replay
 * that job) or from another one (the key was reused: 422). */
enum { GW_IDEM_NEW = 0, GW_IDEM_REPLAY, GW_IDEM_REUSED };

/* Inserts n jobs, their inputs, blob references and first events in one
 * statement, committed before it returns (synchronous commit: one WAL flush
 * for the batch), and fills each job's seq and created_ms. A job with an
 * idem_key that a job of its tenant holds (or one earlier in the batch) is
 * not inserted: its idem and idem_job say which job and whether it came
 * from the same request; a concurrent statement holding the key is waited
 * for. 0 when all are
 * recorded; none is when it fails: -EIO when PostgreSQL could not be reached
 * or the connection was lost (whether it committed is unknown), -EAGAIN
 * when it failed on a live connection in a way that may pass if tried again
 * (a deadlock, an outage of resources), -EPROTO when PostgreSQL refused it
 * (a row it will refuse again: try the jobs one by one to find it),
 * -ENOMEM. */
int gw_store_jobs_insert(gw_store *s, gw_job_new *const *jobs, int n);
int gw_store_job_get(gw_store *s, int64_t tenant_id, const char *id, json_t **job);
/* The job object's member names in the order kowloon_job_json
 * (sql/objects.sql) writes them: *names a new JSON array of strings. 0,
 * -EIO. */
int gw_store_job_fields(gw_store *s, json_t **names);
/* Runs ANALYZE jobs when at least min_rows (> 0) rows changed since its
 * statistics were taken and at least as many as they counted (the table
 * doubled), or when the running jobs (running: the scheduler's count) are
 * far more than the statistics expect (gw_store_running_misplanned): the
 * prepared statements' generic plans are made again. The heartbeats' look
 * for unheld runs (ST_RUNS_UNHELD) hashed every running run for each batch
 * (14.5 ms a call at 1,000 nodes) under statistics taken while none ran.
 * 1 when it ran for the growth, 2 for the running jobs, 0 when not due,
 * -EIO; *changed: the rows changed, *expected: the running rows the
 * statistics expect. */
int gw_store_jobs_analyze_if_grown(gw_store *s, int64_t min_rows, int64_t running,
                                   int64_t *changed, int64_t *expected);
/* 1 when running jobs (at least GW_STORE_RUNNING_MISPLANNED_MIN) are more
 * than four times the planned (what the statistics expect). */
#define GW_STORE_RUNNING_MISPLANNED_MIN 500
int gw_store_running_misplanned(int64_t running, int64_t planned);

typedef struct gw_job_filter {
    const char *state, *kernel;
    const char *label_json;   /* {"k":"v"} for containment, or NULL */
    int64_t before_seq;       /* cursor: only jobs with seq < this; 0 = none */
    int limit;
} gw_job_filter;
/* Newest first. *jobs is an array (new reference); *next_seq is the cursor
 * for the next page or 0 when this page is the last. */
int gw_store_job_list(gw_store *s, int64_t tenant_id, const gw_job_filter *f,
                      json_t **jobs, int64_t *next_seq);

/* The stored outputs of a succeeded job: meta and info are JSON (new
 * references), data is malloc'd (caller frees). -EAGAIN with state filled when the job has
 * not succeeded. */
int gw_store_job_result(gw_store *s, int64_t tenant_id, const char *id, char state[16],
                        json_t **meta, unsigned char **data, size_t *len, json_t **info);

/* Cancels a queued job at once (*was = "queued"), or marks a running one
 * cancel_requested (*was = "running", node_id filled so the caller can wake
 * that node's lease poll). -EAGAIN when terminal. *job is the updated job. */
int gw_store_job_cancel(gw_store *s, int64_t tenant_id, const char *id, char was[16],
                        char node_id[37], json_t **job);

/* One attempt of a job on a node: what its node's lease poll hands out
 * (every field), or, for the reaper and the heartbeat's check, which run
 * (job_id, attempt, node_name). */
typedef struct gw_dispatch {
    char job_id[37];
    int attempt;
    int timeout_s, gpus;
    char kernel[64];
    char backend[8];
    char node_id[37];
    char node_name[128];
    json_t *params;           /* owned */
    json_t *task;             /* owned: a task's lease form (task.h); NULL: a kernel run */
    json_t *inputs_meta;      /* owned */
    unsigned char *inputs;    /* owned */
    size_t inputs_len;
    int node_rank;            /* a part of a multi-node job: its node_rank; -1: a whole job */
    int nodes;                /* nodes the job spans */
    int ngpu_ids, gpu_ids[16]; /* the devices the scheduler chose; 0: the node chooses */
} gw_dispatch;
void gw_dispatch_clear(gw_dispatch *d);

/* Clears each of the n records and frees list. */
void gw_dispatch_free(gw_dispatch *list, int n);

/* Runs on nodes. The scheduler claims jobs for nodes; each node's lease
 * poll takes the runs claimed for it. */
/* One node's part of a multi-node job (node_rank = its index in
 * gw_claim.gang). */
typedef struct gw_claim_node {
    char node_id[37];
    int ngpu, gpu_ids[16];    /* the devices its ranks use; 0: a CPU node */
} gw_claim_node;
typedef struct gw_claim {
    char job_id[37], node_id[37]; /* node_id: node_rank 0's node */
    int ngpu, gpu_ids[16];    /* node_rank 0's GPUs (all of a single-node job's) */
    int nnodes;               /* 1 (or 0): a single-node job; > 1: gang[0..nnodes) */
    gw_claim_node *gang;      /* owned by the caller; node_rank order */
    int hand;                 /* a single-node run handed to its node's poll held
                                 here: leased at the claim (lease.c) */
    int claimed;              /* out: 1 when claimed, 0 when no longer queued */
    int attempt;              /* out, when claimed */
    gw_dispatch *run;         /* out, when hand and claimed: the run's lease
                                 record (the caller's: gw_dispatch_free(run, 1)) */
    char kernel[64];          /* out, when claimed */
    double first_wait_s;      /* out: submit to start when this is the first
                                 attempt, else -1 */
} gw_claim;
/* queued -> running on its node, attempts + 1, for every job of claims in
 * one statement; jobs no longer queued (cancelled meanwhile) are left. A
 * multi-node claim (nnodes > 1) writes the job_ranks rows of its gang in
 * the same statement: whole or not at all. A claim with hand is leased in
 * the same statement and comes back with its lease record (run; NULL when
 * it could not be read: the run is leased all the same). 0, -EIO (nothing
 * was claimed), -ENOMEM. */
int gw_store_jobs_claim(gw_store *s, gw_claim *claims, int n);
/* Takes, in one statement, up to max runs claimed for node_id and not
 * taken yet (leased from now on; records with inputs), and the cancels of
 * its leased runs not handed out yet (records with job_id and attempt
 * only). Both lists are the caller's (gw_dispatch_free). 0, -EIO, -ENOMEM. */
int gw_store_lease_take(gw_store *s, const char *node_id, int max, gw_dispatch **runs,
                        int *nruns, gw_dispatch **cancels, int *ncancels);
/* Takes the n runs (jobs[i], attempts[i]) handed to a poll at their claim and
 * never answered back to claimed, not leased: the next lease look of
 * their node takes them. A run that moved on (ended, re-queued) is left.
 * 0, -EIO, -ENOMEM. */
int gw_store_runs_unhand(gw_store *s, const char (*jobs)[37], const int *attempts, int n);
/* has[i] = 1 when a lease look for node ids[i] would find something now
 * (runs or cancels: gw_store_lease_take), for n nodes in one query. 0,
 * -EIO, -ENOMEM. */
int gw_store_nodes_with_work(gw_store *s, const char (*ids)[37], int n, int *has);
/* Runs leased more than grace_s ago that their node does not hold, for
 * many nodes in one query: beats is a JSON array [{id: node, held: [run
 * ids "<job_id>.<attempt>"]}]. Records of job_id, attempt and node_name. */
int gw_store_runs_unheld(gw_store *s, const char *beats, int grace_s, gw_dispatch **out, int *n);
/* Up to 64 running jobs past timeout_s + grace_s since they started, oldest
 * first. Records of job_id, attempt and node_name. */
int gw_store_runs_overdue(gw_store *s, int grace_s, gw_dispatch **out, int *n);
/* ended[i] = 1 when job ids[i] has ended (succeeded, failed, cancelled),
 * for n jobs in one query. 0 or -EIO. */
int gw_store_jobs_ended(gw_store *s, const char (*ids)[37], int n, int *ended);
/* Every tenant's running quota (its own, else def; 0 = none) and running
 * jobs, for placing without a query per job. */
typedef struct gw_tenant_run {
    int64_t tenant_id;
    int limit, running;
    int units;                /* the devices its runs hold now (a CPU run: 1 a node) */
    double weight;            /* its fair-share weight (> 0) */
} gw_tenant_run;
/* Every tenant's quota (def where it has none) and weight; running 0. */
int gw_store_tenants_quotas(gw_store *s, int def, gw_tenant_run **out, int *n);
/* A run on a node: a single-node job, or one node's part of a gang. */
typedef struct gw_run_place {
    char node_id[37], job_id[37];
    int ngpu, gpu_ids[16];    /* the devices the scheduler gave it */
    int64_t end_ms;           /* started + timeout_s, epoch ms */
    int64_t tenant_id;
    int live;                 /* its job runs with it (a part of an ended attempt: 0) */
    int attempt;              /* the attempt it is a run of */
    int64_t start_ms;         /* when it started, epoch ms (0: a part of a multi-node job) */
    int stop;                 /* a single-node run: 1, 2 while preemption stops it; 0: a part */
} gw_run_place;
/* --fair-preempt: the runs of jobs[i] on nodes[i] are to stop (each a
 * running single-node job on that node, not cancelled or preempted
 * already: marked[i] = 1); each node's next lease poll carries the
 * cancel, and the run's report queues its job again, not counted
 * against max_attempts (027_preempt.sql). 0, -EIO, -ENOMEM. */
int gw_store_jobs_preempt(gw_store *s, const char (*jobs)[37], const char (*nodes)[37], int n,
                          int *marked);
/* Every run on a node now, for placement: the caller frees *out. */
int gw_store_runs_placed(gw_store *s, gw_run_place **out, int *n);

/* Fenced transitions: each applies only while the job is running with this
 * attempt, and returns -EAGAIN otherwise (a late or duplicate report).
 * Each records the job's usage as it ends (012_usage.sql): usage_json is
 * what the node measured ({"run_s", "cpu_s", "gpus", "gpu_model"}, checked
 * by gw_usage_from_report) or NULL when no node reported; backend where the
 * run happened, NULL when not known. */
/* Only from node_id, the node the run is on, and for the kernel the job
 * runs (the outputs were checked against its spec); a blob output must be
 * one node_id stored for this attempt (gw_store_run_output), else
 * -EPROTO (nothing recorded). */
int gw_store_job_succeed(gw_store *s, const char *job_id, int attempt, const char *node_id,
                         const char *kernel, const char *backend, const char *info_json,
                         const char *meta_json, const void *data, size_t len,
                         const char *usage_json);
/* One succeeded run whose outputs are all inline, for
 * gw_store_jobs_succeed_inline. */
typedef struct gw_success {
    const char *job_id;
    int attempt;
    const char *backend, *info_json, *meta_json;
    const char *usage_json;   /* what the node measured, or NULL (gw_store_job_succeed) */
    const char *usage_u1, *usage_u2; /* the usage but queue_s and bytes_in, made by
                                        gw_usage_fragments; NULL: kowloon_usage */
    const void *data;
    size_t len;
    int recorded;   /* out: 1 when this attempt was current and is now succeeded */
    const char *kernel; /* the report's kernel: the job must run it */
    const char *node_id; /* the node that reported it: the run must be there */
} gw_success;
/* Records n such runs, reported by one node or many, in one statement,
 * each fenced by its own attempt and by its run being on its node_id: 0
 * (then recorded says which were current), or -EIO / -EPROTO for all. */
int gw_store_jobs_succeed_inline(gw_store *s, gw_success *rows, int n);
/* node_id: the node whose report this is, which must hold the run (else
 * -EAGAIN); NULL for the gateway's own decisions (a timeout). */
int gw_store_job_fail(gw_store *s, const char *job_id, int attempt, const char *state,
                      const char *code, const char *message, const char *backend,
                      const char *usage_json, const char *node_id);
/* A queued job as the ready queue needs it; not_before_ms (epoch ms, 0 =
 * none) is the end of its retry back-off. */
typedef struct gw_queued {
    char id[37];
    int64_t seq;
    int priority, gpus;
    int nodes;                /* resources.nodes (1: a single-node job) */
    int gpu_mem_mb;           /* resources.gpu_memory_gb in MiB; 0: any */
    int timeout_s;
    char backend[8];
    int64_t not_before_ms;
    int64_t tenant_id;
    uint32_t image;           /* a task: gw_task_image_key of its image; 0: a kernel job */
} gw_queued;

/* gw_queued.gpu_mem_mb of a job's resources.gpu_memory_gb (0: any): GB
 * read as GiB, rounded up to whole MiB. GPU_MEM_MB_SQL (store.c) is the
 * same for the queued rows PostgreSQL returns. */
static inline int gw_gpu_mem_mb(double gb)
{
    double mb = gb * 1024;
    int m = (int)mb;
    return gb > 0 ? (m < mb ? m + 1 : m) : 0;
}

/* Multi-node jobs (store_gangs.c). 1 when attempt is the running attempt
 * of multi-node job job_id, 0 when it is not (ended, or another runs),
 * -ENOENT when there is no such multi-node job, -EIO. */
int gw_store_gang_attempt(gw_store *s, const char *job_id, int attempt);
/* Records the end of node_rank's part of attempt (state: succeeded,
 * failed, cancelled; once: a second report changes nothing), reported by
 * node_id, and gives the nodes of the attempt's parts still open, *others
 * malloc'd (the caller frees). 0, -EPERM when node_id does not hold that
 * part (nothing changes), -EIO, -ENOMEM. */
int gw_store_gang_rank_end(gw_store *s, const char *job_id, int attempt, int node_rank,
                           const char *node_id, const char *state, char (**others)[37], int *n);
/* The nodes of attempt's parts still open, *nodes malloc'd; its parts on
 * nodes that are down are closed (failed). 0, -EIO, -ENOMEM. */
int gw_store_gang_nodes(gw_store *s, const char *job_id, int attempt, char (**nodes)[37], int *n);

typedef struct gw_backoff { int base_ms, max_s; } gw_backoff;
typedef struct gw_requeued { int requeued; gw_queued q; } gw_requeued;

/* Back to queued when attempts remain, after a back-off (uncounted: the
 * attempt is given back, for runs that never started, and the job is
 * placed again at once); failed with code when attempts are spent;
 * cancelled when a cancel was asked for. out->requeued says which. */
/* node_id: as gw_store_job_fail. */
int gw_store_job_requeue(gw_store *s, const char *job_id, int attempt, int uncounted,
                         const char *code, const char *message, const gw_backoff *bo,
                         const char *backend, const char *usage_json, const char *node_id,
                         gw_requeued *out);

/* GET /v1/usage: the usage of the jobs of a tenant (tenant_name when not
 * NULL, else tenant_id) that ended in [from_ms, to_ms), deleted ones
 * included, summed in all (*totals) and per group (*groups, an array of
 * objects with "key"): group is "kernel", "day", "label" (by label_key) or
 * NULL (no groups). *tenant gets the tenant's name, *blob_bytes the blob
 * bytes it is charged for now. New references. -ENOENT for no such
 * tenant, -EIO. */
int gw_store_usage(gw_store *s, int64_t tenant_id, const char *tenant_name, int64_t from_ms,
                   int64_t to_ms, const char *group, const char *label_key, char tenant[129],
                   json_t **totals, json_t **groups, uint64_t *blob_bytes);
/* GET /v1/stats/history: the tenant's (tenant_name when not NULL, else
 * tenant_id) last minutes one-minute buckets, oldest first, in *buckets
 * (an array of {"t", "submitted", "started", "finished", "queued",
 * "running"}), and its jobs queued and running now in *now. *tenant gets
 * the tenant's name. New references. -ENOENT for no such tenant, -EIO. */
int gw_store_stats_history(gw_store *s, int64_t tenant_id, const char *tenant_name, int minutes,
                           char tenant[129], json_t **now, json_t **buckets);

/* Up to limit queued jobs with seq > after_seq, in seq order: a page of
 * what the ready queue is rebuilt from. */
int gw_store_jobs_queued(gw_store *s, int64_t after_seq, int limit, gw_queued **out, int *n);

/* Nodes. */
#define GW_NODE_IMAGES_MAX 256
typedef struct gw_node {
    char id[37], name[128], url[512], backend[8];
    int slots, ngpus, up;
    int draining;             /* an admin drained it, or the node lost its GPU (its
                                 heartbeat's state has a fault): place nothing here */
    int gpu_mem_mb[16];       /* each device's memory (registration) */
    int gpu_util[16];         /* each device's utilisation % (heartbeat; -1: unknown) */
    int tasks;                /* it has a task engine (nodes.tasks) */
    int nimages;              /* -1: it does not list its images */
    uint32_t images[GW_NODE_IMAGES_MAX]; /* their keys (task.h) */
} gw_node;
/* A registration: what the node says of itself, and the credentials
 * (SHA-256, hex) it presents (NULL: none) and that it gets if it takes the
 * name anew. */
typedef struct gw_node_reg {
    const char *name, *url, *backend, *reason, *gpus_json, *kernels_json;
    const char *tasks_json;   /* its task engine ({engine, version, images}); NULL: none said */
    int slots;
    const char *presented_hash, *new_hash;
    int timeout_s;            /* a holder silent this long no longer holds the name */
} gw_node_reg;
/* Registers (or registers again) the node named reg->name: *id_out its id
 * (kept by the name across registrations), *issued 1 when the new
 * credential is now the node's, 0 when the node proved itself with the
 * one it presented and keeps it. -EEXIST (nothing written) when the name's
 * holder lives (up, heartbeats within timeout_s) and the presented
 * credential is not its; -EIO. */
int gw_store_node_register(gw_store *s, const gw_node_reg *reg, char id_out[37], int *issued);
/* Records many nodes' heartbeats in one statement: beats_json is
 * [{"id", "running", "state" (device state), "tasks" (task images;
 * each absent keeps the last)}].
 * *found (the caller frees it) lists the ids of nodes that exist. 0,
 * -EIO, -ENOMEM. */
int gw_store_nodes_heartbeat(gw_store *s, const char *beats_json, char (**found)[37], int *nfound);
/* The node left: down, and its credential no longer valid (its name is
 * free). -ENOENT for an unknown node. */
int gw_store_node_remove(gw_store *s, const char *id);

/* What a node may touch (store_nodes.c). */
/* The node whose credential has this SHA-256 (hex): id and name (>= 128
 * bytes). -ENOENT when none has, -EIO. */
int gw_store_node_by_credential(gw_store *s, const char *hash_hex, char id[37], char *name,
                                size_t namelen);
/* The same for n hashes at once: each(arg, hash_hex, id, name) for every
 * one a node has (the others are not named). 0 or -EIO. */
int gw_store_nodes_by_credentials(gw_store *s, const char *const *hash_hex, int n,
                                  void (*each)(void *arg, const char *hash_hex, const char *id,
                                               const char *name),
                                  void *arg);
/* 1 when attempt of job_id is running and node_id holds it (its run, or a
 * part of a multi-node job's attempt), 0 when not, -EIO. */
int gw_store_node_run_held(gw_store *s, const char *node_id, const char *job_id, int attempt);
/* For a rendezvous of multi-node job job_id's attempt: 1 when it is the
 * running attempt and node_id holds a part of it, 0 when the node held a
 * part of the job but this is not its running attempt of it (stale),
 * -EPERM when the node never held a part of the job, -ENOENT when there is
 * no such multi-node job, -EIO. */
int gw_store_node_gang_member(gw_store *s, const char *node_id, const char *job_id, int attempt);
/* The size of blob id when it is an input of a run node_id holds now;
 * -ENOENT when it is not, -EIO. */
int gw_store_node_blob_get(gw_store *s, const char *node_id, const char *id, uint64_t *size);
/* Records blob id (size bytes, hashed) as an output node_id stored for
 * attempt of job_id: only such blobs may be that attempt's outputs. 0,
 * -EIO. */
int gw_store_run_output(gw_store *s, const char *job_id, int attempt, const char *id,
                        uint64_t size, const char *node_id);
int gw_store_nodes_json(gw_store *s, json_t **nodes);
/* [{backend, gpu_model?, gpu_memory_bytes?, nodes, gpus?, free_gpus?,
 * slots?, free_slots?}]: free capacity per GPU model (and CPU slots), of
 * the nodes up and not draining; new reference. 0 or -EIO. */
int gw_store_capacity_json(gw_store *s, json_t **capacity);
int gw_store_nodes_load(gw_store *s, gw_node **out, int *n);
/* Marks down every node silent for more than timeout_s; returns how many
 * were marked in *marked. */
int gw_store_nodes_expire(gw_store *s, int timeout_s, int *marked);
/* Running jobs whose node is down: the reaper requeues them. */
int gw_store_jobs_on_down_nodes(gw_store *s, gw_dispatch **out, int *n);
/* Backends offered by nodes that are up, as a JSON array of strings. */
int gw_store_backends_up(gw_store *s, json_t **backends);

/* Tenants, keys and limits (store_tenants.c). */

/* What a valid key says of its caller; a tenant limit not set is -1. */
typedef struct gw_key_auth {
    int64_t tenant_id, key_id;
    int admin;
    int rate_rps, rate_burst;
    int max_queued;
    int64_t jobs_deleted;     /* the tenant's deleted jobs so far (jobcache.h) */
} gw_key_auth;
/* -ENOENT for an unknown or revoked key. */
int gw_store_auth_key(gw_store *s, const char *key, gw_key_auth *out);
/* The tenant's queued jobs in *queued, counted no further than limit (> 0). */
int gw_store_tenant_queued(gw_store *s, int64_t tenant_id, int limit, int64_t *queued);
/* *ok = 1 when the tenant of job_id runs fewer jobs than its running quota
 * (its own, else def; 0 = none), or when the job is not found. */
int gw_store_tenant_running_ok(gw_store *s, const char *job_id, int def, int *ok);

/* One limit of a tenant update: set = 0 leaves it; value -1 writes NULL. */
typedef struct gw_store_limit { int set, value; } gw_store_limit;
/* Creates the tenant or updates the limits that are set. *created says
 * which; *tenant is the tenant object (new reference). */
/* A tenant's task settings as POST /v1/tenants gives them. */
typedef struct gw_store_task_settings {
    int images_set;           /* task_images given */
    const char *images_json;  /* a JSON list of patterns; NULL: the gateway's --task-images */
    int egress;               /* task_egress: 1, 0, or -1 (not given) */
} gw_store_task_settings;
int gw_store_tenant_upsert(gw_store *s, const char *name, const gw_store_limit lim[4], double weight,
                           const gw_store_task_settings *task,
                           int *created, json_t **tenant);
/* Every tenant object, by name (new reference). */
int gw_store_tenants_json(gw_store *s, json_t **tenants);
/* Stores a new key of an existing tenant: prefix (the key's first 11
 * characters), created_at and the key's id filled. -ENOENT when there is no
 * such tenant. */
int gw_store_key_issue(gw_store *s, const char *tenant, int admin, const char *key,
                       char prefix[16], char created_at[32], int64_t *id);
/* Revokes the active key with this id (its prefix into prefix). -ENOENT
 * when no active key has it. */
int gw_store_key_revoke_id(gw_store *s, int64_t id, char prefix[16]);
/* [{id, prefix, tenant, admin, created_at, revoked_at}] of tenant's keys
 * (NULL: every tenant's), new reference. 0 or -EIO. */
int gw_store_keys_list(gw_store *s, const char *tenant, json_t **keys);
/* active[i] = 1 when key ids[i] is still active (not revoked), for the n
 * keys. 0, -EIO or -ENOMEM. */
int gw_store_keys_active(gw_store *s, const int64_t *ids, int n, int *active);
/* Revokes the one active key with this prefix (its id into *id). -ENOENT
 * when none has it, -EEXIST when several do (nothing is revoked). */
int gw_store_key_revoke_prefix(gw_store *s, const char *prefix, int64_t *id);
/* Sets or clears a node's draining flag; *node is {id, name, state,
 * draining} (new reference). -ENOENT for an unknown node. */
int gw_store_node_drain(gw_store *s, const char *id, int draining, json_t **node);

/* Blobs (store_blobs.c). Records that tenant_id may read blob id of size
 * bytes, creating the blob's record or touching its last use. *created is 1
 * when the tenant had no reference before. -EDQUOT when the reference would
 * take the tenant's blob bytes past quota (0: none; a blob the tenant holds
 * already, through a job, costs nothing); -EIO. tenant_id 0 records the
 * blob alone (a run's output, owned by nobody yet). */
int gw_store_blob_record(gw_store *s, int64_t tenant_id, const char *id, uint64_t size,
                         uint64_t quota, int *created);
/* The size of a blob the tenant may read, touching its last use; -ENOENT
 * when it may not (or no such blob), -EIO. */
int gw_store_blob_get(gw_store *s, int64_t tenant_id, const char *id, uint64_t *size);
/* Drops the tenant's reference; -ENOENT when it had none, -EIO. */
int gw_store_blob_unref(gw_store *s, int64_t tenant_id, const char *id);
/* The blob bytes the tenant is charged for: every blob it holds, through
 * its own reference or a job's, counted once (021_quota_retention.sql).
 * 0 or -EIO. */
int gw_store_tenant_blob_bytes(gw_store *s, int64_t tenant_id, uint64_t *bytes);
/* What n blobs (ids, sizes) would add to a tenant's bytes (*need: the
 * sizes of those it does not hold yet, each once) and what it holds now
 * (*used). The tenant is tenant_id, or with tenant_id 0 the tenant of job
 * job_id. 0 or -EIO. */
int gw_store_blobs_need(gw_store *s, int64_t tenant_id, const char *job_id,
                        const char *const *ids, const uint64_t *sizes, int n, uint64_t *need,
                        uint64_t *used);

/* Deleting ended jobs (store_retention.c): the job, its events, inputs,
 * results, webhook deliveries and blob references; its usage is kept for
 * GET /v1/usage (usage_records). Deletes job id of tenant_id when it has
 * ended: 0, -EAGAIN with was its state when it has not, -ENOENT when the
 * tenant has no such job, -EIO. */
int gw_store_job_delete(gw_store *s, int64_t tenant_id, const char *id, char was[16]);
/* Deletes up to limit jobs that ended more than days ago, the oldest
 * first; *deleted counts them, *tenants the tenants they were of. 0 or
 * -EIO. */
int gw_store_jobs_expire(gw_store *s, int days, int limit, int *deleted, int *tenants);
/* Removes up to limit blobs that nobody references and that were last used
 * more than retention_s ago: in one transaction, their rows are deleted and
 * remove(id, arg) is called for each (it deletes the bytes: 0 or -ENOENT,
 * else the sweep rolls back). *removed counts them; 0 or -EIO. */
int gw_store_blob_sweep(gw_store *s, int retention_s, int limit,
                        int (*remove)(const char *id, void *arg), void *arg, int *removed);
/* What a queued job's ETA is made of: *runs succeeded jobs of kernel among
 * the last 2000 submitted, their mean run time *mean_ms; and *slots, the
 * slots of the nodes up and not draining. 0 or -EIO. */
int gw_store_kernel_run_ms(gw_store *s, const char *kernel, int64_t *runs, int64_t *mean_ms);
int gw_store_slots_up(gw_store *s, int64_t *slots);
/* Deletes up to limit Idempotency-Keys past their 24 hours, the oldest
 * first; *removed counts them. 0 or -EIO. */
int gw_store_idem_sweep(gw_store *s, int limit, int *removed);

/* Webhooks (store_webhooks.c). A delivery claimed for one attempt. */
typedef struct gw_wh_delivery {
    int64_t id, tenant_id;
    int attempts;           /* made before this one */
    char *url, *payload;    /* owned */
    char secret[64];        /* the tenant's; "" when it has none yet */
} gw_wh_delivery;

/* Claims up to max deliveries that are due, hiding them from every claim
 * for lease_s seconds (the attempt must end by then). Fair between
 * tenants: no tenant gets more than tenant_cap in flight, counting the
 * busy_n[i] deliveries of tenant busy_ids[i] the caller has in flight
 * already (nbusy of them), and every tenant's oldest due delivery comes
 * before any tenant's next one. *out is a calloc'd array of *n (caller
 * frees with gw_wh_deliveries_free); 0, -EIO or -ENOMEM. */
int gw_store_wh_claim(gw_store *s, int max, int lease_s, int tenant_cap, const int64_t *busy_ids,
                      const int *busy_n, int nbusy, gw_wh_delivery **out, int *n);
/* Gives claims back unused: the n deliveries are due again at once (for
 * any gateway). 0 or -EIO. */
int gw_store_wh_release(gw_store *s, const int64_t *ids, int n);
/* Deletes up to max deliveries that ended (delivered or failed) more than
 * retention_s ago, with their attempts; *deleted says how many. 0 or -EIO. */
int gw_store_wh_trim(gw_store *s, int retention_s, int max, int *deleted);
void gw_wh_deliveries_free(gw_wh_delivery *d, int n);
/* Records attempt of delivery id: status the HTTP status (0: none came),
 * error NULL or what went wrong, delivered when it counts as delivered.
 * A delivery not delivered is tried again retry_ms later, unless that is
 * past max_age_s after its creation: then it is failed. state (>= 12
 * bytes) gets the delivery's new state ("" when it was not pending any
 * more: another gateway took it over after this one's lease lapsed).
 * 0 or -EIO. */
int gw_store_wh_record(gw_store *s, int64_t id, int status, const char *error, int duration_ms,
                       int delivered, int64_t retry_ms, int max_age_s, char *state);
/* The tenant's webhook secret into secret (>= 64 bytes) and its creation
 * time (>= 32 bytes): made now when it has none, replaced when rotate.
 * 0, -EIO or -ENOMEM. */
int gw_store_wh_secret(gw_store *s, int64_t tenant_id, int rotate, char *secret, char *created);
/* GET /v1/jobs/{id}/deliveries' object: the job's webhook and deliveries
 * with their attempts (new reference in *out); -ENOENT when the tenant has
 * no such job, -EIO. */
int gw_store_wh_list(gw_store *s, int64_t tenant_id, const char *job_id, json_t **out);

/* The event log (store_events.c), as Server-Sent Events streams read it. */
typedef struct gw_event_row {
    int64_t id, tenant_id;
    char job_id[37], state[16], kernel[64];
    json_t *data;             /* owned: {id, job_id, state, attempt, node, detail, at,
                                 kernel, labels} */
} gw_event_row;
/* Where the log may be read up to: *last is the id drawn last (0: none
 * yet); then, read after it (two statements, in that order; see
 * sql/014_events.sql), *next is the next xid to be assigned and *xmin the
 * oldest xid still running (or next, when none runs). 0, -EIO, or -EAGAIN
 * when next cannot be told this time (xid wraparound's edge). */
int gw_store_events_horizon(gw_store *s, int64_t *last, uint64_t *xmin, uint64_t *next);
/* The id drawn last (0: none yet). 0 or -EIO. */
int gw_store_events_last(gw_store *s, int64_t *last);
/* Up to limit events with after < id <= upto in id order, of every job,
 * of tenant_id's jobs (tenant_id > 0) or of one job (job_id not NULL).
 * *rows is the caller's (gw_event_rows_free). 0, -EIO or -ENOMEM. */
int gw_store_events_read(gw_store *s, int64_t after, int64_t upto, int64_t tenant_id,
                         const char *job_id, int limit, gw_event_row **rows, int *n);
void gw_event_rows_free(gw_event_row *rows, int n);
/* Records a node's progress reports, reports a JSON array of {id, attempt,
 * progress}, in one statement: those of attempts still running on node_id
 * (a part of a multi-node job's included). *rows (the
 * caller's, gw_event_rows_free) are the jobs changed, id 0, data {job_id,
 * state, attempt, node, kernel, labels, progress}. 0, -EIO or -ENOMEM. */
int gw_store_jobs_progress(gw_store *s, const char *node_id, const char *reports,
                           gw_event_row **rows, int *n);
/* The id of job_id's last event (0: none). 0 or -EIO. */
int gw_store_job_last_event(gw_store *s, const char *job_id, int64_t *id);

/* Tasks (store_tasks.c). */
/* The tenant's task settings: *has 1 with its image patterns in *images
 * (comma-separated, the caller's to free) when it has its own, else 0 and
 * NULL (the gateway's --task-images apply); *egress 1 when its tasks may
 * ask network egress. 0 or -EIO (-ENOMEM). */
int gw_store_tenant_tasks(gw_store *s, int64_t tenant_id, char **images, int *has, int *egress);
/* Records the end of a task part that node_id holds: exit_code (NULL:
 * none; only part 0's is the job's) and its log blob (NULL: none). 0,
 * -EAGAIN (not that node's current run, or not a task), -EIO. */
int gw_store_task_ended(gw_store *s, const char *job_id, int attempt, int part,
                        const int *exit_code, const char *log_blob, int64_t log_bytes,
                        int64_t dropped, const char *node_id);
/* Appends a node's live log batch (batch_json: [{job_id, attempt, part,
 * off, b64}]) to the runs it holds, each part capped at cap bytes; *rows
 * (the caller's, gw_event_rows_free) are the chunks added, data {job_id,
 * attempt, part, offset, text, kernel, labels}. 0, -EIO, -ENOMEM. */
int gw_store_task_logs_append(gw_store *s, const char *node_id, const char *batch_json,
                              int64_t cap, gw_event_row **rows, int *n);
/* A task's log part as GET /v1/jobs/{id}/logs reads it. */
typedef struct gw_task_log {
    char state[16];
    int is_task;
    int attempt;              /* the job's current attempt, whose log this is */
    char blob[80];            /* the part's stored log when it ended this attempt; "" else */
    unsigned char *data;      /* else the live bytes from start on (owned) */
    size_t len;
    int64_t start;
} gw_task_log;
/* Reads part of tenant_id's job job_id from byte from: -ENOENT (no such
 * job of the tenant), -EIO, -ENOMEM. */
int gw_store_task_log_read(gw_store *s, int64_t tenant_id, const char *job_id, int part,
                           int64_t from, gw_task_log *out);
/* [{image, nodes}]: the images the nodes up with an engine list. */
int gw_store_task_images(gw_store *s, json_t **images);

#endif
