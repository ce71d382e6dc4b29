/* test_svc_sse.c — Server-Sent Events framing, and live reply streams on a
 * real server with a thread pool (epoll): a stream with nothing to send
 * holds no thread, frames pushed from another thread arrive at once, and a
 * stopping server ends open streams cleanly. Read with a raw socket so the
 * test sees the chunked framing itself. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "svc_http.h"
#include "svc_log.h"
#include "svc_sse.h"
#include "svc_util.h"

/* ---- framing ---------------------------------------------------------- */

static void test_frame_has_id_event_and_one_data_line_per_line(void **state)
{
    (void)state;
    char out[256];
    long n = svc_sse_frame(out, sizeof(out), "42", "state", "{\"a\":1}");
    assert_string_equal(out, "id: 42\nevent: state\ndata: {\"a\":1}\n\n");
    assert_int_equal(n, (long)strlen(out));
    svc_sse_frame(out, sizeof(out), NULL, NULL, "one\ntwo\r\nthree\rfour");
    assert_string_equal(out, "data: one\ndata: two\ndata: three\ndata: four\n\n");
    svc_sse_frame(out, sizeof(out), NULL, "x", "");
    assert_string_equal(out, "event: x\ndata: \n\n");
    svc_sse_frame(out, sizeof(out), NULL, NULL, "end\n");
    assert_string_equal(out, "data: end\ndata: \n\n");
}

static void test_frame_refuses_newline_in_id_or_event(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(svc_sse_frame(out, sizeof(out), "1\n2", NULL, "x"), -1);
    assert_int_equal(svc_sse_frame(out, sizeof(out), NULL, "a\rb", "x"), -1);
}

static void test_frame_reports_its_length_when_the_buffer_is_short(void **state)
{
    (void)state;
    char out[8];
    long n = svc_sse_frame(out, sizeof(out), "1", "e", "0123456789");
    assert_int_equal(n, (long)strlen("id: 1\nevent: e\ndata: 0123456789\n\n"));
    char *big = malloc((size_t)n + 1);
    assert_int_equal(svc_sse_frame(big, (size_t)n + 1, "1", "e", "0123456789"), n);
    assert_string_equal(big, "id: 1\nevent: e\ndata: 0123456789\n\n");
    free(big);
}

/* ---- live streams on a server ----------------------------------------- */

#define THREADS 2

static svc_server *srv;
static int port;
static pthread_mutex_t chan_mu = PTHREAD_MUTEX_INITIALIZER;
static svc_sse *chan;  /* the open /events stream, held by the test */
static atomic_int pings;

static int h_events(svc_req *r)
{
    svc_sse *c = svc_sse_open(r, 0);
    if (c == NULL)
        return 0;
    pthread_mutex_lock(&chan_mu);
    svc_sse_release(chan);
    chan = c;
    pthread_mutex_unlock(&chan_mu);
    return 0;
}

static int h_ping(svc_req *r)
{
    atomic_fetch_add(&pings, 1);
    return svc_reply_raw(r, 200, "text/plain", "pong", 4);
}

static const svc_route routes[] = {
    {.method = "GET", .pattern = "/events", .handler = h_events, .access = SVC_ACCESS_PUBLIC},
    {.method = "GET", .pattern = "/ping", .handler = h_ping, .access = SVC_ACCESS_PUBLIC},
    {.method = NULL},
};

static int server_start(void)
{
    char err[256];
    svc_server_opts o = {.listen = "127.0.0.1:0", .routes = routes, .max_body = 1024,
                         .threads = THREADS};
    srv = svc_server_start(&o, err, sizeof(err));
    if (srv == NULL) {
        fprintf(stderr, "server: %s\n", err);
        return -1;
    }
    port = svc_server_port(srv);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    svc_log_init("test", getenv("TEST_LOG_DEBUG") ? SVC_LOG_DEBUG : SVC_LOG_ERROR);
    return server_start();
}

static int teardown(void **state)
{
    (void)state;
    svc_server_stop(srv);
    pthread_mutex_lock(&chan_mu);
    svc_sse_release(chan);
    chan = NULL;
    pthread_mutex_unlock(&chan_mu);
    return 0;
}

static int connect_get(const char *path)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    char req[256];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path);
    assert_int_equal(write(fd, req, (size_t)n), n);
    return fd;
}

/* Reads into buf (appending at *len) until it holds want, the peer closes,
 * or ms pass. Returns 1 when want was seen. */
static int read_until(int fd, char *buf, size_t cap, size_t *len, const char *want, int ms)
{
    int64_t until = svc_now_mono_ms() + ms;
    while (strstr(buf, want) == NULL) {
        int64_t left = until - svc_now_mono_ms();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            return 0;
        ssize_t n = read(fd, buf + *len, cap - 1 - *len);
        if (n <= 0)
            return strstr(buf, want) != NULL;
        *len += (size_t)n;
        buf[*len] = '\0';
    }
    return 1;
}

static svc_sse *wait_chan(void)
{
    for (int i = 0; i < 200; i++) {
        pthread_mutex_lock(&chan_mu);
        svc_sse *c = chan;
        pthread_mutex_unlock(&chan_mu);
        if (c != NULL)
            return c;
        svc_sleep_ms(10);
    }
    fail_msg("the stream was not opened");
    return NULL;
}

/* Opens GET /events on a connection of its own, reads the response head
 * into buf (*len bytes) and the server's channel into *c; the fd. */
static int open_stream(char *buf, size_t size, size_t *len, svc_sse **c)
{
    int fd = connect_get("/events");
    assert_true(read_until(fd, buf, size, len, "\r\n\r\n", 2000));
    *c = wait_chan();
    return fd;
}

static void drop_chan(void)
{
    pthread_mutex_lock(&chan_mu);
    svc_sse_release(chan);
    chan = NULL;
    pthread_mutex_unlock(&chan_mu);
}

typedef struct {
    svc_sse *c;
    int n, gap_ms;
} producer;

static void *produce(void *arg)
{
    producer *p = arg;
    for (int i = 1; i <= p->n; i++) {
        svc_sleep_ms(p->gap_ms);
        char id[16], data[32];
        snprintf(id, sizeof(id), "%d", i);
        snprintf(data, sizeof(data), "{\"n\":%d}", i);
        svc_sse_send(p->c, id, "tick", data);
    }
    return NULL;
}

static void test_idle_streams_hold_no_thread_and_pushed_events_arrive(void **state)
{
    (void)state;
    /* More idle streams than the pool has threads: each waits suspended,
     * so the server still answers other requests at once. */
    int fds[THREADS * 3];
    for (int i = 0; i < THREADS * 3; i++) {
        fds[i] = connect_get("/events");
        char buf[1024] = "";
        size_t len = 0;
        assert_true(read_until(fds[i], buf, sizeof(buf), &len, "\r\n\r\n", 2000));
        assert_non_null(strstr(buf, "HTTP/1.1 200"));
        assert_non_null(strstr(buf, "text/event-stream"));
        assert_non_null(strstr(buf, "chunked"));
    }
    int pf = connect_get("/ping");
    char pbuf[512] = "";
    size_t plen = 0;
    assert_true(read_until(pf, pbuf, sizeof(pbuf), &plen, "pong", 2000));
    close(pf);

    /* The last stream opened is the test's: events pushed by another
     * thread, with pauses in between, arrive in order. */
    svc_sse *c = wait_chan();
    producer p = {c, 5, 30};
    pthread_t t;
    pthread_create(&t, NULL, produce, &p);
    char buf[4096] = "";
    size_t len = 0;
    int fd = fds[THREADS * 3 - 1];
    assert_true(read_until(fd, buf, sizeof(buf), &len, "id: 5\nevent: tick\ndata: {\"n\":5}\n\n", 3000));
    pthread_join(t, NULL);
    const char *at = buf;
    for (int i = 1; i <= 5; i++) {
        char want[32];
        snprintf(want, sizeof(want), "id: %d\n", i);
        const char *hit = strstr(at, want);
        assert_non_null(hit);
        at = hit;
    }
    /* A comment, then the end: the body closes with the last chunk. */
    assert_int_equal(svc_sse_comment(c, "ping"), 0);
    svc_sse_end(c);
    assert_true(read_until(fd, buf, sizeof(buf), &len, "0\r\n\r\n", 3000));
    assert_non_null(strstr(buf, ": ping\n\n"));
    assert_int_equal(svc_sse_send(c, "6", "tick", "late"), -1);
    for (int i = 0; i < THREADS * 3; i++)
        close(fds[i]);
    drop_chan();
}

static void test_a_client_gone_closes_the_channel(void **state)
{
    (void)state;
    char buf[1024] = "";
    size_t len = 0;
    svc_sse *c;
    int fd = open_stream(buf, sizeof buf, &len, &c);
    close(fd);
    /* The server learns of it when it writes next. */
    int closed = 0;
    for (int i = 0; i < 200 && !closed; i++) {
        svc_sse_comment(c, "ping");
        svc_sleep_ms(10);
        closed = svc_sse_closed(c);
    }
    assert_true(closed);
    drop_chan();
}

static void test_stop_ends_open_streams_cleanly(void **state)
{
    (void)state;
    char buf[1024] = "";
    size_t len = 0;
    svc_sse *c;
    int fd = open_stream(buf, sizeof buf, &len, &c);
    assert_int_equal(svc_sse_send(c, "1", NULL, "before"), 0);
    assert_true(read_until(fd, buf, sizeof(buf), &len, "data: before\n\n", 2000));
    int64_t t0 = svc_now_mono_ms();
    svc_server_stop(srv); /* the stream is suspended: stop must end it */
    assert_true(svc_now_mono_ms() - t0 < 3000);
    assert_true(svc_sse_closed(c));
    assert_int_equal(svc_sse_send(c, "2", NULL, "after"), -1);
    read_until(fd, buf, sizeof(buf), &len, "never", 1000);
    assert_null(strstr(buf, "after"));
    close(fd);
    drop_chan();
    assert_int_equal(server_start(), 0); /* for the teardown */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frame_has_id_event_and_one_data_line_per_line),
        cmocka_unit_test(test_frame_refuses_newline_in_id_or_event),
        cmocka_unit_test(test_frame_reports_its_length_when_the_buffer_is_short),
        cmocka_unit_test(test_idle_streams_hold_no_thread_and_pushed_events_arrive),
        cmocka_unit_test(test_a_client_gone_closes_the_channel),
        cmocka_unit_test(test_stop_ends_open_streams_cleanly),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
