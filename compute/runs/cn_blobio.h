/* cn_blobio.h — the node's data path. A run's inputs given as blob references
 * are fetched, in parallel, straight into the buffers its kernel will read
 * (through the input cache; size and SHA-256 checked); with "output_blobs"
 * its outputs are pushed back as raw bytes and only their ids kept. Bytes
 * never become text here. The transport is a small interface (cn_blobio) so
 * that tests can stand in for the gateway; cn_blobio_gateway is the real one.
 * A node that shares the gateway's blob directory (--blob-dir) maps inputs
 * from it instead of fetching them, and writes outputs into it (then asks
 * the gateway to record them) instead of pushing them; either falls back to
 * HTTP when the directory does not have, or the gateway does not see, the
 * blob. */
#ifndef CN_BLOBIO_H
#define CN_BLOBIO_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "cn_blobcache.h"
#include "svc_bstore.h"
#include "kl.h"
#include "svc_client.h"
#include "svc_kargs.h"

#define CN_BLOB_ID_SIZE 72  /* "sha256:" + 64 hex + NUL, rounded up */

/* Negative errno values (the one error space, svc_err.h). */
enum {
    CN_BLOBIO_EFAIL = -EIO,           /* unreachable, unknown blob, refused: msg says */
    CN_BLOBIO_ESIZE = -EMSGSIZE,      /* the blob is not size bytes long */
    CN_BLOBIO_ECANCELED = -ECANCELED, /* *cancel was raised */
    CN_BLOBIO_ENOTSHARED = -ENOENT,   /* the gateway has no such file in its blob directory */
};

/* What went which way since the node started; updated atomically. */
typedef struct cn_blobio_stats {
    uint64_t mapped_inputs, mapped_bytes;     /* inputs mapped from the shared directory */
    uint64_t written_outputs, written_bytes;  /* outputs written into it */
    uint64_t pushed_outputs, pushed_bytes;    /* outputs pushed over HTTP */
} cn_blobio_stats;

typedef struct cn_blobio {
    /* Streams blob id into buf (size bytes, the caller's), passing each piece
     * to on_chunk(chunk_cls, ...) as it is stored. Returns 0 with *got ==
     * size; CN_BLOBIO_ESIZE with *got the blob's size (-1: more than size,
     * how much unknown); CN_BLOBIO_ECANCELED; CN_BLOBIO_EFAIL with msg. */
    int (*fetch)(void *cls, const char *id, void *buf, size_t size, svc_chunk_fn on_chunk,
                 void *chunk_cls, const volatile int *cancel, int64_t *got, char *msg,
                 size_t msglen);
    /* Streams size bytes of blob id from offset off into buf (an HTTP
     * Range). 0; CN_BLOBIO_ECANCELED; CN_BLOBIO_EFAIL with msg. NULL: the
     * transport fetches whole blobs only. */
    int (*fetch_range)(void *cls, const char *id, uint64_t off, void *buf, size_t size,
                       const volatile int *cancel, char *msg, size_t msglen);
    /* Uploads the n bytes at data (borrowed, read in place) as an output of
     * attempt of job_id (the gateway takes it for that run only). Returns 0
     * with the blob's id written to id, CN_BLOBIO_ECANCELED, or
     * CN_BLOBIO_EFAIL with msg. */
    int (*push)(void *cls, const char *job_id, int attempt, const void *data, size_t n,
                const volatile int *cancel, char id[CN_BLOB_ID_SIZE], char *msg, size_t msglen);
    /* Asks the gateway to record blob id, which this node wrote into the
     * shared directory, size bytes long, as an output of attempt of job_id.
     * 0; CN_BLOBIO_ENOTSHARED when the gateway has no such file (or one of
     * another size, or bytes that do not hash to id); CN_BLOBIO_EFAIL with
     * msg. */
    int (*adopt)(void *cls, const char *job_id, int attempt, const char *id, uint64_t size,
                 char *msg, size_t msglen);
    void *cls;
    /* The gateway's blob directory when this node shares it, or NULL: set
     * by cn_blobio_share_*, read atomically by runs. */
    svc_bstore *shared;
    svc_bstore *opened[4];     /* every store opened, closed by cn_blobio_share_close */
    int nopened;
    int share_told;            /* the sharing decision was logged once */
    cn_blobio_stats *stats;    /* may be NULL (borrowed) */
} cn_blobio;

/* How a node decides to share the gateway's blob directory (--blob-dir). */
typedef enum {
    CN_SHARE_AUTO = 0,  /* when this host sees the directory the gateway announces */
    CN_SHARE_NONE = 1,  /* never: everything over HTTP */
    CN_SHARE_PATH = 2,  /* this path, while it is the gateway's store */
} cn_share_mode;

/* For CN_SHARE_PATH at start: opens the store at dir (it must exist) and
 * shares it from now on. 0, or -1 with err filled. */
int cn_blobio_share_path(cn_blobio *io, const char *dir, char *err, size_t errlen);
/* After each registration, with the store the gateway announced (dir and
 * id, either NULL when it announced none): AUTO shares it when this host
 * sees that directory with that identity (else keeps to HTTP); PATH stops
 * sharing when the given directory is not that store. Logs what it
 * decides when that changes. Called from one thread. */
void cn_blobio_share_gateway(cn_blobio *io, cn_share_mode mode, const char *dir, const char *id);
/* The shared directory now, or NULL. */
const char *cn_blobio_shared_dir(const cn_blobio *io);
/* The shared store now, or NULL (a task mounts its inputs from it). */
svc_bstore *cn_blobio_shared(const cn_blobio *io);
/* Closes what cn_blobio_share_* opened; no run may be using io. */
void cn_blobio_share_close(cn_blobio *io);

/* Pins mapped inputs for the device (the CUDA plugin's host_register and
 * host_unregister); set once at start, before any run, on a GPU node. */
void cn_blobio_set_pinning(int (*pin)(void *p, size_t n), void (*unpin)(void *p));

/* The gateway the node registers with, as a blob transport:
 * GET {url}/v1/cluster/blobs/{id}, POST {url}/v1/cluster/blobs and
 * PUT {url}/v1/cluster/blobs/{id} (?job_id=&attempt= of the run whose
 * output it is) with the node's credential. */
typedef struct cn_blobio_gateway {
    const char *url;    /* borrowed: the gateway's cluster listener */
    const struct cn_cred *cred; /* borrowed: the node's credential (cn_cred.h) */
    long stall_ms;      /* a transfer silent this long fails; <= 0: 30 s */
} cn_blobio_gateway;

/* Fills io with the HTTP transport over gw, which io borrows: gw must
 * outlive every use of io. */
void cn_blobio_gateway_init(cn_blobio *io, cn_blobio_gateway *gw);

/* Fetches every input of ka that is a blob reference (data NULL, blob set)
 * into a new buffer of exactly its nbytes (kl_host_alloc: page-locked on a
 * GPU node), owned by ka from then on (freed by svc_kargs_free), and points
 * the kernel's view at it. With io->shared, a blob whose file is there is
 * mapped instead (MAP_PRIVATE: a kernel that writes its input changes only
 * its copy), not hashed again: a file under a real name is complete and
 * verified by its writer. Other blobs come from cache (may be NULL) when it
 * has them, else from io, one thread per input, and a verified fetch is
 * offered to the cache. Returns 0; KL_EINVAL when a
 * blob's size is not what its shape needs (err names inputs.<name> and both
 * sizes); KL_EBACKEND when a fetch fails or the bytes do not hash to their
 * id (the gateway retries those); KL_ECANCELED once *cancel is raised, which
 * stops the other fetches too. On failure no input buffer is kept. */
int cn_blobio_fetch_inputs(const cn_blobio *io, cn_blobcache *cache, svc_kargs *ka,
                           const volatile int *cancel, kl_err *err);
/* cn_blobio_fetch_inputs for one node's part of a multi-node job: the
 * inputs the catalog marks shard that cross HTTP come as rows [lo, hi) of
 * dim 0 only (io->fetch_range; the view's shape[0] becomes hi - lo, the
 * reference keeps the whole shape), neither hashed (a part cannot be) nor
 * cached; mapped ones stay whole (the run cuts them). lo < 0: as
 * cn_blobio_fetch_inputs. */
int cn_blobio_fetch_inputs_rows(const cn_blobio *io, cn_blobcache *cache, svc_kargs *ka,
                                int64_t lo, int64_t hi, const volatile int *cancel, kl_err *err);

/* Pushes each of the k->noutputs tensors of outs of at least min_bytes
 * through io (a few tries each), writes their ids to ids[i] and frees each
 * output's data once it is pushed (dtype and shape stay; smaller outputs
 * keep their data and an empty id: they travel inline with the run's
 * report). With io->shared each output is written into the shared
 * directory (hashed while written, fsynced, linked) and recorded with
 * io->adopt; when the gateway does not see the file, it is pushed. Returns
 * 0, KL_EBACKEND with err, or KL_ECANCELED; on failure outputs not pushed
 * yet keep their data. */
int cn_blobio_push_outputs(const cn_blobio *io, const char *job_id, int attempt,
                           const kl_kernel *k, kl_tensor *outs, char ids[][CN_BLOB_ID_SIZE],
                           size_t min_bytes, const volatile int *cancel, kl_err *err);

/* Pushes n buffers of the caller's (borrowed: read in place, never freed;
 * a task's output files, mapped) as cn_blobio_push_outputs pushes
 * outputs of run (job_id, attempt), and writes their ids to ids[i].
 * names[i] names each in errors ("outputs.<name>"). 0, KL_EBACKEND with
 * err, or KL_ECANCELED. */
int cn_blobio_push_buffers(const cn_blobio *io, const char *job_id, int attempt, int n,
                           const char *const *names,
                           const void *const *data, const size_t *sizes,
                           char ids[][CN_BLOB_ID_SIZE], const volatile int *cancel, kl_err *err);

#endif
