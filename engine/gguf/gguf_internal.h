/* gguf_internal.h — what the GGUF reader (gguf_read.c) and writer
 * (gguf_write.c) share; not a public header (engine/gguf/gguf.h is the contract):
 * the writer's allocation that aborts (the reader reports a shortage), scalar
 * value sizes, and what gguf_file.scratch points at (the writer's
 * gguf_writer_copy_kv reads the value ends). */
#ifndef SPECD_GGUF_INTERNAL_H
#define SPECD_GGUF_INTERNAL_H

#include "engine/gguf/gguf.h"
#include "kernels/check.h"

#include <stdlib.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader and writer assume a little-endian host (GGUF is little-endian and read in place)"
#endif

#define GGUF_MAGIC_BYTES "GGUF"

static inline void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) SPECD_DIE("out of memory (%zu bytes)", n);
    return p;
}

static inline void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) SPECD_DIE("out of memory (%zu x %zu bytes)", n, sz);
    return p;
}

static inline void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p) SPECD_DIE("out of memory (%zu bytes)", n);
    return p;
}

/* Fixed on-disk size of a scalar value type; 0 for string/array/unknown. */
static const uint8_t k_vtype_size[GGUF_TYPE_COUNT] = {
    1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8,
};

static inline size_t vtype_size(uint32_t t)
{
    return t < GGUF_TYPE_COUNT ? k_vtype_size[t] : 0;
}

/* Open-addressing table of indices (+1; 0 = empty) into an array of names. */
typedef struct {
    size_t *slot;
    size_t cap; /* power of two */
} name_index;

/* What gguf_file.scratch points at. */
typedef struct {
    gguf_str *strs;      /* every string-array element, one allocation */
    uint64_t *kv_end;    /* (n_kv) file offset just past each value (for copy_kv) */
    name_index kv_ix, t_ix;
} gguf_priv;

#endif
