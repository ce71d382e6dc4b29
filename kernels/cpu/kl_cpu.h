/* kl_cpu.h — internal helpers of the CPU kernels: how many threads a run
 * gets, a fork-join over pthreads, and the cancel poll. */
#ifndef KL_CPU_H
#define KL_CPU_H

#include "kl.h"
#include "kl_comm.h"
#include "kl_kernels.h"

/* Below this many elements a memory-bound kernel runs on one thread: the
 * cost of starting threads outweighs the bandwidth they add. */
#define KL_PAR_MIN_ELEMS ((int64_t)1 << 20)
/* Elements between two polls of the cancel flag (256 KiB of float32: well
 * under a millisecond, well over the cost of the poll). */
#define KL_CHUNK_ELEMS ((int64_t)1 << 16)

/* BLAS: gemm.c and mlp_math.c refer to cblas_sgemm weakly (#pragma weak)
 * and use their own loops where it is NULL. The node and the CUDA plugin
 * link OpenBLAS as before, so it is there; the gateway, which links this
 * library for the catalog and its checks but runs no kernel, links it
 * --as-needed and so loads neither OpenBLAS nor what comes with it: its
 * thread pool (a thread per core), and libquadmath, whose printf hook
 * sends every printf of the process down glibc's slow positional path
 * (+35 % a call; 1.3 % of the machine in the gateway's HTTP workers at
 * the scale bench's ceiling). */

/* `requested` <= 0 means every online core. */
int kl__threads(int requested);

/* Runs fn(ctx, i, n) for i in [0, n) on n threads, the caller's included,
 * and returns when all are done. A thread that cannot be started has its
 * share run on the caller, so the work is always done. */
void kl__parallel(int n, void (*fn)(void *ctx, int i, int n), void *ctx);

/* The run account (kl_cputime) of the calling thread, NULL outside a run.
 * A helper thread a kernel starts calls kl__cputime_enter with its
 * starter's account first, so that its CPU time (and that of helpers it
 * starts) counts for the run, and kl__cputime_leave last. */
kl_cputime *kl__cputime_current(void);
void kl__cputime_enter(kl_cputime *c);
void kl__cputime_leave(void);

/* Relaxed atomic loads and stores: the flag is raised by another thread and
 * only needs to be seen soon, not in any order with other memory. */
static inline int kl__canceled(const kl_args *args)
{
    return args->cancel && __atomic_load_n(args->cancel, __ATOMIC_RELAXED);
}

/* Makes a local rank's communicator c abortable by the run's other local
 * ranks (published in *slot, which their abort walks), and aborts it at
 * once when one of them failed while it was opening (*aborted, set before
 * that walk). Both sides sequentially consistent: one always sees the
 * other. For the multi-node kernels (allreduce, train_mlp). */
static inline void kl__comm_publish(kl_comm **slot, kl_comm *c, const int *aborted)
{
    __atomic_store_n(slot, c, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(aborted, __ATOMIC_SEQ_CST))
        kl_comm_abort(c);
}

/* A run's own stop flag, shared by its threads so one that sees the cancel
 * stops the others at their next chunk. */
static inline int kl__stop_seen(const kl_args *args, int *stop)
{
    if (__atomic_load_n(stop, __ATOMIC_RELAXED))
        return 1;
    if (!kl__canceled(args))
        return 0;
    __atomic_store_n(stop, 1, __ATOMIC_RELAXED);
    return 1;
}

#endif
