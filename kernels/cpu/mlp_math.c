/* mlp_math.c — the arithmetic of train_mlp on the CPU: seeded weights, the
 * forward and backward pass of one rank's shard, and the classification
 * count. The CPU reference; cuda/train_mlp.cu does the same steps in the
 * same order with cuBLAS and small kernels.
 *   x is (b,d), y is (b) int32, hid and dhid are (b,h), logits is (b,c);
 *   w and g are flat [w1 (d,h) | b1 (h) | w2 (h,c) | b2 (c)].
 * Matrix products go to OpenBLAS (cblas_sgemm); built with -DKL_NO_BLAS
 * (the GPU test machine) they use the plain loops below. */
#include "mlp_math.h"
#include "kl_philox.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifndef KL_NO_BLAS
#include <cblas.h>
/* Weak (kl_cpu.h, "BLAS"): NULL in a process that did not load OpenBLAS. */
#pragma weak cblas_sgemm
#endif

void kl__mlp_sgemm_loops(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *A, const float *B,
                         float beta, float *C)
{
    for (int64_t i = 0; i < m; i++) {
        float *restrict c = C + i * n;
        if (beta == 0)
            memset(c, 0, sizeof *c * (size_t)n);
        if (!tb) { /* row i of C accumulates rows of B: an axpy that vectorizes */
            for (int64_t p = 0; p < k; p++) {
                const float a = ta ? A[p * m + i] : A[i * k + p];
                const float *restrict b = B + p * n;
                for (int64_t j = 0; j < n; j++)
                    c[j] += a * b[j];
            }
        } else { /* B^T: C[i,j] is a dot product of two contiguous rows */
            for (int64_t j = 0; j < n; j++) {
                const float *restrict b = B + j * k;
                float acc = 0;
                for (int64_t p = 0; p < k; p++)
                    acc += (ta ? A[p * m + i] : A[i * k + p]) * b[p];
                c[j] += acc;
            }
        }
    }
}

/* Row-major C (m,n) = op(A) @ op(B) + beta*C on OpenBLAS, or on the loops
 * above where there is none. */
static void sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *A, const float *B, float beta,
                  float *C)
{
#ifndef KL_NO_BLAS
    if (cblas_sgemm != NULL) {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m,
                    (int)n, (int)k, 1.0f, A, ta ? (int)m : (int)k, B, tb ? (int)k : (int)n, beta, C, (int)n);
        return;
    }
#endif
    kl__mlp_sgemm_loops(ta, tb, m, n, k, A, B, beta, C);
}

void kl__mlp_init(const kl_mlp_dims *m, uint64_t seed, float *p)
{
    const kl_philox_key key = {{(uint32_t)seed, (uint32_t)(seed >> 32)}};
    const float s1 = (float)sqrt(6.0 / (double)m->d), s2 = (float)sqrt(6.0 / (double)(m->h + m->c));
    kl_philox4x32 bits = {{0, 0, 0, 0}};
    for (int64_t i = 0; i < m->size; i++) {
        if (i % 4 == 0) { /* one block of 128 bits serves four elements */
            const uint64_t block = (uint64_t)i / 4;
            const kl_philox4x32 ctr = {{(uint32_t)block, (uint32_t)(block >> 32), KL_MLP_STREAM, 0}};
            bits = kl_philox4x32_10(ctr, key);
        }
        const float u = 2.0f * kl_philox_u01f(bits.v[i % 4]) - 1.0f; /* in [-1, 1] */
        if (i < m->b1)
            p[i] = u * s1;
        else if (i >= m->w2 && i < m->b2)
            p[i] = u * s2;
        else
            p[i] = 0.0f;
    }
}

int kl__mlp_labels_check(const int32_t *y, int64_t n, int64_t classes, kl_err *err)
{
    for (int64_t i = 0; i < n; i++) {
        if (y[i] < 0 || y[i] >= classes) {
            kl_err_set(err, "inputs.y", "inputs.y[%lld] is %d; labels must be in [0, %lld) (params.classes)",
                       (long long)i, (int)y[i], (long long)classes);
            return KL_EINVAL;
        }
    }
    return 0;
}

int kl__mlp_scratch_alloc(kl_mlp_scratch *s, const kl_mlp_dims *m, int64_t rows)
{
    memset(s, 0, sizeof *s);
    size_t r = (size_t)(rows > 0 ? rows : 1);
    s->rows = rows;
    s->hid = malloc(sizeof(float) * r * (size_t)m->h);
    s->dhid = malloc(sizeof(float) * r * (size_t)m->h);
    s->logits = malloc(sizeof(float) * r * (size_t)m->c);
    if (!s->hid || !s->dhid || !s->logits) {
        kl__mlp_scratch_free(s);
        return KL_ENOMEM;
    }
    return 0;
}

void kl__mlp_scratch_free(kl_mlp_scratch *s)
{
    if (!s)
        return;
    free(s->hid);
    free(s->dhid);
    free(s->logits);
    memset(s, 0, sizeof *s);
}

/* hid (b,h) = relu(x @ w1 + b1); logits (b,c) = hid @ w2 (b2 not added). */
static void forward(const kl_mlp_dims *m, const float *w, const float *x, int64_t b, kl_mlp_scratch *s)
{
    const int64_t h = m->h;
    const float *b1 = w + m->b1;
    sgemm(0, 0, b, h, m->d, x, w + m->w1, 0.0f, s->hid);
    for (int64_t i = 0; i < b; i++) {
        float *restrict row = s->hid + i * h;
        for (int64_t j = 0; j < h; j++) {
            float v = row[j] + b1[j];
            row[j] = v > 0.0f ? v : 0.0f;
        }
    }
    sgemm(0, 0, b, m->c, h, s->hid, w + m->w2, 0.0f, s->logits);
}

/* The row's cross-entropy; leaves softmax(l) - onehot(label) in l. */
static float softmax_xent(float *restrict l, const float *restrict b2, int64_t c, int32_t label)
{
    float mx = -INFINITY;
    for (int64_t j = 0; j < c; j++) {
        l[j] += b2[j];
        mx = l[j] > mx ? l[j] : mx;
    }
    const float ly = l[label];
    float sum = 0.0f;
    for (int64_t j = 0; j < c; j++) {
        l[j] = expf(l[j] - mx);
        sum += l[j];
    }
    for (int64_t j = 0; j < c; j++)
        l[j] = l[j] / sum - (j == label ? 1.0f : 0.0f);
    return mx + logf(sum) - ly;
}

/* out (cols) = the sum of the rows of a (rows, cols), row by row. */
static void column_sums(const float *a, int64_t rows, int64_t cols, float *restrict out)
{
    memset(out, 0, sizeof *out * (size_t)cols);
    for (int64_t i = 0; i < rows; i++) {
        const float *restrict r = a + i * cols;
        for (int64_t j = 0; j < cols; j++)
            out[j] += r[j];
    }
}

void kl__mlp_grad(const kl_mlp_dims *m, const float *w, const float *x, const int32_t *y, int64_t b, float *g,
                  float *loss, kl_mlp_scratch *s)
{
    const int64_t h = m->h, c = m->c;
    if (b == 0) {
        memset(g, 0, sizeof *g * (size_t)m->size);
        return;
    }
    forward(m, w, x, b, s);
    for (int64_t i = 0; i < b; i++)
        loss[i] = softmax_xent(s->logits + i * c, w + m->b2, c, y[i]);
    /* dlogits = softmax - onehot, now in s->logits */
    sgemm(1, 0, h, c, b, s->hid, s->logits, 0.0f, g + m->w2); /* hid^T @ dlogits */
    column_sums(s->logits, b, c, g + m->b2);
    sgemm(0, 1, b, h, c, s->logits, w + m->w2, 0.0f, s->dhid); /* dlogits @ w2^T */
    for (int64_t i = 0; i < b * h; i++)
        s->dhid[i] = s->hid[i] > 0.0f ? s->dhid[i] : 0.0f;
    sgemm(1, 0, m->d, h, b, x, s->dhid, 0.0f, g + m->w1); /* x^T @ dhid */
    column_sums(s->dhid, b, h, g + m->b1);
}

int64_t kl__mlp_correct(const kl_mlp_dims *m, const float *w, const float *x, const int32_t *y, int64_t b,
                        kl_mlp_scratch *s)
{
    const int64_t c = m->c;
    const float *b2 = w + m->b2;
    int64_t right = 0;
    if (b == 0)
        return 0;
    forward(m, w, x, b, s);
    for (int64_t i = 0; i < b; i++) {
        const float *l = s->logits + i * c;
        int64_t best = 0;
        float top = l[0] + b2[0];
        for (int64_t j = 1; j < c; j++) {
            float v = l[j] + b2[j];
            if (v > top) {
                top = v;
                best = j;
            }
        }
        right += best == y[i];
    }
    return right;
}

void kl__mlp_progress(const kl_args *args, int64_t epoch, int64_t epochs, float loss, double acc)
{
    kl_progress p = {.fraction = acc < 0 ? (double)epoch / (double)(epochs + 1) : 1.0};
    kl_progress_add(&p, "epoch", (double)epoch);
    kl_progress_add(&p, "epochs", (double)epochs);
    kl_progress_add(&p, "loss", loss);
    if (acc >= 0)
        kl_progress_add(&p, "accuracy", acc);
    kl_progress_report(args->progress, &p);
}
