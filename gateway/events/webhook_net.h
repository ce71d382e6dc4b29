/* webhook_net.h — where webhooks may go (server-side request forgery): a
 * webhook URL is checked at submit against the addresses its host resolves
 * to (resolver.h: asynchronously, off the HTTP threads), and every
 * connection of a delivery against the address it is about to connect to
 * (webhooks.c), so a name that resolves elsewhere later (DNS rebinding)
 * still cannot reach the gateway's own networks. */
#ifndef GW_WEBHOOK_NET_H
#define GW_WEBHOOK_NET_H

#include <stddef.h>
#include <sys/socket.h>

typedef struct gw_whnet gw_whnet;

/* The policy: loopback, link-local, private, shared (CGNAT), unspecified,
 * multicast, reserved, discard-only and IPv4-mapped addresses are refused,
 * and so are the IPv6 ranges that lead to IPv4 ones (NAT64, local-use
 * NAT64, 6to4, Teredo), except those in allow_nets ("CIDR[,CIDR...]",
 * IPv4 or IPv6; NULL or "": none), and all of them when allow_private is
 * set. NULL with err filled when
 * allow_nets does not parse (or on ENOMEM). The caller frees it. */
gw_whnet *gw_whnet_new(int allow_private, const char *allow_nets, char *err, size_t errlen);
void gw_whnet_free(gw_whnet *p);

/* 1 when a webhook may connect to sa (AF_INET or AF_INET6); 0 with why
 * filled ("10.1.2.3 is a private address") when not. */
int gw_whnet_addr_ok(const gw_whnet *p, const struct sockaddr *sa, char *why, size_t whylen);

/* Checks a webhook URL's form (http or https, a host) and copies its host,
 * without an IPv6 literal's brackets, into host. Resolves nothing: 0 when
 * the host is an IP literal that is allowed, 1 when it is a name whose
 * addresses are to be resolved (resolver.h, never on an HTTP thread) and
 * checked with gw_whnet_addrs_check, -1 with msg filled for the client. */
int gw_whnet_url_check(const gw_whnet *p, const char *url, char *host, size_t hostlen, char *msg,
                       size_t msglen);

/* Checks the n addresses host resolved to: 0 when every one is allowed,
 * else -1 with msg filled for the client, which names the host but no
 * address (the refused one goes to the log). */
int gw_whnet_addrs_check(const gw_whnet *p, const char *host, const struct sockaddr *const *addrs,
                         int n, char *msg, size_t msglen);

#endif
