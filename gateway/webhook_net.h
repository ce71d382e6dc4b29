/* webhook_net.h — where webhooks may go (server-side request forgery): a
 * webhook URL is checked at submit against the addresses its host resolves
 * to, and every connection of a delivery against the address it is about to
 * connect to (webhooks.c), so a name that resolves elsewhere later (DNS
 * rebinding) still cannot reach the gateway's own networks. */
#ifndef GW_WEBHOOK_NET_H
#define GW_WEBHOOK_NET_H

#include <stddef.h>
#include <sys/socket.h>

typedef struct gw_whnet gw_whnet;

/* The policy: loopback, link-local, private, shared (CGNAT), unspecified,
 * multicast, reserved and IPv4-mapped addresses are refused, except those
 * in allow_nets ("CIDR[,CIDR...]", IPv4 or IPv6; NULL or "": none), and
 * all of them when allow_private is set. NULL with err filled when
 * allow_nets does not parse (or on ENOMEM). The caller frees it. */
gw_whnet *gw_whnet_new(int allow_private, const char *allow_nets, char *err, size_t errlen);
void gw_whnet_free(gw_whnet *p);

/* 1 when a webhook may connect to sa (AF_INET or AF_INET6); 0 with why
 * filled ("10.1.2.3 is a private address") when not. */
int gw_whnet_addr_ok(const gw_whnet *p, const struct sockaddr *sa, char *why, size_t whylen);

/* Checks a webhook URL: http or https, a host, and every address the host
 * resolves to allowed. 0, or -1 with msg filled for the client. Resolves
 * the name (getaddrinfo): call it only for jobs that have a webhook. */
int gw_whnet_url_check(const gw_whnet *p, const char *url, char *msg, size_t msglen);

#endif
