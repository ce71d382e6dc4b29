/* sleep.c — the sleep kernel: a pipeline test workload that holds a slot for
 * a given time and honours cancel within 50 ms. The CUDA plugin runs this
 * same host loop; there is no GPU work in it.
 *   params: seconds (number, 0..3600)
 *   inputs: none
 *   output: slept is (1) float32, the seconds actually slept */
#include "kl_cpu.h"

#include <errno.h>
#include <time.h>

#define SLICE_S 0.05

static const kl_param_spec params[] = {
    {.name = "seconds", .type = KL_PARAM_NUMBER, .required = 1, .min = 0, .max = 3600,
     .doc = "how long to sleep"},
};

static const kl_io_spec outputs[] = {
    {.name = "slept", .dtype = KL_F32, .ndim_min = 1, .ndim_max = 1, .shape_doc = "[1]", .max_elems = 1,
     .doc = "seconds actually slept"},
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int sleep_run_cpu(const kl_args *args, kl_tensor *outs, kl_err *err)
{
    double want = args->params[KL_SLEEP_SECONDS].num, start = now_s(), left;
    while ((left = want - (now_s() - start)) > 0) {
        if (kl__canceled(args)) {
            kl_err_set(err, NULL, "sleep: cancelled after %.3f s", now_s() - start);
            return KL_ECANCELED;
        }
        double d = left < SLICE_S ? left : SLICE_S;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(d * 1e9)};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
            ;
    }
    const int64_t one = 1;
    if (kl_tensor_alloc(&outs[0], KL_F32, 1, &one) < 0) {
        kl_err_set(err, NULL, "sleep: out of memory");
        return KL_ENOMEM;
    }
    ((float *)outs[0].data)[0] = (float)(now_s() - start);
    return 0;
}

const kl_kernel kl__sleep = {
    .name = "sleep",
    .doc = "sleeps for `seconds`, honouring cancel within 50 ms (a pipeline test kernel)",
    .params = params,
    .nparams = 1,
    .inputs = NULL,
    .ninputs = 0,
    .outputs = outputs,
    .noutputs = 1,
    .check = NULL,
    .run_cpu = sleep_run_cpu,
    /* Every part of a multi-node sleep sleeps alike: the pipeline test of
     * gangs (the cluster-scale bench's simulated nodes run it). */
    .max_nodes = 64,
};
