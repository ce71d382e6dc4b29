/* svc_sse.h — Server-Sent Events (the WHATWG EventSource wire format) on a
 * live reply stream of svc_http: frames are queued from any thread and
 * written as the connection takes them; an idle stream costs no thread. */
#ifndef SVC_SSE_H
#define SVC_SSE_H

#include <stddef.h>

#include "svc_http.h"

typedef struct svc_sse svc_sse;

/* Answers req 200 text/event-stream (uncached, unbuffered by proxies) and
 * returns the channel, which the caller holds until svc_sse_release. A
 * client that lets more than max_queued bytes pile up (0: 1 MiB) is cut
 * off: it reconnects with Last-Event-ID and reads the rest from the log.
 * NULL when the reply cannot be made (a 500 was queued). */
svc_sse *svc_sse_open(svc_req *req, size_t max_queued);
/* Queues one event: "id:" when id is not NULL, "event:" when event is not
 * NULL, data split into one "data:" line per line. Any thread. 0, or -1
 * when the channel is closed (client gone, ended, cut off). */
int svc_sse_send(svc_sse *c, const char *id, const char *event, const char *data);
/* Queues a comment line (": text"), a heartbeat that keeps proxies from
 * closing an idle connection. 0 or -1 as svc_sse_send. */
int svc_sse_comment(svc_sse *c, const char *text);
/* Ends the body once what is queued is sent. Any thread. */
void svc_sse_end(svc_sse *c);
/* 1 once nothing more can be sent (client gone, ended, cut off, server
 * stopping). */
int svc_sse_closed(svc_sse *c);
/* Bytes queued and not yet taken by the connection: a producer that can
 * wait (a catch-up from a log) waits while this is high, rather than be
 * cut off at max_queued. */
size_t svc_sse_queued(svc_sse *c);
/* Drops the caller's hold; NULL is a no-op. */
void svc_sse_release(svc_sse *c);

/* The frame of one event, as svc_sse_send queues it, into out (cap bytes,
 * NUL-terminated when it fits). Returns its length, which may exceed cap
 * (then call again with a buffer of length + 1). A CR, LF or CRLF in data
 * starts a new data: line; id and event must not contain one (-1). */
long svc_sse_frame(char *out, size_t cap, const char *id, const char *event, const char *data);

#endif
