/* svc_addr.h — client addresses as the server's per-address limits see
 * them: the key a limit counts by (an IPv4 address, or the /64 an IPv6
 * address is in: one host gets a whole /64 and picks any address of it),
 * sets of CIDR blocks (--trusted-proxies), and the client an
 * X-Forwarded-For chain names when the connection comes from a proxy the
 * operator trusts. */
#ifndef SVC_ADDR_H
#define SVC_ADDR_H

#include <stddef.h>

/* An address: IPv4 (an IPv4-mapped IPv6 address becomes the IPv4 one) or IPv6. */
typedef struct svc_addr {
    int v6;                 /* 0: IPv4 in b[0..4) */
    unsigned char b[16];
} svc_addr;

/* Longest text of an address or a limit key, NUL included. */
#define SVC_ADDR_TEXT 48

/* Parses an address: "192.0.2.1", "2001:db8::1", "::ffff:192.0.2.1", and
 * as proxies write them in X-Forwarded-For, with a port ("192.0.2.1:5678",
 * "[2001:db8::1]:443") or in brackets. Spaces around it are ignored.
 * 0, or -1 when s is not an address. */
int svc_addr_parse(const char *s, size_t len, svc_addr *out);
/* The address as text ("192.0.2.1", "2001:db8::1"). */
void svc_addr_text(const svc_addr *a, char *out, size_t len);
/* What per-address limits count by: the IPv4 address, or the IPv6 /64
 * ("2001:db8:1:2::/64"). */
void svc_addr_limit_key(const svc_addr *a, char *out, size_t len);
/* svc_addr_limit_key of the address written in ip; text that is not an
 * address ("unknown") is its own key. */
void svc_addr_key_of(const char *ip, char *out, size_t len);

/* A set of CIDR blocks. */
typedef struct svc_cidrs svc_cidrs;
/* Parses "CIDR[,CIDR...]" (IPv4 or IPv6; an address alone is a /32 or
 * /128; spaces allowed around commas). NULL or "" gives an empty set.
 * NULL with err filled when a block does not parse (or on ENOMEM); the
 * caller frees the set. */
svc_cidrs *svc_cidrs_parse(const char *list, char *err, size_t errlen);
void svc_cidrs_free(svc_cidrs *s);
/* 1 if a is in one of the blocks; 0 if not, or s is NULL or empty. */
int svc_cidrs_match(const svc_cidrs *s, const svc_addr *a);
/* Blocks in the set (0 for NULL). */
size_t svc_cidrs_count(const svc_cidrs *s);

/* The client of a request whose connection comes from peer (text). When
 * peer is in trusted and xff (X-Forwarded-For, every such header joined by
 * commas; NULL: none) is given, the chain is read from the right: each
 * trusted hop is skipped and the first untrusted one is the client, so a
 * client cannot choose its address by writing the header itself (it can
 * only add entries on the left, which are never read past an untrusted
 * one). A chain of trusted hops only names its leftmost; an entry that is
 * not an address stops the walk at the hop after it (the proxy that
 * forwarded it). Otherwise the client is peer. Writes the address text. */
void svc_addr_client(const svc_cidrs *trusted, const char *peer, const char *xff, char *out,
                     size_t len);

#endif
