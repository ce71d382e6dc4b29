/* test_cn_logship.c — live task logs (compute/task/logship.c) with a fake sink
 * in the gateway's place: batches by offset, a batch the gateway refused
 * sent again from the same offsets, the end of a part shipped to its last
 * byte, a batch's byte bound; and the blob file cache (compute/runs/blobfile.c)
 * a node without the shared directory mounts task inputs from: fetched
 * once, checked, shared by every run, evicted only when unpinned. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blobfile.h"
#include "logship.h"
#include "svc_log.h"
#include "svc_sha256.h"
#include "svc_util.h"

typedef struct sink {
    pthread_mutex_t mu;
    int fail;                 /* batches to refuse before taking any */
    int calls;
    char got[1 << 16];        /* the bytes taken, placed by offset */
    int64_t high;             /* how far they go */
    int64_t offsets[256];     /* the offset of each entry sent, in order */
    int nsent;
    size_t biggest;           /* the most bytes one batch carried */
} sink;

static int sink_send(void *cls, const json_t *batch, char *msg, size_t msglen)
{
    sink *s = cls;
    pthread_mutex_lock(&s->mu);
    s->calls++;
    size_t i, bytes = 0;
    const json_t *r;
    json_array_foreach(json_object_get(batch, "runs"), i, r) {
        assert_string_equal(json_string_value(json_object_get(r, "job_id")), "job");
        assert_int_equal(json_integer_value(json_object_get(r, "attempt")), 3);
        assert_int_equal(json_integer_value(json_object_get(r, "part")), 1);
        if (s->nsent < 256)
            s->offsets[s->nsent++] = json_integer_value(json_object_get(r, "offset"));
        bytes += svc_b64_decoded_len(json_string_value(json_object_get(r, "data_b64")),
                                     json_string_length(json_object_get(r, "data_b64")));
    }
    if (bytes > s->biggest)
        s->biggest = bytes;
    if (s->fail > 0) {
        s->fail--;
        snprintf(msg, msglen, "gateway away");
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    json_array_foreach(json_object_get(batch, "runs"), i, r) {
        unsigned char *data;
        size_t n;
        const char *b64 = json_string_value(json_object_get(r, "data_b64"));
        assert_int_equal(svc_b64_decode(b64, strlen(b64), &data, &n), 0);
        int64_t off = json_integer_value(json_object_get(r, "offset"));
        memcpy(s->got + off, data, n);
        if (off + (int64_t)n > s->high)
            s->high = off + (int64_t)n;
        free(data);
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static int64_t high(sink *s)
{
    pthread_mutex_lock(&s->mu);
    int64_t h = s->high;
    pthread_mutex_unlock(&s->mu);
    return h;
}

/* Waits up to 5 s for the sink to hold want bytes. */
static void wait_high(sink *s, int64_t want)
{
    for (int i = 0; i < 500 && high(s) < want; i++)
        usleep(10000);
    assert_int_equal(high(s), want);
}

static void test_a_log_ships_by_offset_and_a_refused_batch_is_sent_again(void **state)
{
    sink s = {.fail = 2};
    pthread_mutex_init(&s.mu, NULL);
    cn_logship_sink k = {.send = sink_send, .cls = &s};
    cn_logship_opts o = {.interval_ms = 10, .batch_bytes = 1 << 20};
    cn_logship *ls;
    char path[] = "/tmp/cn_logship_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    int rfd = open(path, O_RDONLY);
    int64_t size = 0;
    assert_int_equal(cn_logship_start(&k, &o, &ls), 0);
    cn_logship_src *src = cn_logship_add(ls, "job", 3, 1, rfd, &size);
    close(rfd);
    assert_non_null(src);
    assert_int_equal(write(fd, "hello ", 6), 6);
    __atomic_store_n(&size, 6, __ATOMIC_RELEASE);
    wait_high(&s, 6);
    assert_int_equal(write(fd, "world", 5), 5);
    __atomic_store_n(&size, 11, __ATOMIC_RELEASE);
    wait_high(&s, 11);
    assert_memory_equal(s.got, "hello world", 11);
    /* the two refused batches and the one taken all started at 0 */
    assert_true(s.nsent >= 4);
    assert_int_equal(s.offsets[0], 0);
    assert_int_equal(s.offsets[1], 0);
    assert_int_equal(s.offsets[2], 0);
    assert_int_equal(s.offsets[s.nsent - 1], 6);
    /* the part ends: what it wrote last goes too, then the source is dropped */
    assert_int_equal(write(fd, "!", 1), 1);
    cn_logship_end(ls, src, 12);
    wait_high(&s, 12);
    cn_logship_stats st;
    cn_logship_stats_get(ls, &st);
    assert_int_equal(st.bytes, 12);
    assert_int_equal(st.failures, 2);
    cn_logship_stop(ls);
    close(fd);
    unlink(path);
    pthread_mutex_destroy(&s.mu);
}

static void test_a_batch_carries_at_most_its_bound(void **state)
{
    static char big[40000];
    sink s = {0};
    pthread_mutex_init(&s.mu, NULL);
    cn_logship_sink k = {.send = sink_send, .cls = &s};
    cn_logship_opts o = {.interval_ms = 5, .batch_bytes = 4096};
    cn_logship *ls;
    char path[] = "/tmp/cn_logship_XXXXXX";
    int fd = mkstemp(path);
    memset(big, 'b', sizeof big);
    assert_int_equal(write(fd, big, sizeof big), (ssize_t)sizeof big);
    int64_t size = sizeof big;
    assert_int_equal(cn_logship_start(&k, &o, &ls), 0);
    int rfd = open(path, O_RDONLY);
    assert_non_null(cn_logship_add(ls, "job", 3, 1, rfd, &size));
    close(rfd);
    wait_high(&s, sizeof big);
    assert_true(s.biggest <= 4096);
    assert_memory_equal(s.got, big, sizeof big);
    cn_logship_stop(ls);   /* with a source still open: freed */
    close(fd);
    unlink(path);
    pthread_mutex_destroy(&s.mu);
}

/* ---- the blob file cache ------------------------------------------------ */

typedef struct blobs {
    unsigned char data[3][1000];
    char id[3][72];
    int fetches;
    int corrupt;
} blobs;

static int fake_fetch(void *cls, const char *id, void *buf, size_t size, svc_chunk_fn on_chunk,
                      void *chunk_cls, const volatile int *cancel, int64_t *got, char *msg,
                      size_t msglen)
{
    blobs *b = cls;
    __atomic_add_fetch(&b->fetches, 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < 3; i++) {
        if (strcmp(b->id[i], id) != 0)
            continue;
        if (size != sizeof b->data[i]) {
            *got = sizeof b->data[i];
            return CN_BLOBIO_ESIZE;
        }
        memcpy(buf, b->data[i], size);
        if (b->corrupt)
            ((unsigned char *)buf)[0] ^= 1;
        on_chunk(chunk_cls, buf, size);
        *got = (int64_t)size;
        return 0;
    }
    snprintf(msg, msglen, "no such blob");
    return CN_BLOBIO_EFAIL;
}

static void test_a_blob_file_is_fetched_once_checked_and_evicted_only_unpinned(void **state)
{
    blobs b = {0};
    for (int i = 0; i < 3; i++) {
        char hex[65];
        memset(b.data[i], 'a' + i, sizeof b.data[i]);
        svc_sha256 *h = svc_sha256_new();
        svc_sha256_update(h, b.data[i], sizeof b.data[i]);
        svc_sha256_final_hex(h, hex);
        snprintf(b.id[i], sizeof b.id[i], "sha256:%s", hex);
    }
    cn_blobio io = {.fetch = fake_fetch, .cls = &b};
    char dir[] = "/tmp/cn_blobfile_XXXXXX", p1[4096], p2[4096], p3[4096];
    kl_err err;
    struct stat st;
    assert_non_null(mkdtemp(dir));
    cn_blobfile *c;
    assert_int_equal(cn_blobfile_open(dir, 2000, &c), 0);
    assert_int_equal(cn_blobfile_get(c, &io, b.id[0], 1000, "inputs.x", NULL, p1, sizeof p1, &err), 0);
    assert_int_equal(cn_blobfile_get(c, &io, b.id[0], 1000, "inputs.x", NULL, p2, sizeof p2, &err), 0);
    assert_string_equal(p1, p2);
    assert_int_equal(b.fetches, 1);
    assert_int_equal(stat(p1, &st), 0);
    assert_int_equal(st.st_size, 1000);
    assert_int_equal(st.st_mode & 0777, 0644);   /* the task's uid reads it through the mount */
    /* a wrong size, and bytes that do not hash to the id */
    assert_int_equal(cn_blobfile_get(c, &io, b.id[0], 999, "inputs.x", NULL, p3, sizeof p3, &err),
                     KL_EINVAL);
    b.corrupt = 1;
    assert_int_equal(cn_blobfile_get(c, &io, b.id[1], 1000, "inputs.y", NULL, p3, sizeof p3, &err),
                     KL_EBACKEND);
    assert_non_null(strstr(err.message, "hash to"));
    b.corrupt = 0;
    /* over the budget, the pinned file stays; unpinned, the oldest goes */
    assert_int_equal(cn_blobfile_get(c, &io, b.id[1], 1000, "inputs.y", NULL, p2, sizeof p2, &err), 0);
    assert_int_equal(cn_blobfile_get(c, &io, b.id[2], 1000, "inputs.z", NULL, p3, sizeof p3, &err), 0);
    assert_int_equal(access(p1, F_OK), 0);
    cn_blobfile_unpin(c, b.id[0]);
    assert_int_equal(access(p1, F_OK), 0);   /* still pinned once */
    cn_blobfile_unpin(c, b.id[0]);
    assert_int_equal(access(p1, F_OK), -1);
    cn_blobfile_stats s;
    cn_blobfile_stats_get(c, &s);
    assert_int_equal(s.files, 2);
    assert_int_equal(s.used_bytes, 2000);
    cn_blobfile_unpin(c, b.id[1]);
    cn_blobfile_unpin(c, b.id[2]);
    cn_blobfile_close(c);
    /* reopened, the cache starts empty */
    assert_int_equal(cn_blobfile_open(dir, 2000, &c), 0);
    assert_int_equal(access(p2, F_OK), -1);
    cn_blobfile_close(c);
    rmdir(dir);
}

int main(void)
{
    svc_log_init("test", SVC_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_log_ships_by_offset_and_a_refused_batch_is_sent_again),
        cmocka_unit_test(test_a_batch_carries_at_most_its_bound),
        cmocka_unit_test(test_a_blob_file_is_fetched_once_checked_and_evicted_only_unpinned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
