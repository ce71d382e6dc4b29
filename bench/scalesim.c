/* scalesim.c — kl-scalesim: many simulated compute nodes in one process, or
 * a fast submitter of prepared jobs, for the cluster-scale bench (issue 20,
 * bench/scale.sh).
 *
 *   kl-scalesim nodes --gateway URL --nodes N [--gpus G] [--time-factor F] ...
 *     registers N nodes of G GPUs on the gateway's cluster listener (the
 *     cluster token from KOWLOON_CLUSTER_TOKEN; each node then uses the
 *     credential its registration gave it), heartbeats with device state,
 *     holds one lease poll per node, "runs" each sleep run for
 *     params.seconds / F, meets its gang at the gateway's rendezvous (rank 0
 *     puts the key, the others get it) and reports results, batched as the
 *     real node does. Runs until SIGTERM/SIGINT (or --duration-s), then
 *     deregisters its nodes and writes --runs (one line per run part) and
 *     --summary (counts, over-commits, its own CPU and RSS).
 *   kl-scalesim submit --url URL --jobs FILE [--concurrency C] --out FILE
 *     posts each line "API_KEY<TAB>JSON body" of FILE to POST /v1/jobs,
 *     C at a time, and writes "line<TAB>status<TAB>job id<TAB>epoch ms".
 *
 * One thread: libcurl's multi interface driven by epoll (curl_multi_socket_
 * action), so that a thousand nodes' long polls cost nothing while they
 * wait; node timers (beats, run ends, rendezvous retries) are looked at
 * every few ms. */
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "scalesim.h"

#define TICK_MS 5
#define REGISTER_CONCURRENCY 32
#define LEASE_WAIT_MS 10000
#define REPORT_GAP_MS 2
#define BACKOFF_MS 500

typedef enum { X_REGISTER, X_BEAT, X_LEASE, X_RESULTS, X_RDV_PUT, X_RDV_GET, X_LEAVE, X_SUBMIT } xkind;
static const char *const xnames[] = {"register", "heartbeat", "lease", "results",
                                     "rdv_put",  "rdv_get",   "leave", "submit"};
#define NKINDS 8

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

typedef struct xfer {
    CURL *e;
    int mi;                   /* its multi handle (S.multi) */
    xkind kind;
    int node, line;
    ss_run *run;              /* rendezvous: the part it is for */
    char job_id[37];          /* ... and which (the entry may be reused) */
    int attempt;
    struct curl_slist *hdrs;
    char *body;
    buf resp;
} xfer;

typedef struct sim_node {
    ss_node n;
    char name[64], id[64], cred[128], auth[160];
    int registered, reg_busy, beat_busy, lease_busy, res_busy, leaving;
    int64_t next_reg, next_beat, next_lease, next_res;
    int nreport;               /* ended runs in flight in a report */
} sim_node;

/* libcurl keeps a host's idle connections in one list and walks it for
 * every new exchange to that host (7.88; inferred, its symbols stripped,
 * from what this removed): with every
 * node's exchange going to one gateway address, a list of ~2,000
 * connections (1,000 held lease polls and the rest) was walked ~1,500
 * times a second, half of the simulator's CPU (perf). The nodes' exchanges
 * are spread over this many host names that all resolve to the gateway. */
#define SIM_HOSTS 256

/* libcurl 7.88's curl_multi_remove_handle walks every connection its
 * multi handle keeps (to close connect-only ones, once an exchange left a
 * connection to reuse: every exchange here), 4.4 % of the whole machine
 * at the 1,000-node ceiling, the simulator's largest item (perf). The
 * exchanges are spread over this many multi handles, by node (submits in
 * turn), each with its own connections, so that each walk is this many
 * times shorter. */
#define SIM_MULTIS 16
/* Easy handles kept for reuse per multi handle: a new one allocates
 * its buffers again (_int_malloc, 3 % of the machine). */
#define SIM_SPARE 64

static struct {
    CURLM *multi[SIM_MULTIS];
    int64_t curl_deadline[SIM_MULTIS];  /* mono ms; -1 none */
    CURL *spare[SIM_MULTIS][SIM_SPARE];
    int nspare[SIM_MULTIS];
    int ep;
    volatile sig_atomic_t stop;
    /* The nodes' exchanges go to the gateway under SIM_HOSTS names (see
     * node_hosts, ss_gw_host): host_base[k] the URL prefix of name k, resolve[k] its
     * CURLOPT_RESOLVE entry; nhosts 0 when the gateway's URL is not
     * http://<IPv4>:<port>. */
    int nhosts;
    size_t gw_len;
    char host_base[SIM_HOSTS][64];
    struct curl_slist *resolve[SIM_HOSTS];
    /* nodes */
    char gw[512], token[256], model[64], prefix[32];
    sim_node *nodes;
    int nnodes, gpus, hb_ms;
    int rdv_timeout_ms;   /* --rdv-timeout-s: a gang part's wait for its rendezvous */
    int64_t mem_bytes;
    double factor;
    int reg_inflight;
    FILE *runs_out;
    /* submit */
    char url[512];
    FILE *jobs_in, *ids_out;
    int conc, inflight, lines, eof;
    /* counts */
    long sent[NKINDS], failed[NKINDS], status_other[NKINDS];
    long runs_taken, runs_ended, runs_refused, cancels, rdv_failed, submitted_ok;
    long overcommit_runs, slot_overcommits;
} S;

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static size_t on_data(char *p, size_t sz, size_t nm, void *arg)
{
    buf *b = arg;
    size_t n = sz * nm;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *q = realloc(b->p, cap);
        if (!q)
            return 0;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = '\0';
    return n;
}

/* ------------------------------------------------------------ curl + epoll */

static int on_socket(CURL *e, curl_socket_t s, int what, void *u, void *sockp)
{
    (void)e;
    int mi = (int)(intptr_t)u;
    /* the multi handle in the high half, the socket in the low one */
    struct epoll_event ev = {.data.u64 = (uint64_t)mi << 32 | (uint32_t)s};
    if (what == CURL_POLL_REMOVE) {
        epoll_ctl(S.ep, EPOLL_CTL_DEL, s, NULL);
        return 0;
    }
    ev.events = (what & CURL_POLL_IN ? EPOLLIN : 0) | (what & CURL_POLL_OUT ? EPOLLOUT : 0);
    if (!sockp) {
        if (epoll_ctl(S.ep, EPOLL_CTL_ADD, s, &ev) != 0 && errno == EEXIST)
            epoll_ctl(S.ep, EPOLL_CTL_MOD, s, &ev);
        curl_multi_assign(S.multi[mi], s, (void *)1);
    } else if (epoll_ctl(S.ep, EPOLL_CTL_MOD, s, &ev) != 0 && errno == ENOENT) {
        epoll_ctl(S.ep, EPOLL_CTL_ADD, s, &ev);
    }
    return 0;
}

static int on_timer(CURLM *m, long ms, void *u)
{
    (void)m;
    int mi = (int)(intptr_t)u;
    S.curl_deadline[mi] = ms < 0 ? -1 : mono_ms() + ms;
    return 0;
}

/* Starts an exchange: method, url, bearer (NULL: none), JSON body (stolen;
 * NULL: none) or raw bytes. */
static xfer *start(xkind kind, int node, const char *method, const char *url, const char *auth,
                   json_t *body, const void *raw, size_t rawlen, long timeout_ms)
{
    xfer *x = calloc(1, sizeof(*x));
    if (!x) {
        json_decref(body);
        return NULL;
    }
    x->kind = kind;
    x->node = node;
    static unsigned rr;
    x->mi = node >= 0 ? node % SIM_MULTIS : (int)(rr++ % SIM_MULTIS);
    x->e = S.nspare[x->mi] > 0 ? S.spare[x->mi][--S.nspare[x->mi]] : curl_easy_init();
    if (auth)
        x->hdrs = curl_slist_append(x->hdrs, auth);
    x->hdrs = curl_slist_append(x->hdrs, "Expect:");
    if (body) {
        x->body = json_dumps(body, JSON_COMPACT);
        json_decref(body);
        x->hdrs = curl_slist_append(x->hdrs, "Content-Type: application/json");
        curl_easy_setopt(x->e, CURLOPT_POSTFIELDS, x->body);
    } else if (raw) {
        x->body = malloc(rawlen + 1);
        memcpy(x->body, raw, rawlen);
        x->hdrs = curl_slist_append(x->hdrs, "Content-Type: application/octet-stream");
        curl_easy_setopt(x->e, CURLOPT_POSTFIELDS, x->body);
        curl_easy_setopt(x->e, CURLOPT_POSTFIELDSIZE, (long)rawlen);
    }
    curl_easy_setopt(x->e, CURLOPT_CUSTOMREQUEST, method);
    char spread[1024];
    if (node >= 0 && S.nhosts > 0 && strncmp(url, S.gw, S.gw_len) == 0) {
        int k = node % S.nhosts;
        snprintf(spread, sizeof spread, "%s%s", S.host_base[k], url + S.gw_len);
        url = spread;
        curl_easy_setopt(x->e, CURLOPT_RESOLVE, S.resolve[k]);
    }
    curl_easy_setopt(x->e, CURLOPT_URL, url);
    curl_easy_setopt(x->e, CURLOPT_HTTPHEADER, x->hdrs);
    curl_easy_setopt(x->e, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(x->e, CURLOPT_WRITEDATA, &x->resp);
    curl_easy_setopt(x->e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(x->e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(x->e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->e, CURLOPT_TCP_NODELAY, 1L);
    S.sent[kind]++;
    curl_multi_add_handle(S.multi[x->mi], x->e);
    return x;
}

static void xfer_free(xfer *x)
{
    curl_multi_remove_handle(S.multi[x->mi], x->e);
    if (S.nspare[x->mi] < SIM_SPARE) {
        curl_easy_reset(x->e);
        S.spare[x->mi][S.nspare[x->mi]++] = x->e;
    } else {
        curl_easy_cleanup(x->e);
    }
    curl_slist_free_all(x->hdrs);
    free(x->body);
    free(x->resp.p);
    free(x);
}

/* ------------------------------------------------------------ nodes */

static void node_url(char *out, size_t len, const sim_node *sn, const char *what)
{
    snprintf(out, len, "%s/v1/cluster/nodes/%s/%s", S.gw, sn->id, what);
}

static void unregister(sim_node *sn)
{
    sn->registered = 0;
    sn->next_reg = mono_ms() + BACKOFF_MS;
}

static void do_register(int i)
{
    sim_node *sn = &S.nodes[i];
    char url[700], auth[300];
    snprintf(url, sizeof url, "%s/v1/cluster/nodes/register", S.gw);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", S.token);
    json_t *b = ss_register_json(&sn->n, sn->name, S.model, S.mem_bytes);
    if (sn->cred[0])
        json_object_set_new(b, "credential", json_string(sn->cred));
    sn->reg_busy = 1;
    S.reg_inflight++;
    start(X_REGISTER, i, "POST", url, auth, b, NULL, 0, 10000);
}

static void do_beat(int i)
{
    sim_node *sn = &S.nodes[i];
    char url[700];
    node_url(url, sizeof url, sn, "heartbeat");
    sn->beat_busy = 1;
    start(X_BEAT, i, "POST", url, sn->auth, ss_heartbeat_json(&sn->n, S.mem_bytes), NULL, 0, 5000);
}

static void do_lease(int i)
{
    sim_node *sn = &S.nodes[i];
    char url[700];
    node_url(url, sizeof url, sn, "lease");
    int free_slots = sn->n.slots - ss_node_active(&sn->n);
    json_t *b = json_pack("{s:i, s:i, s:I}", "max", free_slots < 0 ? 0 : free_slots, "wait_ms",
                          LEASE_WAIT_MS, "seq", (json_int_t)sn->n.seq);
    sn->lease_busy = 1;
    start(X_LEASE, i, "POST", url, sn->auth, b, NULL, 0, LEASE_WAIT_MS + 15000);
}

static void do_results(int i)
{
    sim_node *sn = &S.nodes[i];
    json_t *res = json_array();
    for (int k = 0; k < SS_MAX_RUNS; k++)
        if (sn->n.runs[k].state == SS_ENDED)
            json_array_append_new(res, ss_report_json(&sn->n.runs[k], S.model));
    if (json_array_size(res) == 0) {
        json_decref(res);
        return;
    }
    char url[700];
    node_url(url, sizeof url, sn, "results");
    int free_slots = sn->n.slots - ss_node_active(&sn->n);
    json_t *b = json_pack("{s:i, s:I, s:o}", "free", free_slots < 0 ? 0 : free_slots, "seq",
                          (json_int_t)sn->n.seq, "results", res);
    sn->res_busy = 1;
    start(X_RESULTS, i, "POST", url, sn->auth, b, NULL, 0, 30000);
}

static void do_rdv(int i, ss_run *r)
{
    sim_node *sn = &S.nodes[i];
    char url[800], key[64];
    int put;
    if (!ss_rdv_next(r, &put, key, sizeof key)) {
        ss_run_start(r, wall_ms());
        return;
    }
    snprintf(url, sizeof url, "%s/v1/cluster/rendezvous/%s/%d/%s", S.gw, r->job_id, r->attempt, key);
    static const char uid[128] = "kl-scalesim unique id";
    r->rdv_busy = 1;
    xfer *x = put ? start(X_RDV_PUT, i, "PUT", url, sn->auth, NULL, uid, sizeof uid, 5000)
                  : start(X_RDV_GET, i, "GET", url, sn->auth, NULL, NULL, 0, 5000);
    if (x) {
        x->run = r;
        memcpy(x->job_id, r->job_id, 37);
        x->attempt = r->attempt;
    }
}

/* One line per run part that ended: what the bench's report reads. */
static void log_run(int i, const ss_run *r)
{
    if (!S.runs_out)
        return;
    fprintf(S.runs_out, "%s\t%d\t%d\t%d\t%d\t%d\t%lld\t%lld\t%lld\t%lld\t%d\t%s\t%.3f\n", r->job_id,
            r->attempt, i, r->node_rank, r->nodes, r->ngpu, (long long)r->t_lease,
            (long long)r->t_start, (long long)r->t_end, (long long)r->runnable, r->overcommit,
            r->cancelled ? "cancelled" : r->failed ? "failed" : "succeeded", r->seconds);
}

static void end_run(int i, ss_run *r, int64_t now)
{
    sim_node *sn = &S.nodes[i];
    ss_node_end(&sn->n, r, now);
    S.runs_ended++;
    log_run(i, r);
    if (sn->next_res < mono_ms())
        sn->next_res = mono_ms();
}

static void take_lease(int i, json_t *reply)
{
    sim_node *sn = &S.nodes[i];
    int64_t now = wall_ms();
    size_t k;
    json_t *j;
    json_array_foreach(json_object_get(reply, "runs"), k, j) {
        ss_run r;
        char err[128];
        if (ss_run_parse(j, &r, err, sizeof err) != 0) {
            fprintf(stderr, "kl-scalesim: node %s: a run it cannot take: %s\n", sn->name, err);
            S.runs_refused++;
            continue;
        }
        ss_run *got = ss_node_take(&sn->n, &r, now);
        if (!got) {
            fprintf(stderr, "kl-scalesim: node %s: job %s attempt %d refused: all %d run entries held\n",
                    sn->name, r.job_id, r.attempt, SS_MAX_RUNS);
            S.runs_refused++;
            continue;
        }
        S.runs_taken++;
        S.overcommit_runs += got->overcommit > 0;
    }
    json_array_foreach(json_object_get(reply, "cancel"), k, j) {
        ss_run *r = ss_node_find(&sn->n, json_string_value(json_object_get(j, "job_id")) ?: "",
                                 (int)json_integer_value(json_object_get(j, "attempt")));
        S.cancels++;
        if (r && (r->state == SS_RUNNING || r->state == SS_RDV)) {
            r->cancelled = 1;
            end_run(i, r, now);
        }
    }
}

static void done(xfer *x, CURLcode cc)
{
    long status = 0;
    curl_easy_getinfo(x->e, CURLINFO_RESPONSE_CODE, &status);
    if (cc != CURLE_OK)
        S.failed[x->kind]++;
    else if (status != 200 && status != 201 && status != 202)
        S.status_other[x->kind]++;
    json_t *reply = x->resp.p ? json_loads(x->resp.p, 0, NULL) : NULL;
    int64_t mnow = mono_ms();
    sim_node *sn = x->kind == X_SUBMIT ? NULL : &S.nodes[x->node];
    switch (x->kind) {
    case X_REGISTER: {
        sn->reg_busy = 0;
        S.reg_inflight--;
        const char *id = json_string_value(json_object_get(reply, "id"));
        const char *cred = json_string_value(json_object_get(reply, "credential"));
        if (status == 200 && id && (cred || sn->cred[0])) {
            snprintf(sn->id, sizeof sn->id, "%s", id);
            if (cred)
                snprintf(sn->cred, sizeof sn->cred, "%s", cred);
            snprintf(sn->auth, sizeof sn->auth, "Authorization: Bearer %s", sn->cred);
            sn->registered = 1;
            int hb = (int)json_integer_value(json_object_get(reply, "heartbeat_s")) * 1000;
            if (hb > 0 && (S.hb_ms <= 0 || hb < S.hb_ms))
                S.hb_ms = hb;
            sn->next_beat = mnow + rand() % (S.hb_ms > 0 ? S.hb_ms : 2000);
            sn->next_lease = mnow;
        } else {
            sn->next_reg = mnow + BACKOFF_MS + rand() % BACKOFF_MS;
        }
        break;
    }
    case X_BEAT:
        sn->beat_busy = 0;
        if (status == 404 || status == 401)
            unregister(sn);
        break;
    case X_LEASE:
        sn->lease_busy = 0;
        if (status == 200 && reply && !sn->leaving) {
            take_lease(x->node, reply);
            sn->next_lease = mnow;
        } else {
            if (status == 404 || status == 401)
                unregister(sn);
            sn->next_lease = mnow + BACKOFF_MS;
        }
        break;
    case X_RESULTS: {
        sn->res_busy = 0;
        size_t k;
        json_t *rid;
        json_array_foreach(json_object_get(reply, "recorded"), k, rid) {
            const char *s = json_string_value(rid), *dot = s ? strrchr(s, '.') : NULL;
            if (!dot || dot - s != 36)
                continue;
            char job[37];
            memcpy(job, s, 36);
            job[36] = '\0';
            ss_run *r = ss_node_find(&sn->n, job, atoi(dot + 1));
            if (r && r->state == SS_ENDED)
                ss_node_forget(&sn->n, r);
        }
        sn->next_res = status == 200 ? mnow + REPORT_GAP_MS : mnow + BACKOFF_MS;
        /* a report freed slots: a poll held with max 0 must learn it */
        break;
    }
    case X_RDV_PUT:
    case X_RDV_GET: {
        ss_run *r = x->run;
        /* the entry still holds the part this exchange was for */
        if (r->state != SS_RDV || r->attempt != x->attempt || strcmp(r->job_id, x->job_id) != 0)
            break;
        r->rdv_busy = 0;
        int64_t now = wall_ms();
        if (status == 200) {
            /* the next step at once; after the last, the part starts */
            r->rdv_step++;
            r->rdv_next = now;
            r->rdv_nap = 2;
            int put;
            char key[64];
            if (!ss_rdv_next(r, &put, key, sizeof key))
                ss_run_start(r, now);
        } else if (status == 409 || now - r->t_lease > S.rdv_timeout_ms) {
            fprintf(stderr, "kl-scalesim: node %s: job %s attempt %d rank %d: rendezvous failed "
                    "(%s %ld after %lld ms)\n", S.nodes[x->node].name, r->job_id, r->attempt,
                    r->node_rank, x->kind == X_RDV_PUT ? "PUT" : "GET", status,
                    (long long)(now - r->t_lease));
            r->failed = 1;
            S.rdv_failed++;
            end_run(x->node, r, now);
        } else {
            r->rdv_next = now + r->rdv_nap;
            r->rdv_nap = r->rdv_nap * 2 > 50 ? 50 : r->rdv_nap * 2;
        }
        break;
    }
    case X_LEAVE:
        sn->leaving = 2;
        break;
    case X_SUBMIT: {
        S.inflight--;
        const char *id = json_string_value(json_object_get(reply, "id"));
        S.submitted_ok += id != NULL;
        fprintf(S.ids_out, "%d\t%ld\t%s\t%lld\n", x->line, status, id ? id : "-", (long long)wall_ms());
        break;
    }
    }
    json_decref(reply);
    xfer_free(x);
}

static void drain_done(void)
{
    CURLMsg *msg;
    int left;
    for (int mi = 0; mi < SIM_MULTIS; mi++)
        while ((msg = curl_multi_info_read(S.multi[mi], &left)))
            if (msg->msg == CURLMSG_DONE) {
                xfer *x;
                curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
                done(x, msg->data.result);
            }
}

/* Everything a node does on its own clock. */
static void tick_nodes(void)
{
    int64_t mnow = mono_ms(), now = wall_ms();
    for (int i = 0; i < S.nnodes; i++) {
        sim_node *sn = &S.nodes[i];
        if (sn->leaving)
            continue;
        if (!sn->registered) {
            if (!sn->reg_busy && mnow >= sn->next_reg && S.reg_inflight < REGISTER_CONCURRENCY)
                do_register(i);
            continue;
        }
        for (int k = 0; k < SS_MAX_RUNS; k++) {
            ss_run *r = &sn->n.runs[k];
            if (r->state == SS_RUNNING && now >= r->t_start + ss_duration_ms(r->seconds, S.factor))
                end_run(i, r, now);
            else if (r->state == SS_RDV && !r->rdv_busy && now >= r->rdv_next) {
                if (now - r->t_lease > S.rdv_timeout_ms) {
                    fprintf(stderr, "kl-scalesim: node %s: job %s attempt %d rank %d: no rendezvous "
                            "within %d ms\n", sn->name, r->job_id, r->attempt, r->node_rank,
                            S.rdv_timeout_ms);
                    r->failed = 1;
                    S.rdv_failed++;
                    end_run(i, r, now);
                } else {
                    do_rdv(i, r);
                }
            }
        }
        if (!sn->res_busy && mnow >= sn->next_res)
            do_results(i);
        if (!sn->beat_busy && mnow >= sn->next_beat) {
            do_beat(i);
            sn->next_beat = mnow + (S.hb_ms > 0 ? S.hb_ms : 2000);
        }
        if (!sn->lease_busy && mnow >= sn->next_lease)
            do_lease(i);
    }
}

/* ------------------------------------------------------------ submit */

static void tick_submit(void)
{
    char *line = NULL;
    size_t cap = 0;
    while (!S.eof && S.inflight < S.conc) {
        ssize_t n = getline(&line, &cap, S.jobs_in);
        if (n <= 0) {
            S.eof = 1;
            break;
        }
        S.lines++;
        if (line[n - 1] == '\n')
            line[--n] = '\0';
        char *tab = strchr(line, '\t');
        if (!tab)
            continue;
        *tab = '\0';
        char url[600], auth[300];
        snprintf(url, sizeof url, "%s/v1/jobs", S.url);
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", line);
        json_t *b = json_loads(tab + 1, 0, NULL);
        if (!b) {
            fprintf(S.ids_out, "%d\t0\t-\t%lld\n", S.lines, (long long)wall_ms());
            continue;
        }
        xfer *x = start(X_SUBMIT, -1, "POST", url, auth, b, NULL, 0, 60000);
        if (x) {
            x->line = S.lines;
            S.inflight++;
        }
    }
    free(line);
}

/* ------------------------------------------------------------ loop */

static void on_signal(int sig)
{
    (void)sig;
    S.stop = 1;
}

/* Runs the loop until until() says so; each_tick after every wake. */
static void loop(int (*until)(void), void (*each_tick)(void))
{
    struct epoll_event ev[256];
    int running;
    int64_t next_tick = 0;
    while (!until()) {
        int64_t now = mono_ms();
        int64_t wait = next_tick - now;
        for (int mi = 0; mi < SIM_MULTIS; mi++)
            if (S.curl_deadline[mi] >= 0 && S.curl_deadline[mi] - now < wait)
                wait = S.curl_deadline[mi] - now;
        if (wait < 0)
            wait = 0;
        int n = epoll_wait(S.ep, ev, 256, (int)wait);
        for (int i = 0; i < n; i++) {
            int f = (ev[i].events & EPOLLIN ? CURL_CSELECT_IN : 0) |
                    (ev[i].events & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
                    (ev[i].events & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
            curl_multi_socket_action(S.multi[ev[i].data.u64 >> 32],
                                     (curl_socket_t)(uint32_t)ev[i].data.u64, f, &running);
        }
        now = mono_ms();
        for (int mi = 0; mi < SIM_MULTIS; mi++)
            if (S.curl_deadline[mi] >= 0 && now >= S.curl_deadline[mi]) {
                S.curl_deadline[mi] = -1;
                curl_multi_socket_action(S.multi[mi], CURL_SOCKET_TIMEOUT, 0, &running);
            }
        drain_done();
        if (now >= next_tick) {
            each_tick();
            next_tick = now + TICK_MS;
        }
    }
}

static int64_t stop_at;
static int nodes_until(void)
{
    return S.stop || (stop_at && mono_ms() >= stop_at);
}

static int leaving_until(void)
{
    if (mono_ms() >= stop_at)
        return 1;
    for (int i = 0; i < S.nnodes; i++)
        if (S.nodes[i].leaving == 1)
            return 0;
    return 1;
}
static void no_tick(void)
{
}

static int submit_until(void)
{
    return S.stop || (S.eof && S.inflight == 0);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: kl-scalesim nodes --gateway URL --nodes N [--gpus 8] [--gpu-mem-gb 80]\n"
            "         [--model NAME] [--time-factor 1] [--prefix sim] [--duration-s S]\n"
            "         [--runs FILE] [--summary FILE] [--stats-s 5] [--rdv-timeout-s 30]\n"
            "         (token: KOWLOON_CLUSTER_TOKEN)\n"
            "       kl-scalesim submit --url URL --jobs FILE [--concurrency 64] --out FILE\n");
}

static void summary(FILE *f, double wall_s)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    int reg = 0, busy = 0;
    long oc = 0, soc = 0;
    for (int i = 0; i < S.nnodes; i++) {
        reg += S.nodes[i].registered;
        for (int g = 0; g < S.nodes[i].n.ngpus; g++)
            busy += S.nodes[i].n.gpu_busy[g] > 0;
        oc += S.nodes[i].n.overcommits;
        soc += S.nodes[i].n.slot_overcommits;
    }
    fprintf(f, "{\"nodes\": %d, \"registered\": %d, \"gpus_per_node\": %d, \"busy_gpus\": %d, "
               "\"runs_taken\": %ld, \"runs_ended\": %ld, \"runs_refused\": %ld, \"cancels\": %ld, "
               "\"rdv_failed\": %ld, \"overcommit_runs\": %ld, \"slot_overcommits\": %ld, "
               "\"submitted_ok\": %ld, \"cpu_s\": %.3f, \"wall_s\": %.3f, \"maxrss_kb\": %ld, "
               "\"heartbeat_ms\": %d, \"requests\": {",
            S.nnodes, reg, S.gpus, busy, S.runs_taken, S.runs_ended, S.runs_refused, S.cancels,
            S.rdv_failed, oc, soc, S.submitted_ok,
            ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6,
            wall_s, ru.ru_maxrss, S.hb_ms);
    for (int k = 0; k < NKINDS; k++)
        fprintf(f, "%s\"%s\": {\"sent\": %ld, \"transport_errors\": %ld, \"other_status\": %ld}",
                k ? ", " : "", xnames[k], S.sent[k], S.failed[k], S.status_other[k]);
    fprintf(f, "}}\n");
}

/* The gateway under SIM_HOSTS names (ss_gw_host); none when --gateway is
 * not http://<IPv4>:<port>. */
static void node_hosts(void)
{
    for (int k = 0; k < SIM_HOSTS; k++) {
        char entry[128];
        if (ss_gw_host(S.gw, k, S.host_base[k], sizeof S.host_base[k], entry, sizeof entry) != 0 ||
            !(S.resolve[k] = curl_slist_append(NULL, entry)))
            return;
        S.nhosts = k + 1;
    }
    S.gw_len = strlen(S.gw);
}

static const char *arg_of(int argc, char **argv, const char *name, const char *def)
{
    for (int i = 2; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return argv[i + 1];
    return def;
}

static int run_nodes(int argc, char **argv)
{
    const char *gw = arg_of(argc, argv, "--gateway", NULL), *tok = getenv("KOWLOON_CLUSTER_TOKEN");
    if (!gw || !tok) {
        usage();
        return 2;
    }
    snprintf(S.gw, sizeof S.gw, "%s", gw);
    node_hosts();
    snprintf(S.token, sizeof S.token, "%s", tok);
    snprintf(S.model, sizeof S.model, "%s", arg_of(argc, argv, "--model", "Sim H100 80GB"));
    snprintf(S.prefix, sizeof S.prefix, "%s", arg_of(argc, argv, "--prefix", "sim"));
    S.nnodes = atoi(arg_of(argc, argv, "--nodes", "1"));
    S.gpus = atoi(arg_of(argc, argv, "--gpus", "8"));
    S.mem_bytes = (int64_t)(atof(arg_of(argc, argv, "--gpu-mem-gb", "80")) * (1 << 30));
    S.factor = atof(arg_of(argc, argv, "--time-factor", "1"));
    double dur = atof(arg_of(argc, argv, "--duration-s", "0"));
    double stats_s = atof(arg_of(argc, argv, "--stats-s", "5"));
    /* as long as a node waits by default (--dist-timeout-s) */
    S.rdv_timeout_ms = (int)(atof(arg_of(argc, argv, "--rdv-timeout-s", "30")) * 1000);
    const char *runs = arg_of(argc, argv, "--runs", NULL), *sum = arg_of(argc, argv, "--summary", NULL);
    if (S.nnodes < 1 || S.gpus < 1 || S.gpus > SS_MAX_GPUS || S.factor <= 0 || S.rdv_timeout_ms <= 0) {
        usage();
        return 2;
    }
    if (runs && !(S.runs_out = fopen(runs, "w"))) {
        perror(runs);
        return 2;
    }
    S.nodes = calloc((size_t)S.nnodes, sizeof(*S.nodes));
    for (int i = 0; i < S.nnodes; i++) {
        sim_node *sn = &S.nodes[i];
        snprintf(sn->name, sizeof sn->name, "%s-%04d", S.prefix, i);
        sn->n.ngpus = S.gpus;
        sn->n.slots = S.gpus;
        int64_t t0 = wall_ms();
        for (int g = 0; g < S.gpus; g++)
            sn->n.gpu_free_since[g] = t0;
    }
    int64_t t0 = mono_ms(), next_stats = t0;
    stop_at = dur > 0 ? t0 + (int64_t)(dur * 1000) : 0;
    int64_t saved_stop = stop_at;
    /* stats: the loop returns every stats period to print a line */
    for (;;) {
        next_stats += (int64_t)(stats_s * 1000);
        stop_at = saved_stop && saved_stop < next_stats ? saved_stop : next_stats;
        loop(nodes_until, tick_nodes);
        if (S.stop || (saved_stop && mono_ms() >= saved_stop))
            break;
        int reg = 0, busy = 0, active = 0;
        for (int i = 0; i < S.nnodes; i++) {
            reg += S.nodes[i].registered;
            active += ss_node_active(&S.nodes[i].n);
            for (int g = 0; g < S.gpus; g++)
                busy += S.nodes[i].n.gpu_busy[g] > 0;
        }
        fprintf(stderr, "kl-scalesim: t=%.0fs registered=%d active_runs=%d busy_gpus=%d/%d taken=%ld ended=%ld "
                        "overcommit=%ld beats=%ld leases=%ld errors=%ld\n",
                (mono_ms() - t0) / 1000.0, reg, active, busy, S.nnodes * S.gpus, S.runs_taken,
                S.runs_ended, S.overcommit_runs, S.sent[X_BEAT], S.sent[X_LEASE],
                S.failed[X_BEAT] + S.failed[X_LEASE] + S.failed[X_RESULTS]);
    }
    double wall = (mono_ms() - t0) / 1000.0;
    /* Runs still going are written as ending now, state "running": the
     * bench counts their GPU time up to the stop. */
    int64_t end = wall_ms();
    for (int i = 0; S.runs_out && i < S.nnodes; i++)
        for (int k = 0; k < SS_MAX_RUNS; k++) {
            ss_run r = S.nodes[i].n.runs[k];
            if (r.state != SS_RUNNING && r.state != SS_RDV)
                continue;
            if (r.state == SS_RDV)
                r.t_start = end;
            r.t_end = end;
            fprintf(S.runs_out, "%s\t%d\t%d\t%d\t%d\t%d\t%lld\t%lld\t%lld\t%lld\t%d\trunning\t%.3f\n",
                    r.job_id, r.attempt, i, r.node_rank, r.nodes, r.ngpu, (long long)r.t_lease,
                    (long long)r.t_start, (long long)r.t_end, (long long)r.runnable, r.overcommit,
                    r.seconds);
        }
    if (S.runs_out)
        fflush(S.runs_out);
    if (sum) {
        FILE *f = fopen(sum, "w");
        if (f) {
            summary(f, wall);
            fclose(f);
        }
    }
    /* Leave: every registered node deregisters (its held polls end). */
    for (int i = 0; i < S.nnodes; i++) {
        sim_node *sn = &S.nodes[i];
        if (!sn->registered)
            continue;
        char url[700];
        snprintf(url, sizeof url, "%s/v1/cluster/nodes/%s", S.gw, sn->id);
        sn->leaving = 1;
        start(X_LEAVE, i, "DELETE", url, sn->auth, NULL, NULL, 0, 5000);
    }
    stop_at = mono_ms() + 10000;
    loop(leaving_until, no_tick);
    if (S.runs_out)
        fclose(S.runs_out);
    summary(stdout, wall);
    return 0;
}

static int run_submit(int argc, char **argv)
{
    const char *url = arg_of(argc, argv, "--url", NULL), *jobs = arg_of(argc, argv, "--jobs", NULL);
    const char *out = arg_of(argc, argv, "--out", NULL);
    S.conc = atoi(arg_of(argc, argv, "--concurrency", "64"));
    if (!url || !jobs || !out || S.conc < 1) {
        usage();
        return 2;
    }
    snprintf(S.url, sizeof S.url, "%s", url);
    if (!(S.jobs_in = fopen(jobs, "r")) || !(S.ids_out = fopen(out, "w"))) {
        perror("kl-scalesim submit");
        return 2;
    }
    int64_t t0 = mono_ms();
    loop(submit_until, tick_submit);
    fclose(S.ids_out);
    fclose(S.jobs_in);
    double wall = (mono_ms() - t0) / 1000.0;
    fprintf(stdout, "{\"lines\": %d, \"submitted_ok\": %ld, \"wall_s\": %.3f, \"per_s\": %.1f, "
                    "\"transport_errors\": %ld, \"other_status\": %ld}\n",
            S.lines, S.submitted_ok, wall, wall > 0 ? S.submitted_ok / wall : 0, S.failed[X_SUBMIT],
            S.status_other[X_SUBMIT]);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage();
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    srand((unsigned)getpid());
    curl_global_init(CURL_GLOBAL_DEFAULT);
    S.ep = epoll_create1(EPOLL_CLOEXEC);
    for (int mi = 0; mi < SIM_MULTIS; mi++) {
        S.multi[mi] = curl_multi_init();
        S.curl_deadline[mi] = -1;
        curl_multi_setopt(S.multi[mi], CURLMOPT_SOCKETFUNCTION, on_socket);
        curl_multi_setopt(S.multi[mi], CURLMOPT_SOCKETDATA, (void *)(intptr_t)mi);
        curl_multi_setopt(S.multi[mi], CURLMOPT_TIMERFUNCTION, on_timer);
        curl_multi_setopt(S.multi[mi], CURLMOPT_TIMERDATA, (void *)(intptr_t)mi);
    }
    int rc;
    if (strcmp(argv[1], "nodes") == 0) {
        /* a held poll per node, and room for its other exchanges: at the
         * cap, every connection handed back makes libcurl close the
         * oldest idle one (a walk of all of them) and the next exchange
         * connect anew; at n * 2 + 64 the simulator of 1,000 nodes sat
         * at the cap (2,070 descriptors) */
        int n = atoi(arg_of(argc, argv, "--nodes", "1"));
        for (int mi = 0; mi < SIM_MULTIS; mi++)
            curl_multi_setopt(S.multi[mi], CURLMOPT_MAXCONNECTS, (long)(n * 4 / SIM_MULTIS + 64));
        rc = run_nodes(argc, argv);
    } else if (strcmp(argv[1], "submit") == 0) {
        int conc = atoi(arg_of(argc, argv, "--concurrency", "64"));
        for (int mi = 0; mi < SIM_MULTIS; mi++)
            curl_multi_setopt(S.multi[mi], CURLMOPT_MAXCONNECTS, (long)(conc / SIM_MULTIS + 8));
        rc = run_submit(argc, argv);
    } else {
        usage();
        rc = 2;
    }
    for (int mi = 0; mi < SIM_MULTIS; mi++) {
        while (S.nspare[mi] > 0)
            curl_easy_cleanup(S.spare[mi][--S.nspare[mi]]);
        curl_multi_cleanup(S.multi[mi]);
    }
    curl_global_cleanup();
    return rc;
}
