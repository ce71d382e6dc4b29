/* gw_limits.h — how much a tenant may ask: a token bucket per API key in Redis
 * (one Lua script refills by elapsed time and takes a token), a quota of
 * queued jobs checked on submit, and a quota of running jobs that the
 * scheduler checks before it places a job. Gateway flags give the defaults;
 * a tenant's row may override each one (NULL: the default, 0: unlimited). */
#ifndef GW_LIMITS_H
#define GW_LIMITS_H

#include <jansson.h>
#include <stdint.h>

#include "gw.h"
#include "svc_http.h"

typedef struct gw_limits gw_limits;

/* Each API key has two buckets: writes (submits, cancels, uploads, the
 * admin API's changes: --rate-limit-rps/-burst) and reads (everything
 * else: --read-rate-limit-rps/-burst). Which one a route takes is declared
 * in the route table (GW_ACCESS_WRITE, api.h). */
enum { GW_RATE_READ = 0, GW_RATE_WRITE = 1 };

/* A token bucket: rps tokens per second, at most burst of them; rps 0 means
 * no limit. */
typedef struct gw_rate {
    int rps, burst;
} gw_rate;

/* The bucket of a key: the tenant's values where set (>= 0), else the
 * gateway's. A burst of 0 means the rate itself, at least 1 token. */
gw_rate gw_rate_resolve(int def_rps, int def_burst, int tenant_rps, int tenant_burst);

/* A POST /v1/tenants body. A limit absent from it is left as it is (set =
 * 0); null writes NULL (value -1): the gateway's default. */
enum { GW_LIM_RATE_RPS, GW_LIM_RATE_BURST, GW_LIM_MAX_QUEUED, GW_LIM_MAX_RUNNING, GW_LIM__COUNT };
extern const char *const gw_limit_names[GW_LIM__COUNT];   /* the body's field names */
typedef struct gw_tenant_body {
    const char *name;        /* borrowed from the body */
    gw_store_limit lim[GW_LIM__COUNT];
    double weight;           /* fair-share weight; 0: not given (unchanged, 1 when new) */
    int task_images_set;     /* task_images given (null: back to --task-images) */
    char *task_images_json;  /* its list, JSON text (owned; NULL for null) */
    int task_egress;         /* 1, 0, or -1 when not given */
} gw_tenant_body;
/* 1 when name is a tenant name the admin API accepts: 1-128 characters
 * (UTF-8, as jansson guarantees), no control characters. */
int gw_tenant_name_valid(const char *name);
/* Checks a POST /v1/tenants body. 0, or -1 with the field at fault and a
 * message for the 400 reply; free out->task_images_json after either. */
int gw_tenant_body_parse(const json_t *body, gw_tenant_body *out, char field[32],
                         char *msg, size_t msglen);

/* The limits of a serving gateway: its defaults and its own small pool of
 * Redis connections (short timeouts, so a Redis outage costs requests
 * little). NULL on a malformed Redis URL or ENOMEM. */
gw_limits *gw_limits_open(const gw_config *cfg);
void gw_limits_close(gw_limits *l);
/* The limiter's connection pool (its figures for /metrics: redis.h). */
struct gw_redis *gw_limits_redis(gw_limits *l);

/* The Redis key of bucket (GW_RATE_*) of API key key_id. */
void gw_rate_key(char *out, size_t len, int64_t key_id, int bucket);

/* Takes one token from bucket (GW_RATE_*) of key_id: *allowed is 1 or 0,
 * *wait_ms the time until the next token (0 when one is left). 0, or -EIO
 * when Redis did not answer. */
int gw_limits_take(gw_limits *l, int64_t key_id, int bucket, const gw_rate *r, int *allowed,
                   int64_t *wait_ms);

/* The rate limit of the authenticated caller (gw_auth_tenant calls it for
 * every tenant request) in bucket (GW_RATE_*): the gateway's default for
 * that bucket, or the tenant's rate_rps/rate_burst where set, which apply
 * to each bucket alike. 0 to go on, or -1 after replying 429 rate_limited
 * with Retry-After. When Redis cannot be asked the request goes on (fail
 * open) and a warning is logged at most every few seconds. */
int gw_limits_rate(svc_req *req, const gw_caller *who, int bucket);

/* The queued-jobs quota, at the top of POST /v1/jobs: 0 to go on, or -1
 * after replying 429 quota_queued (or 503 when PostgreSQL is down). Most
 * submits are admitted on a count kept for a second plus the submits this
 * gateway admitted since; a refusal is always decided on a fresh count.
 * The count and the insert are not one transaction: submits in flight at
 * the same moment, and those other gateways admitted within the last
 * second, may pass the quota by their number (limits.c says more). */
int gw_limits_admit_submit(svc_req *req, const gw_caller *who);

/* The running-jobs quota, for the scheduler before it claims job_id: 1 when
 * the job's tenant runs fewer jobs than its max_running, 0 when it is at
 * its quota (skip the job; it stays queued). A job found at quota is not
 * asked about again for a quarter second, so a tenant at quota with a long
 * queue costs PostgreSQL a few queries per second, not one per pass. Errors
 * answer 1: the claim that follows decides. Call from one thread. */
int gw_limits_running_allowed(gw_app *app, const char *job_id);

#endif
