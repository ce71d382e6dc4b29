/* usage.c — usage and cost (usage.h): checks of what nodes report, the
 * price table, and the arguments of GET /v1/usage. */
#include "usage.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "request.h"

#define GPU_MODEL_MAX 127
#define GPUS_MAX 64

const char *gw_usage_backend(const json_t *report)
{
    const char *b = json_string_value(json_object_get(report, "backend"));
    return b && (strcmp(b, "cpu") == 0 || strcmp(b, "cuda") == 0) ? b : NULL;
}

/* Copies member name of from into to when it is a number of seconds
 * PostgreSQL can take: finite, 0 to ten years. */
static void copy_seconds(json_t *to, const json_t *from, const char *name)
{
    json_t *v = json_object_get(from, name);
    if (json_is_number(v) && isfinite(json_number_value(v)) && json_number_value(v) >= 0 &&
        json_number_value(v) <= 315360000.0)
        json_object_set_new(to, name, json_real(json_number_value(v)));
}

char *gw_usage_from_report(const json_t *report)
{
    const json_t *u = json_object_get(report, "usage");
    if (!json_is_object(u))
        return NULL;
    json_t *o = json_object();
    if (!o)
        return NULL;
    copy_seconds(o, u, "run_s");
    copy_seconds(o, u, "cpu_s");
    json_t *g = json_object_get(u, "gpus");
    if (json_is_integer(g) && json_integer_value(g) >= 0 && json_integer_value(g) <= GPUS_MAX)
        json_object_set_new(o, "gpus", json_integer(json_integer_value(g)));
    const char *model = json_string_value(json_object_get(u, "gpu_model"));
    if (model && *model && strlen(model) <= GPU_MODEL_MAX)
        json_object_set_new(o, "gpu_model", json_string(model));
    char *text = json_object_size(o) ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return text;
}

/* s[0..n) without the spaces around it, into out (size len). */
static void trimmed(const char *s, size_t n, char *out, size_t len)
{
    while (n && *s == ' ')
        s++, n--;
    while (n && s[n - 1] == ' ')
        n--;
    snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), s);
}

/* One "KEY=RATE" of the table into rates; -EINVAL with err. */
static int price_entry(json_t *rates, const char *item, size_t n, char *err, size_t errlen)
{
    const char *eq = memchr(item, '=', n);
    char key[160], rate[64];
    if (!eq) {
        snprintf(err, errlen, "price \"%.*s\" is not KEY=RATE", (int)(n > 60 ? 60 : n), item);
        return -EINVAL;
    }
    trimmed(item, (size_t)(eq - item), key, sizeof(key));
    trimmed(eq + 1, n - (size_t)(eq - item) - 1, rate, sizeof(rate));
    int model = strncmp(key, "cuda:", 5) == 0;
    if (strcmp(key, "cpu") != 0 && strcmp(key, "cuda") != 0 &&
        !(model && key[5] && strlen(key + 5) <= GPU_MODEL_MAX)) {
        snprintf(err, errlen, "price key \"%.60s\" is not cpu, cuda or cuda:<GPU model>", key);
        return -EINVAL;
    }
    char *end;
    double v = strtod(rate, &end);
    if (!rate[0] || *end || !isfinite(v) || v < 0 || strspn(rate, "0123456789.") != strlen(rate)) {
        snprintf(err, errlen, "price of %.60s: \"%.30s\" is not a non-negative decimal number", key,
                 rate);
        return -EINVAL;
    }
    if (json_object_get(rates, key)) {
        snprintf(err, errlen, "price of %.60s is given twice", key);
        return -EINVAL;
    }
    return json_object_set_new(rates, key, json_real(v)) == 0 ? 0 : -ENOMEM;
}

int gw_prices_parse(const char *spec, const char *currency, char **json, char *err, size_t errlen)
{
    *json = NULL;
    if (!currency || strlen(currency) != 3 || strspn(currency, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != 3) {
        snprintf(err, errlen, "currency must be an ISO 4217 code: three capital letters (USD)");
        return -EINVAL;
    }
    json_t *rates = json_object();
    int rc = rates ? 0 : -ENOMEM;
    if (spec && !spec[strspn(spec, " ")])
        spec = NULL;   /* only spaces: no table, like "" */
    for (const char *p = spec ? spec : ""; !rc && *p;) {
        size_t n = strcspn(p, ",");
        if (n == strspn(p, " ")) {
            snprintf(err, errlen, "the price table has an empty entry");
            rc = -EINVAL;
            break;
        }
        rc = price_entry(rates, p, n, err, errlen);
        p += n + (p[n] == ',');
        if (!rc && p[-1] == ',' && !*p) {
            snprintf(err, errlen, "the price table ends with a comma");
            rc = -EINVAL;
        }
    }
    json_t *o = rc ? NULL : json_pack("{s:s, s:O}", "currency", currency, "rates", rates);
    if (!rc && !(o && (*json = json_dumps(o, JSON_COMPACT))))
        rc = -ENOMEM;
    json_decref(o);
    json_decref(rates);
    return rc;
}

/* Days in month m (1-12) of year y. */
static int month_days(int y, int m)
{
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return days[m - 1] + (m == 2 && leap);
}

/* n digits at s as an integer; -1 when they are not all digits. */
static int digits(const char *s, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* The date part "YYYY-MM-DD" at the start of s into *y, *mo, *d: 0, or
 * -EINVAL when it is not a valid date from 1970 to 9999. */
static int time_parse_date(const char *s, int *y, int *mo, int *d)
{
    if (strlen(s) < 10 || s[4] != '-' || s[7] != '-')
        return -EINVAL;
    *y = digits(s, 4), *mo = digits(s + 5, 2), *d = digits(s + 8, 2);
    if (*y < 1970 || *y > 9999 || *mo < 1 || *mo > 12 || *d < 1 || *d > month_days(*y, *mo))
        return -EINVAL;
    return 0;
}

/* The fraction ".d{1,9}" at *p, if there is one, as milliseconds (digits past
 * the third dropped) into *frac_ms; moves *p past it. 0 or -EINVAL. */
static int time_parse_fraction(const char **p, int64_t *frac_ms)
{
    if (**p != '.')
        return 0;
    size_t n = strspn(*p + 1, "0123456789");
    if (n < 1 || n > 9)
        return -EINVAL;
    for (size_t i = 0; i < 3; i++)
        *frac_ms = *frac_ms * 10 + (i < n ? (*p)[1 + i] - '0' : 0);
    *p += 1 + n;
    return 0;
}

/* The zone "Z" or "+HH:MM" / "-HH:MM" that ends the string p, as seconds
 * east of UTC into *offset_s. 0 or -EINVAL. */
static int time_parse_offset(const char *p, int64_t *offset_s)
{
    if ((*p == 'Z' || *p == 'z') && !p[1]) {
        *offset_s = 0;
        return 0;
    }
    if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':') {
        int oh = digits(p + 1, 2), om = digits(p + 4, 2);
        if (oh < 0 || oh > 23 || om < 0 || om > 59)
            return -EINVAL;
        *offset_s = (*p == '+' ? 1 : -1) * (int64_t)(oh * 3600 + om * 60);
        return 0;
    }
    return -EINVAL;
}

/* The time part "THH:MM:SS[.fff]<zone>" that follows the date, p at its 'T':
 * the clock into *h, *mi, *se, the fraction into *frac_ms and the zone into
 * *offset_s. 0 or -EINVAL. */
static int time_parse_clock(const char *p, int *h, int *mi, int *se, int64_t *frac_ms,
                            int64_t *offset_s)
{
    if ((*p != 'T' && *p != 't') || strlen(p) < 10 || p[3] != ':' || p[6] != ':')
        return -EINVAL;
    *h = digits(p + 1, 2), *mi = digits(p + 4, 2), *se = digits(p + 7, 2);
    if (*h < 0 || *h > 23 || *mi < 0 || *mi > 59 || *se < 0 || *se > 59)
        return -EINVAL;
    p += 9;
    if (time_parse_fraction(&p, frac_ms) != 0)
        return -EINVAL;
    return time_parse_offset(p, offset_s);
}

int gw_usage_time_parse(const char *s, int64_t *ms)
{
    int y, mo, d, h = 0, mi = 0, se = 0;
    int64_t frac_ms = 0, offset_s = 0;
    if (time_parse_date(s, &y, &mo, &d) != 0)
        return -EINVAL;
    if (s[10] && time_parse_clock(s + 10, &h, &mi, &se, &frac_ms, &offset_s) != 0)
        return -EINVAL;
    struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h,
                    .tm_min = mi, .tm_sec = se};
    *ms = ((int64_t)timegm(&tm) - offset_s) * 1000 + frac_ms;
    return 0;
}

/* Fills field and msg for gw_usage_query_parse; returns -EINVAL. */
static int bad(const char **field, const char *name, char *msg, size_t msglen, const char *why)
{
    *field = name;
    snprintf(msg, msglen, "%s %s", name, why);
    return -EINVAL;
}

int gw_usage_query_parse(const char *from, const char *to, const char *group_by, int64_t now_ms,
                         gw_usage_query *q, const char **field, char *msg, size_t msglen)
{
    static const char *const when = "must be a date (YYYY-MM-DD, UTC) or an RFC 3339 time "
                                    "(YYYY-MM-DDTHH:MM:SSZ)";
    const int64_t day_ms = 86400000;
    memset(q, 0, sizeof(*q));
    q->to_ms = now_ms;
    if (to && gw_usage_time_parse(to, &q->to_ms) != 0)
        return bad(field, "to", msg, msglen, when);
    q->from_ms = q->to_ms - GW_USAGE_DEFAULT_DAYS * day_ms;
    if (from && gw_usage_time_parse(from, &q->from_ms) != 0)
        return bad(field, "from", msg, msglen, when);
    if (q->from_ms > q->to_ms)
        return bad(field, "from", msg, msglen, "must not be after to");
    if (q->to_ms - q->from_ms > GW_USAGE_MAX_DAYS * day_ms)
        return bad(field, "from", msg, msglen, "must be at most 366 days before to");
    if (!group_by)
        return 0;
    if (strcmp(group_by, "kernel") == 0 || strcmp(group_by, "day") == 0) {
        q->group = strcmp(group_by, "kernel") == 0 ? "kernel" : "day";
    } else if (strncmp(group_by, "label:", 6) == 0 && gw_label_key_valid(group_by + 6)) {
        q->group = "label";
        snprintf(q->label_key, sizeof(q->label_key), "%s", group_by + 6);
    } else {
        return bad(field, "group_by", msg, msglen,
                   "must be kernel, day or label:KEY (KEY 1-64 characters of A-Z a-z 0-9 _ . -)");
    }
    return 0;
}

/* A JSON string of s into buf (escaped as jansson does): len bytes at most. */
static void json_quoted(char *buf, size_t len, const char *s)
{
    json_t *j = json_string(s);
    char *t = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    snprintf(buf, len, "%s", t ? t : "null");
    free(t);
    json_decref(j);
}

int gw_usage_fragments(const json_t *report, const char *backend, uint64_t bytes_out,
                       const json_t *prices, char **u1, char **u2)
{
    const json_t *u = json_object_get(report, "usage");
    json_t *run = json_object_get(u, "run_s"), *cpu = json_object_get(u, "cpu_s");
    json_t *g = json_object_get(u, "gpus");
    const char *model = json_string_value(json_object_get(u, "gpu_model"));
    int cuda = backend && strcmp(backend, "cuda") == 0;
    *u1 = *u2 = NULL;
    /* What only PostgreSQL knows (the node's registered GPUs, the run's
     * start by the gateway's clock) is left to kowloon_usage. */
    if (!backend || !json_is_number(run) || !isfinite(json_number_value(run)) ||
        json_number_value(run) < 0 || json_number_value(run) > 315360000.0 ||
        (cuda && (!model || !*model || strlen(model) > GPU_MODEL_MAX || !json_is_integer(g) ||
                  json_integer_value(g) < 0 || json_integer_value(g) > GPUS_MAX)))
        return -1;
    double run_s = json_number_value(run), cpu_s = 0;
    if (json_is_number(cpu) && isfinite(json_number_value(cpu)) && json_number_value(cpu) > 0 &&
        json_number_value(cpu) <= 315360000.0)
        cpu_s = json_number_value(cpu);
    int gpus = cuda ? (int)json_integer_value(g) : 0;
    const json_t *rates = json_object_get(prices, "rates");
    json_t *rate = NULL;
    char key[GPU_MODEL_MAX + 8], mq[2 * GPU_MODEL_MAX + 8] = "", cur[32] = "";
    if (cuda) {
        snprintf(key, sizeof key, "cuda:%s", model);
        if (!(rate = json_object_get(rates, key)))
            rate = json_object_get(rates, "cuda");
        json_quoted(mq, sizeof mq, model);
    } else {
        rate = json_object_get(rates, "cpu");
    }
    const char *currency = json_string_value(json_object_get(prices, "currency"));
    if (currency)
        json_quoted(cur, sizeof cur, currency);
    double cost = (cuda ? gpus * run_s : cpu_s) / 3600 * (json_is_number(rate) ? json_number_value(rate) : 0);
    /* kowloon_usage's members, in its order and with its rounding */
    if (asprintf(u1, "\"run_s\":%.3f,\"backend\":\"%s\",\"gpus\":%d%s%s,\"gpu_s\":%.3f,\"cpu_s\":%.6f",
                 run_s, cuda ? "cuda" : "cpu", gpus, cuda ? ",\"gpu_model\":" : "", mq,
                 gpus * run_s, cpu_s) < 0) {
        *u1 = NULL;
        return -1;
    }
    if (asprintf(u2, "\"bytes_out\":%llu,\"cost\":%.9f%s%s", (unsigned long long)bytes_out, cost,
                 currency ? ",\"currency\":" : "", cur) < 0) {
        free(*u1);
        *u1 = *u2 = NULL;
        return -1;
    }
    return 0;
}
