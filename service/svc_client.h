/* svc_client.h — a small JSON HTTP client on libcurl. Each thread keeps its
 * own curl handle so connections are reused; calls are thread-safe. */
#ifndef SVC_CLIENT_H
#define SVC_CLIENT_H

#include <jansson.h>

/* Call once in main before threads start (curl_global_init). */
int svc_client_global_init(void);

typedef struct svc_response {
    int status;       /* HTTP status; 0 when no response arrived */
    json_t *json;     /* parsed body when it was JSON, else NULL; caller decrefs */
    char error[256];  /* transport error text when status == 0 */
} svc_response;

/* Performs method url with an optional JSON body (borrowed) and an optional
 * bearer token, waiting at most timeout_ms. Returns 0 when an HTTP response
 * arrived (any status), -1 on a transport error (connection refused,
 * timeout); either way resp is filled and the caller calls
 * svc_response_clear. */
int svc_http_call(const char *method, const char *url, const char *bearer,
                  const json_t *body, long timeout_ms, svc_response *resp);
void svc_response_clear(svc_response *resp);

#endif
