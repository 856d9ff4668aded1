/* gguf.h — GGUF v2/v3 reader (mmap, zero-copy, hostile-input safe) and writer.
 *
 * The reader validates the whole header up front: every string, array and
 * tensor range is checked against the file size before anything points into
 * it, so callers may use gguf_kv / gguf_tensor fields without bounds checks.
 * It is NOT a model loader: it knows nothing about llama (see model.h).
 *
 * Threads: a gguf_file is immutable once opened; any number of threads may
 * read it (and call the lookups) concurrently. A gguf_writer belongs to one
 * thread at a time. Programming errors (NULL writer, non-numeric element type
 * for gguf_writer_set_arr) and out-of-memory abort with file:line. */
#ifndef SPECD_GGUF_H
#define SPECD_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/errkind.h"
#include "kernels/ggml_type.h" /* ggml_type, the type facts (names, block and row sizes) */

/* Metadata value types (on-disk numbering). */
typedef enum {
    GGUF_TYPE_UINT8 = 0, GGUF_TYPE_INT8 = 1, GGUF_TYPE_UINT16 = 2, GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4, GGUF_TYPE_INT32 = 5, GGUF_TYPE_FLOAT32 = 6, GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8, GGUF_TYPE_ARRAY = 9, GGUF_TYPE_UINT64 = 10, GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
} gguf_vtype;

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

/* A string inside the mapped file: NOT NUL-terminated. */
typedef struct {
    uint64_t len;
    const char *ptr;
} gguf_str;

typedef struct {
    gguf_str key;
    gguf_vtype type;
    /* scalars (type != ARRAY): decoded value; integers in u/i, floats in f */
    union {
        uint64_t u;
        int64_t i;
        double f;
        bool b;
        gguf_str s;
    } v;
    /* arrays (type == ARRAY) */
    gguf_vtype arr_type;
    uint64_t arr_n;
    const void *arr_data;   /* first element in the file (numeric arrays; unaligned) */
    const gguf_str *arr_str;/* (arr_n) decoded strings, when arr_type == STRING */
} gguf_kv;

typedef struct {
    gguf_str name;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous (row) dimension; unused dims = 1 */
    ggml_type type;
    uint64_t offset;            /* relative to the data section */
    uint64_t nbytes;
    const void *data;           /* points into the mapping */
} gguf_tensor;

typedef struct gguf_file {
    uint32_t version;
    uint64_t n_kv, n_tensors;
    gguf_kv *kv;                /* (n_kv) */
    gguf_tensor *tensors;       /* (n_tensors) */
    uint64_t alignment;
    uint64_t data_offset;       /* start of the tensor data section in the file (may be
                                   past the end when n_tensors == 0: tokenizer-only files) */
    const uint8_t *base;        /* whole file */
    size_t size;
    bool mapped;                /* base is an mmap we own */
    void *scratch;              /* internal: string tables */
} gguf_file;

/* Opens and validates PATH. Returns NULL and writes a one-line reason (naming
 * the file, byte offset and what is wrong) into err on any problem, with *st
 * its kind (errkind.h): ENGINE_ERR_OOM when the mapping or the index could not
 * be had, ENGINE_ERR_INVALID for a missing, unreadable or malformed file
 * (ENGINE_OK on success). The caller owns the result; free with gguf_close.
 * st and err may be NULL. Messages look
 * like "m.gguf: offset 1234: tensor #3 ('blk.0.attn_q.weight'): unknown tensor type 99".
 * Rejected besides truncation: versions other than 2/3, duplicate keys or
 * tensor names, n_dims outside 1..4, ne of 0 or >= 2^63, overflowing shapes,
 * unknown types, offsets not aligned or past the end, overlapping tensors,
 * general.alignment that is not a uint32 power of two, arrays nested > 8 deep. */
gguf_file *gguf_open(const char *path, engine_status *st, char *err, size_t errlen);

/* Same on a caller-owned buffer, which must outlive the result (fuzzing, tests).
 * Messages name the file "<memory>". */
gguf_file *gguf_open_mem(const void *buf, size_t len, engine_status *st, char *err, size_t errlen);

void gguf_close(gguf_file *f); /* accepts NULL */

/* Lookups. Return NULL / -1 / false when absent or of an incompatible type. */
const gguf_kv *gguf_find(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
bool gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out); /* any integer type >= 0 */
bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out); /* any integer type in range */
bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
bool gguf_get_f32(const gguf_file *f, const char *key, float *out);    /* float or integer types */
bool gguf_get_bool(const gguf_file *f, const char *key, bool *out);
bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);
/* Copies a string value into buf (NUL-terminated, truncated to n-1). */
bool gguf_get_cstr(const gguf_file *f, const char *key, char *buf, size_t n);
/* Array of the given element type; *data points into the file (may be unaligned:
 * read with memcpy). For strings, use kv->arr_str. */
const gguf_kv *gguf_get_arr(const gguf_file *f, const char *key, gguf_vtype elem_type);

bool gguf_str_eq(gguf_str s, const char *cstr);

const char *gguf_vtype_name(int type);

/* ---- writer ---------------------------------------------------------- */

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_create(void);
void gguf_writer_destroy(gguf_writer *w); /* accepts NULL */

/* Metadata setters keep insertion order; keys and strings are copied. Setting
 * a key again replaces its value in place (a GGUF file has no duplicate keys). */
void gguf_writer_set_u8(gguf_writer *w, const char *key, uint8_t v);
void gguf_writer_set_i8(gguf_writer *w, const char *key, int8_t v);
void gguf_writer_set_u16(gguf_writer *w, const char *key, uint16_t v);
void gguf_writer_set_i16(gguf_writer *w, const char *key, int16_t v);
void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_writer_set_i64(gguf_writer *w, const char *key, int64_t v);
void gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
void gguf_writer_set_f64(gguf_writer *w, const char *key, double v);
void gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
void gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
void gguf_writer_set_strn(gguf_writer *w, const char *key, const char *v, size_t len);
/* Numeric array: n elements of elem_type, raw little-endian bytes copied. */
void gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_vtype elem_type, const void *data, uint64_t n);
/* String array; lens may be NULL for NUL-terminated strings. */
void gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, const size_t *lens, uint64_t n);
/* Copies every metadata pair of src whose key does not start with any of the
 * NULL-terminated skip prefixes (skip may be NULL). */
void gguf_writer_copy_kv(gguf_writer *w, const gguf_file *src, const char *const *skip_prefixes);

/* Adds a tensor; data (ggml_row_size(type, ne[0]) * ne[1]*ne[2]*ne[3] bytes) is
 * copied (data == NULL: zero-filled). Returns false (and leaves w unchanged) on
 * a bad shape/type or a name already added. */
bool gguf_writer_add_tensor(gguf_writer *w, const char *name, ggml_type type,
                            uint32_t n_dims, const uint64_t *ne, const void *data);
/* The same, taking ownership of data (malloc'd, the tensor's full size): no
 * copy, so a writer of many gigabytes holds each tensor once. data is freed
 * here when the tensor is refused. */
bool gguf_writer_add_tensor_take(gguf_writer *w, const char *name, ggml_type type,
                                 uint32_t n_dims, const uint64_t *ne, void *data);

/* Writes version 3 with 32-byte alignment (or the general.alignment key's value
 * if one was set: it must be a uint32 power of two). Writes PATH.tmpPID and
 * renames it over PATH, so readers never see half a file. Returns 0, or -1
 * with err filled. The writer stays usable (write again, destroy). */
int gguf_writer_write(gguf_writer *w, const char *path, char *err, size_t errlen);

#endif
