/* gw_verr.c — filling a request's error detail (gw_verr.h). */
#include "gw_verr.h"

#include <stdarg.h>
#include <stdio.h>

int gw_verr_set(gw_verr *e, int status, const char *field, const char *fmt, ...)
{
    va_list ap;
    e->status = status;
    snprintf(e->field, sizeof e->field, "%s", field ? field : "");
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}
