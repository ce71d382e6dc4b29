/* sleep.cu — the sleep kernel in the plugin: the host loop of cpu/sleep.c,
 * which honours cancel within 50 ms. There is no GPU work to do, and one
 * loop on both backends keeps their behaviour identical. */
#include "kl_cuda.h"

int kl__cuda_sleep(const kl_args *args, const int *devs, kl_tensor *outs, kl_err *err)
{
    (void)devs;
    return args->kernel->run_cpu(args, outs, err);
}
