/* resolver.h — name lookups that never hold a thread that serves requests:
 * one thread of the gateway runs every lookup on a c-ares channel, each
 * with a deadline, and answers through a callback. A submit that names a
 * webhook host is suspended while its name resolves (api_jobs.c), so a
 * domain whose DNS never answers costs a slot here, not an HTTP worker.
 *
 * Why c-ares and not a pool of threads calling getaddrinfo: getaddrinfo
 * cannot be cancelled, so with a name server that swallows queries every
 * thread of a pool sits out the system resolver's whole retry cycle
 * (resolv.conf's timeout × attempts × servers) and later lookups queue
 * behind them; c-ares keeps any number of lookups in flight on one thread,
 * gives each exactly the time we choose, and can be pointed at other name
 * servers (and ports) than /etc/resolv.conf's. */
#ifndef GW_RESOLVER_H
#define GW_RESOLVER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct gw_resolver gw_resolver;

/* Webhook host lookups one tenant may have in flight on a gateway (its
 * submits past that get 429): twenty times what a tenant at the default
 * write rate starts in a default deadline, well short of the 1024 the
 * gateway holds, so a tenant naming domains whose DNS never answers fills
 * its own share only. */
#define GW_RESOLVE_PER_TENANT 64

/* How a lookup ended: 0 (the host's addresses), -ENOENT (the name has no
 * address), -ETIMEDOUT (no answer within the deadline), -ESHUTDOWN (the
 * resolver stopped first) or -EIO (anything else). addrs (n of them,
 * AF_INET and AF_INET6) are valid only during the call. Called exactly
 * once per accepted lookup, on the resolver's thread (or on the thread of
 * gw_resolver_stop): it must not block. */
typedef void (*gw_resolve_fn)(void *arg, int rc, const struct sockaddr *const *addrs, int n);

/* Starts the thread. servers: "IP[:port],..." (IPv6 as [IP]:port) to
 * ask instead of /etc/resolv.conf's name servers (NULL or "": those);
 * timeout_ms: every lookup's deadline; max_pending: lookups at once, past
 * which gw_resolve refuses, and max_per_owner: of them, one owner's (a
 * tenant's: one that names black-hole domains fills only its share).
 * NULL with err filled on failure (a servers list that does not parse). */
gw_resolver *gw_resolver_start(const char *servers, int timeout_ms, int max_pending,
                               int max_per_owner, char *err, size_t errlen);
/* Answers every lookup not yet answered with -ESHUTDOWN (on this thread)
 * and stops the thread; from then on gw_resolve refuses. NULL is a no-op. */
void gw_resolver_stop(gw_resolver *r);
/* Stops (if not yet) and frees: once nothing can call gw_resolve any more.
 * NULL is a no-op. */
void gw_resolver_free(gw_resolver *r);

/* Looks host up (A and AAAA) for owner. 0: fn will be called once,
 * within the deadline. -EAGAIN when max_pending lookups are in flight,
 * -EDQUOT when owner has max_per_owner of them, -ESHUTDOWN once stopping,
 * -ENOMEM, -EINVAL for a host longer than 253 characters: then fn is
 * never called. */
int gw_resolve(gw_resolver *r, const char *host, int64_t owner, gw_resolve_fn fn, void *arg);

#endif
