/* test_svc_http_guard.c — what the HTTP server refuses before the
 * application sees a request, on real servers over raw sockets: routes
 * that declare no access (the server does not start), a body sent to a
 * route that takes none, JSON bodies past their own limit, their depth,
 * their values or the route's known names, a body that does not come in
 * time, and memory taken for a Content-Length before its bytes arrive.
 * Also: every answer says nosniff, and behind a trusted proxy the client
 * is the address X-Forwarded-For names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <malloc.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "svc_http.h"
#include "svc_log.h"
#include "svc_util.h"

#define MAX_BODY ((size_t)64 << 20)
#define MAX_JSON 4096

static int h_ok(svc_req *r)
{
    size_t len;
    svc_req_body(r, &len);
    return svc_reply_json(r, 200, json_pack("{s:s, s:I}", "ip", svc_req_client_ip(r), "len",
                                            (json_int_t)len));
}

static const char *const fields[] = {"kernel", "params", NULL};

static const svc_route routes[] = {
    {.method = "GET", .pattern = "/ping", .handler = h_ok, .access = SVC_ACCESS_PUBLIC},
    {.method = "POST", .pattern = "/job", .handler = h_ok, .access = SVC_ACCESS_PUBLIC,
     .json_body = 1, .json_fields = fields},
    {.method = "POST", .pattern = "/report", .handler = h_ok, .access = SVC_ACCESS_PUBLIC,
     .json_body = 1, .json_bulk = 1},
    {.method = "POST", .pattern = "/raw", .handler = h_ok, .access = SVC_ACCESS_PUBLIC,
     .raw_body = 1},
    {0},
};

static svc_server *srv;
static int port;

static int setup(void **state)
{
    (void)state;
    svc_log_init("test", getenv("TEST_LOG_DEBUG") ? SVC_LOG_DEBUG : SVC_LOG_ERROR);
    char err[256];
    svc_server_opts o = {.listen = "127.0.0.1:0", .routes = routes, .max_body = MAX_BODY,
                         .max_json_body = MAX_JSON, .json_max_depth = 8, .json_max_values = 50,
                         .body_timeout_s = 1, .body_min_rate = 1 << 20,
                         .trusted_proxies = "127.0.0.1/32", .threads = 2};
    srv = svc_server_start(&o, err, sizeof err);
    if (srv == NULL) {
        fprintf(stderr, "server: %s\n", err);
        return -1;
    }
    port = svc_server_port(srv);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    svc_server_stop(srv);
    return 0;
}

static int connect_from(const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &a.sin_addr);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* Everything the server sends until it closes or ms pass (NUL-ended,
 * static). *closed: it closed. */
static const char *read_all(int fd, int ms, int *closed)
{
    static char buf[65536];
    size_t n = 0;
    int64_t until = svc_now_mono_ms() + ms;
    *closed = 0;
    while (n < sizeof buf - 1) {
        int left = (int)(until - svc_now_mono_ms());
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, left) <= 0)
            break;
        ssize_t k = recv(fd, buf + n, sizeof buf - 1 - n, 0);
        if (k <= 0) {
            *closed = 1;
            break;
        }
        n += (size_t)k;
    }
    buf[n] = '\0';
    return buf;
}

/* Sends req (len bytes) on a new connection from src and reads the reply. */
static const char *exchange(const char *src, const char *req, size_t len)
{
    int fd = connect_from(src), closed;
    size_t off = 0;
    while (off < len) {
        ssize_t k = send(fd, req + off, len - off, MSG_NOSIGNAL);
        if (k <= 0)
            break;
        off += (size_t)k;
    }
    const char *r = read_all(fd, 5000, &closed);
    close(fd);
    return r;
}

static const char *post(const char *path, const char *ctype, const char *body)
{
    static char req[16384];
    int n = snprintf(req, sizeof req,
                     "POST %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Type: %s\r\n"
                     "Content-Length: %zu\r\n\r\n%s", path, ctype, strlen(body), body);
    return exchange("127.0.0.1", req, (size_t)n);
}

static int status_of(const char *reply)
{
    int st = 0;
    sscanf(reply, "HTTP/1.%*d %d", &st);
    return st;
}

static void routes_that_declare_no_access_keep_the_server_from_starting(void **state)
{
    (void)state;
    static const svc_route undeclared[] = {
        {.method = "GET", .pattern = "/ok", .handler = h_ok, .access = SVC_ACCESS_PUBLIC},
        {.method = "GET", .pattern = "/forgot", .handler = h_ok},
        {0},
    };
    static const svc_route role[] = {
        {.method = "GET", .pattern = "/admin", .handler = h_ok, .access = 3},
        {0},
    };
    char err[256];
    svc_server_opts o = {.listen = "127.0.0.1:0", .routes = undeclared, .max_body = 10};
    assert_null(svc_server_start(&o, err, sizeof err));
    assert_non_null(strstr(err, "GET /forgot declares no access"));
    o.routes = role; /* a role, but nobody to check it */
    assert_null(svc_server_start(&o, err, sizeof err));
    assert_non_null(strstr(err, "needs an authorize callback"));
}

static void a_body_on_a_route_that_takes_none_is_413_at_the_head(void **state)
{
    (void)state;
    /* 10 MB announced, none sent: the answer comes from the head */
    const char *big = "GET /ping HTTP/1.1\r\nHost: t\r\nContent-Length: 10000000\r\n\r\n";
    const char *r = exchange("127.0.0.1", big, strlen(big));
    assert_int_equal(status_of(r), 413);
    assert_non_null(strstr(r, "\"payload_too_large\""));
    assert_non_null(strstr(r, "takes no request body"));
    const char *te = "GET /ping HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
    r = exchange("127.0.0.1", te, strlen(te));
    assert_int_equal(status_of(r), 413);
    const char *ok = "GET /ping HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
    assert_int_equal(status_of(exchange("127.0.0.1", ok, strlen(ok))), 200);
}

static void every_answer_says_nosniff(void **state)
{
    (void)state;
    const char *reqs[] = {"GET /ping HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                          "GET /nope HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                          "PUT /ping HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"};
    for (size_t i = 0; i < 3; i++) {
        const char *r = exchange("127.0.0.1", reqs[i], strlen(reqs[i]));
        assert_non_null(strstr(r, "X-Content-Type-Options: nosniff\r\n"));
    }
}

static void json_bodies_are_held_to_their_own_limits(void **state)
{
    (void)state;
    char body[8192];
    /* within the limits */
    const char *r = post("/job", "application/json", "{\"kernel\":\"k\",\"params\":{\"a\":[1,2]}}");
    assert_int_equal(status_of(r), 200);
    /* an array is no request */
    r = post("/job", "application/json", " [{},{}]");
    assert_int_equal(status_of(r), 400);
    assert_non_null(strstr(r, "must be a JSON object"));
    /* a name the route does not know, before its value */
    r = post("/job", "application/json", "{\"kernel\":\"k\",\"x\":[{},{},{}]}");
    assert_int_equal(status_of(r), 400);
    assert_non_null(strstr(r, "\"field\":\"x\""));
    assert_non_null(strstr(r, "\"invalid_argument\""));
    /* too deep, too many values */
    r = post("/job", "application/json", "{\"params\":[[[[[[[[[]]]]]]]]]}");
    assert_int_equal(status_of(r), 413);
    assert_non_null(strstr(r, "deeper than 8 levels"));
    snprintf(body, sizeof body, "{\"params\":[");
    for (int i = 0; i < 60; i++)
        strcat(body, i ? ",{}" : "{}");
    strcat(body, "]}");
    r = post("/job", "application/json", body);
    assert_int_equal(status_of(r), 413);
    assert_non_null(strstr(r, "more than 50 values"));
    /* a JSON body past max_json_body is refused from its Content-Length;
     * a raw or bulk body of that size is not */
    memset(body, ' ', 6000);
    memcpy(body, "{\"kernel\":1", 11);
    body[5999] = '}';
    body[6000] = '\0';
    r = post("/job", "application/json", body);
    assert_int_equal(status_of(r), 413);
    assert_non_null(strstr(r, "limit of 4096 bytes"));
    assert_int_equal(status_of(post("/report", "application/json", body)), 200);
    assert_int_equal(status_of(post("/raw", "application/octet-stream", body)), 200);
}

/* The body buffer grows with the bytes that came, not with the number in
 * Content-Length: 60 MB announced, 10 bytes sent, little memory taken. */
static void a_content_length_takes_no_memory_before_its_bytes(void **state)
{
    (void)state;
    struct mallinfo2 before = mallinfo2();
    int fds[8];
    for (int i = 0; i < 8; i++) {
        fds[i] = connect_from("127.0.0.1");
        const char *head = "POST /raw HTTP/1.1\r\nHost: t\r\nContent-Length: 60000000\r\n\r\n0123456789";
        assert_int_equal(send(fds[i], head, strlen(head), MSG_NOSIGNAL), (ssize_t)strlen(head));
    }
    svc_sleep_ms(300); /* the server has read the heads and the 10 bytes */
    struct mallinfo2 after = mallinfo2();
    size_t grew = after.uordblks + after.hblkhd - before.uordblks - before.hblkhd;
    assert_true(grew < ((size_t)4 << 20));
    for (int i = 0; i < 8; i++)
        close(fds[i]);
}

/* A body trickled a byte at a time is cut at the body deadline (1 s here),
 * though every byte resets libmicrohttpd's own idle timer. */
static void a_trickled_body_is_cut_at_its_deadline(void **state)
{
    (void)state;
    int fd = connect_from("127.0.0.1"), closed = 0;
    const char *head = "POST /raw HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n";
    send(fd, head, strlen(head), MSG_NOSIGNAL);
    int64_t t0 = svc_now_mono_ms();
    while (!closed && svc_now_mono_ms() - t0 < 5000) {
        if (send(fd, "a", 1, MSG_NOSIGNAL) != 1)
            break;
        read_all(fd, 100, &closed);
    }
    int64_t took = svc_now_mono_ms() - t0;
    assert_true(took >= 900 && took < 2500);
    close(fd);
}

/* Behind a trusted proxy the client is the rightmost hop it did not add
 * itself; anyone else's X-Forwarded-For is ignored. */
static void the_client_is_who_a_trusted_proxy_names(void **state)
{
    (void)state;
    const char *req = "GET /ping HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                      "X-Forwarded-For: 198.51.100.1, 203.0.113.9\r\n\r\n";
    assert_non_null(strstr(exchange("127.0.0.1", req, strlen(req)), "\"ip\":\"203.0.113.9\""));
    assert_non_null(strstr(exchange("127.0.0.2", req, strlen(req)), "\"ip\":\"127.0.0.2\""));
    const char *two = "GET /ping HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                      "X-Forwarded-For: 198.51.100.1\r\nX-Forwarded-For: 127.0.0.1\r\n\r\n";
    assert_non_null(strstr(exchange("127.0.0.1", two, strlen(two)), "\"ip\":\"198.51.100.1\""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(routes_that_declare_no_access_keep_the_server_from_starting),
        cmocka_unit_test(a_body_on_a_route_that_takes_none_is_413_at_the_head),
        cmocka_unit_test(every_answer_says_nosniff),
        cmocka_unit_test(json_bodies_are_held_to_their_own_limits),
        cmocka_unit_test(a_content_length_takes_no_memory_before_its_bytes),
        cmocka_unit_test(a_trickled_body_is_cut_at_its_deadline),
        cmocka_unit_test(the_client_is_who_a_trusted_proxy_names),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
