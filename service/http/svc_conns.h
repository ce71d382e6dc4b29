/* svc_conns.h — the HTTP server's table of TCP connections (svc_http.c):
 * which to take (a cap in all, a cap per client address, and over it a
 * small allowance per address for reserved routes within a bounded share
 * of all connections), and the deadlines a watchdog thread holds each to,
 * whatever bytes it trickles in:
 *   - the request head within head_ms of the connection's opening or of its
 *     previous request's end (over_head_ms on a connection over its
 *     address's cap, which may only ask for a reserved route);
 *   - the body in windows of body_ms, each of which brings at least
 *     body_min_rate bytes a second (or the body's end): a small body has
 *     body_ms in all, a large one must keep moving;
 *   - none while the application has the request (its handler, a
 *     suspended wait, the reply).
 * A connection past its deadline is shut down (the descriptor stays
 * libmicrohttpd's to close). Addresses are counted by svc_addr_limit_key:
 * an IPv6 /64 is one client. */
#ifndef SVC_CONNS_H
#define SVC_CONNS_H

#include <stddef.h>
#include <stdint.h>

#include "svc_addr.h"

typedef struct svc_conns svc_conns;
typedef struct svc_conn svc_conn;

typedef struct svc_conns_opts {
    unsigned max_conns;        /* connections in all; more are shut at once */
    unsigned per_ip;           /* per address key; 0: no cap */
    unsigned over_per_ip;      /* more an address may open for reserved routes */
    unsigned over_share;       /* such connections over their cap, in all */
    int64_t head_ms, over_head_ms, body_ms;
    uint64_t body_min_rate;    /* bytes a second; 0: only the first window */
    const svc_cidrs *uncounted;/* peers not capped per address (trusted
                                  proxies: their clients are many); borrowed */
    void *owner;               /* what svc_conns_owner gives back */
} svc_conns_opts;

/* Starts the watchdog. NULL with err filled on failure. */
svc_conns *svc_conns_new(const svc_conns_opts *o, char *err, size_t errlen);
/* Stops the watchdog and frees the table; every connection must have been
 * closed (svc_conns_close). NULL is a no-op. */
void svc_conns_free(svc_conns *t);

/* A connection opened on descriptor fd from peer (text): taken, or shut
 * down at once when over a cap (it is still recorded until closed).
 * Returns its record, NULL on ENOMEM (the connection then has no deadline
 * and counts nowhere). */
svc_conn *svc_conns_open(svc_conns *t, int fd, const char *peer);
/* The connection is gone; c is freed. NULL is a no-op. */
void svc_conns_close(svc_conns *t, svc_conn *c);
/* opts.owner of the table c is in (the server, for callbacks that only
 * have a connection); NULL for NULL. */
void *svc_conns_owner(const svc_conn *c);
/* 1 if c was opened over its address's cap: only reserved routes. */
int svc_conns_over(svc_conns *t, const svc_conn *c);
/* Its request head is in: the body's deadline starts. */
void svc_conns_head(svc_conns *t, svc_conn *c);
/* n bytes of the body arrived. */
void svc_conns_body(svc_conns *t, svc_conn *c, size_t n);
/* The body is complete: the application has the request, no deadline. */
void svc_conns_app(svc_conns *t, svc_conn *c);
/* The request ended: the next head's deadline starts. */
void svc_conns_idle(svc_conns *t, svc_conn *c);

/* What the table holds now (tests, metrics). */
typedef struct svc_conns_stats {
    unsigned open, over, cut;
} svc_conns_stats;
void svc_conns_stats_get(svc_conns *t, svc_conns_stats *out);

#endif
