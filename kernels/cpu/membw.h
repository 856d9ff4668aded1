/* membw.h — measures this machine's memory read bandwidth with the CPU
 * backend's threads: the denominator of the decode roofline in `specd bench`. */
#ifndef SPECD_CPU_MEMBW_H
#define SPECD_CPU_MEMBW_H

#include <stddef.h>

/* A probe: a buffer of `bytes` (much larger than the caches) filled once, read
 * by n_threads threads. membw_measure reads it `passes` times and returns the
 * best pass's GB/s (1e9 bytes/s; best != 0) or the sustained rate over all
 * passes, so one probe serves repeated measurements, paired with other work. */
typedef struct membw membw;
membw *membw_create(int n_threads, size_t bytes); /* NULL when out of memory */
double membw_measure(membw *b, int passes, int best);
void membw_destroy(membw *b); /* accepts NULL */

#endif
