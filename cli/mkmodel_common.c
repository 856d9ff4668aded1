/* mkmodel_common.c — what the mkmodel writers share: row conversion, the
 * counter-based random weights, the tensor emitter, metadata helpers and the
 * llama shape keys, and the reader of a source model (--widen). */
#include "cli/mkmodel_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- conversions --------------------------------------------------------- */

uint32_t mkmodel_ftype(int type)
{
    switch (type) {
    case GGML_TYPE_F16: return 1;
    case GGML_TYPE_Q8_0: return 7;
    case GGML_TYPE_BF16: return 32;
    case GGML_TYPE_Q4_0: return 2;
    case GGML_TYPE_Q4_K: return 14; /* *_S: every matrix in the one type */
    case GGML_TYPE_Q5_K: return 16;
    case GGML_TYPE_Q6_K: return 18;
    default: return 0;
    }
}


/* The reference pair of kernels/ggml_type.h: what the kernels compute with. */
bool mkmodel_row_from_f32(void *dst, int type, const float *src, uint64_t n)
{
    return ggml_quantize_row(dst, type, src, n);
}

bool mkmodel_row_to_f32(float *dst, int type, const void *src, uint64_t n)
{
    return ggml_dequantize_row(dst, type, src, n);
}

/* ---- counter-based randomness (mkmodel_internal.h) ------------------------ */

uint64_t mk_tensor_key(uint64_t seed, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    return mix64(h ^ mix64(seed));
}

/* ---- parallel loops --------------------------------------------------------
 * An 8B-parameter model is 8e9 normal draws and conversions: one thread takes
 * minutes, so both loops split [0, n) over the CPUs. The draws are counter-based
 * and each row converts alone, so the file is the same for any thread count. */

typedef struct {
    void (*fn)(void *ctx, uint64_t lo, uint64_t hi);
    void *ctx;
    uint64_t lo, hi;
} mk_span;

static void *mk_span_run(void *arg)
{
    mk_span *s = arg;
    s->fn(s->ctx, s->lo, s->hi);
    return NULL;
}

/* Calls fn over [0, n) in up to 64 contiguous spans, one thread each, when n is
 * at least `grain` per thread; else inline. */
static void mk_parallel(uint64_t n, uint64_t grain, void (*fn)(void *, uint64_t, uint64_t), void *ctx)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t t = cpus > 1 ? (uint64_t)(cpus < 64 ? cpus : 64) : 1;
    if (n / grain < t) t = n / grain ? n / grain : 1;
    if (t <= 1) {
        fn(ctx, 0, n);
        return;
    }
    mk_span sp[64];
    pthread_t th[64];
    bool started[64] = {false};
    for (uint64_t i = 0; i < t; i++) sp[i] = (mk_span){fn, ctx, n * i / t, n * (i + 1) / t};
    for (uint64_t i = 1; i < t; i++) /* a thread that cannot start: its span runs here */
        if (!(started[i] = pthread_create(&th[i], NULL, mk_span_run, &sp[i]) == 0)) mk_span_run(&sp[i]);
    mk_span_run(&sp[0]);
    for (uint64_t i = 1; i < t; i++)
        if (started[i]) pthread_join(th[i], NULL);
}

typedef struct {
    float *x;
    uint64_t key, first;
    float std;
} fill_job;

static void fill_span(void *ctx, uint64_t lo, uint64_t hi)
{
    fill_job *j = ctx;
    for (uint64_t i = lo; i < hi; i++) j->x[i] = j->std * rnd_normal(j->key, j->first + i);
}

void mk_fill_normal(float *x, uint64_t n, uint64_t key, uint64_t first, float std)
{
    fill_job j = {x, key, first, std};
    mk_parallel(n, 1u << 20, fill_span, &j);
}

typedef struct {
    uint8_t *dst;
    const float *src;
    uint64_t rb, ne0;
    int type;
} conv_job;

static void conv_span(void *ctx, uint64_t lo, uint64_t hi)
{
    conv_job *j = ctx;
    for (uint64_t r = lo; r < hi; r++) mkmodel_row_from_f32(j->dst + r * j->rb, j->type, j->src + r * j->ne0, j->ne0);
}

/* ---- tensor emission ----------------------------------------------------- */

/* Converts x (ne1 rows of ne0 floats; ne1 == 0 means a vector) to type and adds it. */
int mk_emit(emitter *e, const char *name, int type, uint64_t ne0, uint64_t ne1, const float *x)
{
    uint64_t ne[2] = {ne0, ne1};
    uint32_t nd = ne1 ? 2 : 1;
    uint64_t rows = ne1 ? ne1 : 1;
    bool ok;
    if (type == GGML_TYPE_F32) {
        ok = gguf_writer_add_tensor(e->w, name, GGML_TYPE_F32, nd, ne, x);
    } else {
        uint64_t rb = ggml_row_size(type, ne0);
        if (rb == 0)
            return util_fail(e->err, e->errlen, "%s: row of %llu is not a multiple of the %s block size",
                        name, (unsigned long long)ne0, ggml_type_name(type));
        uint8_t *buf = malloc((size_t)(rb * rows));
        if (!buf) return util_fail(e->err, e->errlen, "%s: out of memory", name);
        conv_job j = {buf, x, rb, ne0, type};
        mk_parallel(rows, ne0 >= (1u << 20) ? 1 : (1u << 20) / ne0, conv_span, &j);
        ok = gguf_writer_add_tensor_take(e->w, name, type, nd, ne, buf);
    }
    if (!ok) return util_fail(e->err, e->errlen, "%s: the GGUF writer rejected this tensor", name);
    e->n_params += ne0 * rows;
    return 0;
}

float *mk_falloc(uint64_t n, char *err, size_t errlen)
{
    float *p = n ? calloc((size_t)n, sizeof(float)) : NULL;
    if (!p) util_fail(err, errlen, "out of memory (%llu floats)", (unsigned long long)n);
    return p;
}

/* ---- metadata helpers ---------------------------------------------------- */

/* Copies the keys of src that start with prefix, with their exact types
 * (gguf_writer_copy_kv copies the complement of a prefix set; this is the other way). */
int mk_copy_kv_prefix(gguf_writer *w, const gguf_file *src, const char *prefix,
                          char *err, size_t errlen)
{
    size_t pl = strlen(prefix);
    for (uint64_t i = 0; i < src->n_kv; i++) {
        const gguf_kv *kv = &src->kv[i];
        if (kv->key.len < pl || memcmp(kv->key.ptr, prefix, pl) != 0) continue;
        char *key = malloc((size_t)kv->key.len + 1);
        if (!key) return util_fail(err, errlen, "out of memory");
        memcpy(key, kv->key.ptr, (size_t)kv->key.len);
        key[kv->key.len] = 0;
        int rc = 0;
        switch (kv->type) {
        case GGUF_TYPE_UINT8: gguf_writer_set_u8(w, key, (uint8_t)kv->v.u); break;
        case GGUF_TYPE_INT8: gguf_writer_set_i8(w, key, (int8_t)kv->v.i); break;
        case GGUF_TYPE_UINT16: gguf_writer_set_u16(w, key, (uint16_t)kv->v.u); break;
        case GGUF_TYPE_INT16: gguf_writer_set_i16(w, key, (int16_t)kv->v.i); break;
        case GGUF_TYPE_UINT32: gguf_writer_set_u32(w, key, (uint32_t)kv->v.u); break;
        case GGUF_TYPE_INT32: gguf_writer_set_i32(w, key, (int32_t)kv->v.i); break;
        case GGUF_TYPE_UINT64: gguf_writer_set_u64(w, key, kv->v.u); break;
        case GGUF_TYPE_INT64: gguf_writer_set_i64(w, key, kv->v.i); break;
        case GGUF_TYPE_FLOAT32: gguf_writer_set_f32(w, key, (float)kv->v.f); break;
        case GGUF_TYPE_FLOAT64: gguf_writer_set_f64(w, key, kv->v.f); break;
        case GGUF_TYPE_BOOL: gguf_writer_set_bool(w, key, kv->v.b); break;
        case GGUF_TYPE_STRING: gguf_writer_set_strn(w, key, kv->v.s.ptr, (size_t)kv->v.s.len); break;
        case GGUF_TYPE_ARRAY:
            if (kv->arr_type == GGUF_TYPE_STRING) {
                const char **p = malloc((size_t)(kv->arr_n ? kv->arr_n : 1) * sizeof *p);
                size_t *l = malloc((size_t)(kv->arr_n ? kv->arr_n : 1) * sizeof *l);
                if (!p || !l) {
                    rc = util_fail(err, errlen, "out of memory");
                } else {
                    for (uint64_t j = 0; j < kv->arr_n; j++) {
                        p[j] = kv->arr_str[j].ptr;
                        l[j] = (size_t)kv->arr_str[j].len;
                    }
                    gguf_writer_set_arr_str(w, key, p, l, kv->arr_n);
                }
                free(p);
                free(l);
            } else if (kv->arr_type == GGUF_TYPE_ARRAY) {
                rc = util_fail(err, errlen, "%s: nested arrays cannot be copied", key);
            } else {
                gguf_writer_set_arr(w, key, kv->arr_type, kv->arr_data, kv->arr_n);
            }
            break;
        default:
            rc = util_fail(err, errlen, "%s: unknown value type %d", key, (int)kv->type);
        }
        free(key);
        if (rc) return rc;
    }
    return 0;
}

void mk_finish_info(mkmodel_info *info, const char *path)
{
    struct stat st;
    info->file_bytes = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* ---- shapes ----------------------------------------------------------------- */

int mk_check_range(const char *what, long v, long lo, long hi, char *err, size_t errlen)
{
    if (v < lo || v > hi) return util_fail(err, errlen, "%s %ld is out of range [%ld, %ld]", what, v, lo, hi);
    return 0;
}

uint64_t mk_count_params(int L, int D, int H, int KV, int hd, int FF, int V, bool tied, int n_rot_freqs)
{
    uint64_t per = (uint64_t)D * ((uint64_t)H * hd) * 2 + (uint64_t)D * ((uint64_t)KV * hd) * 2 +
                   (uint64_t)D * FF * 3 + 2 * (uint64_t)D;
    return per * (uint64_t)L + (uint64_t)D * V * (tied ? 1 : 2) + (uint64_t)D + (uint64_t)n_rot_freqs;
}

void mk_set_llama_shape(gguf_writer *w, int ctx, int D, int L, int FF, int H, int KV, int n_rot,
                            int hd, float eps, float base)
{
    gguf_writer_set_u32(w, "llama.context_length", (uint32_t)ctx);
    gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)D);
    gguf_writer_set_u32(w, "llama.block_count", (uint32_t)L);
    gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)FF);
    gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)H);
    gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)KV);
    gguf_writer_set_u32(w, "llama.rope.dimension_count", (uint32_t)n_rot);
    gguf_writer_set_u32(w, "llama.attention.key_length", (uint32_t)hd);
    gguf_writer_set_u32(w, "llama.attention.value_length", (uint32_t)hd);
    gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", eps);
    gguf_writer_set_f32(w, "llama.rope.freq_base", base);
}

/* ---- reading a source model ----------------------------------------------- */

static int mk_src_u32(const src_model *s, const char *key, int *out, int dflt, char *err, size_t errlen)
{
    uint32_t v;
    if (!gguf_get_u32(s->f, key, &v)) {
        if (dflt < 0) return util_fail(err, errlen, "%s: missing or invalid %s", s->path, key);
        v = (uint32_t)dflt;
    }
    if (v > MK_MAX_DIM * 16u) return util_fail(err, errlen, "%s: %s = %u is out of range", s->path, key, v);
    *out = (int)v;
    return 0;
}

int mk_src_open(src_model *s, const char *path, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    char e2[512];
    s->f = gguf_open(path, NULL, e2, sizeof e2);
    if (!s->f) return util_fail(err, errlen, "%s", e2);
    char arch[32];
    if (!gguf_get_cstr(s->f, "general.architecture", arch, sizeof arch) || strcmp(arch, "llama") != 0)
        return util_fail(err, errlen, "%s: general.architecture is not \"llama\"", path);
    if (mk_src_u32(s, "llama.embedding_length", &s->D, -1, err, errlen) ||
        mk_src_u32(s, "llama.block_count", &s->L, -1, err, errlen) ||
        mk_src_u32(s, "llama.feed_forward_length", &s->FF, -1, err, errlen) ||
        mk_src_u32(s, "llama.attention.head_count", &s->H, -1, err, errlen) ||
        mk_src_u32(s, "llama.context_length", &s->ctx, 2048, err, errlen))
        return -1;
    if (s->D < 1 || s->L < 1 || s->FF < 1 || s->H < 1) return util_fail(err, errlen, "%s: zero-sized shape", path);
    if (mk_src_u32(s, "llama.attention.head_count_kv", &s->KV, s->H, err, errlen) ||
        mk_src_u32(s, "llama.attention.key_length", &s->hd, s->D / s->H, err, errlen))
        return -1;
    int vl;
    if (mk_src_u32(s, "llama.attention.value_length", &vl, s->hd, err, errlen) ||
        mk_src_u32(s, "llama.rope.dimension_count", &s->n_rot, s->hd, err, errlen))
        return -1;
    if (vl != s->hd) return util_fail(err, errlen, "%s: key_length %d != value_length %d is not supported", path, s->hd, vl);
    if (s->KV < 1 || s->H % s->KV || s->hd < 2 || s->hd % 2 || s->n_rot > s->hd || s->n_rot % 2)
        return util_fail(err, errlen, "%s: inconsistent attention shape (heads %d, kv heads %d, head dim %d, rope dims %d)",
                    path, s->H, s->KV, s->hd, s->n_rot);
    if (!gguf_get_f32(s->f, "llama.attention.layer_norm_rms_epsilon", &s->eps) || !(s->eps > 0))
        return util_fail(err, errlen, "%s: missing llama.attention.layer_norm_rms_epsilon", path);
    if (!gguf_get_f32(s->f, "llama.rope.freq_base", &s->base)) s->base = 10000.0f;
    const gguf_tensor *te = gguf_find_tensor(s->f, "token_embd.weight");
    const gguf_tensor *tq = gguf_find_tensor(s->f, "blk.0.attn_q.weight");
    if (!te || te->n_dims != 2 || te->ne[0] != (uint64_t)s->D || te->ne[1] > MK_MAX_VOCAB)
        return util_fail(err, errlen, "%s: token_embd.weight missing or not [%d, vocab]", path, s->D);
    if (!tq) return util_fail(err, errlen, "%s: blk.0.attn_q.weight missing", path);
    s->V = (int)te->ne[1];
    s->type = tq->type;
    s->tied = gguf_find_tensor(s->f, "output.weight") == NULL;
    return 0;
}

/* Loads tensor NAME as F32; it must have shape [ne0, ne1] (ne1 == 0: a vector).
 * Returns a malloc'd array or NULL with err set. */
float *mk_src_load(const src_model *s, const char *name, uint64_t ne0, uint64_t ne1,
                       char *err, size_t errlen)
{
    const gguf_tensor *t = gguf_find_tensor(s->f, name);
    if (!t) { util_fail(err, errlen, "%s: tensor %s is missing", s->path, name); return NULL; }
    uint64_t rows = ne1 ? ne1 : 1;
    if (t->ne[0] != ne0 || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1) {
        util_fail(err, errlen, "%s: %s has shape [%llu, %llu], expected [%llu, %llu]", s->path, name,
             (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
             (unsigned long long)ne0, (unsigned long long)rows);
        return NULL;
    }
    float *x = mk_falloc(ne0 * rows, err, errlen);
    if (!x) return NULL;
    uint64_t rb = ggml_row_size(t->type, ne0);
    for (uint64_t r = 0; r < rows; r++) {
        if (!mkmodel_row_to_f32(x + r * ne0, t->type, (const uint8_t *)t->data + r * rb, ne0)) {
            util_fail(err, errlen, "%s: %s has type %s, which mkmodel cannot convert", s->path, name,
                 ggml_type_name(t->type) ? ggml_type_name(t->type) : "?");
            free(x);
            return NULL;
        }
    }
    return x;
}

