/* api_ui.c — the web dashboard: the static files of ui/ at /ui/, Debian's
 * Chart.js at /ui/vendor/chart.js/, and `GET /` sent on to /ui/. Public
 * (the files hold no data; the dashboard asks the API with the key its user
 * types in), under a strict Content-Security-Policy so that nothing a job
 * carries can run as script even if a page forgot to escape it. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api.h"

/* Scripts, styles, images and connections from the gateway's own origin
 * only: no inline script or style, no eval, no plugins, no framing. */
#define UI_CSP                                                                                  \
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "          \
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "              \
    "frame-ancestors 'none'"
/* Longest file name served: the dashboard's own names are short. */
#define UI_NAME_MAX 128

static const struct {
    const char *ext;
    const char *type;
} ui_types[] = {
    {".html", "text/html; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".mjs", "text/javascript; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".json", "application/json"},
    {".map", "application/json"},
    {".svg", "image/svg+xml"},
    {".png", "image/png"},
    {".ico", "image/x-icon"},
    {".txt", "text/plain; charset=utf-8"},
};

const char *gw_ui_file_type(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > UI_NAME_MAX || name[0] == '.' || name[0] == '-' || strstr(name, "..") != NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        if (!ok)
            return NULL;
    }
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot != NULL && i < sizeof ui_types / sizeof ui_types[0]; i++)
        if (strcmp(dot, ui_types[i].ext) == 0)
            return ui_types[i].type;
    return NULL;
}

int gw_ui_etag_match(const char *if_none_match, const char *etag)
{
    if (if_none_match == NULL)
        return 0;
    size_t el = strlen(etag);
    for (const char *p = if_none_match; *p != '\0';) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (*p == '*')
            return 1;
        if (strncmp(p, "W/", 2) == 0) /* weak comparison, RFC 9110 13.1.2 */
            p += 2;
        if (strncmp(p, etag, el) == 0 && (p[el] == '\0' || p[el] == ',' || p[el] == ' '))
            return 1;
        while (*p != '\0' && *p != ',')
            p++;
    }
    return 0;
}

/* Headers every answer under /ui/ carries, 404s included. */
static void ui_security_headers(svc_req *req)
{
    svc_reply_header(req, "Content-Security-Policy", UI_CSP);
    svc_reply_header(req, "X-Content-Type-Options", "nosniff");
    svc_reply_header(req, "X-Frame-Options", "DENY");
    svc_reply_header(req, "Referrer-Policy", "no-referrer");
}

/* Serves name from dir. The name was one path segment; gw_ui_file_type
 * admits only plain names with a known extension, so nothing outside dir
 * (no "..", no "/", no dot file) can be named. cache is the Cache-Control
 * of a 200; every answer has an ETag from size and mtime, and a matching
 * If-None-Match gets 304. */
static int ui_send(svc_req *req, const char *dir, const char *name, const char *cache)
{
    ui_security_headers(req);
    const char *type = gw_ui_file_type(name);
    char path[4096];
    if (type == NULL || dir == NULL || (size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return svc_reply_error(req, 404, "not_found", NULL, NULL, "no such file");
    /* O_NONBLOCK: a FIFO under that name must not hold the thread; the
     * S_ISREG check then refuses it. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        return svc_reply_error(req, 404, "not_found", NULL, NULL, "no such file");
    }
    char etag[64];
    snprintf(etag, sizeof etag, "\"%" PRIx64 "-%" PRIx64 "\"", (uint64_t)st.st_size,
             (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec);
    svc_reply_header(req, "ETag", etag);
    svc_reply_header(req, "Cache-Control", cache);
    if (gw_ui_etag_match(svc_req_header(req, "If-None-Match"), etag)) {
        close(fd);
        return svc_reply_raw(req, 304, type, "", 0);
    }
    return svc_reply_fd(req, 200, type, fd, 0, (uint64_t)st.st_size);
}

int gw_api_ui_file(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    /* no-cache: revalidated (ETag) on every load, so a new gateway's files
     * are seen at once and an unchanged file costs a 304. */
    return ui_send(req, app->cfg.ui_dir, svc_req_param(req, "file"), "no-cache");
}

int gw_api_ui_index(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    return ui_send(req, app->cfg.ui_dir, "index.html", "no-cache");
}

int gw_api_ui_chartjs(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    /* A packaged library changes only with the package: a day is safe. */
    return ui_send(req, app->cfg.chartjs_dir, svc_req_param(req, "file"), "public, max-age=86400");
}

static int redirect(svc_req *req, int status, const char *to)
{
    svc_reply_header(req, "Location", to);
    return svc_reply_json(req, status, json_pack("{s:s}", "location", to));
}

int gw_api_ui_root(svc_req *req)
{
    return redirect(req, 302, "/ui/");
}

int gw_api_ui_slash(svc_req *req)
{
    return redirect(req, 301, "/ui/");
}
