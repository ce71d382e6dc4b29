/* test_cn_blobio.c — runs whose inputs are blob references and whose
 * outputs leave as blobs, through the run manager with a fake transport in
 * place of the gateway: fetch, cache, size and hash checks, cancel while
 * fetching, push with retries, and the {"blob"} outputs of cn_runs_get. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cn_blobcache.h"
#include "cn_blobio.h"
#include "cn_runs.h"
#include "svc_bstore.h"
#include "svc_log.h"
#include "svc_sha256.h"
#include "svc_tensor.h"

/* ---- the fake gateway --------------------------------------------------- */

#define NBLOBS 16

typedef struct fake {
    struct { char id[72]; unsigned char *data; size_t len; } blobs[NBLOBS];
    int n;
    int fetches;           /* calls to fetch */
    int range_fetches;     /* calls to fetch_range */
    int corrupt;           /* fetch flips a byte */
    int block;             /* fetch waits for the cancel flag */
    int push_failures;     /* pushes that fail before one succeeds */
    int pushes;
    int adopts;            /* calls to adopt */
    int refuse_adopt;      /* adopt answers CN_BLOBIO_ENOTSHARED */
    char adopted[72];
    uint64_t adopted_size;
    char run[64];          /* "<job>.<attempt>" the last push or adopt named */
} fake;

static void id_of(const void *data, size_t n, char id[72])
{
    char hex[65];
    svc_sha256 *h = svc_sha256_new();
    assert_non_null(h);
    assert_int_equal(svc_sha256_update(h, data, n), 0);
    assert_int_equal(svc_sha256_final_hex(h, hex), 0);
    snprintf(id, 72, "sha256:%s", hex);
}

static const char *store(fake *f, const void *data, size_t n)
{
    assert_true(f->n < NBLOBS);
    f->blobs[f->n].data = malloc(n ? n : 1);
    memcpy(f->blobs[f->n].data, data, n);
    f->blobs[f->n].len = n;
    id_of(data, n, f->blobs[f->n].id);
    return f->blobs[f->n++].id;
}

static int fake_fetch(void *cls, const char *id, void *buf, size_t size, svc_chunk_fn on_chunk,
                      void *chunk_cls, const volatile int *cancel, int64_t *got, char *msg,
                      size_t msglen)
{
    fake *f = cls;
    __atomic_add_fetch(&f->fetches, 1, __ATOMIC_SEQ_CST);
    *got = 0;
    while (f->block) {
        if (__atomic_load_n(cancel, __ATOMIC_ACQUIRE))
            return CN_BLOBIO_ECANCELED;
        usleep(10000);
    }
    for (int i = 0; i < f->n; i++) {
        if (strcmp(f->blobs[i].id, id) != 0)
            continue;
        *got = (int64_t)f->blobs[i].len;
        if (f->blobs[i].len != size)
            return CN_BLOBIO_ESIZE;
        /* in two pieces, as a network would */
        memcpy(buf, f->blobs[i].data, size);
        if (f->corrupt)
            ((unsigned char *)buf)[0] ^= 1;
        on_chunk(chunk_cls, buf, size / 2);
        on_chunk(chunk_cls, (char *)buf + size / 2, size - size / 2);
        return 0;
    }
    snprintf(msg, msglen, "the gateway has no blob %s", id);
    return CN_BLOBIO_EFAIL;
}

static int fake_fetch_range(void *cls, const char *id, uint64_t off, void *buf, size_t size,
                            const volatile int *cancel, char *msg, size_t msglen)
{
    fake *f = cls;
    (void)cancel;
    __atomic_add_fetch(&f->range_fetches, 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->blobs[i].id, id) == 0 && off + size <= f->blobs[i].len) {
            memcpy(buf, f->blobs[i].data + off, size);
            return 0;
        }
    snprintf(msg, msglen, "no such range of %s", id);
    return CN_BLOBIO_EFAIL;
}

static int fake_push(void *cls, const char *job_id, int attempt, const void *data, size_t n,
                     const volatile int *cancel, char id[CN_BLOB_ID_SIZE], char *msg, size_t msglen)
{
    fake *f = cls;
    (void)cancel;
    f->pushes++;
    snprintf(f->run, sizeof f->run, "%s.%d", job_id, attempt);
    if (f->push_failures > 0) {
        f->push_failures--;
        snprintf(msg, msglen, "connection refused");
        return CN_BLOBIO_EFAIL;
    }
    snprintf(id, CN_BLOB_ID_SIZE, "%s", store(f, data, n));
    return 0;
}

static int fake_adopt(void *cls, const char *job_id, int attempt, const char *id, uint64_t size,
                      char *msg, size_t msglen)
{
    fake *f = cls;
    __atomic_add_fetch(&f->adopts, 1, __ATOMIC_SEQ_CST);
    snprintf(f->run, sizeof f->run, "%s.%d", job_id, attempt);
    if (f->refuse_adopt) {
        snprintf(msg, msglen, "no such file");
        return CN_BLOBIO_ENOTSHARED;
    }
    snprintf(f->adopted, sizeof f->adopted, "%s", id);
    f->adopted_size = size;
    return 0;
}

/* ---- fixture ------------------------------------------------------------ */

typedef struct fixture {
    cn_backend backend;
    cn_runs *runs;
    cn_blobcache *cache;
    cn_blobio io;
    cn_blobio_stats stats;
    fake f;
    char dir[64];          /* a blob store the node shares, when a test makes one */
} fixture;

static int setup_with(void **state, int with_io)
{
    static fixture fx;
    for (int i = 0; i < fx.f.n; i++)
        free(fx.f.blobs[i].data);
    memset(&fx, 0, sizeof fx);
    svc_log_init("test", SVC_LOG_ERROR);
    assert_int_equal(cn_backend_open(&fx.backend, "cpu", NULL), 0);
    assert_int_equal(cn_blobcache_create(1 << 20, &fx.cache), 0);
    fx.io = (cn_blobio){.fetch = fake_fetch, .fetch_range = fake_fetch_range, .push = fake_push,
                        .adopt = fake_adopt, .cls = &fx.f, .stats = &fx.stats};
    cn_runs_opts o = {.slots = 2, .threads = 1, .backend = &fx.backend,
                      .blobio = with_io ? &fx.io : NULL, .cache = fx.cache};
    assert_int_equal(cn_runs_create(&o, &fx.runs), 0);
    *state = &fx;
    return 0;
}
static int setup(void **state) { return setup_with(state, 1); }
static int setup_no_io(void **state) { return setup_with(state, 0); }

static int teardown(void **state)
{
    fixture *fx = *state;
    cn_runs_destroy(fx->runs);
    cn_blobio_share_close(&fx->io);
    if (fx->dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", fx->dir);
        assert_int_equal(system(cmd), 0);
    }
    cn_blobcache_destroy(fx->cache);
    cn_backend_close(&fx->backend);
    return 0;
}

/* Submits saxpy y = a*x + y with x and y as blob references. */
static void submit_saxpy(fixture *fx, const char *job, const char *x, const char *y, int n,
                         int output_blobs)
{
    char text[1024];
    cn_run_req req;
    kl_err err;
    int status;
    snprintf(text, sizeof text,
             "{\"job_id\":\"%s\",\"attempt\":1,\"kernel\":\"saxpy\",\"params\":{\"a\":2},%s"
             "\"inputs\":{\"x\":{\"dtype\":\"float32\",\"shape\":[%d],\"blob\":\"%s\"},"
             "\"y\":{\"dtype\":\"float32\",\"shape\":[%d],\"blob\":\"%s\"}}}",
             job, output_blobs ? "\"output_blobs\":true," : "", n, x, n, y);
    json_t *body = json_loads(text, 0, NULL);
    assert_non_null(body);
    memset(&err, 0, sizeof err);
    assert_int_equal(cn_run_req_decode(body, &req, &status, &err), 0);
    assert_int_equal(req.output_blobs, output_blobs);
    assert_int_equal(cn_runs_submit(fx->runs, &req, NULL, &err), CN_RUN_NEW);
    cn_run_req_clear(&req);
    json_decref(body);
}

static json_t *wait_run(fixture *fx, const char *id)
{
    json_t *run = NULL;
    assert_int_equal(cn_runs_get(fx->runs, id, 5000, 1, &run), 0);
    return run;
}

static const char *str(const json_t *j, const char *key)
{
    return json_string_value(json_object_get(j, key));
}

static const json_t *error_of(const json_t *run)
{
    return json_object_get(run, "error");
}

static const float X[4] = {1, 2, 3, 4}, Y[4] = {10, 20, 30, 40};

/* Runs saxpy on the 4-element blobs x and y as job (attempt 1), waits for it
 * to end and checks that it ended in want_state; returns the run (the
 * caller's to json_decref). */
static json_t *run_saxpy(fixture *fx, const char *job, const char *x, const char *y,
                         int output_blobs, const char *want_state)
{
    char id[64];
    submit_saxpy(fx, job, x, y, 4, output_blobs);
    snprintf(id, sizeof id, "%s.1", job);
    json_t *run = wait_run(fx, id);
    assert_string_equal(str(run, "state"), want_state);
    return run;
}

static void test_blob_inputs_run_and_outputs_leave_as_blobs(void **state)
{
    fixture *fx = *state;
    const char *x = store(&fx->f, X, sizeof X), *y = store(&fx->f, Y, sizeof Y);
    json_t *run = run_saxpy(fx, "j", x, y, 1, "succeeded");
    const json_t *out = json_object_get(json_object_get(run, "outputs"), "y");
    assert_non_null(out);
    assert_null(json_object_get(out, "b64"));
    assert_string_equal(str(out, "dtype"), "float32");
    assert_int_equal(json_integer_value(json_array_get(json_object_get(out, "shape"), 0)), 4);
    /* the pushed bytes are 2x + y */
    const float want[4] = {12, 24, 36, 48};
    char want_id[72];
    id_of(want, sizeof want, want_id);
    assert_string_equal(str(out, "blob"), want_id);
    assert_int_equal(fx->f.pushes, 1);
    json_decref(run);
}

static void test_without_output_blobs_outputs_are_base64(void **state)
{
    fixture *fx = *state;
    const char *x = store(&fx->f, X, sizeof X), *y = store(&fx->f, Y, sizeof Y);
    json_t *run = run_saxpy(fx, "b", x, y, 0, "succeeded");
    const json_t *out = json_object_get(json_object_get(run, "outputs"), "y");
    assert_string_equal(str(out, "b64"), "AABAQQAAwEEAABBCAABAQg==");  /* [12, 24, 36, 48] */
    assert_int_equal(fx->f.pushes, 0);
    json_decref(run);
}

static void test_a_second_run_takes_its_inputs_from_the_cache(void **state)
{
    fixture *fx = *state;
    const char *x = store(&fx->f, X, sizeof X), *y = store(&fx->f, Y, sizeof Y);
    json_decref(run_saxpy(fx, "c1", x, y, 1, "succeeded"));
    assert_int_equal(fx->f.fetches, 2);
    json_t *run = run_saxpy(fx, "c2", x, y, 1, "succeeded");
    assert_int_equal(fx->f.fetches, 2);  /* nothing crossed again */
    cn_blobcache_stats s;
    cn_blobcache_stats_get(fx->cache, &s);
    assert_int_equal(s.hits, 2);
    assert_int_equal(s.misses, 2);
    assert_int_equal(s.fetched_bytes, 2 * sizeof X);
    assert_int_equal(s.served_bytes, 2 * sizeof X);
    json_decref(run);
}

static void test_a_blob_of_the_wrong_size_is_invalid_argument(void **state)
{
    fixture *fx = *state;
    const char *x = store(&fx->f, X, 12), *y = store(&fx->f, Y, sizeof Y);
    json_t *run = run_saxpy(fx, "s", x, y, 1, "failed");
    assert_string_equal(str(error_of(run), "code"), "invalid_argument");
    assert_string_equal(str(error_of(run), "field"), "inputs.x");
    assert_non_null(strstr(str(error_of(run), "message"), "has 12 bytes"));
    assert_non_null(strstr(str(error_of(run), "message"), "needs 16 bytes"));
    json_decref(run);
}

static void test_an_unknown_blob_is_a_backend_error(void **state)
{
    fixture *fx = *state;
    const char *x = store(&fx->f, X, sizeof X);
    char missing[72];
    id_of("nothing", 7, missing);
    json_t *run = run_saxpy(fx, "u", x, missing, 1, "failed");
    assert_string_equal(str(error_of(run), "code"), "backend_error");
    assert_non_null(strstr(str(error_of(run), "message"), "no blob"));
    json_decref(run);
}

static void test_bytes_that_do_not_hash_to_their_id_are_a_backend_error(void **state)
{
    fixture *fx = *state;
    const char *x = store(&fx->f, X, sizeof X), *y = store(&fx->f, Y, sizeof Y);
    fx->f.corrupt = 1;
    json_t *run = run_saxpy(fx, "h", x, y, 1, "failed");
    assert_string_equal(str(error_of(run), "code"), "backend_error");
    assert_non_null(strstr(str(error_of(run), "message"), "hash to"));
    /* and nothing corrupt was cached */
    cn_blobcache_stats s;
    cn_blobcache_stats_get(fx->cache, &s);
    assert_int_equal(s.entries, 0);
    json_decref(run);
}

static void test_cancel_stops_the_fetch(void **state)
{
    fixture *fx = *state;
    const char *x = store(&fx->f, X, sizeof X), *y = store(&fx->f, Y, sizeof Y);
    json_t *run = NULL;
    fx->f.block = 1;
    submit_saxpy(fx, "k", x, y, 4, 1);
    while (__atomic_load_n(&fx->f.fetches, __ATOMIC_SEQ_CST) < 2)
        usleep(5000);
    assert_int_equal(cn_runs_cancel(fx->runs, "k.1", 3000, &run), 0);
    assert_string_equal(str(run, "state"), "cancelled");
    json_decref(run);
}

static void test_a_push_is_retried_then_fails_the_run(void **state)
{
    fixture *fx = *state;
    const char *x = store(&fx->f, X, sizeof X), *y = store(&fx->f, Y, sizeof Y);
    fx->f.push_failures = 2;  /* the third try succeeds */
    json_t *run = run_saxpy(fx, "p1", x, y, 1, "succeeded");
    assert_int_equal(fx->f.pushes, 3);
    json_decref(run);
    fx->f.push_failures = 100;
    run = run_saxpy(fx, "p2", x, y, 1, "failed");
    assert_string_equal(str(error_of(run), "code"), "backend_error");
    assert_non_null(strstr(str(error_of(run), "message"), "connection refused"));
    json_decref(run);
}

static void test_without_a_transport_a_blob_input_is_a_backend_error(void **state)
{
    fixture *fx = *state;
    const char *x = store(&fx->f, X, sizeof X), *y = store(&fx->f, Y, sizeof Y);
    json_t *run = run_saxpy(fx, "n", x, y, 0, "failed");
    assert_string_equal(str(error_of(run), "code"), "backend_error");
    json_decref(run);
}


/* ---- the shared blob directory ------------------------------------------- */

/* Makes a store (as the gateway does), shares it with the fixture's node,
 * and writes data into it; the blob's id goes to id. */
static void shared_put(fixture *fx, const void *data, size_t n, char id[72])
{
    char err[256];
    uint64_t size;
    if (!fx->dir[0]) {
        snprintf(fx->dir, sizeof fx->dir, "/tmp/kl-cn-shared-XXXXXX");
        assert_non_null(mkdtemp(fx->dir));
        svc_bstore *gw = svc_bstore_open(fx->dir, SVC_BSTORE_CREATE, err, sizeof err);
        assert_non_null(gw);
        svc_bstore_close(gw);
        assert_int_equal(cn_blobio_share_path(&fx->io, fx->dir, err, sizeof err), 0);
    }
    svc_bstore *s = svc_bstore_open(fx->dir, 0, err, sizeof err);
    assert_non_null(s);
    svc_bwriter *w = svc_bstore_write_begin(s);
    assert_non_null(w);
    assert_int_equal(svc_bwriter_append(w, data, n), 0);
    assert_int_equal(svc_bwriter_commit(w, id, &size), 0);
    assert_int_equal(svc_bwriter_close(w), 0);
    svc_bstore_close(s);
}

static void read_blob(fixture *fx, const char *id, void *out, size_t n)
{
    char path[256];
    snprintf(path, sizeof path, "%s/sha256/%.2s/%s", fx->dir, id + 7, id + 7);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(read(fd, out, n + 1), (ssize_t)n);
    close(fd);
}

static void test_shared_inputs_are_mapped_and_outputs_written_and_adopted(void **state)
{
    fixture *fx = *state;
    char x[72], y[72], want_id[72];
    const float want[4] = {12, 24, 36, 48};
    float got[4];
    shared_put(fx, X, sizeof X, x);
    shared_put(fx, Y, sizeof Y, y);
    json_t *run = run_saxpy(fx, "j", x, y, 1, "succeeded");
    assert_int_equal(fx->f.fetches, 0);   /* nothing over the transport */
    assert_int_equal(fx->f.pushes, 0);
    assert_int_equal(fx->stats.mapped_inputs, 2);
    assert_int_equal(fx->stats.mapped_bytes, 32);
    assert_int_equal(fx->stats.written_outputs, 1);
    id_of(want, sizeof want, want_id);
    assert_string_equal(str(json_object_get(json_object_get(run, "outputs"), "y"), "blob"), want_id);
    assert_int_equal(fx->f.adopts, 1);
    assert_string_equal(fx->f.adopted, want_id);
    assert_int_equal(fx->f.adopted_size, 16);
    /* recorded as an output of that run only: the gateway checks it holds it */
    assert_string_equal(fx->f.run, "j.1");
    read_blob(fx, want_id, got, sizeof got);
    assert_memory_equal(got, want, sizeof want);
    json_decref(run);
}

static void test_an_output_the_gateway_does_not_see_is_pushed_instead(void **state)
{
    fixture *fx = *state;
    char x[72], y[72];
    shared_put(fx, X, sizeof X, x);
    shared_put(fx, Y, sizeof Y, y);
    fx->f.refuse_adopt = 1;
    json_t *run = run_saxpy(fx, "j", x, y, 1, "succeeded");
    assert_int_equal(fx->f.adopts, 1);
    assert_int_equal(fx->f.pushes, 1);
    assert_string_equal(fx->f.run, "j.1");
    assert_int_equal(fx->stats.written_outputs, 0);
    assert_int_equal(fx->stats.pushed_outputs, 1);
    json_decref(run);
}

static void test_a_blob_missing_from_the_shared_dir_is_fetched(void **state)
{
    fixture *fx = *state;
    char x[72];
    shared_put(fx, X, sizeof X, x);
    const char *y = store(&fx->f, Y, sizeof Y);  /* only the gateway has it */
    json_t *run = run_saxpy(fx, "j", x, y, 0, "succeeded");
    assert_int_equal(fx->f.fetches, 1);
    assert_int_equal(fx->stats.mapped_inputs, 1);
    json_decref(run);
}

static void test_a_kernel_writing_a_mapped_input_leaves_the_store_alone(void **state)
{
    fixture *fx = *state;
    char x[72];
    float got[4];
    shared_put(fx, X, sizeof X, x);
    json_t *inputs = json_pack("{s:{s:s, s:[i], s:s}}", "x", "dtype", "float32", "shape", 4,
                               "blob", x);
    svc_kargs ka;
    kl_err err;
    memset(&err, 0, sizeof err);
    assert_int_equal(svc_kargs_bind(kl_kernel_find("reduce"), NULL, inputs, KL_MAX_ELEMS, 1, &ka,
                                    &err), 0);
    assert_int_equal(cn_blobio_fetch_inputs(&fx->io, NULL, &ka, NULL, &err), 0);
    float *p = ka.views[0].data;
    assert_non_null(p);
    assert_memory_equal(p, X, sizeof X);
    p[0] = -1;  /* MAP_PRIVATE: this run's copy only */
    svc_kargs_free(&ka);
    read_blob(fx, x, got, sizeof got);
    assert_memory_equal(got, X, sizeof X);
    json_decref(inputs);
}

/* A node's part of a multi-node train_mlp: x and y (shard inputs) come as
 * rows 2..5 only, by range, and the views show those rows. */
static void test_shard_inputs_are_fetched_as_the_nodes_rows_only(void **state)
{
    fixture *fx = *state;
    const float xs[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    const int32_t ys[6] = {0, 1, 2, 0, 1, 2};
    char xid[72], yid[72];
    snprintf(xid, sizeof xid, "%s", store(&fx->f, xs, sizeof xs));
    snprintf(yid, sizeof yid, "%s", store(&fx->f, ys, sizeof ys));
    json_t *params = json_pack("{s:i, s:i}", "classes", 3, "batch_size", 2);
    json_t *inputs = json_pack("{s:{s:s, s:[i, i], s:s}, s:{s:s, s:[i], s:s}}", "x", "dtype",
                               "float32", "shape", 6, 2, "blob", xid, "y", "dtype", "int32", "shape",
                               6, "blob", yid);
    svc_kargs ka;
    kl_err err;
    memset(&err, 0, sizeof err);
    const kl_kernel *k = kl_kernel_find("train_mlp");
    assert_int_equal(svc_kargs_bind(k, params, inputs, KL_MAX_ELEMS, 1, &ka, &err), 0);
    assert_int_equal(cn_blobio_fetch_inputs_rows(&fx->io, fx->cache, &ka, 2, 5, NULL, &err), 0);
    assert_int_equal(fx->f.fetches, 0);
    assert_int_equal(fx->f.range_fetches, 2);
    const kl_tensor *x = &ka.views[kl_input_index(k, "x")], *y = &ka.views[kl_input_index(k, "y")];
    assert_int_equal(x->shape[0], 3);
    assert_int_equal(x->shape[1], 2);
    assert_memory_equal(x->data, xs + 4, 6 * sizeof(float));
    assert_int_equal(y->shape[0], 3);
    assert_memory_equal(y->data, ys + 2, 3 * sizeof(int32_t));
    assert_int_equal(ka.tensors[kl_input_index(k, "x")].shape[0], 6);   /* the whole shape stays */
    svc_kargs_free(&ka);
    /* rows past the blob's end are the caller's mistake, named */
    assert_int_equal(svc_kargs_bind(k, params, inputs, KL_MAX_ELEMS, 1, &ka, &err), 0);
    assert_int_equal(cn_blobio_fetch_inputs_rows(&fx->io, fx->cache, &ka, 4, 7, NULL, &err),
                     KL_EINVAL);
    svc_kargs_free(&ka);
    json_decref(params);
    json_decref(inputs);
}

static void test_a_shared_blob_of_the_wrong_size_is_invalid_argument(void **state)
{
    fixture *fx = *state;
    char x[72], y[72];
    const float five[5] = {1, 2, 3, 4, 5};
    shared_put(fx, five, sizeof five, x);
    shared_put(fx, Y, sizeof Y, y);
    json_t *run = run_saxpy(fx, "j", x, y, 1, "failed");
    assert_string_equal(str(error_of(run), "code"), "invalid_argument");
    assert_string_equal(str(error_of(run), "field"), "inputs.x");
    assert_int_equal(fx->f.fetches, 0);
    json_decref(run);
}

static void test_the_gateways_store_is_shared_only_when_its_identity_matches(void **state)
{
    fixture *fx = *state;
    char x[72];
    shared_put(fx, X, sizeof X, x);  /* shares fx->dir by path */
    cn_blobio_share_gateway(&fx->io, CN_SHARE_PATH, "/elsewhere", "0123456789abcdef0123456789abcdef");
    assert_null(cn_blobio_shared_dir(&fx->io));
    cn_blobio auto_io = {0};
    cn_blobio_share_gateway(&auto_io, CN_SHARE_AUTO, fx->dir, "0123456789abcdef0123456789abcdef");
    assert_null(cn_blobio_shared_dir(&auto_io));
    svc_bstore *s = fx->io.opened[0];
    cn_blobio_share_gateway(&auto_io, CN_SHARE_AUTO, fx->dir, svc_bstore_id(s));
    assert_string_equal(cn_blobio_shared_dir(&auto_io), fx->dir);
    cn_blobio_share_gateway(&auto_io, CN_SHARE_AUTO, NULL, NULL);
    assert_null(cn_blobio_shared_dir(&auto_io));
    cn_blobio_share_close(&auto_io);
    cn_blobio none_io = {0};
    cn_blobio_share_gateway(&none_io, CN_SHARE_NONE, fx->dir, svc_bstore_id(s));
    assert_null(cn_blobio_shared_dir(&none_io));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_blob_inputs_run_and_outputs_leave_as_blobs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_without_output_blobs_outputs_are_base64, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_second_run_takes_its_inputs_from_the_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_blob_of_the_wrong_size_is_invalid_argument, setup, teardown),
        cmocka_unit_test_setup_teardown(test_an_unknown_blob_is_a_backend_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bytes_that_do_not_hash_to_their_id_are_a_backend_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_stops_the_fetch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shard_inputs_are_fetched_as_the_nodes_rows_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_push_is_retried_then_fails_the_run, setup, teardown),
        cmocka_unit_test_setup_teardown(test_without_a_transport_a_blob_input_is_a_backend_error, setup_no_io, teardown),
        cmocka_unit_test_setup_teardown(test_shared_inputs_are_mapped_and_outputs_written_and_adopted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_an_output_the_gateway_does_not_see_is_pushed_instead, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_blob_missing_from_the_shared_dir_is_fetched, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_kernel_writing_a_mapped_input_leaves_the_store_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_shared_blob_of_the_wrong_size_is_invalid_argument, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_gateways_store_is_shared_only_when_its_identity_matches, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
