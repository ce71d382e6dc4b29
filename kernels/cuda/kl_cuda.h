/* kl_cuda.h — internal to the CUDA plugin: the error macros every .cu file
 * uses, the cancel-aware wait, and the per-kernel entry points, which have
 * the signature of kl_kernel.run_cpu plus the devices to run on (rank r on
 * devs[r]; a single-device kernel on devs[0]). */
#ifndef KL_CUDA_H
#define KL_CUDA_H

#include "kl.h"
#include "kl_kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

/* The macros need `int rc`, `kl_err *err` and a `done:` label in scope:
 * the failing call, with file:line, goes to the user's error detail. */
#define KL_CUDA_CHECK(call)                                                                    \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            rc = kl__cuda_fail_rt(err, __FILE__, __LINE__, #call, e_);                         \
            goto done;                                                                         \
        }                                                                                      \
    } while (0)

#define KL_CUBLAS_CHECK(call)                                                                  \
    do {                                                                                       \
        cublasStatus_t s_ = (call);                                                            \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                     \
            rc = kl__cuda_fail(err, __FILE__, __LINE__, #call, cublasGetStatusString(s_));    \
            goto done;                                                                         \
        }                                                                                      \
    } while (0)

/* The same contract, for NCCL calls. */
#define KL_NCCL_CHECK(call)                                                                    \
    do {                                                                                       \
        ncclResult_t r_ = (call);                                                              \
        if (r_ != ncclSuccess) {                                                               \
            rc = kl__cuda_fail(err, __FILE__, __LINE__, #call, ncclGetErrorString(r_));       \
            goto done;                                                                         \
        }                                                                                      \
    } while (0)

/* Fills err with "file:line: call: reason" and returns KL_EBACKEND. */
int kl__cuda_fail(kl_err *err, const char *file, int line, const char *call, const char *reason);

/* ---- sticky errors (fault.cu) ---- */

/* 1 for the runtime errors after which the context is lost for the rest
 * of the process (illegal address, ECC, ...: "the process must be
 * terminated and relaunched"). */
int kl__cuda_sticky(cudaError_t e);
/* kl__cuda_fail for a runtime error: KL_EDEVICE (and the plugin is dead
 * from now on) when e is sticky, else KL_EBACKEND; err says which. */
int kl__cuda_fail_rt(kl_err *err, const char *file, int line, const char *call, cudaError_t e);
/* After a run failed through another library (cuBLAS, NCCL), which may
 * hide a sticky error behind its own status: asks the runtime. KL_EDEVICE
 * with err rewritten when the context is lost, else rc unchanged. */
int kl__cuda_probe(int rc, kl_err *err);
/* 1 once a sticky error was seen, with its description in why. */
int kl__cuda_dead(char *why, size_t len);

/* ---- streams, fences and host memory (hostmem.cu) ---- */

/* A run's scope, on the thread that runs it: streams closed with work
 * still queued (a cancel, a failure) leave a fence here, which end puts on
 * the run's host buffers (inputs and outputs) so that none is reused,
 * released or unregistered before that work is done. */
void kl__cuda_scope_begin(void);
void kl__cuda_scope_end(const kl_args *args, const kl_tensor *outs, int nouts);
/* Destroys a stream of device dev, fencing its unfinished work into the
 * run's scope. NULL is a no-op. */
void kl__cuda_stream_close(cudaStream_t s, int dev);
/* The pinned pool (kl_pinpool.h) behind the plugin's host_alloc: created
 * at open, freed at close. */
int kl__cuda_hostmem_open(char *note, size_t len);
void kl__cuda_hostmem_close(void);
void *kl__cuda_host_alloc(size_t bytes);
void kl__cuda_host_free(void *p);
int kl__cuda_host_register(void *p, size_t bytes);
void kl__cuda_host_unregister(void *p);
struct kl_pinpool_stats;
void kl__cuda_hostmem_stats(struct kl_pinpool_stats *s);

/* ---- cuBLAS (blas.cu) ---- */

/* The calling thread's cuBLAS handle for device dev (kept until close:
 * cublasCreate costs and cublasDestroy synchronises the device), set to
 * stream s with a workspace of its own allocated on s, so that work a
 * cancelled run left on its stream never shares memory with the next
 * run's. end frees the workspace, stream-ordered. 0 or KL_EBACKEND. */
int kl__cuda_blas_begin(int dev, cudaStream_t s, cublasHandle_t *h, void **ws, kl_err *err);
void kl__cuda_blas_end(void *ws, cudaStream_t s);
int kl__cuda_blas_open(void);
void kl__cuda_blas_close(void);
/* Handles cached (for the checkers' memory figures). */
size_t kl__cuda_blas_handles(void);

static inline int kl__cuda_canceled(const kl_args *args)
{
    return args->cancel && __atomic_load_n(args->cancel, __ATOMIC_RELAXED);
}

/* Waits for `s` to drain, polling args->cancel. 0, KL_ECANCELED (the work
 * still runs to its end on the stream: free its memory stream-ordered), or
 * KL_EBACKEND with err filled. */
int kl__cuda_wait(cudaStream_t s, const kl_args *args, kl_err *err);

/* Stream-ordered free that skips NULL: a runtime call that fails, even on
 * NULL, is recorded as the thread's last error and would surface in the
 * next launch check, of another run. */
static inline void kl__cuda_free(void *p, cudaStream_t s)
{
    if (p)
        cudaFreeAsync(p, s);
}

/* One NCCL user at a time per process (plugin.cu): 0, or KL_ECANCELED when
 * the run was cancelled while waiting. */
int kl__cuda_nccl_turn_take(const kl_args *args, kl_err *err);
void kl__cuda_nccl_turn_give(void);

/* The communicators of R local ranks on devs[0..R) (nccl_comms.cu),
 * non-blocking: the whole world here, or with args->dist this node's ranks
 * of the world (global rank node_rank * R + r), met through
 * args->dist->store. 0, or KL_ETIMEDOUT (a rank never came: the dist
 * timeout, or 120 s on one node), KL_ECANCELED, KL_EBACKEND with err set
 * and nothing left open. */
int kl__cuda_comms_open(const kl_args *args, const int *devs, int R, ncclComm_t *comms, kl_err *err);
/* After a group of calls whose ncclGroupEnd returned `enqueued`: 0 once
 * NCCL has taken them (non-blocking communicators may answer
 * ncclInProgress first), else the failure with err set. */
int kl__cuda_comms_settle(const kl_args *args, ncclComm_t *comms, int R, ncclResult_t enqueued, kl_err *err);
/* Waits for every stream like kl__cuda_wait, and also fails on the
 * communicators' async errors (a peer lost) and after the timeout (see
 * kl__cuda_comms_open; comms[r] may be NULL for a run of one rank). The
 * caller then closes the communicators with abort set, which is what frees
 * streams stuck in a collective. */
int kl__cuda_comms_wait(const kl_args *args, ncclComm_t *comms, const cudaStream_t *streams, const int *devs, int R,
                        kl_err *err);
/* The same for one event (of the current device). */
int kl__cuda_comms_wait_event(const kl_args *args, ncclComm_t *comms, int R, cudaEvent_t ev, kl_err *err);
/* Ends the run's hold of its communicators and clears comms: aborts them
 * (abort set: the run failed or was cancelled), or keeps a whole world of
 * this node for the next run on the same devices (kl__cuda_comms_open
 * takes it), or destroys them (a multi-node world). */
void kl__cuda_comms_close(const kl_args *args, const int *devs, ncclComm_t *comms, int R, int abort);
/* Destroys the kept worlds (the plugin's close); how many are kept. */
void kl__cuda_comms_drop_kept(void);
int kl__cuda_comms_kept(void);

int kl__cuda_saxpy(const kl_args *args, const int *devs, kl_tensor *outs, kl_err *err);
int kl__cuda_reduce(const kl_args *args, const int *devs, kl_tensor *outs, kl_err *err);
int kl__cuda_gemm(const kl_args *args, const int *devs, kl_tensor *outs, kl_err *err);
int kl__cuda_sleep(const kl_args *args, const int *devs, kl_tensor *outs, kl_err *err);
int kl__cuda_allreduce(const kl_args *args, const int *devs, kl_tensor *outs, kl_err *err);
int kl__cuda_train_mlp(const kl_args *args, const int *devs, kl_tensor *outs, kl_err *err);
int kl__cuda_heat2d(const kl_args *args, const int *devs, kl_tensor *outs, kl_err *err);
int kl__cuda_kmeans(const kl_args *args, const int *devs, kl_tensor *outs, kl_err *err);
int kl__cuda_montecarlo_option(const kl_args *args, const int *devs, kl_tensor *outs, kl_err *err);

/* Device-resident building blocks, also used by tests/gpu to time the
 * kernels apart from the host transfers. */
/* *result = op over dx[0..n), n >= 1; synchronizes s. */
int kl__cuda_reduce_dev(const float *dx, int64_t n, kl_reduce_op op, cudaStream_t s, double *result,
                        kl_err *err);
/* heat2d: `steps` updates ping-ponging buf[0] (h,w) -> buf[1] -> ... (both must hold the grid, boundary
 * included), ending in buf[steps & 1]; *residual of the last step; polls args->cancel and reports the
 * steps done to args->progress (args may be NULL: neither). */
int kl__cuda_heat2d_dev(float *const buf[2], int h, int w, float alpha, int64_t steps, const kl_args *args,
                        cudaStream_t s, float *residual, kl_err *err);
/* Row-major dC (m,n) = alpha * dA (m,k) @ dB (k,n) + beta * dC, in FP32. */
cublasStatus_t kl__cuda_sgemm_rm(cublasHandle_t h, int m, int n, int k, float alpha, const float *dA,
                                 const float *dB, float beta, float *dC);
/* Row-major batched gemm in precision p on device data (see gemm.cu); bf16 takes dA, dB as bf16. */
cublasStatus_t kl__cuda_gemm_rm(cublasHandle_t h, kl_gemm_precision p, int64_t batch, int m, int n, int k,
                                float alpha, const void *dA, const void *dB, float beta, float *dC);
/* dst[0..n) = src rounded to bf16 (nearest even), queued on s. */
cudaError_t kl__cuda_f32_to_bf16(const float *src, void *dst, int64_t n, cudaStream_t s);

#endif
