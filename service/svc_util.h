/* svc_util.h — clocks, RFC 3339 times, random ids and tokens, constant-time
 * comparison, base64, UTF-8 length, FNV hash. Small pieces both daemons
 * need. */
#ifndef SVC_UTIL_H
#define SVC_UTIL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Monotonic milliseconds (for timeouts) and wall-clock milliseconds since
 * the Unix epoch (for records). */
int64_t svc_now_mono_ms(void);
int64_t svc_now_wall_ms(void);
/* The time ms from now on clock, for pthread_cond_timedwait on a condition
 * that waits on that clock (CLOCK_REALTIME unless its attributes say
 * otherwise). */
struct timespec svc_deadline_ts(clockid_t clock, int64_t ms);
/* Initialises cv to wait on CLOCK_MONOTONIC (its deadlines from
 * svc_deadline_ts(CLOCK_MONOTONIC, ...)); 0 or -errno. */
int svc_cond_init_mono(pthread_cond_t *cv);
/* Formats epoch ms as "2026-12-02T12:00:00.123Z" into buf (>= 32 bytes). */
void svc_time_format(int64_t epoch_ms, char *buf, size_t len);
/* Sleeps ms milliseconds (restarts on EINTR). */
void svc_sleep_ms(int64_t ms);

/* Fills buf with n cryptographically random bytes (getrandom); 0 or -errno. */
int svc_random_bytes(void *buf, size_t n);
/* Writes a random token of 2*nbytes lowercase hex characters plus NUL. */
int svc_random_hex(char *out, size_t nbytes);
/* Writes a random RFC 4122 version-4 UUID (36 chars + NUL) into out. */
int svc_uuid_v4(char out[37]);
/* 1 if s is a UUID in canonical 8-4-4-4-12 hex form. */
int svc_uuid_valid(const char *s);

/* Compares two strings in time that depends only on their lengths. 1 if equal. */
int svc_secure_equal(const char *a, const char *b);

/* Characters (code points) of a UTF-8 string: its lead bytes, what a JSON
 * Schema maxLength counts. The text is taken to be valid UTF-8 (jansson and
 * the HTTP server check that before handlers see it). */
size_t svc_utf8_chars(const char *s);

/* 1 if p[0..n) is well-formed UTF-8 (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), what jansson and PostgreSQL take;
 * a NUL byte counts as a character here. */
int svc_utf8_valid(const char *p, size_t n);

/* A Content-Disposition value for a download named filename (any bytes:
 * a name may come from a URL path): "attachment; filename=\"<safe>\";
 * filename*=UTF-8''<percent-encoded>" (RFC 6266, RFC 8187). The quoted
 * form keeps only [A-Za-z0-9._-] (others become '_') for clients that know
 * no other; the extended form carries the exact bytes. A name too long for
 * out is cut (whole characters only). Returns out. */
char *svc_content_disposition(const char *filename, char *out, size_t len);

/* FNV-1a, 32 bits, of a NUL-terminated string: for spreading keys over
 * slots of a table, never for anything an attacker must not predict. */
uint32_t svc_fnv1a(const char *s);

/* Standard base64 (RFC 4648, with padding). encode: returns a malloc'd
 * NUL-terminated string the caller frees, NULL on ENOMEM.
 * decode: returns 0 and a malloc'd buffer in *out (caller frees) with its
 * length in *out_len, or -1 for malformed input (bad characters, bad
 * padding, wrong length; whitespace is not accepted). */
char *svc_b64_encode(const void *data, size_t len);
/* The same text without allocating: writes (len + 2) / 3 * 4 characters to
 * out (no NUL) and returns that count. Whole 3-byte groups encode alone, so
 * a long buffer can be encoded piece by piece, every piece but the last a
 * multiple of 3 bytes. */
size_t svc_b64_encode_to(const void *data, size_t len, char *out);
int svc_b64_decode(const char *s, size_t slen, unsigned char **out, size_t *out_len);
/* Bytes a base64 text of slen characters decodes to, from its length and
 * padding alone (whether or not the text is valid). */
size_t svc_b64_decoded_len(const char *s, size_t slen);
/* svc_b64_decode into the caller's buffer: returns 0 with the bytes in
 * out[0..*out_len), or -1 for malformed input or when they would not fit in
 * cap bytes (then out[0..cap) may have been written). */
int svc_b64_decode_to(const char *s, size_t slen, unsigned char *out, size_t cap, size_t *out_len);

#endif
