/* cn_netif.h — which network interface of this host carries an address: how
 * the node tells NCCL the interface of its multi-node runs
 * (NCCL_SOCKET_IFNAME), the one its --dist-host (or advertised URL's host)
 * names, so that NCCL does not pick another (a docker bridge, a management
 * port) that the other nodes cannot reach. */
#ifndef CN_NETIF_H
#define CN_NETIF_H

#include <stddef.h>

/* Resolves host (a name or a numeric address) and finds the interface
 * that has one of its addresses: 0 and its name in ifname; -ENOENT when no
 * interface of this host has any of them (a NAT'd or proxied address), or
 * a negative errno value when host does not resolve. */
int cn_netif_of(const char *host, char *ifname, size_t len);

#endif
