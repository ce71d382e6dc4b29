/* test_gw_queue.c — the ready queue, the delayed set and the scheduler lock
 * (queue.c) and the connection pool under them (redis.c), against a real
 * redis-server that the test starts on a free port (skipped when there is
 * no redis-server on PATH). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "queue.h"
#include "redis.h"
#include "store.h"
#include "svc_log.h"
#include "svc_util.h"

static pid_t redis_pid;
static int redis_port;
static char redis_url[64];

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    close(fd);
    return ntohs(a.sin_port);
}

/* Starts redis-server on redis_port and waits for its PING; 0 or -1. */
static int redis_start(void)
{
    char port[16];
    snprintf(port, sizeof port, "%d", redis_port);
    if ((redis_pid = fork()) == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", "/tmp", (char *)NULL);
        _exit(127);
    }
    if (redis_pid < 0)
        return -1;
    for (int i = 0; i < 200; i++) {
        struct timeval tv = {0, 200000};
        redisContext *c = redisConnectWithTimeout("127.0.0.1", redis_port, tv);
        redisReply *r = c && !c->err ? redisCommand(c, "PING") : NULL;
        int up = r != NULL && r->type == REDIS_REPLY_STATUS;
        freeReplyObject(r);
        redisFree(c);
        if (up)
            return 0;
        if (waitpid(redis_pid, NULL, WNOHANG) == redis_pid)
            return -1;
        svc_sleep_ms(25);
    }
    return -1;
}

static void redis_stop(void)
{
    if (redis_pid > 0) {
        kill(redis_pid, SIGKILL);
        waitpid(redis_pid, NULL, 0);
        redis_pid = 0;
    }
}

static int group_setup(void **state)
{
    (void)state;
    svc_log_init("test", SVC_LOG_ERROR);
    redis_port = free_port();
    snprintf(redis_url, sizeof redis_url, "redis://127.0.0.1:%d/0", redis_port);
    return redis_port > 0 && redis_start() == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    redis_stop();
    return 0;
}

/* Each test: a fresh queue on an empty database. */
static int setup(void **state)
{
    gw_queue *q = gw_queue_open(redis_url, 4);
    if (q == NULL)
        return -1;
    gw_redis_opts o = {.name = "test"};
    char err[128];
    gw_redis *r = gw_redis_open(redis_url, &o, err, sizeof err);
    const char *argv[1] = {"FLUSHALL"};
    freeReplyObject(gw_redis_argv(r, 1, argv, NULL));
    gw_redis_close(r);
    *state = q;
    return 0;
}

static int teardown(void **state)
{
    gw_queue_close(*state);
    return 0;
}

static gw_queued queued(const char *id, int priority, int64_t seq, int64_t not_before_ms)
{
    gw_queued j = {.seq = seq, .priority = priority, .gpus = 1, .not_before_ms = not_before_ms,
                   .tenant_id = 11};
    snprintf(j.id, sizeof j.id, "%s", id);
    snprintf(j.backend, sizeof j.backend, "cpu");
    return j;
}

/* ZADD straight to the test's Redis (an entry as an older gateway wrote
 * it): 1 when added, 0 when it was there, -1 on failure. */
static int raw_zadd(const char *key, const char *score, const char *member)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", redis_port, tv);
    if (!c || c->err)
        return -1;
    redisReply *r = redisCommand(c, "ZADD %s %s %s", key, score, member);
    int rc = r && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;   /* 1: added */
    freeReplyObject(r);
    redisFree(c);
    return rc;
}

/* A ready job of tenant with the given priority and seq. */
static gw_queued job(const char *id, int priority, int64_t seq, const char *backend, int gpus,
                     int64_t tenant)
{
    gw_queued j = {.seq = seq, .priority = priority, .gpus = gpus, .tenant_id = tenant, .nodes = 1};
    snprintf(j.id, sizeof j.id, "%s", id);
    snprintf(j.backend, sizeof j.backend, "%s", backend);
    return j;
}

static void test_ready_queue_orders_by_priority_then_age(void **state)
{
    gw_queue *q = *state;
    gw_queued a = job("job-low-old", 1, 1, "cpu", 1, 7), b = job("job-high-new", 9, 3, "cuda", 2, 7),
              c = job("job-low-new", 1, 2, "any", 1, 7), d = job("job-high-old", 9, 0, "cpu", 1, 7);
    b.nodes = 3;
    b.gpu_mem_mb = 40960;
    b.timeout_s = 600;
    assert_int_equal(gw_queue_push(q, &a), 0);
    assert_int_equal(gw_queue_push(q, &b), 0);
    assert_int_equal(gw_queue_push(q, &c), 0);
    assert_int_equal(gw_queue_push(q, &d), 0);
    gw_ready out[8];
    int n;
    assert_int_equal(gw_queue_peek(q, 8, out, 8, &n), 0);
    assert_int_equal(n, 4);
    assert_string_equal(out[0].job_id, "job-high-old");
    assert_string_equal(out[1].job_id, "job-high-new");
    assert_string_equal(out[1].backend, "cuda");
    assert_int_equal(out[1].gpus, 2);
    assert_int_equal(out[1].tenant_id, 7);   /* the tenant rides along for its quota and share */
    assert_int_equal(out[1].nodes, 3);       /* and what a gang needs */
    assert_int_equal(out[1].gpu_mem_mb, 40960);
    assert_int_equal(out[1].timeout_s, 600);
    assert_true(out[1].score == gw_queue_score(9, 3));
    assert_string_equal(out[2].job_id, "job-low-old");
    assert_string_equal(out[3].job_id, "job-low-new");
    /* at most per_tenant of it */
    assert_int_equal(gw_queue_peek(q, 3, out, 8, &n), 0);
    assert_int_equal(n, 3);
    assert_string_equal(out[2].job_id, "job-low-old");
}

/* Each tenant's entries come together, each tenant's in its own order,
 * however many the other tenant has; per_tenant bounds each tenant alone. */
static void test_peek_gives_every_tenant_its_head(void **state)
{
    gw_queue *q = *state;
    for (int i = 0; i < 100; i++) {
        char id[37];
        snprintf(id, sizeof id, "flood-%03d", i);
        gw_queued f = job(id, 9, i, "cpu", 1, 1);
        assert_int_equal(gw_queue_push(q, &f), 0);
    }
    gw_queued late = job("late-one", 1, 1000, "cpu", 1, 2), later = job("late-two", 1, 1001, "cpu", 1, 2);
    assert_int_equal(gw_queue_push(q, &later), 0);
    assert_int_equal(gw_queue_push(q, &late), 0);
    gw_ready out[64];
    int n, seen1 = 0, at = -1;
    assert_int_equal(gw_queue_peek(q, 10, out, 64, &n), 0);
    assert_int_equal(n, 12);
    for (int i = 0; i < n; i++) {
        seen1 += out[i].tenant_id == 1;
        if (strcmp(out[i].job_id, "late-one") == 0)
            at = i;
    }
    assert_int_equal(seen1, 10);
    assert_true(at >= 0);
    assert_string_equal(out[at + 1].job_id, "late-two");
    /* taking a tenant's last entries forgets the tenant at the next peek */
    const char *m[2] = {out[at].member, out[at + 1].member};
    int taken[2];
    assert_int_equal(gw_queue_take_many(q, m, 2, taken), 0);
    assert_int_equal(taken[0] + taken[1], 2);
    assert_int_equal(gw_queue_peek(q, 10, out, 64, &n), 0);
    assert_int_equal(n, 10);
    int64_t ahead = -1;
    gw_queued f5 = job("flood-005", 9, 5, "cpu", 1, 1);
    assert_int_equal(gw_queue_rank(q, &f5, &ahead), 0);
    assert_int_equal(ahead, 5);   /* a position among its tenant's jobs */
    assert_int_equal(gw_queue_rank(q, &late, &ahead), -ENOENT);
}

/* A peek that cannot give every tenant per_tenant entries within max
 * gives each its part of max (the first tenants took it all: a deep scan
 * saw 8 of 50 tenants), and where there are more tenants than max, the
 * next peeks read the others. */
static void test_peek_shares_its_room_among_the_tenants(void **state)
{
    gw_queue *q = *state;
    for (int t = 0; t < 20; t++)
        for (int i = 0; i < 10; i++) {
            char id[37];
            snprintf(id, sizeof id, "t%02d-%d", t, i);
            gw_queued j = job(id, 5, t * 10 + i, "cpu", 1, 100 + t);
            assert_int_equal(gw_queue_push(q, &j), 0);
        }
    gw_ready out[64];
    int n, per[20] = {0};
    assert_int_equal(gw_queue_peek(q, 512, out, 64, &n), 0);
    assert_int_equal(n, 20 * 3);
    for (int i = 0; i < n; i++)
        per[out[i].tenant_id - 100]++;
    for (int t = 0; t < 20; t++)
        assert_int_equal(per[t], 3);
    int seen[20] = {0}, all = 0;
    for (int call = 0; call < 3; call++) {
        assert_int_equal(gw_queue_peek(q, 512, out, 8, &n), 0);
        assert_int_equal(n, 8);
        for (int i = 0; i < n; i++)
            seen[out[i].tenant_id - 100] = 1;
    }
    for (int t = 0; t < 20; t++)
        all += seen[t];
    assert_int_equal(all, 20);
}

static void test_take_removes_once_and_drop_finds_the_member(void **state)
{
    gw_queue *q = *state;
    gw_queued a = job("job-a", 5, 1, "cpu", 1, 3), b = job("job-b", 5, 2, "cpu", 1, 3);
    assert_int_equal(gw_queue_push(q, &a), 0);
    assert_int_equal(gw_queue_push(q, &b), 0);
    gw_ready out[4];
    int n;
    assert_int_equal(gw_queue_peek(q, 4, out, 4, &n), 0);
    assert_int_equal(gw_queue_take(q, out[0].member), 1);
    assert_int_equal(gw_queue_take(q, out[0].member), 0);   /* another scheduler won */
    assert_int_equal(gw_queue_drop_job(q, &b), 0);
    assert_int_equal(gw_queue_peek(q, 4, out, 4, &n), 0);
    assert_int_equal(n, 0);
}

static void test_delayed_job_waits_for_its_backoff_then_is_promoted(void **state)
{
    gw_queue *q = *state;
    int64_t now = svc_now_wall_ms();
    gw_queued later = queued("job-later", 5, 7, now + 300);
    gw_queued ready = queued("job-ready", 5, 8, 0);
    assert_int_equal(gw_queue_push_queued(q, &later), 0);
    assert_int_equal(gw_queue_push_queued(q, &ready), 0);
    gw_ready out[4];
    int n, moved;
    assert_int_equal(gw_queue_peek(q, 4, out, 4, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(out[0].job_id, "job-ready");
    assert_int_equal(gw_queue_promote_due(q, &moved), 0);
    assert_int_equal(moved, 0);
    svc_sleep_ms(350);
    assert_int_equal(gw_queue_promote_due(q, &moved), 0);
    assert_int_equal(moved, 1);
    assert_int_equal(gw_queue_peek(q, 4, out, 4, &n), 0);
    assert_int_equal(n, 2);
    /* promoted with its ready score (older seq first) and its tenant */
    assert_string_equal(out[0].job_id, "job-later");
    assert_string_equal(out[1].job_id, "job-ready");
    assert_int_equal(out[0].tenant_id, later.tenant_id);
}

/* A delayed entry of an earlier version ("<id> <backend> <gpus> <score>
 * <tenant>") is promoted into its tenant's set with the defaults of a
 * single-node job; the old single ready set is dropped (the reconciler puts
 * its jobs back). */
static void test_entries_of_earlier_versions_are_promoted_or_forgotten(void **state)
{
    gw_queue *q = *state;
    assert_int_equal(raw_zadd("kowloon:delayed", "1", "job-old cpu 1 5000 42"), 1);
    assert_int_equal(raw_zadd("kowloon:ready", "1", "job-older cpu 1"), 1);
    assert_int_equal(raw_zadd("kowloon:ready", "1", "job-older cpu 1"), 0);
    int moved;
    assert_int_equal(gw_queue_promote_due(q, &moved), 0);
    assert_int_equal(moved, 1);
    gw_ready out[4];
    int n;
    assert_int_equal(gw_queue_peek(q, 4, out, 4, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(out[0].job_id, "job-old");
    assert_int_equal(out[0].tenant_id, 42);
    assert_int_equal(out[0].nodes, 1);
    assert_true(out[0].score == 5000);
    assert_int_equal(gw_queue_forget_legacy(q), 0);
    assert_int_equal(raw_zadd("kowloon:ready", "1", "job-older cpu 1"), 1);   /* gone, so added again */
}

static void test_push_missing_adds_only_what_is_absent(void **state)
{
    gw_queue *q = *state;
    int64_t now = svc_now_wall_ms();
    gw_queued one = queued("job-1", 5, 1, 0);
    assert_int_equal(gw_queue_push(q, &one), 0);
    gw_queued list[3] = {queued("job-1", 5, 1, 0), queued("job-2", 5, 2, 0),
                         queued("job-3", 5, 3, now + 60000)};
    int added;
    assert_int_equal(gw_queue_push_missing(q, list, 3, &added), 0);
    assert_int_equal(added, 2);
    assert_int_equal(gw_queue_push_missing(q, list, 3, &added), 0);
    assert_int_equal(added, 0);
    gw_ready out[4];
    int n;
    assert_int_equal(gw_queue_peek(q, 4, out, 4, &n), 0);
    assert_int_equal(n, 2);   /* job-3 waits in the delayed set */
}

static void test_push_missing_takes_more_than_one_batch(void **state)
{
    gw_queue *q = *state;
    enum { N = 600 };   /* more than push_batch's 256 per command */
    static gw_queued list[N];
    for (int i = 0; i < N; i++) {
        char id[37];
        snprintf(id, sizeof id, "job-%04d", i);
        list[i] = queued(id, 5, i, 0);
    }
    int added;
    assert_int_equal(gw_queue_push_missing(q, list, N, &added), 0);
    assert_int_equal(added, N);
    static gw_ready out[N];
    int n;
    assert_int_equal(gw_queue_peek(q, N, out, N, &n), 0);
    assert_int_equal(n, N);
    assert_string_equal(out[N - 1].job_id, "job-0599");
}

static void test_lock_is_held_renewed_and_expires(void **state)
{
    gw_queue *q = *state;
    assert_int_equal(gw_queue_lock(q, "kowloon:test-lock", "gw-1", 200), 1);
    assert_int_equal(gw_queue_lock(q, "kowloon:test-lock", "gw-2", 200), 0);
    assert_int_equal(gw_queue_lock(q, "kowloon:test-lock", "gw-1", 200), 1);   /* renewed */
    svc_sleep_ms(300);
    assert_int_equal(gw_queue_lock(q, "kowloon:test-lock", "gw-2", 200), 1);   /* gw-1 expired */
}

static void test_scripts_go_by_sha1_and_survive_a_script_flush(void **state)
{
    (void)state;
    static gw_redis_script twice = {.src = "return tonumber(ARGV[1]) * 2"};
    gw_redis_opts o = {.name = "test", .size = 1};
    char err[128];
    gw_redis *r = gw_redis_open(redis_url, &o, err, sizeof err);
    const char *args[1] = {"21"};
    redisReply *rep = gw_redis_eval(r, &twice, 0, 1, args);
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_INTEGER);
    assert_int_equal(rep->integer, 42);
    freeReplyObject(rep);
    assert_int_equal(strlen(twice.sha1), 40);   /* learnt once */
    const char *flush[2] = {"SCRIPT", "FLUSH"};
    freeReplyObject(gw_redis_argv(r, 2, flush, NULL));
    rep = gw_redis_eval(r, &twice, 0, 1, args);   /* NOSCRIPT, then EVAL */
    assert_non_null(rep);
    assert_int_equal(rep->integer, 42);
    freeReplyObject(rep);
    /* and the EVAL taught Redis the script again */
    const char *exists[3] = {"SCRIPT", "EXISTS", twice.sha1};
    rep = gw_redis_argv(r, 3, exists, NULL);
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_ARRAY);
    assert_int_equal(rep->element[0]->integer, 1);
    freeReplyObject(rep);
    gw_queue *q = gw_queue_open(redis_url, 1);
    freeReplyObject(gw_redis_argv(r, 2, flush, NULL));
    assert_int_equal(gw_queue_lock(q, "kowloon:test-lock-2", "gw-1", 1000), 1);
    gw_queue_close(q);
    gw_redis_close(r);
}

static void test_score_keeps_priority_bands_apart(void **state)
{
    (void)state;
    assert_true(gw_queue_score(9, (int64_t)1 << 39) < gw_queue_score(8, 0));
    assert_true(gw_queue_score(5, 1) < gw_queue_score(5, 2));
}

static const char *ping[1] = {"PING"};

/* A pool on the test's Redis with o, its first PING answered. */
static gw_redis *pool_open(gw_redis_opts o)
{
    char err[128];
    gw_redis *r = gw_redis_open(redis_url, &o, err, sizeof err);
    assert_non_null(r);
    redisReply *rep = gw_redis_argv(r, 1, ping, NULL);
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_STATUS);
    freeReplyObject(rep);
    return r;
}

static void test_pool_reconnects_after_a_restart_and_backs_off_while_down(void **state)
{
    gw_queue *q = *state;
    gw_redis *r =
        pool_open((gw_redis_opts){.name = "test", .size = 2, .timeout_ms = 300, .backoff_ms = 400});
    assert_int_equal(gw_queue_ping(q), 0);

    redis_stop();
    assert_int_equal(gw_queue_ping(q), -EIO);
    assert_null(gw_redis_argv(r, 1, ping, NULL));
    /* backing off: answers at once, without trying */
    int64_t t0 = svc_now_mono_ms();
    for (int i = 0; i < 100; i++)
        assert_null(gw_redis_argv(r, 1, ping, NULL));
    assert_true(svc_now_mono_ms() - t0 < 100);

    assert_int_equal(redis_start(), 0);
    assert_int_equal(gw_queue_ping(q), 0);   /* the queue's pool does not back off */
    svc_sleep_ms(450);
    redisReply *rep = gw_redis_argv(r, 1, ping, NULL);
    assert_non_null(rep);
    freeReplyObject(rep);
    gw_redis_close(r);
}

/* A pooled connection Redis closed while it was idle (a restart) is
 * connected again for the next command, which succeeds: no failed call,
 * no back-off. */
static void test_a_connection_closed_while_idle_is_made_again_for_the_next_call(void **state)
{
    (void)state;
    gw_redis *r =
        pool_open((gw_redis_opts){.name = "test", .size = 1, .timeout_ms = 1000, .backoff_ms = 5000});
    redis_stop();
    assert_int_equal(redis_start(), 0);
    redisReply *rep = gw_redis_argv(r, 1, ping, NULL);
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_STATUS);
    freeReplyObject(rep);
    gw_redis_stats st;
    gw_redis_stats_get(r, &st);
    assert_int_equal(st.errors, 0);
    gw_redis_close(r);
}

static void test_error_replies_come_back_and_keep_the_connection(void **state)
{
    (void)state;
    gw_redis_opts o = {.name = "test", .size = 1, .backoff_ms = 1000};
    char err[128];
    gw_redis *r = gw_redis_open(redis_url, &o, err, sizeof err);
    const char *bad[1] = {"NOSUCHCOMMAND"};
    redisReply *rep = gw_redis_argv(r, 1, bad, NULL);
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_ERROR);
    freeReplyObject(rep);
    rep = gw_redis_argv(r, 1, ping, NULL);   /* no back-off: Redis answered */
    assert_non_null(rep);
    freeReplyObject(rep);
    gw_redis_close(r);
}

static void test_bad_urls_are_refused(void **state)
{
    (void)state;
    gw_redis_opts o = {.name = "test"};
    char err[128];
    assert_null(gw_redis_open("http://127.0.0.1:6379/0", &o, err, sizeof err));
    assert_null(gw_redis_open("redis://127.0.0.1:6379/zero", &o, err, sizeof err));
    assert_null(gw_redis_open("redis://:6379/0", &o, err, sizeof err));
    assert_null(gw_queue_open("redis://host:0/0", 2));
    gw_redis *r = gw_redis_open("127.0.0.1:6379", &o, err, sizeof err);   /* scheme optional */
    assert_non_null(r);
    gw_redis_close(r);
}

/* A URL that does not parse is named in the error (and so in the log)
 * without its password, wherever the password sits. */
static void test_a_bad_urls_error_does_not_show_its_password(void **state)
{
    (void)state;
    gw_redis_opts o = {.name = "test"};
    static const char *const bad[] = {
        "redis://:Sup3rSecret@127.0.0.1:6379/zero",      /* a bad database */
        "redis://admin:Sup3rSecret@127.0.0.1:6379/x",
        "http://:Sup3rSecret@127.0.0.1:6379/0",           /* not redis:// */
        "redis://Sup3rSecret@127.0.0.1:6379/0/extra",     /* the password as the user */
        "redis://:Sup3rSecret@[::1/0",                    /* does not parse at all */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        assert_null(gw_redis_open(bad[i], &o, err, sizeof err));
        assert_non_null(strstr(err, "bad Redis URL"));
        if (strstr(err, "Sup3rSecret"))
            fail_msg("%s: the error shows the password: %s", bad[i], err);
        assert_non_null(strstr(err, "***@"));
    }
}

/* Entries as every version wrote them are read field by field (the
 * fields an older entry lacks at their defaults); a member that is not an
 * entry is passed over. */
static void test_peek_reads_entries_of_every_version(void **state)
{
    gw_queue *q = *state;
    redisContext *c = redisConnectWithTimeout("127.0.0.1", redis_port, (struct timeval){2, 0});
    assert_non_null(c);
    freeReplyObject(redisCommand(c, "SADD kowloon:ready-tenants 5"));
    redisFree(c);
    assert_int_equal(raw_zadd("kowloon:ready:5", "1", "job-task cuda 2 5 3 40960 600 1a2b3c4d"), 1);
    assert_int_equal(raw_zadd("kowloon:ready:5", "2", "job-kernel any 1 5 1 0 60"), 1);
    assert_int_equal(raw_zadd("kowloon:ready:5", "3", "job-tenant cpu 4 5"), 1);
    assert_int_equal(raw_zadd("kowloon:ready:5", "4", "job-first cpu 1"), 1);
    assert_int_equal(raw_zadd("kowloon:ready:5", "5", "not-an-entry cpu"), 1);
    assert_int_equal(raw_zadd("kowloon:ready:5", "6", "job-nodes0 cpu 1 5 0"), 1);
    gw_ready out[8];
    int n;
    assert_int_equal(gw_queue_peek(q, 8, out, 8, &n), 0);
    assert_int_equal(n, 5);
    assert_string_equal(out[0].job_id, "job-task");
    assert_string_equal(out[0].backend, "cuda");
    assert_int_equal(out[0].gpus, 2);
    assert_int_equal(out[0].tenant_id, 5);
    assert_int_equal(out[0].nodes, 3);
    assert_int_equal(out[0].gpu_mem_mb, 40960);
    assert_int_equal(out[0].timeout_s, 600);
    assert_int_equal(out[0].image, 0x1a2b3c4d);
    assert_string_equal(out[0].member, "job-task cuda 2 5 3 40960 600 1a2b3c4d");
    assert_string_equal(out[1].job_id, "job-kernel");
    assert_int_equal(out[1].timeout_s, 60);
    assert_int_equal(out[1].image, 0);
    assert_string_equal(out[2].job_id, "job-tenant");
    assert_int_equal(out[2].gpus, 4);
    assert_int_equal(out[2].tenant_id, 5);
    assert_int_equal(out[2].nodes, 1);
    assert_int_equal(out[2].timeout_s, 0);
    assert_string_equal(out[3].job_id, "job-first");
    assert_int_equal(out[3].tenant_id, 0);
    assert_string_equal(out[4].job_id, "job-nodes0");
    assert_int_equal(out[4].nodes, 1);   /* never fewer than one */
    assert_true(out[4].score == 6);
}

int main(void)
{
    if (system("command -v redis-server >/dev/null 2>&1") != 0) {
        printf("test_gw_queue: skipped (no redis-server on PATH)\n");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ready_queue_orders_by_priority_then_age, setup, teardown),
        cmocka_unit_test_setup_teardown(test_take_removes_once_and_drop_finds_the_member, setup, teardown),
        cmocka_unit_test_setup_teardown(test_entries_of_earlier_versions_are_promoted_or_forgotten, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_peek_shares_its_room_among_the_tenants, setup, teardown),
        cmocka_unit_test_setup_teardown(test_peek_gives_every_tenant_its_head, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delayed_job_waits_for_its_backoff_then_is_promoted, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_push_missing_adds_only_what_is_absent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_push_missing_takes_more_than_one_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_peek_reads_entries_of_every_version, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lock_is_held_renewed_and_expires, setup, teardown),
        cmocka_unit_test(test_score_keeps_priority_bands_apart),
        cmocka_unit_test_setup_teardown(test_scripts_go_by_sha1_and_survive_a_script_flush, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_error_replies_come_back_and_keep_the_connection, setup,
                                        teardown),
        cmocka_unit_test(test_bad_urls_are_refused),
        cmocka_unit_test(test_a_bad_urls_error_does_not_show_its_password),
        /* last: it restarts the server */
        cmocka_unit_test_setup_teardown(test_pool_reconnects_after_a_restart_and_backs_off_while_down,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_connection_closed_while_idle_is_made_again_for_the_next_call,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
