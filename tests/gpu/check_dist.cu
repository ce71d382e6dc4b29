/* check_dist.cu — the plugin's all-reduce across nodes: two processes on
 * this box, each a "node" with its own GPUs (half of them each), meeting
 * through a rendezvous store kept in files of a temporary folder (what the
 * gateway's rendezvous is to real nodes): node 0's NCCL id goes through it,
 * every rank joins with ncclCommInitRankConfig, and the sum over the world
 * must be exact (wrong = 0, reported by node 0 only; node 1 returns no
 * outputs); then train_mlp, each node given only its rows of the same
 * blobs, against the CPU reference on the whole set with as many ranks
 * (weights within atol 1e-4 + rtol 1e-3, the same accuracy within 2 rows).
 * Those two are skipped, saying why, with fewer than 2 GPUs. Then node 1
 * never comes: node 0, alone with its GPUs (one is enough), must give up
 * with KL_ETIMEDOUT after its timeout, its non-blocking
 * ncclCommInitRankConfig aborted, not hang: the fault path of NCCL runs on
 * any GPU box. The parent never touches CUDA: it starts itself (exec) as
 * the nodes, and prints the summary (check_common.h). */
#include "kl_cuda.h"
#include "kl_allreduce.h"
#include "kl_plugin.h"
#include "cpu/mlp_math.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check_common.h"
#include "../unit/kernels/kl_test_fstore.h"

static kl_args allreduce_args(int ranks)
{
    kl_args a = kernel_args("allreduce");
    a.params[KL_ALLREDUCE_COUNT] = kl_value{(double)(1 << 24), 0, 1};
    a.params[KL_ALLREDUCE_DTYPE] = kl_value{0, 0, 1};
    a.params[KL_ALLREDUCE_OP] = kl_value{0, KL_ALLREDUCE_SUM, 1};
    a.params[KL_ALLREDUCE_ITERS] = kl_value{20, 0, 1};
    a.ranks = ranks;
    return a;
}

/* The same blobs in every process: 4 classes around 3*e_k in 8 dims, a
 * fixed linear congruential draw. */
#define MLP_N 4001
#define MLP_D 8
static void make_blobs(float *x, int32_t *y)
{
    uint64_t s = 12345;
    for (int64_t i = 0; i < MLP_N; i++) {
        y[i] = (int32_t)(i % 4);
        for (int j = 0; j < MLP_D; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x[i * MLP_D + j] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5) + (j == y[i] ? 3.0f : 0.0f);
        }
    }
}

static kl_args mlp_args(const kl_tensor *tx, const kl_tensor *ty, int ranks)
{
    kl_args a = kernel_args("train_mlp");
    const double v[] = {32, 4, 3, 64, 0.05, 0.9, 7};
    for (int i = 0; i < 7; i++) {
        a.params[i].num = v[i];
        a.params[i].given = 1;
    }
    a.inputs[KL_MLP_X] = tx;
    a.inputs[KL_MLP_Y] = ty;
    a.ranks = ranks;
    return a;
}

/* train_mlp as node `node` of 2 x G ranks, given only its rows; node 0
 * compares with the CPU on all rows and 2G ranks. 0 when right. */
static int mlp_node(int node, int G, const int *ids, kl_dist *dist)
{
    static float x[MLP_N * MLP_D];
    static int32_t y[MLP_N];
    make_blobs(x, y);
    int64_t lo, hi, unused;
    kl_shard_rows(MLP_N, 2 * G, node * G, &lo, &unused);
    kl_shard_rows(MLP_N, 2 * G, node * G + G - 1, &unused, &hi);
    kl_tensor tx = {KL_F32, 2, {hi - lo, MLP_D}, x + lo * MLP_D}, ty = {KL_I32, 1, {hi - lo}, y + lo};
    dist->shard_lo = lo;
    dist->shard_total = MLP_N;
    kl_args a = mlp_args(&tx, &ty, G);
    a.dist = dist;
    kl_tensor gpu[6], cpu[6];
    kl_err err;
    memset(&err, 0, sizeof err);
    int rc = plugin.run(&a, ids, G, gpu, &err);
    if (node != 0) {
        const bool ok = rc == 0 && gpu[0].data == NULL;
        if (!ok)
            printf("FAIL train_mlp node 1: rc %d (%s)\n", rc, err.message);
        return ok ? 0 : 1;
    }
    kl_tensor fx = {KL_F32, 2, {MLP_N, MLP_D}, x}, fy = {KL_I32, 1, {MLP_N}, y};
    kl_args c = mlp_args(&fx, &fy, 2 * G);
    kl_err e2;
    memset(&e2, 0, sizeof e2);
    int rc_cpu = kl_run_cpu(&c, cpu, &e2);
    int bad = rc != 0 || rc_cpu != 0;
    double worst = 0;
    for (int t = 0; !bad && t < 4; t++)
        for (int64_t i = 0; i < kl_tensor_elems(&cpu[t]); i++) {
            const double g = ((float *)gpu[t].data)[i], r = ((float *)cpu[t].data)[i];
            worst = fabs(g - r) > worst ? fabs(g - r) : worst;
            bad += !(fabs(g - r) <= 1e-4 + 1e-3 * fabs(r));
        }
    const double acc_g = bad ? 0 : ((float *)gpu[KL_MLP_OUT_ACC].data)[0];
    const double acc_c = bad ? 0 : ((float *)cpu[KL_MLP_OUT_ACC].data)[0];
    bad += fabs(acc_g - acc_c) > 2.0 / MLP_N;
    printf("%s train_mlp 2 processes x %d GPUs vs CPU %d ranks: rc %d/%d, max |dw| %.2g, accuracy %.4f/%.4f %s\n",
           bad ? "FAIL" : "PASS", G, 2 * G, rc, rc_cpu, worst, acc_g, acc_c, err.message);
    for (int t = 0; t < 6; t++) {
        if (rc == 0)
            kl_tensor_free(&gpu[t]);
        if (rc_cpu == 0)
            kl_tensor_free(&cpu[t]);
    }
    return bad ? 1 : 0;
}

/* One node: `node` of 2, with GPUs node*G .. node*G+G-1. Exit 0 on PASS,
 * 1 on FAIL, 77 when skipped. */
static int node_main(int node, const char *dir, int timeout_ms, int expect_timeout)
{
    static char name[32];
    snprintf(name, sizeof name, "check_dist[node %d]", node);
    check_name = name;
    int rc = open_plugin();
    if (rc != 0)
        return rc;
    if (plugin.ngpus < 2 && !expect_timeout) {
        if (node == 0)
            printf("SKIP multi-process NCCL: this box has %d GPU (2 needed, one per node)\n", plugin.ngpus);
        return 77;
    }
    /* Alone, node 0 needs only GPUs of its own: one will do. */
    int G = plugin.ngpus / 2 > 4 ? 4 : plugin.ngpus / 2;
    G = G < 1 ? 1 : G;
    int ids[4];
    for (int i = 0; i < G; i++)
        ids[i] = node * G + i;
    kl_store store = {(void *)dir, kl_test_fstore_set, kl_test_fstore_get};
    kl_dist dist;
    memset(&dist, 0, sizeof dist);
    dist.nodes = 2;
    dist.node_rank = node;
    dist.local_ranks = G;
    dist.store = &store;
    dist.host = "127.0.0.1";
    dist.timeout_ms = timeout_ms;
    kl_args a = allreduce_args(G);
    a.dist = &dist;
    kl_tensor out[4];
    kl_err err;
    memset(&err, 0, sizeof err);
    const double t0 = now_s();
    rc = plugin.run(&a, ids, G, out, &err);
    const double took = now_s() - t0;
    bool ok;
    if (expect_timeout) {
        ok = rc == KL_ETIMEDOUT && took < timeout_ms * 1e-3 + 30;
        printf("%s node 0 alone gives up: rc %d after %.1f s (%s)\n", ok ? "PASS" : "FAIL", rc, took, err.message);
    } else if (node == 0) {
        ok = rc == 0 && ((const int32_t *)out[3].data)[0] == 0;
        printf("%s 2 processes x %d GPUs all-reduce 64 MiB: rc %d, wrong %d, busbw %.1f GB/s %s\n",
               ok ? "PASS" : "FAIL", G, rc, rc == 0 ? ((const int32_t *)out[3].data)[0] : -1,
               rc == 0 ? ((const double *)out[2].data)[0] : 0.0, err.message);
    } else {
        ok = rc == 0 && out[0].data == NULL && out[3].data == NULL;
        if (!ok)
            printf("FAIL node 1: rc %d, outputs %s (%s)\n", rc, out[0].data ? "returned" : "none", err.message);
    }
    if (rc == 0)
        for (int i = 0; i < 4; i++)
            kl_tensor_free(&out[i]);
    if (!ok || expect_timeout)
        return ok ? 0 : 1;
    /* The same two nodes, a second world: its own store keys. */
    char sub[600];
    snprintf(sub, sizeof sub, "%s/mlp", dir);
    mkdir(sub, 0700);
    store.ctx = sub;
    return mlp_node(node, G, ids, &dist);
}

/* Starts this program as node `node`; returns its pid. */
static pid_t spawn(const char *self, int node, const char *dir, const char *timeout_ms, const char *mode)
{
    pid_t pid = fork();
    if (pid == 0) {
        char n[8];
        snprintf(n, sizeof n, "%d", node);
        execl(self, self, "--node", n, dir, timeout_ms, mode, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static int wait_status(pid_t pid)
{
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

static int fresh_dir(char *dir, size_t len)
{
    snprintf(dir, len, "/tmp/kl-check-dist-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 6 && strcmp(argv[1], "--node") == 0)
        return node_main(atoi(argv[2]), argv[3], atoi(argv[4]), strcmp(argv[5], "alone") == 0);
    check_begin("check_dist", argc, argv);
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return 1;
    self[n] = '\0';
    char dir[64];
    if (fresh_dir(dir, sizeof dir) < 0)
        return 1;
    /* Both nodes at once. */
    pid_t p0 = spawn(self, 0, dir, "60000", "pair"), p1 = spawn(self, 1, dir, "60000", "pair");
    const int s0 = wait_status(p0), s1 = wait_status(p1);
    const int pair_skipped = s0 == 77 && s1 == 77;
    failures += !pair_skipped && s0 != 0;
    failures += !pair_skipped && s1 != 0;
    /* Node 1 never comes (a fresh store: its id is not there either). */
    if (fresh_dir(dir, sizeof dir) < 0)
        return 1;
    const int alone = wait_status(spawn(self, 0, dir, "5000", "alone"));
    if (alone == 77 && pair_skipped)
        return check_skip("no CUDA device");
    failures += alone != 0;
    if (pair_skipped)
        printf("(the two-node all-reduce and train_mlp were skipped: fewer than 2 GPUs)\n");
    return check_end();
}
