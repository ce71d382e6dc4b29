/* test_svc_multipart.c — the streaming multipart/form-data parser: the same
 * parts whatever the feeding (whole, byte by byte, random pieces), binary
 * content that imitates the delimiter, each refusal with its message, and
 * the throughput on a 256 MiB part in 64 KiB pieces. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "svc_multipart.h"

#define B "----KowloonBoundary7MA4YWxkTrZu0gW"
#define CT "multipart/form-data; boundary=" B

static uint64_t rng_state;

static uint64_t rng(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- a recorder of callbacks ---------------------------------------- */

typedef struct {
    char name[64], fname[64], ct[64];
    int has_fname, has_ct, ended;
    char *data;
    size_t n, cap;
} rec_part;

typedef struct {
    rec_part p[16];
    size_t np;
    size_t data_calls;
    int stop_on_begin;   /* part_begin returns non-zero for this part (1-based) */
} rec;

static int on_begin(void *cls, const char *name, const char *fname, const char *ct)
{
    rec *r = cls;
    assert_true(r->np < 16);
    assert_non_null(name);
    rec_part *p = &r->p[r->np++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    if (fname)
        p->has_fname = 1, snprintf(p->fname, sizeof p->fname, "%s", fname);
    if (ct)
        p->has_ct = 1, snprintf(p->ct, sizeof p->ct, "%s", ct);
    return r->stop_on_begin == (int)r->np;
}

static int on_data(void *cls, const char *data, size_t n)
{
    rec *r = cls;
    assert_true(r->np > 0 && n > 0);
    rec_part *p = &r->p[r->np - 1];
    assert_false(p->ended);
    if (p->n + n > p->cap) {
        p->cap = (p->n + n) * 2;
        p->data = realloc(p->data, p->cap);
        assert_non_null(p->data);
    }
    memcpy(p->data + p->n, data, n);
    p->n += n;
    r->data_calls++;
    return 0;
}

static int on_end(void *cls)
{
    rec *r = cls;
    assert_true(r->np > 0);
    r->p[r->np - 1].ended = 1;
    return 0;
}

static const svc_multipart_cb rec_cb = {on_begin, on_data, on_end};

static void rec_free(rec *r)
{
    for (size_t i = 0; i < r->np; i++)
        free(r->p[i].data);
    memset(r, 0, sizeof *r);
}

static void rec_equal(const rec *a, const rec *b)
{
    assert_int_equal(a->np, b->np);
    for (size_t i = 0; i < a->np; i++) {
        assert_string_equal(a->p[i].name, b->p[i].name);
        assert_int_equal(a->p[i].has_fname, b->p[i].has_fname);
        assert_string_equal(a->p[i].fname, b->p[i].fname);
        assert_int_equal(a->p[i].has_ct, b->p[i].has_ct);
        assert_string_equal(a->p[i].ct, b->p[i].ct);
        assert_int_equal(a->p[i].ended, b->p[i].ended);
        assert_int_equal(a->p[i].n, b->p[i].n);
        if (a->p[i].n)
            assert_memory_equal(a->p[i].data, b->p[i].data, a->p[i].n);
    }
}

/* Feeds body in pieces: step 0 whole, step 1 byte by byte, step < 0 random
 * sizes in 1..-step from the current seed. Returns feed's result, then
 * finish's; *err gets the message. */
static int parse(const char *ct, const char *body, size_t len, long step, rec *r,
                 size_t max_parts, size_t max_headers, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    const char *why = NULL;
    svc_multipart *mp = svc_multipart_new(ct, &rec_cb, r, max_parts, max_headers, &why);
    if (mp == NULL)
        fail_msg("new refused %s: %s", ct, why);
    int rc = 0;
    size_t at = 0;
    while (at < len && rc == 0) {
        size_t n = step == 0 ? len : step > 0 ? (size_t)step : 1 + rng() % (size_t)-step;
        if (n > len - at)
            n = len - at;
        rc = svc_multipart_feed(mp, body + at, n);
        at += n;
    }
    if (rc == 0)
        rc = svc_multipart_finish(mp);
    snprintf(err, errlen, "%s", svc_multipart_error(mp));
    assert_true((rc == 0) == (err[0] == '\0'));
    svc_multipart_free(mp);
    return rc;
}

/* ---- the reference body ------------------------------------------- */

typedef struct {
    char *body;
    size_t len;
    char *bin1, *bin2;
    size_t n1, n2;
} body3;

static const char json_part[] = "{\"kernel\":\"gemm\",\"args\":{\"m\":2}}";

/* Binary content with every near-miss of the delimiter in it. */
static char *tricky_bin(size_t *n, int tail_cr)
{
    static const char *traps[] = {
        "\r\n--", "\r\n--" "----KowloonBoundary7MA4YWxkTrZu0g", "\r\n-", "\r", "\r\r\n--",
        "\r\n--" "----KowloonBoundary7MA4YWxkTrZu0gX", "--" B, "\n--" B, "\r\n\r\n--",
    };
    size_t cap = 8192, len = 0;
    char *b = malloc(cap);
    for (int round = 0; round < 8; round++) {
        for (size_t i = 0; i < 200; i++)
            b[len++] = (char)rng();
        for (size_t t = 0; t < sizeof traps / sizeof traps[0]; t++) {
            size_t k = strlen(traps[t]);
            memcpy(b + len, traps[t], k);
            len += k;
            /* A filler that neither completes a trap into the delimiter
             * nor makes the next one a CRLF-led delimiter. */
            char c = (char)rng();
            b[len++] = c == 'W' || c == '\r' ? 'w' : c;
        }
    }
    b[len++] = '\0';   /* a NUL is content like any byte */
    memcpy(b + len, "\r\n--" "----KowloonBoundary7MA4YWxkTrZu0g", 37);   /* a prefix right at the end */
    len += 37;
    if (tail_cr)
        b[len++] = '\r';
    *n = len;
    return b;
}

static void body3_make(body3 *b)
{
    b->bin1 = tricky_bin(&b->n1, 0);
    b->bin2 = tricky_bin(&b->n2, 1);
    size_t cap = b->n1 + b->n2 + 4096;
    b->body = malloc(cap);
    int k = snprintf(b->body, cap,
                     "This is the preamble; it is ignored.\r\n"
                     "--" B "\r\n"
                     "Content-Disposition: form-data; name=\"job\"\r\n"
                     "Content-Type: application/json\r\n"
                     "\r\n"
                     "%s"
                     "\r\n--" B "  \t\r\n"
                     "content-disposition: FORM-DATA; name=\"a\"; filename=\"a.bin\"\r\n"
                     "X-Other: ignored\r\n"
                     "CONTENT-TYPE:application/octet-stream \r\n"
                     "\r\n",
                     json_part);
    size_t len = (size_t)k;
    memcpy(b->body + len, b->bin1, b->n1);
    len += b->n1;
    k = snprintf(b->body + len, cap - len,
                 "\r\n--" B "\r\n"
                 "Content-Disposition: form-data; filename=\"b;c.npy\"; name=b\r\n"
                 "\r\n");
    len += (size_t)k;
    memcpy(b->body + len, b->bin2, b->n2);
    len += b->n2;
    k = snprintf(b->body + len, cap - len, "\r\n--" B "--\r\nepilogue, ignored\r\n--" B "\r\nmore");
    b->len = len + (size_t)k;
}

static void body3_free(body3 *b)
{
    free(b->body);
    free(b->bin1);
    free(b->bin2);
}

static void test_same_parts_whole_bytewise_and_random_pieces(void **state)
{
    (void)state;
    rng_state = 20240611;
    body3 b;
    body3_make(&b);
    char err[256];
    rec whole, other;
    assert_int_equal(parse(CT, b.body, b.len, 0, &whole, 0, 0, err, sizeof err), 0);

    assert_int_equal(whole.np, 3);
    assert_string_equal(whole.p[0].name, "job");
    assert_false(whole.p[0].has_fname);
    assert_string_equal(whole.p[0].ct, "application/json");
    assert_int_equal(whole.p[0].n, strlen(json_part));
    assert_memory_equal(whole.p[0].data, json_part, strlen(json_part));
    assert_string_equal(whole.p[1].name, "a");
    assert_string_equal(whole.p[1].fname, "a.bin");
    assert_string_equal(whole.p[1].ct, "application/octet-stream");
    assert_int_equal(whole.p[1].n, b.n1);
    assert_memory_equal(whole.p[1].data, b.bin1, b.n1);
    assert_string_equal(whole.p[2].name, "b");
    assert_string_equal(whole.p[2].fname, "b;c.npy");
    assert_false(whole.p[2].has_ct);
    assert_int_equal(whole.p[2].n, b.n2);
    assert_memory_equal(whole.p[2].data, b.bin2, b.n2);
    for (int i = 0; i < 3; i++)
        assert_true(whole.p[i].ended);
    /* Fed whole, each part's content comes in one call. */
    assert_int_equal(whole.data_calls, 3);

    assert_int_equal(parse(CT, b.body, b.len, 1, &other, 0, 0, err, sizeof err), 0);
    rec_equal(&whole, &other);
    rec_free(&other);
    long steps[] = {-2, -7, -40, -100, -1000, -5000};
    for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++)
        for (uint64_t seed = 1; seed <= 20; seed++) {
            rng_state = seed * 7777 + (uint64_t)s;
            assert_int_equal(parse(CT, b.body, b.len, steps[s], &other, 0, 0, err, sizeof err), 0);
            rec_equal(&whole, &other);
            rec_free(&other);
        }
    /* Every split into two pieces, around the delimiters especially. */
    for (size_t cut = 0; cut <= b.len; cut++) {
        memset(&other, 0, sizeof other);
        svc_multipart *mp = svc_multipart_new(CT, &rec_cb, &other, 0, 0, NULL);
        assert_int_equal(svc_multipart_feed(mp, b.body, cut), 0);
        assert_int_equal(svc_multipart_feed(mp, b.body + cut, b.len - cut), 0);
        assert_int_equal(svc_multipart_finish(mp), 0);
        svc_multipart_free(mp);
        rec_equal(&whole, &other);
        rec_free(&other);
    }
    rec_free(&whole);
    body3_free(&b);
}

static void test_body_may_open_with_the_boundary_and_parts_may_be_empty(void **state)
{
    (void)state;
    static const char body[] =
        "--" B "\r\n"
        "Content-Disposition: form-data; name=\"empty\"\r\n\r\n"
        "\r\n--" B "\r\n"
        "Content-Disposition: form-data; name=\"x\"\r\n\r\n"
        "1\r\n--" B "--";
    rec r;
    char err[256];
    for (long step = 0; step <= 3; step++) {
        assert_int_equal(parse(CT, body, sizeof body - 1, step, &r, 0, 0, err, sizeof err), 0);
        assert_int_equal(r.np, 2);
        assert_int_equal(r.p[0].n, 0);
        assert_true(r.p[0].ended);
        assert_int_equal(r.p[1].n, 1);
        rec_free(&r);
    }
}

static void test_quoted_boundary_with_other_parameters(void **state)
{
    (void)state;
    static const char body[] =
        "--a b:c?\r\n"
        "Content-Disposition: form-data; name=\"q\"\r\n\r\n"
        "value\r\n--a b:c?--\r\n";
    rec r;
    char err[256];
    assert_int_equal(parse("Multipart/Form-Data ; charset=utf-8; BOUNDARY=\"a b:c?\"", body,
                           sizeof body - 1, 1, &r, 0, 0, err, sizeof err), 0);
    assert_int_equal(r.np, 1);
    assert_int_equal(r.p[0].n, 5);
    rec_free(&r);
}

static void test_content_type_refusals_say_why(void **state)
{
    (void)state;
    char b70[100], b71[100];
    memset(b70, 'x', 70);
    b70[70] = '\0';
    memset(b71, 'x', 71);
    b71[71] = '\0';
    char ok70[200], bad71[200];
    snprintf(ok70, sizeof ok70, "multipart/form-data; boundary=%s", b70);
    snprintf(bad71, sizeof bad71, "multipart/form-data; boundary=%s", b71);
    struct {
        const char *ct, *why;
    } cases[] = {
        {NULL, "without a Content-Type"},
        {"application/json", "not multipart/form-data"},
        {"multipart/mixed; boundary=x", "not multipart/form-data"},
        {"multipart/form-data", "no boundary parameter"},
        {"multipart/form-data; charset=utf-8", "no boundary parameter"},
        {"multipart/form-data; boundary=\"\"", "1 to 70"},
        {"multipart/form-data; boundary=", "malformed"},
        {"multipart/form-data; boundary=\"abc", "malformed"},
        {"multipart/form-data; boundary=a; boundary=b", "two boundary"},
        {bad71, "1 to 70"},
        {"multipart/form-data; boundary=abc@def", "character"},
        {"multipart/form-data; boundary=\"abc \"", "ends in a space"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *why = NULL;
        svc_multipart *mp = svc_multipart_new(cases[i].ct, &rec_cb, NULL, 0, 0, &why);
        if (mp != NULL)
            fail_msg("accepted %s", cases[i].ct);
        assert_non_null(why);
        if (strstr(why, cases[i].why) == NULL)
            fail_msg("%s: \"%s\" does not say \"%s\"", cases[i].ct, why, cases[i].why);
    }
    svc_multipart *mp = svc_multipart_new(ok70, &rec_cb, NULL, 0, 0, NULL);
    assert_non_null(mp);
    assert_string_equal(svc_multipart_error(mp), "");
    svc_multipart_free(mp);
    svc_multipart_free(NULL);
}

/* Parses a body that must fail, in every feeding; returns its message,
 * which must be the same in each. */
static const char *refused(const char *body, size_t max_parts, size_t max_headers, rec *first)
{
    static char msg[256];
    char err[256];
    rec r;
    msg[0] = '\0';
    for (long step = 0; step <= 2; step++) {
        int rc = parse(CT, body, strlen(body), step, &r, max_parts, max_headers, err, sizeof err);
        if (rc == 0)
            fail_msg("accepted:\n%s", body);
        if (step == 0)
            snprintf(msg, sizeof msg, "%s", err);
        else
            assert_string_equal(err, msg);
        if (step == 0 && first != NULL)
            *first = r;
        else
            rec_free(&r);
    }
    return msg;
}

#define PART(name) "--" B "\r\nContent-Disposition: form-data; name=\"" name "\"\r\n\r\ndata\r\n"

static void test_refusals_say_what_is_wrong(void **state)
{
    (void)state;
    rec r;
    assert_string_equal(refused(PART("a") "--" B "\r\nContent-Disposition: form-data; name=b\r\n\r\nx", 0, 0, &r),
                        "multipart body ends before its closing boundary");
    rec_free(&r);
    assert_string_equal(refused(PART("a") "--" B "\r\nContent-Disposition: form-data; filename=\"f\"\r\n\r\n"
                                "x\r\n--" B "--", 0, 0, &r),
                        "part 2 has no name");
    assert_int_equal(r.np, 1);   /* part 1 was delivered before */
    assert_true(r.p[0].ended);
    rec_free(&r);
    assert_string_equal(refused("--" B "\r\nContent-Disposition: form-data; name=\"\"\r\n\r\nx\r\n--" B "--",
                                0, 0, NULL),
                        "part 1 has no name");
    assert_string_equal(refused("--" B "\r\nContent-Disposition: attachment; name=\"a\"\r\n\r\nx\r\n--" B "--",
                                0, 0, NULL),
                        "part 1 is not form-data (Content-Disposition: attachment)");
    assert_string_equal(refused("--" B "\r\nContent-Type: text/plain\r\n\r\nx\r\n--" B "--", 0, 0, NULL),
                        "part 1 has no Content-Disposition header");
    assert_string_equal(refused(PART("a") PART("b") PART("c") "--" B "--", 2, 0, &r),
                        "multipart body has more than 2 parts");
    assert_int_equal(r.np, 2);
    rec_free(&r);
}

static void test_refusals_of_framing_and_limits(void **state)
{
    (void)state;
    /* Exactly max_parts parts are fine. */
    rec r;
    char err[256];
    const char *two = PART("a") PART("b") "--" B "--";
    assert_int_equal(parse(CT, two, strlen(two), 1, &r, 2, 0, err, sizeof err), 0);
    rec_free(&r);

    assert_string_equal(refused("--" B "\r\nContent-Disposition: form-data; name=\"a\"; filename=\""
                                "a-rather-long-file-name-to-pass-the-limit.bin\"\r\n\r\nx\r\n--" B "--",
                                0, 64, NULL),
                        "part 1 has a header block longer than 64 bytes");
    static const struct {
        const char *body, *why;
    } bad[] = {
        {"--" B "\nContent-Disposition: form-data; name=\"a\"\n\nx\n--" B "--\n",
         "a boundary line ends in a bare LF; multipart lines must end in CRLF"},
        {"preamble\n--" B "\nContent-Disposition: form-data; name=\"a\"\n\nx\n--" B "--\n",
         "multipart body has no boundary line \"--" B "\" (lines must end in CRLF)"},
        {"--" B "\r\nContent-Disposition: form-data; name=\"a\"\n\nx",
         "part 1 has a bare LF in its headers; multipart lines must end in CRLF"},
        {"",
         "multipart body has no boundary line \"--" B "\" (lines must end in CRLF)"},
        {PART("a") "--" B "-x",
         "malformed closing boundary (a single '-' after the boundary)"},
        {"--" B "\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n--" B "tail\r\n--" B "--",
         "a line starts with the boundary but is not a boundary line (the boundary must not occur in a part)"},
        {"--" B "\r\nContent-Disposition: form-data; name=\"a\r\n\r\nx\r\n--" B "--",
         "part 1 has an unterminated quoted string in Content-Disposition"},
        {"--" B "\r\nContent-Disposition: form-data; name=\"a\"\r\ncontent-disposition: form-data; name=\"b\"\r\n\r\nx\r\n--" B "--",
         "part 1 has two Content-Disposition headers"},
        {"--" B "\r\nContent-Disposition: form-data;\r\n name=\"a\"\r\n\r\nx\r\n--" B "--",
         "part 1 has a folded header line (obsolete; one line per header)"},
        {"--" B "\r\nContent-Disposition form-data\r\n\r\nx\r\n--" B "--",
         "part 1 has a header line without a colon"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_string_equal(refused(bad[i].body, 0, 0, NULL), bad[i].why);
}

static int stop_data(void *cls, const char *d, size_t n)
{
    (void)d, (void)n;
    (*(int *)cls)++;
    return 1;
}

static void test_a_callback_can_stop_the_parse(void **state)
{
    (void)state;
    const char *body = PART("a") PART("b") "--" B "--";
    rec r;
    memset(&r, 0, sizeof r);
    r.stop_on_begin = 2;
    svc_multipart *mp = svc_multipart_new(CT, &rec_cb, &r, 0, 0, NULL);
    assert_int_equal(svc_multipart_feed(mp, body, strlen(body)), -1);
    assert_string_equal(svc_multipart_error(mp), "stopped by the application");
    assert_int_equal(r.np, 2);
    assert_int_equal(r.p[1].n, 0);
    assert_int_equal(svc_multipart_feed(mp, "x", 1), -1);
    assert_int_equal(svc_multipart_finish(mp), -1);
    assert_string_equal(svc_multipart_error(mp), "stopped by the application");
    svc_multipart_free(mp);
    rec_free(&r);

    int calls = 0;
    svc_multipart_cb cb = {NULL, stop_data, NULL};
    mp = svc_multipart_new(CT, &cb, &calls, 0, 0, NULL);
    assert_int_equal(svc_multipart_feed(mp, body, strlen(body)), -1);
    assert_int_equal(calls, 1);
    assert_string_equal(svc_multipart_error(mp), "stopped by the application");
    svc_multipart_free(mp);
}

/* ---- throughput ------------------------------------------------------ */

static int count_data(void *cls, const char *d, size_t n)
{
    (void)d;
    *(size_t *)cls += n;
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One part of `total` bytes fed in pieces of piece_len from src; src is
 * total bytes long, or piece_len bytes fed again and again when `reuse`.
 * Returns GB/s (1e9 bytes a second), best of 3. */
static double throughput(const char *src, size_t piece_len, size_t total, int reuse)
{
    static const char head[] = "--" B "\r\nContent-Disposition: form-data; name=\"t\"; filename=\"t.bin\"\r\n"
                               "Content-Type: application/octet-stream\r\n\r\n";
    static const char tail[] = "\r\n--" B "--\r\n";
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        size_t got = 0;
        svc_multipart_cb cb = {NULL, count_data, NULL};
        svc_multipart *mp = svc_multipart_new(CT, &cb, &got, 0, 0, NULL);
        assert_int_equal(svc_multipart_feed(mp, head, sizeof head - 1), 0);
        double t0 = now_s();
        for (size_t at = 0; at < total; at += piece_len)
            if (svc_multipart_feed(mp, src + (reuse ? 0 : at), piece_len) != 0)
                fail_msg("%s", svc_multipart_error(mp));
        double dt = now_s() - t0;
        assert_int_equal(svc_multipart_feed(mp, tail, sizeof tail - 1), 0);
        assert_int_equal(svc_multipart_finish(mp), 0);
        assert_int_equal(got, total);
        svc_multipart_free(mp);
        double gbs = (double)total / dt / 1e9;
        if (gbs > best)
            best = gbs;
    }
    return best;
}

static void test_throughput_of_a_256_mib_part_in_64_kib_pieces(void **state)
{
    (void)state;
    size_t piece_len = 64 << 10, total = (size_t)256 << 20;
    uint64_t *big = malloc(total);
    assert_non_null(big);
    rng_state = 42;
    for (size_t i = 0; i < total / 8; i++)
        big[i] = rng();   /* random bytes: a CR every 256 bytes on average */
    double random_gbs = throughput((const char *)big, piece_len, total, 0);
    /* The floor to compare with: memchr alone for every CR of the same bytes. */
    double memchr_gbs = 0;
    for (int rep = 0; rep < 3; rep++) {
        const char *p = (const char *)big, *end = p + total;
        size_t crs = 0;
        double t0 = now_s();
        while ((p = memchr(p, '\r', (size_t)(end - p))) != NULL)
            p++, crs++;
        double gbs = (double)total / (now_s() - t0) / 1e9;
        assert_true(crs > 0);
        if (gbs > memchr_gbs)
            memchr_gbs = gbs;
    }
    memset(big, 0, total);   /* float zeros: no CR at all */
    double zero_gbs = throughput((const char *)big, piece_len, total, 0);
    free(big);
    char *piece = malloc(piece_len);
    for (size_t i = 0; i < piece_len; i++)
        piece[i] = "\r\n--"[i % 4];   /* worst case: a delimiter start every 4 bytes */
    double worst_gbs = throughput(piece, piece_len, total, 1);
    free(piece);
    print_message("multipart throughput, 256 MiB part in 64 KiB pieces: random bytes %.2f GB/s "
                  "(memchr alone %.2f), zeros %.2f GB/s, \"\\r\\n--\" repeated %.2f GB/s\n",
                  random_gbs, memchr_gbs, zero_gbs, worst_gbs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_parts_whole_bytewise_and_random_pieces),
        cmocka_unit_test(test_body_may_open_with_the_boundary_and_parts_may_be_empty),
        cmocka_unit_test(test_quoted_boundary_with_other_parameters),
        cmocka_unit_test(test_content_type_refusals_say_why),
        cmocka_unit_test(test_refusals_say_what_is_wrong),
        cmocka_unit_test(test_refusals_of_framing_and_limits),
        cmocka_unit_test(test_a_callback_can_stop_the_parse),
        cmocka_unit_test(test_throughput_of_a_256_mib_part_in_64_kib_pieces),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
