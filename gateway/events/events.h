/* events.h — Server-Sent Events of job state changes (GET /v1/events, GET
 * /v1/jobs/{id}/events). One thread per gateway reads the job_events log
 * in PostgreSQL and hands each event to the streams it matches (a second
 * catches up the tenant streams that resume far back, events_catchup.c);
 * streams are suspended connections (svc_sse) and cost no thread. A gateway that
 * records events publishes a wake on Redis (one PUBLISH per round, however
 * many jobs changed), so streams on every gateway see them at once; the
 * log itself fills any gap, and while Redis is away the thread polls it. */
#ifndef GW_EVENTS_H
#define GW_EVENTS_H

#include <jansson.h>
#include <stdint.h>

#include "gw.h"
#include "svc_http.h"

/* The Redis channel of wakes. */
#define GW_EVENTS_CHANNEL "kowloon:events"

typedef struct gw_events gw_events;

/* What a tenant-wide stream asked for: each filter empty when absent. */
typedef struct gw_event_filter {
    char kernel[64];
    char label_key[65], label_value[257];
    unsigned states;          /* bit per state (gw_event_state_bit); 0: every state */
} gw_event_filter;

/* The bit of a job state, 0 for an unknown one. */
unsigned gw_event_state_bit(const char *state);
/* Splits a label filter "key:value": the key as labels allow it (1-64 of
 * A-Z a-z 0-9 _ . -), the value at most 256 characters. 0, or -EINVAL. */
int gw_label_parse(const char *label, char key[65], const char **value);
/* Reads the query's filters: kernel (a name), label ("key:value") and
 * state (one state or several, comma-separated). 0, or -EINVAL with the
 * parameter's name in *field and a message in msg. */
int gw_event_filter_parse(gw_event_filter *f, const char *kernel, const char *label,
                          const char *state, const char **field, char *msg, size_t msglen);
/* 1 when an event of a job with this kernel and labels (an object, may be
 * NULL), in this state, passes f. */
int gw_event_filter_match(const gw_event_filter *f, const char *kernel, const json_t *labels,
                          const char *state);
/* Reads a Last-Event-ID (header, or the last_event_id query parameter):
 * a non-negative decimal event id into *id. 0, or -EINVAL (an empty one
 * too). NULL is 0 with *id = -1 (none given). */
int gw_event_id_parse(const char *text, int64_t *id);

/* Where the event log is settled: below which no event can still appear
 * (see events.c). Each round notes a horizon (the last id drawn, then the
 * next xid to be assigned) and settles those that a snapshot's xmin has
 * reached. */
#define GW_EVENT_HORIZONS 16
typedef struct gw_event_horizon {
    struct {
        int64_t last;
        uint64_t next;
    } cand[GW_EVENT_HORIZONS];
    int ncand;                /* noted, not yet settled */
} gw_event_horizon;
/* Notes (last, next) and returns the highest id settled, at least settled,
 * given the xmin of a snapshot taken after both were read. */
int64_t gw_event_horizon_step(gw_event_horizon *h, int64_t settled, int64_t last, uint64_t xmin,
                              uint64_t next);

/* Starts the thread and the Redis subscriber. NULL on failure. */
gw_events *gw_events_start(gw_app *app);
/* Ends every stream (their bodies close cleanly) and stops the threads;
 * from then on gw_events_open answers 503. NULL is a no-op. Call before
 * svc_server_stop. */
void gw_events_stop(gw_events *ev);
/* Stops (if not yet) and frees. NULL is a no-op. */
void gw_events_free(gw_events *ev);

/* This gateway recorded job events: streams here look now, and one wake
 * goes to the other gateways. Cheap: a flag and a signal; NULL is a no-op. */
void gw_events_written(gw_events *ev);

/* Progress of running jobs, as recorded (gw_store_jobs_progress): each
 * goes at once to this gateway's streams as `event: progress`, and in one
 * PUBLISH per round to the other gateways' (progress is not in the log:
 * a gateway that misses it shows the next one). Takes rows. */
void gw_events_progress(gw_events *ev, gw_event_row *rows, int n);
/* The same for any live event without an id: event "progress" or "log"
 * (a task's log lines, data {job_id, attempt, part, offset, text, kernel,
 * labels}; kernel and labels choose the streams and are not sent). Takes
 * rows. */
void gw_events_live(gw_events *ev, gw_event_row *rows, int n, const char *event);

/* Longest duration_s a stream may ask for. */
#define GW_EVENTS_DURATION_MAX_S 86400

/* Answers req with a stream of the events of tenant_id's jobs that pass f
 * (job_id NULL), or of job job_id alone, which ends after the job's
 * terminal event. after: resume after this event id (-1: from the first,
 * for a job's stream). duration_s > 0 ends the stream after that long (the
 * client resumes with Last-Event-ID). key_id: the API key of the request;
 * once it is revoked the stream ends with an `error` event (within the
 * key cache's period, --key-cache-ms). 429 rate_limited over the tenant's
 * stream limit. A tenant's stream far behind the log is caught up off the
 * thread that hands out live events, a bounded read at a time, at the pace
 * its client reads. */
void gw_events_open(gw_events *ev, svc_req *req, int64_t tenant_id, int64_t key_id,
                    const char *job_id, const gw_event_filter *f, int64_t after, int duration_s);

#endif
