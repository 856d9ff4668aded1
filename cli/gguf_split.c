/* gguf_split.c — merge / split GGUF files (llama.cpp's split layout), writing
 * the header from the parsed metadata and streaming tensor data. */
#include "cli/gguf_split.h"
#include "engine/gguf/gguf.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const int vsize[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_UINT8] = 1, [GGUF_TYPE_INT8] = 1,   [GGUF_TYPE_UINT16] = 2,  [GGUF_TYPE_INT16] = 2,
    [GGUF_TYPE_UINT32] = 4, [GGUF_TYPE_INT32] = 4, [GGUF_TYPE_FLOAT32] = 4, [GGUF_TYPE_BOOL] = 1,
    [GGUF_TYPE_UINT64] = 8, [GGUF_TYPE_INT64] = 8, [GGUF_TYPE_FLOAT64] = 8};

static void w_u32(FILE *f, uint32_t v) { fwrite(&v, 4, 1, f); }
static void w_u64(FILE *f, uint64_t v) { fwrite(&v, 8, 1, f); }
static void w_str(FILE *f, gguf_str s) { w_u64(f, s.len), fwrite(s.ptr, 1, s.len, f); }
static void w_cstr(FILE *f, const char *s) { w_str(f, (gguf_str){strlen(s), s}); }
static void w_pad(FILE *f, uint64_t align) {
    static const char zero[256];
    long pos = ftell(f);
    uint64_t pad = (align - (uint64_t)pos % align) % align;
    while (pad) {
        uint64_t k = pad < sizeof(zero) ? pad : sizeof(zero);
        fwrite(zero, 1, k, f);
        pad -= k;
    }
}

/* Writes one metadata pair as it is in the source. false: nested arrays. */
static bool w_kv(FILE *f, const gguf_kv *kv) {
    w_str(f, kv->key);
    w_u32(f, kv->type);
    if (kv->type == GGUF_TYPE_STRING) w_str(f, kv->v.s);
    else if (kv->type == GGUF_TYPE_ARRAY) {
        w_u32(f, kv->arr_type);
        w_u64(f, kv->arr_n);
        if (kv->arr_type == GGUF_TYPE_STRING)
            for (uint64_t i = 0; i < kv->arr_n; i++) w_str(f, kv->arr_str[i]);
        else if (kv->arr_type < GGUF_TYPE_COUNT && vsize[kv->arr_type])
            fwrite(kv->arr_data, (size_t)vsize[kv->arr_type], kv->arr_n, f);
        else return false;
    } else if (kv->type == GGUF_TYPE_FLOAT32) {
        float v = (float)kv->v.f;
        fwrite(&v, 4, 1, f);
    } else if (kv->type == GGUF_TYPE_FLOAT64) fwrite(&kv->v.f, 8, 1, f);
    else if (kv->type == GGUF_TYPE_BOOL) fputc(kv->v.b ? 1 : 0, f);
    else fwrite(&kv->v.u, (size_t)vsize[kv->type], 1, f); /* little-endian low bytes */
    return true;
}

static void w_split_kvs(FILE *f, int no, int count, uint64_t n_tensors) {
    uint16_t a = (uint16_t)no, b = (uint16_t)count;
    int32_t c = (int32_t)n_tensors;
    w_cstr(f, "split.no"), w_u32(f, GGUF_TYPE_UINT16), fwrite(&a, 2, 1, f);
    w_cstr(f, "split.count"), w_u32(f, GGUF_TYPE_UINT16), fwrite(&b, 2, 1, f);
    w_cstr(f, "split.tensors.count"), w_u32(f, GGUF_TYPE_INT32), fwrite(&c, 4, 1, f);
}

static bool is_split_key(gguf_str k) { return k.len >= 6 && !memcmp(k.ptr, "split.", 6); }

/* Writes a GGUF: meta's pairs (minus split.*; meta may be NULL), the split
 * pairs when split_count > 0, and tensors [t0, t1) of the list. */
static int write_file(const char *out, const gguf_file *meta, int split_no, int split_count, uint64_t total_tensors,
                      const gguf_tensor *const *ts, size_t nt, uint64_t align, char *err, size_t errlen) {
    char tmp[2100];
    snprintf(tmp, sizeof(tmp), "%s.tmp%d", out, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno)), -1;
    uint64_t nkv = split_count > 0 ? 3 : 0;
    for (uint64_t i = 0; meta && i < meta->n_kv; i++) nkv += !is_split_key(meta->kv[i].key);
    fwrite("GGUF", 1, 4, f);
    w_u32(f, 3);
    w_u64(f, nt);
    w_u64(f, nkv);
    for (uint64_t i = 0; meta && i < meta->n_kv; i++)
        if (!is_split_key(meta->kv[i].key) && !w_kv(f, &meta->kv[i])) {
            fclose(f), unlink(tmp);
            return snprintf(err, errlen, "%s: nested metadata arrays are not supported", out), -1;
        }
    if (split_count > 0) w_split_kvs(f, split_no, split_count, total_tensors);
    uint64_t off = 0;
    for (size_t i = 0; i < nt; i++) {
        w_str(f, ts[i]->name);
        w_u32(f, ts[i]->n_dims);
        for (uint32_t d = 0; d < ts[i]->n_dims; d++) w_u64(f, ts[i]->ne[d]);
        w_u32(f, ts[i]->type);
        w_u64(f, off);
        off += (ts[i]->nbytes + align - 1) / align * align;
    }
    w_pad(f, align);
    for (size_t i = 0; i < nt; i++) {
        fwrite(ts[i]->data, 1, ts[i]->nbytes, f);
        w_pad(f, align);
    }
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0) bad = true;
    if (bad || rename(tmp, out) != 0) {
        unlink(tmp);
        return snprintf(err, errlen, "writing %s: %s", out, strerror(errno ? errno : EIO)), -1;
    }
    return 0;
}

int gguf_merge_parts(const char *const *parts, int n, const char *out, char *err, size_t errlen) {
    gguf_file **fs = calloc((size_t)n, sizeof(*fs));
    if (!fs) return snprintf(err, errlen, "out of memory"), -1;
    int rc = -1;
    size_t nt = 0;
    for (int i = 0; i < n; i++) {
        if (!(fs[i] = gguf_open(parts[i], NULL, err, errlen))) goto done;
        uint32_t no = 0, cnt = 0;
        if (!gguf_get_u32(fs[i], "split.count", &cnt) || !gguf_get_u32(fs[i], "split.no", &no)) {
            snprintf(err, errlen, "%s: not a split part (no split.no / split.count)", parts[i]);
            goto done;
        }
        if ((int)cnt != n || (int)no != i) {
            snprintf(err, errlen, "%s: split.no %u of %u, expected part %d of %d", parts[i], no, cnt, i, n);
            goto done;
        }
        nt += fs[i]->n_tensors;
    }
    uint32_t want_nt = 0;
    if (gguf_get_u32(fs[0], "split.tensors.count", &want_nt) && want_nt != nt) {
        snprintf(err, errlen, "%s: split.tensors.count %u but the parts hold %zu tensors", parts[0], want_nt, nt);
        goto done;
    }
    const gguf_tensor **ts = malloc(sizeof(*ts) * (nt ? nt : 1));
    if (!ts) goto done;
    size_t k = 0;
    for (int i = 0; i < n; i++)
        for (uint64_t t = 0; t < fs[i]->n_tensors; t++) ts[k++] = &fs[i]->tensors[t];
    rc = write_file(out, fs[0], 0, 0, nt, ts, nt, fs[0]->alignment, err, errlen);
    free(ts);
done:
    for (int i = 0; i < n; i++) gguf_close(fs[i]);
    free(fs);
    return rc;
}

int gguf_split_file(const char *src, int n_parts, const char *prefix, char *err, size_t errlen) {
    gguf_file *f = gguf_open(src, NULL, err, errlen);
    if (!f) return -1;
    if (n_parts < 1 || (uint64_t)n_parts > f->n_tensors) {
        snprintf(err, errlen, "%s: cannot split %llu tensors into %d parts", src, (unsigned long long)f->n_tensors,
                 n_parts);
        gguf_close(f);
        return -1;
    }
    const gguf_tensor **ts = malloc(sizeof(*ts) * f->n_tensors);
    for (uint64_t t = 0; t < f->n_tensors; t++) ts[t] = &f->tensors[t];
    int rc = 0;
    size_t per = (f->n_tensors + (size_t)n_parts - 1) / (size_t)n_parts, at = 0;
    for (int p = 0; p < n_parts && rc == 0; p++) {
        size_t cnt = at + per <= f->n_tensors ? per : f->n_tensors - at;
        char out[2100];
        snprintf(out, sizeof(out), "%s-%05d-of-%05d.gguf", prefix, p + 1, n_parts);
        rc = write_file(out, p == 0 ? f : NULL, p, n_parts, f->n_tensors, ts + at, cnt, f->alignment, err, errlen);
        at += cnt;
    }
    free(ts);
    gguf_close(f);
    return rc;
}
