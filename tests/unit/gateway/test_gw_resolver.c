/* test_gw_resolver.c — lookups on the resolver thread against a name
 * server of the test's own (UDP on loopback): an answer gives its address,
 * NXDOMAIN gives -ENOENT, and a server that swallows every query gives
 * -ETIMEDOUT to every lookup at its deadline, however many wait at once;
 * past max_pending, or its owner's share, a lookup is refused at once, and
 * a stop answers what still waits. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "resolver.h"
#include "../service/svc_test_net.h"
#include "svc_util.h"

enum { DNS_ANSWER, DNS_NXDOMAIN, DNS_SWALLOW };

/* A name server on 127.0.0.1: A queries get 93.184.216.34 (ANSWER), every
 * query NXDOMAIN, or nothing at all (SWALLOW). */
typedef struct dns {
    int fd, port, mode;
    volatile int stop;
    volatile int queries;
    pthread_t thread;
} dns;

static void *dns_main(void *arg)
{
    dns *d = arg;
    unsigned char q[512], a[600];
    while (!d->stop) {
        struct pollfd p = {.fd = d->fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        ssize_t n = recvfrom(d->fd, q, sizeof q, 0, (struct sockaddr *)&from, &fl);
        if (n < 17)
            continue;
        d->queries++;
        if (d->mode == DNS_SWALLOW)
            continue;
        /* the question: labels up to the root, then type and class */
        size_t end = 12;
        while (end < (size_t)n && q[end])
            end += (size_t)q[end] + 1;
        end += 5;
        if (end > (size_t)n)
            continue;
        int type = q[end - 4] << 8 | q[end - 3];
        int answer = d->mode == DNS_ANSWER && type == 1;
        memcpy(a, q, end);
        a[2] = (unsigned char)(0x80 | (q[2] & 0x01)); /* QR, RD as asked */
        a[3] = (unsigned char)(0x80 | (d->mode == DNS_NXDOMAIN ? 3 : 0));
        a[4] = 0, a[5] = 1;                          /* one question */
        a[6] = 0, a[7] = (unsigned char)answer;      /* answers */
        memset(a + 8, 0, 4);
        size_t len = end;
        if (answer) {
            static const unsigned char rr[] = {0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4,
                                               93, 184, 216, 34};
            memcpy(a + len, rr, sizeof rr);
            len += sizeof rr;
        }
        sendto(d->fd, a, len, 0, (struct sockaddr *)&from, fl);
    }
    return NULL;
}

static void dns_start(dns *d, int mode)
{
    memset(d, 0, sizeof *d);
    d->mode = mode;
    d->fd = svc_test_loopback(SOCK_DGRAM, &d->port);
    assert_int_equal(pthread_create(&d->thread, NULL, dns_main, d), 0);
}

static void dns_stop(dns *d)
{
    d->stop = 1;
    pthread_join(d->thread, NULL);
    close(d->fd);
}

/* What the callbacks saw. */
typedef struct seen {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls, rc[64];
    int64_t at[64];
    char addr[64][64];
} seen;

typedef struct ask {
    seen *s;
    int i;
} ask;

static void on_done(void *arg, int rc, const struct sockaddr *const *addrs, int n)
{
    ask *a = arg;
    seen *s = a->s;
    pthread_mutex_lock(&s->mu);
    s->rc[a->i] = rc;
    s->at[a->i] = svc_now_mono_ms();
    if (n > 0 && addrs[0]->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)addrs[0])->sin_addr, s->addr[a->i], 64);
    s->calls++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Waits (at most 10 s: a hang fails, never a slow machine) for n calls. */
static int wait_calls(seen *s, int n)
{
    int64_t until = svc_now_mono_ms() + 10000;
    pthread_mutex_lock(&s->mu);
    while (s->calls < n && svc_now_mono_ms() < until) {
        pthread_mutex_unlock(&s->mu);
        svc_sleep_ms(5);
        pthread_mutex_lock(&s->mu);
    }
    int got = s->calls;
    pthread_mutex_unlock(&s->mu);
    return got;
}

static gw_resolver *start(const dns *d, int timeout_ms, int max_pending)
{
    char servers[64], err[256];
    snprintf(servers, sizeof servers, "127.0.0.1:%d", d->port);
    gw_resolver *r = gw_resolver_start(servers, timeout_ms, max_pending, 3, err, sizeof err);
    if (!r)
        fail_msg("%s", err);
    return r;
}

static seen *seen_new(void)
{
    static seen s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    return &s;
}

static void test_an_answer_gives_its_address(void **state)
{
    (void)state;
    dns d;
    dns_start(&d, DNS_ANSWER);
    gw_resolver *r = start(&d, 2000, 16);
    seen *s = seen_new();
    ask a = {s, 0};
    assert_int_equal(gw_resolve(r, "hook.example.test", 1, on_done, &a), 0);
    assert_int_equal(wait_calls(s, 1), 1);
    assert_int_equal(s->rc[0], 0);
    assert_string_equal(s->addr[0], "93.184.216.34");
    gw_resolver_free(r);
    dns_stop(&d);
}

static void test_nxdomain_is_enoent(void **state)
{
    (void)state;
    dns d;
    dns_start(&d, DNS_NXDOMAIN);
    gw_resolver *r = start(&d, 2000, 16);
    seen *s = seen_new();
    ask a = {s, 0};
    assert_int_equal(gw_resolve(r, "nothing.example.test", 1, on_done, &a), 0);
    assert_int_equal(wait_calls(s, 1), 1);
    assert_int_equal(s->rc[0], -ENOENT);
    gw_resolver_free(r);
    dns_stop(&d);
}

/* Twenty lookups against a server that never answers: each is answered
 * -ETIMEDOUT, none before its deadline, and the queries did reach the
 * server (the deadline is not a refusal to ask). */
static void test_a_silent_server_times_every_lookup_out_at_its_deadline(void **state)
{
    (void)state;
    dns d;
    dns_start(&d, DNS_SWALLOW);
    gw_resolver *r = start(&d, 300, 64);
    seen *s = seen_new();
    ask a[20];
    int64_t t0 = svc_now_mono_ms();
    for (int i = 0; i < 20; i++) {
        a[i] = (ask){s, i};
        char host[64];
        snprintf(host, sizeof host, "h%d.blackhole.test", i);
        assert_int_equal(gw_resolve(r, host, i, on_done, &a[i]), 0);
    }
    assert_int_equal(wait_calls(s, 20), 20);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(s->rc[i], -ETIMEDOUT);
        assert_true(s->at[i] - t0 >= 290);
    }
    assert_true(d.queries >= 20);
    gw_resolver_free(r);
    dns_stop(&d);
}

static void test_past_max_pending_a_lookup_is_refused_at_once(void **state)
{
    (void)state;
    dns d;
    dns_start(&d, DNS_SWALLOW);
    gw_resolver *r = start(&d, 5000, 2);
    seen *s = seen_new();
    ask a[3] = {{s, 0}, {s, 1}, {s, 2}};
    assert_int_equal(gw_resolve(r, "a.blackhole.test", 1, on_done, &a[0]), 0);
    assert_int_equal(gw_resolve(r, "b.blackhole.test", 1, on_done, &a[1]), 0);
    assert_int_equal(gw_resolve(r, "c.blackhole.test", 1, on_done, &a[2]), -EAGAIN);
    /* a stop answers the two that wait, and refuses what comes after */
    gw_resolver_stop(r);
    assert_int_equal(wait_calls(s, 2), 2);
    assert_int_equal(s->rc[0], -ESHUTDOWN);
    assert_int_equal(s->rc[1], -ESHUTDOWN);
    assert_int_equal(gw_resolve(r, "d.blackhole.test", 1, on_done, &a[2]), -ESHUTDOWN);
    gw_resolver_free(r);
    dns_stop(&d);
}

/* One owner (a tenant) holds at most its share of the lookups: past it
 * its next is refused at once, another owner's still goes, and a lookup
 * that ends gives its place back. */
static void test_one_owner_fills_only_its_share(void **state)
{
    (void)state;
    dns d;
    dns_start(&d, DNS_SWALLOW);
    gw_resolver *r = start(&d, 300, 64); /* 3 per owner */
    seen *s = seen_new();
    ask a[6];
    for (int i = 0; i < 6; i++)
        a[i] = (ask){s, i};
    for (int i = 0; i < 3; i++)
        assert_int_equal(gw_resolve(r, "x.blackhole.test", 7, on_done, &a[i]), 0);
    assert_int_equal(gw_resolve(r, "x.blackhole.test", 7, on_done, &a[3]), -EDQUOT);
    assert_int_equal(gw_resolve(r, "y.blackhole.test", 8, on_done, &a[4]), 0);
    assert_int_equal(wait_calls(s, 4), 4);
    /* the timed-out ones are freed once c-ares lets go of them */
    int64_t until = svc_now_mono_ms() + 10000;
    int rc;
    while ((rc = gw_resolve(r, "z.blackhole.test", 7, on_done, &a[5])) == -EDQUOT &&
           svc_now_mono_ms() < until)
        svc_sleep_ms(20);
    assert_int_equal(rc, 0);
    gw_resolver_free(r);
    dns_stop(&d);
}

static void test_bad_server_list_is_refused(void **state)
{
    (void)state;
    char err[256] = "";
    assert_null(gw_resolver_start("not an address", 1000, 4, 2, err, sizeof err));
    assert_non_null(strstr(err, "not an address"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_an_answer_gives_its_address),
        cmocka_unit_test(test_nxdomain_is_enoent),
        cmocka_unit_test(test_a_silent_server_times_every_lookup_out_at_its_deadline),
        cmocka_unit_test(test_past_max_pending_a_lookup_is_refused_at_once),
        cmocka_unit_test(test_one_owner_fills_only_its_share),
        cmocka_unit_test(test_bad_server_list_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
