/* kl_test_fstore.h — a kl_store that processes on one host share through a
 * folder: set writes <dir>/<key> whole (a temporary file, then rename), get
 * polls for it every 5 ms until timeout_ms. ctx is the folder's path. What
 * the two-process all-reduce checks use in place of the gateway's
 * rendezvous (tests/unit/kernels/test_kl_comm.c, tests/gpu/check_dist.cu).
 */
#ifndef KL_TEST_FSTORE_H
#define KL_TEST_FSTORE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kl.h"

static inline int kl_test_fstore_set(void *ctx, const char *key, const void *data, size_t len)
{
    char path[512], tmp[600];
    snprintf(path, sizeof path, "%s/%s", (const char *)ctx, key);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return KL_EBACKEND;
    const int ok = fwrite(data, 1, len, f) == len;
    if (fclose(f) != 0 || !ok || rename(tmp, path) != 0)
        return KL_EBACKEND;
    return 0;
}

static inline int kl_test_fstore_get(void *ctx, const char *key, void **data, size_t *len,
                                     int timeout_ms)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", (const char *)ctx, key);
    const struct timespec tick = {0, 5 * 1000 * 1000};
    for (int waited = 0;; waited += 5) {
        FILE *f = fopen(path, "rb");
        if (f) {
            char buf[4096];
            size_t n = fread(buf, 1, sizeof buf, f);
            fclose(f);
            *data = malloc(n ? n : 1);
            if (*data == NULL)
                return KL_ENOMEM;
            memcpy(*data, buf, n);
            *len = n;
            return 0;
        }
        if (waited >= timeout_ms)
            return KL_ETIMEDOUT;
        nanosleep(&tick, NULL);
    }
}

#endif
