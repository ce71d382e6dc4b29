/* webhook_net.c — the address policy of webhooks (webhook_net.h): ranges
 * as CIDR text, parsed once into prefixes, matched bit by bit. */
#include "webhook_net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_log.h"
#include "svc_url.h"

typedef struct net {
    int family;               /* AF_INET or AF_INET6 */
    unsigned char addr[16];   /* 4 bytes used for AF_INET */
    int bits;
    const char *what;         /* "a private address"; NULL in the allow-list */
} net;

struct gw_whnet {
    int allow_private;
    net *allow;
    int nallow;
    net deny[32];
    int ndeny;
};

/* Refused unless allowed: what is not the public Internet (RFC 6890's
 * special-purpose registries, the parts a server-side request could abuse). */
static const struct { const char *cidr, *what; } denied[] = {
    {"0.0.0.0/8", "an unspecified (this-network) address"},
    {"10.0.0.0/8", "a private address"},
    {"100.64.0.0/10", "a shared (CGNAT) address"},
    {"127.0.0.0/8", "a loopback address"},
    {"169.254.0.0/16", "a link-local address"},
    {"172.16.0.0/12", "a private address"},
    {"192.0.0.0/24", "an IETF protocol address"},
    {"192.168.0.0/16", "a private address"},
    {"198.18.0.0/15", "a benchmarking address"},
    {"224.0.0.0/4", "a multicast address"},
    {"240.0.0.0/4", "a reserved address"},
    {"::/128", "an unspecified address"},
    {"::1/128", "a loopback address"},
    {"::ffff:0:0/96", "an IPv4-mapped address"},
    {"::/96", "an IPv4-compatible address"},
    {"64:ff9b::/96", "a NAT64 address"},
    {"64:ff9b:1::/48", "a local-use NAT64 address"},
    {"100::/64", "a discard-only address"},
    {"2001::/32", "a Teredo address"},
    {"2002::/16", "a 6to4 address"},
    {"fc00::/7", "a unique local address"},
    {"fe80::/10", "a link-local address"},
    {"fec0::/10", "a site-local address"},
    {"ff00::/8", "a multicast address"},
};

/* Parses "addr/bits" (or a bare address: all its bits) of len bytes; 0 or
 * -1. Bits past the prefix are cleared, so 10.1.0.0/8 means 10.0.0.0/8. */
static int cidr_parse(const char *s, size_t len, net *n)
{
    char buf[64];
    if (len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *slash = strchr(buf, '/');
    if (slash)
        *slash = '\0';
    n->family = strchr(buf, ':') ? AF_INET6 : AF_INET;
    int max = n->family == AF_INET ? 32 : 128;
    memset(n->addr, 0, sizeof n->addr);
    if (inet_pton(n->family, buf, n->addr) != 1)
        return -1;
    n->bits = max;
    if (slash) {
        char *end;
        long b = strtol(slash + 1, &end, 10);
        if (end == slash + 1 || *end || b < 0 || b > max)
            return -1;
        n->bits = (int)b;
    }
    for (int i = n->bits; i < max; i++)
        n->addr[i / 8] &= (unsigned char)~(0x80 >> (i % 8));
    return 0;
}

static int net_has(const net *n, int family, const unsigned char *a)
{
    if (n->family != family)
        return 0;
    int whole = n->bits / 8, rest = n->bits % 8;
    if (memcmp(n->addr, a, (size_t)whole) != 0)
        return 0;
    return rest == 0 || ((a[whole] ^ n->addr[whole]) & (0xff << (8 - rest)) & 0xff) == 0;
}

gw_whnet *gw_whnet_new(int allow_private, const char *allow_nets, char *err, size_t errlen)
{
    gw_whnet *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    p->allow_private = allow_private;
    _Static_assert(sizeof denied / sizeof denied[0] <= sizeof p->deny / sizeof p->deny[0],
                   "gw_whnet.deny is too small");
    for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++, p->ndeny++) {
        cidr_parse(denied[i].cidr, strlen(denied[i].cidr), &p->deny[i]);
        p->deny[i].what = denied[i].what;
    }
    const char *s = allow_nets ? allow_nets : "";
    size_t cap = 1;
    for (const char *c = s; *c; c++)
        cap += *c == ',';
    p->allow = calloc(cap, sizeof *p->allow);
    if (!p->allow) {
        snprintf(err, errlen, "out of memory");
        gw_whnet_free(p);
        return NULL;
    }
    while (*s) {
        s += strspn(s, " ,");
        size_t len = strcspn(s, " ,");
        if (len == 0)
            break;
        if (cidr_parse(s, len, &p->allow[p->nallow]) != 0) {
            snprintf(err, errlen, "webhook allow-list: '%.*s' is not an address or CIDR block",
                     (int)(len > 60 ? 60 : len), s);
            gw_whnet_free(p);
            return NULL;
        }
        p->nallow++;
        s += len;
    }
    return p;
}

void gw_whnet_free(gw_whnet *p)
{
    if (!p)
        return;
    free(p->allow);
    free(p);
}

int gw_whnet_addr_ok(const gw_whnet *p, const struct sockaddr *sa, char *why, size_t whylen)
{
    const unsigned char *a;
    if (sa->sa_family == AF_INET)
        a = (const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr;
    else if (sa->sa_family == AF_INET6)
        a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
    else {
        snprintf(why, whylen, "not an IP address");
        return 0;
    }
    if (p->allow_private)
        return 1;
    for (int i = 0; i < p->nallow; i++)
        if (net_has(&p->allow[i], sa->sa_family, a))
            return 1;
    for (int i = 0; i < p->ndeny; i++) {
        if (net_has(&p->deny[i], sa->sa_family, a)) {
            char text[INET6_ADDRSTRLEN];
            inet_ntop(sa->sa_family, a, text, sizeof text);
            snprintf(why, whylen, "%s is %s", text, p->deny[i].what);
            return 0;
        }
    }
    return 1;
}

int gw_whnet_url_check(const gw_whnet *p, const char *url, char *host, size_t hostlen, char *msg,
                       size_t msglen)
{
    svc_url u;
    if (svc_url_parse(url, NULL, &u) != 0 || !u.host[0]) {
        snprintf(msg, msglen, "webhook must be an absolute http or https URL");
        return -1;
    }
    if (strcmp(u.scheme, "http") != 0 && strcmp(u.scheme, "https") != 0) {
        snprintf(msg, msglen, "webhook must be an http or https URL, not %s", u.scheme);
        return -1;
    }
    size_t hl = strlen(u.host);
    if (u.host[0] == '[' && hl >= 2 && u.host[hl - 1] == ']')
        snprintf(host, hostlen, "%.*s", (int)(hl - 2), u.host + 1);
    else
        snprintf(host, hostlen, "%s", u.host);
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &s4->sin_addr) == 1)
        s4->sin_family = AF_INET;
    else if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1)
        s6->sin6_family = AF_INET6;
    else
        return 1; /* a name: its addresses are checked once resolved */
    const struct sockaddr *sa = (const struct sockaddr *)&ss;
    return gw_whnet_addrs_check(p, host, &sa, 1, msg, msglen);
}

int gw_whnet_addrs_check(const gw_whnet *p, const char *host, const struct sockaddr *const *addrs,
                         int n, char *msg, size_t msglen)
{
    for (int i = 0; i < n; i++) {
        char why[128];
        if (!gw_whnet_addr_ok(p, addrs[i], why, sizeof why)) {
            /* The client learns only that the address is refused: which
             * address a name has inside the gateway's network, and what
             * kind, is the operator's to know (the log's). */
            svc_info("webhooks: host %.100s refused at submit: %s", host, why);
            snprintf(msg, msglen, "webhook host %.100s has an address that is not allowed; this "
                     "gateway does not deliver there", host);
            return -1;
        }
    }
    return 0;
}
