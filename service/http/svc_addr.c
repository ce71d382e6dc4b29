/* svc_addr.c — client addresses, limit keys, CIDR sets and
 * X-Forwarded-For (svc_addr.h). inet_pton does the parsing; the rest is
 * byte comparison. */
#include "svc_addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cidr {
    svc_addr net;
    int bits;
} cidr;

struct svc_cidrs {
    size_t n;
    cidr block[];
};

static int is_space(char c) { return c == ' ' || c == '\t'; }

int svc_addr_parse(const char *s, size_t len, svc_addr *out)
{
    char buf[64];
    while (len > 0 && is_space(*s))
        s++, len--;
    while (len > 0 && is_space(s[len - 1]))
        len--;
    if (len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *p = buf;
    if (p[0] == '[') {
        /* "[v6]" or "[v6]:port" */
        char *close = strchr(p, ']');
        if (close == NULL || (close[1] != '\0' && (close[1] != ':' || close[2] == '\0' ||
                                                   strspn(close + 2, "0123456789") != strlen(close + 2))))
            return -1;
        *close = '\0';
        p++;
    } else {
        /* "v4:port": one colon only (an IPv6 address has two or more) */
        char *colon = strchr(p, ':');
        if (colon != NULL && strchr(colon + 1, ':') == NULL) {
            if (colon[1] == '\0' || strspn(colon + 1, "0123456789") != strlen(colon + 1))
                return -1;
            *colon = '\0';
        }
    }
    memset(out, 0, sizeof *out);
    if (inet_pton(AF_INET, p, out->b) == 1)
        return 0;
    if (inet_pton(AF_INET6, p, out->b) != 1)
        return -1;
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(out->b, mapped, sizeof mapped) == 0) {
        memmove(out->b, out->b + 12, 4);
        memset(out->b + 4, 0, 12);
        return 0;
    }
    out->v6 = 1;
    return 0;
}

void svc_addr_text(const svc_addr *a, char *out, size_t len)
{
    char t[INET6_ADDRSTRLEN];
    if (inet_ntop(a->v6 ? AF_INET6 : AF_INET, a->b, t, sizeof t) == NULL)
        snprintf(t, sizeof t, "unknown");
    snprintf(out, len, "%s", t);
}

void svc_addr_limit_key(const svc_addr *a, char *out, size_t len)
{
    if (!a->v6) {
        svc_addr_text(a, out, len);
        return;
    }
    svc_addr net = *a;
    memset(net.b + 8, 0, 8);
    char t[INET6_ADDRSTRLEN];
    svc_addr_text(&net, t, sizeof t);
    snprintf(out, len, "%s/64", t);
}

void svc_addr_key_of(const char *ip, char *out, size_t len)
{
    svc_addr a;
    if (ip != NULL && svc_addr_parse(ip, strlen(ip), &a) == 0)
        svc_addr_limit_key(&a, out, len);
    else
        snprintf(out, len, "%s", ip != NULL ? ip : "unknown");
}

/* "addr/bits" or "addr" in s[0..len): 0, or -1. */
static int cidr_parse(const char *s, size_t len, cidr *c)
{
    const char *slash = memchr(s, '/', len);
    size_t alen = slash != NULL ? (size_t)(slash - s) : len;
    if (svc_addr_parse(s, alen, &c->net) != 0 || (alen > 0 && s[0] == '['))
        return -1;
    int max = c->net.v6 ? 128 : 32;
    c->bits = max;
    if (slash != NULL) {
        char num[8];
        size_t nlen = len - alen - 1;
        while (nlen > 0 && is_space(slash[nlen]))
            nlen--;
        if (nlen == 0 || nlen >= sizeof num)
            return -1;
        memcpy(num, slash + 1, nlen);
        num[nlen] = '\0';
        if (strspn(num, "0123456789") != nlen || atoi(num) > max)
            return -1;
        c->bits = atoi(num);
    }
    /* the host bits are ignored: 10.1.2.3/8 is 10.0.0.0/8 */
    for (int i = c->bits; i < max; i++)
        c->net.b[i / 8] &= (unsigned char)~(0x80u >> (i % 8));
    return 0;
}

svc_cidrs *svc_cidrs_parse(const char *list, char *err, size_t errlen)
{
    size_t n = 0;
    for (const char *p = list; p != NULL && *p != '\0'; p++)
        n += *p == ',';
    svc_cidrs *s = calloc(1, sizeof *s + (n + 1) * sizeof(cidr));
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (const char *p = list; p != NULL && *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        const char *q = p;
        size_t qlen = len;
        while (qlen > 0 && is_space(*q))
            q++, qlen--;
        if (qlen > 0 || end != NULL) {
            if (cidr_parse(q, qlen, &s->block[s->n]) != 0) {
                snprintf(err, errlen, "'%.*s' is not an address or a CIDR block (10.0.0.0/8, "
                         "fd00::/8)", (int)(len > 60 ? 60 : len), p);
                free(s);
                return NULL;
            }
            s->n++;
        }
        p = end != NULL ? end + 1 : p + len;
    }
    return s;
}

void svc_cidrs_free(svc_cidrs *s)
{
    free(s);
}

size_t svc_cidrs_count(const svc_cidrs *s)
{
    return s != NULL ? s->n : 0;
}

int svc_cidrs_match(const svc_cidrs *s, const svc_addr *a)
{
    for (size_t k = 0; s != NULL && k < s->n; k++) {
        const cidr *c = &s->block[k];
        if (c->net.v6 != a->v6)
            continue;
        int full = c->bits / 8, rest = c->bits % 8;
        if (memcmp(c->net.b, a->b, (size_t)full) != 0)
            continue;
        if (rest == 0 || ((c->net.b[full] ^ a->b[full]) & (0xff00u >> rest)) == 0)
            return 1;
    }
    return 0;
}

void svc_addr_client(const svc_cidrs *trusted, const char *peer, const char *xff, char *out,
                     size_t len)
{
    svc_addr a, hop;
    snprintf(out, len, "%s", peer);
    if (svc_cidrs_count(trusted) == 0 || xff == NULL ||
        svc_addr_parse(peer, strlen(peer), &a) != 0 || !svc_cidrs_match(trusted, &a))
        return;
    /* right to left; out holds the last hop found trusted (first: peer) */
    for (size_t end = strlen(xff); end > 0;) {
        size_t start = end;
        while (start > 0 && xff[start - 1] != ',')
            start--;
        size_t n = end - start;
        const char *e = xff + start;
        end = start > 0 ? start - 1 : 0;
        while (n > 0 && is_space(*e))
            e++, n--;
        if (n == 0 && start > 0)
            continue; /* an empty element ("a, , b") */
        if (svc_addr_parse(e, n, &hop) != 0)
            return;
        svc_addr_text(&hop, out, len);
        if (!svc_cidrs_match(trusted, &hop))
            return;
        if (start == 0)
            return;
    }
}
