/* blob.h — the list of a job's named tensors as PostgreSQL keeps it: a
 * JSON list of {"name","dtype","shape","blob","nbytes"}, each tensor's bytes
 * a blob in the blob store. Rows from before the blob store hold entries
 * {"name","dtype","shape","offset","nbytes"} into one bytea of every
 * tensor's bytes back to back; both are read, and the packing functions
 * still write the older form (the fuzz harness and node tests use it). */
#ifndef GW_BLOB_H
#define GW_BLOB_H

#include <jansson.h>
#include <stddef.h>

#include "svc_tensor.h"

typedef struct gw_blob {
    json_t *meta;          /* array, owned */
    unsigned char *data;   /* owned */
    size_t len, cap;
} gw_blob;

/* Appends a tensor's bytes under name; 0 or -ENOMEM. */
int gw_blob_add(gw_blob *b, const char *name, const svc_tensor *t);
/* Appends an entry naming blob id for tensor t (its dtype, shape, nbytes;
 * no bytes); 0 or -ENOMEM. */
int gw_blob_add_ref(gw_blob *b, const char *name, const svc_tensor *t, const char *id);
/* Decodes an object of wire tensors (any encoding) and packs them: bytes
 * sent inline are appended, a {"blob"} reference becomes an entry naming
 * it. 0, or -EINVAL with msg naming the tensor. */
int gw_blob_from_json(gw_blob *b, const json_t *tensors, char *msg, size_t msglen);
/* Unpacks meta + data into an object of wire tensors, b64 or "data"
 * arrays. NULL when meta does not fit data (a corrupt row) or ENOMEM. */
json_t *gw_blob_to_json(const json_t *meta, const unsigned char *data, size_t len, int b64);
/* Entry m of a meta list as a view into data: *t gets dtype, shape and
 * nbytes, t->data points into data (borrowed; NULL for an empty tensor),
 * *name into m; for a blob entry t->blob is its id and t->data NULL. 0, or
 * -1 when the entry does not fit data (a corrupt row). */
int gw_blob_view(const json_t *m, const unsigned char *data, size_t len, svc_tensor *t,
                 const char **name);
/* Checks a run's outputs (meta, as gw_blob_from_json made it) against the
 * catalog spec of kernel: each of its outputs exactly once, with its dtype
 * and a rank it allows, and nothing else. 0, or -EINVAL with msg naming
 * the first output that is not right (a node cannot store a tenant
 * outputs its kernel never makes). */
int gw_blob_check_outputs(const json_t *meta, const char *kernel, char *msg, size_t msglen);
void gw_blob_free(gw_blob *b);

#endif
