/* usage.h — usage and cost: what the gateway takes from a node's report of
 * a run (checked before PostgreSQL sees it), the operator's price table
 * (--prices, --currency), and the arguments of GET /v1/usage. No I/O here:
 * the store records and sums (012_usage.sql, gw_store_usage), api_usage.c
 * answers. */
#ifndef GW_USAGE_H
#define GW_USAGE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The report's "backend" when it is "cpu" or "cuda", else NULL (borrowed). */
const char *gw_usage_backend(const json_t *report);

/* The report's "usage" as the store takes it: {"run_s", "cpu_s", "gpus",
 * "gpu_model"} with only the members that are well formed (non-negative
 * finite seconds, 0-64 GPUs, a model name of 1-127 characters), compact
 * JSON text the caller frees; NULL when the report has none of them. */
char *gw_usage_from_report(const json_t *report);

/* The usage of a succeeded run as the batched success statement writes
 * it, around what only PostgreSQL has (queue_s and bytes_in): *u1 is
 * "run_s":…,"backend":…,"gpus":…[,"gpu_model":…],"gpu_s":…,"cpu_s":… and
 * *u2 "bytes_out":…,"cost":…[,"currency":…], both malloc'd, the same
 * members, order and rounding as kowloon_usage (012_usage.sql), which cost
 * a PL/pgSQL call per job on the result path. Returns 0, or -1 when the
 * report does not say enough (no backend or run_s, a CUDA run without its
 * GPU model or count): PostgreSQL's kowloon_usage then computes it. */
int gw_usage_fragments(const json_t *report, const char *backend, uint64_t bytes_out,
                       const json_t *prices, char **u1, char **u2);

/* Parses the price table of --prices: "KEY=RATE[,KEY=RATE...]" where KEY
 * is "cpu" (per CPU-core-hour of CPU time), "cuda" (per GPU-hour) or
 * "cuda:<GPU model>" (per GPU-hour of that model, as nodes report its
 * name), and RATE a non-negative decimal number; spaces around keys and
 * rates are ignored; "" is no rates (everything costs 0). currency is an
 * ISO 4217 code (three capital letters). On success *json is
 * {"currency": ..., "rates": {KEY: RATE, ...}} (malloc'd text, the
 * caller's) and 0 is returned; else -EINVAL with err saying what is wrong
 * (or -ENOMEM). */
int gw_prices_parse(const char *spec, const char *currency, char **json, char *err, size_t errlen);

/* A time of GET /v1/usage: "YYYY-MM-DD" (midnight UTC) or RFC 3339
 * "YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)". 0 and *ms (epoch
 * milliseconds), or -EINVAL. */
int gw_usage_time_parse(const char *s, int64_t *ms);

/* The longest range GET /v1/usage sums, and the range when none is given. */
#define GW_USAGE_MAX_DAYS 366
#define GW_USAGE_DEFAULT_DAYS 30

typedef struct gw_usage_query {
    int64_t from_ms, to_ms;   /* [from, to) */
    const char *group;        /* "kernel", "day", "label" or NULL (static) */
    char label_key[65];       /* group "label": the key */
} gw_usage_query;

/* Checks the query arguments of GET /v1/usage (each may be NULL: to
 * defaults to now_ms, from to GW_USAGE_DEFAULT_DAYS before to). 0 with q
 * filled, or -EINVAL with *field naming the argument and msg saying why:
 * a time that does not parse, from after to, a range over
 * GW_USAGE_MAX_DAYS, a group_by other than kernel, day or label:KEY. */
int gw_usage_query_parse(const char *from, const char *to, const char *group_by, int64_t now_ms,
                         gw_usage_query *q, const char **field, char *msg, size_t msglen);

#endif
