/* blobfile.h — the node's cache of blobs as files, for tasks on a node
 * that does not share the gateway's blob directory: an input is fetched
 * once into <dir>/<hex> (size and SHA-256 checked) and every run that
 * names it mounts that same file read-only — never a copy per run. Files
 * in use are pinned; the least recently used unpinned ones go when the
 * cache passes its byte budget. The cache is the node's alone and is
 * emptied when it opens (a file left by a crash may be incomplete).
 * (cn_blobcache.c keeps input bytes in memory for kernels, which read them
 * there; a container can only be given a file.) Thread-safe. */
#ifndef CN_BLOBFILE_H
#define CN_BLOBFILE_H

#include <stddef.h>
#include <stdint.h>

#include "cn_blobio.h"
#include "kl.h"

typedef struct cn_blobfile cn_blobfile;

typedef struct cn_blobfile_stats {
    uint64_t budget_bytes, used_bytes, files;
    uint64_t hits, misses, fetched_bytes;
} cn_blobfile_stats;

/* Opens the cache directory dir (emptied; made by the first fetch) with a
 * budget of bytes. 0 and *out, or -errno. */
int cn_blobfile_open(const char *dir, uint64_t budget, cn_blobfile **out);
/* Frees c; no file may be pinned. NULL is a no-op. */
void cn_blobfile_close(cn_blobfile *c);

/* Makes blob id (size bytes) a verified file of the cache, fetching it
 * through io when it is not one yet (another run fetching it is waited
 * for), and pins it: path[0..pathlen) gets its path, which stays valid
 * until cn_blobfile_unpin. 0; KL_EINVAL with err (the blob has another
 * size); KL_EBACKEND with err (the fetch failed or the bytes do not hash
 * to id); KL_ECANCELED once *cancel rises. field names the blob in err. */
int cn_blobfile_get(cn_blobfile *c, const cn_blobio *io, const char *id, uint64_t size,
                    const char *field, const volatile int *cancel, char *path, size_t pathlen,
                    kl_err *err);

/* Releases one pin of id taken by cn_blobfile_get. */
void cn_blobfile_unpin(cn_blobfile *c, const char *id);

void cn_blobfile_stats_get(cn_blobfile *c, cn_blobfile_stats *out);

#endif
