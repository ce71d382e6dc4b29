/* events_catchup.c — the catch-up thread of the event streams (events_int.h).
 *
 * A tenant's stream that resumes far behind the log (Last-Event-ID: 0 on a
 * log of millions) would have the hub walk the whole log in one read while
 * every other stream of the gateway waits for its live events. Such a
 * stream is handed here instead: each pass gives every stream on the list
 * one read of at most EV_SPAN ids (so many streams catching up share the
 * thread fairly, and a read stays short however sparse the tenant's events
 * are), paced by its client: a stream with more than CU_QUEUE_MAX bytes
 * not yet taken by its connection waits for the next pass rather than be
 * cut off. A stream that has reached the hub's settled id goes back to the
 * hub, which reads the little that settled meanwhile and hands it live
 * events from then on. */
#include <stdlib.h>
#include <time.h>

#include "events_int.h"
#include "svc_util.h"

/* Bytes queued on a stream's connection above which it is not read for
 * until its client has taken them (svc_sse cuts a client off at 1 MiB). */
#define CU_QUEUE_MAX (256 * 1024)
/* A pass where every stream waited on its client sleeps this long. */
#define CU_IDLE_MS 20

/* One step of s: 1 when s has left the list (freed, or back to the hub),
 * else 0; *read set when a read was made. */
static int cu_step(gw_events *ev, ev_stream *s, int64_t settled, int64_t now, int *read)
{
    if (s->end_ms && now >= s->end_ms)
        svc_sse_end(s->sse);
    if (svc_sse_closed(s->sse)) {
        ev__stream_free(ev, s);
        return 1;
    }
    if (s->cursor >= settled) {
        ev__to_hub(ev, s);
        return 1;
    }
    if (svc_sse_queued(s->sse) > CU_QUEUE_MAX)
        return 0;
    int64_t upto = settled - s->cursor <= EV_SPAN ? settled : s->cursor + EV_SPAN;
    gw_event_row *rows;
    int n;
    *read = 1;
    if (gw_store_events_read(ev->app->store, s->cursor, upto, s->tenant_id, NULL, EV_BATCH, &rows,
                             &n) != 0)
        return 0; /* the next pass tries again */
    for (int i = 0; i < n && !svc_sse_closed(s->sse); i++)
        ev__send(s, &rows[i], now);
    if (n == EV_BATCH && rows[n - 1].id > s->cursor)
        s->cursor = rows[n - 1].id;
    else if (n < EV_BATCH)
        s->cursor = upto;
    gw_event_rows_free(rows, n);
    if (now - s->last_write_ms >= ev->heartbeat_ms) {
        svc_sse_comment(s->sse, "ping");
        s->last_write_ms = now;
    }
    return 0;
}

void *ev__catchup_main(void *arg)
{
    gw_events *ev = arg;
    int64_t next_keys = svc_now_mono_ms() + ev->key_check_ms;
    pthread_mutex_lock(&ev->mu);
    while (!ev->stop) {
        /* the new ones go last: those reading already keep their turn */
        ev_stream **tail = &ev->cu_streams;
        while (*tail)
            tail = &(*tail)->next;
        while (ev->cu_incoming) {
            ev_stream *s = ev->cu_incoming;
            ev->cu_incoming = s->next;
            s->next = NULL;
            *tail = s;
            tail = &s->next;
        }
        int64_t now = svc_now_mono_ms();
        int idle = !ev->cu_streams;
        if (!idle) {
            pthread_mutex_unlock(&ev->mu);
            int64_t settled = atomic_load(&ev->settled_pub);
            int read = 0;
            for (ev_stream **p = &ev->cu_streams; *p;) {
                ev_stream *s = *p, *next = s->next;
                if (cu_step(ev, s, settled, now, &read))
                    *p = next;
                else
                    p = &s->next;
            }
            if (now >= next_keys) {
                ev__keys_check(ev, ev->cu_streams);
                next_keys = now + ev->key_check_ms;
            }
            pthread_mutex_lock(&ev->mu);
            idle = !read;
        }
        if (idle && !ev->stop && !ev->cu_incoming) {
            int64_t until = now + (ev->cu_streams ? CU_IDLE_MS : EV_TICK_MS);
            struct timespec ts = {.tv_sec = until / 1000, .tv_nsec = (long)(until % 1000) * 1000000L};
            pthread_cond_timedwait(&ev->cu_cv, &ev->mu, &ts);
        }
    }
    pthread_mutex_unlock(&ev->mu);
    return NULL;
}
