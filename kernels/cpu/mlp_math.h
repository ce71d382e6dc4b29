/* mlp_math.h — what the train_mlp kernel's CPU sources (train_mlp.c,
 * mlp_math.c) and its CUDA twin (cuda/train_mlp.cu) share: the layout of
 * the flat parameter vector, how a batch is split across ranks, the seeded
 * initialisation (computed on the host for both backends, so both start
 * from the same bits), the label check, and the CPU forward/backward.
 * Included from C and CUDA C++. */
#ifndef KL_MLP_MATH_H
#define KL_MLP_MATH_H

#include "kl.h"
#include "kl_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Outputs, in the order of the kernel's spec. */
enum { KL_MLP_OUT_W1 = 0, KL_MLP_OUT_B1, KL_MLP_OUT_W2, KL_MLP_OUT_B2, KL_MLP_OUT_LOSS, KL_MLP_OUT_ACC };

/* The most ranks one run may have: the gateway allows resources.gpus up
 * to 16, and on the CPU each rank is a thread. */
#define KL_MLP_MAX_RANKS 16
/* Largest w1 (d x hidden), and largest activations of a step (all ranks). */
#define KL_MLP_MAX_W1 ((int64_t)1 << 26)
#define KL_MLP_MAX_SCRATCH ((int64_t)1 << 28)

/* Sizes of one run and the offsets of each tensor in the flat parameter
 * vector [w1 (d,h) | b1 (h) | w2 (h,c) | b2 (c)]: gradients, velocities and
 * weights all use this layout, so the all-reduce is one call on one buffer. */
typedef struct kl_mlp_dims {
    int64_t n, d, h, c;
    int64_t w1, b1, w2, b2, size;
} kl_mlp_dims;

static inline kl_mlp_dims kl__mlp_dims(int64_t n, int64_t d, int64_t h, int64_t c)
{
    kl_mlp_dims m;
    m.n = n;
    m.d = d;
    m.h = h;
    m.c = c;
    m.w1 = 0;
    m.b1 = d * h;
    m.w2 = m.b1 + h;
    m.b2 = m.w2 + h * c;
    m.size = m.b2 + c;
    return m;
}

/* The walk of the data (the same on one node and across nodes): in a world
 * of W ranks, rank r owns rows [r*n/W, (r+1)*n/W) (kl_shard_rows) and
 * takes the next kl__mlp_shard_max(bs, W) of them each step, in order; a
 * rank whose shard is spent adds zeros. A step's gradient is the sum over
 * every rank's rows divided by the step's rows in all. With W = 1 this is
 * batches of bs over all rows. kl__mlp_step_rows gives rank r's rows of
 * step s: *lo (a global row) and the count. */
static inline KL_HD int64_t kl__mlp_step_rows(int64_t n, int W, int r, int64_t lb, int64_t s, int64_t *lo)
{
    const int64_t first = n * r / W, end = n * (r + 1) / W;
    *lo = first + s * lb;
    if (*lo >= end) {
        *lo = end;
        return 0;
    }
    return *lo + lb <= end ? lb : end - *lo;
}

/* Rows of step s over all W ranks (the divisor of its gradient). */
static inline int64_t kl__mlp_step_total(int64_t n, int W, int64_t lb, int64_t s)
{
    int64_t total = 0, lo;
    for (int r = 0; r < W; r++)
        total += kl__mlp_step_rows(n, W, r, lb, s, &lo);
    return total;
}

/* Steps of one epoch: enough for the largest shard, ceil(n/W) rows. */
static inline int64_t kl__mlp_steps(int64_t n, int W, int64_t lb)
{
    const int64_t big = (n + W - 1) / W;
    return (big + lb - 1) / lb;
}

/* Rows of the largest shard of a batch of bs rows split R ways: also the
 * rows each rank takes per step (kl__mlp_step_rows). */
static inline int64_t kl__mlp_shard_max(int64_t bs, int R)
{
    return (bs + R - 1) / R;
}

/* args->ranks, where <= 0 means 1. */
static inline int kl__mlp_ranks(const kl_args *args)
{
    return args->ranks > 0 ? args->ranks : 1;
}

/* The update every rank applies after the all-reduce, written out so both
 * backends round the same way (the CUDA side uses __fmul_rn/__fadd_rn to
 * keep the compiler from fusing it): g = sum / batch, v = m*v + g,
 * w = w - lr*v. */

/* Fills p (dims->size floats): w1 He-uniform U(-sqrt(6/d), sqrt(6/d)), w2
 * Glorot-uniform U(-sqrt(6/(h+c)), +), biases zero. Element i draws word
 * i%4 of Philox-4x32-10 (kl_philox.h) at counter (i/4, KL_MLP_STREAM, 0)
 * under the key seed: the same bits on any backend and any number of
 * ranks, and a stream apart from the Monte Carlo kernels' counters. */
#define KL_MLP_STREAM 0x6d6c7069u /* "mlpi" */
void kl__mlp_init(const kl_mlp_dims *m, uint64_t seed, float *p);

/* 0, or KL_EINVAL naming inputs.y when a label is outside [0, classes). */
int kl__mlp_labels_check(const int32_t *y, int64_t n, int64_t classes, kl_err *err);

/* Row-major C (m,n) = op(A) @ op(B) + beta*C with op(A) (m,k), op(B) (k,n);
 * ta: A is stored (k,m), tb: B is stored (n,k); beta is 0 (C is not read)
 * or 1. Plain loops: the products of a -DKL_NO_BLAS build (the GPU test
 * machine has no OpenBLAS), always compiled so the unit tests can check
 * them where OpenBLAS is the default. */
void kl__mlp_sgemm_loops(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *A, const float *B,
                         float beta, float *C);

/* Scratch of one rank on the CPU: rows x hidden twice, rows x classes. */
typedef struct kl_mlp_scratch {
    int64_t rows;
    float *hid, *dhid, *logits;
} kl_mlp_scratch;

int kl__mlp_scratch_alloc(kl_mlp_scratch *s, const kl_mlp_dims *m, int64_t rows);
void kl__mlp_scratch_free(kl_mlp_scratch *s);

/* The gradient of the summed (not averaged) cross-entropy of rows x (b,d)
 * with labels y (b) at weights w, into g (dims->size floats, overwritten);
 * loss[i] gets row i's cross-entropy. b <= s->rows; b = 0 zeroes g. */
void kl__mlp_grad(const kl_mlp_dims *m, const float *w, const float *x, const int32_t *y, int64_t b, float *g,
                  float *loss, kl_mlp_scratch *s);

/* How many of rows x (b,d) the net w classifies as y (argmax of the logits,
 * the lowest class on ties). b <= s->rows. */
int64_t kl__mlp_correct(const kl_mlp_dims *m, const float *w, const float *x, const int32_t *y, int64_t b,
                        kl_mlp_scratch *s);

/* Reports progress after epoch (1-based) of epochs, with that epoch's mean
 * loss; acc >= 0 (the training-set accuracy, known at the end) makes it
 * the final report, fraction 1. Shared by the CPU and CUDA trainers. */
void kl__mlp_progress(const kl_args *args, int64_t epoch, int64_t epochs, float loss, double acc);

#ifdef __cplusplus
}
#endif
#endif
