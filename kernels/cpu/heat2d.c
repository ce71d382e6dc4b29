/* heat2d.c — the heat2d kernel's catalog entry and CPU reference.
 *   params: alpha (number, 0 < alpha <= 0.25), steps (integer, 1..100000, default 1)
 *   input:  grid is (h,w) float32, h >= 3 and w >= 3
 *   output: grid is (h,w) float32 after `steps` explicit 5-point updates
 *             u' = u + alpha*(((uN + uS) + (uW + uE)) - 4u)
 *           of every interior cell; the boundary rows and columns are held
 *           fixed. residual is (1) float32 = max |u' - u| over the last step
 *           (NaN when any update of that step is NaN).
 * Every operation is a separately rounded float32 add, subtract or multiply,
 * in exactly the order above, never fused (no fmaf, and contraction off
 * below, whatever the -std): cuda/heat2d.cu does the same with
 * __fadd_rn/__fmul_rn, so both backends give the same bits.
 * Threads: one kl__parallel for the whole run. Each step is cut into bands of
 * rows that the threads claim from one ticket counter; a band of step s waits
 * until every band of step s-1 is done. A thread that starts late (or never:
 * kl__parallel then runs its share on the caller) only finds fewer tickets,
 * so no thread ever waits on one that has not started. */
#include "kl_cpu.h"

#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define HEAT2D_MAX_STEPS 100000
#define HEAT2D_MAX_THREADS 256 /* as many as kl__parallel starts */
/* Cells per band: small enough to poll cancel every ~30 us and to give two
 * threads several bands per step, large enough that the two atomics a band
 * costs are noise. */
#define HEAT2D_BAND_CELLS ((int64_t)1 << 14)
/* Below this many cells a step takes a few microseconds: one thread, since
 * waiting for another at every step would cost more than it adds. */
#define HEAT2D_PAR_MIN_CELLS ((int64_t)1 << 18)

static const kl_param_spec params[] = {
    {.name = "alpha", .type = KL_PARAM_NUMBER, .required = 1, .min = 0, .max = 0.25,
     .doc = "diffusion number alpha = D*dt/dx^2 (a float32), 0 < alpha <= 0.25 (0 itself is refused); "
            "0.25 is the stability limit of the explicit scheme"},
    {.name = "steps", .type = KL_PARAM_INT, .min = 1, .max = HEAT2D_MAX_STEPS, .def = 1,
     .doc = "explicit time steps"},
};

static const kl_io_spec inputs[] = {
    {.name = "grid", .dtype = KL_F32, .ndim_min = 2, .ndim_max = 2, .shape_doc = "[h,w]",
     .max_elems = KL_MAX_ELEMS, .doc = "initial temperatures, row-major, h >= 3 and w >= 3; the outer rows and "
                                       "columns are fixed boundary values"},
};

static const kl_io_spec outputs[] = {
    {.name = "grid", .dtype = KL_F32, .ndim_min = 2, .ndim_max = 2, .shape_doc = "[h,w]",
     .max_elems = KL_MAX_ELEMS, .doc = "temperatures after `steps` updates"},
    {.name = "residual", .dtype = KL_F32, .ndim_min = 1, .ndim_max = 1, .shape_doc = "[1]", .max_elems = 1,
     .doc = "max |u' - u| over the cells of the last step"},
};

static int heat2d_check(const kl_args *args, kl_err *err)
{
    const kl_tensor *g = args->inputs[KL_HEAT2D_GRID];
    if (g->shape[0] < 3 || g->shape[1] < 3) {
        kl_err_set(err, "inputs.grid", "inputs.grid has shape [%lld,%lld]; heat2d needs [h,w] with h >= 3 and w >= 3",
                   (long long)g->shape[0], (long long)g->shape[1]);
        return KL_EINVAL;
    }
    /* The spec's range is closed; the scheme's is open at 0. */
    if (!(args->params[KL_HEAT2D_ALPHA].num > 0)) {
        kl_err_set(err, "params.alpha", "params.alpha must be a number > 0 and <= 0.25");
        return KL_EINVAL;
    }
    return 0;
}

/* x86-64: an AVX2 copy of the row loops next to the baseline SSE2 one,
 * picked once at load time (GCC function multiversioning), since the build
 * targets plain x86-64. AVX2 brings no FMA, and contraction is off anyway.
 * Not under ThreadSanitizer, whose instrumented resolver would run before
 * its runtime is up. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__AVX2__) && \
    !defined(__SANITIZE_THREAD__)
#define HEAT2D_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define HEAT2D_CLONES
#endif

/* One row of one step: dst[1..w-1) from the rows n (north), c, s (south).
 * Blocks of 8 vectorize at -O2, where an open loop does not. */
HEAT2D_CLONES static void row_step(const float *restrict n, const float *restrict c, const float *restrict s,
                     float *restrict dst, int64_t w, float a)
{
    int64_t j = 1;
    for (; j + 8 <= w - 1; j += 8)
        for (int l = 0; l < 8; l++) {
            float u = c[j + l];
            dst[j + l] = u + a * (((n[j + l] + s[j + l]) + (c[j + l - 1] + c[j + l + 1])) - 4.0f * u);
        }
    for (; j < w - 1; j++) {
        float u = c[j];
        dst[j] = u + a * (((n[j] + s[j]) + (c[j - 1] + c[j + 1])) - 4.0f * u);
    }
}

/* The same, also folding max |u' - u| into *rmax and any NaN into *nan. */
HEAT2D_CLONES static void row_step_resid(const float *restrict n, const float *restrict c, const float *restrict s,
                           float *restrict dst, int64_t w, float a, float *rmax, int *nan)
{
    float m[8] = {0};
    int bad[8] = {0};
    int64_t j = 1;
    for (; j + 8 <= w - 1; j += 8)
        for (int l = 0; l < 8; l++) {
            float u = c[j + l];
            float v = u + a * (((n[j + l] + s[j + l]) + (c[j + l - 1] + c[j + l + 1])) - 4.0f * u);
            float d = fabsf(v - u);
            dst[j + l] = v;
            m[l] = d > m[l] ? d : m[l];
            bad[l] |= d != d;
        }
    for (; j < w - 1; j++) {
        float u = c[j];
        float v = u + a * (((n[j] + s[j]) + (c[j - 1] + c[j + 1])) - 4.0f * u);
        float d = fabsf(v - u);
        dst[j] = v;
        m[0] = d > m[0] ? d : m[0];
        bad[0] |= d != d;
    }
    for (int l = 0; l < 8; l++) {
        *rmax = m[l] > *rmax ? m[l] : *rmax;
        *nan |= bad[l];
    }
}

typedef struct heat2d_job {
    const kl_args *args;
    float *buf[2];         /* step s reads buf[s & 1] and writes buf[(s + 1) & 1] */
    int64_t h, w;
    int64_t steps;
    int64_t rows_per_band; /* of the h-2 interior rows */
    int64_t bands;         /* per step */
    float a;
    /* The two counters every band updates, each on its own cache line so
     * that they do not evict what the others read. */
    _Alignas(64) int64_t ticket; /* next band to claim: step = ticket / bands */
    _Alignas(64) int64_t done;   /* bands finished, over all steps */
    _Alignas(64) int canceled;   /* see kl__stop_seen */
    float rmax[HEAT2D_MAX_THREADS];
    int nan[HEAT2D_MAX_THREADS];
} heat2d_job;

/* Waits until `need` bands are done; 0, or 1 when the run was stopped (the
 * band being waited for may never finish then). */
static int wait_done(heat2d_job *j, int64_t need)
{
    for (int spins = 0; __atomic_load_n(&j->done, __ATOMIC_ACQUIRE) < need; spins++) {
        if (kl__stop_seen(j->args, &j->canceled))
            return 1;
        if (spins >= 64)
            sched_yield(); /* more threads than cores: let the band's owner run */
    }
    return 0;
}

void kl__heat2d_progress(const kl_args *args, int64_t steps_done, int64_t steps, double residual)
{
    kl_progress p = {.fraction = residual < 0 ? (double)steps_done / (double)(steps + 1) : 1.0};
    kl_progress_add(&p, "step", (double)steps_done);
    kl_progress_add(&p, "steps", (double)steps);
    if (residual >= 0)
        kl_progress_add(&p, "residual", residual);
    kl_progress_report(args->progress, &p);
}

static void heat2d_worker(void *ctx, int i, int nt)
{
    heat2d_job *j = ctx;
    const int64_t w = j->w, total = j->steps * j->bands;
    float rmax = 0;
    int nan = 0;
    (void)nt;
    for (;;) {
        int64_t t = __atomic_fetch_add(&j->ticket, 1, __ATOMIC_RELAXED);
        if (t >= total || kl__stop_seen(j->args, &j->canceled))
            break;
        int64_t step = t / j->bands, band = t % j->bands;
        /* Step s overwrites what step s-1 read, and reads what it wrote. */
        if (wait_done(j, step * j->bands))
            break;
        const float *src = j->buf[step & 1];
        float *dst = j->buf[(step + 1) & 1];
        int64_t r0 = 1 + band * j->rows_per_band, r1 = r0 + j->rows_per_band;
        if (r1 > j->h - 1)
            r1 = j->h - 1;
        const int last = step == j->steps - 1;
        for (int64_t r = r0; r < r1; r++) {
            const float *c = src + r * w;
            if (last)
                row_step_resid(c - w, c, c + w, dst + r * w, w, j->a, &rmax, &nan);
            else
                row_step(c - w, c, c + w, dst + r * w, w, j->a);
        }
        int64_t done = __atomic_add_fetch(&j->done, 1, __ATOMIC_RELEASE);
        if (i == 0) /* one thread reports; the residual is known only at the end */
            kl__heat2d_progress(j->args, done / j->bands, j->steps, -1);
    }
    j->rmax[i] = rmax;
    j->nan[i] = nan;
}

static int heat2d_run_cpu(const kl_args *args, kl_tensor *outs, kl_err *err)
{
    const kl_tensor *g = args->inputs[KL_HEAT2D_GRID];
    const int64_t h = g->shape[0], w = g->shape[1], cells = h * w, one = 1;
    const int64_t steps = (int64_t)args->params[KL_HEAT2D_STEPS].num;
    const size_t bytes = (size_t)cells * sizeof(float);
    heat2d_job *j = NULL;
    float *scratch = NULL;
    int rc = 0;

    if (kl_tensor_alloc(&outs[0], KL_F32, 2, g->shape) < 0 || kl_tensor_alloc(&outs[1], KL_F32, 1, &one) < 0 ||
        !(scratch = malloc(bytes)) || !(j = aligned_alloc(64, sizeof *j))) {
        kl_err_set(err, NULL, "heat2d: cannot allocate two grids of %lld x %lld", (long long)h, (long long)w);
        rc = KL_ENOMEM;
        goto done;
    }
    memset(j, 0, sizeof *j);
    /* Both buffers start as the input, so both hold the fixed boundary; the
     * last step writes the output tensor. */
    j->buf[steps & 1] = outs[0].data;
    j->buf[(steps + 1) & 1] = scratch;
    memcpy(j->buf[0], g->data, bytes);
    memcpy(j->buf[1], g->data, bytes);
    j->args = args;
    j->h = h;
    j->w = w;
    j->steps = steps;
    j->a = (float)args->params[KL_HEAT2D_ALPHA].num;
    j->rows_per_band = HEAT2D_BAND_CELLS / w > 1 ? HEAT2D_BAND_CELLS / w : 1;
    if (j->rows_per_band > h - 2)
        j->rows_per_band = h - 2;
    j->bands = (h - 2 + j->rows_per_band - 1) / j->rows_per_band;

    int nt = 1;
    if (cells >= HEAT2D_PAR_MIN_CELLS) {
        nt = kl__threads(args->threads);
        nt = j->bands < nt ? (int)j->bands : nt;
        nt = nt > HEAT2D_MAX_THREADS ? HEAT2D_MAX_THREADS : nt;
    }
    kl__parallel(nt, heat2d_worker, j);
    if (j->canceled) {
        kl_err_set(err, NULL, "heat2d: cancelled");
        rc = KL_ECANCELED;
        goto done;
    }
    float rmax = 0;
    int nan = 0;
    for (int i = 0; i < nt; i++) {
        rmax = j->rmax[i] > rmax ? j->rmax[i] : rmax;
        nan |= j->nan[i];
    }
    ((float *)outs[1].data)[0] = nan ? NAN : rmax;
    if (!nan)
        kl__heat2d_progress(args, steps, steps, rmax);
done:
    free(scratch);
    free(j);
    return rc;
}

/* grid is [h,w] float32 like the input, residual [1]. */
static int64_t heat2d_output_bytes(const kl_args *args, const char **field)
{
    const kl_tensor *g = args->inputs[KL_HEAT2D_GRID];
    *field = "inputs.grid";
    return (g->shape[0] * g->shape[1] + 1) * 4;
}

const kl_kernel kl__heat2d = {
    .name = "heat2d",
    .doc = "explicit 5-point heat diffusion on a float32 grid with fixed boundary cells",
    .params = params,
    .nparams = 2,
    .inputs = inputs,
    .ninputs = 1,
    .outputs = outputs,
    .noutputs = 2,
    .check = heat2d_check,
    .run_cpu = heat2d_run_cpu,
    .output_bytes = heat2d_output_bytes,
};
