/* test_gw_jobcache.c — the ended-job cache: an answer is found only by its
 * job id and tenant, a second put replaces the first, the memory bound
 * holds (least recently read answers leave first), answers larger than a
 * set's share and a zero budget keep nothing; an answer is found only
 * under the tenant's count of deleted jobs it was kept with, and a dropped
 * one is gone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobcache.h"

static char *get_gen(gw_jobcache *c, int64_t tenant, int64_t gen, const char *id)
{
    size_t len = 0;
    char *t = gw_jobcache_get(c, tenant, gen, id, &len);
    if (!t)
        return NULL;
    char *z = malloc(len + 1);
    memcpy(z, t, len);
    z[len] = '\0';
    free(t);
    return z;
}

static char *get(gw_jobcache *c, int64_t tenant, const char *id)
{
    return get_gen(c, tenant, 0, id);
}

static void test_an_answer_is_found_by_its_id_and_tenant_only(void **state)
{
    (void)state;
    gw_jobcache *c = gw_jobcache_new(1 << 20);
    gw_jobcache_put(c, 7, 0, "job-a", "{\"id\":\"job-a\"}", 14);
    char *t = get(c, 7, "job-a");
    assert_non_null(t);
    assert_string_equal(t, "{\"id\":\"job-a\"}");
    free(t);
    assert_null(get(c, 8, "job-a"));   /* another tenant's job is not found */
    assert_null(get(c, 7, "job-b"));
    gw_jobcache_put(c, 7, 0, "job-a", "{\"v\":2}", 7);
    t = get(c, 7, "job-a");
    assert_string_equal(t, "{\"v\":2}");
    free(t);
    gw_jobcache_free(c);
}

static void test_the_memory_bound_holds_and_the_least_recently_read_leave_first(void **state)
{
    (void)state;
    /* one set of 64 KiB: 8 ways, answers of 10 KiB fit six at a time */
    gw_jobcache *c = gw_jobcache_new(64 << 10);
    static char big[10 << 10];
    memset(big, 'x', sizeof big);
    char id[32];
    for (int i = 0; i < 6; i++) {
        snprintf(id, sizeof id, "job-%d", i);
        gw_jobcache_put(c, 1, 0, id, big, sizeof big);
    }
    free(get(c, 1, "job-0"));          /* read: job-1 is now the least recent */
    gw_jobcache_put(c, 1, 0, "job-6", big, sizeof big);
    char *t = get(c, 1, "job-0");
    assert_non_null(t);
    free(t);
    assert_null(get(c, 1, "job-1"));
    int kept = 0;
    for (int i = 0; i <= 6; i++) {
        snprintf(id, sizeof id, "job-%d", i);
        char *x = get(c, 1, id);
        kept += x != NULL;
        free(x);
    }
    assert_int_equal(kept, 6);
    gw_jobcache_free(c);
}

static void test_answers_beyond_a_sets_share_and_a_zero_budget_keep_nothing(void **state)
{
    (void)state;
    gw_jobcache *c = gw_jobcache_new(64 << 10);
    char *huge = calloc(1, 65 << 10);
    gw_jobcache_put(c, 1, 0, "job-huge", huge, 65 << 10);
    assert_null(get(c, 1, "job-huge"));
    gw_jobcache_free(c);
    c = gw_jobcache_new(0);
    assert_non_null(c);
    gw_jobcache_put(c, 1, 0, "job-a", "{}", 2);
    assert_null(get(c, 1, "job-a"));
    gw_jobcache_free(c);
    free(huge);
}

static void test_a_deletion_of_the_tenant_or_a_drop_forgets_answers(void **state)
{
    (void)state;
    gw_jobcache *c = gw_jobcache_new(1 << 20);
    gw_jobcache_put(c, 7, 3, "job-a", "{}", 2);
    gw_jobcache_put(c, 7, 3, "job-b", "[]", 2);
    gw_jobcache_put(c, 8, 0, "job-c", "{}", 2);
    char *t = get_gen(c, 7, 3, "job-a");
    assert_non_null(t);
    free(t);
    /* a job of tenant 7 was deleted somewhere: its answers are read again */
    assert_null(get_gen(c, 7, 4, "job-a"));
    assert_null(get_gen(c, 7, 3, "job-a")); /* dropped, not just hidden */
    /* a reader whose count is older than the answer's does not see it */
    assert_null(get_gen(c, 7, 2, "job-b"));
    /* other tenants' answers stand */
    assert_non_null(t = get_gen(c, 8, 0, "job-c"));
    free(t);
    gw_jobcache_drop(c, "job-c");
    assert_null(get_gen(c, 8, 0, "job-c"));
    gw_jobcache_drop(c, "job-none");
    gw_jobcache_drop(NULL, "job-c");
    gw_jobcache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_an_answer_is_found_by_its_id_and_tenant_only),
        cmocka_unit_test(test_the_memory_bound_holds_and_the_least_recently_read_leave_first),
        cmocka_unit_test(test_answers_beyond_a_sets_share_and_a_zero_budget_keep_nothing),
        cmocka_unit_test(test_a_deletion_of_the_tenant_or_a_drop_forgets_answers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
