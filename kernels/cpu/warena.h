/* warena.h — memory for the weights the CPU backend lays out itself (Q8_0,
 * and on x86 the K-quants, repacked 8 rows at a time): 2 MiB-aligned chunks advised for transparent
 * huge pages. A decode step streams every weight once; on 4 KiB pages each
 * page is a TLB miss and a point where the hardware prefetchers stop, and
 * per-matrix malloc blocks (mmap'd by glibc above 128 KiB) get 4 KiB pages.
 * Measured on the Q8_0 widen model at context 64, alternated (medians of 12
 * rounds): decode 2.41 against 2.52 ms, 5-row verification 2.96 against 3.32
 * ms. Weights read in place from the GGUF mapping are not copied here. */
#ifndef SPECD_CPU_WARENA_H
#define SPECD_CPU_WARENA_H

#include <stddef.h>

typedef struct warena warena;

warena *warena_create(void); /* NULL when out of memory */
/* bytes (> 0) aligned to 64; NULL when out of memory. Thread-safe. */
void *warena_alloc(warena *a, size_t bytes);
/* Gives back p (from warena_alloc on a; NULL is accepted): a chunk returns to
 * the system when everything allocated from it has been freed. */
void warena_free(warena *a, void *p);
/* Bytes mapped for chunks now (for tests and reports). */
size_t warena_mapped(warena *a);
void warena_destroy(warena *a); /* accepts NULL; frees every chunk */

#endif
