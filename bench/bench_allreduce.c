/* bench_allreduce.c — CPU figures of the allreduce kernel: one thread per
 * rank over shared memory, float32 sum, for 2 and 4 ranks and a few sizes
 * per rank. The kernel times itself as nccl-tests does (mean over `iters`
 * after an untimed, checked pass); this prints its time_us, algbw and busbw
 * (= algbw * 2(n-1)/n) and the wrong count, and never judges. With fewer
 * cores than ranks the threads share cores: read busbw with that in mind.
 * Usage: bench_allreduce [iters=20] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kl.h"
#include "kl_kernels.h"

static void run(int ranks, int64_t bytes_per_rank, int iters)
{
    kl_args a;
    memset(&a, 0, sizeof a);
    a.kernel = kl_kernel_find("allreduce");
    a.params[KL_ALLREDUCE_COUNT] = (kl_value){.num = (double)(bytes_per_rank / 4), .given = 1};
    a.params[KL_ALLREDUCE_DTYPE] = (kl_value){.choice = 0, .given = 1};
    a.params[KL_ALLREDUCE_OP] = (kl_value){.choice = KL_ALLREDUCE_SUM, .given = 1};
    a.params[KL_ALLREDUCE_ITERS] = (kl_value){.num = iters, .given = 1};
    a.ranks = ranks;
    kl_tensor out[4];
    kl_err err;
    if (kl_run_cpu(&a, out, &err) < 0) {
        fprintf(stderr, "allreduce failed: %s\n", err.message);
        exit(1);
    }
    printf("allreduce cpu float32 sum  ranks %d  %6.1f MiB/rank  time %9.1f us  algbw %6.2f GB/s  "
           "busbw %6.2f GB/s  wrong %d\n",
           ranks, (double)bytes_per_rank / (1 << 20), ((double *)out[0].data)[0], ((double *)out[1].data)[0],
           ((double *)out[2].data)[0], ((int32_t *)out[3].data)[0]);
    for (int i = 0; i < 4; i++)
        kl_tensor_free(&out[i]);
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 20;
    if (iters < 1 || iters > 1000) {
        fprintf(stderr, "usage: bench_allreduce [iters 1..1000]\n");
        return 2;
    }
    printf("allreduce (CPU threads as ranks, %ld cores online, %d timed iterations)\n",
           sysconf(_SC_NPROCESSORS_ONLN), iters);
    const int64_t sizes[] = {(int64_t)1 << 20, (int64_t)8 << 20, (int64_t)64 << 20};
    for (int ranks = 2; ranks <= 4; ranks += 2)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            run(ranks, sizes[s], iters);
    return 0;
}
