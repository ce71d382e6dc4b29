/* svc_dtoa.h — shortest round-trip decimal text for floats and doubles, as
 * JSON numbers. A thin C face on Google's double-conversion (Grisu3 with an
 * exact bignum fallback), compiled as C++ in svc_dtoa.cc. */
#ifndef SVC_DTOA_H
#define SVC_DTOA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes a buffer needs for any one number written here, NUL included. */
#define SVC_DTOA_MAX 32

/* Writes the shortest decimal that strtof (svc_dtoa_f32) or strtod
 * (svc_dtoa_f64) reads back as exactly v, NUL-terminated, into buf (at least
 * SVC_DTOA_MAX bytes); returns its length. The text is a JSON number that
 * always reads as a real: "1.0", "-0.0", "0.1", "1e-45", "3.4028235e38".
 * Non-finite values have no JSON number: the caller must not pass them (they
 * come out as NaN, Infinity, -Infinity, unquoted). */
size_t svc_dtoa_f32(float v, char *buf);
size_t svc_dtoa_f64(double v, char *buf);

#ifdef __cplusplus
}
#endif
#endif
