/* test_gw_nodecred.c — the cluster token's strength, node credentials (form,
 * randomness, hash) and the cache of which node a credential names; and the
 * check of a run's outputs against its kernel's catalog spec. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "blob.h"
#include "nodecred.h"

static int token_ok(const char *t)
{
    char why[256];
    return gw_cluster_token_check(t, why, sizeof why) == 0;
}

static void expect_token_refused(const char *t, const char *reason)
{
    char why[256] = "";
    assert_int_equal(gw_cluster_token_check(t, why, sizeof why), -EINVAL);
    if (!strstr(why, reason))
        fail_msg("token \"%s\": \"%s\" does not say %s", t ? t : "(null)", why, reason);
}

static void test_random_tokens_of_32_characters_or_more_are_accepted(void **state)
{
    (void)state;
    /* openssl rand -hex 16, -hex 32, -base64 33 */
    assert_true(token_ok("3f9a0c1b7d2e4f60a1b2c3d4e5f60718"));
    assert_true(token_ok("9c1e4b7a2d5f8e0b3a6c9f2e5b8d1a4c7f0e3b6a9d2c5f8e1b4a7d0c3f6e9b2a"));
    assert_true(token_ok("q2W8e+Zr/4Lk9mNn0pXc3vBb7sDd1fGh5jKl8zQw"));
}

static void test_short_tokens_are_refused(void **state)
{
    (void)state;
    expect_token_refused(NULL, "no cluster token");
    expect_token_refused("", "no cluster token");
    expect_token_refused("3f9a0c1b7d2e4f60a1b2c3d4e5f6071", "31 characters");
    expect_token_refused("kowloon-dev-cluster-token", "at least 32");
}

static void test_well_known_tokens_are_refused_however_long(void **state)
{
    (void)state;
    expect_token_refused("kowloon-dev-cluster-token-0000000000000", "well-known");
    expect_token_refused("KOWLOON-DEV-CLUSTER-TOKEN-9f8e7d6c5b4a32", "well-known");
    expect_token_refused("replace-me-with-openssl-rand-hex-32", "well-known");
    expect_token_refused("my-changeme-token-for-the-cluster-2026", "changeme");
    expect_token_refused("Password-of-the-cluster-9f8e7d6c5b4a", "password");
}

static void test_repetitive_tokens_are_refused(void **state)
{
    (void)state;
    expect_token_refused("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "repetitive");
    expect_token_refused("0101010101010101010101010101010101010101", "repetitive");
    /* eight distinct characters, but a short string repeated (and cut) */
    expect_token_refused("abcdefghabcdefghabcdefghabcdefghabcd", "repeated");
    expect_token_refused("0123456789abcdef0123456789abcdef", "repeated");
}

static void test_tokens_that_cannot_travel_in_a_header_are_refused(void **state)
{
    (void)state;
    expect_token_refused("3f9a0c1b 7d2e4f60a1b2c3d4e5f60718aa", "space");
    expect_token_refused("3f9a0c1b7d2e4f60a1b2c3d4e5f60718\n", "control");
    expect_token_refused("3f9a0c1b7d2e4f60a1b2c3d4e5f6071\xc3\xa9", "non-ASCII");
}

static void test_a_credential_is_32_random_bytes_in_base64url(void **state)
{
    (void)state;
    char a[GW_NODECRED_SIZE], b[GW_NODECRED_SIZE];
    assert_int_equal(gw_nodecred_make(a), 0);
    assert_int_equal(gw_nodecred_make(b), 0);
    assert_int_equal(strlen(a), 3 + 43);
    assert_memory_equal(a, "kn_", 3);
    assert_int_equal(strspn(a + 3, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                   "0123456789-_"), 43);
    assert_true(gw_nodecred_valid(a));
    assert_string_not_equal(a, b);
}

static void test_only_a_credentials_form_is_valid(void **state)
{
    (void)state;
    char c[GW_NODECRED_SIZE];
    assert_int_equal(gw_nodecred_make(c), 0);
    assert_false(gw_nodecred_valid(NULL));
    assert_false(gw_nodecred_valid(""));
    assert_false(gw_nodecred_valid(c + 3));                 /* no prefix */
    assert_false(gw_nodecred_valid("kn_short"));
    c[10] = '+';                                            /* standard base64 */
    assert_false(gw_nodecred_valid(c));
    assert_false(gw_nodecred_valid("kl_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")); /* a key's */
    assert_true(gw_nodecred_valid("kn_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"));
}

static void test_the_hash_is_sha256_in_hex(void **state)
{
    (void)state;
    char hex[GW_NODECRED_HASH_SIZE];
    assert_int_equal(gw_nodecred_hash("abc", hex), 0);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

static void test_the_cache_answers_until_its_ttl_then_asks_again(void **state)
{
    (void)state;
    gw_nodecreds *c = gw_nodecreds_new(64, 500);
    char hex[GW_NODECRED_HASH_SIZE], id[37], name[128];
    assert_non_null(c);
    assert_int_equal(gw_nodecred_hash("kn_one", hex), 0);
    assert_int_equal(gw_nodecreds_get(c, hex, 1000, id, name, sizeof name), -ENOENT);
    gw_nodecreds_put(c, hex, "0b7e3c5a-2f41-4d8e-9a6b-7c1d2e3f4a5b", "gpu-07", 1000);
    assert_int_equal(gw_nodecreds_get(c, hex, 1499, id, name, sizeof name), 0);
    assert_string_equal(id, "0b7e3c5a-2f41-4d8e-9a6b-7c1d2e3f4a5b");
    assert_string_equal(name, "gpu-07");
    /* asked at 1000: gone at 1500, whenever the answer came back */
    assert_int_equal(gw_nodecreds_get(c, hex, 1500, id, name, sizeof name), -ENOENT);
    gw_nodecreds_free(c);
}

/* A fake batch lookup: hashes it was asked, answered for those in known. */
typedef struct fake_db {
    char asked[8][GW_NODECRED_HASH_SIZE];
    int nasked, calls;
    const char *known;      /* the one hash it knows, or NULL */
    const char *id, *name;
} fake_db;

static int fake_lookup(void *arg, gw_nodecreds *c, const char *const *hex, int n, int64_t asked_ms)
{
    fake_db *db = arg;
    db->calls++;
    for (int i = 0; i < n; i++) {
        if (db->nasked < 8)
            snprintf(db->asked[db->nasked++], GW_NODECRED_HASH_SIZE, "%s", hex[i]);
        if (db->known && strcmp(hex[i], db->known) == 0)
            gw_nodecreds_refreshed(c, hex[i], db->id, db->name, asked_ms);
    }
    return 0;
}

static void test_the_refresh_keeps_answers_in_use_alive_with_one_batch(void **state)
{
    (void)state;
    gw_nodecreds *c = gw_nodecreds_new(64, 400);
    char used[GW_NODECRED_HASH_SIZE], idle[GW_NODECRED_HASH_SIZE], id[37], name[128];
    gw_nodecred_hash("kn_used", used);
    gw_nodecred_hash("kn_idle", idle);
    fake_db db = {.known = used, .id = "44444444-4444-4444-8444-444444444444", .name = "n2"};
    gw_nodecreds_put(c, used, "44444444-4444-4444-8444-444444444444", "n1", 1000);
    /* looked up by a call at 1000, never read again: due within the keep */
    gw_nodecreds_put(c, idle, "55555555-5555-4555-8555-555555555555", "i", 1000);
    /* not due yet: it expires at 1400, more than ttl/2 away */
    assert_int_equal(gw_nodecreds_refresh_once(c, 1100, fake_lookup, &db), 0);
    assert_int_equal(db.calls, 0);
    /* due at 1250: both asked in one call; only the known one refreshed,
     * with the batch's answer (the name changed) */
    assert_int_equal(gw_nodecreds_get(c, used, 1200, id, name, sizeof name), 0);
    assert_int_equal(gw_nodecreds_refresh_once(c, 1250, fake_lookup, &db), 2);
    assert_int_equal(db.calls, 1);
    assert_int_equal(db.nasked, 2);
    assert_true((strcmp(db.asked[0], used) == 0 && strcmp(db.asked[1], idle) == 0) ||
                (strcmp(db.asked[1], used) == 0 && strcmp(db.asked[0], idle) == 0));
    assert_int_equal(gw_nodecreds_get(c, used, 1600, id, name, sizeof name), 0);
    assert_string_equal(name, "n2");
    assert_int_equal(gw_nodecreds_get(c, idle, 1400, id, name, sizeof name), -ENOENT);
    /* asked at 1250: expires at 1650, whatever the refresh found before */
    assert_int_equal(gw_nodecreds_get(c, used, 1650, id, name, sizeof name), -ENOENT);
    gw_nodecreds_free(c);
}

static void test_the_refresh_lets_unread_and_forgotten_answers_go(void **state)
{
    (void)state;
    gw_nodecreds *c = gw_nodecreds_new(64, 400);
    char hex[GW_NODECRED_HASH_SIZE], id[37], name[128];
    gw_nodecred_hash("kn_gone", hex);
    const char *node = "66666666-6666-4666-8666-666666666666";
    fake_db db = {.known = hex, .id = node, .name = "g"};
    gw_nodecreds_put(c, hex, node, "g", 0);
    /* read last at 0: refreshed while a call read it within the keep... */
    int64_t t = 300;
    for (; t < GW_NODECRED_KEEP_MS; t += 100)
        gw_nodecreds_refresh_once(c, t, fake_lookup, &db);
    assert_int_equal(gw_nodecreds_get(c, hex, t, id, name, sizeof name), 0);
    /* ...read at t, then no more: refreshed until t + the keep, then it
     * is asked no more and expires */
    int64_t u = t + 100;
    for (; u < t + GW_NODECRED_KEEP_MS; u += 100)
        gw_nodecreds_refresh_once(c, u, fake_lookup, &db);
    int before = db.calls;
    for (; u < t + GW_NODECRED_KEEP_MS + 1000; u += 100)
        gw_nodecreds_refresh_once(c, u, fake_lookup, &db);
    assert_in_range(db.calls - before, 0, 1);
    assert_int_equal(gw_nodecreds_get(c, hex, u, id, name, sizeof name), -ENOENT);
    /* forgotten (a registration here) while its batch was on the way: the
     * batch's answer does not bring it back */
    gw_nodecreds_put(c, hex, node, "g", 50000);
    gw_nodecreds_forget(c, node);
    gw_nodecreds_refreshed(c, hex, node, "g", 50100);
    assert_int_equal(gw_nodecreds_get(c, hex, 50200, id, name, sizeof name), -ENOENT);
    gw_nodecreds_free(c);
}

static void test_forgetting_a_node_drops_every_answer_naming_it(void **state)
{
    (void)state;
    gw_nodecreds *c = gw_nodecreds_new(64, 1000);
    char h1[GW_NODECRED_HASH_SIZE], h2[GW_NODECRED_HASH_SIZE], h3[GW_NODECRED_HASH_SIZE];
    char id[37], name[128];
    gw_nodecred_hash("kn_old", h1);
    gw_nodecred_hash("kn_new", h2);
    gw_nodecred_hash("kn_other", h3);
    gw_nodecreds_put(c, h1, "11111111-1111-4111-8111-111111111111", "a", 0);
    gw_nodecreds_put(c, h2, "11111111-1111-4111-8111-111111111111", "a", 0);
    gw_nodecreds_put(c, h3, "22222222-2222-4222-8222-222222222222", "b", 0);
    gw_nodecreds_forget(c, "11111111-1111-4111-8111-111111111111");
    assert_int_equal(gw_nodecreds_get(c, h1, 1, id, name, sizeof name), -ENOENT);
    assert_int_equal(gw_nodecreds_get(c, h2, 1, id, name, sizeof name), -ENOENT);
    assert_int_equal(gw_nodecreds_get(c, h3, 1, id, name, sizeof name), 0);
    assert_string_equal(name, "b");
    gw_nodecreds_free(c);
}

static void test_a_cache_of_ttl_0_keeps_nothing_and_a_full_one_stays_bounded(void **state)
{
    (void)state;
    char hex[GW_NODECRED_HASH_SIZE], id[37], name[128], cred[32];
    gw_nodecreds *none = gw_nodecreds_new(64, 0);
    gw_nodecred_hash("kn_x", hex);
    gw_nodecreds_put(none, hex, "33333333-3333-4333-8333-333333333333", "x", 0);
    assert_int_equal(gw_nodecreds_get(none, hex, 0, id, name, sizeof name), -ENOENT);
    gw_nodecreds_free(none);
    /* 8 ways: many more credentials than ways replace the oldest, never grow */
    gw_nodecreds *small = gw_nodecreds_new(8, 1000);
    int found = 0;
    for (int i = 0; i < 100; i++) {
        snprintf(cred, sizeof cred, "kn_%d", i);
        gw_nodecred_hash(cred, hex);
        gw_nodecreds_put(small, hex, "33333333-3333-4333-8333-333333333333", cred, i);
    }
    for (int i = 0; i < 100; i++) {
        snprintf(cred, sizeof cred, "kn_%d", i);
        gw_nodecred_hash(cred, hex);
        found += gw_nodecreds_get(small, hex, 100, id, name, sizeof name) == 0;
    }
    assert_true(found >= 1 && found <= 8);
    gw_nodecreds_free(small);
}

/* ---- outputs against the catalog spec ---------------------------------- */

static void expect_outputs(const char *kernel, const char *meta, int ok, const char *reason)
{
    char msg[256] = "";
    json_t *m = json_loads(meta, 0, NULL);
    assert_non_null(m);
    int rc = gw_blob_check_outputs(m, kernel, msg, sizeof msg);
    json_decref(m);
    if (ok) {
        if (rc != 0)
            fail_msg("%s %s refused: %s", kernel, meta, msg);
        return;
    }
    assert_int_equal(rc, -EINVAL);
    if (!strstr(msg, reason))
        fail_msg("%s %s: \"%s\" does not say %s", kernel, meta, msg, reason);
}

static void test_outputs_must_be_the_kernels_own_with_their_dtypes(void **state)
{
    (void)state;
    expect_outputs("saxpy", "[{\"name\":\"y\",\"dtype\":\"float32\",\"shape\":[4]}]", 1, NULL);
    expect_outputs("gemm", "[{\"name\":\"c\",\"dtype\":\"float32\",\"shape\":[2,2,2]}]", 1, NULL);
    expect_outputs("saxpy", "[{\"name\":\"y\",\"dtype\":\"float64\",\"shape\":[4]}]", 0,
                   "dtype float64");
    expect_outputs("saxpy", "[{\"name\":\"y\",\"dtype\":\"float32\",\"shape\":[2,2]}]", 0, "rank 2");
    expect_outputs("saxpy", "[{\"name\":\"y\",\"dtype\":\"float32\",\"shape\":[4]},"
                            "{\"name\":\"z\",\"dtype\":\"float32\",\"shape\":[4]}]", 0,
                   "outputs.z is not an output of saxpy");
    expect_outputs("saxpy", "[]", 0, "outputs.y is missing");
    expect_outputs("saxpy", "[{\"name\":\"y\",\"dtype\":\"float32\",\"shape\":[4]},"
                            "{\"name\":\"y\",\"dtype\":\"float32\",\"shape\":[4]}]", 0, "twice");
    expect_outputs("nope", "[]", 0, "no kernel");
    expect_outputs(NULL, "[]", 0, "no kernel");
}

/* ---- the two route tables ---------------------------------------------- */

/* The public listener serves no cluster path and takes neither the
 * cluster token nor a node's credential for anything. */
static void test_the_public_table_has_no_cluster_route(void **state)
{
    (void)state;
    for (const svc_route *r = gw_routes; r->method != NULL; r++) {
        int role = GW_ACCESS_ROLE(r->access);
        if (strncmp(r->pattern, "/v1/cluster/", 12) == 0 || role == GW_ACCESS_CLUSTER ||
            role == GW_ACCESS_NODE || strstr(r->pattern, "register") || strstr(r->pattern, "heartbeat"))
            fail_msg("%s %s is on the public listener", r->method, r->pattern);
    }
}

/* On the cluster listener the cluster token opens registration alone (and
 * the metrics); everything else a node calls needs its own credential, and
 * the routes that name a run or a gang check that too. A route added
 * without saying so fails here. */
static void test_every_cluster_route_but_registration_takes_a_nodes_credential(void **state)
{
    (void)state;
    int nodes = 0;
    for (const svc_route *r = gw_cluster_routes; r->method != NULL; r++) {
        int role = GW_ACCESS_ROLE(r->access);
        if (strcmp(r->pattern, "/healthz") == 0 || strcmp(r->pattern, "/readyz") == 0) {
            assert_int_equal(r->access, GW_ACCESS_PUBLIC);
            continue;
        }
        if (strcmp(r->pattern, "/metrics") == 0) {
            assert_int_equal(role, GW_ACCESS_METRICS);
            continue;
        }
        if (strcmp(r->pattern, "/v1/cluster/nodes/register") == 0) {
            assert_int_equal(role, GW_ACCESS_CLUSTER);
            continue;
        }
        if (role != GW_ACCESS_NODE)
            fail_msg("%s %s does not need a node's credential", r->method, r->pattern);
        nodes++;
        if (strstr(r->pattern, "/rendezvous/") && !(r->access & GW_ACCESS_GANG))
            fail_msg("%s %s does not check the gang", r->method, r->pattern);
        if (strcmp(r->pattern, "/v1/cluster/blobs") == 0 ||
            (strcmp(r->method, "PUT") == 0 && strcmp(r->pattern, "/v1/cluster/blobs/{id}") == 0))
            assert_true(r->access & GW_ACCESS_RUN);
        /* a rendezvous value is bounded at the route, not by the server */
        if (strstr(r->pattern, "/rendezvous/") && strcmp(r->method, "PUT") == 0) {
            assert_non_null(r->body);
            assert_int_equal(r->max_body, 64 * 1024);
        }
    }
    assert_int_equal(nodes, 10); /* with the task logs route */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_tokens_of_32_characters_or_more_are_accepted),
        cmocka_unit_test(test_short_tokens_are_refused),
        cmocka_unit_test(test_well_known_tokens_are_refused_however_long),
        cmocka_unit_test(test_repetitive_tokens_are_refused),
        cmocka_unit_test(test_tokens_that_cannot_travel_in_a_header_are_refused),
        cmocka_unit_test(test_a_credential_is_32_random_bytes_in_base64url),
        cmocka_unit_test(test_only_a_credentials_form_is_valid),
        cmocka_unit_test(test_the_hash_is_sha256_in_hex),
        cmocka_unit_test(test_the_cache_answers_until_its_ttl_then_asks_again),
        cmocka_unit_test(test_the_refresh_keeps_answers_in_use_alive_with_one_batch),
        cmocka_unit_test(test_the_refresh_lets_unread_and_forgotten_answers_go),
        cmocka_unit_test(test_forgetting_a_node_drops_every_answer_naming_it),
        cmocka_unit_test(test_a_cache_of_ttl_0_keeps_nothing_and_a_full_one_stays_bounded),
        cmocka_unit_test(test_outputs_must_be_the_kernels_own_with_their_dtypes),
        cmocka_unit_test(test_the_public_table_has_no_cluster_route),
        cmocka_unit_test(test_every_cluster_route_but_registration_takes_a_nodes_credential),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
