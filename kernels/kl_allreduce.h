/* kl_allreduce.h — what the allreduce kernel's CPU reference (cpu/allreduce.c),
 * its CUDA version (cuda/allreduce.cu) and their tests share: the inputs each
 * rank makes, and the exact value every element must reduce to. Host and
 * device code, C and CUDA C++. */
#ifndef KL_ALLREDUCE_H
#define KL_ALLREDUCE_H

#include "kl_kernels.h"

/* The inputs repeat with this period in the element index, so the expected
 * result does too: a table of KL_ALLREDUCE_PERIOD values checks a buffer. */
#define KL_ALLREDUCE_PERIOD 17
/* Most ranks a run may have: past resources.gpus (16) for the CPU, where
 * ranks are threads, and well within what the inputs keep exact. */
#define KL_ALLREDUCE_MAX_RANKS 64
/* Elements of all ranks together: ranks * count (1 GiB of float32 data per
 * buffer; the CPU holds a send and a receive buffer per rank). */
#define KL_ALLREDUCE_MAX_TOTAL ((int64_t)1 << 28)

/* Element i of rank r's send buffer: a multiple of 1/4 in [-2, 2]. Sums of
 * up to 64 of them need at most 10 significant bits, so every partial sum,
 * in any order, is exact in float32: there is one right answer. */
static inline KL_HD double kl__allreduce_input(int64_t i, int rank)
{
    return (double)((i * 7 + (int64_t)rank * 13) % KL_ALLREDUCE_PERIOD - 8) * 0.25;
}

/* expected[j] = op over ranks of kl__allreduce_input(i, r), for every i with
 * i % KL_ALLREDUCE_PERIOD == j (i*7 mod 17 depends only on i mod 17). */
static inline void kl__allreduce_expected(kl_allreduce_op op, int ranks, double expected[KL_ALLREDUCE_PERIOD])
{
    for (int j = 0; j < KL_ALLREDUCE_PERIOD; j++) {
        double acc = kl__allreduce_input(j, 0);
        for (int r = 1; r < ranks; r++) {
            double v = kl__allreduce_input(j, r);
            acc = op == KL_ALLREDUCE_SUM ? acc + v : op == KL_ALLREDUCE_MAX ? (v > acc ? v : acc)
                                                                            : (v < acc ? v : acc);
        }
        expected[j] = acc;
    }
}

/* nccl-tests' figures for an all-reduce of `bytes` per rank over `ranks`
 * ranks in `seconds`: algbw = bytes / time, busbw = algbw * 2(n-1)/n, the
 * bandwidth each link must carry in a ring (0 for one rank: nothing moves
 * between ranks). Both in GB/s (1e9 bytes per second). */
static inline void kl__allreduce_bw(double bytes, int ranks, double seconds, double *algbw, double *busbw)
{
    *algbw = seconds > 0 ? bytes / seconds / 1e9 : 0;
    *busbw = *algbw * 2.0 * (ranks - 1) / ranks;
}

#endif
