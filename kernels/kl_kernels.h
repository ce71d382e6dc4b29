/* kl_kernels.h — internal to kernels/: what the CPU sources (cpu/) and the
 * CUDA plugin (cuda/) share about the v0 kernels: the positions of their
 * params and inputs in kl_args, enum values, and the kernel descriptors.
 * Included from C and from CUDA C++, host and device code. */
#ifndef KL_KERNELS_H
#define KL_KERNELS_H

#include "kl.h"

#if defined(__CUDACC__)
#define KL_HD __host__ __device__
#else
#define KL_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Indices follow each kernel's spec tables; the specs are the truth and the
 * unit tests assert that these agree with kl_param_index/kl_input_index. */
enum { KL_SAXPY_A = 0 };
enum { KL_SAXPY_X = 0, KL_SAXPY_Y = 1 };

enum { KL_REDUCE_OP = 0 };
enum { KL_REDUCE_X = 0 };
typedef enum {
    KL_REDUCE_SUM = 0,
    KL_REDUCE_MIN = 1,
    KL_REDUCE_MAX = 2,
    KL_REDUCE_MEAN = 3,
} kl_reduce_op;

enum { KL_GEMM_ALPHA = 0, KL_GEMM_BETA = 1, KL_GEMM_PRECISION = 2 };
typedef enum { KL_GEMM_FP32 = 0, KL_GEMM_TF32 = 1, KL_GEMM_BF16 = 2 } kl_gemm_precision;
enum { KL_GEMM_A = 0, KL_GEMM_B = 1, KL_GEMM_C = 2 };

enum { KL_SLEEP_SECONDS = 0 };
enum { KL_HEAT2D_ALPHA = 0, KL_HEAT2D_STEPS = 1 };
enum { KL_HEAT2D_GRID = 0 };
enum { KL_MLP_HIDDEN = 0, KL_MLP_CLASSES, KL_MLP_EPOCHS, KL_MLP_BATCH, KL_MLP_LR, KL_MLP_MOMENTUM, KL_MLP_SEED };
enum { KL_MLP_X = 0, KL_MLP_Y = 1 };
enum { KL_ALLREDUCE_COUNT = 0, KL_ALLREDUCE_DTYPE = 1, KL_ALLREDUCE_OP = 2, KL_ALLREDUCE_ITERS = 3 };
typedef enum { KL_ALLREDUCE_SUM = 0, KL_ALLREDUCE_MAX = 1, KL_ALLREDUCE_MIN = 2 } kl_allreduce_op;
enum { KL_MC_TYPE = 0, KL_MC_STYLE, KL_MC_S0, KL_MC_STRIKE, KL_MC_RATE, KL_MC_SIGMA, KL_MC_MATURITY, KL_MC_PATHS, KL_MC_STEPS, KL_MC_SEED };
typedef enum { KL_MC_CALL = 0, KL_MC_PUT = 1 } kl_mc_type;
typedef enum { KL_MC_EUROPEAN = 0, KL_MC_ASIAN = 1 } kl_mc_style;
enum { KL_KMEANS_K = 0, KL_KMEANS_ITERATIONS = 1, KL_KMEANS_TOL = 2, KL_KMEANS_SEED = 3 };
enum { KL_KMEANS_POINTS = 0, KL_KMEANS_INIT = 1 };

/* min/max that return NaN when either side is NaN, as numpy does, so that a
 * NaN in the input shows in the result on every backend. */
static inline KL_HD float kl__minf_nan(float a, float b)
{
    return a != a ? a : (b != b ? b : (b < a ? b : a));
}
static inline KL_HD float kl__maxf_nan(float a, float b)
{
    return a != a ? a : (b != b ? b : (b > a ? b : a));
}

/* Arithmetic rounded once per operation on both backends. nvcc contracts
 * a*b + c into one fused multiply-add (one rounding instead of two) unless
 * told not to; gcc does not in ISO C mode (-std=c11: -ffp-contract=off).
 * Code shared by the two backends that must give the CPU's bits writes its
 * sums and products with these; the intrinsics are never fused. */
#if defined(__CUDA_ARCH__)
#define KL_FADD(a, b) __fadd_rn((a), (b))
#define KL_FSUB(a, b) __fsub_rn((a), (b))
#define KL_FMUL(a, b) __fmul_rn((a), (b))
#define KL_DADD(a, b) __dadd_rn((a), (b))
#define KL_DSUB(a, b) __dsub_rn((a), (b))
#define KL_DMUL(a, b) __dmul_rn((a), (b))
#else
#define KL_FADD(a, b) ((a) + (b))
#define KL_FSUB(a, b) ((a) - (b))
#define KL_FMUL(a, b) ((a) * (b))
#define KL_DADD(a, b) ((a) + (b))
#define KL_DSUB(a, b) ((a) - (b))
#define KL_DMUL(a, b) ((a) * (b))
#endif

/* montecarlo_option's path arithmetic, one copy for both backends. An
 * asian step moves the log-price of a path and of its antithetic twin by
 * drift +- vol*z; a european path ends at drift_t +- vol*zsum. */
static inline KL_HD void kl__mc_step(float drift, float vol, float z, float *lp, float *lm)
{
    const float dz = KL_FMUL(vol, z);
    *lp = KL_FADD(*lp, KL_FADD(drift, dz));
    *lm = KL_FADD(*lm, KL_FSUB(drift, dz));
}
static inline KL_HD void kl__mc_end(float drift_t, float vol, float zsum, float *xp, float *xm)
{
    const float dz = KL_FMUL(vol, zsum);
    *xp = KL_FADD(drift_t, dz);
    *xm = KL_FSUB(drift_t, dz);
}
/* A pair's sample: the discounted mean of its two payoffs, less shift. */
static inline KL_HD double kl__mc_value(double disc, double pay_p, double pay_m, double shift)
{
    return KL_DSUB(KL_DMUL(KL_DMUL(disc, 0.5), KL_DADD(pay_p, pay_m)), shift);
}

extern const kl_kernel kl__saxpy;
extern const kl_kernel kl__reduce;
extern const kl_kernel kl__gemm;
extern const kl_kernel kl__gemm_blocked; /* not in the catalog: gemm's no-BLAS loop, for tests */
extern const kl_kernel kl__sleep;
extern const kl_kernel kl__train_mlp;
extern const kl_kernel kl__heat2d;
extern const kl_kernel kl__allreduce;
extern const kl_kernel kl__montecarlo_option;
extern const kl_kernel kl__kmeans;
/* kmeans' starting centroids C (k,d), computed on the host for both backends (cpu/kmeans.c). */
int kl__kmeans_start(const kl_args *args, float *C, kl_err *err);
/* montecarlo_option's progress: done of paths (antithetic pairs). Both
 * backends. */
void kl__mc_progress(const kl_args *args, int64_t done, int64_t paths);
/* heat2d's progress after steps_done of steps; residual >= 0 (the last
 * step's) makes it the final report. Both backends. */
void kl__heat2d_progress(const kl_args *args, int64_t steps_done, int64_t steps, double residual);
/* kmeans' progress after iteration it of at most iterations; inertia < 0:
 * not known (the CUDA backend has it only at the end). Both backends. */
void kl__kmeans_progress(const kl_args *args, int it, int iterations, double inertia);

/* kl_args_check, then that every non-empty input has data: what both
 * kl_run_cpu and the plugin's run require before touching a tensor. */
int kl__args_ready(const kl_args *args, kl_err *err);

#ifdef __cplusplus
}
#endif
#endif
