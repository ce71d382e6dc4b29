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

enum { KL_GEMM_ALPHA = 0, KL_GEMM_BETA = 1 };
enum { KL_GEMM_A = 0, KL_GEMM_B = 1, KL_GEMM_C = 2 };

enum { KL_SLEEP_SECONDS = 0 };

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

extern const kl_kernel kl__saxpy;
extern const kl_kernel kl__reduce;
extern const kl_kernel kl__gemm;
extern const kl_kernel kl__sleep;

/* kl_args_check, then that every non-empty input has data: what both
 * kl_run_cpu and the plugin's run require before touching a tensor. */
int kl__args_ready(const kl_args *args, kl_err *err);

#ifdef __cplusplus
}
#endif
#endif
