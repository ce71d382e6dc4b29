/* test_svc_http.c — black-box tests of the HTTP server: a real server on a
 * free port with a tiny route table, driven by libcurl (through svc_client
 * where it fits) and by a raw socket where the test needs to control exactly
 * what is sent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "svc_client.h"
#include "svc_http.h"
#include "svc_log.h"
#include "svc_test_net.h"
#include "svc_util.h"

#define MAX_BODY 1024

static svc_server *srv;
static svc_metrics *metrics;
static char base[64];

/* ---- handlers --------------------------------------------------------- */

static int h_item(svc_req *r)
{
    return svc_reply_json(r, 200, json_pack("{s:s, s:s}", "id", svc_req_param(r, "id"),
                                            "method", svc_req_method(r)));
}

static int h_part(svc_req *r)
{
    return svc_reply_json(r, 200, json_pack("{s:s, s:s}", "id", svc_req_param(r, "id"),
                                            "part", svc_req_param(r, "part")));
}

static int h_create(svc_req *r)
{
    svc_reply_header(r, "Location", "/v1/items/new");
    return svc_reply_json(r, 201, json_pack("{s:O}", "got", svc_req_json(r)));
}

static int h_query(svc_req *r)
{
    const char *a = svc_req_query(r, "a"), *b = svc_req_query(r, "b");
    return svc_reply_json(r, 200, json_pack("{s:s?, s:s?}", "a", a, "b", b));
}

static int h_silent(svc_req *r)
{
    (void)r;
    return 0;
}

static int h_whoami(svc_req *r)
{
    return svc_reply_json(r, 200, json_pack("{s:s?, s:s}", "bearer", svc_req_bearer(r), "ip",
                                            svc_req_client_ip(r)));
}

static int h_raw(svc_req *r)
{
    size_t len;
    svc_req_body(r, &len);
    return svc_reply_json(r, 200, json_pack("{s:I}", "len", (json_int_t)len));
}

static int h_error(svc_req *r)
{
    return svc_reply_error(r, 409, "conflict", "params.n", json_pack("{s:s}", "state", "running"),
                           "job is %s", "running");
}

/* A JSON string of ?mb= mebibytes: exercises replies far above socket
 * buffer sizes. */
static int h_big(svc_req *r)
{
    const char *mb = svc_req_query(r, "mb");
    size_t n = (size_t)atol(mb ? mb : "1") << 20;
    char *s = malloc(n + 1);
    memset(s, 'x', n);
    s[n] = '\0';
    json_t *j = json_pack("{s:s%}", "blob", s, n);
    free(s);
    return svc_reply_json(r, 200, j);
}

/* A streamed reply of ?bytes= bytes of "0123456789..." handed out at most
 * 1000 bytes a call, with a queued header. */
typedef struct digits {
    size_t left, pos;
} digits;

static ssize_t digits_fill(void *cls, char *buf, size_t max)
{
    digits *d = cls;
    size_t n = d->left < max ? d->left : max;
    n = n < 1000 ? n : 1000;
    for (size_t i = 0; i < n; i++)
        buf[i] = (char)('0' + (d->pos + i) % 10);
    d->pos += n;
    d->left -= n;
    return (ssize_t)n;
}

static int h_stream(svc_req *r)
{
    digits *d = calloc(1, sizeof(*d));
    d->left = (size_t)atol(svc_req_query(r, "bytes"));
    svc_reply_header(r, "X-Kind", "stream");
    return svc_reply_stream(r, 200, "text/plain", digits_fill, d, free);
}

/* POST /v1/limited: a streamed body within a limit of the caller's own
 * (X-Limit), as a quota is: refused from the head when its Content-Length
 * is over, cut off once a chunked one passes it. */
typedef struct limited {
    size_t limit, got;
    int cut;
} limited;

static int h_limited_head(svc_req *r)
{
    limited *l = svc_req_user_alloc(r, sizeof *l);
    const char *lim = svc_req_header(r, "X-Limit"), *cl = svc_req_header(r, "Content-Length");
    l->limit = (size_t)atol(lim ? lim : "0");
    if (cl != NULL && (size_t)atol(cl) > l->limit)
        return svc_reply_error(r, 413, "over_own_limit", NULL, NULL, "from the head"), -1;
    return 0;
}

static int h_limited_body(svc_req *r, const char *data, size_t n)
{
    limited *l = svc_req_user(r);
    (void)data;
    if (n > l->limit - l->got) {
        l->cut = 1;
        svc_req_cut_body(r);
        return -1;
    }
    l->got += n;
    return 0;
}

static int h_limited(svc_req *r)
{
    limited *l = svc_req_user(r);
    if (l->cut)
        return svc_reply_error(r, 413, "over_own_limit", NULL, NULL, "cut off");
    return svc_reply_json(r, 200, json_pack("{s:I}", "len", (json_int_t)l->got));
}

static const svc_route routes[] = {
    {.method = "GET", .pattern = "/v1/items/{id}", .handler = h_item, .access = SVC_ACCESS_PUBLIC},
    {.method = "DELETE", .pattern = "/v1/items/{id}", .handler = h_item, .access = SVC_ACCESS_PUBLIC},
    {.method = "GET", .pattern = "/v1/items/{id}/parts/{part}", .handler = h_part, .access = SVC_ACCESS_PUBLIC},
    {.method = "POST", .pattern = "/v1/items", .handler = h_create, .access = SVC_ACCESS_PUBLIC, .json_body = 1},
    {.method = "GET", .pattern = "/v1/query", .handler = h_query, .access = SVC_ACCESS_PUBLIC},
    {.method = "GET", .pattern = "/v1/silent", .handler = h_silent, .access = SVC_ACCESS_PUBLIC},
    {.method = "GET", .pattern = "/v1/whoami", .handler = h_whoami, .access = SVC_ACCESS_PUBLIC},
    {.method = "POST", .pattern = "/v1/raw", .handler = h_raw, .access = SVC_ACCESS_PUBLIC, .raw_body = 1},
    {.method = "GET", .pattern = "/v1/error", .handler = h_error, .access = SVC_ACCESS_PUBLIC},
    {.method = "GET", .pattern = "/v1/big", .handler = h_big, .access = SVC_ACCESS_PUBLIC},
    {.method = "GET", .pattern = "/v1/stream", .handler = h_stream, .access = SVC_ACCESS_PUBLIC},
    {.method = "POST", .pattern = "/v1/limited", .handler = h_limited, .body = h_limited_body,
     .body_type = "application/octet-stream", .max_body = (size_t)1 << 30, .head = h_limited_head,
     .access = SVC_ACCESS_PUBLIC},
    {0},
};

static int setup(void **state)
{
    (void)state;
    svc_log_init("test", getenv("TEST_LOG_DEBUG") ? SVC_LOG_DEBUG : SVC_LOG_ERROR);
    svc_client_global_init();
    char err[256];
    metrics = svc_metrics_new();
    svc_server_opts o = {.listen = "127.0.0.1:0", .routes = routes, .max_body = MAX_BODY,
                         .metrics = metrics};
    srv = svc_server_start(&o, err, sizeof err);
    if (srv == NULL) {
        fprintf(stderr, "server: %s\n", err);
        return -1;
    }
    snprintf(base, sizeof base, "http://127.0.0.1:%d", svc_server_port(srv));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    svc_server_stop(srv);
    svc_metrics_free(metrics);
    return 0;
}

/* The test server's URL of path (static buffer). */
static const char *url_of(const char *path)
{
    static char url[256];
    snprintf(url, sizeof url, "%s%s", base, path);
    return url;
}

/* ---- a raw libcurl request for what svc_http_call does not expose ------ */

typedef struct {
    long status;
    char *body;
    size_t len;
    char allow[128];
    char xkind[32];    /* X-Kind */
    int chunked;       /* Transfer-Encoding: chunked */
    size_t unsent; /* of a chunked upload */
    CURLcode rc;
} raw_resp;

static size_t on_write(char *d, size_t sz, size_t n, void *u)
{
    raw_resp *r = u;
    r->body = realloc(r->body, r->len + sz * n + 1);
    memcpy(r->body + r->len, d, sz * n);
    r->len += sz * n;
    r->body[r->len] = '\0';
    return sz * n;
}

static size_t on_header(char *d, size_t sz, size_t n, void *u)
{
    raw_resp *r = u;
    if (strncasecmp(d, "Allow:", 6) == 0)
        snprintf(r->allow, sizeof r->allow, "%.*s", (int)(sz * n - 9), d + 7);
    if (strncasecmp(d, "X-Kind:", 7) == 0)
        snprintf(r->xkind, sizeof r->xkind, "%.*s", (int)(sz * n - 10), d + 8);
    if (strncasecmp(d, "Transfer-Encoding: chunked", 26) == 0)
        r->chunked = 1;
    return sz * n;
}

typedef struct {
    size_t left;
} chunk_src;

static size_t on_read(char *buf, size_t sz, size_t n, void *u)
{
    chunk_src *c = u;
    size_t k = sz * n < c->left ? sz * n : c->left;
    if (k > 4096)
        k = 4096;
    memset(buf, ' ', k);
    c->left -= k;
    return k;
}

/* header: one more header line, or NULL. content_type NULL: none sent.
 * chunked > 0: upload that many bytes with Transfer-Encoding: chunked
 * instead of body. */
static raw_resp raw_with(const char *method, const char *path, const char *header,
                         const char *content_type, const char *body, size_t chunked)
{
    raw_resp r = {0};
    char ct[128];
    CURL *h = curl_easy_init();
    struct curl_slist *hl = curl_slist_append(NULL, "Expect:");
    if (header != NULL)
        hl = curl_slist_append(hl, header);
    if (content_type != NULL) {
        snprintf(ct, sizeof ct, "Content-Type: %s", content_type);
        hl = curl_slist_append(hl, ct);
    }
    chunk_src src = {chunked};
    curl_easy_setopt(h, CURLOPT_URL, url_of(path));
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 20L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &r);
    if (chunked > 0) {
        hl = curl_slist_append(hl, "Transfer-Encoding: chunked");
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(h, CURLOPT_READDATA, &src);
    } else if (body != NULL) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    r.rc = curl_easy_perform(h);
    r.unsent = src.left;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    return r;
}

static raw_resp raw(const char *method, const char *path, const char *content_type,
                    const char *body, size_t chunked)
{
    return raw_with(method, path, NULL, content_type, body, chunked);
}

/* The error code of a reply body, or "" (static buffer). */
static const char *error_code(const char *body)
{
    static char code[64];
    json_t *j = json_loads(body ? body : "", 0, NULL);
    const char *c = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
    snprintf(code, sizeof code, "%s", c != NULL ? c : "");
    json_decref(j);
    return code;
}

static svc_response call(const char *method, const char *path, const char *bearer, json_t *body)
{
    svc_response resp;
    svc_http_call(method, url_of(path), bearer, body, 10000, &resp);
    json_decref(body);
    return resp;
}

/* ---- tests ------------------------------------------------------------ */

static void test_route_params_are_captured(void **state)
{
    (void)state;
    svc_response r = call("GET", "/v1/items/abc-123", NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(json_string_value(json_object_get(r.json, "id")), "abc-123");
    svc_response_clear(&r);

    r = call("GET", "/v1/items/7/parts/wheel", NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(json_string_value(json_object_get(r.json, "id")), "7");
    assert_string_equal(json_string_value(json_object_get(r.json, "part")), "wheel");
    svc_response_clear(&r);

    r = call("DELETE", "/v1/items/9", NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(json_string_value(json_object_get(r.json, "method")), "DELETE");
    svc_response_clear(&r);
}

static void test_unknown_path_is_404_not_found(void **state)
{
    (void)state;
    const char *paths[] = {"/nope", "/v1/item", "/v1/items/", "/v1/items/1/parts", "/v1/items/1/x"};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        svc_response r = call("GET", paths[i], NULL, NULL);
        assert_int_equal(r.status, 404);
        assert_string_equal(
            json_string_value(json_object_get(json_object_get(r.json, "error"), "code")),
            "not_found");
        svc_response_clear(&r);
    }
}

static void test_wrong_method_is_405_with_allow_header(void **state)
{
    (void)state;
    raw_resp r = raw("PUT", "/v1/items/1", NULL, NULL, 0);
    assert_int_equal(r.status, 405);
    assert_string_equal(error_code(r.body), "method_not_allowed");
    assert_string_equal(r.allow, "GET, DELETE");
    free(r.body);
    r = raw("GET", "/v1/items", NULL, NULL, 0);
    assert_int_equal(r.status, 405);
    assert_string_equal(r.allow, "POST");
    free(r.body);
}

static void test_json_route_without_json_content_type_is_415(void **state)
{
    (void)state;
    static const struct {
        const char *content_type, *body;
    } sent[] = {{"text/plain", "{\"a\":1}"}, {NULL, NULL}, {"application/jsonx", "{}"}};
    for (size_t i = 0; i < sizeof sent / sizeof *sent; i++) {
        raw_resp r = raw("POST", "/v1/items", sent[i].content_type, sent[i].body, 0);
        assert_int_equal(r.status, 415);
        assert_string_equal(error_code(r.body), "unsupported_media_type");
        free(r.body);
    }
}

static void test_json_route_accepts_charset_parameter_and_replies_with_headers(void **state)
{
    (void)state;
    raw_resp r = raw("POST", "/v1/items", "application/json; charset=utf-8", "{\"a\":[1,2]}", 0);
    assert_int_equal(r.status, 201);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(json_object_get(j, "got"), "a"), 1)), 2);
    json_decref(j);
    free(r.body);
}

static void test_invalid_json_is_400_with_position(void **state)
{
    (void)state;
    raw_resp r = raw("POST", "/v1/items", "application/json", "{\"a\": 1,,}", 0);
    assert_int_equal(r.status, 400);
    assert_string_equal(error_code(r.body), "invalid_json");
    assert_non_null(strstr(r.body, "column"));
    free(r.body);
}

static void test_empty_or_non_object_or_bad_utf8_json_is_400(void **state)
{
    (void)state;
    const char *bodies[] = {"", "[1,2]", "\"str\"", "{\"a\":\"\xff\xfe\"}", "{\"a\":1,\"a\":2}"};
    for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
        raw_resp r = raw("POST", "/v1/items", "application/json", bodies[i], 0);
        assert_int_equal(r.status, 400);
        assert_string_equal(error_code(r.body), "invalid_json");
        free(r.body);
    }
}

static void test_body_at_limit_is_accepted(void **state)
{
    (void)state;
    char *body = malloc(MAX_BODY + 1);
    memset(body, ' ', MAX_BODY);
    body[MAX_BODY] = '\0';
    raw_resp r = raw("POST", "/v1/raw", "application/octet-stream", body, 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "1024"));
    free(r.body);
    free(body);
}

/* Sends the head req (a request's head, none of its body) on a connection of
 * its own and expects the server to answer 413 with error code within 5 s;
 * returns the answer (static buffer). */
static const char *head_refused_413(const char *req, const char *code)
{
    static char buf[2048];
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)svc_server_port(srv))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    struct pollfd p = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 5000), 1);
    memset(buf, 0, sizeof buf);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    assert_true(n > 0);
    assert_memory_equal(buf, "HTTP/1.1 413", 12);
    assert_non_null(strstr(buf, code));
    return buf;
}

/* The server must answer from the headers alone: the test sends none of the
 * announced gigabyte and still gets its 413. */
static void test_content_length_over_limit_is_413_without_reading_body(void **state)
{
    (void)state;
    head_refused_413("POST /v1/items HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Content-Length: 1000000000\r\n\r\n", "payload_too_large");
}

static void test_chunked_body_over_limit_is_413(void **state)
{
    (void)state;
    raw_resp r = raw("POST", "/v1/items", "application/json", NULL, 64 * 1024);
    assert_int_equal(r.status, 413);
    assert_string_equal(error_code(r.body), "payload_too_large");
    free(r.body);
    /* A body that keeps coming is cut off, not read to its end. */
    size_t huge = (size_t)256 << 20;
    r = raw("POST", "/v1/items", "application/json", NULL, huge);
    assert_true(r.status == 0 || r.status == 413);
    assert_true(r.unsent > 0);
    free(r.body);
    /* Under the limit, chunked is read whole. */
    r = raw("POST", "/v1/raw", "application/octet-stream", NULL, 1000);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "1000"));
    free(r.body);
}

/* A route's head check answers before any of the body is sent. */
static void test_head_check_refuses_from_the_head_alone(void **state)
{
    (void)state;
    const char *answer = head_refused_413("POST /v1/limited HTTP/1.1\r\nHost: x\r\n"
                                          "Content-Type: application/octet-stream\r\n"
                                          "X-Limit: 1000\r\nContent-Length: 100000\r\n\r\n",
                                          "over_own_limit");
    assert_non_null(strstr(answer, "from the head"));
}

/* A chunked upload of chunked bytes to /v1/limited, whose limit is X-Limit. */
static raw_resp limited_upload(size_t limit, size_t chunked)
{
    char lim[64];
    snprintf(lim, sizeof lim, "X-Limit: %zu", limit);
    return raw_with("POST", "/v1/limited", lim, "application/octet-stream", NULL, chunked);
}

/* A body its route cut off: a little more is drained so that the sender
 * gets the handler's answer; a body that keeps coming is not read to its
 * end (the route's own limit, 1 GiB, is far away). Within the limit, the
 * body is read whole. */
static void test_a_body_cut_by_its_route_is_not_read_on(void **state)
{
    (void)state;
    raw_resp r = limited_upload(10000, 64 * 1024);
    assert_int_equal(r.status, 413);
    assert_string_equal(error_code(r.body), "over_own_limit");
    free(r.body);
    r = limited_upload(10000, (size_t)256 << 20);
    assert_true(r.status == 0 || r.status == 413);
    assert_true(r.unsent > ((size_t)200 << 20));
    free(r.body);
    r = limited_upload(10000, 10000);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "10000"));
    free(r.body);
}

static void test_handler_without_reply_is_500_internal(void **state)
{
    (void)state;
    svc_response r = call("GET", "/v1/silent", NULL, NULL);
    assert_int_equal(r.status, 500);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.json, "error"), "code")),
                        "internal");
    svc_response_clear(&r);
}

static void test_query_args_reach_handler(void **state)
{
    (void)state;
    svc_response r = call("GET", "/v1/query?a=x%20y&c=3", NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(json_string_value(json_object_get(r.json, "a")), "x y");
    assert_true(json_is_null(json_object_get(r.json, "b")));
    svc_response_clear(&r);
}

static void test_bearer_token_is_parsed_and_client_ip_known(void **state)
{
    (void)state;
    svc_response r = call("GET", "/v1/whoami", "tok-123", NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(json_string_value(json_object_get(r.json, "bearer")), "tok-123");
    assert_string_equal(json_string_value(json_object_get(r.json, "ip")), "127.0.0.1");
    svc_response_clear(&r);

    r = call("GET", "/v1/whoami", NULL, NULL);
    assert_true(json_is_null(json_object_get(r.json, "bearer")));
    svc_response_clear(&r);
}

/* The bearer token h_whoami reads from the Authorization header auth: NULL
 * where it reads none (static buffer). */
static const char *bearer_of(const char *auth)
{
    static char token[64];
    char hdr[128];
    snprintf(hdr, sizeof hdr, "Authorization: %s", auth);
    raw_resp r = raw_with("GET", "/v1/whoami", hdr, NULL, NULL, 0);
    assert_int_equal(r.rc, CURLE_OK);
    json_t *j = json_loads(r.body, 0, NULL);
    const json_t *bearer = json_object_get(j, "bearer");
    const char *got = NULL;
    if (!json_is_null(bearer)) {
        assert_true(json_is_string(bearer));
        snprintf(token, sizeof token, "%s", json_string_value(bearer));
        got = token;
    }
    json_decref(j);
    free(r.body);
    return got;
}

static void test_bearer_rejects_other_schemes(void **state)
{
    (void)state;
    const char *bad[] = {"Basic dXNlcjpw", "Bearer", "Bearer ", "Bearertok", "Bearer a b"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_null(bearer_of(bad[i]));
    /* The scheme is case-insensitive. */
    assert_string_equal(bearer_of("bearer  k2"), "k2");
}

static void test_error_reply_has_code_message_field_and_extra(void **state)
{
    (void)state;
    svc_response r = call("GET", "/v1/error", NULL, NULL);
    assert_int_equal(r.status, 409);
    json_t *e = json_object_get(r.json, "error");
    assert_string_equal(json_string_value(json_object_get(e, "code")), "conflict");
    assert_string_equal(json_string_value(json_object_get(e, "message")), "job is running");
    assert_string_equal(json_string_value(json_object_get(e, "field")), "params.n");
    assert_string_equal(json_string_value(json_object_get(r.json, "state")), "running");
    svc_response_clear(&r);
}

static void test_json_body_round_trips_through_client(void **state)
{
    (void)state;
    svc_response r = call("POST", "/v1/items", NULL, json_pack("{s:f, s:s}", "x", 0.1, "s", "é"));
    assert_int_equal(r.status, 201);
    json_t *got = json_object_get(r.json, "got");
    assert_true(json_real_value(json_object_get(got, "x")) == 0.1);
    assert_string_equal(json_string_value(json_object_get(got, "s")), "é");
    svc_response_clear(&r);
}

static void test_large_response_arrives_whole(void **state)
{
    (void)state;
    svc_response r = call("GET", "/v1/big?mb=96", NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_string_length(json_object_get(r.json, "blob")), (size_t)96 << 20);
    svc_response_clear(&r);
}

static void test_streamed_reply_arrives_whole_and_chunked(void **state)
{
    (void)state;
    const size_t sizes[] = {0, 1, 999, 1000, 1001, 3 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char path[64];
        snprintf(path, sizeof path, "/v1/stream?bytes=%zu", sizes[i]);
        raw_resp r = raw("GET", path, NULL, NULL, 0);
        assert_int_equal(r.rc, CURLE_OK);
        assert_int_equal(r.status, 200);
        assert_string_equal(r.xkind, "stream");
        assert_true(r.chunked);
        assert_int_equal(r.len, sizes[i]);
        for (size_t j = 0; j < r.len; j++)
            if (r.body[j] != (char)('0' + j % 10))
                fail_msg("byte %zu of %zu is '%c'", j, r.len, r.body[j]);
        free(r.body);
    }
}

static void test_client_reports_transport_error(void **state)
{
    (void)state;
    /* A port that was just free: nothing listens there. */
    int port;
    close(svc_test_loopback(SOCK_STREAM, &port));
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/x", port);
    svc_response r;
    assert_int_equal(svc_http_call("GET", url, NULL, NULL, 2000, &r), SVC_XFER_EIO);
    assert_int_equal(r.status, 0);
    assert_true(r.error[0] != '\0');
    svc_response_clear(&r);
}

/* ---- raw transfers (svc_http_get_into, svc_http_post_raw) ---------------- */

static int count_chunks(void *cls, const void *data, size_t n)
{
    (void)data;
    *(size_t *)cls += n;
    return 0;
}

/* svc_http_get_into of the test server's path into buf[0..size), zeroed
 * first, with no token, chunk callback or cancel flag; its rc. */
static int get_into(const char *path, char *buf, size_t size, svc_response *r)
{
    memset(buf, 0, size);
    return svc_http_get_into(url_of(path), NULL, buf, size, NULL, NULL, 5000, NULL, r);
}

static void test_get_into_writes_the_body_into_the_callers_buffer(void **state)
{
    (void)state;
    char buf[5000];
    size_t seen = 0;
    svc_response r;
    memset(buf, 0, sizeof buf);
    assert_int_equal(svc_http_get_into(url_of("/v1/stream?bytes=5000"), "tok", buf, sizeof buf, count_chunks,
                                       &seen, 5000, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.length, 5000);
    assert_int_equal(seen, 5000);
    for (int i = 0; i < 5000; i++)
        assert_int_equal(buf[i], '0' + i % 10);
    svc_response_clear(&r);
}

static void test_get_into_refuses_a_body_larger_than_the_buffer(void **state)
{
    (void)state;
    char buf[4096];
    svc_response r;
    /* unannounced (chunked): found out on the way */
    assert_int_equal(get_into("/v1/stream?bytes=5000", buf, sizeof buf, &r), SVC_XFER_TOOBIG);
    assert_int_equal(r.length, -1);
    svc_response_clear(&r);
    /* announced (Content-Length): refused before a byte is stored */
    assert_int_equal(get_into("/v1/big?mb=1", buf, 100, &r), SVC_XFER_TOOBIG);
    assert_true(r.length > (1 << 20));
    assert_int_equal(buf[0], 0);
    svc_response_clear(&r);
}

static void test_get_into_keeps_an_error_reply_out_of_the_buffer(void **state)
{
    (void)state;
    char buf[4096];
    svc_response r;
    assert_int_equal(get_into("/v1/error", buf, sizeof buf, &r), 0);
    assert_int_equal(r.status, 409);
    assert_int_equal(buf[0], 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.json, "error"), "code")),
                        "conflict");
    svc_response_clear(&r);
}

static void test_raw_transfers_stop_when_cancelled(void **state)
{
    (void)state;
    char buf[64];
    int cancel = 1;
    svc_response r;
    assert_int_equal(svc_http_get_into(url_of("/v1/stream?bytes=64"), NULL, buf, sizeof buf, NULL, NULL, 5000,
                                       &cancel, &r), SVC_XFER_ABORTED);
    svc_response_clear(&r);
    assert_int_equal(svc_http_post_raw(url_of("/v1/raw"), NULL, "application/octet-stream", buf, sizeof buf, 5000,
                                       &cancel, &r), SVC_XFER_ABORTED);
    svc_response_clear(&r);
}

static void test_post_raw_sends_the_bytes_as_they_are(void **state)
{
    (void)state;
    char buf[1000];
    svc_response r;
    memset(buf, 0xab, sizeof buf);
    assert_int_equal(svc_http_post_raw(url_of("/v1/raw"), "tok", "application/octet-stream", buf, sizeof buf, 5000,
                                       NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_integer_value(json_object_get(r.json, "len")), 1000);
    svc_response_clear(&r);
}

static void test_bad_listen_address_is_refused(void **state)
{
    (void)state;
    char err[256];
    const char *bad[] = {"nohostport", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:12ab"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        svc_server_opts o = {.listen = bad[i], .routes = routes, .max_body = 10};
        assert_null(svc_server_start(&o, err, sizeof err));
        assert_non_null(strstr(err, "listen"));
    }
    /* The port the suite's server holds is in use. */
    char busy[64];
    snprintf(busy, sizeof busy, "127.0.0.1:%d", svc_server_port(srv));
    svc_server_opts o = {.listen = busy, .routes = routes, .max_body = 10};
    assert_null(svc_server_start(&o, err, sizeof err));
    assert_non_null(strstr(err, busy));
}

/* The count of a series of kowloon_http_requests_total once it reaches
 * want: the server counts a request after its reply is sent, so the client
 * may see the reply a moment before. */
static double requests_counted(const char *method, const char *route, const char *status,
                               double want)
{
    svc_metric *f = svc_metric_counter(metrics, "kowloon_http_requests_total", "",
                                       (const char *[]){"method", "route", "status", NULL});
    double v = 0;
    for (int i = 0; i < 200 && (v = svc_series_value(svc_metric_with(f, method, route, status))) < want;
         i++)
        svc_sleep_ms(5);
    return v;
}

static void test_requests_are_counted_by_route_pattern_never_raw_path(void **state)
{
    (void)state;
    double before = requests_counted("GET", "/v1/items/{id}", "200", 0);
    double missing = requests_counted("GET", "unmatched", "404", 0);
    double odd = requests_counted("other", "unmatched", "405", 0);
    for (int i = 0; i < 3; i++) {
        char path[64];
        snprintf(path, sizeof path, "/v1/items/secret-%d", i);
        svc_response r = call("GET", path, NULL, NULL);
        assert_int_equal(r.status, 200);
        svc_response_clear(&r);
    }
    raw_resp nf = raw("GET", "/no/such/path-xyz", NULL, NULL, 0);
    assert_int_equal(nf.status, 404);
    free(nf.body);
    raw_resp bm = raw("BREW", "/v1/items/pot", NULL, NULL, 0);
    assert_int_equal(bm.status, 405);
    free(bm.body);
    assert_true(requests_counted("GET", "/v1/items/{id}", "200", before + 3) == before + 3);
    assert_true(requests_counted("GET", "unmatched", "404", missing + 1) == missing + 1);
    assert_true(requests_counted("other", "unmatched", "405", odd + 1) == odd + 1);
    const double *b = svc_metrics_latency_bounds;
    svc_metric *h = svc_metric_histogram(metrics, "kowloon_http_request_duration_seconds", "",
                                         (const char *[]){"method", "route", NULL}, b,
                                         svc_metrics_latency_nbounds);
    assert_true(svc_series_value(svc_metric_with(h, "GET", "/v1/items/{id}")) >= 3);
    size_t len;
    char *text = svc_metrics_render(metrics, &len);
    assert_non_null(text);
    assert_null(strstr(text, "secret-"));
    assert_null(strstr(text, "path-xyz"));
    assert_null(strstr(text, "BREW"));
    assert_non_null(strstr(text, "\nkowloon_http_connections "));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route_params_are_captured),
        cmocka_unit_test(test_unknown_path_is_404_not_found),
        cmocka_unit_test(test_wrong_method_is_405_with_allow_header),
        cmocka_unit_test(test_json_route_without_json_content_type_is_415),
        cmocka_unit_test(test_json_route_accepts_charset_parameter_and_replies_with_headers),
        cmocka_unit_test(test_invalid_json_is_400_with_position),
        cmocka_unit_test(test_empty_or_non_object_or_bad_utf8_json_is_400),
        cmocka_unit_test(test_body_at_limit_is_accepted),
        cmocka_unit_test(test_content_length_over_limit_is_413_without_reading_body),
        cmocka_unit_test(test_chunked_body_over_limit_is_413),
        cmocka_unit_test(test_handler_without_reply_is_500_internal),
        cmocka_unit_test(test_head_check_refuses_from_the_head_alone),
        cmocka_unit_test(test_a_body_cut_by_its_route_is_not_read_on),
        cmocka_unit_test(test_query_args_reach_handler),
        cmocka_unit_test(test_bearer_token_is_parsed_and_client_ip_known),
        cmocka_unit_test(test_bearer_rejects_other_schemes),
        cmocka_unit_test(test_error_reply_has_code_message_field_and_extra),
        cmocka_unit_test(test_json_body_round_trips_through_client),
        cmocka_unit_test(test_large_response_arrives_whole),
        cmocka_unit_test(test_streamed_reply_arrives_whole_and_chunked),
        cmocka_unit_test(test_client_reports_transport_error),
        cmocka_unit_test(test_get_into_writes_the_body_into_the_callers_buffer),
        cmocka_unit_test(test_get_into_refuses_a_body_larger_than_the_buffer),
        cmocka_unit_test(test_get_into_keeps_an_error_reply_out_of_the_buffer),
        cmocka_unit_test(test_raw_transfers_stop_when_cancelled),
        cmocka_unit_test(test_post_raw_sends_the_bytes_as_they_are),
        cmocka_unit_test(test_bad_listen_address_is_refused),
        cmocka_unit_test(test_requests_are_counted_by_route_pattern_never_raw_path),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
