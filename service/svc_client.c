/* svc_client.c — JSON over HTTP with libcurl (svc_client.h). Each thread
 * keeps one easy handle, reset between calls but never closed. All handles
 * share one connection cache (a curl share object), so a short-lived thread
 * — the gateway's tracker of one run — reuses a kept-alive connection to its
 * node instead of opening its own. The handle is cleaned up by a
 * thread-specific destructor when the thread ends. */
#include "svc_client.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_key_t curl_key;
static pthread_once_t curl_key_once = PTHREAD_ONCE_INIT;
static pthread_once_t curl_global_once = PTHREAD_ONCE_INIT;
static CURLcode curl_global_rc = CURLE_OK;

static void curl_handle_destroy(void *h)
{
    curl_easy_cleanup(h);
}

static void curl_key_create(void)
{
    pthread_key_create(&curl_key, curl_handle_destroy);
}

static CURLSH *curl_share;
static pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *arg)
{
    (void)h, (void)access, (void)arg;
    pthread_mutex_lock(&share_locks[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *arg)
{
    (void)h, (void)arg;
    pthread_mutex_unlock(&share_locks[data]);
}

static void curl_global_once_init(void)
{
    curl_global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
    if (curl_global_rc != CURLE_OK)
        return;
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&share_locks[i], NULL);
    curl_share = curl_share_init();
    if (curl_share) {
        curl_share_setopt(curl_share, CURLSHOPT_LOCKFUNC, share_lock);
        curl_share_setopt(curl_share, CURLSHOPT_UNLOCKFUNC, share_unlock);
        curl_share_setopt(curl_share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
        curl_share_setopt(curl_share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    }
}

int svc_client_global_init(void)
{
    pthread_once(&curl_global_once, curl_global_once_init);
    pthread_once(&curl_key_once, curl_key_create);
    return curl_global_rc == CURLE_OK ? 0 : -1;
}

/* The calling thread's handle, created on first use; NULL on ENOMEM. */
static CURL *thread_handle(void)
{
    pthread_once(&curl_key_once, curl_key_create);
    CURL *h = pthread_getspecific(curl_key);
    if (h == NULL) {
        h = curl_easy_init();
        if (h != NULL && pthread_setspecific(curl_key, h) != 0) {
            curl_easy_cleanup(h);
            h = NULL;
        }
    }
    return h;
}

/* The response body, grown geometrically so large results (hundreds of MB
 * of base64) arrive in linear time. Always NUL-terminated once non-empty. */
typedef struct {
    char *buf;
    size_t len, cap;
} body_buf;

static size_t on_body(char *data, size_t size, size_t nmemb, void *userp)
{
    body_buf *b = userp;
    size_t n = size * nmemb;
    if (n > SIZE_MAX - b->len - 1)
        return 0;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 16384;
        while (cap < b->len + n + 1)
            cap = cap > SIZE_MAX / 2 ? b->len + n + 1 : cap * 2;
        char *p = realloc(b->buf, cap);
        if (p == NULL)
            return 0; /* curl reports CURLE_WRITE_ERROR */
        b->buf = p;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, data, n);
    b->len += n;
    b->buf[b->len] = '\0';
    return n;
}

int svc_http_call(const char *method, const char *url, const char *bearer,
                  const json_t *body, long timeout_ms, svc_response *resp)
{
    memset(resp, 0, sizeof *resp);
    if (method == NULL || url == NULL) {
        snprintf(resp->error, sizeof resp->error, "missing method or url");
        return -1;
    }
    CURL *h = thread_handle();
    if (h == NULL) {
        snprintf(resp->error, sizeof resp->error, "curl_easy_init failed");
        return -1;
    }
    curl_easy_reset(h); /* clears options; the connection cache survives */

    int ret = -1;
    char *payload = NULL;
    struct curl_slist *hdrs = NULL;
    body_buf rb = {0};
    char errbuf[CURL_ERROR_SIZE] = "";
    char auth[1024];

    if (body != NULL) {
        payload = json_dumps(body, JSON_COMPACT);
        if (payload == NULL) {
            snprintf(resp->error, sizeof resp->error, "cannot serialize the request body");
            goto done;
        }
    }

    /* Each append may fail on ENOMEM; a NULL result would drop the list
     * built so far, so keep the old head and check. */
    const char *lines[4] = {"Accept: application/json", "Expect:", NULL, NULL};
    int nlines = 2;
    if (payload != NULL)
        lines[nlines++] = "Content-Type: application/json";
    if (bearer != NULL) {
        /* A token is pasted into a header line: refuse what could end it. */
        if (strpbrk(bearer, "\r\n") != NULL || strlen(bearer) > sizeof auth - 32) {
            snprintf(resp->error, sizeof resp->error, "invalid bearer token");
            goto done;
        }
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", bearer);
        lines[nlines++] = auth;
    }
    for (int i = 0; i < nlines; i++) {
        struct curl_slist *n = curl_slist_append(hdrs, lines[i]);
        if (n == NULL) {
            snprintf(resp->error, sizeof resp->error, "out of memory");
            goto done;
        }
        hdrs = n;
    }

    curl_easy_setopt(h, CURLOPT_URL, url);
    if (curl_share)
        curl_easy_setopt(h, CURLOPT_SHARE, curl_share);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    if (timeout_ms > 0) {
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 10000 ? timeout_ms : 10000L);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &rb);
    if (strcmp(method, "GET") == 0) {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    } else if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else {
        /* POSTFIELDS makes curl send a body (an empty one when there is
         * none, so a bodiless POST still has Content-Length: 0). */
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
                         (curl_off_t)(payload != NULL ? strlen(payload) : 0));
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload != NULL ? payload : "");
        if (strcmp(method, "POST") != 0)
            curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    }

    CURLcode rc = curl_easy_perform(h);
    if (rc != CURLE_OK) {
        snprintf(resp->error, sizeof resp->error, "%s: %s", curl_easy_strerror(rc),
                 errbuf[0] ? errbuf : url);
        goto done;
    }
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    resp->status = (int)status;
    if (rb.len > 0)
        resp->json = json_loadb(rb.buf, rb.len, JSON_DECODE_ANY, NULL);
    ret = 0;

done:
    /* The handle outlives this call: detach everything that does not. */
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, NULL);
    curl_slist_free_all(hdrs);
    free(payload);
    free(rb.buf);
    return ret;
}

void svc_response_clear(svc_response *resp)
{
    if (resp == NULL)
        return;
    json_decref(resp->json);
    resp->json = NULL;
    resp->status = 0;
    resp->error[0] = '\0';
}
