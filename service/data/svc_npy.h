/* svc_npy.h — the NumPy .npy header (format 1.0, 2.0 past 65535 bytes):
 * written in front of a tensor's raw little-endian C-order bytes so that
 * numpy.load reads them, and read back strictly from an upload.
 * Only the three svc_dtype types exist here: '<f4', '<f8', '<i4'. */
#ifndef SVC_NPY_H
#define SVC_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "svc_err.h"
#include "svc_tensor.h"

/* The whole header (magic, version, length, dictionary, padding) is a
 * multiple of this, as numpy >= 1.14 writes it and its format spec asks. */
#define SVC_NPY_ALIGN 64

/* The reader refuses a longer header (the bytes after the length field)
 * outright, so a streaming caller never buffers more: a real one for 8
 * dimensions is under 400 bytes, and numpy.load itself stops at 10000. */
#define SVC_NPY_MAX_HEADER (1u << 20)

/* Error codes of svc_npy_parse_header: svc_npy's block of the error space
 * (svc_err.h), which svc_strerror names. */
enum {
    SVC_NPY_ETRUNC   = SVC_E_BLOCK(SVC_E_BLOCK_NPY) - 1, /* the buffer ends inside the header:
                                                            read more */
    SVC_NPY_EMAGIC   = SVC_E_BLOCK(SVC_E_BLOCK_NPY) - 2, /* not "\x93NUMPY" */
    SVC_NPY_EVERSION = SVC_E_BLOCK(SVC_E_BLOCK_NPY) - 3, /* a version other than 1.0, 2.0, 3.0 */
    SVC_NPY_EHEADER  = SVC_E_BLOCK(SVC_E_BLOCK_NPY) - 4, /* the dictionary is not the one numpy
                                                            writes */
    SVC_NPY_EDTYPE   = SVC_E_BLOCK(SVC_E_BLOCK_NPY) - 5, /* descr other than '<f4', '<f8', '<i4' */
    SVC_NPY_EFORTRAN = SVC_E_BLOCK(SVC_E_BLOCK_NPY) - 6, /* fortran_order True */
    SVC_NPY_ESHAPE   = SVC_E_BLOCK(SVC_E_BLOCK_NPY) - 7, /* rank > 8, or a size that overflows
                                                            int64 */
    SVC_NPY_EPAD     = SVC_E_BLOCK(SVC_E_BLOCK_NPY) - 8, /* padding not spaces + '\n', or total
                                                            not aligned */
};

/* Writes the header for an array of dtype and shape (ndim 0..8, every
 * dimension >= 0) into out[0..cap). Returns its length, a multiple of
 * SVC_NPY_ALIGN, or 0 when cap is too small or an argument is invalid; out
 * is not NUL-terminated. The array's bytes, little-endian and C-ordered,
 * follow the header unchanged. */
size_t svc_npy_header(svc_dtype dtype, int ndim, const int64_t *shape, char *out, size_t cap);

/* svc_npy_header for any NumPy descr ("<u1", "|b1", "<f2"): what a task's
 * input of another dtype is shown as. Same return. */
size_t svc_npy_header_descr(const char *descr, int ndim, const int64_t *shape, char *out,
                            size_t cap);

/* Reads the header at the start of buf[0..len). On success returns 0 and
 * sets *dtype, *ndim, shape[0..*ndim) and *header_len (where the data
 * starts); the data must then hold elems x dtype size bytes, which the
 * caller checks. On failure returns one of the SVC_NPY_E* codes; for
 * SVC_NPY_ETRUNC *header_len is the number of bytes needed when it is known
 * (10 when even the length field is missing). Strict: versions 1.0, 2.0 and
 * 3.0, the three keys each once in any order, fortran_order False, the
 * padding numpy writes, at most SVC_NPY_MAX_HEADER bytes (else EHEADER).
 * Outputs are untouched on failure, except header_len for ETRUNC. */
int svc_npy_parse_header(const void *buf, size_t len, svc_dtype *dtype, int *ndim,
                         int64_t shape[8], size_t *header_len);

/* A static sentence for an SVC_NPY_E* code, fit for a 400 reply
 * (svc_strerror answers the same for them). */
const char *svc_npy_strerror(int code);

/* Internal, for tests: wraps an already formatted dictionary text in magic,
 * version (1.0, or 2.0 when needed), length and padding. Same return as
 * svc_npy_header. */
size_t svc__npy_wrap(const char *dict, size_t dict_len, char *out, size_t cap);

#endif
