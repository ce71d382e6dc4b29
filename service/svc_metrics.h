/* svc_metrics.h — the metrics registry both daemons serve at GET /metrics,
 * in Prometheus' text exposition format 0.0.4. Families (counter, gauge,
 * histogram with fixed buckets) hold series by label values; updating one
 * is a lock-free lookup and an atomic add, so the request and job paths pay
 * no lock for it. Values that are cheaper to read when scraped (process
 * figures, pool sizes, figures from PostgreSQL) come from collectors, which
 * write through the same writer so that every line is formatted here. */
#ifndef SVC_METRICS_H
#define SVC_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* Labels a family may have, and series one family may hold: a caller
 * that would go past it is answered NULL (updates on NULL are no-ops), so
 * a bug that labels by something unbounded costs a warning, not memory. */
#define SVC_METRIC_MAX_LABELS 4
#define SVC_METRIC_MAX_SERIES 1024

/* Content-Type of the exposition. */
#define SVC_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef struct svc_metrics svc_metrics;   /* a registry */
typedef struct svc_metric svc_metric;     /* a family: name, help, type, label names */
typedef struct svc_series svc_series;     /* one series of a family */
typedef struct svc_mwriter svc_mwriter;   /* an exposition being written */

typedef enum { SVC_METRIC_COUNTER, SVC_METRIC_GAUGE, SVC_METRIC_HISTOGRAM } svc_metric_type;

/* A new empty registry; NULL on ENOMEM. */
svc_metrics *svc_metrics_new(void);
/* Frees the registry with its families and series. NULL is a no-op. Nothing
 * may update or collect into it any more. */
void svc_metrics_free(svc_metrics *m);

/* Registers a family, or returns the one of that name when its type and
 * labels are the same (two servers of one process share their families).
 * labels: NULL-terminated label names, NULL for none. bounds (histograms
 * only): nbounds upper bounds, strictly increasing; +Inf is implied. The
 * strings must live as long as the registry (literals). NULL for a name or
 * label that is not valid in the format, a clash with an existing family,
 * or ENOMEM. */
svc_metric *svc_metric_counter(svc_metrics *m, const char *name, const char *help,
                               const char *const *labels);
svc_metric *svc_metric_gauge(svc_metrics *m, const char *name, const char *help,
                             const char *const *labels);
svc_metric *svc_metric_histogram(svc_metrics *m, const char *name, const char *help,
                                 const char *const *labels, const double *bounds, int nbounds);

/* The series of f with these label values (one per label name, in order),
 * made on first use; values are copied. NULL when f is NULL, a value is
 * NULL, the family is full, or on ENOMEM. Lock-free: cheap enough for every
 * request, and a caller on a hot path may also keep the pointer, which
 * lives as long as the registry. */
svc_series *svc_metric_series(svc_metric *f, const char *const *values);
/* The same with the values as arguments: svc_metric_with(f, "GET", "200"). */
svc_series *svc_metric_with(svc_metric *f, ...);

/* Updates; all are no-ops on NULL. Counters only go up. */
void svc_counter_add(svc_series *s, uint64_t n);
void svc_gauge_set(svc_series *s, double v);
void svc_gauge_add(svc_series *s, double v);
void svc_histogram_observe(svc_series *s, double v);

/* Reads back (tests, and code that shows a figure elsewhere): a counter's
 * count, a gauge's value, a histogram's count of observations; 0 for NULL. */
double svc_series_value(const svc_series *s);

/* A collector writes its families at each scrape, after the registry's own
 * (svc_mwriter_family, then svc_mwriter_sample for each series). It runs on
 * the scraping thread and must be quick. */
typedef void (*svc_metrics_collect_fn)(svc_mwriter *w, void *arg);
/* Adds a collector; 0 or -ENOMEM. Collectors run in the order added. */
int svc_metrics_add_collector(svc_metrics *m, svc_metrics_collect_fn fn, void *arg);
/* Adds the standard process_* series (CPU seconds, resident and virtual
 * memory, open and max file descriptors, threads, start time) from /proc. */
int svc_metrics_add_process(svc_metrics *m);

/* Writes the # HELP and # TYPE lines of a family. */
void svc_mwriter_family(svc_mwriter *w, const char *name, const char *help, svc_metric_type type);
/* Writes one sample: name{lnames[i]="lvalues[i]",...} v. lnames is
 * NULL-terminated (NULL: no labels); values are escaped here. */
void svc_mwriter_sample(svc_mwriter *w, const char *name, const char *const *lnames,
                        const char *const *lvalues, double v);

/* The whole exposition as text: every family of the registry (series in
 * label order), then the collectors' output. Returns a malloc'd,
 * NUL-terminated buffer the caller frees, with its length in *len; NULL on
 * ENOMEM. */
char *svc_metrics_render(svc_metrics *m, size_t *len);

/* Bucket bounds of latencies in seconds, from a millisecond to a minute. */
extern const double svc_metrics_latency_bounds[];
extern const int svc_metrics_latency_nbounds;

#endif
