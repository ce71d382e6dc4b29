/* fault.cu — sticky CUDA errors. After an illegal address, a misaligned
 * access, an ECC error and the like, the context of the device is lost for
 * the rest of the process: every later call answers the same error, and
 * "to continue using CUDA, the process must be terminated and relaunched"
 * (driver_types.h). The plugin recognises them, fails the run that saw one
 * with KL_EDEVICE, and from then on answers every run KL_EDEVICE at once,
 * so that the node can take itself out of service instead of burning the
 * attempts of every job it is given (kl_plugin.h). */
#include "kl_cuda.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t dead_mu = PTHREAD_MUTEX_INITIALIZER;
static int dead;
static char dead_why[sizeof(((kl_err *)0)->message)];

int kl__cuda_sticky(cudaError_t e)
{
    switch (e) {
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContained:
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorMpsClientTerminated:
    case cudaErrorExternalDevice:
        return 1;
    default:
        return 0;
    }
}

/* Records the first sticky error's description; later ones keep it. */
static void mark_dead(const char *why)
{
    pthread_mutex_lock(&dead_mu);
    if (!dead) {
        snprintf(dead_why, sizeof dead_why, "%s", why);
        __atomic_store_n(&dead, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&dead_mu);
}

int kl__cuda_dead(char *why, size_t len)
{
    if (!__atomic_load_n(&dead, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&dead_mu);
    if (why && len)
        snprintf(why, len, "%s", dead_why);
    pthread_mutex_unlock(&dead_mu);
    return 1;
}

/* "sticky CUDA error cudaErrorIllegalAddress (an illegal memory access was
 * encountered) at saxpy.cu:55 cudaStreamQuery; the device is lost until the
 * process restarts". */
static int device_lost(kl_err *err, const char *where, cudaError_t e)
{
    char why[sizeof dead_why];
    int dev = -1;
    (void)cudaGetDevice(&dev); /* answers from the runtime's own state */
    snprintf(why, sizeof why, "GPU %d: sticky CUDA error %s (%s)%s%s; the device is lost until the process restarts",
             dev, cudaGetErrorName(e), cudaGetErrorString(e), where ? " at " : "", where ? where : "");
    mark_dead(why);
    kl_err_set(err, NULL, "%s", why);
    return KL_EDEVICE;
}

int kl__cuda_fail_rt(kl_err *err, const char *file, int line, const char *call, cudaError_t e)
{
    if (kl__cuda_sticky(e)) {
        const char *base = strrchr(file, '/');
        char where[160];
        snprintf(where, sizeof where, "%s:%d %s", base ? base + 1 : file, line, call);
        return device_lost(err, where, e);
    }
    return kl__cuda_fail(err, file, line, call, cudaGetErrorString(e));
}

int kl__cuda_probe(int rc, kl_err *err)
{
    if (rc != KL_EBACKEND)
        return rc;
    /* A query of the thread's own stream costs nothing and waits for
     * nothing, yet answers the context's sticky error. */
    cudaError_t e = cudaStreamQuery(cudaStreamPerThread);
    if (!kl__cuda_sticky(e)) {
        (void)cudaGetLastError();
        return rc;
    }
    char was[sizeof err->message];
    snprintf(was, sizeof was, "%s", err ? err->message : "");
    return device_lost(err, was[0] ? was : NULL, e);
}
