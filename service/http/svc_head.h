/* svc_head.h — what the HTTP server reads from a request head before any
 * route sees it (svc_http.c): the checks that refuse a head a proxy in
 * front could read differently (request smuggling), one too large, or text
 * that is not UTF-8; and who the client is (the socket peer, or behind a
 * trusted proxy the address X-Forwarded-For names). On libmicrohttpd's
 * connection, whose header this does not include. */
#ifndef SVC_HEAD_H
#define SVC_HEAD_H

#include <stddef.h>

#include "svc_addr.h"

struct MHD_Connection;

/* What the server noted of the head before libmicrohttpd split it. */
typedef struct svc_head_facts {
    int http11;          /* HTTP/1.1: exactly one Host required */
    int raw_nul;         /* the raw target has %00 */
    int too_many_args;   /* the raw target has more than max_args query arguments */
    int max_args;
    size_t raw_len;      /* bytes of the raw target */
    size_t max_header;   /* bytes of request line + headers; 0: no check */
    const char *path;    /* the decoded path */
} svc_head_facts;

/* Why a head is refused: the error svc_reply_error sends. */
typedef struct svc_head_refusal {
    int status;
    const char *code;
    char field[64];      /* "" when no field is at fault */
    char message[256];
} svc_head_refusal;

/* 1 with *out filled when the head is refused: 414/431 too large, 400
 * ambiguous framing (two Content-Lengths, one beside Transfer-Encoding, a
 * transfer coding other than chunked), 400 smuggling syntax (not exactly
 * one Host on HTTP/1.1, a header name that is not a token or was folded,
 * %00 in the target), 404 a path / 400 a query that is not UTF-8. 0 when
 * the head may go on. */
int svc_head_refuse(struct MHD_Connection *conn, const svc_head_facts *f, svc_head_refusal *out);

/* The socket peer's address as text ("unknown" when there is none). */
void svc_head_peer(struct MHD_Connection *conn, char *out, size_t len);
/* The client: the peer, or when the peer is in trusted the rightmost
 * untrusted hop of every X-Forwarded-For header joined in order
 * (svc_addr_client). */
void svc_head_client(struct MHD_Connection *conn, const svc_cidrs *trusted, char *out, size_t len);

#endif
