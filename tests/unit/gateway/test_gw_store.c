/* test_gw_store.c — which PostgreSQL errors the gateway tries again (an
 * outage) and which it gives up on at once (the statement itself refused);
 * and a server that accepts a connection and never answers costs the
 * caller the connect timeout, not forever; what the gateway's sessions ask
 * of the server when they start. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "store.h"
#include "../service/svc_test_net.h"
#include "svc_util.h"

/* The running jobs call for an ANALYZE when there are many and far more
 * than the statistics expect (taken while few ran), not for a few, nor
 * for a count the plans already expect. */
static void test_running_far_past_the_plans_calls_for_analyze(void **state)
{
    assert_true(gw_store_running_misplanned(8000, 0));
    assert_true(gw_store_running_misplanned(8000, 1999));
    assert_false(gw_store_running_misplanned(8000, 2000));
    assert_false(gw_store_running_misplanned(8000, 9000));
    assert_false(gw_store_running_misplanned(GW_STORE_RUNNING_MISPLANNED_MIN - 1, 0));
    assert_true(gw_store_running_misplanned(GW_STORE_RUNNING_MISPLANNED_MIN, 0));
}

static void test_outages_are_transient(void **state)
{
    (void)state;
    assert_true(gw_store_sqlstate_transient(""));       /* no answer at all */
    assert_true(gw_store_sqlstate_transient(NULL));
    assert_true(gw_store_sqlstate_transient("08006"));  /* connection failure */
    assert_true(gw_store_sqlstate_transient("57P01"));  /* admin shutdown */
    assert_true(gw_store_sqlstate_transient("57P03"));  /* cannot connect now */
    assert_true(gw_store_sqlstate_transient("40001"));  /* serialization failure */
    assert_true(gw_store_sqlstate_transient("40P01"));  /* deadlock */
    assert_true(gw_store_sqlstate_transient("53300"));  /* too many connections */
    assert_true(gw_store_sqlstate_transient("55P03"));  /* lock not available */
    assert_true(gw_store_sqlstate_transient("58030"));  /* I/O error */
    assert_true(gw_store_sqlstate_transient("25006"));  /* read-only transaction */
    assert_true(gw_store_sqlstate_transient("26000"));  /* prepared statement missing */
}

static void test_refused_statements_are_final(void **state)
{
    (void)state;
    assert_false(gw_store_sqlstate_transient("54000"));  /* program limit (1 GB value) */
    assert_false(gw_store_sqlstate_transient("22P02"));  /* invalid text representation */
    assert_false(gw_store_sqlstate_transient("22P05"));  /* untranslatable character */
    assert_false(gw_store_sqlstate_transient("23505"));  /* unique violation */
    assert_false(gw_store_sqlstate_transient("23514"));  /* check violation */
    assert_false(gw_store_sqlstate_transient("42P01"));  /* undefined table */
    assert_false(gw_store_sqlstate_transient("XX000"));  /* internal error */
    assert_false(gw_store_sqlstate_transient("55000"));  /* object not in prerequisite state */
}

/* A "PostgreSQL" that completes TCP handshakes (the kernel does, from
 * its backlog) and never says a word: the first statement fails with
 * -EIO after the default connect timeout (5 s), where it used to wait
 * forever on an HTTP worker. */
static void test_a_server_that_never_answers_times_the_connect_out(void **state)
{
    (void)state;
    int port;
    int fd = svc_test_loopback(SOCK_STREAM, &port);
    assert_int_equal(listen(fd, 16), 0);
    char url[128];
    snprintf(url, sizeof url, "postgresql://kowloon@127.0.0.1:%d/kowloon?sslmode=disable", port);
    gw_store *s = gw_store_open(url, 1);
    assert_non_null(s);
    alarm(30); /* a hang fails the test, not a slow machine */
    int64_t t0 = svc_now_mono_ms();
    int64_t last = 0;
    assert_int_equal(gw_store_events_last(s, &last), -EIO);
    alarm(0);
    assert_true(svc_now_mono_ms() - t0 >= 4000);
    gw_store_close(s);
    close(fd);
}

/* What a client said in its startup message (sslmode and gssencmode
 * disabled, so it is the first thing sent): the "options" parameter. */
typedef struct {
    int fd;
    char options[256];
} startup_peer;

static void *read_startup(void *arg)
{
    startup_peer *p = arg;
    int c = accept(p->fd, NULL, NULL);
    if (c < 0)
        return NULL;
    unsigned char msg[4096];
    size_t got = 0, len = 0;
    while (got < 4 || got < len) {
        ssize_t r = read(c, msg + got, sizeof(msg) - got);
        if (r <= 0)
            break;
        got += (size_t)r;
        if (got >= 4)
            len = (size_t)msg[0] << 24 | (size_t)msg[1] << 16 | (size_t)msg[2] << 8 | msg[3];
        if (len > sizeof(msg))
            break;
    }
    /* length, protocol version, then name\0value\0 pairs, then \0 */
    for (size_t i = 8; got >= len && i < len && msg[i];) {
        const char *name = (const char *)msg + i;
        const char *value = name + strlen(name) + 1;
        if (strcmp(name, "options") == 0)
            snprintf(p->options, sizeof(p->options), "%s", value);
        i = (size_t)(value - (const char *)msg) + strlen(value) + 1;
    }
    close(c);   /* the gateway's statement fails; only the greeting matters */
    return NULL;
}

static char *options_sent(const char *query)
{
    static startup_peer peer;
    int port;
    memset(&peer, 0, sizeof(peer));
    peer.fd = svc_test_loopback(SOCK_STREAM, &port);
    assert_int_equal(listen(peer.fd, 16), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, read_startup, &peer), 0);
    char url[256];
    snprintf(url, sizeof url,
             "postgresql://kowloon@127.0.0.1:%d/kowloon?sslmode=disable&gssencmode=disable%s", port,
             query);
    gw_store *s = gw_store_open(url, 1);
    assert_non_null(s);
    alarm(30);
    int64_t last = 0;
    assert_int_equal(gw_store_events_last(s, &last), -EIO);
    pthread_join(t, NULL);
    alarm(0);
    gw_store_close(s);
    close(peer.fd);
    return peer.options;
}

/* The gateway's sessions run without parallel query (STORE_OPTIONS,
 * store.c): the scheduler's reloads were given two workers a second. A
 * URL with options of its own decides instead. */
static void test_sessions_ask_for_no_parallel_workers_unless_the_url_says(void **state)
{
    (void)state;
    assert_string_equal(options_sent(""), "-c max_parallel_workers_per_gather=0");
    assert_string_equal(options_sent("&options=-c%20work_mem%3D64MB"), "-c work_mem=64MB");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_running_far_past_the_plans_calls_for_analyze),
        cmocka_unit_test(test_outages_are_transient),
        cmocka_unit_test(test_refused_statements_are_final),
        cmocka_unit_test(test_a_server_that_never_answers_times_the_connect_out),
        cmocka_unit_test(test_sessions_ask_for_no_parallel_workers_unless_the_url_says),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
