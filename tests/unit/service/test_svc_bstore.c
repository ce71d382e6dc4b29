/* test_svc_bstore.c — the blob store's directory backend and the
 * streaming SHA-256 under it: FIPS 180 vectors piece by piece, the content
 * address of what was written, dedup, nothing left by an abort, and bytes
 * put back when a retention pass removed them before the record. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "svc_bstore.h"
#include "svc_sha256.h"

static char dir[64] = "/tmp/kl-blobstore-XXXXXX"; /* room for "/a/b" after mkdtemp */

static int entries(const char *sub)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    DIR *d = opendir(path);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static void read_all(svc_bstore *s, const char *id, char *out, size_t cap, uint64_t *size)
{
    int fd;
    assert_int_equal(svc_bstore_open_read(s, id, &fd, size), 0);
    assert_true(*size <= cap);
    assert_int_equal(read(fd, out, cap), (ssize_t)*size);
    close(fd);
}

static void test_sha256_matches_fips_vectors_in_any_pieces(void **state)
{
    (void)state;
    static const char *const vec[][2] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    for (size_t i = 0; i < 3; i++) {
        for (size_t piece = 1; piece <= 7; piece += 3) {
            svc_sha256 *h = svc_sha256_new();
            const char *p = vec[i][0];
            for (size_t left = strlen(p); left > 0;) {
                size_t n = left < piece ? left : piece;
                assert_int_equal(svc_sha256_update(h, p, n), 0);
                p += n;
                left -= n;
            }
            char hex[65];
            assert_int_equal(svc_sha256_final_hex(h, hex), 0);
            assert_string_equal(hex, vec[i][1]);
        }
    }
}

static void test_blob_id_validation(void **state)
{
    (void)state;
    assert_true(svc_blob_id_valid("sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    assert_false(svc_blob_id_valid("sha256:BA7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    assert_false(svc_blob_id_valid("sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015a"));
    assert_false(svc_blob_id_valid("sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015add"));
    assert_false(svc_blob_id_valid("sha1:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    assert_false(svc_blob_id_valid(NULL));
}

static void test_written_blob_is_named_by_its_hash_and_deduplicated(void **state)
{
    svc_bstore *s = *state;
    char id[SVC_BLOB_ID_LEN], id2[SVC_BLOB_ID_LEN], buf[16];
    uint64_t size;
    for (int round = 0; round < 2; round++) {
        svc_bwriter *w = svc_bstore_write_begin(s);
        assert_non_null(w);
        assert_int_equal(svc_bwriter_append(w, "ab", 2), 0);
        assert_int_equal(svc_bwriter_append(w, "c", 1), 0);
        assert_int_equal(svc_bwriter_size(w), 3);
        assert_int_equal(svc_bwriter_commit(w, round ? id2 : id, &size), 0);
        assert_int_equal(size, 3);
        assert_int_equal(svc_bwriter_close(w), 0);
    }
    assert_string_equal(id, "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    assert_string_equal(id, id2);
    assert_int_equal(entries("sha256/ba"), 1);
    assert_int_equal(entries("tmp"), 0);
    read_all(s, id, buf, sizeof buf, &size);
    assert_int_equal(size, 3);
    assert_memory_equal(buf, "abc", 3);
}

static void test_abort_leaves_nothing(void **state)
{
    svc_bstore *s = *state;
    svc_bwriter *w = svc_bstore_write_begin(s);
    assert_int_equal(svc_bwriter_append(w, "partial", 7), 0);
    assert_int_equal(entries("tmp"), 1);
    svc_bwriter_abort(w);
    assert_int_equal(entries("tmp"), 0);
    svc_bwriter_abort(NULL);
}

static void test_close_puts_back_bytes_removed_before_the_record(void **state)
{
    svc_bstore *s = *state;
    char id[SVC_BLOB_ID_LEN], buf[16];
    uint64_t size;
    svc_bwriter *w = svc_bstore_write_begin(s);
    assert_int_equal(svc_bwriter_append(w, "retained", 8), 0);
    assert_int_equal(svc_bwriter_commit(w, id, &size), 0);
    /* a retention pass removes the older copy between commit and record */
    assert_int_equal(svc_bstore_remove(s, id), 0);
    assert_int_equal(svc_bstore_open_read(s, id, &(int){0}, &size), -ENOENT);
    assert_int_equal(svc_bwriter_close(w), 0);
    read_all(s, id, buf, sizeof buf, &size);
    assert_memory_equal(buf, "retained", 8);
    assert_int_equal(svc_bstore_remove(s, id), 0);
    assert_int_equal(svc_bstore_remove(s, id), -ENOENT);
}

/* Bytes under a name they do not hash to (written by whoever can write the
 * directory: a node that shares it). */
static void plant(const char *id, const char *bytes, size_t n)
{
    char path[256];
    snprintf(path, sizeof path, "%s/sha256/%.2s", dir, id + 7);
    mkdir(path, 0750);
    snprintf(path, sizeof path, "%s/sha256/%.2s/%s", dir, id + 7, id + 7);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    fclose(f);
}

#define ABC_ID "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

static void test_a_genuine_write_replaces_bytes_planted_under_its_name(void **state)
{
    svc_bstore *s = *state;
    char id[SVC_BLOB_ID_LEN], buf[16];
    uint64_t size;
    /* the same size, and another size */
    const char *planted[] = {"xyz", "planted bytes"};
    for (int i = 0; i < 2; i++) {
        svc_bstore_remove(s, ABC_ID);
        plant(ABC_ID, planted[i], strlen(planted[i]));
        svc_bwriter *w = svc_bstore_write_begin(s);
        assert_int_equal(svc_bwriter_append(w, "abc", 3), 0);
        assert_int_equal(svc_bwriter_commit(w, id, &size), 0);
        assert_string_equal(id, ABC_ID);
        assert_int_equal(svc_bwriter_close(w), 0);
        read_all(s, id, buf, sizeof buf, &size);
        assert_int_equal(size, 3);
        assert_memory_equal(buf, "abc", 3);
        assert_int_equal(entries("tmp"), 0);
    }
}

static void test_a_file_is_verified_against_its_name(void **state)
{
    svc_bstore *s = *state;
    uint64_t size = 0;
    svc_bstore_remove(s, ABC_ID);
    assert_int_equal(svc_bstore_verify(s, ABC_ID, 1 << 20, &size), -ENOENT);
    plant(ABC_ID, "abc", 3);
    assert_int_equal(svc_bstore_verify(s, ABC_ID, 1 << 20, &size), 0);
    assert_int_equal(size, 3);
    assert_int_equal(svc_bstore_verify(s, ABC_ID, 2, &size), -EFBIG);
    plant(ABC_ID, "abd", 3);
    assert_int_equal(svc_bstore_verify(s, ABC_ID, 1 << 20, &size), -EBADMSG);
    assert_int_equal(svc_bstore_verify(s, "sha256:nope", 1 << 20, &size), -ENOENT);
    svc_bstore_remove(s, ABC_ID);
}

static void test_unknown_or_malformed_id_is_enoent(void **state)
{
    svc_bstore *s = *state;
    int fd;
    uint64_t size;
    assert_int_equal(svc_bstore_open_read(s, "sha256:0000000000000000000000000000000000000000000000000000000000000000",
                                         &fd, &size), -ENOENT);
    assert_int_equal(svc_bstore_open_read(s, "../../etc/passwd", &fd, &size), -ENOENT);
}

static void test_a_node_opens_the_same_store_with_the_same_identity(void **state)
{
    svc_bstore *s = *state;
    char err[256], other[64] = "/tmp/kl-blobstore-other-XXXXXX";
    uint64_t size;
    assert_int_equal(strlen(svc_bstore_id(s)), 32);
    assert_int_equal(svc_bstore_dir(s)[0], '/');
    /* the creator names its directory absolutely, whatever it was given */
    char cwd[512], parent[80], abs[512];
    assert_non_null(getcwd(cwd, sizeof cwd));
    snprintf(parent, sizeof parent, "%.*s", (int)(strlen(dir) - 2), dir); /* .../a */
    assert_int_equal(chdir(parent), 0);
    svc_bstore *rel = svc_bstore_open("b", SVC_BSTORE_CREATE, err, sizeof err);
    assert_int_equal(chdir(cwd), 0);
    assert_non_null(rel);
    assert_non_null(realpath(dir, abs));
    assert_string_equal(svc_bstore_dir(rel), abs);
    svc_bstore_close(rel);
    /* a node's view: no create, the identity read back */
    svc_bstore *n = svc_bstore_open(dir, 0, err, sizeof err);
    assert_non_null(n);
    assert_string_equal(svc_bstore_id(n), svc_bstore_id(s));
    /* a second gateway on the same directory keeps the identity */
    svc_bstore *again = svc_bstore_open(dir, SVC_BSTORE_CREATE, err, sizeof err);
    assert_non_null(again);
    assert_string_equal(svc_bstore_id(again), svc_bstore_id(s));
    svc_bstore_close(again);
    /* what a node writes, the gateway sees under its name with its size */
    svc_bwriter *w = svc_bstore_write_begin(n);
    char id[SVC_BLOB_ID_LEN];
    assert_non_null(w);
    assert_int_equal(svc_bwriter_append(w, "node output", 11), 0);
    assert_int_equal(svc_bwriter_commit(w, id, &size), 0);
    assert_int_equal(svc_bwriter_close(w), 0);
    assert_int_equal(svc_bstore_stat(s, id, &size), 0);
    assert_int_equal(size, 11);
    svc_bstore_close(n);
    /* a directory that is no store: a node refuses it */
    assert_non_null(mkdtemp(other));
    assert_null(svc_bstore_open(other, 0, err, sizeof err));
    assert_non_null(strstr(err, "not a blob store"));
    rmdir(other);
}

static void test_a_buffer_hashed_on_another_thread_gets_the_same_id(void **state)
{
    svc_bstore *s = *state;
    char err[256], id1[SVC_BLOB_ID_LEN], id2[SVC_BLOB_ID_LEN];
    uint64_t size;
    size_t n = (size_t)20 << 20 | 12345;  /* past the threshold, not a multiple of a piece */
    unsigned char *buf = malloc(n);
    assert_non_null(buf);
    for (size_t i = 0; i < n; i++)
        buf[i] = (unsigned char)(i * 2654435761u >> 24);
    svc_bstore *b = svc_bstore_open(dir, 0, err, sizeof err);
    assert_non_null(b);
    svc_bwriter *w = svc_bstore_write_begin(b);
    for (size_t off = 0; off < n; off += 1000003)
        assert_int_equal(svc_bwriter_append(w, buf + off, n - off < 1000003 ? n - off : 1000003), 0);
    assert_int_equal(svc_bwriter_commit(w, id1, &size), 0);
    assert_int_equal(svc_bwriter_close(w), 0);
    w = svc_bstore_write_begin(b);
    assert_int_equal(svc_bwriter_append_buffer(w, buf, n, NULL), 0);
    assert_int_equal(svc_bwriter_size(w), n);
    assert_int_equal(svc_bwriter_commit(w, id2, &size), 0);
    assert_int_equal(size, n);
    assert_string_equal(id1, id2);
    assert_int_equal(svc_bwriter_close(w), 0);
    /* stopped: refused, and an abort leaves no temporary file */
    int stop = 1, before = entries("tmp");
    w = svc_bstore_write_begin(b);
    assert_int_equal(svc_bwriter_append_buffer(w, buf, n, &stop), -ECANCELED);
    svc_bwriter_abort(w);
    assert_int_equal(entries("tmp"), before);
    (void)s;
    svc_bstore_close(b);
    free(buf);
}

/* Past LAG_MIN a streamed blob is hashed by a thread reading the file back
 * behind the writer: the id is still the SHA-256 of the bytes, and an abort
 * in the middle stops that thread and leaves nothing behind. */
static void test_a_streamed_blob_hashed_behind_the_writer_gets_its_sha256(void **state)
{
    char err[256], id[SVC_BLOB_ID_LEN], want[SVC_BLOB_ID_LEN], hex[65];
    uint64_t size;
    size_t n = (size_t)24 << 20 | 777;
    unsigned char *buf = malloc(n);
    assert_non_null(buf);
    for (size_t i = 0; i < n; i++)
        buf[i] = (unsigned char)(i * 2246822519u >> 20);
    svc_sha256 *h = svc_sha256_new();
    assert_int_equal(svc_sha256_update(h, buf, n), 0);
    assert_int_equal(svc_sha256_final_hex(h, hex), 0);
    snprintf(want, sizeof want, "sha256:%s", hex);
    svc_bstore *b = svc_bstore_open(dir, 0, err, sizeof err);
    assert_non_null(b);
    svc_bwriter *w = svc_bstore_write_begin(b);
    for (size_t off = 0; off < n; off += 65536)   /* pieces as an upload brings them */
        assert_int_equal(svc_bwriter_append(w, buf + off, n - off < 65536 ? n - off : 65536), 0);
    assert_int_equal(svc_bwriter_commit(w, id, &size), 0);
    assert_int_equal(size, n);
    assert_string_equal(id, want);
    assert_int_equal(svc_bwriter_close(w), 0);
    int before = entries("tmp");
    w = svc_bstore_write_begin(b);
    for (size_t off = 0; off < n / 2; off += 65536)
        assert_int_equal(svc_bwriter_append(w, buf + off, 65536), 0);
    svc_bwriter_abort(w);
    assert_int_equal(entries("tmp"), before);
    (void)state;
    svc_bstore_close(b);
    free(buf);
}

static int setup(void **state)
{
    char err[128];
    if (mkdtemp(dir) == NULL)
        return -1;
    strcat(dir, "/a/b"); /* parents are created */
    svc_bstore *s = svc_bstore_open(dir, SVC_BSTORE_CREATE, err, sizeof err);
    if (s == NULL)
        return -1;
    *state = s;
    return 0;
}

static int teardown(void **state)
{
    svc_bstore_close(*state);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%.*s'", (int)(strlen(dir) - 4), dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_matches_fips_vectors_in_any_pieces),
        cmocka_unit_test(test_blob_id_validation),
        cmocka_unit_test(test_a_streamed_blob_hashed_behind_the_writer_gets_its_sha256),
        cmocka_unit_test(test_written_blob_is_named_by_its_hash_and_deduplicated),
        cmocka_unit_test(test_abort_leaves_nothing),
        cmocka_unit_test(test_close_puts_back_bytes_removed_before_the_record),
        cmocka_unit_test(test_a_genuine_write_replaces_bytes_planted_under_its_name),
        cmocka_unit_test(test_a_file_is_verified_against_its_name),
        cmocka_unit_test(test_unknown_or_malformed_id_is_enoent),
        cmocka_unit_test(test_a_node_opens_the_same_store_with_the_same_identity),
        cmocka_unit_test(test_a_buffer_hashed_on_another_thread_gets_the_same_id),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
