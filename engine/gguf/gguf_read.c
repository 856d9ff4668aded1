/* gguf_read.c — GGUF v2/v3 reader: validate everything up front, then
 * zero-copy pointers into the mapping; the lookups. Knows nothing about llama.
 * The writer is gguf_write.c. An allocation that fails is reported (ENGINE_ERR_OOM),
 * not fatal: a draft model that does not fit must not take the server down. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_CLOEXEC, strcasecmp when built outside meson (fuzzer) */
#endif
#include "engine/gguf/gguf_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAX_NEST 8            /* arrays of arrays deeper than this are refused */
#define GGUF_MAX_KV (1u << 20)     /* sanity caps on counts, on top of the byte caps */
#define GGUF_MAX_TENSORS (1u << 20)
#define KV_MIN_BYTES 13            /* key length (8) + type (4) + smallest value (1) */
#define TENSOR_MIN_BYTES 32        /* name length (8) + n_dims (4) + ne[0] (8) + type (4) + offset (8) */

/* ---- value types ------------------------------------------------------ */

static const char *const k_vtype_names[GGUF_TYPE_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool",
    "string", "array", "uint64", "int64", "float64",
};

const char *gguf_vtype_name(int type)
{
    if (type < 0 || type >= GGUF_TYPE_COUNT) return NULL;
    return k_vtype_names[type];
}

/* ---- name hashing (keys and tensor names) ------------------------------ */

static uint64_t hash_bytes(const void *p, uint64_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static bool str_eq_bytes(gguf_str s, const char *p, uint64_t n)
{
    return s.len == n && (n == 0 || memcmp(s.ptr, p, n) == 0);
}



/* Finds NAME; get(i) yields the name of entry i. Returns index or SIZE_MAX. */
#define INDEX_FIND(ix, name_of, p, n, out) do { \
    (out) = SIZE_MAX; \
    if (!(ix)->slot) break; \
    size_t m_ = (ix)->cap - 1, h_ = (size_t)hash_bytes((p), (n)) & m_; \
    while ((ix)->slot[h_]) { \
        size_t i_ = (ix)->slot[h_] - 1; \
        if (str_eq_bytes(name_of(i_), (p), (n))) { (out) = i_; break; } \
        h_ = (h_ + 1) & m_; \
    } \
} while (0)

/* Inserts index i for name (p, n) unless present; returns false if present. */
#define INDEX_INSERT(ix, name_of, p, n, i, ok) do { \
    size_t m_ = (ix)->cap - 1, h_ = (size_t)hash_bytes((p), (n)) & m_; \
    (ok) = true; \
    while ((ix)->slot[h_]) { \
        if (str_eq_bytes(name_of((ix)->slot[h_] - 1), (p), (n))) { (ok) = false; break; } \
        h_ = (h_ + 1) & m_; \
    } \
    if (ok) (ix)->slot[h_] = (i) + 1; \
} while (0)

/* ---- reader ----------------------------------------------------------- */

typedef struct {
    const uint8_t *base;
    uint64_t size, pos;
    const char *name;   /* file name for messages */
    char ctx[256];      /* "metadata key #3 ('foo')" etc. */
    char *err;
    size_t errlen;
    bool failed;
    bool oom;           /* the failure was an allocation (the file may be fine) */
} reader;

/* Writes at most 48 visible characters of s, escaping bytes that are not printable. */
static void fmt_name(char *out, size_t outlen, const char *p, uint64_t n)
{
    size_t o = 0;
    for (uint64_t i = 0; i < n && o + 8 < outlen; i++) {
        unsigned char c = (unsigned char)p[i];
        if (i >= 48) { memcpy(out + o, "...", 3); o += 3; break; }
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') out[o++] = (char)c;
        else o += (size_t)snprintf(out + o, outlen - o, "\\x%02x", c);
    }
    out[o] = 0;
}

static bool rfail(reader *r, uint64_t off, const char *fmt, ...)
{
    if (r->failed) return false;
    r->failed = true;
    if (!r->err || !r->errlen) return false;
    int n = snprintf(r->err, r->errlen, "%s: offset %" PRIu64 ": %s%s", r->name, off,
                     r->ctx, r->ctx[0] ? ": " : "");
    if (n < 0 || (size_t)n >= r->errlen) return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + n, r->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return false;
}

/* calloc for the index of the file; NULL (reported, r->oom set) when out of memory. */
static void *ralloc(reader *r, uint64_t n, size_t sz, const char *what)
{
    void *p = n <= SIZE_MAX / (sz ? sz : 1) ? calloc(n ? (size_t)n : 1, sz ? sz : 1) : NULL;
    if (!p && !r->failed) {
        r->failed = r->oom = true;
        if (r->err && r->errlen)
            snprintf(r->err, r->errlen, "%s: out of memory for the GGUF index (%" PRIu64 " x %zu bytes of %s)",
                     r->name, n, sz, what);
    }
    return p;
}

static uint64_t rleft(const reader *r) { return r->size - r->pos; }

/* An empty index with room for n names; false (reported) when out of memory. */
static bool index_init(reader *r, name_index *ix, uint64_t n, const char *what)
{
    size_t cap = 8;
    while (cap < 2 * n) cap *= 2;
    ix->slot = ralloc(r, cap, sizeof *ix->slot, what);
    ix->cap = cap;
    return ix->slot != NULL;
}

static bool rneed(reader *r, uint64_t n, const char *what)
{
    if (n <= rleft(r)) return true;
    return rfail(r, r->pos, "%s: %" PRIu64 " bytes needed but only %" PRIu64
                 " left (file size %" PRIu64 ", truncated?)", what, n, rleft(r), r->size);
}

static bool rd_u32(reader *r, uint32_t *v, const char *what)
{
    if (!rneed(r, 4, what)) return false;
    memcpy(v, r->base + r->pos, 4);
    r->pos += 4;
    return true;
}

static bool rd_u64(reader *r, uint64_t *v, const char *what)
{
    if (!rneed(r, 8, what)) return false;
    memcpy(v, r->base + r->pos, 8);
    r->pos += 8;
    return true;
}

static bool rd_str(reader *r, gguf_str *s, const char *what)
{
    uint64_t at = r->pos, len;
    if (!rd_u64(r, &len, what)) return false;
    if (len > rleft(r))
        return rfail(r, at, "%s length %" PRIu64 " past end of file (size %" PRIu64 ")",
                     what, len, r->size);
    s->len = len;
    s->ptr = (const char *)r->base + r->pos;
    r->pos += len;
    return true;
}

/* Validates an array body (element type, count, elements) at r->pos.
 * When kv is set, fills its array fields; string elements go to *strs. */
static bool rd_array(reader *r, int depth, gguf_kv *kv, gguf_str **strs)
{
    uint64_t at = r->pos;
    uint32_t et;
    uint64_t n;
    if (!rd_u32(r, &et, "array element type")) return false;
    if (et >= GGUF_TYPE_COUNT)
        return rfail(r, at, "bad array element type %" PRIu32, et);
    if (!rd_u64(r, &n, "array length")) return false;
    size_t es = vtype_size(et);
    uint64_t min_elem = es ? es : et == GGUF_TYPE_STRING ? 8 : 12;
    if (n > rleft(r) / min_elem)
        return rfail(r, at + 4, "array of %" PRIu64 " %s past end of file (%" PRIu64
                     " bytes left, at least %" PRIu64 " per element)",
                     n, k_vtype_names[et], rleft(r), min_elem);
    if (kv) {
        kv->arr_type = (gguf_vtype)et;
        kv->arr_n = n;
        kv->arr_data = r->base + r->pos;
    }
    if (es) {
        r->pos += n * es;
        return true;
    }
    if (et == GGUF_TYPE_STRING) {
        gguf_str *out = NULL;
        if (kv && strs) {
            out = *strs;
            kv->arr_str = out;
            *strs += n;
        }
        for (uint64_t i = 0; i < n; i++) {
            gguf_str s;
            if (!rd_str(r, &s, "array string")) return false;
            if (out) out[i] = s;
        }
        return true;
    }
    if (depth + 1 >= GGUF_MAX_NEST)
        return rfail(r, at, "arrays nested more than %d deep", GGUF_MAX_NEST);
    for (uint64_t i = 0; i < n; i++)
        if (!rd_array(r, depth + 1, NULL, NULL)) return false;
    return true;
}

static void decode_scalar(gguf_kv *kv, uint32_t t, const uint8_t *p)
{
    memset(&kv->v, 0, sizeof kv->v);
    switch (t) {
    case GGUF_TYPE_UINT8: kv->v.u = p[0]; break;
    case GGUF_TYPE_INT8: { int8_t x; memcpy(&x, p, 1); kv->v.i = x; } break;
    case GGUF_TYPE_UINT16: { uint16_t x; memcpy(&x, p, 2); kv->v.u = x; } break;
    case GGUF_TYPE_INT16: { int16_t x; memcpy(&x, p, 2); kv->v.i = x; } break;
    case GGUF_TYPE_UINT32: { uint32_t x; memcpy(&x, p, 4); kv->v.u = x; } break;
    case GGUF_TYPE_INT32: { int32_t x; memcpy(&x, p, 4); kv->v.i = x; } break;
    case GGUF_TYPE_FLOAT32: { float x; memcpy(&x, p, 4); kv->v.f = x; } break;
    case GGUF_TYPE_BOOL: kv->v.b = p[0] != 0; break;
    case GGUF_TYPE_UINT64: memcpy(&kv->v.u, p, 8); break;
    case GGUF_TYPE_INT64: memcpy(&kv->v.i, p, 8); break;
    case GGUF_TYPE_FLOAT64: memcpy(&kv->v.f, p, 8); break;
    default: SPECD_DIE("decode_scalar: type %" PRIu32, t);
    }
}

/* Reads one metadata value of type t at r->pos into kv. */
static bool rd_value(reader *r, uint32_t t, gguf_kv *kv, gguf_str **strs)
{
    size_t es = vtype_size(t);
    if (es) {
        if (!rneed(r, es, k_vtype_names[t])) return false;
        decode_scalar(kv, t, r->base + r->pos);
        r->pos += es;
        return true;
    }
    if (t == GGUF_TYPE_STRING) return rd_str(r, &kv->v.s, "string");
    return rd_array(r, 0, kv, strs);
}

/* Name accessors for INDEX_FIND / INDEX_INSERT; they use a variable named f. */
#define KV_NAME(j) (f->kv[(j)].key)
#define T_NAME(j) (f->tensors[(j)].name)

static void set_ctx(reader *r, const char *what, uint64_t i, const gguf_str *name)
{
    char nm[200];
    if (name) {
        fmt_name(nm, sizeof nm, name->ptr, name->len);
        snprintf(r->ctx, sizeof r->ctx, "%.24s #%" PRIu64 " ('%s')", what, i, nm);
    } else {
        snprintf(r->ctx, sizeof r->ctx, "%.24s #%" PRIu64, what, i);
    }
}

/* Sort helper for the overlap check. */
static int cmp_tensor_off(const void *a, const void *b)
{
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static gguf_file *parse(const uint8_t *base, size_t size, const char *name, engine_status *st, char *err,
                        size_t errlen)
{
    reader r = {.base = base, .size = size, .name = name, .err = err, .errlen = errlen};
    if (err && errlen) err[0] = 0;
    gguf_file *f = ralloc(&r, 1, sizeof *f, "the file");
    gguf_priv *pv = f ? ralloc(&r, 1, sizeof *pv, "the file") : NULL;
    if (!pv) {
        free(f);
        engine_status_set(st, ENGINE_ERR_OOM);
        return NULL;
    }
    f->scratch = pv;
    f->base = base;
    f->size = size;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;

    /* header */
    if (size < 4 || memcmp(base, GGUF_MAGIC_BYTES, 4) != 0) {
        uint32_t m = 0;
        if (size) memcpy(&m, base, size < 4 ? size : 4);
        rfail(&r, 0, "bad magic 0x%08" PRIx32 " (not a GGUF file)", m);
        goto bad;
    }
    r.pos = 4;
    if (!rd_u32(&r, &f->version, "version")) goto bad;
    if (f->version == 1) {
        rfail(&r, 4, "GGUF version 1 is not supported (only versions 2 and 3; re-convert the model)");
        goto bad;
    }
    if (f->version == 0x02000000u || f->version == 0x03000000u) {
        rfail(&r, 4, "big-endian GGUF (version %u byte-swapped) is not supported", (unsigned)(f->version >> 24));
        goto bad;
    }
    if (f->version != 2 && f->version != 3) {
        rfail(&r, 4, "unsupported GGUF version %" PRIu32 " (only 2 and 3)", f->version);
        goto bad;
    }
    uint64_t nt_at = r.pos;
    if (!rd_u64(&r, &f->n_tensors, "n_tensors")) goto bad;
    uint64_t nkv_at = r.pos;
    if (!rd_u64(&r, &f->n_kv, "n_kv")) goto bad;
    uint64_t nt = f->n_tensors, nkv = f->n_kv;
    if (nkv > GGUF_MAX_KV || nkv > rleft(&r) / KV_MIN_BYTES) {
        rfail(&r, nkv_at, "n_kv %" PRIu64 " is implausible (%" PRIu64 " bytes left, limit %u)",
              nkv, rleft(&r), GGUF_MAX_KV);
        goto bad;
    }
    if (nt > GGUF_MAX_TENSORS || nt > (rleft(&r) - nkv * KV_MIN_BYTES) / TENSOR_MIN_BYTES) {
        rfail(&r, nt_at, "n_tensors %" PRIu64 " is implausible (%" PRIu64 " bytes left, limit %u)",
              nt, rleft(&r), GGUF_MAX_TENSORS);
        goto bad;
    }
    f->n_kv = 0; /* counts of entries filled so far: gguf_close relies on them */
    f->n_tensors = 0;

    /* metadata: first pass validates and counts string-array elements so the
     * string table is one allocation bounded by the file size. */
    uint64_t kv_start = r.pos, n_strs = 0;
    for (uint64_t i = 0; i < nkv; i++) {
        gguf_str key;
        uint32_t t;
        gguf_kv tmp = {0};
        set_ctx(&r, "metadata key", i, NULL);
        if (!rd_str(&r, &key, "key")) goto bad;
        set_ctx(&r, "metadata key", i, &key);
        uint64_t t_at = r.pos;
        if (!rd_u32(&r, &t, "value type")) goto bad;
        if (t >= GGUF_TYPE_COUNT) {
            rfail(&r, t_at, "bad value type %" PRIu32, t);
            goto bad;
        }
        if (!rd_value(&r, t, &tmp, NULL)) goto bad;
        if (t == GGUF_TYPE_ARRAY && tmp.arr_type == GGUF_TYPE_STRING) n_strs += tmp.arr_n;
    }
    /* n_strs <= file size / 8, so this is at most twice the file size. */
    if (!(f->kv = ralloc(&r, nkv, sizeof *f->kv, "metadata")) ||
        !(pv->kv_end = ralloc(&r, nkv, sizeof *pv->kv_end, "metadata")) ||
        !(pv->strs = ralloc(&r, n_strs, sizeof *pv->strs, "strings")))
        goto bad;
    if (!index_init(&r, &pv->kv_ix, nkv, "the key index")) goto bad;
    r.pos = kv_start;
    gguf_str *strs = pv->strs;
    for (uint64_t i = 0; i < nkv; i++) {
        gguf_kv *kv = &f->kv[i];
        uint32_t t;
        uint64_t at = r.pos;
        if (!rd_str(&r, &kv->key, "key") || !rd_u32(&r, &t, "value type")) goto bad;
        kv->type = (gguf_vtype)t;
        if (!rd_value(&r, t, kv, &strs)) goto bad;
        pv->kv_end[i] = r.pos;
        f->n_kv = i + 1;
        bool ok;
        INDEX_INSERT(&pv->kv_ix, KV_NAME, kv->key.ptr, kv->key.len, (size_t)i, ok);
        if (!ok) {
            set_ctx(&r, "metadata key", i, &kv->key);
            rfail(&r, at, "duplicate key");
            goto bad;
        }
    }
    r.ctx[0] = 0;

    /* alignment */
    const gguf_kv *al = gguf_find(f, "general.alignment");
    if (al) {
        uint64_t at = (uint64_t)((const uint8_t *)al->key.ptr - base);
        if (al->type != GGUF_TYPE_UINT32) {
            rfail(&r, at, "general.alignment has type %s, expected uint32", k_vtype_names[al->type]);
            goto bad;
        }
        if (al->v.u == 0 || (al->v.u & (al->v.u - 1))) {
            rfail(&r, at, "general.alignment %" PRIu64 " is not a power of two", al->v.u);
            goto bad;
        }
        f->alignment = al->v.u;
    }

    /* tensor infos */
    if (!(f->tensors = ralloc(&r, nt, sizeof *f->tensors, "tensor infos"))) goto bad;
    if (!index_init(&r, &pv->t_ix, nt, "the tensor index")) goto bad;
    for (uint64_t i = 0; i < nt; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t at = r.pos;
        set_ctx(&r, "tensor", i, NULL);
        if (!rd_str(&r, &t->name, "tensor name")) goto bad;
        set_ctx(&r, "tensor", i, &t->name);
        uint64_t nd_at = r.pos;
        if (!rd_u32(&r, &t->n_dims, "n_dims")) goto bad;
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS) {
            rfail(&r, nd_at, "n_dims %" PRIu32 " out of range 1..%d", t->n_dims, GGUF_MAX_DIMS);
            goto bad;
        }
        for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t ne_at = r.pos;
            if (!rd_u64(&r, &t->ne[d], "ne")) goto bad;
            if (t->ne[d] == 0 || t->ne[d] > (uint64_t)INT64_MAX) {
                rfail(&r, ne_at, "ne[%" PRIu32 "] = %" PRIu64 " out of range 1..2^63-1", d, t->ne[d]);
                goto bad;
            }
        }
        uint64_t ty_at = r.pos;
        uint32_t ty;
        if (!rd_u32(&r, &ty, "tensor type")) goto bad;
        if (ggml_type_size((int)ty) == 0) {
            rfail(&r, ty_at, "unknown tensor type %" PRIu32, ty);
            goto bad;
        }
        t->type = (ggml_type)ty;
        if (!rd_u64(&r, &t->offset, "tensor offset")) goto bad;
        uint64_t nel = t->ne[0];
        for (int d = 1; d < GGUF_MAX_DIMS; d++) {
            if (t->ne[d] > (uint64_t)INT64_MAX / nel) {
                rfail(&r, nd_at, "shape [%" PRIu64 ", %" PRIu64 ", %" PRIu64 ", %" PRIu64
                      "] overflows (more than 2^63 elements)", t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
                goto bad;
            }
            nel *= t->ne[d];
        }
        uint64_t row = ggml_row_size(t->type, t->ne[0]);
        if (row == 0 && t->ne[0] % ggml_blck_size(t->type) == 0) {
            rfail(&r, nd_at, "row size of ne[0] = %" PRIu64 " of type %s overflows",
                  t->ne[0], ggml_type_name(t->type));
            goto bad;
        }
        if (row == 0) {
            rfail(&r, nd_at, "ne[0] = %" PRIu64 " is not a multiple of the %s block size %" PRIu32,
                  t->ne[0], ggml_type_name(t->type), ggml_blck_size(t->type));
            goto bad;
        }
        /* nel fits, and type_size/blck <= 292/256 < 2, so overflow is still possible: check. */
        uint64_t nb = row;
        for (int d = 1; d < GGUF_MAX_DIMS; d++) {
            if (t->ne[d] > UINT64_MAX / nb) {
                rfail(&r, nd_at, "byte size of shape [%" PRIu64 ", %" PRIu64 ", %" PRIu64 ", %" PRIu64
                      "] of type %s overflows", t->ne[0], t->ne[1], t->ne[2], t->ne[3],
                      ggml_type_name(t->type));
                goto bad;
            }
            nb *= t->ne[d];
        }
        t->nbytes = nb;
        f->n_tensors = i + 1;
        bool ok;
        INDEX_INSERT(&pv->t_ix, T_NAME, t->name.ptr, t->name.len, (size_t)i, ok);
        if (!ok) {
            rfail(&r, at, "duplicate tensor name");
            goto bad;
        }
    }
    r.ctx[0] = 0;

    /* data section */
    uint64_t end = r.pos;
    f->data_offset = (end + f->alignment - 1) / f->alignment * f->alignment; /* end < 2^63, alignment <= 2^31 */
    if (nt && f->data_offset > size) {
        rfail(&r, end, "data section starts at %" PRIu64 ", past end of file (size %" PRIu64 ")",
              f->data_offset, r.size);
        goto bad;
    }
    uint64_t data_len = f->data_offset <= size ? size - f->data_offset : 0;
    for (uint64_t i = 0; i < nt; i++) {
        gguf_tensor *t = &f->tensors[i];
        set_ctx(&r, "tensor", i, &t->name);
        uint64_t at = (uint64_t)((const uint8_t *)t->name.ptr - base) + t->name.len + 4 + 8 * t->n_dims + 4;
        if (t->offset % f->alignment) {
            rfail(&r, at, "offset %" PRIu64 " is not a multiple of the alignment %" PRIu64,
                  t->offset, f->alignment);
            goto bad;
        }
        if (t->offset > data_len || t->nbytes > data_len - t->offset) {
            rfail(&r, at, "data [%" PRIu64 ", +%" PRIu64 ") of the data section (which starts at %"
                  PRIu64 ") runs past end of file (size %" PRIu64 ")",
                  t->offset, t->nbytes, f->data_offset, r.size);
            goto bad;
        }
        t->data = base + f->data_offset + t->offset;
    }
    r.ctx[0] = 0;
    if (nt > 1) {
        const gguf_tensor **order = ralloc(&r, nt, sizeof *order, "the overlap check");
        if (!order) goto bad;
        for (uint64_t i = 0; i < nt; i++) order[i] = &f->tensors[i];
        qsort(order, nt, sizeof *order, cmp_tensor_off);
        for (uint64_t i = 1; i < nt; i++) {
            const gguf_tensor *a = order[i - 1], *b = order[i];
            if (a->offset + a->nbytes > b->offset) {
                char na[256], nb2[256];
                fmt_name(na, sizeof na, a->name.ptr, a->name.len);
                fmt_name(nb2, sizeof nb2, b->name.ptr, b->name.len);
                rfail(&r, f->data_offset + b->offset, "tensors '%s' and '%s' overlap", na, nb2);
                free(order);
                goto bad;
            }
        }
        free(order);
    }
    engine_status_set(st, ENGINE_OK);
    return f;
bad:
    if (err && errlen && !err[0]) snprintf(err, errlen, "%s: invalid GGUF file", name);
    engine_status_set(st, r.oom ? ENGINE_ERR_OOM : ENGINE_ERR_INVALID);
    gguf_close(f);
    return NULL;
}

gguf_file *gguf_open_mem(const void *buf, size_t len, engine_status *st, char *err, size_t errlen)
{
    static const uint8_t empty[1];
    return parse(buf ? buf : empty, buf ? len : 0, "<memory>", st, err, errlen);
}

gguf_file *gguf_open(const char *path, engine_status *st, char *err, size_t errlen)
{
    if (err && errlen) err[0] = 0;
    engine_status_set(st, ENGINE_ERR_INVALID); /* until it has been read */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (err) snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        if (err) snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        if (err) snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    size_t size = (size_t)sb.st_size;
    if (size < 4) {
        if (err) snprintf(err, errlen, "%s: file is %zu bytes, too small for GGUF (not a GGUF file)", path, size);
        close(fd);
        return NULL;
    }
    void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) {
        /* ENOMEM: no address space left for the mapping */
        if (e == ENOMEM) engine_status_set(st, ENGINE_ERR_OOM);
        if (err)
            snprintf(err, errlen, "%s: %scannot mmap %zu bytes: %s", path, e == ENOMEM ? "out of memory: " : "", size,
                     strerror(e));
        return NULL;
    }
    gguf_file *f = parse(p, size, path, st, err, errlen);
    if (!f) {
        munmap(p, size);
        return NULL;
    }
    f->mapped = true;
    return f;
}

void gguf_close(gguf_file *f)
{
    if (!f) return;
    gguf_priv *pv = f->scratch;
    if (pv) {
        free(pv->strs);
        free(pv->kv_end);
        free(pv->kv_ix.slot);
        free(pv->t_ix.slot);
        free(pv);
    }
    free(f->kv);
    free(f->tensors);
    if (f->mapped) munmap((void *)f->base, f->size);
    free(f);
}

/* ---- lookups ---------------------------------------------------------- */

bool gguf_str_eq(gguf_str s, const char *cstr)
{
    return cstr && str_eq_bytes(s, cstr, strlen(cstr));
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key)
{
    if (!f || !key) return NULL;
    const gguf_priv *pv = f->scratch;
    size_t i;
    INDEX_FIND(&pv->kv_ix, KV_NAME, key, strlen(key), i);
    return i == SIZE_MAX || i >= f->n_kv ? NULL : &f->kv[i];
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name)
{
    if (!f || !name) return NULL;
    const gguf_priv *pv = f->scratch;
    size_t i;
    INDEX_FIND(&pv->t_ix, T_NAME, name, strlen(name), i);
    return i == SIZE_MAX || i >= f->n_tensors ? NULL : &f->tensors[i];
}

static bool is_signed_int(gguf_vtype t)
{
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_INT64;
}

static bool is_unsigned_int(gguf_vtype t)
{
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 || t == GGUF_TYPE_UINT64;
}

bool gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out)
{
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return false;
    if (is_unsigned_int(kv->type)) { *out = kv->v.u; return true; }
    if (is_signed_int(kv->type) && kv->v.i >= 0) { *out = (uint64_t)kv->v.i; return true; }
    return false;
}

bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out)
{
    uint64_t v;
    if (!gguf_get_u64(f, key, &v) || v > UINT32_MAX) return false;
    *out = (uint32_t)v;
    return true;
}

bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out)
{
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return false;
    if (is_signed_int(kv->type)) { *out = kv->v.i; return true; }
    if (is_unsigned_int(kv->type) && kv->v.u <= (uint64_t)INT64_MAX) { *out = (int64_t)kv->v.u; return true; }
    return false;
}

bool gguf_get_f32(const gguf_file *f, const char *key, float *out)
{
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return false;
    if (kv->type == GGUF_TYPE_FLOAT32 || kv->type == GGUF_TYPE_FLOAT64) { *out = (float)kv->v.f; return true; }
    if (is_signed_int(kv->type)) { *out = (float)kv->v.i; return true; }
    if (is_unsigned_int(kv->type)) { *out = (float)kv->v.u; return true; }
    return false;
}

bool gguf_get_bool(const gguf_file *f, const char *key, bool *out)
{
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv || kv->type != GGUF_TYPE_BOOL) return false;
    *out = kv->v.b;
    return true;
}

bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out)
{
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv || kv->type != GGUF_TYPE_STRING) return false;
    *out = kv->v.s;
    return true;
}

bool gguf_get_cstr(const gguf_file *f, const char *key, char *buf, size_t n)
{
    gguf_str s;
    if (!buf || n == 0 || !gguf_get_str(f, key, &s)) return false;
    size_t m = s.len < n - 1 ? (size_t)s.len : n - 1;
    if (m) memcpy(buf, s.ptr, m);
    buf[m] = 0;
    return true;
}

const gguf_kv *gguf_get_arr(const gguf_file *f, const char *key, gguf_vtype elem_type)
{
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv || kv->type != GGUF_TYPE_ARRAY || kv->arr_type != elem_type) return NULL;
    return kv;
}

