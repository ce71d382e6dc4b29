// svc_dtoa.cc — svc_dtoa.h on double-conversion (libdouble-conversion-dev).
// The only C++ of the service runtime: two functions behind extern "C", no
// exceptions and no allocation (the converter writes into the caller's buffer).
#include "svc_dtoa.h"

#include <double-conversion/double-to-string.h>
#include <double-conversion/utils.h>

using double_conversion::DoubleToStringConverter;
using double_conversion::StringBuilder;

// Decimal notation from 1e-6 up to 1e21 (as JavaScript writes numbers),
// exponent form outside it; a trailing ".0" keeps integral values reals.
static const DoubleToStringConverter converter(
    DoubleToStringConverter::EMIT_TRAILING_DECIMAL_POINT |
        DoubleToStringConverter::EMIT_TRAILING_ZERO_AFTER_POINT,
    "Infinity", "NaN", 'e', -6, 21, 0, 0);

// The shortest form of v by the converter's method to (ToShortestSingle
// for a float, ToShortest for a double) into buf; returns the length
// written. The converter never needs more than 26 bytes for a shortest form
// (17 digits, sign, point, "e-308"), within SVC_DTOA_MAX.
template <typename T>
static size_t shortest(T v, char *buf, bool (DoubleToStringConverter::*to)(T, StringBuilder *) const)
{
    StringBuilder sb(buf, SVC_DTOA_MAX);
    (converter.*to)(v, &sb);
    size_t n = (size_t)sb.position();
    sb.Finalize();
    return n;
}

size_t svc_dtoa_f32(float v, char *buf)
{
    return shortest(v, buf, &DoubleToStringConverter::ToShortestSingle);
}

size_t svc_dtoa_f64(double v, char *buf)
{
    return shortest(v, buf, &DoubleToStringConverter::ToShortest);
}
