/* svc_tensor.h — the wire codec for tensors:
 *   {"dtype": "float32", "shape": [m, n], "data": [...]}   (flat, row-major)
 *   {"dtype": "float32", "shape": [m, n], "b64": "..."}    (little-endian bytes)
 *   {"dtype": "float32", "shape": [m, n], "blob": "sha256:…"} (bytes uploaded
 *                                          before; decoded as a reference)
 * dtypes: float32, float64, int32. Independent of the kernel library; the
 * compute node maps svc_tensor onto kl_tensor field by field. */
#ifndef SVC_TENSOR_H
#define SVC_TENSOR_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define SVC_TENSOR_MAX_DIMS 8

typedef enum { SVC_F32 = 0, SVC_F64 = 1, SVC_I32 = 2 } svc_dtype; /* same values as kl_dtype */

typedef struct svc_tensor {
    svc_dtype dtype;
    int ndim;
    int64_t shape[SVC_TENSOR_MAX_DIMS];
    void *data;      /* malloc'd, owned by the struct; NULL when elems == 0
                        or when the tensor is a blob reference */
    size_t nbytes;
    /* how data goes when the tensor is freed: NULL for free(); a compute
     * node sets it for buffers it mapped or took from the GPU's allocator */
    void (*release)(void *data, size_t nbytes);
    char blob[72];   /* "sha256:…" of a {"blob"} tensor (data NULL), else "" */
} svc_tensor;

size_t svc_dtype_size(svc_dtype t);
const char *svc_dtype_name(svc_dtype t);
int svc_dtype_parse(const char *s, svc_dtype *out);   /* 0 or -1 */
int64_t svc_tensor_elems(const svc_tensor *t);

/* Decodes one tensor. On success returns 0 and *out owns newly allocated
 * data. On failure returns -1, *out is left empty, and msg says what is
 * wrong ("shape [2,3] needs 6 elements, data has 5"). Tensors with more than
 * max_elems elements are refused (max_elems <= 0: no limit). Non-finite
 * numbers are refused in "data"; in "b64" the bytes are taken as they are.
 * "data" may be a plain jansson array or a compact one from svc_json_parse,
 * with the same checks and messages; in both, a non-zero number that would
 * be stored as exactly 0 (float32 underflow) is refused, subnormals kept. */
int svc_tensor_from_json(const json_t *j, int64_t max_elems, svc_tensor *out,
                         char *msg, size_t msglen);

/* Encodes a tensor; b64 != 0 selects the base64 form. Returns a new
 * reference, or NULL on ENOMEM. */
json_t *svc_tensor_to_json(const svc_tensor *t, int b64);  /* a blob reference: {"blob"} */

/* Shape as a JSON array (new reference) and back (0 or -1). */
json_t *svc_shape_to_json(int ndim, const int64_t *shape);
int svc_shape_from_json(const json_t *j, int *ndim, int64_t *shape);

/* Frees data and clears the struct; NULL is a no-op. */
void svc_tensor_free(svc_tensor *t);

#endif
