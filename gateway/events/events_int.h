/* events_int.h — what the event streams' two threads share: events.c's hub
 * (live events, Redis wakes, heartbeats) and events_catchup.c's catch-up
 * thread (tenant streams that resume from far back in the log). A stream
 * is owned by one of them at a time: on the hub's list, or on the catch-up
 * thread's, or on the lists that hand it over (under mu). Not for other
 * modules. */
#ifndef GW_EVENTS_INT_H
#define GW_EVENTS_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "events.h"
#include "redis.h"
#include "svc_sse.h"

/* Events read from the log per query. */
#define EV_BATCH 500
/* Ids of the log one read of a tenant's stream covers at most, on the
 * catch-up thread (EV_SPAN) and on the hub (EV_HUB_SPAN). A tenant's
 * events are found by walking the log's ids and keeping the tenant's: a
 * tenant whose events are few among many reads far for few, so a read is
 * bounded by ids walked, not only by rows kept. A tenant's stream further
 * behind than EV_HUB_SPAN is caught up by the catch-up thread, never by
 * the hub, which hands out every live event. */
#define EV_SPAN 10000
#define EV_HUB_SPAN 1000
/* Longest sleep of the threads: heartbeats are due at this granularity. */
#define EV_TICK_MS 250

typedef struct ev_stream {
    struct ev_stream *next;
    svc_sse *sse;
    int64_t tenant_id;
    int64_t key_id;            /* the API key it was opened with: re-checked (ev__keys_check) */
    char job_id[37];           /* "": the tenant's stream */
    gw_event_filter f;
    int64_t cursor;            /* events up to this id are behind it */
    int backlog;               /* reads the log up to settled before live events */
    int64_t last_write_ms;     /* for heartbeats */
    int64_t end_ms;            /* the stream ends then (monotonic); 0: never */
} ev_stream;

typedef struct ev_count {
    int64_t tenant_id;
    int n;
} ev_count;

struct gw_events {
    gw_app *app;
    pthread_mutex_t mu;
    pthread_cond_t cv;         /* wakes the hub */
    pthread_cond_t cu_cv;      /* wakes the catch-up thread */
    /* guarded by mu */
    ev_stream *incoming;       /* opened or caught up, not yet taken by the hub */
    ev_stream *cu_incoming;    /* handed to the catch-up thread, not yet taken */
    int stop, woken, publish;
    ev_count *counts;          /* open streams per tenant */
    int ncounts;
    json_t *progress;          /* [{"tenant_id", "data"}] to hand to streams */
    json_t *progress_out;      /* those of them recorded here, to publish */
    /* the hub's own */
    int64_t settled;           /* every event id <= this is final and handed out */
    ev_stream *streams;
    gw_event_horizon horizon;
    /* the catch-up thread's own */
    ev_stream *cu_streams;
    /* the hub's settled, for the catch-up thread to read up to */
    _Atomic int64_t settled_pub;
    /* Redis */
    gw_redis *redis;           /* PUBLISH */
    atomic_int sub_up;         /* the subscriber holds its SUBSCRIBE */
    char self[17];             /* this gateway's wakes carry it: its own are ignored */
    int threads;               /* threads started: hub, subscriber, catch-up */
    pthread_t thread, sub_thread, cu_thread;
    int heartbeat_ms, poll_ms, max_per_tenant;
    int key_check_ms;          /* streams' keys are re-checked this often */
};

/* Hands e to s when s wants it (and ends a job's stream after its
 * terminal event). */
void ev__send(ev_stream *s, const gw_event_row *e, int64_t now);
/* Ends s's body, counts it out of its tenant's streams and frees it. */
void ev__stream_free(gw_events *ev, ev_stream *s);
/* Ends, with an `error` event, every stream of list whose API key has
 * been revoked since it opened (or whose key is gone). One query. */
void ev__keys_check(gw_events *ev, ev_stream *list);
/* Gives s to the catch-up thread / back to the hub (any thread but the
 * one that takes it; mu not held). */
void ev__to_catchup(gw_events *ev, ev_stream *s);
void ev__to_hub(gw_events *ev, ev_stream *s);

/* The catch-up thread (events_catchup.c). */
void *ev__catchup_main(void *arg);

#endif
