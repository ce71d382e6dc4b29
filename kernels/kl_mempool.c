/* kl_mempool.c — the memory pool policy of kl_mempool.h. */
#include "kl_mempool.h"

#include "kl.h"

#include <stdio.h>

uint64_t kl_mempool_threshold(uint64_t total)
{
    return total / 2;
}

int kl_mempool_setup(int ndev, const kl_mempool_ops *ops, char *note, size_t len)
{
    size_t used = 0;
    if (note && len)
        note[0] = '\0';
    for (int d = 0; d < ndev; d++) {
        int s = ops->supported(ops->ctx, d);
        if (s <= 0) {
            if (note)
                snprintf(note, len, s == 0 ? "GPU %d has no stream-ordered memory pools (cudaMallocAsync), "
                                             "which every kernel allocates from"
                                           : "GPU %d: cannot tell whether it has memory pools", d);
            return s == 0 ? KL_ENOTSUP : KL_EBACKEND;
        }
        const uint64_t keep = kl_mempool_threshold(ops->total(ops->ctx, d));
        if (ops->set_threshold(ops->ctx, d, keep) < 0) {
            if (note)
                snprintf(note, len, "GPU %d: cannot set its memory pool's release threshold", d);
            return KL_EBACKEND;
        }
        if (note && used < len) {
            int w = snprintf(note + used, len - used, "%spool keeps %.1f GiB on GPU %d", d ? ", " : "",
                             (double)keep / 1073741824.0, d);
            used += w > 0 ? (size_t)w : 0;
        }
    }
    return 0;
}
