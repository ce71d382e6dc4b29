/* check_fault.cu — a sticky CUDA error as the plugin sees it. First which
 * runtime errors count as sticky (kl__cuda_sticky); then a run that works,
 * then a kernel of this checker's own that writes to an address nobody
 * allocated, which loses the context (cudaErrorIllegalAddress); then a run
 * through the plugin must answer KL_EDEVICE naming the error, and every
 * later run KL_EDEVICE at once, without touching the device again: what
 * the node takes itself out of service on (kl_plugin.h). The process is
 * spent afterwards, so this checker runs on its own and never under
 * compute-sanitizer (which would report the planted fault).
 * Built and run by tests/gpu/run.sh (check_common.h: the summary line and
 * exit status). */
#include "kl_cuda.h"
#include "kl_plugin.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check_common.h"

static void report(bool ok, const char *label)
{
    printf("%s %s\n", ok ? "PASS" : "FAIL", label);
    failures += !ok;
}

__global__ void poison(int *p)
{
    *p = 1;
}

static int run_saxpy(kl_err *err)
{
    static float x[1000], y[1000];
    kl_tensor tx = {KL_F32, 1, {1000}, x}, ty = {KL_F32, 1, {1000}, y};
    kl_args a = kernel_args("saxpy");
    a.params[KL_SAXPY_A] = kl_value{2, 0, 1};
    a.inputs[KL_SAXPY_X] = &tx;
    a.inputs[KL_SAXPY_Y] = &ty;
    kl_tensor out[1];
    memset(err, 0, sizeof *err);
    int rc = check_run(&a, 1, out, err);
    if (rc == 0)
        kl_tensor_free(&out[0]);
    return rc;
}

int main(int argc, char **argv)
{
    check_begin("check_fault", argc, argv);
    int rc = open_plugin();
    if (rc != 0)
        return rc;

    const cudaError_t sticky[] = {cudaErrorIllegalAddress,    cudaErrorMisalignedAddress, cudaErrorLaunchFailure,
                                  cudaErrorIllegalInstruction, cudaErrorHardwareStackError, cudaErrorECCUncorrectable,
                                  cudaErrorInvalidPc,          cudaErrorAssert};
    const cudaError_t not_sticky[] = {cudaSuccess, cudaErrorNotReady, cudaErrorMemoryAllocation, cudaErrorInvalidValue,
                                      cudaErrorLaunchOutOfResources};
    bool cls = true;
    for (cudaError_t e : sticky)
        cls = cls && kl__cuda_sticky(e);
    for (cudaError_t e : not_sticky)
        cls = cls && !kl__cuda_sticky(e);
    report(cls, "sticky errors told from the others (illegal address, ECC, ... vs out of memory, ...)");

    kl_err err;
    rc = run_saxpy(&err);
    report(rc == 0, "a run before the fault works");

    poison<<<1, 1>>>((int *)(uintptr_t)0x10);
    cudaError_t e = cudaDeviceSynchronize();
    printf("planted fault: %s (%s)\n", cudaGetErrorName(e), cudaGetErrorString(e));
    report(e == cudaErrorIllegalAddress, "a write to address 0x10 loses the context (cudaErrorIllegalAddress)");

    rc = run_saxpy(&err);
    printf("first run after it: rc %d: %s\n", rc, err.message);
    report(rc == KL_EDEVICE && strstr(err.message, "cudaErrorIllegalAddress") &&
               strstr(err.message, "until the process restarts"),
           "the next run answers KL_EDEVICE naming the error");
    const double t0 = now_s();
    rc = run_saxpy(&err);
    const double took = now_s() - t0;
    report(rc == KL_EDEVICE && strstr(err.message, "cudaErrorIllegalAddress") && took < 0.01,
           "every run after it answers KL_EDEVICE at once");
    return check_end();
}
