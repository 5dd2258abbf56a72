/* num.h — a double (a JSON number, strtod's result) to an integer without undefined behaviour.
 *
 * C leaves converting a value outside the integer type's range undefined (clang's -fsanitize=float-cast-overflow
 * traps it; on x86 it silently yields INT_MIN), so every such conversion checks the range first and the caller can
 * say which of the two things is wrong with the number. Command-line integers go through the same two answers. */
#ifndef KVBENCH_NUM_H
#define KVBENCH_NUM_H

#include <errno.h>
#include <math.h>
#include <stdlib.h>

typedef enum { NUM_OK = 0, NUM_NOT_INTEGER, NUM_OUT_OF_RANGE } NumCheck;

/* *out = v when v is a whole number in [lo, hi] (lo and hi exactly representable, within long long); else *out
 * is untouched and the result says why: NaN and fractions are not integers, infinities are out of range. */
static inline NumCheck num_integer(double v, double lo, double hi, long long *out) {
    if (isnan(v) || (isfinite(v) && v != floor(v))) return NUM_NOT_INTEGER;
    if (!(v >= lo && v <= hi)) return NUM_OUT_OF_RANGE;
    *out = (long long)v;
    return NUM_OK;
}

/* A command-line integer: all of `text` in base 10, in [lo, hi]. A number past long long (strtoll's ERANGE) is
 * out of range, anything else that is not all digits is not an integer. */
static inline NumCheck num_parse_integer(const char *text, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end) return NUM_NOT_INTEGER;
    if (errno == ERANGE || v < lo || v > hi) return NUM_OUT_OF_RANGE;
    *out = v;
    return NUM_OK;
}

#endif
