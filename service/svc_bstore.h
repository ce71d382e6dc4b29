/* svc_bstore.h — the directory backend of the blob store: one file per blob
 * under <dir>/sha256/<2 hex>/<64 hex>, written under <dir>/tmp, hashed while
 * written, fsynced and linked into place, so a crash never leaves a half
 * blob under a real name, and a file under a real name is complete and holds
 * the bytes its name says. Several gateways may share the directory (NFS,
 * Lustre), and so may compute nodes on the same filesystem: they map inputs
 * from it and write outputs into it (compute/runs/cn_blobio.c). Names are content
 * addresses: a writer that finds its name taken compares the bytes there
 * with its own and replaces them when they differ (planted or torn), and a
 * file someone else wrote can be hashed again (svc_bstore_verify).
 * The gateway calls it directly (another backend, S3, would come in behind
 * this interface); PostgreSQL records which blobs exist, the store knows
 * only bytes. */
#ifndef SVC_BSTORE_H
#define SVC_BSTORE_H

#include <stddef.h>
#include <stdint.h>

/* "sha256:" + 64 lowercase hex digits + NUL */
#define SVC_BLOB_ID_LEN 72

typedef struct svc_bstore svc_bstore;
typedef struct svc_bwriter svc_bwriter;

enum {
    /* create the directory, its subdirectories and its identity when
     * missing, and remove temporary files older than a day that crashed
     * writers left (the gateway); without it the store must exist already
     * (a node's view of the gateway's store) */
    SVC_BSTORE_CREATE = 1,
};

/* Opens the store under dir. NULL with err filled on failure. */
svc_bstore *svc_bstore_open(const char *dir, int flags, char *err, size_t errlen);
/* NULL is a no-op. */
void svc_bstore_close(svc_bstore *s);
/* The directory as given to svc_bstore_open, or with SVC_BSTORE_CREATE
 * its absolute path (what a gateway announces to the nodes); borrowed. */
const char *svc_bstore_dir(const svc_bstore *s);
/* The store's identity: 32 hex digits in <dir>/store-id, made by the first
 * gateway that opened it. Two paths (on two hosts) with the same identity
 * are the same store; a node compares it with the one its gateway
 * announces before it shares the directory. Borrowed. */
const char *svc_bstore_id(const svc_bstore *s);

/* A writer of a new blob; NULL with errno set on failure. */
svc_bwriter *svc_bstore_write_begin(svc_bstore *s);
/* Appends bytes and hashes them; 0 or -errno (the writer stays valid and
 * must still be committed or aborted). Large appends are hashed and written
 * piece by piece, and handed to the disk as they go. */
int svc_bwriter_append(svc_bwriter *w, const void *data, size_t n);
/* Appends a whole buffer already in memory, with the same effect as
 * svc_bwriter_append: a thread of its own hashes it while this one writes
 * it, so the hash costs no time where a core is free. A raised *stop (may
 * be NULL) ends it with -ECANCELED; else 0 or -errno. Either way the writer
 * must then be committed or aborted (after a failure: aborted). */
int svc_bwriter_append_buffer(svc_bwriter *w, const void *data, size_t n,
                              const volatile int *stop);
/* Bytes appended so far. */
uint64_t svc_bwriter_size(const svc_bwriter *w);
/* Makes the bytes durable under their content address (fsync, a hard
 * link from the temporary file, fsync of the directory; an existing blob
 * holds the same bytes and is kept) and fills id and size. The writer stays
 * open: record the blob (PostgreSQL), then svc_bwriter_close. 0 or -errno. */
int svc_bwriter_commit(svc_bwriter *w, char id[SVC_BLOB_ID_LEN], uint64_t *size);
/* After the blob is recorded: puts the bytes back under their name if a
 * retention pass removed an older copy meanwhile (it ends before a record
 * of the same blob can commit), drops the temporary file, frees w. 0 or
 * -errno. */
int svc_bwriter_close(svc_bwriter *w);
/* Drops the temporary file and frees w; NULL is a no-op. A blob already
 * committed stays under its name (another upload may share it); retention
 * only removes recorded blobs, so such bytes stay until swept by hand. */
void svc_bwriter_abort(svc_bwriter *w);

/* Opens a blob for reading: *fd (the caller closes it) and its size. 0,
 * -ENOENT (also for an id that is not one), or -errno. */
int svc_bstore_open_read(svc_bstore *s, const char *id, int *fd, uint64_t *size);
/* The size of a blob's file without opening it; 0, -ENOENT or -errno. */
int svc_bstore_stat(svc_bstore *s, const char *id, uint64_t *size);
/* Reads the file of blob id through and hashes it: 0 with *size when its
 * bytes hash to id, -EBADMSG when they do not (whoever can write the
 * directory put other bytes there), -EFBIG when it is larger than max
 * bytes (not read), -ENOENT, or -errno. For a file someone else says they
 * wrote: the store's own writers never leave such a file. */
int svc_bstore_verify(svc_bstore *s, const char *id, uint64_t max, uint64_t *size);
/* The path of a blob's file (for a container engine to mount it read-only
 * in place; out NULL asks only whether it is there) and its size; 0, -ENOENT,
 * -ENAMETOOLONG or -errno. */
int svc_bstore_path(svc_bstore *s, const char *id, char *out, size_t len, uint64_t *size);
/* Removes a blob's bytes; 0 or -errno (-ENOENT when it was not there). */
int svc_bstore_remove(svc_bstore *s, const char *id);

#endif
