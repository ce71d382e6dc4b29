/* gw_verr.h — what is wrong with a request, for its reply: the HTTP status
 * (400 for its form: types, unknown members; 422 for a value refused; 500
 * when the gateway itself failed), the field it names in the public form
 * ("params.n", "task.inputs[0].path"; "" for none) and a message. The
 * request parsers (api/request.c, gw_task.c) fill it with gw_verr_set;
 * gw_reply_verr (api/reply.h) answers with it. A kernel's own detail is
 * kl_err (kl.h: field and message, as kernels/ sees no gateway header),
 * copied in with 422. */
#ifndef GW_VERR_H
#define GW_VERR_H

typedef struct gw_verr {
    int status;
    char field[160];
    char message[300];
} gw_verr;

/* Fills *e (field NULL: none); returns -1, for `return gw_verr_set(...)`. */
int gw_verr_set(gw_verr *e, int status, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
