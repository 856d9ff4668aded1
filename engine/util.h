/* util.h — small helpers every engine file may use: the monotonic clock
 * (kernels/clock.h) and the formatted-error helpers of the recoverable paths. */
#ifndef SPECD_ENGINE_UTIL_H
#define SPECD_ENGINE_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/errkind.h"
#include "kernels/clock.h"

/* The va_list form under both helpers below: writes the formatted message
 * into err (at most n bytes, NUL-terminated; nothing when err is NULL or n
 * is 0). */
static inline void util_vformat(char *err, size_t n, const char *fmt, va_list ap) {
    if (err && n) vsnprintf(err, n, fmt, ap);
}

/* Writes the formatted message into err (as util_vformat) and returns -1, so
 * a failing path reads `return util_fail(err, errlen, "...", ...);`. */
__attribute__((format(printf, 3, 4))) static inline int util_fail(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    util_vformat(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

/* util_fail that also says what kind of failure it was: *st = kind (st may be
 * NULL), for the loaders (errkind.h). */
__attribute__((format(printf, 5, 6))) static inline int util_fail_st(engine_status *st, engine_status kind, char *err,
                                                                     size_t n, const char *fmt, ...) {
    engine_status_set(st, kind);
    va_list ap;
    va_start(ap, fmt);
    util_vformat(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

/* The next value of a splitmix64 sequence with state *s (the trainer's
 * shuffles and the self-distillation draws: seeded, not for cryptography). */
static inline uint64_t util_splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
