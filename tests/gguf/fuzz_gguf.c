/* fuzz_gguf.c — libFuzzer target for the GGUF reader: any input must either be
 * rejected with a message or yield a file whose every referenced byte is readable. */
#include "engine/gguf/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile uint8_t g_sink;

/* Reads every byte so ASan flags any range the reader failed to bound. */
static void touch(const void *p, uint64_t n)
{
    const volatile uint8_t *b = p;
    uint8_t acc = 0;
    for (uint64_t i = 0; i < n; i++) acc ^= b[i];
    g_sink ^= acc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    gguf_file *f = gguf_open_mem(data, size, NULL, err, sizeof err);
    if (!f) {
        if (err[0] == 0 || strlen(err) >= sizeof err) abort(); /* every rejection names a reason */
        return 0;
    }
    if (f->alignment == 0 || (f->alignment & (f->alignment - 1))) abort();
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        touch(kv->key.ptr, kv->key.len);
        if (gguf_find(f, "x") == kv && !gguf_str_eq(kv->key, "x")) abort();
        if (kv->type == GGUF_TYPE_STRING) touch(kv->v.s.ptr, kv->v.s.len);
        if (kv->type != GGUF_TYPE_ARRAY) continue;
        if (kv->arr_type == GGUF_TYPE_STRING) {
            for (uint64_t j = 0; j < kv->arr_n; j++) touch(kv->arr_str[j].ptr, kv->arr_str[j].len);
        } else if (kv->arr_type != GGUF_TYPE_ARRAY) {
            static const uint8_t sz[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
            touch(kv->arr_data, kv->arr_n * sz[kv->arr_type]);
        }
    }
    /* Lookups by every key must find that key (first match semantics are moot: no duplicates). */
    for (uint64_t i = 0; i < f->n_kv && i < 64; i++) {
        const gguf_kv *kv = &f->kv[i];
        if (kv->key.len >= 256 || memchr(kv->key.ptr, 0, kv->key.len)) continue;
        char k[256];
        memcpy(k, kv->key.ptr, kv->key.len);
        k[kv->key.len] = 0;
        if (gguf_find(f, k) != kv) abort();
        uint64_t u; int64_t s; float fl; bool b; char buf[8];
        (void)gguf_get_u64(f, k, &u); (void)gguf_get_u32(f, k, (uint32_t *)&u);
        (void)gguf_get_i64(f, k, &s); (void)gguf_get_f32(f, k, &fl);
        (void)gguf_get_bool(f, k, &b); (void)gguf_get_cstr(f, k, buf, sizeof buf);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        touch(t->name.ptr, t->name.len);
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS || !ggml_type_size(t->type)) abort();
        if (t->offset % f->alignment) abort();
        if ((const uint8_t *)t->data < f->base || t->nbytes > f->size ||
            (size_t)((const uint8_t *)t->data - f->base) > f->size - t->nbytes) abort();
        touch(t->data, t->nbytes);
    }
    gguf_close(f);
    return 0;
}
