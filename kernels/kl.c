/* kl.c — the kernel catalog and everything generic about a run: parameter
 * defaults and ranges, input dtypes, ranks and element limits, tensors and
 * error detail. The kernels themselves live in cpu/ (and cuda/). */
#include "kl.h"
#include "kl_kernels.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define HUGE_PAGE ((size_t)2 << 20)
#define HUGE_MIN ((size_t)8 << 20)

static const kl_kernel *const catalog[] = {
    &kl__saxpy,
    &kl__reduce,
    &kl__gemm,
    &kl__sleep,
    &kl__allreduce,
    &kl__train_mlp,
    &kl__heat2d,
    &kl__montecarlo_option,
    &kl__kmeans,
};

const kl_kernel *const *kl_catalog(int *count)
{
    if (count)
        *count = (int)(sizeof catalog / sizeof catalog[0]);
    return catalog;
}

/* Returns the kernel called `name`, or NULL. */
const kl_kernel *kl_kernel_find(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < sizeof catalog / sizeof catalog[0]; i++)
        if (strcmp(catalog[i]->name, name) == 0)
            return catalog[i];
    return NULL;
}

/* Position of a param (input) in the kernel's spec, which is also its slot
 * in kl_args; KL_EINVAL when the kernel has none of that name. */
int kl_param_index(const kl_kernel *k, const char *name)
{
    if (!k || !name)
        return KL_EINVAL;
    for (int i = 0; i < k->nparams; i++)
        if (strcmp(k->params[i].name, name) == 0)
            return i;
    return KL_EINVAL;
}

int kl_input_index(const kl_kernel *k, const char *name)
{
    if (!k || !name)
        return KL_EINVAL;
    for (int i = 0; i < k->ninputs; i++)
        if (strcmp(k->inputs[i].name, name) == 0)
            return i;
    return KL_EINVAL;
}

void kl_args_defaults(kl_args *args)
{
    if (!args || !args->kernel)
        return;
    const kl_kernel *k = args->kernel;
    for (int i = 0; i < k->nparams && i < KL_MAX_PARAMS; i++) {
        kl_value *v = &args->params[i];
        if (v->given)
            continue;
        v->num = k->params[i].def;
        v->choice = k->params[i].def_choice;
    }
}

static int choices_count(const char *const *choices)
{
    int n = 0;
    while (choices && choices[n])
        n++;
    return n;
}

/* "must be a number between -3.4e+38 and 3.4e+38" and the like, so the user
 * reads the catalog's bounds in the message. */
static int param_range_error(const kl_param_spec *s, kl_err *err)
{
    char field[64];
    snprintf(field, sizeof field, "params.%s", s->name);
    const char *what = s->type == KL_PARAM_INT ? "an integer" : "a number";
    if (isfinite(s->min) && isfinite(s->max))
        kl_err_set(err, field, "%s must be %s between %.9g and %.9g", field, what, s->min, s->max);
    else if (isfinite(s->min))
        kl_err_set(err, field, "%s must be %s >= %.9g", field, what, s->min);
    else if (isfinite(s->max))
        kl_err_set(err, field, "%s must be %s <= %.9g", field, what, s->max);
    else
        kl_err_set(err, field, "%s must be a finite %s", field, s->type == KL_PARAM_INT ? "integer" : "number");
    return KL_EINVAL;
}

static int check_param(const kl_param_spec *s, const kl_value *v, kl_err *err)
{
    char field[64];
    snprintf(field, sizeof field, "params.%s", s->name);
    if (!v->given) {
        if (s->required) {
            kl_err_set(err, field, "%s is required", field);
            return KL_EINVAL;
        }
        return 0; /* the default, which the catalog guarantees is valid */
    }
    switch (s->type) {
    case KL_PARAM_INT:
        if (v->num != floor(v->num))
            return param_range_error(s, err);
        /* fall through */
    case KL_PARAM_NUMBER:
        if (!isfinite(v->num) || v->num < s->min || v->num > s->max)
            return param_range_error(s, err);
        return 0;
    case KL_PARAM_ENUM: {
        int n = choices_count(s->choices);
        if (v->choice >= 0 && v->choice < n)
            return 0;
        char list[160] = "";
        for (int i = 0; i < n; i++) {
            size_t used = strlen(list);
            snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", s->choices[i]);
        }
        kl_err_set(err, field, "%s must be one of %s", field, list);
        return KL_EINVAL;
    }
    }
    kl_err_set(err, field, "%s has an unknown type", field);
    return KL_EINVAL;
}

/* Element count of `shape`, or -1 when it is past `limit` (computed without
 * overflow, so a hostile shape cannot wrap round to a small number). */
static int64_t elems_within(const kl_tensor *t, int64_t limit)
{
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] == 0)
            return 0;
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] > limit / n)
            return -1;
        n *= t->shape[d];
    }
    return n;
}

static int check_input(const kl_kernel *k, const kl_io_spec *s, const kl_tensor *t, kl_err *err)
{
    char field[64];
    snprintf(field, sizeof field, "inputs.%s", s->name);
    if (!t) {
        if (s->optional)
            return 0;
        kl_err_set(err, field, "%s is required", field);
        return KL_EINVAL;
    }
    if (t->dtype != s->dtype) {
        kl_err_set(err, field, "%s has dtype %s; %s needs %s", field, kl_dtype_name(t->dtype), k->name,
                   kl_dtype_name(s->dtype));
        return KL_EINVAL;
    }
    if (t->ndim < s->ndim_min || t->ndim > s->ndim_max) {
        if (s->ndim_min == s->ndim_max)
            kl_err_set(err, field, "%s has rank %d; %s needs rank %d %s", field, t->ndim, k->name, s->ndim_min,
                       s->shape_doc ? s->shape_doc : "");
        else
            kl_err_set(err, field, "%s has rank %d; %s needs rank %d to %d", field, t->ndim, k->name,
                       s->ndim_min, s->ndim_max);
        return KL_EINVAL;
    }
    int64_t limit = s->max_elems > 0 ? s->max_elems : KL_MAX_ELEMS;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0) {
            kl_err_set(err, field, "%s has a negative dimension (%lld at axis %d)", field,
                       (long long)t->shape[d], d);
            return KL_EINVAL;
        }
        /* Even in an empty tensor (another dim 0): kernel checks multiply
         * dims of several inputs ([m,0] x [0,n] gives [m,n]) and count on
         * each being within the limit. */
        if (t->shape[d] > limit) {
            kl_err_set(err, field, "%s has a dimension of %lld at axis %d; none may be more than %lld, the limit",
                       field, (long long)t->shape[d], d, (long long)limit);
            return KL_EINVAL;
        }
    }
    if (elems_within(t, limit) < 0) {
        kl_err_set(err, field, "%s has more than %lld elements, the limit", field, (long long)limit);
        return KL_EINVAL;
    }
    return 0;
}

/* Reads shapes and params only, never data, so the gateway can validate a
 * job before it decodes any tensor. Names that the kernel does not have are
 * the caller's to refuse: kl_args has no slot to carry them. */
/* A multi-node run's place in its job: a kernel that spans that many
 * nodes, and a node_rank and local ranks that fit the world. */
static int check_dist(const kl_kernel *k, const kl_args *args, kl_err *err)
{
    const kl_dist *d = args->dist;
    const int max_nodes = k->max_nodes > 1 ? k->max_nodes : 1;
    if (d->nodes > max_nodes) {
        kl_err_set(err, "resources.nodes", "%s runs on at most %d node%s; resources.nodes is %d", k->name,
                   max_nodes, max_nodes == 1 ? "" : "s", d->nodes);
        return KL_EINVAL;
    }
    const int ranks = args->ranks > 0 ? args->ranks : 1;
    if (d->nodes < 1 || d->node_rank < 0 || d->node_rank >= d->nodes || d->local_ranks != ranks || !d->store ||
        d->timeout_ms <= 0 || d->shard_lo < 0 || d->shard_total < 0) {
        kl_err_set(err, "resources.nodes",
                   "the run's place in its multi-node job is inconsistent (node %d of %d, %d local ranks for %d)",
                   d->node_rank, d->nodes, d->local_ranks, ranks);
        return KL_EINVAL;
    }
    return 0;
}

int kl_args_check(const kl_args *args, kl_err *err)
{
    if (!args || !args->kernel) {
        kl_err_set(err, "kernel", "no kernel given");
        return KL_EINVAL;
    }
    const kl_kernel *k = args->kernel;
    if (args->dist) {
        int rc = check_dist(k, args, err);
        if (rc < 0)
            return rc;
    }
    for (int i = 0; i < k->nparams; i++) {
        int rc = check_param(&k->params[i], &args->params[i], err);
        if (rc < 0)
            return rc;
    }
    for (int i = 0; i < k->ninputs; i++) {
        int rc = check_input(k, &k->inputs[i], args->inputs[i], err);
        if (rc < 0)
            return rc;
    }
    return k->check ? k->check(args, err) : 0;
}

int kl__args_ready(const kl_args *args, kl_err *err)
{
    int rc = kl_args_check(args, err);
    if (rc < 0)
        return rc;
    const kl_kernel *k = args->kernel;
    for (int i = 0; i < k->ninputs; i++) {
        const kl_tensor *t = args->inputs[i];
        if (t && !t->data && kl_tensor_elems(t) > 0) {
            char field[64];
            snprintf(field, sizeof field, "inputs.%s", k->inputs[i].name);
            kl_err_set(err, field, "%s has a shape but no data", field);
            return KL_EINVAL;
        }
    }
    return 0;
}

/* On failure every entry of outs[] is left empty, so the caller frees
 * nothing; on success the caller owns outs[0..noutputs). */
int kl_run_cpu(const kl_args *args, kl_tensor *outs, kl_err *err)
{
    int rc = kl__args_ready(args, err);
    if (rc < 0)
        return rc;
    const kl_kernel *k = args->kernel;
    memset(outs, 0, sizeof *outs * (size_t)k->noutputs);
    rc = k->run_cpu(args, outs, err);
    if (rc < 0)
        for (int i = 0; i < k->noutputs; i++)
            kl_tensor_free(&outs[i]);
    return rc;
}

int64_t kl_output_bytes(const kl_args *args, const char **field)
{
    const kl_kernel *k = args->kernel;
    const char *unused;
    field = field ? field : &unused;
    *field = NULL;
    if (k->output_bytes)
        return k->output_bytes(args, field);
    int64_t bytes = 0;
    for (int i = 0; i < k->noutputs; i++)
        bytes += k->outputs[i].max_elems * (int64_t)kl_dtype_size(k->outputs[i].dtype);
    return bytes;
}

void kl_shard_rows(int64_t n, int world, int rank, int64_t *lo, int64_t *hi)
{
    if (world < 1)
        world = 1;
    /* n * rank stays far inside int64: n <= KL_MAX_ELEMS, rank <= world. */
    *lo = n * rank / world;
    *hi = n * (rank + 1) / world;
}

size_t kl_dtype_size(kl_dtype t)
{
    switch (t) {
    case KL_F32: return 4;
    case KL_F64: return 8;
    case KL_I32: return 4;
    }
    return 0;
}

const char *kl_dtype_name(kl_dtype t)
{
    switch (t) {
    case KL_F32: return "float32";
    case KL_F64: return "float64";
    case KL_I32: return "int32";
    }
    return "unknown";
}

int kl_dtype_parse(const char *s, kl_dtype *out)
{
    static const kl_dtype all[] = {KL_F32, KL_F64, KL_I32};
    for (size_t i = 0; s && i < sizeof all / sizeof all[0]; i++) {
        if (strcmp(s, kl_dtype_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    }
    return KL_EINVAL;
}

/* Product of the dims; a rank-0 tensor is a scalar of one element. Assumes a
 * shape that kl_args_check (or kl_tensor_alloc) has accepted. */
int64_t kl_tensor_elems(const kl_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

size_t kl_tensor_bytes(const kl_tensor *t)
{
    return (size_t)kl_tensor_elems(t) * kl_dtype_size(t->dtype);
}

static void *(*kl__host_alloc)(size_t bytes);
static void (*kl__host_release)(void *p);

void kl_host_allocator_set(void *(*alloc)(size_t bytes), void (*release)(void *p))
{
    kl__host_alloc = alloc && release ? alloc : NULL;
    kl__host_release = alloc && release ? release : NULL;
}

void *kl_host_alloc(size_t bytes)
{
    return kl__host_alloc ? kl__host_alloc(bytes ? bytes : 1) : malloc(bytes ? bytes : 1);
}

void kl_host_free(void *p)
{
    if (kl__host_release)
        kl__host_release(p);
    else
        free(p);
}

/* Data comes zeroed from calloc, which maps large buffers lazily instead of
 * writing them twice (or from the host allocator a GPU node sets, zeroed
 * here); kl_tensor_free releases it. */
int kl_tensor_alloc(kl_tensor *t, kl_dtype dtype, int ndim, const int64_t *shape)
{
    memset(t, 0, sizeof *t);
    if (ndim < 0 || ndim > KL_MAX_DIMS || kl_dtype_size(dtype) == 0)
        return KL_EINVAL;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return KL_EINVAL;
        t->shape[d] = shape[d];
    }
    if (elems_within(t, KL_MAX_ELEMS) < 0)
        return KL_EINVAL;
    size_t bytes = kl_tensor_bytes(t);
    if (kl__host_alloc) {
        if ((t->data = kl__host_alloc(bytes ? bytes : 1)) != NULL)
            memset(t->data, 0, bytes);
    } else {
        t->data = calloc(bytes ? bytes : 1, 1);
    }
    if (!t->data)
        return KL_ENOMEM;
    if (!kl__host_alloc && bytes >= HUGE_MIN) {
        /* Large buffers come from mmap: ask for transparent huge pages so
         * that filling one takes 512 times fewer page faults. Advice only;
         * a kernel that ignores it costs nothing. */
        uintptr_t lo = ((uintptr_t)t->data + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
        uintptr_t hi = ((uintptr_t)t->data + bytes) & ~(uintptr_t)(HUGE_PAGE - 1);
        if (hi > lo)
            madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    }
    return 0;
}

void kl_tensor_free(kl_tensor *t)
{
    if (!t)
        return;
    kl_host_free(t->data);
    memset(t, 0, sizeof *t);
}

/* `field` may be NULL or "" when no single field is at fault; `err` may be
 * NULL when the caller wants only the code. */
void kl_err_set(kl_err *err, const char *field, const char *fmt, ...)
{
    if (!err)
        return;
    snprintf(err->field, sizeof err->field, "%s", field ? field : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
}

void kl_info_set(kl_info *info, const char *key, const char *fmt, ...)
{
    if (!info)
        return;
    int i = 0;
    while (i < info->n && strcmp(info->kv[i].key, key) != 0)
        i++;
    if (i == KL_INFO_MAX)
        return;
    snprintf(info->kv[i].key, sizeof(info->kv[i].key), "%s", key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(info->kv[i].value, sizeof(info->kv[i].value), fmt, ap);
    va_end(ap);
    if (i == info->n)
        info->n++;
}

void kl_progress_add(kl_progress *p, const char *key, double value)
{
    if (p->n >= KL_PROGRESS_MAX)
        return;
    p->kv[p->n].key = key;
    p->kv[p->n].value = value;
    p->n++;
}

void kl_progress_report(kl_progress_sink *sink, const kl_progress *p)
{
    if (!sink)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    if (p->fraction < 1.0 && sink->last_ms != 0 && now - sink->last_ms < KL_PROGRESS_EVERY_MS)
        return;
    sink->last_ms = now;
    sink->report(sink, p);
}
