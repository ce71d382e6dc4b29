/* svc_util.c — clocks, RFC 3339 times, random bytes and ids, constant-time
 * comparison and a strict base64 codec. No state, no allocation except the
 * base64 results the caller owns. */
#include "svc_util.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

int64_t svc_now_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t svc_now_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void svc_time_format(int64_t epoch_ms, char *buf, size_t len)
{
    if (buf == NULL || len == 0)
        return;
    /* Floor division so that times before 1970 keep a positive ms part. */
    int64_t sec = epoch_ms / 1000, ms = epoch_ms % 1000;
    if (ms < 0) {
        ms += 1000;
        sec -= 1;
    }
    time_t t = (time_t)sec;
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL) {
        snprintf(buf, len, "1970-01-01T00:00:00.000Z");
        return;
    }
    snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)ms);
}

struct timespec svc_deadline_ts(clockid_t clock, int64_t ms)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    return ts;
}

int svc_cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    int e = pthread_condattr_init(&ca);
    if (e == 0) {
        e = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        if (e == 0)
            e = pthread_cond_init(cv, &ca);
        pthread_condattr_destroy(&ca);
    }
    return -e;
}

void svc_sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec req = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&req, &req) == -1 && errno == EINTR)
        ;
}

int svc_random_bytes(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

static const char hex_digits[] = "0123456789abcdef";

int svc_random_hex(char *out, size_t nbytes)
{
    unsigned char raw[64];
    size_t done = 0;
    while (done < nbytes) {
        size_t chunk = nbytes - done < sizeof raw ? nbytes - done : sizeof raw;
        int rc = svc_random_bytes(raw, chunk);
        if (rc < 0)
            return rc;
        for (size_t i = 0; i < chunk; i++) {
            out[2 * (done + i)] = hex_digits[raw[i] >> 4];
            out[2 * (done + i) + 1] = hex_digits[raw[i] & 15];
        }
        done += chunk;
    }
    out[2 * nbytes] = '\0';
    return 0;
}

int svc_uuid_v4(char out[37])
{
    unsigned char b[16];
    int rc = svc_random_bytes(b, sizeof b);
    if (rc < 0)
        return rc;
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* version 4 */
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    char *p = out;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *p++ = '-';
        *p++ = hex_digits[b[i] >> 4];
        *p++ = hex_digits[b[i] & 15];
    }
    *p = '\0';
    return 0;
}

/* Any version, either case: ids may come from PostgreSQL or from a client. */
int svc_uuid_valid(const char *s)
{
    if (s == NULL)
        return 0;
    for (int i = 0; i < 36; i++) {
        char c = s[i];
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (c != '-')
                return 0;
        } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) {
            return 0;
        }
    }
    return s[36] == '\0';
}

/* Every byte of the longer string is visited whatever the contents, so the
 * time says how long the strings are and nothing about where they differ. */
size_t svc_utf8_chars(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

int svc_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i++], more, min;
        if (c < 0x80)
            continue;
        if (c >= 0xc2 && c <= 0xdf)
            more = 1, min = 0x80, c &= 0x1f;
        else if (c >= 0xe0 && c <= 0xef)
            more = 2, min = 0x800, c &= 0x0f;
        else if (c >= 0xf0 && c <= 0xf4)
            more = 3, min = 0x10000, c &= 0x07;
        else
            return 0;
        for (; more > 0; more--, i++) {
            if (i >= n || (p[i] & 0xc0) != 0x80)
                return 0;
            c = (c << 6) | (p[i] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
            return 0;
    }
    return 1;
}

char *svc_content_disposition(const char *filename, char *out, size_t len)
{
    static const char attr[] = "!#$&+-.^_`|~"; /* RFC 8187 attr-char besides ALNUM */
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(filename), room = len > 64 ? (len - 64) / 4 : 0;
    if (n > room) {
        n = room;
        while (n > 0 && ((unsigned char)filename[n] & 0xc0) == 0x80)
            n--; /* not inside a UTF-8 sequence */
    }
    size_t o = (size_t)snprintf(out, len, "attachment; filename=\"");
    for (size_t i = 0; i < n && o + 1 < len; i++) {
        unsigned char c = (unsigned char)filename[i];
        out[o++] = isalnum(c) || c == '.' || c == '_' || c == '-' ? (char)c : '_';
    }
    o += (size_t)snprintf(out + o, len - o, "\"; filename*=UTF-8''");
    for (size_t i = 0; i < n && o + 4 < len; i++) {
        unsigned char c = (unsigned char)filename[i];
        if (c < 0x80 && (isalnum(c) || strchr(attr, c) != NULL)) {
            out[o++] = (char)c;
        } else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    out[o < len ? o : len - 1] = '\0';
    return out;
}

uint32_t svc_fnv1a(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

int svc_secure_equal(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        return 0;
    size_t la = strlen(a), lb = strlen(b);
    size_t n = la > lb ? la : lb;
    volatile unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < n; i++) {
        unsigned char ca = i < la ? (unsigned char)a[i] : 0;
        unsigned char cb = i < lb ? (unsigned char)b[i] : 0;
        diff |= (unsigned char)(ca ^ cb);
    }
    return diff == 0;
}

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t svc_b64_encode_to(const void *data, size_t len, char *out)
{
    const unsigned char *in = data;
    char *p = out;
    size_t i = 0;
    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        *p++ = b64_alphabet[v >> 18];
        *p++ = b64_alphabet[(v >> 12) & 63];
        *p++ = b64_alphabet[(v >> 6) & 63];
        *p++ = b64_alphabet[v & 63];
    }
    if (len - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        *p++ = b64_alphabet[v >> 18];
        *p++ = b64_alphabet[(v >> 12) & 63];
        *p++ = '=';
        *p++ = '=';
    } else if (len - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        *p++ = b64_alphabet[v >> 18];
        *p++ = b64_alphabet[(v >> 12) & 63];
        *p++ = b64_alphabet[(v >> 6) & 63];
        *p++ = '=';
    }
    return (size_t)(p - out);
}

char *svc_b64_encode(const void *data, size_t len)
{
    if (len > (SIZE_MAX - 1) / 4 * 3 - 3)
        return NULL;
    char *out = malloc((len + 2) / 3 * 4 + 1);
    if (out == NULL)
        return NULL;
    out[svc_b64_encode_to(data, len, out)] = '\0';
    return out;
}

/* 0..63 for an alphabet character, 0x80 for anything else ('=' included):
 * OR-ing the values of a quad tells in one test whether all four were valid. */
#define B64_V(c)                                                              \
    ((c) >= 'A' && (c) <= 'Z'   ? (c) - 'A'                                   \
     : (c) >= 'a' && (c) <= 'z' ? (c) - 'a' + 26                              \
     : (c) >= '0' && (c) <= '9' ? (c) - '0' + 52                              \
     : (c) == '+'               ? 62                                          \
     : (c) == '/'               ? 63                                          \
                                : 0x80)
#define B64_V4(c) B64_V(c), B64_V((c) + 1), B64_V((c) + 2), B64_V((c) + 3)
#define B64_V16(c) B64_V4(c), B64_V4((c) + 4), B64_V4((c) + 8), B64_V4((c) + 12)
#define B64_V64(c) B64_V16(c), B64_V16((c) + 16), B64_V16((c) + 32), B64_V16((c) + 48)
static const unsigned char b64_value[256] = {B64_V64(0), B64_V64(64), B64_V64(128), B64_V64(192)};

size_t svc_b64_decoded_len(const char *s, size_t slen)
{
    if (slen == 0 || slen % 4 != 0)
        return slen / 4 * 3;
    return slen / 4 * 3 - (s[slen - 1] == '=') - (s[slen - 2] == '=' && s[slen - 1] == '=');
}

/* Strict: length a multiple of 4, '=' only as the last one or two
 * characters, and the bits a padded group leaves unused must be zero, so
 * every byte string has exactly one accepted encoding. The quads before the
 * last are decoded without a branch on their content: their validity is
 * gathered in one OR and judged once at the end. */
int svc_b64_decode_to(const char *s, size_t slen, unsigned char *out, size_t cap, size_t *out_len)
{
    if (s == NULL || out_len == NULL || slen % 4 != 0)
        return -1;
    size_t olen = svc_b64_decoded_len(s, slen);
    if (olen > cap || (olen > 0 && out == NULL))
        return -1;
    if (slen == 0) {
        *out_len = 0;
        return 0;
    }
    const unsigned char *in = (const unsigned char *)s;
    const unsigned char *last = in + slen - 4;
    unsigned char *p = out;
    unsigned bad = 0;
    for (; in < last; in += 4, p += 3) {
        unsigned v0 = b64_value[in[0]], v1 = b64_value[in[1]];
        unsigned v2 = b64_value[in[2]], v3 = b64_value[in[3]];
        bad |= v0 | v1 | v2 | v3;
        uint32_t x = v0 << 18 | v1 << 12 | v2 << 6 | v3;
        p[0] = (unsigned char)(x >> 16);
        p[1] = (unsigned char)(x >> 8);
        p[2] = (unsigned char)x;
    }
    size_t pad = (last[3] == '=') + (last[3] == '=' && last[2] == '=');
    unsigned v0 = b64_value[last[0]], v1 = b64_value[last[1]];
    unsigned v2 = pad == 2 ? 0 : b64_value[last[2]], v3 = pad ? 0 : b64_value[last[3]];
    bad |= v0 | v1 | v2 | v3;
    if (bad & 0x80)
        return -1;
    /* The bits a padded group leaves unused must be zero. */
    if ((pad == 2 && (v1 & 0x0f)) || (pad == 1 && (v2 & 0x03)))
        return -1;
    uint32_t x = v0 << 18 | v1 << 12 | v2 << 6 | v3;
    p[0] = (unsigned char)(x >> 16);
    if (pad < 2)
        p[1] = (unsigned char)(x >> 8);
    if (pad < 1)
        p[2] = (unsigned char)x;
    *out_len = olen;
    return 0;
}

int svc_b64_decode(const char *s, size_t slen, unsigned char **out, size_t *out_len)
{
    if (s == NULL || out == NULL || out_len == NULL || slen % 4 != 0)
        return -1;
    size_t olen = svc_b64_decoded_len(s, slen);
    unsigned char *buf = malloc(olen > 0 ? olen : 1);
    if (buf == NULL)
        return -1;
    if (svc_b64_decode_to(s, slen, buf, olen, out_len) < 0) {
        free(buf);
        return -1;
    }
    *out = buf;
    return 0;
}
