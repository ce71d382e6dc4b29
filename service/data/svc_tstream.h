/* svc_tstream.h — a JSON document written piece by piece into the reader's
 * buffer: literal text and tensors, so that a reply of hundreds of MB never
 * exists whole in memory (it feeds svc_reply_stream). A tensor is written as
 * svc_tensor_to_json shapes it, {"dtype","shape","data"|"b64"}, except that
 * reals are the shortest decimal that reads back exactly (svc_dtoa.h) and
 * non-finite reals are the strings "NaN", "Infinity" and "-Infinity"
 * (protobuf's JSON mapping) rather than null. */
#ifndef SVC_TSTREAM_H
#define SVC_TSTREAM_H

#include <stddef.h>
#include <sys/types.h>

#include "svc_tensor.h"

typedef struct svc_tstream svc_tstream;

/* An empty document; NULL on ENOMEM. Free with svc_tstream_free. */
svc_tstream *svc_tstream_new(void);

/* Appends literal text (copied; the caller escapes it). 0 or -ENOMEM. */
int svc_tstream_text(svc_tstream *s, const char *text, size_t len);

/* Appends t as a JSON object; b64 != 0 selects the base64 form. t's shape is
 * copied, its data only borrowed: it must live as long as the stream (hand
 * it over with svc_tstream_own). t->nbytes must match dtype and shape.
 * 0, -EINVAL (nbytes does not match) or -ENOMEM. */
int svc_tstream_tensor(svc_tstream *s, const svc_tensor *t, int b64);

/* Makes the stream own p (from malloc): it is freed with the stream, and on
 * failure (-ENOMEM) here at once. NULL is accepted and does nothing. */
int svc_tstream_own(svc_tstream *s, void *p);

/* The same for a read-only mapping of len bytes (mmap): it is unmapped
 * with the stream, and on failure (-ENOMEM) here at once. */
int svc_tstream_own_mapping(svc_tstream *s, void *addr, size_t len);

/* Copies the next at most max bytes of the document into buf; returns how
 * many, 0 once the document is complete. Any max >= 1 works (a number that
 * does not fit is kept for the next call). Matches svc_stream_fn. */
ssize_t svc_tstream_read(void *s, char *buf, size_t max);

/* Frees the stream and everything it owns; NULL is a no-op. Matches the
 * free_cls of svc_reply_stream. */
void svc_tstream_free(void *s);

#endif
