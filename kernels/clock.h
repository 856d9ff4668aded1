/* clock.h — the one monotonic clock of the tree: clock_now_ms() is
 * CLOCK_MONOTONIC in milliseconds (for intervals, never for wall time). In
 * kernels/, the lowest layer, so every folder may include it. */
#ifndef SPECD_CLOCK_H
#define SPECD_CLOCK_H

#include <time.h>

static inline double clock_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

#endif
