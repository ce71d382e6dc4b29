/* test_kl_train_mlp.c — train_mlp on the CPU: against a naive trainer in
 * double (plain loops, the same init, order and update, each rank walking
 * its own shard), on 1, 3 and 16 ranks with uneven and spent shards; > 95 %
 * accuracy and a falling loss on three Gaussian blobs; one node of 2 ranks
 * and 2 nodes of 1 rank (and 2 x 2 against 4), each node given only its
 * rows, learning the same weights and accuracy; the same bits
 * for the same seed; the seeded init; refused params and shapes naming the
 * field; labels out of range; cancel; and the plain-loop products that a
 * -DKL_NO_BLAS build (the GPU checker's CPU reference) uses in place of
 * OpenBLAS, against a triple loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/mlp_math.h"
#include "kl_comm.h"
#include "kl_test_clock.h"
#include "kl_test_store.h"

#define KL_TEST_SEED 0x853c49e6748fea9bull
#include "kl_test_rand.h"

/* A data set: x (n,d), y (n). */
typedef struct set {
    int64_t n, d;
    float *x;
    int32_t *y;
    kl_tensor tx, ty;
} set;

static void set_tensors(set *s)
{
    s->tx = (kl_tensor){.dtype = KL_F32, .ndim = 2, .shape = {s->n, s->d}, .data = s->x};
    s->ty = (kl_tensor){.dtype = KL_I32, .ndim = 1, .shape = {s->n}, .data = s->y};
}

/* Blobs of unit variance around spread*e_k, class k = row % classes. */
static set blobs(int64_t n, int64_t d, int classes, double spread)
{
    set s = {.n = n, .d = d, .x = malloc(sizeof(float) * (size_t)(n * d)), .y = malloc(sizeof(int32_t) * (size_t)n)};
    assert_non_null(s.x);
    assert_non_null(s.y);
    for (int64_t i = 0; i < n; i++) {
        s.y[i] = (int32_t)(i % classes);
        for (int64_t j = 0; j < d; j++)
            s.x[i * d + j] = (float)(nrand() + (j == s.y[i] % d ? spread : 0.0));
    }
    set_tensors(&s);
    return s;
}

static void set_free(set *s)
{
    free(s->x);
    free(s->y);
}

typedef struct hyper {
    int hidden, classes, epochs, batch;
    double lr, momentum, seed;
    int ranks;
} hyper;

static kl_args args_for(const set *s, const hyper *h)
{
    kl_args a;
    memset(&a, 0, sizeof a);
    a.kernel = kl_kernel_find("train_mlp");
    assert_non_null(a.kernel);
    const double v[] = {h->hidden, h->classes, h->epochs, h->batch, h->lr, h->momentum, h->seed};
    for (int i = 0; i < 7; i++)
        a.params[i] = (kl_value){.num = v[i], .given = 1};
    a.inputs[KL_MLP_X] = &s->tx;
    a.inputs[KL_MLP_Y] = &s->ty;
    a.ranks = h->ranks;
    return a;
}

/* Trains h on s into out (a failure fails the test), its progress reports
 * going to progress and its notes to info (either NULL: none). */
static void train_reporting(const set *s, const hyper *h, kl_progress_sink *progress, kl_info *info,
                            kl_tensor *out)
{
    kl_args a = args_for(s, h);
    a.progress = progress;
    a.info = info;
    kl_err err = {0};
    int rc = kl_run_cpu(&a, out, &err);
    if (rc != 0)
        print_error("train_mlp failed: %d %s: %s\n", rc, err.field, err.message);
    assert_int_equal(rc, 0);
}

static void train(const set *s, const hyper *h, kl_tensor *out)
{
    train_reporting(s, h, NULL, NULL, out);
}

static void outs_free(kl_tensor *out)
{
    for (int i = 0; i < 6; i++)
        kl_tensor_free(&out[i]);
}

static float *f32(kl_tensor *t)
{
    return t->data;
}

/* |got - want| <= atol + rtol*|want| for every element, else fails naming
 * the first one that is not. */
static void assert_close(const float *got, const double *want, int64_t n, double atol, double rtol, const char *what)
{
    for (int64_t i = 0; i < n; i++) {
        if (!(fabs((double)got[i] - want[i]) <= atol + rtol * fabs(want[i]))) {
            print_error("%s[%lld]: got %.9g want %.9g\n", what, (long long)i, got[i], want[i]);
            fail();
        }
    }
}

static void assert_close_f(const float *got, const float *want, int64_t n, double atol, double rtol,
                           const char *what)
{
    for (int64_t i = 0; i < n; i++) {
        if (!(fabs((double)got[i] - want[i]) <= atol + rtol * fabs((double)want[i]))) {
            print_error("%s[%lld]: got %.9g want %.9g\n", what, (long long)i, got[i], want[i]);
            fail();
        }
    }
}

/* ---- the naive trainer: one row at a time, in double ---- */

typedef struct naive {
    double *w, *loss, accuracy;
} naive;

/* The net's hidden layer for row x: hid = relu(x W1 + b1). */
static void naive_hidden(const kl_mlp_dims *m, const double *w, const float *x, double *hid)
{
    for (int64_t j = 0; j < m->h; j++) {
        double z = w[m->b1 + j];
        for (int64_t k = 0; k < m->d; k++)
            z += x[k] * w[m->w1 + k * m->h + j];
        hid[j] = z > 0 ? z : 0;
    }
}

/* The net's logit of class c from the hidden layer hid: (hid W2 + b2)[c]. */
static double naive_logit(const kl_mlp_dims *m, const double *w, const double *hid, int64_t c)
{
    double z = w[m->b2 + c];
    for (int64_t j = 0; j < m->h; j++)
        z += hid[j] * w[m->w2 + j * m->c + c];
    return z;
}

static naive naive_train(const set *s, const hyper *h)
{
    const kl_mlp_dims m = kl__mlp_dims(s->n, s->d, h->hidden, h->classes);
    const int64_t H = m.h, C = m.c, D = m.d;
    float *w0 = malloc(sizeof(float) * (size_t)m.size);
    double *w = malloc(sizeof(double) * (size_t)m.size), *v = calloc((size_t)m.size, sizeof(double));
    double *g = malloc(sizeof(double) * (size_t)m.size), *hid = malloc(sizeof(double) * (size_t)H);
    double *l = malloc(sizeof(double) * (size_t)C), *loss = calloc((size_t)h->epochs, sizeof(double));
    assert_true(w0 && w && v && g && hid && l && loss);
    kl__mlp_init(&m, (uint64_t)h->seed, w0);
    for (int64_t i = 0; i < m.size; i++)
        w[i] = w0[i];
    free(w0);

    /* World W: rank r owns rows [r*n/W, (r+1)*n/W) and takes ceil(batch/W)
     * of them per step; a step averages over all the rows taken. */
    const int W = h->ranks > 0 ? h->ranks : 1;
    const int64_t lb = (h->batch + W - 1) / W, big = (s->n + W - 1) / W;
    for (int e = 0; e < h->epochs; e++) {
        for (int64_t st = 0; st * lb < big; st++) {
            int64_t bt = 0;
            memset(g, 0, sizeof(double) * (size_t)m.size);
            for (int64_t i = 0; i < s->n; i++) {
                int owner = 0;
                while (i >= s->n * (owner + 1) / W)
                    owner++;
                const int64_t off = i - s->n * owner / W;
                if (off < st * lb || off >= (st + 1) * lb)
                    continue;
                bt++;
                const float *x = s->x + i * D;
                naive_hidden(&m, w, x, hid);
                double mx = -INFINITY, sum = 0;
                for (int64_t c = 0; c < C; c++) {
                    l[c] = naive_logit(&m, w, hid, c);
                    mx = l[c] > mx ? l[c] : mx;
                }
                for (int64_t c = 0; c < C; c++)
                    sum += exp(l[c] - mx);
                loss[e] += mx + log(sum) - l[s->y[i]];
                for (int64_t c = 0; c < C; c++) {
                    double dl = exp(l[c] - mx) / sum - (c == s->y[i]);
                    g[m.b2 + c] += dl;
                    for (int64_t j = 0; j < H; j++)
                        g[m.w2 + j * C + c] += hid[j] * dl;
                    l[c] = dl;
                }
                for (int64_t j = 0; j < H; j++) {
                    if (hid[j] <= 0)
                        continue;
                    double dh = 0;
                    for (int64_t c = 0; c < C; c++)
                        dh += l[c] * w[m.w2 + j * C + c];
                    g[m.b1 + j] += dh;
                    for (int64_t k = 0; k < D; k++)
                        g[m.w1 + k * H + j] += x[k] * dh;
                }
            }
            for (int64_t p = 0; p < m.size; p++) {
                v[p] = h->momentum * v[p] + g[p] / (double)bt;
                w[p] -= h->lr * v[p];
            }
        }
        loss[e] /= (double)s->n;
    }
    int64_t right = 0;
    for (int64_t i = 0; i < s->n; i++) {
        naive_hidden(&m, w, s->x + i * D, hid);
        int64_t best = 0;
        double top = -INFINITY;
        for (int64_t c = 0; c < C; c++) {
            double z = naive_logit(&m, w, hid, c);
            if (z > top) {
                top = z;
                best = c;
            }
        }
        right += best == s->y[i];
    }
    free(v);
    free(g);
    free(hid);
    free(l);
    return (naive){.w = w, .loss = loss, .accuracy = (double)right / (double)s->n};
}

static void matches_naive(const hyper *h)
{
    set s = blobs(50, 3, h->classes, 1.5);
    naive ref = naive_train(&s, h);
    const kl_mlp_dims m = kl__mlp_dims(s.n, s.d, h->hidden, h->classes);
    kl_tensor out[6];
    train(&s, h, out);
    assert_int_equal(out[KL_MLP_OUT_W1].shape[0], s.d);
    assert_int_equal(out[KL_MLP_OUT_W1].shape[1], h->hidden);
    assert_int_equal(out[KL_MLP_OUT_W2].shape[0], h->hidden);
    assert_int_equal(out[KL_MLP_OUT_W2].shape[1], h->classes);
    assert_int_equal(out[KL_MLP_OUT_LOSS].shape[0], h->epochs);
    assert_int_equal(out[KL_MLP_OUT_ACC].shape[0], 1);
    assert_close(f32(&out[KL_MLP_OUT_W1]), ref.w + m.w1, m.d * m.h, 1e-5, 1e-4, "w1");
    assert_close(f32(&out[KL_MLP_OUT_B1]), ref.w + m.b1, m.h, 1e-5, 1e-4, "b1");
    assert_close(f32(&out[KL_MLP_OUT_W2]), ref.w + m.w2, m.h * m.c, 1e-5, 1e-4, "w2");
    assert_close(f32(&out[KL_MLP_OUT_B2]), ref.w + m.b2, m.c, 1e-5, 1e-4, "b2");
    assert_close(f32(&out[KL_MLP_OUT_LOSS]), ref.loss, h->epochs, 1e-6, 1e-5, "loss");
    assert_close(f32(&out[KL_MLP_OUT_ACC]), &ref.accuracy, 1, 1e-7, 0, "accuracy");
    outs_free(out);
    free(ref.w);
    free(ref.loss);
    set_free(&s);
}

/* The cases matches_naive runs, on one rank (or none: ranks 0) and on many. */
static const hyper NAIVE_ONE_RANK[] = {
    /* 50 rows in batches of 7: the last batch has 1 row */
    {.hidden = 6, .classes = 3, .epochs = 4, .batch = 7, .lr = 0.1, .momentum = 0.9, .seed = 5, .ranks = 1},
    /* full batch, no momentum */
    {.hidden = 4, .classes = 2, .epochs = 3, .batch = 50, .lr = 0.5, .momentum = 0, .seed = 1, .ranks = 0},
};
static const hyper NAIVE_MANY_RANKS[] = {
    /* shards of 2, 2, 3 rows, and a last batch of 1 row: two empty ranks */
    {.hidden = 6, .classes = 3, .epochs = 4, .batch = 7, .lr = 0.1, .momentum = 0.9, .seed = 5, .ranks = 3},
    /* batches of 2 on 3 ranks: one rank always idle */
    {.hidden = 5, .classes = 4, .epochs = 2, .batch = 2, .lr = 0.05, .momentum = 0.5, .seed = 9, .ranks = 3},
    /* batch of 1 on 16 ranks */
    {.hidden = 3, .classes = 2, .epochs = 1, .batch = 1, .lr = 0.05, .momentum = 0.8, .seed = 2, .ranks = 16},
};

static void matches_naive_trainer_on_one_rank(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof NAIVE_ONE_RANK / sizeof NAIVE_ONE_RANK[0]; i++)
        matches_naive(&NAIVE_ONE_RANK[i]);
}

static void matches_naive_trainer_on_three_ranks(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof NAIVE_MANY_RANKS / sizeof NAIVE_MANY_RANKS[0]; i++)
        matches_naive(&NAIVE_MANY_RANKS[i]);
}

static const hyper BLOBS = {.hidden = 32, .classes = 3, .epochs = 8, .batch = 32, .lr = 0.05, .momentum = 0.9,
                            .seed = 42, .ranks = 1};

static void learns_separable_blobs(void **state)
{
    (void)state;
    set s = blobs(960, 6, 3, 4.0);
    kl_tensor out[6];
    train(&s, &BLOBS, out);
    const float *loss = f32(&out[KL_MLP_OUT_LOSS]), acc = f32(&out[KL_MLP_OUT_ACC])[0];
    print_message("blobs: accuracy %.4f, loss %.4f -> %.4f\n", acc, loss[0], loss[BLOBS.epochs - 1]);
    assert_true(acc > 0.95f);
    assert_true(loss[BLOBS.epochs - 1] < 0.25f * loss[0]);
    for (int e = 1; e < BLOBS.epochs; e++)
        assert_true(loss[e] < loss[e - 1] * 1.05f);
    for (int i = 0; i < 4; i++)
        for (int64_t k = 0; k < kl_tensor_elems(&out[i]); k++)
            assert_true(isfinite(f32(&out[i])[k]));
    outs_free(out);
    set_free(&s);
}

/* Node g of `nodes` x `local` ranks gets only its rows of s, as the node
 * fetches them, and trains with the others over Gloo on loopback. */
static void train_across_nodes(const set *s, const hyper *h, int nodes, int local, kl_tensor *out)
{
    kl_test_store st;
    kl_test_store_init(&st);
    kl_test_node nd[4];
    set part[4];
    hyper hl = *h;
    hl.ranks = local;
    for (int g = 0; g < nodes; g++) {
        int64_t lo, hi, unused;
        kl_shard_rows(s->n, nodes * local, g * local, &lo, &unused);
        kl_shard_rows(s->n, nodes * local, g * local + local - 1, &unused, &hi);
        part[g] = (set){.n = hi - lo, .d = s->d, .x = s->x + lo * s->d, .y = s->y + lo};
        set_tensors(&part[g]);
        memset(&nd[g], 0, sizeof nd[g]);
        nd[g].args = args_for(&part[g], &hl);
        nd[g].dist = kl_test_dist(&st, nodes, g, local, 30000);
        nd[g].dist.shard_lo = lo;
        nd[g].dist.shard_total = s->n;
    }
    kl_test_nodes_run(nd, nodes);
    for (int g = 0; g < nodes; g++) {
        if (nd[g].rc)
            print_error("node %d: %s: %s\n", g, nd[g].err.field, nd[g].err.message);
        assert_int_equal(nd[g].rc, 0);
    }
    memcpy(out, nd[0].outs, sizeof(kl_tensor) * 6);
    for (int g = 1; g < nodes; g++)
        for (int i = 0; i < 6; i++)
            assert_null(nd[g].outs[i].data); /* only node 0 answers */
    kl_test_store_free(&st);
}

/* One node of nodes*local ranks against nodes x local, each node given only
 * its rows: the same weights within float tolerance, the same accuracy. */
static void one_node_and_many_agree(int64_t n, int64_t d, hyper h1, int nodes, int local)
{
    set s = blobs(n, d, h1.classes, 4.0);
    h1.ranks = nodes * local;
    kl_tensor a[6], b[6];
    train(&s, &h1, a);
    train_across_nodes(&s, &h1, nodes, local, b);
    static const char *names[] = {"w1", "b1", "w2", "b2", "loss"};
    for (int i = 0; i < 5; i++)
        assert_close_f(f32(&b[i]), f32(&a[i]), kl_tensor_elems(&a[i]), 1e-4, 1e-3, names[i]);
    assert_true(fabsf(f32(&a[KL_MLP_OUT_ACC])[0] - f32(&b[KL_MLP_OUT_ACC])[0]) <= 2.0f / (float)n);
    assert_true(f32(&b[KL_MLP_OUT_ACC])[0] > 0.95f);
    outs_free(a);
    outs_free(b);
    set_free(&s);
}

static void two_nodes_learn_what_one_node_of_as_many_ranks_learns(void **state)
{
    (void)state;
    hyper h = BLOBS;
    h.epochs = 5;
    one_node_and_many_agree(600, 5, h, 2, 1); /* small products: a thread a rank */
    one_node_and_many_agree(601, 5, h, 2, 2); /* uneven shards, 2 local ranks a node */
    h.hidden = 256;
    h.batch = 128;
    h.epochs = 2;
    one_node_and_many_agree(512, 64, h, 2, 1); /* 64 x 64 x 256 products: ranks in turn, OpenBLAS threads */
}

/* A net of 4 hidden units and 2 classes, learning rate 0.1, momentum 0.5:
 * what the tests of what a run reports and refuses train. */
static hyper small_net(int epochs, int batch, int ranks)
{
    return (hyper){.hidden = 4, .classes = 2, .epochs = epochs, .batch = batch, .lr = 0.1,
                   .momentum = 0.5, .ranks = ranks};
}

static void a_node_given_the_wrong_rows_is_refused(void **state)
{
    (void)state;
    set s = blobs(40, 2, 2, 3.0);
    hyper h = small_net(1, 8, 1);
    kl_test_store st;
    kl_test_store_init(&st);
    kl_dist d = kl_test_dist(&st, 2, 1, 1, 1000);
    d.shard_total = 40;
    d.shard_lo = 19; /* node 1 of 2 owns [20, 40) */
    set part = {.n = 20, .d = 2, .x = s.x + 20 * 2, .y = s.y + 20};
    set_tensors(&part);
    kl_args a = args_for(&part, &h);
    a.dist = &d;
    kl_err err = {0};
    assert_int_equal(kl_args_check(&a, &err), KL_EINVAL);
    assert_string_equal(err.field, "inputs.x");
    assert_non_null(strstr(err.message, "[20, 40)"));
    d.shard_lo = 20;
    assert_int_equal(kl_args_check(&a, &err), 0);
    assert_int_equal(kl_kernel_find("train_mlp")->max_nodes, 64);
    assert_int_equal(kl_kernel_find("train_mlp")->inputs[KL_MLP_X].shard, 1);
    assert_int_equal(kl_kernel_find("train_mlp")->inputs[KL_MLP_Y].shard, 1);
    assert_int_equal(st.sets, 0);
    kl_test_store_free(&st);
    set_free(&s);
}

static void same_seed_gives_the_same_bits(void **state)
{
    (void)state;
    set s = blobs(200, 4, 3, 3.0);
    hyper h = BLOBS;
    h.epochs = 3;
    h.batch = 24;
    for (int ranks = 1; ranks <= 3; ranks += 2) {
        h.ranks = ranks;
        kl_tensor a[6], b[6];
        train(&s, &h, a);
        train(&s, &h, b);
        for (int i = 0; i < 6; i++)
            assert_memory_equal(a[i].data, b[i].data, kl_tensor_bytes(&a[i]));
        outs_free(b);
        h.seed += 1;
        train(&s, &h, b);
        assert_memory_not_equal(a[KL_MLP_OUT_W1].data, b[KL_MLP_OUT_W1].data, kl_tensor_bytes(&a[KL_MLP_OUT_W1]));
        h.seed -= 1;
        outs_free(a);
        outs_free(b);
    }
    set_free(&s);
}

static void init_is_seeded_and_scaled(void **state)
{
    (void)state;
    const kl_mlp_dims m = kl__mlp_dims(1, 50, 200, 10);
    float *p = malloc(sizeof(float) * (size_t)m.size), *q = malloc(sizeof(float) * (size_t)m.size);
    assert_true(p && q);
    kl__mlp_init(&m, 7, p);
    kl__mlp_init(&m, 7, q);
    assert_memory_equal(p, q, sizeof(float) * (size_t)m.size);
    const double s1 = sqrt(6.0 / 50), s2 = sqrt(6.0 / 210);
    double sum = 0, sq = 0;
    for (int64_t i = m.w1; i < m.b1; i++) {
        assert_true(fabs(p[i]) <= s1 * (1 + 1e-6));
        sum += p[i];
        sq += (double)p[i] * p[i];
    }
    const double cnt = (double)(m.b1 - m.w1);
    assert_true(fabs(sum / cnt) < 0.02 * s1);
    assert_true(fabs(sq / cnt - s1 * s1 / 3) < 0.03 * s1 * s1); /* variance of U(-s, s) */
    for (int64_t i = m.w2; i < m.b2; i++)
        assert_true(fabs(p[i]) <= s2 * (1 + 1e-6));
    for (int64_t i = m.b1; i < m.w2; i++)
        assert_true(p[i] == 0.0f);
    for (int64_t i = m.b2; i < m.size; i++)
        assert_true(p[i] == 0.0f);
    kl__mlp_init(&m, (uint64_t)1 << 40, q); /* the seed's high word counts too */
    assert_memory_not_equal(p, q, sizeof(float) * (size_t)m.size);
    free(p);
    free(q);
}

/* Every transpose combination, beta 0 over NaN (C must not be read) and
 * beta 1, against a triple loop in double. */
static void sgemm_loops_match_a_triple_loop(void **state)
{
    (void)state;
    const int64_t m = 7, n = 13, k = 5;
    float A[7 * 5], B[5 * 13], C[7 * 13], C0[7 * 13];
    for (int i = 0; i < m * k; i++)
        A[i] = (float)(urand() * 2 - 1);
    for (int i = 0; i < k * n; i++)
        B[i] = (float)(urand() * 2 - 1);
    for (int i = 0; i < m * n; i++)
        C0[i] = (float)(urand() * 2 - 1);
    for (int ta = 0; ta < 2; ta++) {
        for (int tb = 0; tb < 2; tb++) {
            for (int beta = 0; beta < 2; beta++) {
                for (int i = 0; i < m * n; i++)
                    C[i] = beta ? C0[i] : NAN;
                kl__mlp_sgemm_loops(ta, tb, m, n, k, A, B, (float)beta, C);
                for (int64_t i = 0; i < m; i++) {
                    for (int64_t j = 0; j < n; j++) {
                        double want = beta ? C0[i * n + j] : 0.0;
                        for (int64_t p = 0; p < k; p++)
                            want += (double)(ta ? A[p * m + i] : A[i * k + p]) * (tb ? B[j * k + p] : B[p * n + j]);
                        assert_true(fabs(C[i * n + j] - want) <= 1e-6);
                    }
                }
            }
        }
    }
}

static void indices_match_the_specs(void **state)
{
    (void)state;
    const kl_kernel *k = kl_kernel_find("train_mlp");
    assert_non_null(k);
    assert_int_equal(kl_param_index(k, "hidden"), KL_MLP_HIDDEN);
    assert_int_equal(kl_param_index(k, "classes"), KL_MLP_CLASSES);
    assert_int_equal(kl_param_index(k, "epochs"), KL_MLP_EPOCHS);
    assert_int_equal(kl_param_index(k, "batch_size"), KL_MLP_BATCH);
    assert_int_equal(kl_param_index(k, "lr"), KL_MLP_LR);
    assert_int_equal(kl_param_index(k, "momentum"), KL_MLP_MOMENTUM);
    assert_int_equal(kl_param_index(k, "seed"), KL_MLP_SEED);
    assert_int_equal(kl_input_index(k, "x"), KL_MLP_X);
    assert_int_equal(kl_input_index(k, "y"), KL_MLP_Y);
    static const char *outs[] = {"w1", "b1", "w2", "b2", "loss", "accuracy"};
    assert_int_equal(k->noutputs, 6);
    for (int i = 0; i < 6; i++)
        assert_string_equal(k->outputs[i].name, outs[i]);
}

/* Expects kl_args_check to refuse `a` naming `field`. */
static void refused(kl_args *a, const char *field)
{
    kl_err err = {0};
    assert_int_equal(kl_args_check(a, &err), KL_EINVAL);
    if (strcmp(err.field, field) != 0)
        print_error("wanted %s, got %s: %s\n", field, err.field, err.message);
    assert_string_equal(err.field, field);
    assert_non_null(strstr(err.message, field));
}

static void refuses_bad_params_and_shapes_naming_the_field(void **state)
{
    (void)state;
    set s = blobs(20, 3, 2, 1.0);
    hyper h = small_net(1, 5, 1);
    kl_args a = args_for(&s, &h);
    kl_err err = {0};
    assert_int_equal(kl_args_check(&a, &err), 0);

    static const struct {
        int param;
        double value;
        const char *field;
    } bad[] = {
        {KL_MLP_HIDDEN, 0, "params.hidden"},        {KL_MLP_HIDDEN, 4097, "params.hidden"},
        {KL_MLP_HIDDEN, 2.5, "params.hidden"},      {KL_MLP_CLASSES, 1, "params.classes"},
        {KL_MLP_CLASSES, 1025, "params.classes"},   {KL_MLP_EPOCHS, 0, "params.epochs"},
        {KL_MLP_EPOCHS, 1001, "params.epochs"},     {KL_MLP_BATCH, 0, "params.batch_size"},
        {KL_MLP_BATCH, 21, "params.batch_size"},    {KL_MLP_LR, 0, "params.lr"},
        {KL_MLP_LR, -1, "params.lr"},               {KL_MLP_LR, NAN, "params.lr"},
        {KL_MLP_MOMENTUM, 1, "params.momentum"},    {KL_MLP_MOMENTUM, -0.1, "params.momentum"},
        {KL_MLP_SEED, -1, "params.seed"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kl_args b = a;
        b.params[bad[i].param].num = bad[i].value;
        refused(&b, bad[i].field);
    }
    kl_args b = a;
    b.params[KL_MLP_CLASSES].given = 0; /* required */
    refused(&b, "params.classes");

    kl_tensor y_short = s.ty, y_f32 = s.ty, x_flat = s.tx, x_empty = s.tx;
    y_short.shape[0] = 19;
    y_f32.dtype = KL_F32;
    x_flat.ndim = 1;
    x_empty.shape[0] = 0;
    b = a;
    b.inputs[KL_MLP_Y] = &y_short;
    refused(&b, "inputs.y");
    b.inputs[KL_MLP_Y] = &y_f32;
    refused(&b, "inputs.y");
    b.inputs[KL_MLP_Y] = NULL;
    refused(&b, "inputs.y");
    b = a;
    b.inputs[KL_MLP_X] = &x_flat;
    refused(&b, "inputs.x");
    b.inputs[KL_MLP_X] = &x_empty;
    refused(&b, "inputs.x");

    kl_tensor x_wide = s.tx;
    x_wide.shape[1] = 20000; /* w1 of 20000 x 4096 is past the limit */
    b = a;
    b.inputs[KL_MLP_X] = &x_wide;
    b.params[KL_MLP_HIDDEN].num = 4096;
    refused(&b, "inputs.x");

    kl_tensor x_tall = s.tx, y_tall = s.ty;
    x_tall.shape[0] = y_tall.shape[0] = (int64_t)1 << 26;
    x_tall.shape[1] = 1;
    b = a;
    b.inputs[KL_MLP_X] = &x_tall;
    b.inputs[KL_MLP_Y] = &y_tall;
    b.params[KL_MLP_BATCH].num = (double)((int64_t)1 << 26); /* 2^26 x (2*4 + 2) activations */
    refused(&b, "params.batch_size");

    b = a;
    b.ranks = 17;
    refused(&b, "resources.gpus");
    set_free(&s);
}

static void refuses_labels_out_of_range_at_run_time(void **state)
{
    (void)state;
    set s = blobs(20, 3, 2, 1.0);
    hyper h = small_net(1, 5, 2);
    const int32_t bad[] = {2, -1};
    for (int i = 0; i < 2; i++) {
        s.y[13] = bad[i];
        kl_args a = args_for(&s, &h);
        kl_tensor out[6];
        kl_err err = {0};
        assert_int_equal(kl_run_cpu(&a, out, &err), KL_EINVAL);
        assert_string_equal(err.field, "inputs.y");
        assert_non_null(strstr(err.message, "inputs.y[13]"));
        for (int k = 0; k < 6; k++)
            assert_null(out[k].data);
    }
    set_free(&s);
}

static void stops_when_cancelled(void **state)
{
    (void)state;
    set s = blobs(2000, 8, 3, 2.0);
    hyper h = {.hidden = 64, .classes = 3, .epochs = 1000, .batch = 16, .lr = 0.01, .momentum = 0.9, .ranks = 2};
    kl_args a = args_for(&s, &h);
    volatile int cancel = 1;
    a.cancel = &cancel;
    kl_tensor out[6];
    kl_err err = {0};
    assert_int_equal(kl_run_cpu(&a, out, &err), KL_ECANCELED);
    assert_null(out[0].data);

    cancel = 0;
    double took;
    assert_int_equal(kl_test_run_cancelled(&a, 50, out, &err, &took), KL_ECANCELED);
    assert_true(took < 0.05 + 0.2);
    set_free(&s);
}

/* A sink that keeps every report (it clears the throttle's clock). */
typedef struct rec_sink {
    kl_progress_sink sink;
    int n;
    kl_progress got[16];
} rec_sink;

static void rec_report(kl_progress_sink *sink, const kl_progress *p)
{
    rec_sink *r = (rec_sink *)sink;
    if (r->n < 16)
        r->got[r->n++] = *p;
    sink->last_ms = 0;
}

static double kv(const kl_progress *p, const char *key)
{
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->kv[i].key, key) == 0)
            return p->kv[i].value;
    fail_msg("no %s in the report", key);
    return 0;
}

static void reports_progress_each_epoch_then_the_accuracy(void **state)
{
    (void)state;
    set s = blobs(40, 2, 2, 3.0);
    hyper h = small_net(4, 8, 1);
    rec_sink rec = {.sink = {.report = rec_report}};
    kl_tensor out[6];
    train_reporting(&s, &h, &rec.sink, NULL, out);
    assert_int_equal(rec.n, 4);
    for (int e = 0; e < 4; e++) {
        assert_int_equal((int)kv(&rec.got[e], "epoch"), e + 1);
        assert_int_equal((int)kv(&rec.got[e], "epochs"), 4);
        assert_true(fabs(kv(&rec.got[e], "loss") - f32(&out[KL_MLP_OUT_LOSS])[e]) < 1e-6);
        assert_true(e == 3 ? rec.got[e].fraction == 1.0
                           : rec.got[e].fraction > (e ? rec.got[e - 1].fraction : 0) &&
                                 rec.got[e].fraction < 1.0);
    }
    assert_true(fabs(kv(&rec.got[3], "accuracy") - f32(&out[KL_MLP_OUT_ACC])[0]) < 1e-6);
    outs_free(out);
    set_free(&s);
}

static void reports_ranks_and_steps(void **state)
{
    (void)state;
    set s = blobs(30, 2, 2, 3.0);
    hyper h = small_net(3, 8, 2);
    kl_info info = {0};
    kl_tensor out[6];
    train_reporting(&s, &h, NULL, &info, out);
    const char *ranks = NULL, *steps = NULL;
    for (int i = 0; i < info.n; i++) {
        if (strcmp(info.kv[i].key, "ranks") == 0)
            ranks = info.kv[i].value;
        if (strcmp(info.kv[i].key, "steps") == 0)
            steps = info.kv[i].value;
    }
    assert_non_null(ranks);
    assert_non_null(steps);
    assert_string_equal(ranks, "2");
    assert_string_equal(steps, "12"); /* 3 epochs x 4 batches */
    outs_free(out);
    set_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(indices_match_the_specs),
        cmocka_unit_test(init_is_seeded_and_scaled),
        cmocka_unit_test(sgemm_loops_match_a_triple_loop),
        cmocka_unit_test(matches_naive_trainer_on_one_rank),
        cmocka_unit_test(matches_naive_trainer_on_three_ranks),
        cmocka_unit_test(learns_separable_blobs),
        cmocka_unit_test(a_node_given_the_wrong_rows_is_refused),
        cmocka_unit_test(same_seed_gives_the_same_bits),
        cmocka_unit_test(refuses_bad_params_and_shapes_naming_the_field),
        cmocka_unit_test(refuses_labels_out_of_range_at_run_time),
        cmocka_unit_test(stops_when_cancelled),
        cmocka_unit_test(reports_ranks_and_steps),
        cmocka_unit_test(reports_progress_each_epoch_then_the_accuracy),
    };
    const struct CMUnitTest dist[] = {
        cmocka_unit_test(two_nodes_learn_what_one_node_of_as_many_ranks_learns),
    };
    if (kl_comm_available() && cmocka_run_group_tests(dist, NULL, NULL))
        return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
