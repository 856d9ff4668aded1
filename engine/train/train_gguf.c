/* train_gguf.c — trained models to and from llama GGUF files (see train_gguf.h). */
#include "engine/train/train_gguf.h"
#include "engine/util.h"

#include "kernels/half.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copies the tokenizer.* keys of src with their exact types: copy_kv copies
 * the complement of a prefix list, so the list is every other first
 * component of src's keys. */
void train_gguf_copy_tokenizer(gguf_writer *w, const gguf_file *src) {
    char (*pre)[64] = calloc(src->n_kv + 1, 64);
    const char **skip = calloc(src->n_kv + 2, sizeof(char *));
    if (!pre || !skip) {
        fprintf(stderr, "%s:%d: out of memory\n", __FILE__, __LINE__);
        abort();
    }
    int n = 0;
    for (uint64_t i = 0; i < src->n_kv; i++) {
        gguf_str k = src->kv[i].key;
        size_t l = 0;
        while (l < k.len && k.ptr[l] != '.') l++;
        if (l < k.len) l++; /* with the dot */
        if (l >= 64 || (l == 10 && !memcmp(k.ptr, "tokenizer.", 10))) continue;
        bool seen = false;
        for (int j = 0; j < n && !seen; j++) seen = strlen(pre[j]) == l && !memcmp(pre[j], k.ptr, l);
        if (seen) continue;
        memcpy(pre[n], k.ptr, l);
        skip[n] = pre[n];
        n++;
    }
    skip[n] = NULL;
    gguf_writer_copy_kv(w, src, skip);
    free(skip);
    free(pre);
}

int train_gguf_add_tensors(gguf_writer *w, const train_tensor *t, int n, const float *params, ggml_type type,
                           char *err, size_t errlen) {
    int rc = 0;
    uint16_t *h = NULL;
    for (int i = 0; i < n && !rc; i++) {
        uint64_t ne[2] = {(uint64_t)t[i].cols, (uint64_t)t[i].rows};
        const float *p = params + t[i].off;
        size_t cnt = (size_t)t[i].rows * t[i].cols;
        bool half = type == GGML_TYPE_F16 && t[i].matrix;
        if (half) {
            uint16_t *nh = realloc(h, sizeof(uint16_t) * cnt);
            if (!nh) {
                rc = util_fail(err, errlen, "out of memory");
                break;
            }
            h = nh;
            for (size_t j = 0; j < cnt; j++) h[j] = f32_to_fp16(p[j]);
        }
        if (!gguf_writer_add_tensor(w, t[i].name, half ? GGML_TYPE_F16 : GGML_TYPE_F32, t[i].rows == 1 ? 1 : 2, ne,
                                    half ? (const void *)h : (const void *)p))
            rc = util_fail(err, errlen, "cannot add tensor %s", t[i].name);
    }
    free(h);
    return rc;
}

int train_gguf_save(const train_model *m, const char *path, const gguf_file *tok_src, ggml_type type,
                    const char *name, const char *description, char *err, size_t errlen) {
    if (type != GGML_TYPE_F32 && type != GGML_TYPE_F16) return util_fail(err, errlen, "matrices must be F32 or F16");
    const train_cfg *c = &m->c;
    gguf_writer *w = gguf_writer_create();
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_str(w, "general.name", name ? name : "specd-trained");
    if (description) gguf_writer_set_str(w, "general.description", description);
    gguf_writer_set_u32(w, "general.file_type", type == GGML_TYPE_F16 ? 1 : 0);
    gguf_writer_set_u32(w, "llama.context_length", (uint32_t)c->ctx);
    gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)c->D);
    gguf_writer_set_u32(w, "llama.block_count", (uint32_t)c->L);
    gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)c->F);
    gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)c->H);
    gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)c->Hkv);
    gguf_writer_set_u32(w, "llama.rope.dimension_count", (uint32_t)c->E);
    gguf_writer_set_u32(w, "llama.attention.key_length", (uint32_t)c->E);
    gguf_writer_set_u32(w, "llama.attention.value_length", (uint32_t)c->E);
    gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", c->eps);
    gguf_writer_set_f32(w, "llama.rope.freq_base", c->rope_base);
    gguf_writer_set_u32(w, "llama.vocab_size", (uint32_t)c->V);
    if (tok_src) train_gguf_copy_tokenizer(w, tok_src);
    int rc = train_gguf_add_tensors(w, m->t, m->n_tensors, m->params, type, err, errlen);
    if (!rc) rc = gguf_writer_write(w, path, err, errlen);
    gguf_writer_destroy(w);
    return rc;
}

static int u32(const gguf_file *f, const char *k, int dflt) {
    uint32_t v;
    return gguf_get_u32(f, k, &v) ? (int)v : dflt;
}

train_model *train_gguf_load(const char *path, char *err, size_t errlen) {
    engine_status st;
    gguf_file *f = gguf_open(path, &st, err, errlen);
    if (!f) return NULL;
    char arch[32] = "";
    gguf_get_cstr(f, "general.architecture", arch, sizeof arch);
    if (strcmp(arch, "llama")) {
        util_fail(err, errlen, "%s: architecture '%s' (only llama models can be trained on)", path, arch);
        gguf_close(f);
        return NULL;
    }
    const gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    train_cfg c = {0};
    c.V = te ? (int)te->ne[1] : 0;
    c.D = u32(f, "llama.embedding_length", 0);
    c.L = u32(f, "llama.block_count", 0);
    c.F = u32(f, "llama.feed_forward_length", 0);
    c.H = u32(f, "llama.attention.head_count", 0);
    c.Hkv = u32(f, "llama.attention.head_count_kv", c.H);
    c.E = c.H ? u32(f, "llama.attention.key_length", c.D / c.H) : 0;
    c.ctx = u32(f, "llama.context_length", 2048);
    if (!gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &c.eps)) c.eps = 1e-5f;
    if (!gguf_get_f32(f, "llama.rope.freq_base", &c.rope_base)) c.rope_base = 10000.0f;
    c.tied = gguf_find_tensor(f, "output.weight") == NULL;
    train_model *m = train_model_create(&c, 0, err, errlen);
    for (int i = 0; m && i < m->n_tensors; i++) {
        const train_tensor *t = &m->t[i];
        const gguf_tensor *g = gguf_find_tensor(f, t->name);
        size_t cnt = (size_t)t->rows * t->cols;
        if (!g || g->ne[0] * g->ne[1] * g->ne[2] * g->ne[3] != cnt ||
            (g->type != GGML_TYPE_F32 && g->type != GGML_TYPE_F16)) {
            util_fail(err, errlen, "%s: tensor %s missing, of another shape, or not F32/F16", path, t->name);
            train_model_destroy(m);
            m = NULL;
            break;
        }
        float *p = m->params + t->off;
        for (size_t j = 0; j < cnt; j++) {
            if (g->type == GGML_TYPE_F32) memcpy(&p[j], (const char *)g->data + 4 * j, 4);
            else {
                uint16_t hv;
                memcpy(&hv, (const char *)g->data + 2 * j, 2);
                p[j] = fp16_to_f32(hv);
            }
        }
    }
    gguf_close(f);
    return m;
}
