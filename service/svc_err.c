/* svc_err.c — names the codes of the one error space (svc_err.h). */
#include "svc_err.h"

#include <string.h>

#include "svc_npy.h"

const char *svc_strerror(int code)
{
    if (code >= 0)
        return "ok";
    if (code >= -SVC_ERRNO_MAX)
        return strerror(-code);
    int block = (-code - (SVC_ERRNO_MAX + 1)) / 64;
    if (block == SVC_E_BLOCK_NPY)
        return svc_npy_strerror(code);
    if (code == SVC_E_TASK_FAILED)
        return "the task part failed (its result says why)";
    if (code == SVC_E_TASK_QUOTA)
        return "the task's outputs are over their quota";
    return "unknown error";
}
