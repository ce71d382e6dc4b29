/* blobio.h — the node's data path. A run's inputs given as blob references
 * are fetched, in parallel, straight into the buffers its kernel will read
 * (through the input cache; size and SHA-256 checked); with "output_blobs"
 * its outputs are pushed back as raw bytes and only their ids kept. Bytes
 * never become text here. The transport is a small interface (cn_blobio) so
 * that tests can stand in for the gateway; cn_blobio_gateway is the real one. */
#ifndef CN_BLOBIO_H
#define CN_BLOBIO_H

#include <stddef.h>
#include <stdint.h>

#include "blobcache.h"
#include "kl.h"
#include "svc_client.h"
#include "svc_kargs.h"

#define CN_BLOB_ID_SIZE 72  /* "sha256:" + 64 hex + NUL, rounded up */

enum {
    CN_BLOBIO_EFAIL = -1,      /* unreachable, unknown blob, refused: msg says */
    CN_BLOBIO_ESIZE = -2,      /* the blob is not size bytes long */
    CN_BLOBIO_ECANCELED = -3,  /* *cancel was raised */
};

typedef struct cn_blobio {
    /* Streams blob id into buf (size bytes, the caller's), passing each piece
     * to on_chunk(chunk_cls, ...) as it is stored. Returns 0 with *got ==
     * size; CN_BLOBIO_ESIZE with *got the blob's size (-1: more than size,
     * how much unknown); CN_BLOBIO_ECANCELED; CN_BLOBIO_EFAIL with msg. */
    int (*fetch)(void *cls, const char *id, void *buf, size_t size, svc_chunk_fn on_chunk,
                 void *chunk_cls, const volatile int *cancel, int64_t *got, char *msg,
                 size_t msglen);
    /* Uploads the n bytes at data (borrowed, read in place). Returns 0 with
     * the blob's id written to id, CN_BLOBIO_ECANCELED, or CN_BLOBIO_EFAIL
     * with msg. */
    int (*push)(void *cls, const void *data, size_t n, const volatile int *cancel,
                char id[CN_BLOB_ID_SIZE], char *msg, size_t msglen);
    void *cls;
} cn_blobio;

/* The gateway the node registers with, as a blob transport:
 * GET {url}/v1/cluster/blobs/{id} and POST {url}/v1/cluster/blobs with the
 * cluster token. */
typedef struct cn_blobio_gateway {
    const char *url;    /* borrowed: the gateway's base URL */
    const char *token;  /* borrowed: the cluster token */
    long stall_ms;      /* a transfer silent this long fails; <= 0: 30 s */
} cn_blobio_gateway;

/* Fills io with the HTTP transport over gw, which io borrows: gw must
 * outlive every use of io. */
void cn_blobio_gateway_init(cn_blobio *io, cn_blobio_gateway *gw);

/* Fetches every input of ka that is a blob reference (data NULL, blob set)
 * into a new buffer of exactly its nbytes, owned by ka from then on (freed
 * by svc_kargs_free), and points the kernel's view at it. Blobs come from
 * cache (may be NULL) when it has them, else from io, one thread per input,
 * and a verified fetch is offered to the cache. Returns 0; KL_EINVAL when a
 * blob's size is not what its shape needs (err names inputs.<name> and both
 * sizes); KL_EBACKEND when a fetch fails or the bytes do not hash to their
 * id (the gateway retries those); KL_ECANCELED once *cancel is raised, which
 * stops the other fetches too. On failure no input buffer is kept. */
int cn_blobio_fetch_inputs(const cn_blobio *io, cn_blobcache *cache, svc_kargs *ka,
                           const volatile int *cancel, kl_err *err);

/* Pushes each of the k->noutputs tensors of outs of at least min_bytes
 * through io (a few tries each), writes their ids to ids[i] and frees each
 * output's data once it is pushed (dtype and shape stay; smaller outputs
 * keep their data and an empty id: they travel inline with the run's
 * report). Returns 0, KL_EBACKEND with err, or KL_ECANCELED; on failure
 * outputs not pushed yet keep their data. */
int cn_blobio_push_outputs(const cn_blobio *io, const kl_kernel *k, kl_tensor *outs,
                           char ids[][CN_BLOB_ID_SIZE], size_t min_bytes,
                           const volatile int *cancel, kl_err *err);

#endif
