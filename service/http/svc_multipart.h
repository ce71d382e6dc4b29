/* svc_multipart.h — a streaming multipart/form-data parser (RFC 7578 over
 * RFC 2046) for job submits that carry JSON and raw tensor bytes in one
 * body. Fed in pieces of any size; part data is handed on as it comes,
 * never buffered; only one part's header block is held at a time. */
#ifndef SVC_MULTIPART_H
#define SVC_MULTIPART_H

#include <stddef.h>

/* Limits used when svc_multipart_new is given 0. */
#define SVC_MULTIPART_DEFAULT_PARTS   64
#define SVC_MULTIPART_DEFAULT_HEADERS 8192

typedef struct svc_multipart svc_multipart;

/* The application's callbacks; each returns 0 to go on, non-zero to stop
 * the parse (it then fails with "stopped by the application"). Strings are
 * NUL-terminated and live only during the call. */
typedef struct svc_multipart_cb {
    /* A part starts. name is its form field name (never NULL or empty);
     * filename and content_type are NULL when the part does not give them.
     * Quoted values are taken as browsers send them: up to the next '"',
     * no backslash escapes. content_type is the header's whole value. */
    int (*part_begin)(void *cls, const char *name, const char *filename, const char *content_type);
    /* n > 0 bytes of the current part, in order; the pieces follow how the
     * body was fed, not the content. data points into the caller's buffer. */
    int (*part_data)(void *cls, const char *data, size_t n);
    /* The current part ended at a boundary. */
    int (*part_end)(void *cls);
} svc_multipart_cb;

/* A parser for a body whose Content-Type header value is content_type, which
 * must be multipart/form-data with a boundary parameter (quoted or not, 1
 * to 70 characters of RFC 2046's set). cb (any member may be NULL) and cls
 * are borrowed for the parser's life. max_parts bounds the number of parts
 * and max_header_bytes each part's header block, the blank line included;
 * 0 selects the defaults above. Returns a parser to free with
 * svc_multipart_free, or NULL with *why (when why is not NULL) set to a
 * static sentence fit for a 400 reply (or "out of memory"). */
svc_multipart *svc_multipart_new(const char *content_type, const svc_multipart_cb *cb, void *cls,
                                 size_t max_parts, size_t max_header_bytes, const char **why);

/* Parses the next n bytes of the body (any n, 1 included; a boundary may
 * straddle pieces). Lines must end in CRLF; a bare LF is refused. The
 * preamble and the epilogue after the closing boundary are ignored.
 * Returns 0, or -1 once the body is refused or a callback stopped it; then
 * every later call returns -1 and svc_multipart_error says why. */
int svc_multipart_feed(svc_multipart *mp, const char *data, size_t n);

/* Ends the body: 0 when the closing boundary was seen, else -1 (a
 * truncated body, or an earlier error). */
int svc_multipart_finish(svc_multipart *mp);

/* Why the parse failed, for a 400 reply ("part 2 has no name"); "" while
 * it has not. Owned by mp. */
const char *svc_multipart_error(const svc_multipart *mp);

/* Frees the parser; NULL is a no-op. No callback is made. */
void svc_multipart_free(svc_multipart *mp);

#endif
