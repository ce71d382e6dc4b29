/* blobstore.c — the gateway's blob store (blobstore.h): for now the
 * directory backend of service/svc_bstore.c, which it creates at start. A
 * writer is the backend's writer under the gateway's name. */
#include "blobstore.h"

#include <errno.h>
#include <linux/limits.h> /* PATH_MAX; <limits.h> would find gateway/limits.h */
#include <stdio.h>
#include <stdlib.h>

struct gw_bstore {
    svc_bstore *dir;
    char path[PATH_MAX];   /* absolute */
};

struct gw_bwriter {
    svc_bwriter *w;
};

gw_bstore *gw_bstore_open(const char *dir, char *err, size_t errlen)
{
    gw_bstore *s = calloc(1, sizeof *s);
    if (s == NULL || (s->dir = svc_bstore_open(dir, SVC_BSTORE_CREATE, err, errlen)) == NULL) {
        if (s == NULL)
            snprintf(err, errlen, "out of memory");
        free(s);
        return NULL;
    }
    if (realpath(dir, s->path) == NULL)
        snprintf(s->path, sizeof s->path, "%s", dir);
    return s;
}

const char *gw_bstore_dir(const gw_bstore *s)
{
    return s->path;
}

const char *gw_bstore_id(const gw_bstore *s)
{
    return svc_bstore_id(s->dir);
}

void gw_bstore_close(gw_bstore *s)
{
    if (s == NULL)
        return;
    svc_bstore_close(s->dir);
    free(s);
}

gw_bwriter *gw_bstore_write_begin(gw_bstore *s)
{
    gw_bwriter *w = malloc(sizeof *w);
    if (w == NULL)
        return NULL;
    if ((w->w = svc_bstore_write_begin(s->dir)) == NULL) {
        int e = errno;
        free(w);
        errno = e;
        return NULL;
    }
    return w;
}

int gw_bwriter_append(gw_bwriter *w, const void *data, size_t n)
{
    return svc_bwriter_append(w->w, data, n);
}

uint64_t gw_bwriter_size(const gw_bwriter *w)
{
    return svc_bwriter_size(w->w);
}

int gw_bwriter_commit(gw_bwriter *w, char id[GW_BLOB_ID_LEN], uint64_t *size)
{
    return svc_bwriter_commit(w->w, id, size);
}

int gw_bwriter_close(gw_bwriter *w)
{
    int rc = svc_bwriter_close(w->w);
    free(w);
    return rc;
}

void gw_bwriter_abort(gw_bwriter *w)
{
    if (w == NULL)
        return;
    svc_bwriter_abort(w->w);
    free(w);
}

int gw_bstore_open_read(gw_bstore *s, const char *id, int *fd, uint64_t *size)
{
    return svc_bstore_open_read(s->dir, id, fd, size);
}

int gw_bstore_stat(gw_bstore *s, const char *id, uint64_t *size)
{
    return svc_bstore_stat(s->dir, id, size);
}

int gw_bstore_verify(gw_bstore *s, const char *id, uint64_t max, uint64_t *size)
{
    return svc_bstore_verify(s->dir, id, max, size);
}

int gw_bstore_remove(gw_bstore *s, const char *id)
{
    return svc_bstore_remove(s->dir, id);
}
