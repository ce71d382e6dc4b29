/* svc_metrics.c — the metrics registry and the text exposition
 * (svc_metrics.h). Families are registered rarely, under the registry's
 * mutex; series live in a fixed open-addressing table per family whose
 * slots are filled with a compare-and-swap and never emptied, so a lookup
 * takes no lock, and values are C11 atomics updated with relaxed order (a
 * scrape needs each number, not a snapshot of all of them at one instant). */
#include "svc_metrics.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "svc_dtoa.h"
#include "svc_log.h"
#include "svc_util.h"

#define MAX_BOUNDS 32

const double svc_metrics_latency_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                             0.25,  0.5,    1,     2.5,  5,     10,   30, 60};
const int svc_metrics_latency_nbounds =
    (int)(sizeof svc_metrics_latency_bounds / sizeof *svc_metrics_latency_bounds);

struct svc_series {
    const svc_metric *family;
    uint32_t hash;
    char *values[SVC_METRIC_MAX_LABELS];
    _Atomic uint64_t count;  /* counter: the count; histogram: unused (buckets add up) */
    _Atomic uint64_t bits;   /* gauge: its value; histogram: the sum (double bits) */
    _Atomic uint64_t *buckets; /* histogram: observations per bucket, +Inf last */
};

struct svc_metric {
    svc_metric *next;
    const char *name, *help;
    svc_metric_type type;
    int nlabels;
    const char *labels[SVC_METRIC_MAX_LABELS + 1];
    int nbounds;
    double bounds[MAX_BOUNDS];
    _Atomic int full_warned;
    _Atomic(svc_series *) slot[SVC_METRIC_MAX_SERIES];
};

typedef struct collector {
    struct collector *next;
    svc_metrics_collect_fn fn;
    void *arg;
} collector;

struct svc_metrics {
    pthread_mutex_t mu;      /* guards the lists; values need no lock */
    svc_metric *families, *last;
    collector *collectors, *clast;
};

struct svc_mwriter {
    char *buf;
    size_t len, cap;
    int oom;
};

/* ---- values ----------------------------------------------------------- */

static uint64_t dbits(double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

static double bitsd(uint64_t b)
{
    double v;
    memcpy(&v, &b, sizeof v);
    return v;
}

/* Adds v to the double held in *a (a compare-and-swap loop: C11 has no
 * atomic add for doubles). */
static void atomic_add_double(_Atomic uint64_t *a, double v)
{
    uint64_t old = atomic_load_explicit(a, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(a, &old, dbits(bitsd(old) + v),
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
}

void svc_counter_add(svc_series *s, uint64_t n)
{
    if (s != NULL)
        atomic_fetch_add_explicit(&s->count, n, memory_order_relaxed);
}

void svc_gauge_set(svc_series *s, double v)
{
    if (s != NULL)
        atomic_store_explicit(&s->bits, dbits(v), memory_order_relaxed);
}

void svc_gauge_add(svc_series *s, double v)
{
    if (s != NULL)
        atomic_add_double(&s->bits, v);
}

void svc_histogram_observe(svc_series *s, double v)
{
    if (s == NULL || s->buckets == NULL || isnan(v))
        return;
    const svc_metric *f = s->family;
    int i = 0;
    while (i < f->nbounds && v > f->bounds[i])
        i++;
    atomic_fetch_add_explicit(&s->buckets[i], 1, memory_order_relaxed);
    atomic_add_double(&s->bits, v);
}

/* Observations of a histogram: the sum of its buckets, so that _count and
 * the +Inf bucket always agree. */
static uint64_t histogram_total(const svc_series *s)
{
    uint64_t n = 0;
    for (int i = 0; i <= s->family->nbounds; i++)
        n += atomic_load_explicit(&s->buckets[i], memory_order_relaxed);
    return n;
}

double svc_series_value(const svc_series *s)
{
    if (s == NULL)
        return 0;
    switch (s->family->type) {
    case SVC_METRIC_COUNTER:
        return (double)atomic_load_explicit(&s->count, memory_order_relaxed);
    case SVC_METRIC_GAUGE:
        return bitsd(atomic_load_explicit(&s->bits, memory_order_relaxed));
    default:
        return (double)histogram_total(s);
    }
}

/* ---- families and series ---------------------------------------------- */

static int name_valid(const char *s, int colon)
{
    if (s == NULL || *s == '\0' || (*s >= '0' && *s <= '9'))
        return 0;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || (colon && c == ':')))
            return 0;
    }
    return 1;
}

static int same_labels(const svc_metric *f, const char *const *labels)
{
    int n = 0;
    while (labels != NULL && labels[n] != NULL)
        n++;
    if (n != f->nlabels)
        return 0;
    for (int i = 0; i < n; i++)
        if (strcmp(f->labels[i], labels[i]) != 0)
            return 0;
    return 1;
}

static svc_metric *family_add(svc_metrics *m, const char *name, const char *help,
                              svc_metric_type type, const char *const *labels,
                              const double *bounds, int nbounds)
{
    if (m == NULL || !name_valid(name, 1) || help == NULL || nbounds < 0 || nbounds > MAX_BOUNDS)
        return NULL;
    int n = 0;
    for (; labels != NULL && labels[n] != NULL; n++)
        if (n == SVC_METRIC_MAX_LABELS || !name_valid(labels[n], 0) ||
            strncmp(labels[n], "__", 2) == 0 ||
            (type == SVC_METRIC_HISTOGRAM && strcmp(labels[n], "le") == 0))
            return NULL;
    for (int i = 0; i < nbounds; i++)
        if (!isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1]))
            return NULL;
    pthread_mutex_lock(&m->mu);
    svc_metric *f = m->families;
    while (f != NULL && strcmp(f->name, name) != 0)
        f = f->next;
    if (f != NULL) {
        int same = f->type == type && same_labels(f, labels) && f->nbounds == nbounds &&
                   (nbounds == 0 || memcmp(f->bounds, bounds, sizeof *bounds * (size_t)nbounds) == 0);
        pthread_mutex_unlock(&m->mu);
        if (!same)
            svc_error("metrics: %s registered twice with different types, labels or buckets", name);
        return same ? f : NULL;
    }
    f = calloc(1, sizeof *f);
    if (f != NULL) {
        f->name = name;
        f->help = help;
        f->type = type;
        f->nlabels = n;
        for (int i = 0; i < n; i++)
            f->labels[i] = labels[i];
        f->nbounds = nbounds;
        if (nbounds > 0)
            memcpy(f->bounds, bounds, sizeof *bounds * (size_t)nbounds);
        if (m->last != NULL)
            m->last->next = f;
        else
            m->families = f;
        m->last = f;
    }
    pthread_mutex_unlock(&m->mu);
    return f;
}

svc_metric *svc_metric_counter(svc_metrics *m, const char *name, const char *help,
                               const char *const *labels)
{
    return family_add(m, name, help, SVC_METRIC_COUNTER, labels, NULL, 0);
}

svc_metric *svc_metric_gauge(svc_metrics *m, const char *name, const char *help,
                             const char *const *labels)
{
    return family_add(m, name, help, SVC_METRIC_GAUGE, labels, NULL, 0);
}

svc_metric *svc_metric_histogram(svc_metrics *m, const char *name, const char *help,
                                 const char *const *labels, const double *bounds, int nbounds)
{
    if (bounds == NULL && nbounds > 0)
        return NULL;
    return family_add(m, name, help, SVC_METRIC_HISTOGRAM, labels, bounds, nbounds);
}

static uint32_t values_hash(const svc_metric *f, const char *const *values)
{
    uint32_t h = 2166136261u;
    for (int i = 0; i < f->nlabels; i++) {
        for (const unsigned char *p = (const unsigned char *)values[i]; *p; p++)
            h = (h ^ *p) * 16777619u;
        h = (h ^ 0xff) * 16777619u; /* ("ab","c") and ("a","bc") differ */
    }
    return h;
}

static int series_is(const svc_series *s, uint32_t h, const char *const *values)
{
    if (s->hash != h)
        return 0;
    for (int i = 0; i < s->family->nlabels; i++)
        if (strcmp(s->values[i], values[i]) != 0)
            return 0;
    return 1;
}

static void series_free(svc_series *s)
{
    if (s == NULL)
        return;
    for (int i = 0; i < SVC_METRIC_MAX_LABELS; i++)
        free(s->values[i]);
    free(s->buckets);
    free(s);
}

static svc_series *series_new(svc_metric *f, uint32_t h, const char *const *values)
{
    svc_series *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->family = f;
    s->hash = h;
    int ok = 1;
    for (int i = 0; i < f->nlabels && ok; i++)
        ok = (s->values[i] = strdup(values[i])) != NULL;
    if (ok && f->type == SVC_METRIC_HISTOGRAM)
        ok = (s->buckets = calloc((size_t)f->nbounds + 1, sizeof *s->buckets)) != NULL;
    if (!ok) {
        series_free(s);
        return NULL;
    }
    return s;
}

svc_series *svc_metric_series(svc_metric *f, const char *const *values)
{
    if (f == NULL)
        return NULL;
    for (int i = 0; i < f->nlabels; i++)
        if (values == NULL || values[i] == NULL)
            return NULL;
    uint32_t h = values_hash(f, values);
    svc_series *made = NULL;
    for (unsigned probe = 0; probe < SVC_METRIC_MAX_SERIES; probe++) {
        _Atomic(svc_series *) *slot = &f->slot[(h + probe) % SVC_METRIC_MAX_SERIES];
        svc_series *s = atomic_load_explicit(slot, memory_order_acquire);
        if (s == NULL) {
            if (made == NULL && (made = series_new(f, h, values)) == NULL)
                return NULL;
            if (atomic_compare_exchange_strong_explicit(slot, &s, made, memory_order_acq_rel,
                                                        memory_order_acquire))
                return made;
            /* another thread filled the slot first: s is what it put there */
        }
        if (series_is(s, h, values)) {
            series_free(made);
            return s;
        }
    }
    series_free(made);
    if (!atomic_exchange(&f->full_warned, 1))
        svc_warn("metrics: %s has %d series; no more are kept", f->name, SVC_METRIC_MAX_SERIES);
    return NULL;
}

svc_series *svc_metric_with(svc_metric *f, ...)
{
    const char *values[SVC_METRIC_MAX_LABELS] = {NULL};
    if (f == NULL)
        return NULL;
    va_list ap;
    va_start(ap, f);
    for (int i = 0; i < f->nlabels; i++)
        values[i] = va_arg(ap, const char *);
    va_end(ap);
    return svc_metric_series(f, values);
}

/* ---- registry --------------------------------------------------------- */

svc_metrics *svc_metrics_new(void)
{
    svc_metrics *m = calloc(1, sizeof *m);
    if (m != NULL)
        pthread_mutex_init(&m->mu, NULL);
    return m;
}

void svc_metrics_free(svc_metrics *m)
{
    if (m == NULL)
        return;
    for (svc_metric *f = m->families, *next; f != NULL; f = next) {
        next = f->next;
        for (int i = 0; i < SVC_METRIC_MAX_SERIES; i++)
            series_free(atomic_load(&f->slot[i]));
        free(f);
    }
    for (collector *c = m->collectors, *next; c != NULL; c = next) {
        next = c->next;
        free(c);
    }
    pthread_mutex_destroy(&m->mu);
    free(m);
}

int svc_metrics_add_collector(svc_metrics *m, svc_metrics_collect_fn fn, void *arg)
{
    collector *c = m != NULL ? calloc(1, sizeof *c) : NULL;
    if (c == NULL)
        return -ENOMEM;
    c->fn = fn;
    c->arg = arg;
    pthread_mutex_lock(&m->mu);
    if (m->clast != NULL)
        m->clast->next = c;
    else
        m->collectors = c;
    m->clast = c;
    pthread_mutex_unlock(&m->mu);
    return 0;
}

/* ---- the exposition --------------------------------------------------- */

static void w_append(svc_mwriter *w, const char *s, size_t n)
{
    if (w->oom)
        return;
    if (w->len + n + 1 > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < w->len + n + 1)
            cap *= 2;
        char *p = realloc(w->buf, cap);
        if (p == NULL) {
            w->oom = 1;
            return;
        }
        w->buf = p;
        w->cap = cap;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = '\0';
}

static void w_puts(svc_mwriter *w, const char *s)
{
    w_append(w, s, strlen(s));
}

/* s with backslash and newline escaped, and the double quote too inside a
 * label value (the format's two escaping rules). */
static void w_escaped(svc_mwriter *w, const char *s, int quote)
{
    const char *run = s;
    for (; *s; s++) {
        const char *esc = *s == '\\' ? "\\\\" : *s == '\n' ? "\\n" : quote && *s == '"' ? "\\\"" : NULL;
        if (esc == NULL)
            continue;
        w_append(w, run, (size_t)(s - run));
        w_puts(w, esc);
        run = s + 1;
    }
    w_append(w, run, (size_t)(s - run));
}

/* A sample value or bucket bound as the format reads it (Go's ParseFloat):
 * integers without a fraction, other finite values in their shortest
 * round-trip form, and +Inf, -Inf, NaN. */
static void format_value(double v, char buf[SVC_DTOA_MAX])
{
    if (isnan(v))
        snprintf(buf, SVC_DTOA_MAX, "NaN");
    else if (isinf(v))
        snprintf(buf, SVC_DTOA_MAX, "%sInf", v > 0 ? "+" : "-");
    else if (v == floor(v) && fabs(v) < 9007199254740992.0)
        snprintf(buf, SVC_DTOA_MAX, "%.0f", v);
    else
        svc_dtoa_f64(v, buf);
}

void svc_mwriter_family(svc_mwriter *w, const char *name, const char *help, svc_metric_type type)
{
    static const char *const types[] = {"counter", "gauge", "histogram"};
    w_puts(w, "# HELP ");
    w_puts(w, name);
    w_puts(w, " ");
    w_escaped(w, help, 0);
    w_puts(w, "\n# TYPE ");
    w_puts(w, name);
    w_puts(w, " ");
    w_puts(w, types[type]);
    w_puts(w, "\n");
}

void svc_mwriter_sample(svc_mwriter *w, const char *name, const char *const *lnames,
                        const char *const *lvalues, double v)
{
    char num[SVC_DTOA_MAX];
    w_puts(w, name);
    for (int i = 0; lnames != NULL && lnames[i] != NULL; i++) {
        w_puts(w, i == 0 ? "{" : ",");
        w_puts(w, lnames[i]);
        w_puts(w, "=\"");
        w_escaped(w, lvalues[i], 1);
        w_puts(w, "\"");
        if (lnames[i + 1] == NULL)
            w_puts(w, "}");
    }
    format_value(v, num);
    w_puts(w, " ");
    w_puts(w, num);
    w_puts(w, "\n");
}

static void write_histogram(svc_mwriter *w, const svc_series *s)
{
    const svc_metric *f = s->family;
    const char *names[SVC_METRIC_MAX_LABELS + 2], *values[SVC_METRIC_MAX_LABELS + 2];
    char bname[256], le[SVC_DTOA_MAX];
    for (int i = 0; i < f->nlabels; i++) {
        names[i] = f->labels[i];
        values[i] = s->values[i];
    }
    names[f->nlabels] = "le";
    names[f->nlabels + 1] = NULL;
    values[f->nlabels] = le;
    snprintf(bname, sizeof bname, "%s_bucket", f->name);
    uint64_t cum = 0;
    for (int b = 0; b <= f->nbounds; b++) {
        cum += atomic_load_explicit(&s->buckets[b], memory_order_relaxed);
        format_value(b < f->nbounds ? f->bounds[b] : INFINITY, le);
        svc_mwriter_sample(w, bname, names, values, (double)cum);
    }
    names[f->nlabels] = NULL;
    snprintf(bname, sizeof bname, "%s_sum", f->name);
    svc_mwriter_sample(w, bname, names, values, bitsd(atomic_load(&s->bits)));
    snprintf(bname, sizeof bname, "%s_count", f->name);
    svc_mwriter_sample(w, bname, names, values, (double)cum);
}

static int series_cmp(const void *a, const void *b)
{
    const svc_series *x = *(const svc_series *const *)a, *y = *(const svc_series *const *)b;
    for (int i = 0; i < x->family->nlabels; i++) {
        int c = strcmp(x->values[i], y->values[i]);
        if (c != 0)
            return c;
    }
    return 0;
}

static void write_family(svc_mwriter *w, const svc_metric *f)
{
    svc_series *list[SVC_METRIC_MAX_SERIES];
    int n = 0;
    for (int i = 0; i < SVC_METRIC_MAX_SERIES; i++)
        if ((list[n] = atomic_load_explicit(&f->slot[i], memory_order_acquire)) != NULL)
            n++;
    svc_mwriter_family(w, f->name, f->help, f->type);
    qsort(list, (size_t)n, sizeof *list, series_cmp);
    for (int i = 0; i < n; i++) {
        if (f->type == SVC_METRIC_HISTOGRAM)
            write_histogram(w, list[i]);
        else
            svc_mwriter_sample(w, f->name, f->labels, (const char *const *)list[i]->values,
                               svc_series_value(list[i]));
    }
}

char *svc_metrics_render(svc_metrics *m, size_t *len)
{
    svc_mwriter w = {0};
    w_append(&w, "", 0);
    /* Families and collectors are only ever appended: the lists read
     * without the lock are complete up to the tails taken under it. */
    pthread_mutex_lock(&m->mu);
    svc_metric *flast = m->last;
    collector *clast = m->clast;
    pthread_mutex_unlock(&m->mu);
    for (svc_metric *f = flast ? m->families : NULL; f != NULL; f = f == flast ? NULL : f->next)
        write_family(&w, f);
    for (collector *c = clast ? m->collectors : NULL; c != NULL; c = c == clast ? NULL : c->next)
        c->fn(&w, c->arg);
    if (w.oom) {
        free(w.buf);
        return NULL;
    }
    if (len != NULL)
        *len = w.len;
    return w.buf;
}

/* ---- process metrics -------------------------------------------------- */

/* Seconds since the epoch at which the system booted (/proc/stat btime). */
static double boot_time(void)
{
    FILE *f = fopen("/proc/stat", "r");
    char line[256];
    double bt = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "btime %lf", &bt) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return bt;
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (d == NULL)
        return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

static void collect_process(svc_mwriter *w, void *arg)
{
    (void)arg;
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t n = f != NULL ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f != NULL)
        fclose(f);
    buf[n] = '\0';
    /* Fields after the command name, which may hold spaces: from the state
     * (field 3) on. */
    const char *p = strrchr(buf, ')');
    unsigned long long utime, stime, start, vsize;
    long long threads, rss;
    if (p != NULL && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d "
                                   "%*d %*d %lld %*d %llu %llu %lld",
                            &utime, &stime, &threads, &start, &vsize, &rss) == 6) {
        double hz = (double)sysconf(_SC_CLK_TCK);
        svc_mwriter_family(w, "process_cpu_seconds_total", "user and system CPU time spent, seconds",
                           SVC_METRIC_COUNTER);
        svc_mwriter_sample(w, "process_cpu_seconds_total", NULL, NULL, (double)(utime + stime) / hz);
        svc_mwriter_family(w, "process_resident_memory_bytes", "resident memory size, bytes",
                           SVC_METRIC_GAUGE);
        svc_mwriter_sample(w, "process_resident_memory_bytes", NULL, NULL,
                           (double)rss * (double)sysconf(_SC_PAGESIZE));
        svc_mwriter_family(w, "process_virtual_memory_bytes", "virtual memory size, bytes",
                           SVC_METRIC_GAUGE);
        svc_mwriter_sample(w, "process_virtual_memory_bytes", NULL, NULL, (double)vsize);
        svc_mwriter_family(w, "process_threads", "OS threads of the process", SVC_METRIC_GAUGE);
        svc_mwriter_sample(w, "process_threads", NULL, NULL, (double)threads);
        svc_mwriter_family(w, "process_start_time_seconds",
                           "start time of the process since the Unix epoch, seconds",
                           SVC_METRIC_GAUGE);
        svc_mwriter_sample(w, "process_start_time_seconds", NULL, NULL,
                           boot_time() + (double)start / hz);
    }
    int fds = open_fds();
    if (fds >= 0) {
        svc_mwriter_family(w, "process_open_fds", "open file descriptors", SVC_METRIC_GAUGE);
        svc_mwriter_sample(w, "process_open_fds", NULL, NULL, fds);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        svc_mwriter_family(w, "process_max_fds", "maximum number of open file descriptors",
                           SVC_METRIC_GAUGE);
        svc_mwriter_sample(w, "process_max_fds", NULL, NULL,
                           rl.rlim_cur == RLIM_INFINITY ? INFINITY : (double)rl.rlim_cur);
    }
}

int svc_metrics_add_process(svc_metrics *m)
{
    return svc_metrics_add_collector(m, collect_process, NULL);
}
