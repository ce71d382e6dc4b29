/* kmeans.c — the kmeans kernel's catalog entry, its start (shared with the
 * CUDA plugin) and the CPU reference.
 *   params:  k (1..1024), iterations (max, 1..10000, default 100),
 *            tol (>= 0, default 1e-4), seed (0..2^53-1, default 0)
 *   inputs:  points is (n,d) float32, n >= k, d >= 1, every value finite;
 *            init is (k,d) float32, optional: the starting centroids
 *   outputs: centroids (k,d) float32, labels (n) int32, inertia (1) float32,
 *            iterations_run (1) int32
 * Start: init when given, else k-means++ (Arthur & Vassilvitskii 2007) on the
 * host for both backends: centroid 0 is point floor(u_0*n), centroid c is
 * drawn with probability proportional to D(x)^2, the squared distance (in
 * double) to the nearest centroid so far, by the first point whose running
 * sum of D^2 passes u_c*sum(D^2) (uniformly when every D^2 is 0). u_c comes
 * from Philox-4x32-10 keyed by the seed at counter c: the same seed gives the
 * same centroids on every machine and thread count.
 * Lloyd iterations: each assigns every point to its nearest centroid (float32
 * squared distance, sum over j of (x_j - c_j)^2 in order j = 0..d-1, each
 * operation separately rounded, never fused: cuda/kmeans.cu does the same,
 * so both backends compute the same bits; ties go to the lowest index), then
 * moves each centroid to the mean of its points (sums in double). A centroid
 * with no points keeps its place. The run stops after `iterations`, or when
 * no label changed (the update would give the same centroids), or when the
 * largest centroid shift (Euclidean, in the units of the points) is <= tol.
 * The labels returned are for the centroids returned (one more assignment
 * when the last update moved them); inertia is the sum over points of their
 * squared distance, in double.
 * Threads (kl__parallel, pthreads): the points are cut into slices fixed by
 * n, k and d alone; each slice keeps its own sums, and the slices are added
 * in order, so the result does not depend on the thread count. */
#include "kl_cpu.h"
#include "kl_philox.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define KM_MAX_K 1024
#define KM_MAX_ITERATIONS 10000
/* k*d: the double sums of one slice are 8 bytes each (128 MiB at most). */
#define KM_MAX_CENTROID_ELEMS ((int64_t)1 << 24)
#define KM_MAX_SLICES 64
#define KM_SLICE_MIN_POINTS 1024
#define KM_SLICES_BYTES ((int64_t)64 << 20) /* all slices' sums together */
/* Points per k-means++ block: D^2 is summed per block, then blocks in order. */
#define KM_SEED_BLOCK 4096
#define KM_POLL_POINTS 256 /* points between two polls of cancel */
#define KM_LANES 8         /* centroids a vector step covers; kp is a multiple */

static const kl_param_spec params[] = {
    {.name = "k", .type = KL_PARAM_INT, .required = 1, .min = 1, .max = KM_MAX_K,
     .doc = "number of clusters, at most the number of points"},
    {.name = "iterations", .type = KL_PARAM_INT, .min = 1, .max = KM_MAX_ITERATIONS, .def = 100,
     .doc = "most Lloyd iterations (assign, then update)"},
    {.name = "tol", .type = KL_PARAM_NUMBER, .min = 0, .max = FLT_MAX, .def = 1e-4,
     .doc = "stop once no centroid moved more than tol (Euclidean, in the units of the points); "
            "a run also stops when no label changed"},
    {.name = "seed", .type = KL_PARAM_INT, .min = 0, .max = 9007199254740991.0, .def = 0,
     .doc = "picks the k-means++ start when init is absent (Philox-4x32-10 keyed by seed)"},
};

static const kl_io_spec inputs[] = {
    {.name = "points", .dtype = KL_F32, .ndim_min = 2, .ndim_max = 2, .shape_doc = "[n,d]",
     .max_elems = KL_MAX_ELEMS, .doc = "n points of d coordinates, row-major, finite; n >= k, d >= 1"},
    {.name = "init", .dtype = KL_F32, .ndim_min = 2, .ndim_max = 2, .optional = 1, .shape_doc = "[k,d]",
     .max_elems = KM_MAX_CENTROID_ELEMS, .doc = "starting centroids; absent: k-means++ from seed"},
};

static const kl_io_spec outputs[] = {
    {.name = "centroids", .dtype = KL_F32, .ndim_min = 2, .ndim_max = 2, .shape_doc = "[k,d]",
     .max_elems = KM_MAX_CENTROID_ELEMS, .doc = "final centroids; one with no points keeps its last place"},
    {.name = "labels", .dtype = KL_I32, .ndim_min = 1, .ndim_max = 1, .shape_doc = "[n]",
     .max_elems = KL_MAX_ELEMS, .doc = "index of each point's nearest final centroid (ties: the lowest)"},
    {.name = "inertia", .dtype = KL_F32, .ndim_min = 1, .ndim_max = 1, .shape_doc = "[1]", .max_elems = 1,
     .doc = "sum of squared distances of the points to their centroids"},
    {.name = "iterations_run", .dtype = KL_I32, .ndim_min = 1, .ndim_max = 1, .shape_doc = "[1]",
     .max_elems = 1, .doc = "Lloyd iterations done, <= iterations"},
};

static int kmeans_check(const kl_args *args, kl_err *err)
{
    const kl_tensor *x = args->inputs[KL_KMEANS_POINTS], *init = args->inputs[KL_KMEANS_INIT];
    long long n = x->shape[0], d = x->shape[1], k = (long long)args->params[KL_KMEANS_K].num;
    if (d < 1) {
        kl_err_set(err, "inputs.points", "inputs.points has shape [%lld,%lld]; kmeans needs d >= 1 coordinates",
                   n, d);
        return KL_EINVAL;
    }
    if (k > n) {
        kl_err_set(err, "params.k", "params.k = %lld is more than the %lld points of inputs.points", k, n);
        return KL_EINVAL;
    }
    if (k * d > KM_MAX_CENTROID_ELEMS) {
        kl_err_set(err, "params.k", "the centroids would have k*d = %lld elements (k = %lld, d = %lld); the limit is %lld",
                   k * d, k, d, (long long)KM_MAX_CENTROID_ELEMS);
        return KL_EINVAL;
    }
    if (init && (init->shape[0] != k || init->shape[1] != d)) {
        kl_err_set(err, "inputs.init",
                   "inputs.init has shape [%lld,%lld]; kmeans needs [k,d] = [%lld,%lld] from params.k and inputs.points",
                   (long long)init->shape[0], (long long)init->shape[1], k, d);
        return KL_EINVAL;
    }
    return 0;
}

/* ---- start: init or k-means++ (also run by the CUDA plugin) ---- */

/* u_c in [0, 1) with 53 random bits: Philox-4x32-10, key = seed, counter c. */
static double km_uniform(uint64_t seed, uint64_t c)
{
    const kl_philox_key key = {{(uint32_t)seed, (uint32_t)(seed >> 32)}};
    const kl_philox4x32 ctr = {{(uint32_t)c, (uint32_t)(c >> 32), 0x6b6d6e73u /* "kmns" */, 0}};
    kl_philox4x32 r = kl_philox4x32_10(ctr, key);
    return (double)((((uint64_t)r.v[0] << 32) | r.v[1]) >> 11) * 0x1p-53;
}

static int first_not_finite(const kl_tensor *t, const char *field, kl_err *err)
{
    const float *v = t->data;
    int64_t n = kl_tensor_elems(t), d = t->shape[1];
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(v[i])) {
            kl_err_set(err, field, "%s[%lld][%lld] is %g; kmeans needs finite values", field,
                       (long long)(i / d), (long long)(i % d), (double)v[i]);
            return KL_EINVAL;
        }
    }
    return 0;
}

typedef struct seed_job {
    const kl_args *args;
    const float *X;
    int64_t n, d, nblocks;
    const float *c;      /* the centroid just chosen */
    double *d2, *bsum;   /* D^2 per point, its sum per block */
    int stop;
} seed_job;

/* Lowers D^2 to the new centroid and re-sums each block, in point order.
 * The squared distance is in double, over q mod 4 in four partial sums. */
static void seed_update(void *ctx, int t, int nt)
{
    seed_job *j = ctx;
    for (int64_t b = t; b < j->nblocks; b += nt) {
        if (kl__stop_seen(j->args, &j->stop))
            return;
        int64_t lo = b * KM_SEED_BLOCK, hi = lo + KM_SEED_BLOCK < j->n ? lo + KM_SEED_BLOCK : j->n;
        double s = 0;
        for (int64_t i = lo; i < hi; i++) {
            const float *x = j->X + i * j->d;
            double e4[4] = {0, 0, 0, 0}; /* four chains: the adds overlap */
            int64_t q = 0;
            for (; q + 4 <= j->d; q += 4)
                for (int l = 0; l < 4; l++) {
                    double df = (double)x[q + l] - (double)j->c[q + l];
                    e4[l] += df * df;
                }
            for (; q < j->d; q++) {
                double df = (double)x[q] - (double)j->c[q];
                e4[0] += df * df;
            }
            double e = (e4[0] + e4[1]) + (e4[2] + e4[3]);
            if (e < j->d2[i])
                j->d2[i] = e;
            s += j->d2[i];
        }
        j->bsum[b] = s;
    }
}

/* The point drawn for target t in [0, sum of bsum): the first whose running
 * sum of D^2 passes t. Rounding can leave t past the last sum of its block;
 * then the block's last point with D^2 > 0 is taken. */
static int64_t seed_pick(const seed_job *j, double t)
{
    int64_t b = 0;
    double before = 0;
    for (; b < j->nblocks - 1; b++) {
        if (before + j->bsum[b] > t)
            break;
        before += j->bsum[b];
    }
    int64_t lo = b * KM_SEED_BLOCK, hi = lo + KM_SEED_BLOCK < j->n ? lo + KM_SEED_BLOCK : j->n, last = -1;
    double s = 0, tl = t - before;
    for (int64_t i = lo; i < hi; i++) {
        if (j->d2[i] > 0) {
            s += j->d2[i];
            last = i;
            if (s > tl)
                return i;
        }
    }
    return last >= 0 ? last : lo;
}

int kl__kmeans_start(const kl_args *args, float *C, kl_err *err)
{
    const kl_tensor *pts = args->inputs[KL_KMEANS_POINTS], *init = args->inputs[KL_KMEANS_INIT];
    const int64_t n = pts->shape[0], d = pts->shape[1], k = (int64_t)args->params[KL_KMEANS_K].num;
    const uint64_t seed = (uint64_t)args->params[KL_KMEANS_SEED].num;
    int rc = first_not_finite(pts, "inputs.points", err);
    if (rc < 0)
        return rc;
    if (init) {
        if ((rc = first_not_finite(init, "inputs.init", err)) < 0)
            return rc;
        memcpy(C, init->data, sizeof(float) * (size_t)(k * d));
        kl_info_set(args->info, "init", "inputs.init");
        return 0;
    }
    const float *X = pts->data;
    seed_job j = {.args = args, .X = X, .n = n, .d = d, .nblocks = (n + KM_SEED_BLOCK - 1) / KM_SEED_BLOCK};
    j.d2 = malloc(sizeof(double) * (size_t)n);
    j.bsum = malloc(sizeof(double) * (size_t)j.nblocks);
    if (!j.d2 || !j.bsum) {
        kl_err_set(err, NULL, "kmeans: cannot allocate the k-means++ distances of %lld points", (long long)n);
        rc = KL_ENOMEM;
        goto done;
    }
    for (int64_t i = 0; i < n; i++)
        j.d2[i] = INFINITY;
    int nt = kl__threads(args->threads);
    if (nt > j.nblocks)
        nt = (int)j.nblocks;
    if (n * d < ((int64_t)1 << 16))
        nt = 1;
    int64_t pick = (int64_t)(km_uniform(seed, 0) * (double)n);
    memcpy(C, X + pick * d, sizeof(float) * (size_t)d);
    for (int64_t c = 1; c < k; c++) {
        j.c = C + (c - 1) * d;
        kl__parallel(nt, seed_update, &j);
        if (j.stop || kl__canceled(args)) {
            kl_err_set(err, NULL, "kmeans: cancelled");
            rc = KL_ECANCELED;
            goto done;
        }
        double total = 0;
        for (int64_t b = 0; b < j.nblocks; b++)
            total += j.bsum[b];
        double u = km_uniform(seed, (uint64_t)c);
        pick = total > 0 ? seed_pick(&j, u * total) : (int64_t)(u * (double)n);
        memcpy(C + c * d, X + pick * d, sizeof(float) * (size_t)d);
    }
    kl_info_set(args->info, "init", "k-means++ (seed %llu)", (unsigned long long)seed);
done:
    free(j.d2);
    free(j.bsum);
    return rc;
}

/* ---- Lloyd iterations ---- */

/* Eight lanes: AVX registers in the avx2 clone of slice_pass, two SSE
 * registers each in the default one (gcc splits the operations). */
typedef float v8f __attribute__((vector_size(32)));

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define KM_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define KM_CLONES
#endif

/* dist[p*kp + c] = squared distance of point xs[p] (p < 4) to centroid c, for
 * c < kp; CT is (d, kp), the centroids transposed. Lane c computes
 * acc = acc + (x_j - c_j)*(x_j - c_j) for j = 0..d-1, one rounding per
 * operation (avx2 has no FMA, and contraction is off anyway): the order and
 * roundings of cuda/kmeans.cu. Four points share each load of CT. */
static inline __attribute__((always_inline)) void tile_dists(const float *const xs[4], const float *CT, int64_t d,
                                                             int64_t kp, float *dist)
{
    for (int64_t cb = 0; cb < kp; cb += KM_LANES) {
        v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        const float *col = CT + cb;
        for (int64_t q = 0; q < d; q++, col += kp) {
            v8f c, t;
            memcpy(&c, col, sizeof c);
#define KM_STEP(p, acc)                                                                            \
    t = xs[p][q] - c;                                                                              \
    t = t * t;                                                                                     \
    acc = acc + t;
            KM_STEP(0, a0)
            KM_STEP(1, a1)
            KM_STEP(2, a2)
            KM_STEP(3, a3)
#undef KM_STEP
        }
        memcpy(dist + 0 * kp + cb, &a0, sizeof a0);
        memcpy(dist + 1 * kp + cb, &a1, sizeof a1);
        memcpy(dist + 2 * kp + cb, &a2, sizeof a2);
        memcpy(dist + 3 * kp + cb, &a3, sizeof a3);
    }
}

typedef struct km_run {
    const kl_args *args;
    const float *X;
    int64_t n, d, k, kp;
    const float *CT;    /* (d, kp): the current centroids, transposed, zero-padded */
    int32_t *labels;    /* (n), -1 before the first assignment */
    float *dist;        /* (nthreads, 4, kp) scratch */
    int nslices;
    int accumulate;     /* 0: assign only (the last pass) */
    double *psum;       /* (nslices, k, d) */
    int64_t *pcount;    /* (nslices, k) */
    double *pinertia;   /* (nslices) */
    int64_t *pchanged;  /* (nslices) */
    int stop;
} km_run;

KM_CLONES static void slice_pass(km_run *r, int s, float *dist)
{
    const int64_t n = r->n, d = r->d, k = r->k, kp = r->kp;
    const int64_t lo = n * s / r->nslices, hi = n * (s + 1) / r->nslices;
    double *sum = r->psum + (int64_t)s * k * d, inertia = 0;
    int64_t *count = r->pcount + (int64_t)s * k, changed = 0;
    if (r->accumulate) {
        memset(sum, 0, sizeof(double) * (size_t)(k * d));
        memset(count, 0, sizeof(int64_t) * (size_t)k);
    }
    for (int64_t i0 = lo; i0 < hi; i0 += 4) {
        if ((i0 - lo) % KM_POLL_POINTS == 0 && kl__stop_seen(r->args, &r->stop))
            return;
        const int64_t m = hi - i0 < 4 ? hi - i0 : 4;
        const float *xs[4];
        for (int p = 0; p < 4; p++) /* a short tile repeats its last point */
            xs[p] = r->X + (i0 + (p < m ? p : m - 1)) * d;
        tile_dists(xs, r->CT, d, kp, dist);
        for (int p = 0; p < m; p++) {
            const float *dp = dist + p * kp;
            float best = INFINITY;
            int32_t lab = 0;
            for (int32_t c = 0; c < k; c++) {
                if (dp[c] < best) {
                    best = dp[c];
                    lab = c;
                }
            }
            const int64_t i = i0 + p;
            changed += r->labels[i] != lab;
            r->labels[i] = lab;
            inertia += best;
            if (r->accumulate) {
                double *cs = sum + lab * d;
                for (int64_t q = 0; q < d; q++)
                    cs[q] += xs[p][q];
                count[lab]++;
            }
        }
    }
    r->pinertia[s] = inertia;
    r->pchanged[s] = changed;
}

static void pass_thread(void *ctx, int t, int nt)
{
    km_run *r = ctx;
    for (int s = t; s < r->nslices; s += nt)
        slice_pass(r, s, r->dist + (int64_t)t * 4 * r->kp);
}

/* CT (d, kp) = C (k, d) transposed, centroids k..kp zero (never chosen). */
static void transpose(const float *C, int64_t k, int64_t d, int64_t kp, float *CT)
{
    memset(CT, 0, sizeof(float) * (size_t)(d * kp));
    for (int64_t c = 0; c < k; c++)
        for (int64_t q = 0; q < d; q++)
            CT[q * kp + c] = C[c * d + q];
}

/* Slices: a fixed function of n, k and d (never of the thread count), so
 * the order in which the sums are added is the same on every machine. */
static int slices_for(int64_t n, int64_t k, int64_t d)
{
    int64_t s = n / KM_SLICE_MIN_POINTS;
    int64_t by_mem = KM_SLICES_BYTES / (k * d * (int64_t)sizeof(double));
    s = s < by_mem ? s : by_mem;
    s = s < KM_MAX_SLICES ? s : KM_MAX_SLICES;
    return s < 1 ? 1 : (int)s;
}

/* Progress after an iteration: the fraction is of the most iterations
 * allowed (a run that converges sooner ends below 1). */
void kl__kmeans_progress(const kl_args *args, int it, int iterations, double inertia)
{
    kl_progress p = {.fraction = (double)it / (double)iterations};
    kl_progress_add(&p, "iteration", it);
    if (inertia >= 0)
        kl_progress_add(&p, "inertia", inertia);
    kl_progress_report(args->progress, &p);
}

/* Moves each centroid of C (k,d) to the mean of its points, from the
 * slices' sums and counts of the last pass; an empty cluster keeps its
 * centroid. Returns the largest squared shift. */
static double centroids_update(const km_run *r, float *C)
{
    const int64_t k = r->k, d = r->d;
    double max_shift2 = 0;
    for (int64_t c = 0; c < k; c++) {
        int64_t count = 0;
        for (int s = 0; s < r->nslices; s++)
            count += r->pcount[(int64_t)s * k + c];
        if (count == 0)
            continue;
        double shift2 = 0;
        for (int64_t q = 0; q < d; q++) {
            double sum = 0;
            for (int s = 0; s < r->nslices; s++)
                sum += r->psum[((int64_t)s * k + c) * d + q];
            float v = (float)(sum / (double)count);
            double df = (double)v - (double)C[c * d + q];
            shift2 += df * df;
            C[c * d + q] = v;
        }
        max_shift2 = shift2 > max_shift2 ? shift2 : max_shift2;
    }
    return max_shift2;
}

static int kmeans_run_cpu(const kl_args *args, kl_tensor *outs, kl_err *err)
{
    const kl_tensor *pts = args->inputs[KL_KMEANS_POINTS];
    const int64_t n = pts->shape[0], d = pts->shape[1], k = (int64_t)args->params[KL_KMEANS_K].num;
    const int iterations = (int)args->params[KL_KMEANS_ITERATIONS].num;
    const double tol = args->params[KL_KMEANS_TOL].num;
    const int64_t kp = (k + KM_LANES - 1) / KM_LANES * KM_LANES;
    const int64_t cshape[2] = {k, d}, one = 1;
    int rc = 0;
    km_run r = {.args = args, .X = pts->data, .n = n, .d = d, .k = k, .kp = kp, .nslices = slices_for(n, k, d)};
    int nt = kl__threads(args->threads);
    nt = nt < r.nslices ? nt : r.nslices;
    if (n * k * d < ((int64_t)1 << 18)) /* well under a millisecond an iteration */
        nt = 1;
    float *C = NULL, *CT = NULL;
    if (kl_tensor_alloc(&outs[0], KL_F32, 2, cshape) < 0 || kl_tensor_alloc(&outs[1], KL_I32, 1, &n) < 0 ||
        kl_tensor_alloc(&outs[2], KL_F32, 1, &one) < 0 || kl_tensor_alloc(&outs[3], KL_I32, 1, &one) < 0)
        goto nomem;
    C = outs[0].data;
    r.labels = outs[1].data;
    CT = malloc(sizeof(float) * (size_t)(d * kp));
    r.dist = malloc(sizeof(float) * (size_t)(nt * 4 * kp));
    r.psum = malloc(sizeof(double) * (size_t)(r.nslices * k * d));
    r.pcount = malloc(sizeof(int64_t) * (size_t)(r.nslices * k));
    r.pinertia = malloc(sizeof(double) * (size_t)r.nslices);
    r.pchanged = malloc(sizeof(int64_t) * (size_t)r.nslices);
    if (!CT || !r.dist || !r.psum || !r.pcount || !r.pinertia || !r.pchanged)
        goto nomem;
    r.CT = CT;
    if ((rc = kl__kmeans_start(args, C, err)) < 0)
        goto done;
    for (int64_t i = 0; i < n; i++)
        r.labels[i] = -1;

    int it = 0, final_pass = 1;
    const char *stopped = "iterations";
    double inertia = 0;
    while (it < iterations) {
        transpose(C, k, d, kp, CT);
        r.accumulate = 1;
        kl__parallel(nt, pass_thread, &r);
        if (r.stop || kl__canceled(args))
            goto canceled;
        it++;
        int64_t changed = 0;
        inertia = 0;
        for (int s = 0; s < r.nslices; s++) {
            changed += r.pchanged[s];
            inertia += r.pinertia[s];
        }
        kl__kmeans_progress(args, it, iterations, inertia);
        if (changed == 0) { /* the labels already belong to C */
            final_pass = 0;
            stopped = "labels unchanged";
            break;
        }
        if (sqrt(centroids_update(&r, C)) <= tol) {
            stopped = "tol";
            break;
        }
    }
    if (final_pass) {
        transpose(C, k, d, kp, CT);
        r.accumulate = 0;
        kl__parallel(nt, pass_thread, &r);
        if (r.stop || kl__canceled(args))
            goto canceled;
        inertia = 0;
        for (int s = 0; s < r.nslices; s++)
            inertia += r.pinertia[s];
    }
    ((float *)outs[2].data)[0] = (float)inertia;
    ((int32_t *)outs[3].data)[0] = it;
    kl_info_set(args->info, "stopped", "%s", stopped);
    goto done;
canceled:
    kl_err_set(err, NULL, "kmeans: cancelled");
    rc = KL_ECANCELED;
    goto done;
nomem:
    kl_err_set(err, NULL, "kmeans: cannot allocate the work space for n = %lld, k = %lld, d = %lld", (long long)n,
               (long long)k, (long long)d);
    rc = KL_ENOMEM;
done:
    free(CT);
    free(r.dist);
    free(r.psum);
    free(r.pcount);
    free(r.pinertia);
    free(r.pchanged);
    return rc; /* on failure kl_run_cpu frees outs */
}

/* centroids [k,d] float32, labels [n] int32, inertia and iterations_run
 * [1]; labels, one per point, are what grows. */
static int64_t kmeans_output_bytes(const kl_args *args, const char **field)
{
    const kl_tensor *x = args->inputs[KL_KMEANS_POINTS];
    const int64_t k = (int64_t)args->params[KL_KMEANS_K].num;
    *field = "inputs.points";
    return (k * x->shape[1] + x->shape[0] + 2) * 4;
}

const kl_kernel kl__kmeans = {
    .name = "kmeans",
    .doc = "k-means clustering (Lloyd iterations from init or a seeded k-means++ start): centroids, labels, "
           "inertia",
    .params = params,
    .nparams = 4,
    .inputs = inputs,
    .ninputs = 2,
    .outputs = outputs,
    .noutputs = 4,
    .check = kmeans_check,
    .run_cpu = kmeans_run_cpu,
    .output_bytes = kmeans_output_bytes,
};
