/* kl.h — the kernel library's public interface: tensors, the catalog of
 * workloads (parameters, inputs, outputs, limits), argument checks, and the
 * CPU entry points. Depends on libc only; the CUDA plugin shares these types
 * (see kl_plugin.h). Nothing here knows about JSON or HTTP. */
#ifndef KL_H
#define KL_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KL_MAX_DIMS 8
#define KL_MAX_PARAMS 16
#define KL_MAX_IO 8
/* Elements per tensor, inputs and outputs alike (1 GiB of float32). */
#define KL_MAX_ELEMS ((int64_t)1 << 30)

/* Error codes: every kl_ function returns 0 or one of these. They are
 * negative errno values, the one error space of Kowloon's C code (a -errno
 * from a system call means what its name says here too, and strerror(-rc)
 * names any of them); the names say what each means for a kernel. */
enum {
    KL_OK = 0,
    KL_EINVAL = -EINVAL,        /* a parameter or input is out of range or shape */
    KL_ENOMEM = -ENOMEM,        /* allocation failed */
    KL_ECANCELED = -ECANCELED,  /* the run's cancel flag was raised */
    KL_EBACKEND = -EIO,         /* the backend (CUDA, BLAS) failed; maybe transient */
    KL_ENOTSUP = -ENOTSUP,      /* kernel or option not offered by this backend */
    KL_ETIMEDOUT = -ETIMEDOUT,  /* a rendezvous or collective of a multi-node run
                                   timed out: a peer is gone or never came */
    KL_EDEVICE = -ENODEV,       /* the device is unusable for the rest of this
                                   process: a sticky CUDA error (illegal address,
                                   ECC, ...) poisoned its context, so every later
                                   run here would fail too */
};

typedef enum { KL_F32 = 0, KL_F64 = 1, KL_I32 = 2 } kl_dtype;

/* A dense row-major tensor. `data` is owned by whoever filled the struct;
 * kl_tensor_free releases data allocated by the library (outputs). */
typedef struct kl_tensor {
    kl_dtype dtype;
    int ndim;
    int64_t shape[KL_MAX_DIMS];
    void *data;
} kl_tensor;

/* Error detail for the user: `field` names the offending param or input in
 * the public form ("params.n", "inputs.a"), `message` says what is wrong. */
typedef struct kl_err {
    char field[64];
    char message[256];
} kl_err;

typedef enum {
    KL_PARAM_NUMBER = 0, /* double within [min, max] */
    KL_PARAM_INT = 1,    /* integer within [min, max] */
    KL_PARAM_ENUM = 2,   /* one of `choices` (NULL-terminated) */
} kl_param_type;

typedef struct kl_param_spec {
    const char *name;
    kl_param_type type;
    int required;            /* 0: `def` (or def_choice) is used */
    double min, max, def;    /* NUMBER and INT */
    const char *const *choices; /* ENUM */
    int def_choice;          /* ENUM default index */
    const char *doc;
} kl_param_spec;

typedef struct kl_io_spec {
    const char *name;
    kl_dtype dtype;
    int ndim_min, ndim_max;
    int optional;            /* inputs only */
    const char *shape_doc;   /* "[m,k]" */
    int64_t max_elems;       /* limit the catalog shows; 0 = no input */
    const char *doc;
    int shard;               /* inputs: a multi-node run gets only its
                                node's rows (dim 0; kl_shard_rows) */
} kl_io_spec;

/* A resolved parameter value: `num` for NUMBER and INT, `choice` for ENUM. */
typedef struct kl_value {
    double num;
    int choice;
    int given;               /* 0 when the default was used */
} kl_value;

/* Facts about a run that are not tensors, as key/value text the kernel
 * fills (gemm: "precision" = "bf16"); the node returns them as the run's
 * "info" object and the gateway shows them on the job and its result. */
#define KL_INFO_MAX 8
typedef struct kl_info {
    int n;
    struct {
        char key[32];
        char value[96];
    } kv[KL_INFO_MAX];
} kl_info;

/* Sets key (replacing an earlier value); NULL info is a no-op. */
void kl_info_set(kl_info *info, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* CPU time of one run, over all its threads: the thread that calls start
 * and stop (its own clock between the two) plus every helper thread the
 * CPU kernels start meanwhile from that thread (kl__parallel's workers,
 * allreduce's ranks), each adding its whole CPU time as it ends. Threads
 * of a library's own pool (OpenBLAS's) are not the run's and are not seen.
 * start and stop are called on the same thread. */
typedef struct kl_cputime {
    int64_t start_ns;        /* the calling thread's clock at start */
    int64_t helpers_ns;      /* added by helper threads (atomically) */
} kl_cputime;
void kl_cputime_start(kl_cputime *c);
/* Nanoseconds of CPU time since kl_cputime_start; helpers stop counting. */
int64_t kl_cputime_stop(kl_cputime *c);

/* What a long kernel reports while it runs: the fraction done (0..1) and a
 * few named numbers of its own (train_mlp: epoch, loss; kmeans: iteration,
 * inertia). The node keeps the latest of each run and sends it on to the
 * gateway, which shows it as the job's "progress". */
#define KL_PROGRESS_MAX 6
typedef struct kl_progress {
    double fraction;
    int n;
    struct {
        const char *key;      /* a static string */
        double value;
    } kv[KL_PROGRESS_MAX];
} kl_progress;

/* Appends the number key (a static string) = value to p; nothing past
 * KL_PROGRESS_MAX. */
void kl_progress_add(kl_progress *p, const char *key, double value);

/* Where a run's reports go (kl_args.progress). report runs on the kernel's
 * thread and must be quick: it copies p and returns. last_ms is
 * kl_progress_report's own. */
typedef struct kl_progress_sink {
    void (*report)(struct kl_progress_sink *sink, const kl_progress *p);
    int64_t last_ms;
} kl_progress_sink;

/* Reports p to sink unless one went less than KL_PROGRESS_EVERY_MS ago (a
 * kernel may call it every step; the last report, fraction 1, always goes).
 * NULL sink is a no-op. Call it from one thread of the run. */
#define KL_PROGRESS_EVERY_MS 200
void kl_progress_report(kl_progress_sink *sink, const kl_progress *p);

/* The rendezvous store a node gives a multi-node run (Gloo's Store, and
 * where node_rank 0 puts NCCL's unique id): keys are short ASCII strings,
 * values bytes. Backed by the gateway (HTTP), scoped to one job attempt. */
typedef struct kl_store {
    void *ctx;
    /* 0 or a negative KL_ code. */
    int (*set)(void *ctx, const char *key, const void *data, size_t len);
    /* Waits until key exists (at most timeout_ms), then *data (malloc'd,
     * the caller frees) and *len. 0; KL_ETIMEDOUT when it never came;
     * KL_ECANCELED when the attempt is no longer current (fenced out) or
     * the run was cancelled; KL_EBACKEND on other failures. */
    int (*get)(void *ctx, const char *key, void **data, size_t *len, int timeout_ms);
} kl_store;

/* A run that is one node's part of a multi-node job; kl_args.dist is NULL
 * when the whole job runs here. The world is nodes * local_ranks ranks;
 * this node holds global ranks node_rank * local_ranks and up. */
typedef struct kl_dist {
    int nodes;               /* nodes in the job (>= 2) */
    int node_rank;           /* this node's place, 0..nodes-1 */
    int local_ranks;         /* ranks on this node (= kl_args.ranks) */
    kl_store *store;
    const char *host;        /* the address other nodes reach this one on */
    int timeout_ms;          /* rendezvous, and each collective */
    /* Inputs the catalog marks `shard` hold only this node's rows: global
     * rows [shard_lo, shard_lo + rows held) of shard_total. */
    int64_t shard_lo, shard_total;
} kl_dist;

/* The rows [*lo, *hi) of n that global rank `rank` of `world` owns:
 * [rank*n/world, (rank+1)*n/world). A node's rows are from its first
 * rank's lo to its last rank's hi. */
void kl_shard_rows(int64_t n, int world, int rank, int64_t *lo, int64_t *hi);

/* Everything one run needs. params[i] and inputs[i] follow the order of the
 * kernel's specs; an absent optional input is NULL. `cancel` (may be NULL)
 * is polled between chunks of work. `threads` <= 0 means all cores. */
typedef struct kl_args {
    const struct kl_kernel *kernel;
    kl_value params[KL_MAX_PARAMS];
    const kl_tensor *inputs[KL_MAX_IO];
    volatile int *cancel;
    int threads;
    int ranks;               /* resources.gpus: ranks of a multi-GPU kernel
                                (on CPU, threads acting as ranks); <= 0 means 1 */
    kl_info *info;           /* may be NULL */
    kl_progress_sink *progress; /* may be NULL */
    const kl_dist *dist;     /* NULL: the whole job runs here */
} kl_args;

typedef struct kl_kernel {
    const char *name;
    const char *doc;
    const kl_param_spec *params;
    int nparams;
    const kl_io_spec *inputs;
    int ninputs;
    const kl_io_spec *outputs;
    int noutputs;
    /* Shape and cross-field checks (params already in range, dtypes and ranks
     * already checked against the specs). Reads only shapes, never data. */
    int (*check)(const kl_args *args, kl_err *err);
    /* CPU implementation (the reference). Fills outs[0..noutputs) with newly
     * allocated tensors the caller frees with kl_tensor_free. */
    int (*run_cpu)(const kl_args *args, kl_tensor *outs, kl_err *err);
    /* Bytes of all outputs together, as the shapes and params of checked
     * args decide them, with *field naming the input or param that sizes
     * them ("inputs.a"). Reads only shapes. NULL when every output is a
     * fixed size (the specs' max_elems bound them): see kl_output_bytes. */
    int64_t (*output_bytes)(const kl_args *args, const char **field);
    int max_nodes;           /* nodes a run may span; 0 or 1: one only */
} kl_kernel;

/* The catalog: a static table, valid for the life of the process. */
const kl_kernel *const *kl_catalog(int *count);
const kl_kernel *kl_kernel_find(const char *name);
int kl_param_index(const kl_kernel *k, const char *name);
int kl_input_index(const kl_kernel *k, const char *name);

/* Checks dtypes and ranks of args->inputs against the specs, required inputs,
 * element limits, then the kernel's own check. 0 or KL_EINVAL with `err`. */
int kl_args_check(const kl_args *args, kl_err *err);

/* Fills args->params[i] with defaults for every param not given. */
void kl_args_defaults(kl_args *args);

/* Bytes the outputs of a run will take, known before it runs (args must
 * have passed kl_args_check); *field (may be NULL) gets the public name of
 * the input or param that sizes them, or NULL for a kernel whose outputs
 * are fixed in size (then the sum of the output specs' max_elems). */
int64_t kl_output_bytes(const kl_args *args, const char **field);

/* Runs the CPU implementation after kl_args_check. */
int kl_run_cpu(const kl_args *args, kl_tensor *outs, kl_err *err);

size_t kl_dtype_size(kl_dtype t);
const char *kl_dtype_name(kl_dtype t);
int kl_dtype_parse(const char *s, kl_dtype *out); /* 0 or KL_EINVAL */
int64_t kl_tensor_elems(const kl_tensor *t);
size_t kl_tensor_bytes(const kl_tensor *t);
/* Allocates zeroed data for a tensor of the given shape; 0 or KL_ENOMEM. */
int kl_tensor_alloc(kl_tensor *t, kl_dtype dtype, int ndim, const int64_t *shape);
/* Frees data and clears the struct; NULL is a no-op. */
void kl_tensor_free(kl_tensor *t);

/* Where host buffers of tensors come from: calloc/free unless set. A GPU
 * node sets the CUDA plugin's page-locked allocator once at start, before
 * any run, so that tensors copy to and from the device at full speed; alloc
 * need not zero (kl_tensor_alloc does), release must take NULL. Both NULL
 * restores the default. Not thread-safe against running kernels. */
void kl_host_allocator_set(void *(*alloc)(size_t bytes), void (*release)(void *p));
/* A buffer of bytes (not zeroed) from that allocator, for data a tensor
 * will own; NULL on ENOMEM. kl_host_free (or kl_tensor_free) releases it. */
void *kl_host_alloc(size_t bytes);
void kl_host_free(void *p);

void kl_err_set(kl_err *err, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif
#endif
