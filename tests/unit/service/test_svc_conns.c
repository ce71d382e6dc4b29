/* test_svc_conns.c — the server's connection table on socket pairs: the
 * caps (per address, a small allowance over it, a bounded share of such
 * connections, an IPv6 /64 as one address, trusted proxies uncapped) and
 * the deadlines (a head trickled for ever, a body that does not come, a
 * large body that keeps moving). A connection shut by the table reads as
 * end of stream on the other side of its pair. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "svc_conns.h"
#include "svc_log.h"
#include "svc_util.h"

#define MAXC 64

typedef struct pair {
    int ours, theirs; /* the table holds ours; theirs sees the shutdown */
    svc_conn *c;
} pair;

static pair open_one(svc_conns *t, const char *peer)
{
    pair p;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    p.ours = sv[0];
    p.theirs = sv[1];
    p.c = svc_conns_open(t, p.ours, peer);
    assert_non_null(p.c);
    return p;
}

static void close_one(svc_conns *t, pair *p)
{
    svc_conns_close(t, p->c);
    close(p->ours);
    close(p->theirs);
}

/* 1 if the table shut p down: its other end reads end of stream within ms. */
static int shut_within(const pair *p, int ms)
{
    struct pollfd pf = {.fd = p->theirs, .events = POLLIN};
    if (poll(&pf, 1, ms) <= 0)
        return 0;
    char b;
    return recv(p->theirs, &b, 1, MSG_DONTWAIT) == 0;
}

static svc_conns *table(unsigned max, unsigned per_ip, const svc_cidrs *uncounted)
{
    svc_conns_opts o = {.max_conns = max, .per_ip = per_ip, .over_per_ip = 3, .over_share = 5,
                        .head_ms = 60000, .over_head_ms = 60000, .body_ms = 60000,
                        .body_min_rate = 1000, .uncounted = uncounted};
    char err[128];
    svc_conns *t = svc_conns_new(&o, err, sizeof err);
    assert_non_null(t);
    return t;
}

/* Past its cap an address gets over_per_ip more (reserved routes only),
 * then nothing; and all addresses together get over_share such. */
static void over_the_cap_an_address_gets_a_small_allowance_within_a_share(void **state)
{
    (void)state;
    svc_conns *t = table(100, 2, NULL);
    pair p[MAXC];
    int n = 0;
    for (int i = 0; i < 2; i++, n++) {
        p[n] = open_one(t, "192.0.2.1");
        assert_false(svc_conns_over(t, p[n].c));
    }
    for (int i = 0; i < 3; i++, n++) {
        p[n] = open_one(t, "192.0.2.1");
        assert_true(svc_conns_over(t, p[n].c));
        assert_false(shut_within(&p[n], 0));
    }
    p[n] = open_one(t, "192.0.2.1"); /* past the allowance: shut at once */
    assert_true(shut_within(&p[n++], 100));
    /* another address: its own cap, and what is left of the share (5 - 3) */
    for (int i = 0; i < 4; i++, n++) {
        p[n] = open_one(t, "192.0.2.2");
        assert_int_equal(svc_conns_over(t, p[n].c), i >= 2);
        assert_false(shut_within(&p[n], 0));
    }
    p[n] = open_one(t, "192.0.2.2");
    assert_true(shut_within(&p[n++], 100));
    svc_conns_stats st;
    svc_conns_stats_get(t, &st);
    assert_int_equal(st.open, 11);
    assert_int_equal(st.over, 5);
    assert_int_equal(st.cut, 2);
    /* a third address still gets its cap */
    p[n] = open_one(t, "192.0.2.3");
    assert_false(svc_conns_over(t, p[n].c));
    assert_false(shut_within(&p[n++], 0));
    /* a closed over-connection gives its place in the share back */
    close_one(t, &p[2]);
    p[2] = open_one(t, "192.0.2.3");
    assert_false(svc_conns_over(t, p[2].c));
    p[n] = open_one(t, "192.0.2.3");
    assert_true(svc_conns_over(t, p[n++].c));
    for (int i = 0; i < n; i++)
        close_one(t, &p[i]);
    svc_conns_free(t);
}

/* One host has a whole /64: its addresses share one cap. */
static void ipv6_addresses_of_one_64_share_the_cap(void **state)
{
    (void)state;
    svc_conns *t = table(100, 2, NULL);
    pair a = open_one(t, "2001:db8:1:2::1"), b = open_one(t, "2001:db8:1:2::2");
    pair c = open_one(t, "2001:db8:1:2:abcd::3"), d = open_one(t, "2001:db8:1:3::1");
    assert_false(svc_conns_over(t, a.c));
    assert_false(svc_conns_over(t, b.c));
    assert_true(svc_conns_over(t, c.c));
    assert_false(svc_conns_over(t, d.c));
    close_one(t, &a);
    close_one(t, &b);
    close_one(t, &c);
    close_one(t, &d);
    svc_conns_free(t);
}

/* A trusted proxy carries many clients: it is not capped per address (the
 * total cap still holds). */
static void trusted_proxies_are_not_capped_per_address(void **state)
{
    (void)state;
    char err[64];
    svc_cidrs *proxies = svc_cidrs_parse("10.0.0.0/8", err, sizeof err);
    svc_conns *t = table(12, 2, proxies);
    pair p[16];
    for (int i = 0; i < 12; i++) {
        p[i] = open_one(t, "10.1.1.1");
        assert_false(svc_conns_over(t, p[i].c));
        assert_false(shut_within(&p[i], 0));
    }
    p[12] = open_one(t, "10.1.1.1"); /* the total cap */
    assert_true(shut_within(&p[12], 100));
    for (int i = 0; i < 13; i++)
        close_one(t, &p[i]);
    svc_conns_free(t);
    svc_cidrs_free(proxies);
}

/* A head that never completes is cut at its deadline however the bytes
 * trickle (the table sees no bytes of a head: only time); a request with
 * the application has none; the next head's deadline starts when the
 * request ends. */
static void heads_and_bodies_are_held_to_their_deadlines(void **state)
{
    (void)state;
    svc_conns_opts o = {.max_conns = 10, .head_ms = 300, .over_head_ms = 300, .body_ms = 400,
                        .body_min_rate = 10000};
    char err[128];
    svc_conns *t = svc_conns_new(&o, err, sizeof err);
    pair head = open_one(t, "192.0.2.1"), app = open_one(t, "192.0.2.1");
    pair slow = open_one(t, "192.0.2.1"), moving = open_one(t, "192.0.2.1");
    svc_conns_head(t, app.c);
    svc_conns_app(t, app.c);
    svc_conns_head(t, slow.c);
    svc_conns_head(t, moving.c);
    int64_t t0 = svc_now_mono_ms();
    /* a large body that brings more than its 4000 bytes each 400 ms window goes on;
     * one that trickles a byte now and then is cut after one window */
    for (int i = 0; i < 12; i++) {
        svc_conns_body(t, moving.c, 1500);
        svc_conns_body(t, slow.c, 1);
        svc_sleep_ms(100);
    }
    assert_true(shut_within(&head, 0));
    assert_true(shut_within(&slow, 0));
    assert_false(shut_within(&moving, 0));
    assert_false(shut_within(&app, 0));
    assert_true(svc_now_mono_ms() - t0 >= 1000);
    /* the application's request ends: a head must come again in time */
    svc_conns_idle(t, app.c);
    assert_false(shut_within(&app, 150));
    assert_true(shut_within(&app, 1000));
    /* the large body stops moving: cut within a window or two */
    assert_true(shut_within(&moving, 1500));
    close_one(t, &head);
    close_one(t, &app);
    close_one(t, &slow);
    close_one(t, &moving);
    svc_conns_free(t);
}

int main(void)
{
    svc_log_init("test", SVC_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(over_the_cap_an_address_gets_a_small_allowance_within_a_share),
        cmocka_unit_test(ipv6_addresses_of_one_64_share_the_cap),
        cmocka_unit_test(trusted_proxies_are_not_capped_per_address),
        cmocka_unit_test(heads_and_bodies_are_held_to_their_deadlines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
