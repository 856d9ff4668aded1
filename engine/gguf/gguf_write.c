/* gguf_write.c — GGUF v3 writer: metadata and tensors collected in memory,
 * then one file written to a temporary name and renamed into place. The
 * reader is gguf_read.c. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
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

/* ---- writer ----------------------------------------------------------- */

typedef struct {
    char *key;
    size_t keylen;
    uint8_t *val;   /* serialized value: type (u32) then the value bytes */
    size_t vlen;
} wkv;

typedef struct {
    char *name;
    size_t namelen;
    ggml_type type;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes;
    void *data;
} wtensor;

struct gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
};

typedef struct {
    uint8_t *p;
    size_t n, cap;
} bytes;

static void b_put(bytes *b, const void *p, size_t n)
{
    if (n > SIZE_MAX - b->n) SPECD_DIE("gguf writer: value too large");
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n) cap = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
        b->p = xrealloc(b->p, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void b_u32(bytes *b, uint32_t v) { b_put(b, &v, 4); }
static void b_u64(bytes *b, uint64_t v) { b_put(b, &v, 8); }
static void b_str(bytes *b, const char *s, size_t n) { b_u64(b, n); b_put(b, s, n); }

gguf_writer *gguf_writer_create(void)
{
    return xcalloc(1, sizeof(gguf_writer));
}

void gguf_writer_destroy(gguf_writer *w)
{
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) { free(w->kv[i].key); free(w->kv[i].val); }
    for (size_t i = 0; i < w->n_t; i++) { free(w->t[i].name); free(w->t[i].data); }
    free(w->kv);
    free(w->t);
    free(w);
}

/* Takes ownership of b. A key set twice keeps its first position, new value. */
static void w_set(gguf_writer *w, const char *key, bytes *b)
{
    if (!w || !key) SPECD_DIE("gguf writer: NULL writer or key");
    size_t kl = strlen(key);
    for (size_t i = 0; i < w->n_kv; i++) {
        if (w->kv[i].keylen == kl && memcmp(w->kv[i].key, key, kl) == 0) {
            free(w->kv[i].val);
            w->kv[i].val = b->p;
            w->kv[i].vlen = b->n;
            return;
        }
    }
    if (w->n_kv == w->cap_kv) {
        w->cap_kv = w->cap_kv ? 2 * w->cap_kv : 16;
        w->kv = xrealloc(w->kv, w->cap_kv * sizeof *w->kv);
    }
    wkv *e = &w->kv[w->n_kv++];
    e->key = xmalloc(kl + 1);
    memcpy(e->key, key, kl + 1);
    e->keylen = kl;
    e->val = b->p;
    e->vlen = b->n;
}

static void w_scalar(gguf_writer *w, const char *key, gguf_vtype t, const void *v)
{
    bytes b = {0};
    b_u32(&b, t);
    b_put(&b, v, k_vtype_size[t]);
    w_set(w, key, &b);
}

void gguf_writer_set_u8(gguf_writer *w, const char *key, uint8_t v) { w_scalar(w, key, GGUF_TYPE_UINT8, &v); }
void gguf_writer_set_i8(gguf_writer *w, const char *key, int8_t v) { w_scalar(w, key, GGUF_TYPE_INT8, &v); }
void gguf_writer_set_u16(gguf_writer *w, const char *key, uint16_t v) { w_scalar(w, key, GGUF_TYPE_UINT16, &v); }
void gguf_writer_set_i16(gguf_writer *w, const char *key, int16_t v) { w_scalar(w, key, GGUF_TYPE_INT16, &v); }
void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) { w_scalar(w, key, GGUF_TYPE_UINT32, &v); }
void gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) { w_scalar(w, key, GGUF_TYPE_INT32, &v); }
void gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v) { w_scalar(w, key, GGUF_TYPE_UINT64, &v); }
void gguf_writer_set_i64(gguf_writer *w, const char *key, int64_t v) { w_scalar(w, key, GGUF_TYPE_INT64, &v); }
void gguf_writer_set_f32(gguf_writer *w, const char *key, float v) { w_scalar(w, key, GGUF_TYPE_FLOAT32, &v); }
void gguf_writer_set_f64(gguf_writer *w, const char *key, double v) { w_scalar(w, key, GGUF_TYPE_FLOAT64, &v); }

void gguf_writer_set_bool(gguf_writer *w, const char *key, bool v)
{
    uint8_t x = v ? 1 : 0;
    w_scalar(w, key, GGUF_TYPE_BOOL, &x);
}

void gguf_writer_set_strn(gguf_writer *w, const char *key, const char *v, size_t len)
{
    bytes b = {0};
    b_u32(&b, GGUF_TYPE_STRING);
    b_str(&b, v, len);
    w_set(w, key, &b);
}

void gguf_writer_set_str(gguf_writer *w, const char *key, const char *v)
{
    gguf_writer_set_strn(w, key, v ? v : "", v ? strlen(v) : 0);
}

void gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_vtype elem_type, const void *data, uint64_t n)
{
    size_t es = vtype_size((uint32_t)elem_type);
    if (!es) SPECD_DIE("gguf_writer_set_arr('%s'): element type %d is not a numeric type", key, (int)elem_type);
    if (n > SIZE_MAX / es) SPECD_DIE("gguf_writer_set_arr('%s'): %" PRIu64 " elements is too many", key, n);
    bytes b = {0};
    b_u32(&b, GGUF_TYPE_ARRAY);
    b_u32(&b, elem_type);
    b_u64(&b, n);
    b_put(&b, data, (size_t)n * es);
    w_set(w, key, &b);
}

void gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, const size_t *lens, uint64_t n)
{
    bytes b = {0};
    b_u32(&b, GGUF_TYPE_ARRAY);
    b_u32(&b, GGUF_TYPE_STRING);
    b_u64(&b, n);
    for (uint64_t i = 0; i < n; i++) {
        const char *s = strs[i] ? strs[i] : "";
        b_str(&b, s, lens ? lens[i] : strlen(s));
    }
    w_set(w, key, &b);
}

void gguf_writer_copy_kv(gguf_writer *w, const gguf_file *src, const char *const *skip_prefixes)
{
    if (!w || !src) SPECD_DIE("gguf_writer_copy_kv: NULL writer or source");
    const gguf_priv *pv = src->scratch;
    for (uint64_t i = 0; i < src->n_kv; i++) {
        const gguf_kv *kv = &src->kv[i];
        bool skip = false;
        for (const char *const *p = skip_prefixes; p && *p && !skip; p++) {
            size_t pl = strlen(*p);
            skip = kv->key.len >= pl && memcmp(kv->key.ptr, *p, pl) == 0;
        }
        if (skip) continue;
        /* The value's raw bytes (type tag onward) are valid little-endian GGUF as is. */
        const uint8_t *start = (const uint8_t *)kv->key.ptr + kv->key.len;
        size_t vlen = (size_t)(pv->kv_end[i] - (uint64_t)(start - src->base));
        char *key = xmalloc((size_t)kv->key.len + 1);
        memcpy(key, kv->key.ptr, (size_t)kv->key.len);
        key[kv->key.len] = 0;
        bytes b = {0};
        b_put(&b, start, vlen);
        w_set(w, key, &b);
        free(key);
    }
}

static bool add_tensor(gguf_writer *w, const char *name, ggml_type type, uint32_t n_dims, const uint64_t *ne,
                       const void *data, void *owned);

bool gguf_writer_add_tensor(gguf_writer *w, const char *name, ggml_type type,
                            uint32_t n_dims, const uint64_t *ne, const void *data)
{
    return add_tensor(w, name, type, n_dims, ne, data, NULL);
}

bool gguf_writer_add_tensor_take(gguf_writer *w, const char *name, ggml_type type,
                                 uint32_t n_dims, const uint64_t *ne, void *data)
{
    if (!add_tensor(w, name, type, n_dims, ne, NULL, data)) {
        free(data);
        return false;
    }
    return true;
}

static bool add_tensor(gguf_writer *w, const char *name, ggml_type type, uint32_t n_dims, const uint64_t *ne,
                       const void *data, void *owned)
{
    if (!w || !name || !ne || n_dims < 1 || n_dims > GGUF_MAX_DIMS) return false;
    uint64_t row = ggml_row_size(type, ne[0]);
    if (row == 0) return false;
    uint64_t nb = row, nel = 1;
    wtensor t = {.type = type, .n_dims = n_dims};
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t.ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] == 0 || ne[d] > (uint64_t)INT64_MAX / nel) return false;
        nel *= ne[d];
        t.ne[d] = ne[d];
        if (d > 0) {
            if (ne[d] > UINT64_MAX / nb) return false;
            nb *= ne[d];
        }
    }
    if (nb > SIZE_MAX - 64) return false;
    size_t nl = strlen(name);
    for (size_t i = 0; i < w->n_t; i++)
        if (w->t[i].namelen == nl && memcmp(w->t[i].name, name, nl) == 0) return false;
    t.nbytes = nb;
    t.name = xmalloc(nl + 1);
    memcpy(t.name, name, nl + 1);
    t.namelen = nl;
    if (owned) {
        t.data = owned;
    } else if (data) {
        t.data = xmalloc((size_t)nb);
        memcpy(t.data, data, (size_t)nb);
    } else {
        t.data = xcalloc(1, (size_t)nb);
    }
    if (w->n_t == w->cap_t) {
        w->cap_t = w->cap_t ? 2 * w->cap_t : 16;
        w->t = xrealloc(w->t, w->cap_t * sizeof *w->t);
    }
    w->t[w->n_t++] = t;
    return true;
}

static bool put_pad(FILE *fp, uint64_t pos, uint64_t align)
{
    static const uint8_t zeros[256];
    uint64_t pad = (align - pos % align) % align;
    while (pad) {
        size_t n = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
        if (fwrite(zeros, 1, n, fp) != n) return false;
        pad -= n;
    }
    return true;
}

int gguf_writer_write(gguf_writer *w, const char *path, char *err, size_t errlen)
{
    if (!w || !path) SPECD_DIE("gguf_writer_write: NULL writer or path");
    if (err && errlen) err[0] = 0;
    uint64_t align = GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment") != 0) continue;
        uint32_t t, v = 0;
        memcpy(&t, w->kv[i].val, 4);
        if (t == GGUF_TYPE_UINT32) memcpy(&v, w->kv[i].val + 4, 4);
        if (t != GGUF_TYPE_UINT32 || v == 0 || (v & (v - 1))) {
            if (err) snprintf(err, errlen, "%s: general.alignment must be a uint32 power of two", path);
            return -1;
        }
        align = v;
    }

    bytes h = {0};
    b_put(&h, GGUF_MAGIC_BYTES, 4);
    b_u32(&h, 3);
    b_u64(&h, w->n_t);
    b_u64(&h, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        b_str(&h, w->kv[i].key, w->kv[i].keylen);
        b_put(&h, w->kv[i].val, w->kv[i].vlen);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        b_str(&h, t->name, t->namelen);
        b_u32(&h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) b_u64(&h, t->ne[d]);
        b_u32(&h, t->type);
        b_u64(&h, off);
        off += (t->nbytes + align - 1) / align * align;
    }

    size_t plen = strlen(path);
    char *tmp = xmalloc(plen + 32);
    snprintf(tmp, plen + 32, "%s.tmp%ld", path, (long)getpid());
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        if (err) snprintf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        free(h.p);
        return -1;
    }
    setvbuf(fp, NULL, _IOFBF, 1 << 20);
    bool ok = fwrite(h.p, 1, h.n, fp) == h.n && put_pad(fp, h.n, align);
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        ok = fwrite(t->data, 1, (size_t)t->nbytes, fp) == t->nbytes && put_pad(fp, t->nbytes, align);
    }
    int e = errno;
    free(h.p);
    if (fclose(fp) != 0 && ok) { ok = false; e = errno; }
    if (ok && rename(tmp, path) != 0) {
        e = errno;
        ok = false;
    }
    if (!ok) {
        if (err) snprintf(err, errlen, "%s: write failed: %s", path, strerror(e));
        unlink(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}
