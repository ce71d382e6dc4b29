/* resolver.c — lookups on a c-ares channel driven by one thread
 * (resolver.h). c-ares 1.18's channel is not thread-safe: only this thread
 * touches it; other threads hand lookups over through a list and a pipe.
 * A lookup is answered at its deadline even if c-ares still waits (c-ares
 * cannot cancel one query alone); its record stays until c-ares lets go of
 * it, and counts against max_pending until then. */
#include "resolver.h"

#include <ares.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "svc_log.h"
#include "svc_util.h"

/* Longest sleep of the thread when nothing is due. */
#define RES_TICK_MS 1000
/* Addresses handed to a callback; a name with more is checked on these. */
#define RES_MAX_ADDRS 32

typedef struct lookup {
    struct lookup *next;
    gw_resolver *r;
    int64_t owner;             /* who asked (a tenant): its share of max_pending */
    gw_resolve_fn fn;
    void *arg;
    int64_t deadline;          /* monotonic ms */
    int answered;              /* fn was called */
    char host[254];
} lookup;

/* How many lookups an owner has pending. */
typedef struct res_owner {
    int64_t owner;
    int n;
} res_owner;

struct gw_resolver {
    ares_channel ch;
    pthread_t thread;
    int wake[2];               /* a byte written to [1] wakes the thread */
    int timeout_ms, max_pending, max_per_owner;
    int running;               /* the thread was started */
    pthread_mutex_t mu;
    /* guarded by mu */
    lookup *incoming;          /* handed over, not yet given to c-ares */
    int pending;               /* accepted and not yet freed */
    res_owner *owners;         /* of them, per owner (those with any) */
    int nowners;
    int stop;
    /* the thread's own */
    lookup *active;            /* given to c-ares, not yet let go */
};

static void answer(lookup *q, int rc, const struct sockaddr *const *addrs, int n)
{
    if (q->answered)
        return;
    q->answered = 1;
    q->fn(q->arg, rc, addrs, n);
}

/* Counts one lookup of owner fewer; mu held. */
static void owner_done(gw_resolver *r, int64_t owner)
{
    r->pending--;
    for (int i = 0; i < r->nowners; i++) {
        if (r->owners[i].owner == owner) {
            if (--r->owners[i].n == 0)
                r->owners[i] = r->owners[--r->nowners];
            return;
        }
    }
}

/* Takes q off the active list and frees it. */
static void lookup_free(gw_resolver *r, lookup *q)
{
    for (lookup **p = &r->active; *p; p = &(*p)->next) {
        if (*p == q) {
            *p = q->next;
            break;
        }
    }
    pthread_mutex_lock(&r->mu);
    owner_done(r, q->owner);
    pthread_mutex_unlock(&r->mu);
    free(q);
}

/* c-ares is done with a lookup: answer it (unless its deadline did) and
 * let it go. */
static void on_ares(void *arg, int status, int timeouts, struct ares_addrinfo *res)
{
    (void)timeouts;
    lookup *q = arg;
    const struct sockaddr *addrs[RES_MAX_ADDRS];
    int n = 0;
    for (struct ares_addrinfo_node *a = res ? res->nodes : NULL; a && n < RES_MAX_ADDRS; a = a->ai_next)
        if (a->ai_family == AF_INET || a->ai_family == AF_INET6)
            addrs[n++] = a->ai_addr;
    int rc;
    if (status == ARES_SUCCESS)
        rc = n > 0 ? 0 : -ENOENT;
    else if (status == ARES_ENOTFOUND || status == ARES_ENODATA || status == ARES_ENONAME)
        rc = -ENOENT;
    else if (status == ARES_ETIMEOUT)
        rc = -ETIMEDOUT;
    else if (status == ARES_EDESTRUCTION || status == ARES_ECANCELLED)
        rc = -ESHUTDOWN;
    else
        rc = -EIO;
    answer(q, rc, addrs, n);
    ares_freeaddrinfo(res);
    lookup_free(q->r, q);
}

/* Gives the lookups handed over to c-ares. */
static void start_incoming(gw_resolver *r, lookup *list)
{
    while (list) {
        lookup *q = list;
        list = q->next;
        /* on the active list first: c-ares may answer within the call
         * (/etc/hosts, a name it refuses) */
        q->next = r->active;
        r->active = q;
        struct ares_addrinfo_hints hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        ares_getaddrinfo(r->ch, q->host, NULL, &hints, on_ares, q);
    }
}

/* Answers lookups past their deadline; returns the next deadline still
 * to come (INT64_MAX: none). */
static int64_t expire(gw_resolver *r, int64_t now)
{
    int64_t next = INT64_MAX;
    for (lookup *q = r->active; q; q = q->next) {
        if (q->answered)
            continue;
        if (q->deadline <= now)
            answer(q, -ETIMEDOUT, NULL, 0);
        else if (q->deadline < next)
            next = q->deadline;
    }
    return next;
}

static void *res_main(void *arg)
{
    gw_resolver *r = arg;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        lookup *list = r->incoming;
        r->incoming = NULL;
        int stop = r->stop;
        pthread_mutex_unlock(&r->mu);
        if (stop) {
            /* not given to c-ares yet: answered here; the rest when the
             * channel is destroyed (gw_resolver_stop) */
            while (list) {
                lookup *q = list;
                list = q->next;
                answer(q, -ESHUTDOWN, NULL, 0);
                pthread_mutex_lock(&r->mu);
                owner_done(r, q->owner);
                pthread_mutex_unlock(&r->mu);
                free(q);
            }
            break;
        }
        start_incoming(r, list);
        int64_t now = svc_now_mono_ms();
        int64_t next = expire(r, now);
        int wait_ms = RES_TICK_MS;
        if (next != INT64_MAX && next - now < wait_ms)
            wait_ms = (int)(next - now);
        struct timeval maxtv = {RES_TICK_MS / 1000, 0}, tv;
        struct timeval *t = ares_timeout(r->ch, &maxtv, &tv);
        int ares_ms = (int)(t->tv_sec * 1000 + (t->tv_usec + 999) / 1000);
        if (ares_ms < wait_ms)
            wait_ms = ares_ms;
        ares_socket_t socks[ARES_GETSOCK_MAXNUM];
        int bits = ares_getsock(r->ch, socks, ARES_GETSOCK_MAXNUM);
        struct pollfd pf[ARES_GETSOCK_MAXNUM + 1];
        int nf = 0;
        pf[nf++] = (struct pollfd){.fd = r->wake[0], .events = POLLIN};
        /* c-ares's ARES_GETSOCK_WRITABLE shifts a signed 1 into the sign
         * bit for the last socket: the bits are read unsigned here */
        unsigned ubits = (unsigned)bits;
        for (unsigned i = 0; i < ARES_GETSOCK_MAXNUM; i++) {
            short ev = (short)((ubits & (1u << i) ? POLLIN : 0) |
                               (ubits & (1u << (i + ARES_GETSOCK_MAXNUM)) ? POLLOUT : 0));
            if (ev)
                pf[nf++] = (struct pollfd){.fd = socks[i], .events = ev};
        }
        if (poll(pf, (nfds_t)nf, wait_ms < 0 ? 0 : wait_ms) < 0 && errno != EINTR)
            svc_sleep_ms(10);
        if (pf[0].revents & POLLIN) {
            char drain[64];
            while (read(r->wake[0], drain, sizeof drain) > 0)
                ;
        }
        for (int i = 1; i < nf; i++) {
            if (!pf[i].revents)
                continue;
            ares_socket_t rd = pf[i].revents & (POLLIN | POLLERR | POLLHUP) ? pf[i].fd : ARES_SOCKET_BAD;
            ares_socket_t wr = pf[i].revents & (POLLOUT | POLLERR | POLLHUP) ? pf[i].fd : ARES_SOCKET_BAD;
            ares_process_fd(r->ch, rd, wr);
        }
        ares_process_fd(r->ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD); /* its own timeouts */
        expire(r, svc_now_mono_ms());
    }
    return NULL;
}

static pthread_once_t ares_once = PTHREAD_ONCE_INIT;
static int ares_init_rc;

static void ares_global(void)
{
    ares_init_rc = ares_library_init(ARES_LIB_INIT_ALL);
}

gw_resolver *gw_resolver_start(const char *servers, int timeout_ms, int max_pending,
                               int max_per_owner, char *err, size_t errlen)
{
    pthread_once(&ares_once, ares_global);
    if (ares_init_rc != ARES_SUCCESS) {
        snprintf(err, errlen, "c-ares: %s", ares_strerror(ares_init_rc));
        return NULL;
    }
    gw_resolver *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->timeout_ms = timeout_ms > 0 ? timeout_ms : 2000;
    r->max_pending = max_pending > 0 ? max_pending : 1024;
    r->max_per_owner = max_per_owner > 0 && max_per_owner < r->max_pending ? max_per_owner
                                                                           : r->max_pending;
    if (!(r->owners = calloc((size_t)r->max_pending, sizeof *r->owners))) {
        snprintf(err, errlen, "out of memory");
        free(r);
        return NULL;
    }
    r->wake[0] = r->wake[1] = -1;
    pthread_mutex_init(&r->mu, NULL);
    /* Two tries per server, the first given a third of the deadline:
     * c-ares's own retries (which double) end near the deadline, so a
     * record outlives its answer by little. */
    struct ares_options o = {.timeout = r->timeout_ms / 3 > 0 ? r->timeout_ms / 3 : 1, .tries = 2};
    int rc = ares_init_options(&r->ch, &o, ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES);
    if (rc != ARES_SUCCESS) {
        snprintf(err, errlen, "c-ares: %s", ares_strerror(rc));
        r->ch = NULL;
        gw_resolver_free(r);
        return NULL;
    }
    if (servers && *servers && (rc = ares_set_servers_ports_csv(r->ch, servers)) != ARES_SUCCESS) {
        snprintf(err, errlen, "name servers '%.100s': %s (want IP[:port],..., IPv6 as "
                 "[IP]:port)", servers, ares_strerror(rc));
        gw_resolver_free(r);
        return NULL;
    }
    if (pipe2(r->wake, O_CLOEXEC | O_NONBLOCK) != 0 ||
        pthread_create(&r->thread, NULL, res_main, r) != 0) {
        snprintf(err, errlen, "cannot start the resolver thread: %s", strerror(errno));
        gw_resolver_free(r);
        return NULL;
    }
    r->running = 1;
    return r;
}

void gw_resolver_stop(gw_resolver *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    int started = r->running && !r->stop;
    r->stop = 1;
    if (started)
        (void)!write(r->wake[1], "x", 1);
    pthread_mutex_unlock(&r->mu);
    if (started)
        pthread_join(r->thread, NULL);
    /* every lookup c-ares holds is called back (ARES_EDESTRUCTION) */
    if (r->ch)
        ares_destroy(r->ch);
    r->ch = NULL;
}

void gw_resolver_free(gw_resolver *r)
{
    if (!r)
        return;
    gw_resolver_stop(r);
    for (int i = 0; i < 2; i++)
        if (r->wake[i] >= 0)
            close(r->wake[i]);
    pthread_mutex_destroy(&r->mu);
    free(r->owners);
    free(r);
}

int gw_resolve(gw_resolver *r, const char *host, int64_t owner, gw_resolve_fn fn, void *arg)
{
    size_t len = strlen(host);
    if (len == 0 || len > 253)
        return -EINVAL;
    lookup *q = calloc(1, sizeof *q);
    if (!q)
        return -ENOMEM;
    *q = (lookup){.r = r, .owner = owner, .fn = fn, .arg = arg,
                  .deadline = svc_now_mono_ms() + r->timeout_ms};
    memcpy(q->host, host, len + 1);
    pthread_mutex_lock(&r->mu);
    int k = 0;
    while (k < r->nowners && r->owners[k].owner != owner)
        k++;
    int rc = r->stop                                              ? -ESHUTDOWN
             : r->pending >= r->max_pending                       ? -EAGAIN
             : k < r->nowners && r->owners[k].n >= r->max_per_owner ? -EDQUOT
                                                                    : 0;
    if (rc == 0) {
        if (k == r->nowners)
            r->owners[r->nowners++] = (res_owner){owner, 0};
        r->owners[k].n++;
        r->pending++;
        q->next = r->incoming;
        r->incoming = q;
        /* under mu: a stop, which closes nothing before it has set stop
         * under mu, cannot come in between */
        (void)!write(r->wake[1], "x", 1);
    }
    pthread_mutex_unlock(&r->mu);
    if (rc != 0)
        free(q);
    return rc;
}
