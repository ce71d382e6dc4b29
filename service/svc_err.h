/* svc_err.h — the one error space of Kowloon's C code (service/, kernels/,
 * compute/). A function returns 0 (or a count) or a negative code: -errno
 * wherever an errno says it (kernels' KL_E*, kl.h, and the node's CN_E*
 * are named errno values), and, where none does, a code past the errno
 * range in a block of its module's own. No two meanings share a value, and
 * svc_strerror names every code. Detail for the user (which field, why)
 * travels beside the code in the caller's message buffer, kl_err or (a
 * request's, in the gateway) gw_verr, never in the code. */
#ifndef SVC_ERR_H
#define SVC_ERR_H

/* Linux errno values are below this (MAX_ERRNO). */
#define SVC_ERRNO_MAX 4095
/* The first code of block n: -(4096 + 64 n) - 1 down to -(4096 + 64 n) - 63.
 * Blocks: 0 svc_npy (SVC_NPY_E*, svc_npy.h), 1 the node's tasks (below). */
#define SVC_E_BLOCK(n) (-(SVC_ERRNO_MAX + 1) - 64 * (n))
#define SVC_E_BLOCK_NPY 0
#define SVC_E_BLOCK_TASK 1

/* The node's task runner (compute/task*.c): a part failed for a reason of
 * its own (its result says which), and out/ held more than its quota. */
#define SVC_E_TASK_FAILED (SVC_E_BLOCK(SVC_E_BLOCK_TASK) - 1)
#define SVC_E_TASK_QUOTA (SVC_E_BLOCK(SVC_E_BLOCK_TASK) - 2)

/* A static sentence for code: strerror(-code) for an errno value, the
 * module's own sentence past the errno range, "ok" for 0 and above. */
const char *svc_strerror(int code);

#endif
