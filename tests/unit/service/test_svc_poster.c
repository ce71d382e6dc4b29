/* test_svc_poster.c — POSTs side by side with no batch barrier: a post to a
 * receiver that accepts and never answers does not hold back posts added
 * before or after it, each ends on its own with its status, a refused
 * address ends at once with why, and an abort hands back what is still in
 * flight. The receivers are sockets of the test on 127.0.0.1. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "svc_client.h"
#include "svc_test_net.h"
#include "svc_util.h"

/* A receiver: answers 204 to every request (good), or accepts connections
 * and never reads nor answers them (a black hole). */
typedef struct rx {
    int fd, port, answer;
    volatile int stop;
    int held[64], nheld;
    pthread_t thread;
} rx;

/* Reads one request (head and Content-Length body) from c; 0 or -1. */
static int read_request(int c)
{
    char buf[8192];
    size_t n = 0;
    for (;;) {
        ssize_t k = read(c, buf + n, sizeof buf - 1 - n);
        if (k <= 0)
            return -1;
        n += (size_t)k;
        buf[n] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        char *cl = strcasestr(buf, "content-length:");
        if (end && (!cl || n >= (size_t)(end + 4 - buf) + strtoul(cl + 15, NULL, 10)))
            return 0;
    }
}

static void *rx_main(void *arg)
{
    rx *r = arg;
    while (!r->stop) {
        struct pollfd p = {.fd = r->fd, .events = POLLIN};
        if (poll(&p, 1, 20) <= 0)
            continue;
        int c = accept(r->fd, NULL, NULL);
        if (c < 0)
            continue;
        if (!r->answer) {
            if (r->nheld < 64)
                r->held[r->nheld++] = c;
            continue;
        }
        static const char ok[] = "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n";
        while (read_request(c) == 0 && write(c, ok, sizeof ok - 1) > 0)
            ;
        close(c);
    }
    for (int i = 0; i < r->nheld; i++)
        close(r->held[i]);
    return NULL;
}

static void rx_start(rx *r, int answer)
{
    memset(r, 0, sizeof *r);
    r->answer = answer;
    r->fd = svc_test_loopback(SOCK_STREAM, &r->port);
    assert_int_equal(listen(r->fd, 16), 0);
    assert_int_equal(pthread_create(&r->thread, NULL, rx_main, r), 0);
}

static void rx_stop(rx *r)
{
    r->stop = 1;
    pthread_join(r->thread, NULL);
    close(r->fd);
}

/* The posts handed back, in order. */
typedef struct ended {
    svc_post *posts[16];
    int n;
} ended;

static void on_done(void *ctx, svc_post *post)
{
    ended *e = ctx;
    e->posts[e->n++] = post;
}

static int was_handed_back(const ended *e, const svc_post *p)
{
    for (int i = 0; i < e->n; i++)
        if (e->posts[i] == p)
            return 1;
    return 0;
}

/* Runs p until post has been handed back (a hang guard of 10 s fails). */
static void run_until(svc_poster *p, ended *e, const svc_post *post)
{
    int64_t until = svc_now_mono_ms() + 10000;
    while (!was_handed_back(e, post) && svc_now_mono_ms() < until)
        svc_poster_run(p, 100, on_done, e);
    assert_true(was_handed_back(e, post));
}

static svc_post post_to(char *url, size_t urllen, int port)
{
    snprintf(url, urllen, "http://127.0.0.1:%d/hook", port);
    static const char *const hdr[] = {"Content-Type: application/json", NULL};
    return (svc_post){.url = url, .body = "{}", .len = 2, .headers = hdr};
}

static void test_a_receiver_that_never_answers_holds_back_no_other_post(void **state)
{
    (void)state;
    svc_client_global_init();
    rx hole, good;
    rx_start(&hole, 0);
    rx_start(&good, 1);
    svc_poster *p = svc_poster_new();
    ended e = {0};
    char u1[64], u2[64], u3[64];
    svc_post stuck = post_to(u1, sizeof u1, hole.port);
    svc_post first = post_to(u2, sizeof u2, good.port);
    svc_post later = post_to(u3, sizeof u3, good.port);
    assert_int_equal(svc_poster_add(p, &stuck, 30000, NULL, NULL), 0);
    assert_int_equal(svc_poster_add(p, &first, 30000, NULL, NULL), 0);
    run_until(p, &e, &first);
    assert_int_equal(first.status, 204);
    assert_string_equal(first.error, "");
    /* added while the stuck one still waits: it starts and ends too */
    assert_int_equal(svc_poster_add(p, &later, 30000, NULL, NULL), 0);
    run_until(p, &e, &later);
    assert_int_equal(later.status, 204);
    assert_false(was_handed_back(&e, &stuck));
    assert_int_equal(svc_poster_run(p, 0, on_done, &e), 1);
    /* an abort hands back what is still in flight */
    svc_poster_abort(p, on_done, &e);
    assert_true(was_handed_back(&e, &stuck));
    assert_int_equal(stuck.status, 0);
    assert_string_equal(stuck.error, "aborted");
    assert_int_equal(svc_poster_run(p, 0, on_done, &e), 0);
    svc_poster_free(p);
    rx_stop(&hole);
    rx_stop(&good);
}

/* Adds *post, to a receiver of its own (answer: as rx_start), with
 * timeout_ms and addr_ok, and runs a poster until the post ends; how it
 * ended is left in *post. */
static void post_alone(svc_post *post, int answer, long timeout_ms, svc_addr_ok_fn addr_ok)
{
    static char url[64];
    rx r;
    rx_start(&r, answer);
    svc_poster *p = svc_poster_new();
    ended e = {0};
    *post = post_to(url, sizeof url, r.port);
    assert_int_equal(svc_poster_add(p, post, timeout_ms, addr_ok, NULL), 0);
    run_until(p, &e, post);
    svc_poster_free(p);
    rx_stop(&r);
}

static void test_a_post_ends_at_its_timeout(void **state)
{
    (void)state;
    svc_post stuck;
    post_alone(&stuck, 0, 200, NULL);
    assert_int_equal(stuck.status, 0);
    assert_true(stuck.error[0] != '\0');
    assert_true(stuck.duration_ms >= 150);
}

static int refuse_all(const void *cls, const struct sockaddr *sa, char *why, size_t whylen)
{
    (void)cls, (void)sa;
    snprintf(why, whylen, "the address is not allowed");
    return 0;
}

static void test_a_refused_address_ends_with_why(void **state)
{
    (void)state;
    svc_post refused;
    post_alone(&refused, 1, 5000, refuse_all);
    assert_int_equal(refused.status, 0);
    assert_string_equal(refused.error, "address refused: the address is not allowed");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_receiver_that_never_answers_holds_back_no_other_post),
        cmocka_unit_test(test_a_post_ends_at_its_timeout),
        cmocka_unit_test(test_a_refused_address_ends_with_why),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
