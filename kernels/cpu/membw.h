/* membw.h — measures this machine's memory read bandwidth with the CPU
 * backend's threads: the denominator of the decode roofline in `specd bench`. */
#ifndef SPECD_CPU_MEMBW_H
#define SPECD_CPU_MEMBW_H

#include <stddef.h>

/* Reads a buffer of `bytes` (much larger than the caches) `reps` times with
 * n_threads threads; returns the best GB/s (1e9 bytes/s), or 0 on failure. */
double membw_read_gbs(int n_threads, size_t bytes, int reps);

/* The same probe kept open, for measurements paired with other work: a buffer
 * of `bytes` filled once. membw_measure reads it `passes` times and returns the
 * best pass's GB/s (best != 0) or the sustained rate over all passes. */
typedef struct membw membw;
membw *membw_create(int n_threads, size_t bytes); /* NULL when out of memory */
double membw_measure(membw *b, int passes, int best);
void membw_destroy(membw *b); /* accepts NULL */

#endif
