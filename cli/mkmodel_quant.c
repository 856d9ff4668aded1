/* mkmodel_quant.c — mkmodel_quantize: a copy of a model with every matrix
 * converted to another type, metadata kept. */
#include "cli/mkmodel_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- re-typing -------------------------------------------------------------- */

int mkmodel_quantize(const char *out_path, const char *src_path, int type,
                     mkmodel_info *info, char *err, size_t errlen)
{
    if (err && errlen) err[0] = 0;
    if (!type_supported(type)) return util_fail(err, errlen, "--quantize type must be f32, f16, bf16, q8_0, q4_0, q4_k, q5_k or q6_k");
    char e2[512];
    gguf_file *f = gguf_open(src_path, NULL, e2, sizeof e2);
    if (!f) return util_fail(err, errlen, "%s", e2);
    /* check every matrix first so nothing is half-done on a bad shape */
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        int want = t->n_dims >= 2 ? type : GGML_TYPE_F32;
        int rc = 0;
        if ((int)t->type != want && !type_supported(t->type))
            rc = util_fail(err, errlen, "%s: %.*s has type %s, which mkmodel cannot convert", src_path,
                      (int)t->name.len, t->name.ptr, ggml_type_name(t->type));
        else if ((int)t->type != want && ggml_row_size(want, t->ne[0]) == 0)
            rc = util_fail(err, errlen, "%s: %.*s: row length %llu is not a multiple of the %s block size",
                      src_path, (int)t->name.len, t->name.ptr, (unsigned long long)t->ne[0],
                      ggml_type_name(want));
        if (rc) {
            gguf_close(f);
            return rc;
        }
    }
    gguf_writer *w = gguf_writer_create();
    static const char *const skip[] = {"general.file_type", NULL};
    gguf_writer_copy_kv(w, f, skip);
    gguf_writer_set_u32(w, "general.file_type", mkmodel_ftype(type));
    int rc = 0;
    uint64_t n_params = 0;
    float *row = NULL;
    uint8_t *buf = NULL;
    for (uint64_t i = 0; i < f->n_tensors && !rc; i++) {
        const gguf_tensor *t = &f->tensors[i];
        int want = t->n_dims >= 2 ? type : GGML_TYPE_F32;
        char name[256];
        if (t->name.len >= sizeof name) { rc = util_fail(err, errlen, "%s: tensor name too long", src_path); break; }
        memcpy(name, t->name.ptr, (size_t)t->name.len);
        name[t->name.len] = 0;
        uint64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        n_params += t->ne[0] * rows;
        const void *data = t->data;
        if ((int)t->type != want) {
            uint64_t rb_in = ggml_row_size(t->type, t->ne[0]), rb_out = ggml_row_size(want, t->ne[0]);
            free(row);
            free(buf);
            row = malloc((size_t)t->ne[0] * sizeof(float));
            buf = malloc((size_t)(rb_out * rows));
            if (!row || !buf) { rc = util_fail(err, errlen, "out of memory converting %s", name); break; }
            for (uint64_t r = 0; r < rows; r++) {
                mkmodel_row_to_f32(row, t->type, (const uint8_t *)t->data + r * rb_in, t->ne[0]);
                mkmodel_row_from_f32(buf + r * rb_out, want, row, t->ne[0]);
            }
            data = buf;
        }
        if (!gguf_writer_add_tensor(w, name, (ggml_type)want, t->n_dims, t->ne, data))
            rc = util_fail(err, errlen, "%s: the GGUF writer rejected this tensor", name);
    }
    free(row);
    free(buf);
    if (!rc) rc = gguf_writer_write(w, out_path, err, errlen);
    if (!rc && info) {
        uint32_t v;
        memset(info, 0, sizeof *info);
        char arch[32] = "llama", key[96];
        gguf_get_cstr(f, "general.architecture", arch, sizeof arch);
        snprintf(info->arch, sizeof info->arch, "%s", arch);
#define G(k, field) \
    if (snprintf(key, sizeof key, "%s.%s", arch, k), gguf_get_u32(f, key, &v)) info->field = (int)v
        G("block_count", n_layers);
        G("embedding_length", dim);
        G("attention.head_count", n_heads);
        G("attention.head_count_kv", n_kv_heads);
        G("attention.key_length", head_dim);
        G("feed_forward_length", ff);
        G("context_length", ctx);
#undef G
        if (!info->n_kv_heads) info->n_kv_heads = info->n_heads;
        if (!info->head_dim && info->n_heads) info->head_dim = info->dim / info->n_heads;
        const gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
        info->vocab = te && te->n_dims == 2 ? (int)te->ne[1] : 0;
        info->tied = gguf_find_tensor(f, "output.weight") == NULL;
        info->type = type;
        info->n_params = n_params;
        mk_finish_info(info, out_path);
    }
    gguf_writer_destroy(w);
    gguf_close(f);
    return rc ? -1 : 0;
}
