/* test_cn_runs.c — the run manager through its C API, on the CPU backend:
 * submit and collect, idempotency, overload, cancel, timeout, long polls,
 * superseded attempts, draining, shutdown and the sweeper. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cn_runs.h"
#include "svc_log.h"
#include "svc_util.h"

typedef struct fixture {
    cn_backend backend;
    cn_runs *runs;
} fixture;

static int setup_opts(void **state, int slots, int64_t keep_ms, int64_t release_grace_ms)
{
    static fixture f;
    memset(&f, 0, sizeof f);
    svc_log_init("test", SVC_LOG_ERROR);
    assert_int_equal(cn_backend_open(&f.backend, "cpu", NULL), 0);
    cn_runs_opts o = {.slots = slots, .threads = 1, .backend = &f.backend, .keep_ms = keep_ms,
                      .release_grace_ms = release_grace_ms};
    assert_int_equal(cn_runs_create(&o, &f.runs), 0);
    *state = &f;
    return 0;
}
static int setup2(void **state) { return setup_opts(state, 2, 0, 0); }
static int setup1(void **state) { return setup_opts(state, 1, 0, 0); }
static int setup_short_keep(void **state) { return setup_opts(state, 2, 100, 0); }
static int setup_short_release(void **state) { return setup_opts(state, 2, 0, 100); }

static int teardown(void **state)
{
    fixture *f = *state;
    cn_runs_destroy(f->runs);
    cn_backend_close(&f->backend);
    return 0;
}

/* Decodes a request and submits it; returns submit's result. */
static int submit(cn_runs *m, const char *text, kl_err *err)
{
    cn_run_req req;
    int status;
    json_t *body = json_loads(text, 0, NULL), *run = NULL;
    assert_non_null(body);
    memset(err, 0, sizeof *err);
    assert_int_equal(cn_run_req_decode(body, &req, &status, err), 0);
    char run_id[CN_RUN_ID_MAX];
    snprintf(run_id, sizeof run_id, "%s", req.run_id);
    int rc = cn_runs_submit(m, &req, &run, err);
    if (rc >= 0) {
        assert_non_null(run);
        assert_string_equal(json_string_value(json_object_get(run, "run_id")), run_id);
    }
    cn_run_req_clear(&req);
    json_decref(run);
    json_decref(body);
    return rc;
}

static int submit_sleep(cn_runs *m, const char *job, int attempt, double seconds, int timeout_s)
{
    char text[256];
    kl_err err;
    snprintf(text, sizeof text,
             "{\"job_id\":\"%s\",\"attempt\":%d,\"kernel\":\"sleep\",\"params\":{\"seconds\":%g},"
             "\"timeout_s\":%d}", job, attempt, seconds, timeout_s);
    return submit(m, text, &err);
}

/* Waits for the run to end and returns its object (caller decrefs). */
static json_t *wait_run(cn_runs *m, const char *id, int64_t wait_ms)
{
    json_t *run = NULL;
    assert_int_equal(cn_runs_get(m, id, wait_ms, 1, &run), 0);
    return run;
}

static const char *str(const json_t *run, const char *key)
{
    return json_string_value(json_object_get(run, key));
}

/* wait_run, checking that the run ended in state. */
static json_t *wait_ended(cn_runs *m, const char *id, int64_t wait_ms, const char *state)
{
    json_t *run = wait_run(m, id, wait_ms);
    assert_string_equal(str(run, "state"), state);
    return run;
}

static const char *err_code(const json_t *run)
{
    return json_string_value(json_object_get(json_object_get(run, "error"), "code"));
}

static void test_saxpy_runs_and_returns_outputs_in_base64(void **state)
{
    fixture *f = *state;
    kl_err err;
    assert_int_equal(submit(f->runs, "{\"job_id\":\"j\",\"attempt\":1,\"kernel\":\"saxpy\",\"params\":{\"a\":2},"
                                     "\"inputs\":{\"x\":{\"dtype\":\"float32\",\"shape\":[2],\"data\":[1,2]},"
                                     "\"y\":{\"dtype\":\"float32\",\"shape\":[2],\"data\":[10,20]}}}",
                            &err),
                     CN_RUN_NEW);
    json_t *run = wait_ended(f->runs, "j.1", 5000, "succeeded");
    assert_string_equal(str(run, "backend"), "cpu");
    assert_true(json_is_null(json_object_get(run, "error")));
    const json_t *y = json_object_get(json_object_get(run, "outputs"), "y");
    assert_non_null(y);
    /* [12, 24] as little-endian float32 */
    assert_string_equal(str(y, "b64"), "AABAQQAAwEE=");
    json_decref(run);
}

static void test_same_job_and_attempt_is_idempotent(void **state)
{
    fixture *f = *state;
    assert_int_equal(submit_sleep(f->runs, "idem", 1, 0.1, 60), CN_RUN_NEW);
    assert_int_equal(submit_sleep(f->runs, "idem", 1, 0.1, 60), CN_RUN_EXISTING);
    json_decref(wait_ended(f->runs, "idem.1", 5000, "succeeded"));
    /* even once it has finished */
    assert_int_equal(submit_sleep(f->runs, "idem", 1, 0.1, 60), CN_RUN_EXISTING);
}

static void test_full_slots_answer_overloaded(void **state)
{
    fixture *f = *state;
    json_t *run;
    assert_int_equal(submit_sleep(f->runs, "busy", 1, 30, 60), CN_RUN_NEW);
    assert_int_equal(submit_sleep(f->runs, "more", 1, 30, 60), CN_EOVERLOADED);
    assert_int_equal(cn_runs_cancel(f->runs, "busy.1", 2000, &run), 0);
    json_decref(run);
    /* the slot is free again once the run has ended */
    assert_int_equal(submit_sleep(f->runs, "more", 1, 0, 60), CN_RUN_NEW);
}

/* What the gateway bills comes with every ended run: its time on the node,
 * the CPU time of its kernel (a sleep uses almost none) and its GPUs. */
static void test_ended_runs_report_their_usage(void **state)
{
    fixture *f = *state;
    assert_int_equal(submit_sleep(f->runs, "u", 1, 0.3, 60), CN_RUN_NEW);
    json_t *run = wait_ended(f->runs, "u.1", 5000, "succeeded");
    const json_t *u = json_object_get(run, "usage");
    assert_non_null(u);
    double run_s = json_number_value(json_object_get(u, "run_s"));
    double cpu_s = json_number_value(json_object_get(u, "cpu_s"));
    assert_true(run_s >= 0.29 && run_s < 2.0);
    assert_true(json_is_real(json_object_get(u, "cpu_s")) && cpu_s >= 0 && cpu_s < 0.1);
    assert_int_equal(json_integer_value(json_object_get(u, "gpus")), 0);
    assert_null(json_object_get(u, "gpu_model"));
    json_decref(run);
    /* a run still going has none yet */
    assert_int_equal(submit_sleep(f->runs, "v", 1, 30, 60), CN_RUN_NEW);
    assert_int_equal(cn_runs_get(f->runs, "v.1", 0, 0, &run), 0);
    assert_null(json_object_get(run, "usage"));
    json_decref(run);
}

static void test_cancel_stops_a_running_sleep_quickly(void **state)
{
    fixture *f = *state;
    json_t *run;
    assert_int_equal(submit_sleep(f->runs, "c", 1, 30, 60), CN_RUN_NEW);
    svc_sleep_ms(100);
    int64_t t0 = svc_now_mono_ms();
    assert_int_equal(cn_runs_cancel(f->runs, "c.1", 2000, &run), 0);
    assert_true(svc_now_mono_ms() - t0 < 1000);
    assert_string_equal(str(run, "state"), "cancelled");
    assert_string_equal(err_code(run), "cancelled");
    assert_null(json_object_get(run, "outputs"));
    json_decref(run);
}

static void test_timeout_fails_the_run_with_code_timeout(void **state)
{
    fixture *f = *state;
    assert_int_equal(submit_sleep(f->runs, "t", 1, 30, 1), CN_RUN_NEW);
    int64_t t0 = svc_now_mono_ms();
    json_t *run = wait_run(f->runs, "t.1", 5000);
    int64_t took = svc_now_mono_ms() - t0;
    assert_string_equal(str(run, "state"), "failed");
    assert_string_equal(err_code(run), "timeout");
    assert_true(took >= 900 && took < 2500);
    json_decref(run);
}

static void test_long_poll_answers_when_the_run_ends_or_the_wait_does(void **state)
{
    fixture *f = *state;
    json_t *run;
    assert_int_equal(submit_sleep(f->runs, "lp", 1, 0.3, 60), CN_RUN_NEW);
    /* wait 0 answers at once with the run still going */
    assert_int_equal(cn_runs_get(f->runs, "lp.1", 0, 1, &run), 0);
    assert_true(strcmp(str(run, "state"), "queued") == 0 || strcmp(str(run, "state"), "running") == 0);
    json_decref(run);
    /* a short wait runs out */
    int64_t t0 = svc_now_mono_ms();
    assert_int_equal(cn_runs_get(f->runs, "lp.1", 50, 1, &run), 0);
    assert_true(svc_now_mono_ms() - t0 >= 45);
    json_decref(run);
    /* a long one ends with the run, not with the wait */
    t0 = svc_now_mono_ms();
    run = wait_run(f->runs, "lp.1", 20000);
    assert_true(svc_now_mono_ms() - t0 < 2000);
    assert_string_equal(str(run, "state"), "succeeded");
    json_decref(run);
}

static void test_unknown_run_is_not_found(void **state)
{
    fixture *f = *state;
    json_t *run = NULL;
    assert_int_equal(cn_runs_get(f->runs, "nope.1", 0, 1, &run), CN_ENOENT);
    assert_null(run);
    assert_int_equal(cn_runs_cancel(f->runs, "nope.1", 0, &run), CN_ENOENT);
}

static void test_cuda_target_is_refused_on_a_cpu_node(void **state)
{
    fixture *f = *state;
    kl_err err;
    assert_int_equal(submit(f->runs, "{\"job_id\":\"g\",\"attempt\":1,\"kernel\":\"sleep\","
                                     "\"params\":{\"seconds\":0},\"backend\":\"cuda\"}",
                            &err),
                     CN_ENOTSUP);
    assert_string_equal(err.field, "backend");
    assert_non_null(strstr(err.message, "backend cpu requested"));
}

static void test_newer_attempt_cancels_the_older_one(void **state)
{
    fixture *f = *state;
    assert_int_equal(submit_sleep(f->runs, "sup", 1, 30, 60), CN_RUN_NEW);
    assert_int_equal(submit_sleep(f->runs, "sup", 2, 0, 60), CN_RUN_NEW);
    json_decref(wait_ended(f->runs, "sup.1", 2000, "cancelled"));
    json_decref(wait_ended(f->runs, "sup.2", 2000, "succeeded"));
}

static void test_load_lists_runs_until_collected(void **state)
{
    fixture *f = *state;
    int active;
    json_t *ids = json_array(), *run;
    assert_int_equal(submit_sleep(f->runs, "l", 1, 0.1, 60), CN_RUN_NEW);
    cn_runs_load(f->runs, &active, ids);
    assert_int_equal(active, 1);
    assert_int_equal(json_array_size(ids), 1);
    assert_string_equal(json_string_value(json_array_get(ids, 0)), "l.1");
    /* finished but not collected: still listed, no longer active */
    assert_int_equal(cn_runs_get(f->runs, "l.1", 5000, 0, &run), 0);
    json_decref(run);
    json_array_clear(ids);
    cn_runs_load(f->runs, &active, ids);
    assert_int_equal(active, 0);
    assert_int_equal(json_array_size(ids), 1);
    /* collected with its outputs: gone from the list */
    json_decref(wait_run(f->runs, "l.1", 0));
    json_array_clear(ids);
    cn_runs_load(f->runs, &active, ids);
    assert_int_equal(json_array_size(ids), 0);
    json_decref(ids);
}

static void test_draining_refuses_new_runs_and_waits_for_collection(void **state)
{
    fixture *f = *state;
    assert_int_equal(submit_sleep(f->runs, "d", 1, 0.2, 60), CN_RUN_NEW);
    assert_int_equal(cn_runs_drain(f->runs), 1);
    assert_int_equal(submit_sleep(f->runs, "d2", 1, 0, 60), CN_EDRAINING);
    /* an idempotent repeat still answers */
    assert_int_equal(submit_sleep(f->runs, "d", 1, 0.2, 60), CN_RUN_EXISTING);
    json_t *run = wait_run(f->runs, "d.1", 5000);
    json_decref(run);
    assert_int_equal(cn_runs_unsettled(f->runs), 0);
}

static void test_shutdown_cancel_is_a_retryable_backend_error(void **state)
{
    fixture *f = *state;
    assert_int_equal(submit_sleep(f->runs, "s", 1, 30, 60), CN_RUN_NEW);
    svc_sleep_ms(50);
    assert_int_equal(cn_runs_cancel_all(f->runs, 2000), 0);
    json_t *run = wait_ended(f->runs, "s.1", 0, "failed");
    assert_string_equal(err_code(run), "backend_error");
    json_decref(run);
}

/* Polls until the run is gone or ms have passed; returns the last get's result. */
static int gone_within(cn_runs *m, const char *id, int64_t ms)
{
    json_t *run = NULL;
    int64_t deadline = svc_now_mono_ms() + ms;
    int rc = 0;
    while (rc == 0 && svc_now_mono_ms() < deadline) {
        svc_sleep_ms(20);
        rc = cn_runs_get(m, id, 0, 0, &run);
        json_decref(run);
    }
    return rc;
}

static void test_finished_runs_are_swept_after_keep_time(void **state)
{
    fixture *f = *state;
    assert_int_equal(submit_sleep(f->runs, "sw", 1, 0, 60), CN_RUN_NEW);
    json_decref(wait_run(f->runs, "sw.1", 2000));
    assert_int_equal(gone_within(f->runs, "sw.1", 3000), CN_ENOENT);
}

static void test_release_frees_a_finished_run_long_before_keep_time(void **state)
{
    fixture *f = *state;
    /* keep time is the default 15 minutes; release grace 100 ms */
    assert_int_equal(submit_sleep(f->runs, "rl", 1, 30, 60), CN_RUN_NEW);
    assert_int_equal(cn_runs_release(f->runs, "rl.1"), CN_EBUSY);   /* still running */
    assert_int_equal(cn_runs_release(f->runs, "nope.1"), CN_ENOENT);
    json_t *run = NULL;
    assert_int_equal(cn_runs_cancel(f->runs, "rl.1", 2000, &run), 0);
    json_decref(run);
    assert_int_equal(submit_sleep(f->runs, "kept", 1, 0, 60), CN_RUN_NEW);
    json_decref(wait_run(f->runs, "kept.1", 2000));
    assert_int_equal(cn_runs_release(f->runs, "rl.1"), 0);
    assert_int_equal(cn_runs_release(f->runs, "rl.1"), 0);           /* twice is fine */
    assert_int_equal(gone_within(f->runs, "rl.1", 3000), CN_ENOENT);
    /* an unreleased run is still kept */
    assert_int_equal(cn_runs_get(f->runs, "kept.1", 0, 0, &run), 0);
    json_decref(run);
}

/* Ended runs are handed out for a report once each, oldest first, with
 * their outcome; a superseded attempt (nobody asks for it) is not. */
static void test_ended_runs_are_taken_once_for_reports(void **state)
{
    fixture *f = *state;
    json_t *got = json_array();
    assert_int_equal(cn_runs_take_ended(f->runs, 0, 10, got), 0);   /* nothing yet */
    assert_int_equal(submit_sleep(f->runs, "e1", 1, 0, 60), CN_RUN_NEW);
    assert_int_equal(submit_sleep(f->runs, "e2", 1, 30, 60), CN_RUN_NEW);
    /* the wait ends as soon as one has ended */
    assert_int_equal(cn_runs_take_ended(f->runs, 5000, 10, got), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(got, 0), "run_id")), "e1.1");
    assert_string_equal(json_string_value(json_object_get(json_array_get(got, 0), "state")),
                        "succeeded");
    /* a newer attempt of e2 supersedes the running one: only the newer is reported */
    assert_int_equal(submit_sleep(f->runs, "e2", 2, 0, 60), CN_RUN_NEW);
    json_decref(wait_run(f->runs, "e2.2", 5000));
    json_decref(wait_run(f->runs, "e2.1", 5000));
    json_array_clear(got);
    int n = 0;
    for (int i = 0; i < 20 && n < 1; i++)
        n += cn_runs_take_ended(f->runs, 200, 10, got);
    assert_int_equal(n, 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(got, 0), "run_id")), "e2.2");
    assert_int_equal(cn_runs_take_ended(f->runs, 300, 10, got), 0);  /* each once */
    /* taken is not settled: it stays held until released (e2.2 was
     * collected by wait_run's long poll, e1.1 only taken) */
    int active;
    json_t *ids = json_array();
    cn_runs_load(f->runs, &active, ids);
    assert_int_equal(json_array_size(ids), 1);
    assert_string_equal(json_string_value(json_array_get(ids, 0)), "e1.1");
    assert_int_equal(cn_runs_release(f->runs, "e1.1"), 0);
    assert_int_equal(cn_runs_release(f->runs, "e2.2"), 0);
    json_array_clear(ids);
    cn_runs_load(f->runs, &active, ids);
    assert_int_equal(json_array_size(ids), 0);
    json_decref(ids);
    json_decref(got);
}

static void test_progress_is_kept_per_run_and_taken_once(void **state)
{
    fixture *f = *state;
    kl_err err;
    assert_int_equal(submit(f->runs, "{\"job_id\":\"pj\",\"attempt\":2,\"kernel\":\"kmeans\","
                                     "\"params\":{\"k\":2,\"iterations\":5,\"tol\":0},"
                                     "\"inputs\":{\"points\":{\"dtype\":\"float32\",\"shape\":[4,1],"
                                     "\"data\":[0,1,10,11]}}}",
                            &err),
                     CN_RUN_NEW);
    json_t *run = wait_ended(f->runs, "pj.2", 5000, "succeeded");
    /* the run's object carries its last report */
    const json_t *p = json_object_get(run, "progress");
    assert_true(json_is_object(p));
    assert_true(json_number_value(json_object_get(p, "fraction")) > 0);
    assert_true(json_number_value(json_object_get(p, "iteration")) >= 1);
    assert_non_null(json_object_get(p, "inertia"));
    json_t *out = json_array();
    assert_int_equal(cn_runs_take_progress(f->runs, out), 1);
    const json_t *item = json_array_get(out, 0);
    assert_string_equal(str(item, "job_id"), "pj");
    assert_int_equal(json_integer_value(json_object_get(item, "attempt")), 2);
    assert_true(json_equal(json_object_get(item, "progress"), p));
    /* the latest report only, once */
    assert_int_equal(cn_runs_take_progress(f->runs, out), 0);
    assert_int_equal(json_array_size(out), 1);
    json_decref(out);
    json_decref(run);
}

/* ---- a lost device, through the plugin interface: the fake plugin
 * (tests/plugins/fake_cuda.c) loses its "GPU" in any reduce run ---- */

typedef struct lost {
    int calls;
    char why[256];
} lost;

static void on_lost(void *ctx, const char *why)
{
    lost *l = ctx;
    l->calls++;
    snprintf(l->why, sizeof l->why, "%s", why);
}

static int setup_fake_gpu(void **state)
{
    static fixture f;
    static lost l;
    static struct {
        fixture *f;
        lost *l;
    } both;
    memset(&f, 0, sizeof f);
    memset(&l, 0, sizeof l);
    svc_log_init("test", SVC_LOG_ERROR);
    setenv("KOWLOON_FAKE_CUDA_FAULT", "reduce", 1);
    assert_int_equal(cn_backend_open(&f.backend, "cuda", KL_FAKE_PLUGIN_DIR "/kl_fake_cuda.so"), 0);
    cn_runs_opts o = {.slots = 2, .threads = 1, .backend = &f.backend, .on_device_lost = on_lost,
                      .device_ctx = &l};
    assert_int_equal(cn_runs_create(&o, &f.runs), 0);
    both.f = &f;
    both.l = &l;
    *state = &both;
    return 0;
}

static int teardown_fake_gpu(void **state)
{
    fixture *f = *(fixture **)*state;
    unsetenv("KOWLOON_FAKE_CUDA_FAULT");
    cn_runs_destroy(f->runs);
    cn_backend_close(&f->backend);
    return 0;
}

static void test_the_run_that_loses_the_device_fails_for_good_and_the_others_are_given_back(void **state)
{
    fixture *f = ((fixture **)*state)[0];
    lost *l = ((lost **)*state)[1];
    kl_err err;
    assert_int_equal(submit_sleep(f->runs, "long", 1, 30, 60), CN_RUN_NEW);
    svc_sleep_ms(50); /* it runs on the "GPU" */
    assert_int_equal(submit(f->runs, "{\"job_id\":\"bad\",\"attempt\":1,\"kernel\":\"reduce\","
                                     "\"inputs\":{\"x\":{\"dtype\":\"float32\",\"shape\":[2],\"data\":[1,2]}}}",
                            &err),
                     CN_RUN_NEW);
    json_t *bad = wait_run(f->runs, "bad.1", 5000);
    json_t *other = wait_run(f->runs, "long.1", 5000);
    assert_string_equal(str(bad, "state"), "failed");
    assert_string_equal(str(other, "state"), "failed");
    /* A sticky error is the whole context's: the run that sees it first is
     * the one blamed (device_error, final), usually the faulting kernel's
     * own; on a loaded machine the sleeping run's stream query may see it
     * first. Either way exactly one run is blamed and the other ends
     * retryable. */
    int bad_blamed = strcmp(err_code(bad), "device_error") == 0;
    json_t *blamed = bad_blamed ? bad : other, *spared = bad_blamed ? other : bad;
    assert_string_equal(err_code(blamed), "device_error");
    const char *msg = json_string_value(json_object_get(json_object_get(blamed, "error"), "message"));
    assert_non_null(strstr(msg, "cudaErrorIllegalAddress"));
    assert_string_equal(err_code(spared), "backend_error");
    msg = json_string_value(json_object_get(json_object_get(spared, "error"), "message"));
    assert_non_null(strstr(msg, "GPU was lost while the run used it"));
    /* and so does any run after it; the node was told once */
    assert_int_equal(submit(f->runs, "{\"job_id\":\"after\",\"attempt\":1,\"kernel\":\"saxpy\",\"params\":{\"a\":2},"
                                     "\"inputs\":{\"x\":{\"dtype\":\"float32\",\"shape\":[1],\"data\":[1]},"
                                     "\"y\":{\"dtype\":\"float32\",\"shape\":[1],\"data\":[1]}}}",
                            &err),
                     CN_RUN_NEW);
    json_t *after = wait_run(f->runs, "after.1", 5000);
    assert_string_equal(err_code(after), "backend_error");
    assert_int_equal(l->calls, 1);
    assert_non_null(strstr(l->why, "sticky CUDA error"));
    json_decref(bad);
    json_decref(other);
    json_decref(after);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_saxpy_runs_and_returns_outputs_in_base64, setup2, teardown),
        cmocka_unit_test_setup_teardown(test_same_job_and_attempt_is_idempotent, setup2, teardown),
        cmocka_unit_test_setup_teardown(test_full_slots_answer_overloaded, setup1, teardown),
        cmocka_unit_test_setup_teardown(test_ended_runs_report_their_usage, setup2, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_stops_a_running_sleep_quickly, setup2, teardown),
        cmocka_unit_test_setup_teardown(test_timeout_fails_the_run_with_code_timeout, setup2, teardown),
        cmocka_unit_test_setup_teardown(test_long_poll_answers_when_the_run_ends_or_the_wait_does, setup2, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_run_is_not_found, setup2, teardown),
        cmocka_unit_test_setup_teardown(test_cuda_target_is_refused_on_a_cpu_node, setup2, teardown),
        cmocka_unit_test_setup_teardown(test_newer_attempt_cancels_the_older_one, setup2, teardown),
        cmocka_unit_test_setup_teardown(test_load_lists_runs_until_collected, setup2, teardown),
        cmocka_unit_test_setup_teardown(test_draining_refuses_new_runs_and_waits_for_collection, setup2, teardown),
        cmocka_unit_test_setup_teardown(test_shutdown_cancel_is_a_retryable_backend_error, setup2, teardown),
        cmocka_unit_test_setup_teardown(test_finished_runs_are_swept_after_keep_time, setup_short_keep, teardown),
        cmocka_unit_test_setup_teardown(test_release_frees_a_finished_run_long_before_keep_time, setup_short_release, teardown),
        cmocka_unit_test_setup_teardown(test_ended_runs_are_taken_once_for_reports, setup2, teardown),
        cmocka_unit_test_setup_teardown(test_progress_is_kept_per_run_and_taken_once, setup2, teardown),
        cmocka_unit_test_setup_teardown(test_the_run_that_loses_the_device_fails_for_good_and_the_others_are_given_back,
                                        setup_fake_gpu, teardown_fake_gpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
