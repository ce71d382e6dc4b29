/* kl_comm.h — a communicator among the ranks of a multi-node run, for the
 * CPU kernels: one per global rank (a node's local ranks are threads, each
 * its own rank, as torch runs one process per rank). Built on Gloo's TCP
 * transport (dist/gloo.cc) where libgloo-dev was found, else every open is
 * KL_ENOTSUP (dist/comm_none.c). Ranks meet through the run's kl_store. */
#ifndef KL_COMM_H
#define KL_COMM_H

#include "kl.h"
#include "kl_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kl_comm kl_comm;

/* 1 when this build has a collective library (Gloo), else 0. */
int kl_comm_available(void);

/* Opens the communicator of global rank `rank` of the world
 * dist->nodes * dist->local_ranks: binds a TCP listener on dist->host,
 * publishes its address under "<prefix>_<rank>" in dist->store and connects
 * to every other rank, all within dist->timeout_ms. `cancel` (may be NULL)
 * is watched for the life of the communicator: once raised, an open or a
 * collective in progress or to come returns KL_ECANCELED within about half
 * a second. `prefix` keeps apart two worlds sharing one store (short, of
 * [A-Za-z0-9_.-]). 0 and *out (close it with kl_comm_close), or KL_EINVAL,
 * KL_ETIMEDOUT (a rank never came), KL_ECANCELED, KL_EBACKEND, KL_ENOTSUP
 * with err set. Every kl_comm call blocks SIGPIPE on the calling thread
 * (and open on the threads the communicator starts): a write to a socket a
 * dead peer has reset must fail the collective, not kill the process. */
int kl_comm_open(const kl_dist *dist, int rank, const char *prefix, volatile int *cancel, kl_comm **out,
                 kl_err *err);

int kl_comm_rank(const kl_comm *c);
int kl_comm_size(const kl_comm *c);

/* In place: buf (count elements of dtype) becomes op over every rank's buf.
 * Every rank calls the collectives in the same order. 0, or KL_ECANCELED
 * (aborted), KL_ETIMEDOUT (a peer did not answer within timeout_ms), or
 * KL_EBACKEND (a peer closed or failed); after a failure every further call
 * fails too, and the peers' calls fail at once rather than time out. */
int kl_comm_allreduce(kl_comm *c, void *buf, int64_t count, kl_dtype dtype, kl_allreduce_op op, kl_err *err);
/* buf of rank `root` is copied into every other rank's buf. */
int kl_comm_broadcast(kl_comm *c, void *buf, int64_t count, kl_dtype dtype, int root, kl_err *err);
int kl_comm_barrier(kl_comm *c, kl_err *err);

/* From any thread: fails what c is doing and will do with KL_ECANCELED and
 * closes its connections, so the peers fail too. NULL is a no-op. */
void kl_comm_abort(kl_comm *c);

/* Closes the connections (a peer still in a collective with this rank
 * fails) and frees c. Not concurrent with other calls on c but abort.
 * NULL is a no-op. */
void kl_comm_close(kl_comm *c);

#ifdef __cplusplus
}
#endif
#endif
