/* bench_montecarlo.c — CPU figures of montecarlo_option: path-steps per
 * second through kl_run_cpu, on every core and on one, for a European
 * option in one step (each path-step is then a whole path: draw, two exps,
 * payoff) and European and Asian options over 256 steps. A path-step is one
 * antithetic pair advanced by one time step (two price paths). Medians of
 * 3 runs after a warm-up; prints figures, never judges. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kl.h"
#include "kl_kernels.h"
#include "bench_common.h"

static void bench(kl_mc_style style, double paths, double steps, int threads)
{
    kl_args a;
    memset(&a, 0, sizeof a);
    a.kernel = kl_kernel_find("montecarlo_option");
    a.params[KL_MC_STYLE] = (kl_value){.choice = style, .given = 1};
    const double nums[] = {100, 100, 0.05, 0.2, 1, paths, steps, 1};
    for (int i = 0; i < 8; i++)
        a.params[KL_MC_S0 + i] = (kl_value){.num = nums[i], .given = 1};
    kl_args_defaults(&a);
    a.threads = threads;
    double t[4];
    float price = 0;
    for (int i = 0; i < 4; i++) {
        kl_tensor out[2];
        kl_err err;
        double t0 = now_s();
        if (kl_run_cpu(&a, out, &err) < 0) {
            fprintf(stderr, "montecarlo_option failed: %s\n", err.message);
            exit(1);
        }
        t[i] = now_s() - t0;
        price = ((float *)out[0].data)[0];
        kl_tensor_free(&out[0]);
        kl_tensor_free(&out[1]);
    }
    qsort(t + 1, 3, sizeof t[0], cmp_double); /* t[0] was the warm-up */
    printf("montecarlo cpu %-8s call paths=%-8.0f steps=%-4.0f threads=%-3d %8.1f ms  %.3g path-steps/s  "
           "(price %.4f)\n",
           style == KL_MC_ASIAN ? "asian" : "european", paths, steps, threads, t[2] * 1e3, paths * steps / t[2],
           price);
}

int main(void)
{
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    for (int threads = cores; threads >= 1; threads = threads > 1 ? 1 : 0) {
        double scale = (double)threads / cores; /* the same time per run on one core */
        bench(KL_MC_EUROPEAN, 2e6 * scale, 1, threads);
        bench(KL_MC_EUROPEAN, 4e4 * scale, 256, threads);
        bench(KL_MC_ASIAN, 4e4 * scale, 256, threads);
    }
    return 0;
}
