/* test_gw_store.c — which PostgreSQL errors the gateway tries again (an
 * outage) and which it gives up on at once (the statement itself refused);
 * and a server that accepts a connection and never answers costs the
 * caller the connect timeout, not forever. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "store.h"
#include "../service/svc_test_net.h"
#include "svc_util.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outages_are_transient),
        cmocka_unit_test(test_refused_statements_are_final),
        cmocka_unit_test(test_a_server_that_never_answers_times_the_connect_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
