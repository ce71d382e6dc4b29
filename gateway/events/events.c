/* events.c — Server-Sent Events of job state changes (events.h).
 *
 * One thread (the hub) reads the job_events log and hands events to
 * streams; a second holds a Redis SUBSCRIBE and wakes the first when any
 * gateway recorded events; a third catches up tenant streams that resume
 * far behind the log (events_catchup.c), so that the hub never makes a
 * long read. Both stream threads re-check their streams' API keys. Streams are handed events only up to the "settled"
 * id, below which no event can still appear: bigserial ids are drawn
 * before commit, so id 7 may be visible while id 6 is still in flight,
 * and a stream that sent 7 and resumed after it would never see 6. Each
 * round notes the last id drawn, L, and then the next xid to be assigned,
 * N; every transaction that drew an id <= L had its xid before (see
 * sql/014_events.sql), so its xid is < N, and once a snapshot's xmin has
 * reached N all of them have ended: every event <= L is then visible or
 * never will be, and L is settled. (A snapshot's xmax is no such bound: it
 * is the last ended xid + 1, and a writer may run with a higher one.)
 * While writers are busy a noted (L, N) waits a round or two; with none in
 * flight it settles at once. An open transaction that has an xid delays
 * every stream until it ends: writers here are short.
 * So the SSE id (the job_events id) alone resumes a stream exactly, on
 * any gateway, after any restart: no gap, no repeat. */
#include "events.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "events_int.h"
#include "reply.h"
#include "svc_json.h"
#include "svc_log.h"
#include "svc_util.h"

/* How soon an unsettled horizon is looked at again. */
#define EV_RETRY_MS 10
/* While Redis carries wakes, the log is still read every this many poll
 * intervals, in case a wake was lost. */
#define EV_SAFETY_POLLS 4
/* Wakes of other gateways go out at most this often (one PUBLISH carries
 * every event and progress report recorded here meanwhile). */
#define EV_PUBLISH_EVERY_MS 5

static const char *const ev_states[] = {"queued", "running", "succeeded", "failed", "cancelled",
                                        NULL};

unsigned gw_event_state_bit(const char *state)
{
    for (int i = 0; state && ev_states[i]; i++)
        if (strcmp(state, ev_states[i]) == 0)
            return 1u << i;
    return 0;
}

static int ev_terminal(const char *state)
{
    return gw_event_state_bit(state) & (gw_event_state_bit("succeeded") |
                                        gw_event_state_bit("failed") |
                                        gw_event_state_bit("cancelled"));
}

int gw_label_parse(const char *label, char key[65], const char **value)
{
    const char *colon = strchr(label, ':');
    size_t klen = colon ? (size_t)(colon - label) : 0;
    if (klen < 1 || klen > 64 ||
        strspn(label, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != klen ||
        svc_utf8_chars(colon + 1) > 256)
        return -EINVAL;
    snprintf(key, 65, "%.*s", (int)klen, label);
    *value = colon + 1;
    return 0;
}

int gw_event_filter_parse(gw_event_filter *f, const char *kernel, const char *label,
                          const char *state, const char **field, char *msg, size_t msglen)
{
    memset(f, 0, sizeof(*f));
    if (kernel) {
        if (!*kernel || strlen(kernel) >= sizeof(f->kernel)) {
            *field = "kernel";
            snprintf(msg, msglen, "kernel must be a kernel name (1-63 characters)");
            return -EINVAL;
        }
        snprintf(f->kernel, sizeof(f->kernel), "%s", kernel);
    }
    const char *value;
    if (label) {
        if (gw_label_parse(label, f->label_key, &value) != 0) {
            *field = "label";
            snprintf(msg, msglen, "label must be key:value, the key 1-64 characters of A-Z a-z 0-9 "
                                  "_ . -, the value at most 256 characters of UTF-8");
            return -EINVAL;
        }
        snprintf(f->label_value, sizeof(f->label_value), "%s", value);
    }
    for (const char *p = state; p && *p;) {
        size_t n = strcspn(p, ",");
        char one[16];
        unsigned bit = 0;
        if (n < sizeof(one)) {
            snprintf(one, sizeof(one), "%.*s", (int)n, p);
            bit = gw_event_state_bit(one);
        }
        if (!bit) {
            *field = "state";
            snprintf(msg, msglen, "state must be queued, running, succeeded, failed or cancelled, "
                                  "or several of them separated by commas");
            return -EINVAL;
        }
        f->states |= bit;
        p += n;
        if (*p == ',' && !*++p) {
            *field = "state";
            snprintf(msg, msglen, "state must not end with a comma");
            return -EINVAL;
        }
    }
    if (state && !*state) {
        *field = "state";
        snprintf(msg, msglen, "state must not be empty");
        return -EINVAL;
    }
    return 0;
}

int gw_event_filter_match(const gw_event_filter *f, const char *kernel, const json_t *labels,
                          const char *state)
{
    if (f->kernel[0] && (!kernel || strcmp(f->kernel, kernel) != 0))
        return 0;
    if (f->states && !(f->states & gw_event_state_bit(state)))
        return 0;
    if (f->label_key[0]) {
        const char *v = json_string_value(json_object_get(labels, f->label_key));
        if (!v || strcmp(v, f->label_value) != 0)
            return 0;
    }
    return 1;
}

int gw_event_id_parse(const char *text, int64_t *id)
{
    *id = -1;
    if (!text)
        return 0;
    size_t len = strlen(text);
    if (len < 1 || len > 18 || strspn(text, "0123456789") != len)
        return -EINVAL;
    *id = strtoll(text, NULL, 10);
    return 0;
}

/* ---- streams and the thread ------------------------------------------- */

/* The open-stream count of tenant_id, made when absent; mu held. NULL on
 * ENOMEM. */
static ev_count *ev_count_of(gw_events *ev, int64_t tenant_id)
{
    for (int i = 0; i < ev->ncounts; i++)
        if (ev->counts[i].tenant_id == tenant_id)
            return &ev->counts[i];
    ev_count *c = realloc(ev->counts, (size_t)(ev->ncounts + 1) * sizeof(*c));
    if (!c)
        return NULL;
    ev->counts = c;
    c[ev->ncounts] = (ev_count){tenant_id, 0};
    return &c[ev->ncounts++];
}

void ev__stream_free(gw_events *ev, ev_stream *s)
{
    pthread_mutex_lock(&ev->mu);
    ev_count *c = ev_count_of(ev, s->tenant_id);
    if (c && c->n > 0)
        c->n--;
    pthread_mutex_unlock(&ev->mu);
    svc_sse_end(s->sse);
    svc_sse_release(s->sse);
    free(s);
}

/* 1 when s takes an event of this job, tenant, kernel and state. */
static int ev_wants(const ev_stream *s, int64_t tenant_id, const char *job_id, const char *kernel,
                    const json_t *data, const char *state)
{
    if (s->job_id[0])
        return strcmp(s->job_id, job_id) == 0;
    return tenant_id == s->tenant_id &&
           gw_event_filter_match(&s->f, kernel, json_object_get(data, "labels"), state);
}

/* Hands an item of ev->progress to the live streams that want it, as an
 * event without an id: a resumed stream does not see it again (the job
 * object carries the latest progress). */
static void ev_send_progress(gw_events *ev, const json_t *item, int64_t now)
{
    const json_t *d = json_object_get(item, "data");
    int64_t tenant_id = json_integer_value(json_object_get(item, "tenant_id"));
    const char *job_id = json_string_value(json_object_get(d, "job_id"));
    const char *kernel = json_string_value(json_object_get(d, "kernel"));
    /* "progress", or "log" (gw_events_live): a log event carries its
     * text, not the job's kernel and labels, which only choose streams */
    const char *event = json_string_value(json_object_get(item, "event"));
    int log = event && strcmp(event, "log") == 0;
    if (!job_id || !kernel)
        return;
    char *text = NULL;
    for (ev_stream *s = ev->streams; s; s = s->next) {
        if (s->backlog || !ev_wants(s, tenant_id, job_id, kernel, d, "running"))
            continue;
        if (!text && log) {
            json_t *c = json_copy((json_t *)d);
            json_object_del(c, "kernel");
            json_object_del(c, "labels");
            text = c ? svc_json_dump(c, NULL) : NULL;
            json_decref(c);
        } else if (!text) {
            text = svc_json_dump(d, NULL);
        }
        if (!text)
            return;
        svc_sse_send(s->sse, NULL, log ? "log" : "progress", text);
        s->last_write_ms = now;
    }
    free(text);
}

void ev__send(ev_stream *s, const gw_event_row *e, int64_t now)
{
    if (e->id <= s->cursor)
        return;
    if (!ev_wants(s, e->tenant_id, e->job_id, e->kernel, e->data, e->state))
        return;
    s->cursor = e->id;
    char id[24];
    snprintf(id, sizeof(id), "%" PRId64, e->id);
    char *text = svc_json_dump(e->data, NULL);
    if (text)
        svc_sse_send(s->sse, id, "state", text);
    free(text);
    s->last_write_ms = now;
    if (s->job_id[0] && ev_terminal(e->state))
        svc_sse_end(s->sse); /* the job's story is told */
}

int64_t gw_event_horizon_step(gw_event_horizon *h, int64_t settled, int64_t last, uint64_t xmin,
                              uint64_t next)
{
    /* A full list keeps its oldest horizons: the newest is noted again
     * next round. */
    if (last > settled && h->ncand < GW_EVENT_HORIZONS &&
        (h->ncand == 0 || h->cand[h->ncand - 1].last < last)) {
        h->cand[h->ncand].last = last;
        h->cand[h->ncand].next = next;
        h->ncand++;
    }
    for (int i = 0; i < h->ncand; i++)
        if (xmin >= h->cand[i].next && h->cand[i].last > settled)
            settled = h->cand[i].last;
    /* What is left waits, unless a later horizon settled past it. */
    int k = 0;
    for (int i = 0; i < h->ncand; i++)
        if (h->cand[i].last > settled)
            h->cand[k++] = h->cand[i];
    h->ncand = k;
    return settled;
}

/* Brings a stream that resumes from an older id up to settled from the
 * log, a batch at a time; a tenant's stream reads at most EV_HUB_SPAN ids
 * a time (a job's stream reads its job's events by their index). Returns 1
 * when it has more to read. */
static int ev_catch_up(gw_events *ev, ev_stream *s, int64_t settled, int64_t now)
{
    if (s->cursor >= settled) {
        s->backlog = 0;
        return 0;
    }
    int64_t upto = s->job_id[0] || settled - s->cursor <= EV_HUB_SPAN ? settled
                                                                      : s->cursor + EV_HUB_SPAN;
    gw_event_row *rows;
    int n;
    if (gw_store_events_read(ev->app->store, s->cursor, upto, s->job_id[0] ? 0 : s->tenant_id,
                             s->job_id[0] ? s->job_id : NULL, EV_BATCH, &rows, &n) != 0)
        return 0; /* the next round tries again */
    for (int i = 0; i < n && !svc_sse_closed(s->sse); i++)
        ev__send(s, &rows[i], now);
    int more = n == EV_BATCH || upto < settled;
    if (n == EV_BATCH && rows[n - 1].id > s->cursor)
        s->cursor = rows[n - 1].id;
    else if (n < EV_BATCH)
        s->cursor = upto;
    if (s->cursor >= settled)
        s->backlog = 0;
    gw_event_rows_free(rows, n);
    return more;
}

void ev__to_catchup(gw_events *ev, ev_stream *s)
{
    pthread_mutex_lock(&ev->mu);
    s->next = ev->cu_incoming;
    ev->cu_incoming = s;
    pthread_cond_signal(&ev->cu_cv);
    pthread_mutex_unlock(&ev->mu);
}

void ev__to_hub(gw_events *ev, ev_stream *s)
{
    pthread_mutex_lock(&ev->mu);
    s->next = ev->incoming;
    ev->incoming = s;
    pthread_cond_signal(&ev->cv);
    pthread_mutex_unlock(&ev->mu);
}

void ev__keys_check(gw_events *ev, ev_stream *list)
{
    int n = 0;
    for (ev_stream *s = list; s; s = s->next)
        n += s->key_id > 0;
    if (n == 0)
        return;
    int64_t *ids = calloc((size_t)n, sizeof *ids);
    int *active = calloc((size_t)n, sizeof *active);
    int k = 0;
    for (ev_stream *s = list; ids && s; s = s->next)
        if (s->key_id > 0)
            ids[k++] = s->key_id;
    /* PostgreSQL unreachable: the streams go on until it answers (as
     * their keys would be accepted from the cache meanwhile) */
    if (ids && active && gw_store_keys_active(ev->app->store, ids, n, active) == 0) {
        k = 0;
        for (ev_stream *s = list; s; s = s->next) {
            if (s->key_id <= 0 || active[k++])
                continue;
            svc_sse_send(s->sse, NULL, "error",
                         "{\"error\":{\"code\":\"unauthenticated\",\"message\":\"the API key of "
                         "this stream was revoked\"}}");
            svc_sse_end(s->sse);
            s->key_id = 0;
        }
    }
    free(ids);
    free(active);
}

/* Hands every progress report queued so far to the live streams. */
static void ev_flush_progress(gw_events *ev, int64_t now)
{
    pthread_mutex_lock(&ev->mu);
    json_t *progress = ev->progress;
    ev->progress = json_array();
    pthread_mutex_unlock(&ev->mu);
    size_t i;
    const json_t *item;
    json_array_foreach(progress, i, item)
        ev_send_progress(ev, item, now);
    json_decref(progress);
}

/* One round: settles what it can, hands new events to live streams, and
 * catches up streams that resume. Returns 1 when there is more to do at
 * once, 2 when a horizon waits to settle. */
static int ev_round(gw_events *ev)
{
    int64_t last;
    uint64_t xmin, next;
    int64_t settled = ev->settled;
    if (gw_store_events_horizon(ev->app->store, &last, &xmin, &next) != 0)
        return 0;
    int64_t target = gw_event_horizon_step(&ev->horizon, settled, last, xmin, next);
    int more = 0;
    int64_t now = svc_now_mono_ms();
    /* A report queued before a job's end was committed goes out before it:
     * the last progress before succeeded. */
    ev_flush_progress(ev, now);
    if (!ev->streams)
        settled = target; /* nobody to hand them to */
    while (settled < target) {
        gw_event_row *rows;
        int n;
        if (gw_store_events_read(ev->app->store, settled, target, 0, NULL, EV_BATCH, &rows, &n) != 0)
            break;
        for (int i = 0; i < n; i++)
            for (ev_stream *s = ev->streams; s; s = s->next)
                if (!s->backlog)
                    ev__send(s, &rows[i], now);
        settled = n == EV_BATCH ? rows[n - 1].id : target;
        gw_event_rows_free(rows, n);
    }
    ev->settled = settled;
    atomic_store(&ev->settled_pub, settled);
    for (ev_stream **p = &ev->streams; *p;) {
        ev_stream *s = *p;
        if (s->backlog && !svc_sse_closed(s->sse) && !s->job_id[0] &&
            settled - s->cursor > EV_HUB_SPAN) {
            /* far behind: read by the catch-up thread, never here */
            *p = s->next;
            ev__to_catchup(ev, s);
            continue;
        }
        if (s->backlog && !svc_sse_closed(s->sse))
            more |= ev_catch_up(ev, s, settled, now);
        p = &s->next;
    }
    return more ? 1 : ev->horizon.ncand > 0 ? 2 : 0;
}

/* Heartbeats to quiet streams, and drops the streams that closed. */
static void ev_tend(gw_events *ev)
{
    int64_t now = svc_now_mono_ms();
    for (ev_stream **p = &ev->streams; *p;) {
        ev_stream *s = *p;
        if (s->end_ms && now >= s->end_ms)
            svc_sse_end(s->sse);
        if (!svc_sse_closed(s->sse) && now - s->last_write_ms >= ev->heartbeat_ms) {
            svc_sse_comment(s->sse, "ping");
            s->last_write_ms = now;
        }
        if (svc_sse_closed(s->sse)) {
            *p = s->next;
            ev__stream_free(ev, s);
        } else {
            p = &s->next;
        }
    }
}

/* One message to the other gateways: {"from", "progress"?}, a wake that
 * carries the progress recorded here since the last one. Takes progress. */
static void ev_publish(gw_events *ev, json_t *progress)
{
    json_t *m = json_pack("{s:s}", "from", ev->self);
    if (m && json_array_size(progress) > 0)
        json_object_set(m, "progress", progress);
    char *text = m ? json_dumps(m, JSON_COMPACT) : NULL;
    if (text) {
        const char *argv[3] = {"PUBLISH", GW_EVENTS_CHANNEL, text};
        freeReplyObject(gw_redis_argv(ev->redis, 3, argv, NULL));
    }
    free(text);
    json_decref(m);
    json_decref(progress);
}

/* The thread's clock: when each kind of work is due next. */
typedef struct ev_clock {
    int64_t next_poll, retry_at, next_publish;
} ev_clock;

/* What is due now; mu held. A gateway with no stream reads the log only
 * at poll intervals (to keep settled near), not on every wake, and still
 * publishes its wakes, at most every EV_PUBLISH_EVERY_MS. */
static int ev_due(gw_events *ev, const ev_clock *k, int64_t now, int *round, int *publish)
{
    int have = ev->streams || ev->incoming;
    if (!have)
        ev->woken = 0;
    *round = ev->incoming || ev->woken || now >= k->next_poll || (k->retry_at && now >= k->retry_at);
    *publish = (ev->publish || json_array_size(ev->progress_out) > 0) && now >= k->next_publish;
    return *round || *publish || json_array_size(ev->progress) > 0;
}

static void *ev_main(void *arg)
{
    gw_events *ev = arg;
    ev_clock k = {0};
    int round, publish;
    int64_t next_keys = svc_now_mono_ms() + ev->key_check_ms;
    pthread_mutex_lock(&ev->mu);
    while (!ev->stop) {
        int64_t now = svc_now_mono_ms();
        if (ev_due(ev, &k, now, &round, &publish)) {
            json_t *out = NULL;
            if (publish) {
                out = ev->progress_out;
                ev->progress_out = json_array();
                ev->publish = 0;
            }
            if (round)
                ev->woken = 0;
            while (ev->incoming) {
                ev_stream *s = ev->incoming;
                ev->incoming = s->next;
                s->next = ev->streams;
                ev->streams = s;
            }
            pthread_mutex_unlock(&ev->mu);
            if (publish) {
                ev_publish(ev, out);
                k.next_publish = now + EV_PUBLISH_EVERY_MS;
            }
            ev_flush_progress(ev, now);
            if (round) {
                int more = ev_round(ev);
                now = svc_now_mono_ms();
                k.next_poll = now + (int64_t)ev->poll_ms * (atomic_load(&ev->sub_up) ? EV_SAFETY_POLLS : 1);
                k.retry_at = more == 2 ? now + EV_RETRY_MS : 0;
                pthread_mutex_lock(&ev->mu);
                ev->woken |= more == 1;
                pthread_mutex_unlock(&ev->mu);
            }
            pthread_mutex_lock(&ev->mu);
        }
        pthread_mutex_unlock(&ev->mu);
        if (svc_now_mono_ms() >= next_keys) {
            ev__keys_check(ev, ev->streams);
            next_keys = svc_now_mono_ms() + ev->key_check_ms;
        }
        ev_tend(ev);
        pthread_mutex_lock(&ev->mu);
        now = svc_now_mono_ms();
        if (ev->stop || ev_due(ev, &k, now, &round, &publish))
            continue;
        int64_t until = now + EV_TICK_MS;
        if (k.next_poll < until)
            until = k.next_poll;
        if (k.retry_at && k.retry_at < until)
            until = k.retry_at;
        if ((ev->publish || json_array_size(ev->progress_out) > 0) && k.next_publish < until)
            until = k.next_publish;
        if (ev->streams && next_keys < until)
            until = next_keys;
        struct timespec ts = {.tv_sec = until / 1000, .tv_nsec = (long)(until % 1000) * 1000000L};
        pthread_cond_timedwait(&ev->cv, &ev->mu, &ts);
    }
    pthread_mutex_unlock(&ev->mu);
    return NULL;
}

/* ---- the Redis subscriber --------------------------------------------- */

static int ev_stopping(gw_events *ev)
{
    pthread_mutex_lock(&ev->mu);
    int stop = ev->stop;
    pthread_mutex_unlock(&ev->mu);
    return stop;
}

static void ev_wake(gw_events *ev, int publish)
{
    pthread_mutex_lock(&ev->mu);
    ev->woken = 1;
    ev->publish |= publish;
    pthread_cond_signal(&ev->cv);
    pthread_mutex_unlock(&ev->mu);
}

/* A message on the channel: one from another gateway wakes the thread,
 * with the progress it carries. */
static void ev_message(gw_events *ev, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || strcmp(r->element[0]->str, "message") != 0 ||
        r->element[2]->type != REDIS_REPLY_STRING)
        return;
    json_t *m = json_loadb(r->element[2]->str, r->element[2]->len, 0, NULL);
    const char *from = json_string_value(json_object_get(m, "from"));
    if (from && strcmp(from, ev->self) != 0) {
        pthread_mutex_lock(&ev->mu);
        json_array_extend(ev->progress, json_object_get(m, "progress"));
        ev->woken = 1;
        pthread_cond_signal(&ev->cv);
        pthread_mutex_unlock(&ev->mu);
    }
    json_decref(m);
}

/* Reads wakes until the connection fails or the gateway stops; the
 * socket is polled so that a stop is seen within EV_TICK_MS. */
static void ev_listen(gw_events *ev, redisContext *c)
{
    const char *argv[2] = {"SUBSCRIBE", GW_EVENTS_CHANNEL};
    redisReply *r = redisCommandArgv(c, 2, argv, NULL);
    int ok = r && r->type == REDIS_REPLY_ARRAY;
    freeReplyObject(r);
    if (!ok)
        return;
    atomic_store(&ev->sub_up, 1);
    ev_wake(ev, 0); /* what came while no wake could: read the log now */
    while (!ev_stopping(ev)) {
        /* What the reader holds already (it may have read past the
         * SUBSCRIBE answer) before waiting for more. */
        void *reply = NULL;
        while (redisGetReplyFromReader(c, &reply) == REDIS_OK && reply) {
            ev_message(ev, reply);
            freeReplyObject(reply);
            reply = NULL;
        }
        if (c->err)
            break;
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int n = poll(&p, 1, EV_TICK_MS);
        if (n < 0 && errno != EINTR)
            break;
        if (n > 0 && redisBufferRead(c) != REDIS_OK)
            break;
    }
    atomic_store(&ev->sub_up, 0);
}

static void *ev_sub_main(void *arg)
{
    gw_events *ev = arg;
    while (!ev_stopping(ev)) {
        redisContext *c = gw_redis_connect(ev->redis);
        if (c) {
            ev_listen(ev, c);
            redisFree(c);
        }
        for (int i = 0; i < 4 && !ev_stopping(ev); i++)
            svc_sleep_ms(EV_TICK_MS);
    }
    return NULL;
}

/* ---- life ------------------------------------------------------------- */

gw_events *gw_events_start(gw_app *app)
{
    gw_events *ev = calloc(1, sizeof(*ev));
    if (!ev)
        return NULL;
    ev->app = app;
    ev->heartbeat_ms = app->cfg.sse_heartbeat_s > 0 ? app->cfg.sse_heartbeat_s * 1000 : 15000;
    ev->poll_ms = app->cfg.events_poll_ms > 0 ? app->cfg.events_poll_ms : 500;
    ev->max_per_tenant = app->cfg.max_streams_per_tenant;
    pthread_mutex_init(&ev->mu, NULL);
    ev->progress = json_array();
    ev->progress_out = json_array();
    svc_cond_init_mono(&ev->cv);
    svc_cond_init_mono(&ev->cu_cv);
    /* a key revoked on any gateway is refused within the key cache's
     * period: streams and held waits opened with it end within it too */
    ev->key_check_ms = app->cfg.key_cache_ms > 0 ? app->cfg.key_cache_ms : 250;
    svc_random_hex(ev->self, 8);
    char err[256];
    gw_redis_opts ro = {.name = "events", .size = 1, .timeout_ms = 1000, .backoff_ms = 1000};
    if (!(ev->redis = gw_redis_open(app->cfg.redis_url, &ro, err, sizeof(err)))) {
        svc_error("events: %s", err);
        gw_events_free(ev);
        return NULL;
    }
    /* Streams opened from now on start after what is in the log now. */
    int64_t last = 0;
    uint64_t xmin, next;
    if (gw_store_events_horizon(app->store, &last, &xmin, &next) == 0)
        ev->settled = gw_event_horizon_step(&ev->horizon, 0, last, xmin, next);
    atomic_store(&ev->settled_pub, ev->settled);
    if (pthread_create(&ev->thread, NULL, ev_main, ev) != 0) {
        gw_events_free(ev);
        return NULL;
    }
    ev->threads = 1;
    if (pthread_create(&ev->sub_thread, NULL, ev_sub_main, ev) != 0) {
        gw_events_free(ev);
        return NULL;
    }
    ev->threads = 2;
    if (pthread_create(&ev->cu_thread, NULL, ev__catchup_main, ev) != 0) {
        gw_events_free(ev);
        return NULL;
    }
    ev->threads = 3;
    return ev;
}

void gw_events_stop(gw_events *ev)
{
    if (!ev)
        return;
    pthread_mutex_lock(&ev->mu);
    int was = ev->stop;
    ev->stop = 1;
    pthread_cond_broadcast(&ev->cv);
    pthread_cond_broadcast(&ev->cu_cv);
    pthread_mutex_unlock(&ev->mu);
    if (was)
        return;
    if (ev->threads >= 1)
        pthread_join(ev->thread, NULL);
    if (ev->threads >= 2)
        pthread_join(ev->sub_thread, NULL);
    if (ev->threads >= 3)
        pthread_join(ev->cu_thread, NULL);
    for (int pass = 0; pass < 4; pass++) {
        ev_stream **from[4] = {&ev->streams, &ev->incoming, &ev->cu_streams, &ev->cu_incoming};
        pthread_mutex_lock(&ev->mu);
        ev_stream *list = *from[pass];
        *from[pass] = NULL;
        pthread_mutex_unlock(&ev->mu);
        while (list) {
            ev_stream *s = list;
            list = s->next;
            ev__stream_free(ev, s);
        }
    }
}

void gw_events_free(gw_events *ev)
{
    if (!ev)
        return;
    gw_events_stop(ev);
    gw_redis_close(ev->redis);
    free(ev->counts);
    json_decref(ev->progress);
    json_decref(ev->progress_out);
    pthread_cond_destroy(&ev->cv);
    pthread_cond_destroy(&ev->cu_cv);
    pthread_mutex_destroy(&ev->mu);
    free(ev);
}

void gw_events_progress(gw_events *ev, gw_event_row *rows, int n)
{
    gw_events_live(ev, rows, n, "progress");
}

void gw_events_live(gw_events *ev, gw_event_row *rows, int n, const char *event)
{
    if (!ev) {
        gw_event_rows_free(rows, n);
        return;
    }
    pthread_mutex_lock(&ev->mu);
    for (int i = 0; i < n; i++) {
        json_t *item = json_pack("{s:I, s:O, s:s}", "tenant_id", (json_int_t)rows[i].tenant_id,
                                 "data", rows[i].data, "event", event);
        json_array_append(ev->progress, item);
        json_array_append_new(ev->progress_out, item);
    }
    ev->woken = 1;
    pthread_cond_signal(&ev->cv);
    pthread_mutex_unlock(&ev->mu);
    gw_event_rows_free(rows, n);
}

void gw_events_written(gw_events *ev)
{
    if (ev)
        ev_wake(ev, 1);
}

void gw_events_open(gw_events *ev, svc_req *req, int64_t tenant_id, int64_t key_id,
                    const char *job_id, const gw_event_filter *f, int64_t after, int duration_s)
{
    ev_stream *s = calloc(1, sizeof(*s));
    if (!s) {
        svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
        return;
    }
    pthread_mutex_lock(&ev->mu);
    int stop = ev->stop;
    ev_count *c = stop ? NULL : ev_count_of(ev, tenant_id);
    int over = c && ev->max_per_tenant > 0 && c->n >= ev->max_per_tenant;
    if (c && !over)
        c->n++;
    pthread_mutex_unlock(&ev->mu);
    if (stop || !c || over) {
        free(s);
        if (over)
            gw_reply_too_many(req, "rate_limited", 1,
                              "this tenant has %d event streams open, the most it may", ev->max_per_tenant);
        else
            gw_reply_unavailable(req, "the event stream");
        return;
    }
    s->tenant_id = tenant_id;
    s->key_id = key_id;
    if (job_id)
        snprintf(s->job_id, sizeof(s->job_id), "%s", job_id);
    if (f)
        s->f = *f;
    /* Without a resume point a job's stream tells its story from the
     * start. The thread catches the stream up from the log. */
    s->cursor = after >= 0 ? after : 0;
    s->backlog = 1;
    s->last_write_ms = svc_now_mono_ms();
    if (duration_s > 0)
        s->end_ms = s->last_write_ms + (int64_t)duration_s * 1000;
    if (!(s->sse = svc_sse_open(req, 0))) {
        pthread_mutex_lock(&ev->mu);
        c = ev_count_of(ev, tenant_id);
        if (c && c->n > 0)
            c->n--;
        pthread_mutex_unlock(&ev->mu);
        free(s);
        return;
    }
    svc_sse_comment(s->sse, "stream open");
    pthread_mutex_lock(&ev->mu);
    s->next = ev->incoming;
    ev->incoming = s;
    pthread_cond_signal(&ev->cv);
    pthread_mutex_unlock(&ev->mu);
}
