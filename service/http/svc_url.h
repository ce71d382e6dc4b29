/* svc_url.h — the one URL parser of both daemons, on libcurl's curl_url
 * (RFC 3986, with its handling of IPv6 literals, userinfo and percent
 * escapes), for URLs of any scheme: http, redis, ... */
#ifndef SVC_URL_H
#define SVC_URL_H

#include <stddef.h>

typedef struct svc_url {
    char scheme[16];
    char user[128], password[256];   /* "" when absent; percent escapes decoded */
    char host[256];                  /* an IPv6 literal keeps its brackets */
    int port;                        /* 0 when the URL names none */
    char path[512];                  /* "/" at least */
} svc_url;

/* Splits url into *out. A URL without "scheme://" is read as if it had
 * default_scheme (NULL: such a URL is refused). 0, or -EINVAL for a URL
 * curl_url refuses or whose parts do not fit, -ENOMEM. */
int svc_url_parse(const char *url, const char *default_scheme, svc_url *out);

#endif
