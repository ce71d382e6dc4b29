/* blobstore.h — where the gateway's blob bytes live, behind one small
 * interface so that another backend (S3) can replace the directory without
 * touching the API. Today every call goes to the directory backend,
 * service/svc_bstore.h (one file per blob, written to a temporary name,
 * fsynced and linked into place), which compute nodes that share the
 * directory use too. PostgreSQL records which blobs exist and who may read
 * them; the store knows only bytes. */
#ifndef GW_BLOBSTORE_H
#define GW_BLOBSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "svc_bstore.h"

/* "sha256:" + 64 lowercase hex digits + NUL */
#define GW_BLOB_ID_LEN SVC_BLOB_ID_LEN

typedef struct gw_bstore gw_bstore;
typedef struct gw_bwriter gw_bwriter;

/* Opens (creating) the store under dir and removes temporary files older
 * than a day that crashed writers left. NULL with err filled on failure. */
gw_bstore *gw_bstore_open(const char *dir, char *err, size_t errlen);
void gw_bstore_close(gw_bstore *s);
/* Where nodes on hosts that share it find the store: the directory's
 * absolute path and the store's identity (svc_bstore_id); borrowed. */
const char *gw_bstore_dir(const gw_bstore *s);
const char *gw_bstore_id(const gw_bstore *s);

/* A writer of a new blob; NULL with errno set on failure. */
gw_bwriter *gw_bstore_write_begin(gw_bstore *s);
/* Appends bytes and hashes them; 0 or -errno (the writer stays valid and
 * must still be committed or aborted). */
int gw_bwriter_append(gw_bwriter *w, const void *data, size_t n);
/* Bytes appended so far. */
uint64_t gw_bwriter_size(const gw_bwriter *w);
/* Makes the bytes durable under their content address (fsync, a hard
 * link from the temporary file, fsync of the directory; an existing blob
 * holds the same bytes and is kept) and fills id and size. The writer stays
 * open: record the blob (PostgreSQL), then gw_bwriter_close. 0 or -errno. */
int gw_bwriter_commit(gw_bwriter *w, char id[GW_BLOB_ID_LEN], uint64_t *size);
/* After the blob is recorded: puts the bytes back under their name if a
 * retention pass removed an older copy meanwhile (it ends before a record
 * of the same blob can commit), drops the temporary file, frees w. 0 or
 * -errno. */
int gw_bwriter_close(gw_bwriter *w);
/* Drops the temporary file and frees w; NULL is a no-op. A blob already
 * committed stays under its name (another upload may share it); retention
 * only removes recorded blobs, so such bytes stay until swept by hand. */
void gw_bwriter_abort(gw_bwriter *w);

/* Opens a blob for reading: *fd (the caller closes it) and its size. 0,
 * -ENOENT, or -errno. */
int gw_bstore_open_read(gw_bstore *s, const char *id, int *fd, uint64_t *size);
/* The size of a blob's bytes without reading them: 0, -ENOENT or -errno. */
int gw_bstore_stat(gw_bstore *s, const char *id, uint64_t *size);
/* Hashes the file of blob id again (svc_bstore_verify): 0 with *size when
 * its bytes are what its name says, -EBADMSG when not, -EFBIG past max
 * bytes, -ENOENT, -errno. */
int gw_bstore_verify(gw_bstore *s, const char *id, uint64_t max, uint64_t *size);
/* Removes a blob's bytes; 0 or -errno (-ENOENT when it was not there). */
int gw_bstore_remove(gw_bstore *s, const char *id);

#endif
