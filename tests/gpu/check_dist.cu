/* check_dist.cu — the plugin's all-reduce across nodes: two processes on
 * this box, each a "node" with its own GPUs (half of them each), meeting
 * through a rendezvous store kept in files of a temporary folder (what the
 * gateway's rendezvous is to real nodes): node 0's NCCL id goes through it,
 * every rank joins with ncclCommInitRankConfig, and the sum over the world
 * must be exact (wrong = 0, reported by node 0 only; node 1 returns no
 * outputs). Then node 1 never comes: node 0 must give up with KL_ETIMEDOUT
 * after its timeout, not hang. Skipped, saying why, with fewer than 2 GPUs.
 * The parent never touches CUDA: it starts itself twice (exec), as nodes. */
#include "kl_cuda.h"
#include "kl_allreduce.h"
#include "kl_plugin.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check_common.h"

/* ---- a kl_store over files: set writes <dir>/<key> atomically (rename),
 * get polls for it ---- */

static int file_set(void *ctx, const char *key, const void *data, size_t len)
{
    char path[512], tmp[600];
    snprintf(path, sizeof path, "%s/%s", (const char *)ctx, key);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return KL_EBACKEND;
    const int ok = fwrite(data, 1, len, f) == len;
    if (fclose(f) != 0 || !ok || rename(tmp, path) != 0)
        return KL_EBACKEND;
    return 0;
}

static int file_get(void *ctx, const char *key, void **data, size_t *len, int timeout_ms)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", (const char *)ctx, key);
    const struct timespec tick = {0, 10 * 1000 * 1000};
    for (int waited = 0;; waited += 10) {
        FILE *f = fopen(path, "rb");
        if (f) {
            char buf[4096];
            size_t n = fread(buf, 1, sizeof buf, f);
            fclose(f);
            *data = malloc(n ? n : 1);
            memcpy(*data, buf, n);
            *len = n;
            return 0;
        }
        if (waited >= timeout_ms)
            return KL_ETIMEDOUT;
        nanosleep(&tick, NULL);
    }
}

static kl_args allreduce_args(int ranks)
{
    kl_args a;
    memset(&a, 0, sizeof a);
    a.kernel = kl_kernel_find("allreduce");
    a.params[KL_ALLREDUCE_COUNT] = kl_value{(double)(1 << 24), 0, 1};
    a.params[KL_ALLREDUCE_DTYPE] = kl_value{0, 0, 1};
    a.params[KL_ALLREDUCE_OP] = kl_value{0, KL_ALLREDUCE_SUM, 1};
    a.params[KL_ALLREDUCE_ITERS] = kl_value{20, 0, 1};
    a.ranks = ranks;
    return a;
}

/* One node: `node` of 2, with GPUs node*G .. node*G+G-1. Exit 0 on PASS,
 * 1 on FAIL, 77 when skipped. */
static int node_main(int node, const char *dir, int timeout_ms, int expect_timeout)
{
    if (open_plugin() < 0)
        return 1;
    if (plugin.ngpus < 2) {
        if (node == 0)
            printf("SKIP multi-process NCCL: this box has %d GPU (2 needed, one per node)\n", plugin.ngpus);
        return 77;
    }
    const int G = plugin.ngpus / 2 > 4 ? 4 : plugin.ngpus / 2;
    int ids[4];
    for (int i = 0; i < G; i++)
        ids[i] = node * G + i;
    kl_store store = {(void *)dir, file_set, file_get};
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
    int rc = plugin.run(&a, ids, G, out, &err);
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
    return ok ? 0 : 1;
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
    if (s0 == 77 && s1 == 77)
        return 0;
    int bad = (s0 != 0) + (s1 != 0);
    /* Node 1 never comes (a fresh store: its id is not there either). */
    if (fresh_dir(dir, sizeof dir) < 0)
        return 1;
    bad += wait_status(spawn(self, 0, dir, "5000", "alone")) != 0;
    printf("%s\n", bad ? "FAIL check_dist" : "PASS check_dist");
    return bad ? 1 : 0;
}
