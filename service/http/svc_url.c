/* svc_url.c — URLs split with libcurl's curl_url (svc_url.h). */
#include "svc_url.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copies one part into out; an absent part is "". -EINVAL when the part
 * is malformed or longer than len - 1. */
static int part_copy(CURLU *u, CURLUPart what, unsigned flags, char *out, size_t len)
{
    char *v = NULL;
    CURLUcode rc = curl_url_get(u, what, &v, flags);
    out[0] = '\0';
    if (rc == CURLUE_OUT_OF_MEMORY)
        return -ENOMEM;
    if (rc != CURLUE_OK)
        return 0;   /* CURLUE_NO_USER, CURLUE_NO_PORT ...: the part is absent */
    int fits = strlen(v) < len;
    if (fits)
        memcpy(out, v, strlen(v) + 1);
    curl_free(v);
    return fits ? 0 : -EINVAL;
}

int svc_url_parse(const char *url, const char *default_scheme, svc_url *out)
{
    char port[8] = "";
    char *full = NULL;
    int rc = -EINVAL;

    memset(out, 0, sizeof *out);
    if (url == NULL || *url == '\0')
        return -EINVAL;
    const char *sep = strstr(url, "://");
    if (sep != NULL && sep[3] == '/')
        return -EINVAL;   /* curl_url would skip the slashes and read a host in the path */
    if (sep == NULL) {
        if (default_scheme == NULL)
            return -EINVAL;
        size_t n = strlen(default_scheme) + 3 + strlen(url) + 1;
        if ((full = malloc(n)) == NULL)
            return -ENOMEM;
        snprintf(full, n, "%s://%s", default_scheme, url);
        url = full;
    }
    CURLU *u = curl_url();
    if (u == NULL) {
        free(full);
        return -ENOMEM;
    }
    if (curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK)
        goto cleanup;
    if ((rc = part_copy(u, CURLUPART_SCHEME, 0, out->scheme, sizeof out->scheme)) != 0 ||
        (rc = part_copy(u, CURLUPART_USER, CURLU_URLDECODE, out->user, sizeof out->user)) != 0 ||
        (rc = part_copy(u, CURLUPART_PASSWORD, CURLU_URLDECODE, out->password,
                        sizeof out->password)) != 0 ||
        (rc = part_copy(u, CURLUPART_HOST, 0, out->host, sizeof out->host)) != 0 ||
        (rc = part_copy(u, CURLUPART_PORT, 0, port, sizeof port)) != 0 ||
        (rc = part_copy(u, CURLUPART_PATH, 0, out->path, sizeof out->path)) != 0)
        goto cleanup;
    rc = -EINVAL;
    if (out->host[0] == '\0')
        goto cleanup;
    out->port = port[0] ? atoi(port) : 0;   /* curl_url checked it is at most 65535 */
    if (port[0] && out->port == 0)
        goto cleanup;
    if (out->path[0] == '\0')
        snprintf(out->path, sizeof out->path, "/");
    rc = 0;
cleanup:
    curl_url_cleanup(u);
    free(full);
    return rc;
}
