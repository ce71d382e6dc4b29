/* cn_netif.c — the interface that carries an address (getaddrinfo, then
 * getifaddrs). */
#include "cn_netif.h"

#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

/* 1 when the two socket addresses hold the same IP (ports ignored). */
static int same_ip(const struct sockaddr *a, const struct sockaddr *b)
{
    if (!a || !b || a->sa_family != b->sa_family)
        return 0;
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->sa_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr,
                      sizeof(struct in6_addr)) == 0;
    return 0;
}

int cn_netif_of(const char *host, char *ifname, size_t len)
{
    struct addrinfo hints, *res = NULL;
    struct ifaddrs *ifs = NULL;
    int rc = -ENOENT;

    if (!host || !host[0] || !ifname || !len)
        return -EINVAL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    /* "[::1]" in a URL's host is ::1 to the resolver */
    char bare[256];
    size_t n = strlen(host);
    if (host[0] == '[' && n > 2 && host[n - 1] == ']')
        snprintf(bare, sizeof bare, "%.*s", (int)(n - 2), host + 1);
    else
        snprintf(bare, sizeof bare, "%s", host);
    int g = getaddrinfo(bare, NULL, &hints, &res);
    if (g != 0) {
        rc = g == EAI_SYSTEM ? -errno : -EHOSTUNREACH;
        goto cleanup;
    }
    if (getifaddrs(&ifs) < 0) {
        rc = -errno;
        goto cleanup;
    }
    for (const struct addrinfo *a = res; a && rc == -ENOENT; a = a->ai_next)
        for (const struct ifaddrs *i = ifs; i; i = i->ifa_next)
            if (same_ip(a->ai_addr, i->ifa_addr)) {
                snprintf(ifname, len, "%s", i->ifa_name);
                rc = 0;
                break;
            }
cleanup:
    if (res)
        freeaddrinfo(res);
    if (ifs)
        freeifaddrs(ifs);
    return rc;
}
