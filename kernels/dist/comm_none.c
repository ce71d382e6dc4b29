/* comm_none.c — kl_comm in a build without a collective library (no
 * libgloo-dev where it was built): a multi-node run says why it cannot run
 * here, and nothing else changes. The Makefile builds this file or gloo.cc. */
#include "kl_comm.h"

#include <stddef.h>

int kl_comm_available(void)
{
    return 0;
}

int kl_comm_open(const kl_dist *dist, int rank, const char *prefix, volatile int *cancel, kl_comm **out,
                 kl_err *err)
{
    (void)dist, (void)rank, (void)prefix, (void)cancel;
    *out = NULL;
    kl_err_set(err, NULL, "this node was built without Gloo (libgloo-dev): it cannot run one rank of a "
                          "multi-node job on CPUs");
    return KL_ENOTSUP;
}

/* No communicator can exist in this build; these are never reached with
 * one, and take NULL as the real ones do. */
int kl_comm_rank(const kl_comm *c)
{
    (void)c;
    return 0;
}

int kl_comm_size(const kl_comm *c)
{
    (void)c;
    return 1;
}

int kl_comm_allreduce(kl_comm *c, void *buf, int64_t count, kl_dtype dtype, kl_allreduce_op op, kl_err *err)
{
    (void)c, (void)buf, (void)count, (void)dtype, (void)op;
    kl_err_set(err, NULL, "this node was built without Gloo");
    return KL_ENOTSUP;
}

int kl_comm_broadcast(kl_comm *c, void *buf, int64_t count, kl_dtype dtype, int root, kl_err *err)
{
    (void)c, (void)buf, (void)count, (void)dtype, (void)root;
    kl_err_set(err, NULL, "this node was built without Gloo");
    return KL_ENOTSUP;
}

int kl_comm_barrier(kl_comm *c, kl_err *err)
{
    (void)c;
    kl_err_set(err, NULL, "this node was built without Gloo");
    return KL_ENOTSUP;
}

void kl_comm_abort(kl_comm *c)
{
    (void)c;
}

void kl_comm_close(kl_comm *c)
{
    (void)c;
}
