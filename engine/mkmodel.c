/* mkmodel.c — builds llama GGUF files: seeded random models (with a synthetic
 * SPM vocabulary), function-preserving widenings of real models, re-typed copies.
 * Everything is built as F32 per tensor, then converted and handed to the writer. */
#include "engine/mkmodel.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/ggml_type.h"

#define MK_MAX_DIM (1 << 20)
#define MK_MAX_LAYERS 4096
#define MK_MAX_VOCAB (1 << 20)
#define MK_MAX_PARAMS (1ull << 37)
#define MK_MIN_VOCAB 259 /* <unk> <s> </s> + 256 byte tokens */

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

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

static bool type_supported(int type) { return ggml_type_convertible(type); }

/* The reference pair of kernels/ggml_type.h: what the kernels compute with. */
bool mkmodel_row_from_f32(void *dst, int type, const float *src, uint64_t n)
{
    return ggml_quantize_row(dst, type, src, n);
}

bool mkmodel_row_to_f32(float *dst, int type, const void *src, uint64_t n)
{
    return ggml_dequantize_row(dst, type, src, n);
}

/* ---- counter-based randomness ---------------------------------------------
 * Value i of tensor NAME depends only on (seed, NAME, i): files do not depend
 * on the order tensors are built in, and widening can fill any sub-block. */

static inline uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t tensor_key(uint64_t seed, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    return mix64(h ^ mix64(seed));
}

/* Approximately standard normal: Irwin–Hall sum of four 16-bit uniforms
 * (variance-matched; tails cut at 3.5 sigma, which suits weights). */
static inline float rnd_normal(uint64_t key, uint64_t i)
{
    uint64_t r = mix64(key + i * 0x9e3779b97f4a7c15ull);
    float s = (float)(r & 0xffff) + (float)((r >> 16) & 0xffff) +
              (float)((r >> 32) & 0xffff) + (float)(r >> 48);
    return (s - 131070.0f) * (1.0f / 37837.2f);
}

static void fill_normal(float *x, uint64_t n, uint64_t key, uint64_t first, float std)
{
    for (uint64_t i = 0; i < n; i++) x[i] = std * rnd_normal(key, first + i);
}

/* ---- tensor emission ----------------------------------------------------- */

typedef struct {
    gguf_writer *w;
    uint64_t n_params;
    char *err;
    size_t errlen;
} emitter;

/* Converts x (ne1 rows of ne0 floats; ne1 == 0 means a vector) to type and adds it. */
static int emit(emitter *e, const char *name, int type, uint64_t ne0, uint64_t ne1, const float *x)
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
            return fail(e->err, e->errlen, "%s: row of %llu is not a multiple of the %s block size",
                        name, (unsigned long long)ne0, ggml_type_name(type));
        uint8_t *buf = malloc((size_t)(rb * rows));
        if (!buf) return fail(e->err, e->errlen, "%s: out of memory", name);
        for (uint64_t r = 0; r < rows; r++) mkmodel_row_from_f32(buf + r * rb, type, x + r * ne0, ne0);
        ok = gguf_writer_add_tensor(e->w, name, type, nd, ne, buf);
        free(buf);
    }
    if (!ok) return fail(e->err, e->errlen, "%s: the GGUF writer rejected this tensor", name);
    e->n_params += ne0 * rows;
    return 0;
}

static float *falloc(uint64_t n, char *err, size_t errlen)
{
    float *p = n ? calloc((size_t)n, sizeof(float)) : NULL;
    if (!p) fail(err, errlen, "out of memory (%llu floats)", (unsigned long long)n);
    return p;
}

/* ---- metadata helpers ---------------------------------------------------- */

/* Copies the keys of src that start with prefix, with their exact types
 * (gguf_writer_copy_kv copies the complement of a prefix set; this is the other way). */
static int copy_kv_prefix(gguf_writer *w, const gguf_file *src, const char *prefix,
                          char *err, size_t errlen)
{
    size_t pl = strlen(prefix);
    for (uint64_t i = 0; i < src->n_kv; i++) {
        const gguf_kv *kv = &src->kv[i];
        if (kv->key.len < pl || memcmp(kv->key.ptr, prefix, pl) != 0) continue;
        char *key = malloc((size_t)kv->key.len + 1);
        if (!key) return fail(err, errlen, "out of memory");
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
                    rc = fail(err, errlen, "out of memory");
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
                rc = fail(err, errlen, "%s: nested arrays cannot be copied", key);
            } else {
                gguf_writer_set_arr(w, key, kv->arr_type, kv->arr_data, kv->arr_n);
            }
            break;
        default:
            rc = fail(err, errlen, "%s: unknown value type %d", key, (int)kv->type);
        }
        free(key);
        if (rc) return rc;
    }
    return 0;
}

static void finish_info(mkmodel_info *info, const char *path)
{
    struct stat st;
    info->file_bytes = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* ---- synthetic SPM vocabulary -------------------------------------------
 * <unk> <s> </s>, the 256 byte tokens, single characters, then BPE merges
 * learned from a small frequency-ranked English word list (score = -rank, so
 * SPM's "merge the highest-scoring bigram" replays the BPE order), then
 * two- and three-word pieces, which are reachable by the same merging. */

static const char *const k_words[] = {
    "the", "and", "to", "a", "was", "he", "she", "it", "of", "in", "you", "that", "her", "his",
    "they", "i", "with", "said", "for", "on", "is", "but", "had", "so", "not", "at", "be", "one",
    "day", "there", "were", "all", "very", "we", "up", "time", "little", "what", "have", "him",
    "do", "saw", "can", "big", "as", "them", "my", "go", "out", "once", "upon", "play", "happy",
    "from", "this", "are", "did", "could", "would", "like", "then", "when", "no", "me", "your",
    "their", "about", "into", "over", "just", "now", "see", "came", "went", "get", "got", "made",
    "make", "new", "friend", "friends", "mom", "dad", "dog", "cat", "bird", "tree", "park",
    "ball", "toy", "girl", "boy", "named", "lily", "tom", "ben", "sam", "sue", "loved", "love",
    "wanted", "want", "help", "helped", "look", "looked", "found", "find", "went", "home",
    "house", "sun", "water", "fun", "good", "bad", "sad", "scared", "nice", "kind", "pretty",
    "red", "blue", "green", "small", "long", "old", "young", "man", "woman", "people", "world",
    "thing", "things", "know", "knew", "think", "thought", "because", "after", "before", "again",
    "every", "never", "always", "some", "many", "much", "more", "most", "other", "another",
    "who", "which", "how", "why", "where", "here", "only", "also", "back", "down", "off",
    "away", "around", "through", "under", "together", "outside", "inside", "learned", "smiled",
    "laughed", "ran", "run", "jumped", "walked", "played", "asked", "felt", "feel", "took",
    "take", "gave", "give", "put", "let", "try", "tried", "started", "began", "way", "best",
    "hand", "head", "eyes", "face", "food", "cake", "apple", "box", "car", "boat", "school",
    "sky", "flower", "flowers", "garden", "forest", "river", "shiny", "special", "surprise",
    "should", "will", "been", "has", "if", "or", "an", "by", "say", "each", "first", "last",
    "two", "three", "family", "night", "morning", "story", "end", "yes", "thank", "sorry",
};

typedef struct {
    char **s;
    uint32_t *len;
    float *score;
    int32_t *type;
    uint32_t n, cap;
    bool oom;
} vocab_b;

static void vb_add(vocab_b *v, const char *s, size_t len, int type)
{
    if (v->oom) return;
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? 2 * v->cap : 1024;
        char **ns = realloc(v->s, cap * sizeof *ns);
        if (ns) v->s = ns;
        uint32_t *nl = realloc(v->len, cap * sizeof *nl);
        if (nl) v->len = nl;
        float *nsc = realloc(v->score, cap * sizeof *nsc);
        if (nsc) v->score = nsc;
        int32_t *nt = realloc(v->type, cap * sizeof *nt);
        if (nt) v->type = nt;
        if (!ns || !nl || !nsc || !nt) { v->oom = true; return; }
        v->cap = cap;
    }
    char *c = malloc(len + 1);
    if (!c) { v->oom = true; return; }
    memcpy(c, s, len);
    c[len] = 0;
    v->s[v->n] = c;
    v->len[v->n] = (uint32_t)len;
    /* normal pieces count down from 0 in id order; specials and bytes score 0 */
    v->score[v->n] = type == 1 ? (float)MK_MIN_VOCAB - (float)v->n : 0.0f;
    v->type[v->n] = type;
    v->n++;
}

static void vb_free(vocab_b *v)
{
    for (uint32_t i = 0; i < v->n; i++) free(v->s[i]);
    free(v->s);
    free(v->len);
    free(v->score);
    free(v->type);
}

static int vb_find(const vocab_b *v, uint32_t from, const char *s, size_t len)
{
    for (uint32_t i = from; i < v->n; i++)
        if (v->len[i] == len && memcmp(v->s[i], s, len) == 0) return (int)i;
    return -1;
}

typedef struct {
    int *sym;
    int n;
    uint64_t freq;
} bpe_word;

typedef struct {
    uint64_t key; /* a << 32 | b */
    uint64_t freq;
} bpe_pair;

static int pair_cmp(const void *x, const void *y)
{
    uint64_t a = ((const bpe_pair *)x)->key, b = ((const bpe_pair *)y)->key;
    return a < b ? -1 : a > b;
}

static void vb_add_concat(vocab_b *v, uint32_t a, uint32_t b)
{
    size_t la = v->len[a], lb = v->len[b];
    char *tmp = malloc(la + lb);
    if (!tmp) { v->oom = true; return; }
    memcpy(tmp, v->s[a], la);
    memcpy(tmp + la, v->s[b], lb);
    vb_add(v, tmp, la + lb, 1);
    free(tmp);
}

static int synth_vocab(vocab_b *v, uint32_t n_vocab, char *err, size_t errlen)
{
    static const char SP[] = "\xe2\x96\x81"; /* U+2581, SentencePiece's space */
    vb_add(v, "<unk>", 5, 2);
    vb_add(v, "<s>", 3, 3);
    vb_add(v, "</s>", 4, 3);
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        vb_add(v, s, 6, 6);
    }
    int char_id[128];
    for (int c = 0; c < 128; c++) char_id[c] = -1;
    int sp_id = -1;
    if (v->n < n_vocab) { sp_id = (int)v->n; vb_add(v, SP, 3, 1); }
    for (int c = 0x21; c < 0x7f && v->n < n_vocab; c++) {
        char s = (char)c;
        char_id[c] = (int)v->n;
        vb_add(v, &s, 1, 1);
    }
    uint32_t merged_from = v->n;

    /* the corpus: distinct words, Zipf-like integer weights */
    size_t nw_all = sizeof k_words / sizeof k_words[0];
    bpe_word *words = calloc(nw_all, sizeof *words);
    bpe_pair *pairs = NULL;
    int *final_ids = NULL;
    int nw = 0, rc = 0;
    if (!words) { rc = fail(err, errlen, "out of memory"); goto done; }
    size_t total_sym = 0;
    for (size_t i = 0; i < nw_all; i++) {
        bool dup = false;
        for (size_t j = 0; j < i && !dup; j++) dup = strcmp(k_words[i], k_words[j]) == 0;
        if (dup) continue;
        size_t l = strlen(k_words[i]);
        bpe_word *wd = &words[nw++];
        wd->sym = malloc((l + 1) * sizeof(int));
        if (!wd->sym) { rc = fail(err, errlen, "out of memory"); goto done; }
        wd->freq = 1000000u / (uint64_t)(i + 10);
        wd->sym[wd->n++] = sp_id;
        for (size_t k = 0; k < l; k++) wd->sym[wd->n++] = char_id[(unsigned char)k_words[i][k]];
        total_sym += (size_t)wd->n;
    }
    if (sp_id < 0 || v->n >= n_vocab) goto done; /* no room beyond single characters */
    for (int i = 0; i < nw; i++)
        for (int k = 0; k < words[i].n; k++)
            if (words[i].sym[k] < 0) goto done; /* a character did not fit: nothing to merge */

    pairs = malloc(total_sym * sizeof *pairs);
    if (!pairs) { rc = fail(err, errlen, "out of memory"); goto done; }
    while (v->n < n_vocab && !v->oom) {
        size_t np = 0;
        for (int i = 0; i < nw; i++)
            for (int k = 0; k + 1 < words[i].n; k++)
                pairs[np++] = (bpe_pair){(uint64_t)words[i].sym[k] << 32 | (uint32_t)words[i].sym[k + 1],
                                         words[i].freq};
        if (np == 0) break;
        qsort(pairs, np, sizeof *pairs, pair_cmp);
        uint64_t best_key = 0, best_f = 0;
        for (size_t i = 0; i < np;) {
            size_t j = i;
            uint64_t f = 0;
            while (j < np && pairs[j].key == pairs[i].key) f += pairs[j++].freq;
            if (f > best_f) { best_f = f; best_key = pairs[i].key; }
            i = j;
        }
        uint32_t a = (uint32_t)(best_key >> 32), b = (uint32_t)best_key;
        size_t la = v->len[a], lb = v->len[b];
        char buf[256];
        if (la + lb > sizeof buf) break; /* cannot happen with the built-in words */
        memcpy(buf, v->s[a], la);
        memcpy(buf + la, v->s[b], lb);
        int id = vb_find(v, merged_from, buf, la + lb);
        if (id < 0) { id = (int)v->n; vb_add(v, buf, la + lb, 1); }
        for (int i = 0; i < nw; i++) {
            int o = 0;
            for (int k = 0; k < words[i].n; k++) {
                if (k + 1 < words[i].n && words[i].sym[k] == (int)a && words[i].sym[k + 1] == (int)b) {
                    words[i].sym[o++] = id;
                    k++;
                } else {
                    words[i].sym[o++] = words[i].sym[k];
                }
            }
            words[i].n = o;
        }
    }
    if (v->n >= n_vocab || v->oom) goto done;

    /* every word is one token now: add word pairs, then triples (pair + word) */
    final_ids = malloc((size_t)nw * sizeof *final_ids);
    if (!final_ids) { rc = fail(err, errlen, "out of memory"); goto done; }
    for (int i = 0; i < nw; i++) final_ids[i] = words[i].sym[0];
    uint32_t pair_from = v->n;
    for (int s = 0; s <= 2 * (nw - 1) && v->n < n_vocab && !v->oom; s++)
        for (int i = s < nw ? 0 : s - nw + 1; i <= s && i < nw && v->n < n_vocab; i++)
            vb_add_concat(v, (uint32_t)final_ids[i], (uint32_t)final_ids[s - i]);
    uint32_t pair_to = v->n;
    for (uint32_t p = pair_from; p < pair_to && v->n < n_vocab && !v->oom; p++)
        for (int k = 0; k < nw && v->n < n_vocab; k++) vb_add_concat(v, p, (uint32_t)final_ids[k]);
    if (v->n < n_vocab && !v->oom)
        rc = fail(err, errlen, "--vocab %u is larger than the synthetic tokenizer can fill", n_vocab);

done:
    if (!rc && v->oom) rc = fail(err, errlen, "out of memory building the vocabulary");
    for (int i = 0; i < nw; i++) free(words[i].sym);
    free(words);
    free(pairs);
    free(final_ids);
    return rc;
}

static int write_synth_tokenizer(gguf_writer *w, uint32_t n_vocab, char *err, size_t errlen)
{
    vocab_b v = {0};
    int rc = synth_vocab(&v, n_vocab, err, errlen);
    if (rc == 0) {
        size_t *lens = malloc(v.n * sizeof *lens);
        if (!lens) {
            rc = fail(err, errlen, "out of memory");
        } else {
            for (uint32_t i = 0; i < v.n; i++) lens[i] = v.len[i];
            gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
            gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.s, lens, v.n);
            gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v.score, v.n);
            gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v.type, v.n);
            gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
            gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
            gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
            gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
            gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
            gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", true);
            free(lens);
        }
    }
    vb_free(&v);
    return rc;
}

/* ---- random models -------------------------------------------------------- */

void mkmodel_opts_init(mkmodel_opts *o)
{
    memset(o, 0, sizeof *o);
    o->type = -1;
    o->seed = 1;
}

/* Llama-3 frequency factors (the published formula: keep high frequencies,
 * divide low ones by factor, interpolate in between). */
static void llama3_factors(float *out, int n_rot, float base, float factor, float lo, float hi,
                           float orig_ctx)
{
    const double pi = 3.14159265358979323846;
    double lo_wl = orig_ctx / lo, hi_wl = orig_ctx / hi;
    for (int i = 0; i < n_rot / 2; i++) {
        double freq = pow(base, -2.0 * i / n_rot);
        double wl = 2 * pi / freq;
        if (wl < hi_wl) out[i] = 1.0f;
        else if (wl > lo_wl) out[i] = factor;
        else {
            double smooth = (orig_ctx / wl - lo) / (hi - lo);
            out[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
        }
    }
}

static int check_range(const char *what, long v, long lo, long hi, char *err, size_t errlen)
{
    if (v < lo || v > hi) return fail(err, errlen, "%s %ld is out of range [%ld, %ld]", what, v, lo, hi);
    return 0;
}

static uint64_t count_params(int L, int D, int H, int KV, int hd, int FF, int V, bool tied, int n_rot_freqs)
{
    uint64_t per = (uint64_t)D * ((uint64_t)H * hd) * 2 + (uint64_t)D * ((uint64_t)KV * hd) * 2 +
                   (uint64_t)D * FF * 3 + 2 * (uint64_t)D;
    return per * (uint64_t)L + (uint64_t)D * V * (tied ? 1 : 2) + (uint64_t)D + (uint64_t)n_rot_freqs;
}

/* Emits one random matrix [ne0, ne1] with std 1/sqrt(ne0). */
static int emit_random(emitter *e, uint64_t seed, const char *name, int type, uint64_t ne0, uint64_t ne1)
{
    float *x = falloc(ne0 * ne1, e->err, e->errlen);
    if (!x) return -1;
    fill_normal(x, ne0 * ne1, tensor_key(seed, name), 0, 1.0f / sqrtf((float)ne0));
    int rc = emit(e, name, type, ne0, ne1, x);
    free(x);
    return rc;
}

static int emit_norm(emitter *e, uint64_t seed, const char *name, uint64_t n, float scale)
{
    float *x = falloc(n, e->err, e->errlen);
    if (!x) return -1;
    uint64_t key = tensor_key(seed, name);
    for (uint64_t i = 0; i < n; i++) x[i] = scale * (1.0f + 0.05f * rnd_normal(key, i));
    int rc = emit(e, name, GGML_TYPE_F32, n, 0, x);
    free(x);
    return rc;
}

static void set_llama_shape(gguf_writer *w, int ctx, int D, int L, int FF, int H, int KV, int n_rot,
                            int hd, float eps, float base);

/* The same keys under another architecture prefix (qwen2.*). */
static void set_arch_shape(gguf_writer *w, const char *a, int ctx, int D, int L, int FF, int H, int KV, int n_rot,
                           int hd, float eps, float base, int V)
{
    char k[96];
#define AK(s) (snprintf(k, sizeof k, "%s.%s", a, s), k)
    gguf_writer_set_u32(w, AK("context_length"), (uint32_t)ctx);
    gguf_writer_set_u32(w, AK("embedding_length"), (uint32_t)D);
    gguf_writer_set_u32(w, AK("block_count"), (uint32_t)L);
    gguf_writer_set_u32(w, AK("feed_forward_length"), (uint32_t)FF);
    gguf_writer_set_u32(w, AK("attention.head_count"), (uint32_t)H);
    gguf_writer_set_u32(w, AK("attention.head_count_kv"), (uint32_t)KV);
    gguf_writer_set_u32(w, AK("rope.dimension_count"), (uint32_t)n_rot);
    gguf_writer_set_u32(w, AK("attention.key_length"), (uint32_t)hd);
    gguf_writer_set_u32(w, AK("attention.value_length"), (uint32_t)hd);
    gguf_writer_set_f32(w, AK("attention.layer_norm_rms_epsilon"), eps);
    gguf_writer_set_f32(w, AK("rope.freq_base"), base);
    gguf_writer_set_u32(w, AK("vocab_size"), (uint32_t)V);
#undef AK
}

/* Emits a random bias vector of n elements, std 0.5 (large enough that dropping it shows). */
static int emit_bias(emitter *e, uint64_t seed, const char *name, uint64_t n)
{
    float *x = falloc(n, e->err, e->errlen);
    if (!x) return -1;
    fill_normal(x, n, tensor_key(seed, name), 0, 0.5f);
    int rc = emit(e, name, GGML_TYPE_F32, n, 0, x);
    free(x);
    return rc;
}

static void set_llama_shape(gguf_writer *w, int ctx, int D, int L, int FF, int H, int KV, int n_rot,
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

int mkmodel_random(const char *out_path, const mkmodel_opts *o, mkmodel_info *info,
                   char *err, size_t errlen)
{
    if (err && errlen) err[0] = 0;
    int L = o->n_layers ? o->n_layers : 4;
    int D = o->dim ? o->dim : 256;
    int H = o->n_heads ? o->n_heads : 8;
    int KV = o->n_kv_heads ? o->n_kv_heads : H;
    int FF = o->ff ? o->ff : (8 * D / 3 + 31) / 32 * 32;
    int ctx = o->ctx ? o->ctx : 2048;
    int type = o->type < 0 ? GGML_TYPE_F32 : o->type;
    float eps = o->eps != 0.0f ? o->eps : 1e-5f;
    const char *arch = o->arch ? o->arch : "llama";
    bool qwen2 = !strcmp(arch, "qwen2"), mistral = !strcmp(arch, "mistral");
    if (!qwen2 && !mistral && strcmp(arch, "llama") != 0)
        return fail(err, errlen, "--arch must be llama, qwen2 or mistral (got '%s')", arch);
    if (qwen2 && o->rope_llama3) return fail(err, errlen, "--rope-scaling llama3 applies to llama models only");
    if (!mistral && o->sliding_window) return fail(err, errlen, "--sliding-window applies to --arch mistral only");
    if (o->sliding_window < 0) return fail(err, errlen, "--sliding-window must be positive");
    int window = o->sliding_window ? o->sliding_window : 8;
    float base = o->rope_base != 0.0f ? o->rope_base : o->rope_llama3 ? 500000.0f : qwen2 ? 1000000.0f : 10000.0f;

    if (check_range("--layers", L, 1, MK_MAX_LAYERS, err, errlen) ||
        check_range("--dim", D, 1, MK_MAX_DIM, err, errlen) ||
        check_range("--heads", H, 1, MK_MAX_DIM, err, errlen) ||
        check_range("--kv-heads", KV, 1, MK_MAX_DIM, err, errlen) ||
        check_range("--ff", FF, 1, MK_MAX_DIM, err, errlen) ||
        check_range("--ctx", ctx, 1, 1 << 24, err, errlen) ||
        check_range("--head-dim", o->head_dim, 0, MK_MAX_DIM, err, errlen) ||
        check_range("--vocab", o->vocab, 0, MK_MAX_VOCAB, err, errlen))
        return -1;
    if (!type_supported(type)) return fail(err, errlen, "--type must be f32, f16, bf16, q8_0, q4_0, q4_k, q5_k or q6_k");
    if (!o->head_dim && D % H)
        return fail(err, errlen, "--dim %d is not a multiple of --heads %d (or give --head-dim)", D, H);
    int hd = o->head_dim ? o->head_dim : D / H;
    if (hd % 2) return fail(err, errlen, "head dim %d must be even (RoPE rotates pairs)", hd);
    if (H % KV) return fail(err, errlen, "--heads %d is not a multiple of --kv-heads %d", H, KV);
    if ((uint64_t)H * hd > MK_MAX_DIM) return fail(err, errlen, "heads * head dim %d * %d is too large", H, hd);
    if (type == GGML_TYPE_Q8_0 && (D % 32 || FF % 32 || (H * hd) % 32))
        return fail(err, errlen, "--type q8_0 needs dim, ff and heads*head_dim to be multiples of 32 "
                    "(dim %d, ff %d, heads*head_dim %d)", D, FF, H * hd);
    if (!(eps > 0.0f) || !isfinite(eps)) return fail(err, errlen, "--eps must be a positive number");
    if (!(base > 1.0f) || !isfinite(base)) return fail(err, errlen, "--rope-base must be a number > 1");

    gguf_file *tok = NULL;
    int V = o->vocab ? o->vocab : 512;
    if (o->tokenizer_path) {
        char e2[512];
        tok = gguf_open(o->tokenizer_path, e2, sizeof e2);
        if (!tok) return fail(err, errlen, "--tokenizer: %s", e2);
        const gguf_kv *tk = gguf_get_arr(tok, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
        if (!tk || tk->arr_n == 0 || tk->arr_n > MK_MAX_VOCAB) {
            gguf_close(tok);
            return fail(err, errlen, "--tokenizer %s: no usable tokenizer.ggml.tokens array", o->tokenizer_path);
        }
        if (o->vocab && (uint64_t)o->vocab != tk->arr_n) {
            fail(err, errlen, "--vocab %d differs from the %llu tokens of --tokenizer %s",
                 o->vocab, (unsigned long long)tk->arr_n, o->tokenizer_path);
            gguf_close(tok);
            return -1;
        }
        V = (int)tk->arr_n;
    } else if (V < MK_MIN_VOCAB) {
        return fail(err, errlen, "--vocab %d is too small: the synthetic tokenizer needs at least %d "
                    "(3 special + 256 byte tokens)", V, MK_MIN_VOCAB);
    }
    int n_rot = hd;
    uint64_t np = count_params(L, D, H, KV, hd, FF, V, o->tied, o->rope_llama3 ? n_rot / 2 : 0);
    if (qwen2) np += (uint64_t)L * (uint64_t)(H + 2 * KV) * hd;
    if (np > MK_MAX_PARAMS) {
        gguf_close(tok);
        return fail(err, errlen, "model of %llu parameters is too large", (unsigned long long)np);
    }

    gguf_writer *w = gguf_writer_create();
    emitter e = {w, 0, err, errlen};
    int rc = 0;
    char desc[160];
    gguf_writer_set_str(w, "general.architecture", qwen2 ? "qwen2" : "llama");
    gguf_writer_set_str(w, "general.name", o->name ? o->name : "specd-random");
    snprintf(desc, sizeof desc, "RANDOM weights (specd mkmodel, seed %llu): not a trained model",
             (unsigned long long)o->seed);
    gguf_writer_set_str(w, "general.description", desc);
    gguf_writer_set_u32(w, "general.file_type", mkmodel_ftype(type));
    if (qwen2) {
        set_arch_shape(w, "qwen2", ctx, D, L, FF, H, KV, n_rot, hd, eps, base, V);
    } else {
        set_llama_shape(w, ctx, D, L, FF, H, KV, n_rot, hd, eps, base);
        gguf_writer_set_u32(w, "llama.vocab_size", (uint32_t)V);
    }
    if (mistral) gguf_writer_set_u32(w, "llama.attention.sliding_window", (uint32_t)window);
    /* Llama-3 rope scaling is the rope_freqs.weight tensor alone (below), as
     * llama.cpp's converter writes it: llama.cpp aborts on a rope.scaling.type
     * of "llama3" and would apply a rope.scaling.factor as linear scaling. */
    if (tok) rc = copy_kv_prefix(w, tok, "tokenizer.", err, errlen);
    else rc = write_synth_tokenizer(w, (uint32_t)V, err, errlen);
    gguf_close(tok);

    uint64_t s = o->seed;
    if (!rc) rc = emit_random(&e, s, "token_embd.weight", type, D, V);
    if (!rc) rc = emit_norm(&e, s, "output_norm.weight", D, 1.0f);
    if (!rc && !o->tied) rc = emit_random(&e, s, "output.weight", type, D, V);
    if (!rc && o->rope_llama3) {
        float *f = falloc(n_rot / 2, err, errlen);
        if (!f) rc = -1;
        else {
            llama3_factors(f, n_rot, base, 8.0f, 1.0f, 4.0f, 8192.0f);
            rc = emit(&e, "rope_freqs.weight", GGML_TYPE_F32, n_rot / 2, 0, f);
            free(f);
        }
    }
    for (int l = 0; l < L && !rc; l++) {
        char n[64];
#define NM(suffix) (snprintf(n, sizeof n, "blk.%d." suffix, l), n)
        rc = emit_norm(&e, s, NM("attn_norm.weight"), D, 1.0f);
        if (!rc) rc = emit_random(&e, s, NM("attn_q.weight"), type, D, (uint64_t)H * hd);
        if (!rc) rc = emit_random(&e, s, NM("attn_k.weight"), type, D, (uint64_t)KV * hd);
        if (!rc) rc = emit_random(&e, s, NM("attn_v.weight"), type, D, (uint64_t)KV * hd);
        if (!rc && qwen2) rc = emit_bias(&e, s, NM("attn_q.bias"), (uint64_t)H * hd);
        if (!rc && qwen2) rc = emit_bias(&e, s, NM("attn_k.bias"), (uint64_t)KV * hd);
        if (!rc && qwen2) rc = emit_bias(&e, s, NM("attn_v.bias"), (uint64_t)KV * hd);
        if (!rc) rc = emit_random(&e, s, NM("attn_output.weight"), type, (uint64_t)H * hd, D);
        if (!rc) rc = emit_norm(&e, s, NM("ffn_norm.weight"), D, 1.0f);
        if (!rc) rc = emit_random(&e, s, NM("ffn_gate.weight"), type, D, FF);
        if (!rc) rc = emit_random(&e, s, NM("ffn_down.weight"), type, FF, D);
        if (!rc) rc = emit_random(&e, s, NM("ffn_up.weight"), type, D, FF);
#undef NM
    }
    if (!rc) rc = gguf_writer_write(w, out_path, err, errlen);
    gguf_writer_destroy(w);
    if (rc) return -1;
    if (info) {
        *info = (mkmodel_info){L, D, H, KV, hd, FF, V, ctx, type, o->tied, e.n_params, 0, ""};
        snprintf(info->arch, sizeof info->arch, "%s", qwen2 ? "qwen2" : "llama");
        finish_info(info, out_path);
    }
    return 0;
}

/* ---- reading a source model ----------------------------------------------- */

typedef struct {
    gguf_file *f;
    const char *path;
    int D, L, H, KV, hd, n_rot, FF, V, ctx;
    float eps, base;
    int type; /* matrix type, from blk.0.attn_q.weight */
    bool tied;
} src_model;

static int src_u32(const src_model *s, const char *key, int *out, int dflt, char *err, size_t errlen)
{
    uint32_t v;
    if (!gguf_get_u32(s->f, key, &v)) {
        if (dflt < 0) return fail(err, errlen, "%s: missing or invalid %s", s->path, key);
        v = (uint32_t)dflt;
    }
    if (v > MK_MAX_DIM * 16u) return fail(err, errlen, "%s: %s = %u is out of range", s->path, key, v);
    *out = (int)v;
    return 0;
}

static int src_open(src_model *s, const char *path, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    char e2[512];
    s->f = gguf_open(path, e2, sizeof e2);
    if (!s->f) return fail(err, errlen, "%s", e2);
    char arch[32];
    if (!gguf_get_cstr(s->f, "general.architecture", arch, sizeof arch) || strcmp(arch, "llama") != 0)
        return fail(err, errlen, "%s: general.architecture is not \"llama\"", path);
    if (src_u32(s, "llama.embedding_length", &s->D, -1, err, errlen) ||
        src_u32(s, "llama.block_count", &s->L, -1, err, errlen) ||
        src_u32(s, "llama.feed_forward_length", &s->FF, -1, err, errlen) ||
        src_u32(s, "llama.attention.head_count", &s->H, -1, err, errlen) ||
        src_u32(s, "llama.context_length", &s->ctx, 2048, err, errlen))
        return -1;
    if (s->D < 1 || s->L < 1 || s->FF < 1 || s->H < 1) return fail(err, errlen, "%s: zero-sized shape", path);
    if (src_u32(s, "llama.attention.head_count_kv", &s->KV, s->H, err, errlen) ||
        src_u32(s, "llama.attention.key_length", &s->hd, s->D / s->H, err, errlen))
        return -1;
    int vl;
    if (src_u32(s, "llama.attention.value_length", &vl, s->hd, err, errlen) ||
        src_u32(s, "llama.rope.dimension_count", &s->n_rot, s->hd, err, errlen))
        return -1;
    if (vl != s->hd) return fail(err, errlen, "%s: key_length %d != value_length %d is not supported", path, s->hd, vl);
    if (s->KV < 1 || s->H % s->KV || s->hd < 2 || s->hd % 2 || s->n_rot > s->hd || s->n_rot % 2)
        return fail(err, errlen, "%s: inconsistent attention shape (heads %d, kv heads %d, head dim %d, rope dims %d)",
                    path, s->H, s->KV, s->hd, s->n_rot);
    if (!gguf_get_f32(s->f, "llama.attention.layer_norm_rms_epsilon", &s->eps) || !(s->eps > 0))
        return fail(err, errlen, "%s: missing llama.attention.layer_norm_rms_epsilon", path);
    if (!gguf_get_f32(s->f, "llama.rope.freq_base", &s->base)) s->base = 10000.0f;
    const gguf_tensor *te = gguf_find_tensor(s->f, "token_embd.weight");
    const gguf_tensor *tq = gguf_find_tensor(s->f, "blk.0.attn_q.weight");
    if (!te || te->n_dims != 2 || te->ne[0] != (uint64_t)s->D || te->ne[1] > MK_MAX_VOCAB)
        return fail(err, errlen, "%s: token_embd.weight missing or not [%d, vocab]", path, s->D);
    if (!tq) return fail(err, errlen, "%s: blk.0.attn_q.weight missing", path);
    s->V = (int)te->ne[1];
    s->type = tq->type;
    s->tied = gguf_find_tensor(s->f, "output.weight") == NULL;
    return 0;
}

/* Loads tensor NAME as F32; it must have shape [ne0, ne1] (ne1 == 0: a vector).
 * Returns a malloc'd array or NULL with err set. */
static float *src_load(const src_model *s, const char *name, uint64_t ne0, uint64_t ne1,
                       char *err, size_t errlen)
{
    const gguf_tensor *t = gguf_find_tensor(s->f, name);
    if (!t) { fail(err, errlen, "%s: tensor %s is missing", s->path, name); return NULL; }
    uint64_t rows = ne1 ? ne1 : 1;
    if (t->ne[0] != ne0 || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1) {
        fail(err, errlen, "%s: %s has shape [%llu, %llu], expected [%llu, %llu]", s->path, name,
             (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
             (unsigned long long)ne0, (unsigned long long)rows);
        return NULL;
    }
    float *x = falloc(ne0 * rows, err, errlen);
    if (!x) return NULL;
    uint64_t rb = ggml_row_size(t->type, ne0);
    for (uint64_t r = 0; r < rows; r++) {
        if (!mkmodel_row_to_f32(x + r * ne0, t->type, (const uint8_t *)t->data + r * rb, ne0)) {
            fail(err, errlen, "%s: %s has type %s, which mkmodel cannot convert", s->path, name,
                 ggml_type_name(t->type) ? ggml_type_name(t->type) : "?");
            free(x);
            return NULL;
        }
    }
    return x;
}

/* ---- widening --------------------------------------------------------------
 * Residual dims [D, D') stay exactly zero: the embedding is zero there and
 * every projection that writes the residual (attn_output, ffn_down) has zero
 * rows there. RMSNorm over D' then sees mean' = mean * D/D'; with eps' =
 * eps * D/D' and weights scaled by sqrt(D/D') the normalized values are the
 * source's. New heads, kv heads and ff units read random weights but their
 * output columns are zero; extra layers have zero attn_output and ffn_down. */

typedef struct {
    int D, L, H, KV, N, FF; /* target */
    int r;                  /* N / source head dim */
    int *kv_src;            /* (KV) source kv head held by each new kv head, or -1 */
} widen_plan;

/* Position of source head dim d in the regrouped head: RoPE pair i moves to
 * pair i*r, which has the same frequency base^(-2i/hd) = base^(-2(i r)/N). */
static inline int wmap(int d, int r) { return 2 * ((d / 2) * r) + (d & 1); }

static int widen_layer(emitter *e, const src_model *s, const widen_plan *p, int type, uint64_t seed,
                       int l, float nscale)
{
    char n[64], sn[64];
    const int D = p->D, D0 = s->D, hd = s->hd, N = p->N;
    const float qscale = sqrtf((float)N / (float)hd);
    const bool old = l < s->L;
    int rc = 0;
    float *src = NULL, *x = NULL;
#define NM(suffix) (snprintf(n, sizeof n, "blk.%d." suffix, l), n)
#define SNM(suffix) (snprintf(sn, sizeof sn, "blk.%d." suffix, l), sn)

    /* norms */
    const char *norms[2] = {"attn_norm.weight", "ffn_norm.weight"};
    for (int k = 0; k < 2 && !rc; k++) {
        snprintf(n, sizeof n, "blk.%d.%s", l, norms[k]);
        x = falloc(D, e->err, e->errlen);
        if (!x) return -1;
        if (old) {
            src = src_load(s, n, D0, 0, e->err, e->errlen);
            if (!src) { free(x); return -1; }
            for (int i = 0; i < D; i++) x[i] = nscale * (i < D0 ? src[i] : 1.0f);
            free(src);
            src = NULL;
        } else {
            for (int i = 0; i < D; i++) x[i] = 1.0f;
        }
        rc = emit(e, n, GGML_TYPE_F32, D, 0, x);
        free(x);
        x = NULL;
    }
    if (rc) return rc;

    /* q, k, v: rows of source heads move to their regrouped positions */
    for (int which = 0; which < 3 && !rc; which++) {
        const char *suf = which == 0 ? "attn_q.weight" : which == 1 ? "attn_k.weight" : "attn_v.weight";
        int nh = which == 0 ? p->H : p->KV, nh0 = which == 0 ? s->H : s->KV;
        snprintf(n, sizeof n, "blk.%d.%s", l, suf);
        uint64_t rows = (uint64_t)nh * N;
        x = falloc((uint64_t)D * rows, e->err, e->errlen);
        if (!x) return -1;
        if (old) {
            src = src_load(s, n, D0, (uint64_t)nh0 * hd, e->err, e->errlen);
            if (!src) { free(x); return -1; }
        }
        uint64_t key = tensor_key(seed, n);
        float std = 1.0f / sqrtf((float)D);
        for (int h = 0; h < nh; h++) {
            int sh = !old ? -1 : which == 0 ? (h < s->H ? h : -1) : p->kv_src[h];
            float *blk = x + (uint64_t)h * N * D;
            if (sh < 0) {
                fill_normal(blk, (uint64_t)N * D, key, (uint64_t)h * N * D, std);
                continue;
            }
            float sc = which == 0 ? qscale : 1.0f;
            for (int d = 0; d < hd; d++) {
                const float *srow = src + ((uint64_t)sh * hd + d) * D0;
                float *drow = blk + (uint64_t)wmap(d, p->r) * D;
                for (int i = 0; i < D0; i++) drow[i] = sc * srow[i];
            }
        }
        rc = emit(e, n, type, D, rows, x);
        free(src);
        free(x);
        src = x = NULL;
    }
    if (rc) return rc;

    /* attn_output [H*N, D]: only residual rows < D0 and source-head columns are non-zero */
    x = falloc((uint64_t)p->H * N * D, e->err, e->errlen);
    if (!x) return -1;
    if (old) {
        src = src_load(s, NM("attn_output.weight"), (uint64_t)s->H * hd, D0, e->err, e->errlen);
        if (!src) { free(x); return -1; }
        uint64_t K = (uint64_t)p->H * N, K0 = (uint64_t)s->H * hd;
        for (int o = 0; o < D0; o++)
            for (int h = 0; h < s->H; h++)
                for (int d = 0; d < hd; d++)
                    x[o * K + (uint64_t)h * N + wmap(d, p->r)] = src[o * K0 + (uint64_t)h * hd + d];
        free(src);
        src = NULL;
    }
    rc = emit(e, NM("attn_output.weight"), type, (uint64_t)p->H * N, D, x);
    free(x);
    x = NULL;
    if (rc) return rc;

    /* ffn_gate, ffn_up [D, FF]: source units copied, new units random */
    for (int which = 0; which < 2 && !rc; which++) {
        const char *suf = which == 0 ? "ffn_gate.weight" : "ffn_up.weight";
        snprintf(n, sizeof n, "blk.%d.%s", l, suf);
        x = falloc((uint64_t)D * p->FF, e->err, e->errlen);
        if (!x) return -1;
        int first_new = 0;
        if (old) {
            src = src_load(s, n, D0, s->FF, e->err, e->errlen);
            if (!src) { free(x); return -1; }
            for (int f = 0; f < s->FF; f++) memcpy(x + (uint64_t)f * D, src + (uint64_t)f * D0, D0 * sizeof(float));
            free(src);
            src = NULL;
            first_new = s->FF;
        }
        uint64_t off = (uint64_t)first_new * D;
        fill_normal(x + off, (uint64_t)D * p->FF - off, tensor_key(seed, n), off, 1.0f / sqrtf((float)D));
        rc = emit(e, n, type, D, p->FF, x);
        free(x);
        x = NULL;
    }
    if (rc) return rc;

    /* ffn_down [FF, D]: residual rows < D0, source-unit columns */
    x = falloc((uint64_t)p->FF * D, e->err, e->errlen);
    if (!x) return -1;
    if (old) {
        src = src_load(s, SNM("ffn_down.weight"), s->FF, D0, e->err, e->errlen);
        if (!src) { free(x); return -1; }
        for (int o = 0; o < D0; o++)
            memcpy(x + (uint64_t)o * p->FF, src + (uint64_t)o * s->FF, s->FF * sizeof(float));
        free(src);
    }
    rc = emit(e, NM("ffn_down.weight"), type, p->FF, D, x);
    free(x);
#undef NM
#undef SNM
    return rc;
}

/* Embedding-like [D0, V] -> [D', V], zero in the new dims. */
static int widen_vocab_matrix(emitter *e, const src_model *s, const char *name, int D, int type)
{
    float *src = src_load(s, name, s->D, s->V, e->err, e->errlen);
    if (!src) return -1;
    float *x = falloc((uint64_t)D * s->V, e->err, e->errlen);
    if (!x) { free(src); return -1; }
    for (int v = 0; v < s->V; v++) memcpy(x + (uint64_t)v * D, src + (uint64_t)v * s->D, s->D * sizeof(float));
    free(src);
    int rc = emit(e, name, type, D, s->V, x);
    free(x);
    return rc;
}

int mkmodel_widen(const char *out_path, const char *src_path, const mkmodel_opts *o,
                  mkmodel_info *info, char *err, size_t errlen)
{
    if (err && errlen) err[0] = 0;
    if (o->vocab || o->tokenizer_path || o->tied || o->rope_llama3 || o->rope_base != 0.0f || o->eps != 0.0f ||
        o->arch || o->sliding_window)
        return fail(err, errlen, "--vocab, --tokenizer, --tied, --rope-*, --eps do not apply to --widen "
                    "(they come from the source model)");
    src_model s;
    widen_plan p = {0};
    gguf_writer *w = NULL;
    int rc = src_open(&s, src_path, err, errlen);
    if (rc) goto out;

    p.D = o->dim ? o->dim : s.D;
    p.L = o->n_layers ? o->n_layers : s.L;
    p.FF = o->ff ? o->ff : s.FF;
    p.N = o->head_dim ? o->head_dim : s.hd;
    int type = o->type < 0 ? s.type : o->type;
    rc = -1;
    const char *smaller = p.D < s.D ? "--dim" : p.L < s.L ? "--layers" : p.FF < s.FF ? "--ff"
                        : p.N < s.hd ? "--head-dim" : NULL;
    if (smaller) {
        fail(err, errlen, "%s is smaller than the source's (%d dim, %d layers, %d ff, %d head dim): "
             "widening cannot shrink", smaller, s.D, s.L, s.FF, s.hd);
        goto out;
    }
    if (check_range("--dim", p.D, s.D, MK_MAX_DIM, err, errlen) ||
        check_range("--layers", p.L, s.L, MK_MAX_LAYERS, err, errlen) ||
        check_range("--ff", p.FF, s.FF, MK_MAX_DIM, err, errlen) ||
        check_range("--head-dim", p.N, s.hd, MK_MAX_DIM, err, errlen) ||
        check_range("--heads", o->n_heads, 0, MK_MAX_DIM, err, errlen) ||
        check_range("--kv-heads", o->n_kv_heads, 0, MK_MAX_DIM, err, errlen) ||
        check_range("--ctx", o->ctx, 0, 1 << 24, err, errlen))
        goto out;
    if (p.N % s.hd) {
        fail(err, errlen, "--head-dim %d must be a multiple of the source's head dim %d", p.N, s.hd);
        goto out;
    }
    if (p.N != s.hd && s.n_rot != s.hd) {
        fail(err, errlen, "--head-dim needs a source whose RoPE covers the whole head (rope dims %d, head dim %d)",
             s.n_rot, s.hd);
        goto out;
    }
    p.r = p.N / s.hd;
    if (o->n_heads) p.H = o->n_heads;
    else p.H = (p.D % p.N == 0 && p.D / p.N >= s.H) ? p.D / p.N : s.H;
    if (p.H < s.H) {
        fail(err, errlen, "--heads %d is fewer than the source's %d", p.H, s.H);
        goto out;
    }
    int g = s.H / s.KV;
    if (o->n_kv_heads) p.KV = o->n_kv_heads;
    else if (p.H % g == 0) p.KV = p.H / g;
    else {
        fail(err, errlen, "%d heads cannot keep the source's %d heads per kv head: give --kv-heads", p.H, g);
        goto out;
    }
    if (p.H % p.KV) {
        fail(err, errlen, "--heads %d is not a multiple of --kv-heads %d", p.H, p.KV);
        goto out;
    }
    /* new head h reads kv head h / (H'/KV'); for source heads that kv head must hold the source's h / g */
    p.kv_src = malloc((size_t)p.KV * sizeof(int));
    if (!p.kv_src) { fail(err, errlen, "out of memory"); goto out; }
    for (int k = 0; k < p.KV; k++) p.kv_src[k] = -1;
    int g2 = p.H / p.KV;
    for (int h = 0; h < s.H; h++) {
        int k = h / g2, want = h / g;
        if (p.kv_src[k] >= 0 && p.kv_src[k] != want) {
            fail(err, errlen, "--kv-heads %d gives %d heads per kv head, which must divide the source's %d "
                 "(source heads of different kv heads would share one)", p.KV, g2, g);
            goto out;
        }
        p.kv_src[k] = want;
    }
    if (!type_supported(type)) {
        fail(err, errlen, "--type must be f32, f16, bf16, q8_0, q4_0, q4_k, q5_k or q6_k");
        goto out;
    }
    if (type == GGML_TYPE_Q8_0 && (p.D % 32 || p.FF % 32 || (p.H * p.N) % 32)) {
        fail(err, errlen, "--type q8_0 needs dim, ff and heads*head_dim to be multiples of 32 "
             "(dim %d, ff %d, heads*head_dim %d)", p.D, p.FF, p.H * p.N);
        goto out;
    }
    if ((uint64_t)p.H * p.N > MK_MAX_DIM) {
        fail(err, errlen, "heads * head dim %d * %d is too large", p.H, p.N);
        goto out;
    }
    const gguf_tensor *rf = gguf_find_tensor(s.f, "rope_freqs.weight");
    int n_rot = p.N == s.hd ? s.n_rot : p.N;
    uint64_t np = count_params(p.L, p.D, p.H, p.KV, p.N, p.FF, s.V, s.tied, rf ? n_rot / 2 : 0);
    if (np > MK_MAX_PARAMS) {
        fail(err, errlen, "model of %llu parameters is too large", (unsigned long long)np);
        goto out;
    }

    float ratio = (float)s.D / (float)p.D;
    float nscale = sqrtf(ratio);
    int ctx = o->ctx ? o->ctx : s.ctx;
    w = gguf_writer_create();
    static const char *const skip[] = {"llama.", "general.file_type", "general.name", "general.description", NULL};
    gguf_writer_copy_kv(w, s.f, skip);
    gguf_writer_set_str(w, "general.architecture", "llama");
    char nm[128];
    if (o->name) snprintf(nm, sizeof nm, "%s", o->name);
    else if (!gguf_get_cstr(s.f, "general.name", nm, sizeof nm)) snprintf(nm, sizeof nm, "llama");
    gguf_writer_set_str(w, "general.name", nm);
    gguf_writer_set_str(w, "general.description",
                        "function-preserving widening (specd mkmodel --widen): same outputs as the source model");
    gguf_writer_set_u32(w, "general.file_type", mkmodel_ftype(type));
    set_llama_shape(w, ctx, p.D, p.L, p.FF, p.H, p.KV, n_rot, p.N, s.eps * ratio, s.base);
    uint32_t vs;
    if (gguf_get_u32(s.f, "llama.vocab_size", &vs)) gguf_writer_set_u32(w, "llama.vocab_size", vs);
    rc = copy_kv_prefix(w, s.f, "llama.rope.scaling.", err, errlen);
    if (rc) goto out;

    emitter e = {w, 0, err, errlen};
    rc = widen_vocab_matrix(&e, &s, "token_embd.weight", p.D, type);
    if (!rc) {
        float *on = src_load(&s, "output_norm.weight", s.D, 0, err, errlen);
        float *x = on ? falloc(p.D, err, errlen) : NULL;
        if (!x) rc = -1;
        else {
            for (int i = 0; i < p.D; i++) x[i] = nscale * (i < s.D ? on[i] : 1.0f);
            rc = emit(&e, "output_norm.weight", GGML_TYPE_F32, p.D, 0, x);
        }
        free(on);
        free(x);
    }
    if (!rc && !s.tied) rc = widen_vocab_matrix(&e, &s, "output.weight", p.D, type);
    if (!rc && rf) {
        float *f = src_load(&s, "rope_freqs.weight", s.n_rot / 2, 0, err, errlen);
        float *x = f ? falloc(n_rot / 2, err, errlen) : NULL;
        if (!x) rc = -1;
        else {
            for (int j = 0; j < n_rot / 2; j++) x[j] = 1.0f;
            for (int i = 0; i < s.n_rot / 2; i++) x[i * p.r] = f[i];
            rc = emit(&e, "rope_freqs.weight", GGML_TYPE_F32, n_rot / 2, 0, x);
        }
        free(f);
        free(x);
    }
    for (int l = 0; l < p.L && !rc; l++) rc = widen_layer(&e, &s, &p, type, o->seed, l, nscale);
    if (!rc) rc = gguf_writer_write(w, out_path, err, errlen);
    if (!rc && info) {
        *info = (mkmodel_info){p.L, p.D, p.H, p.KV, p.N, p.FF, s.V, ctx, type, s.tied, e.n_params, 0, "llama"};
        finish_info(info, out_path);
    }
out:
    gguf_writer_destroy(w);
    free(p.kv_src);
    gguf_close(s.f);
    return rc ? -1 : 0;
}

/* ---- re-typing -------------------------------------------------------------- */

int mkmodel_quantize(const char *out_path, const char *src_path, int type,
                     mkmodel_info *info, char *err, size_t errlen)
{
    if (err && errlen) err[0] = 0;
    if (!type_supported(type)) return fail(err, errlen, "--quantize type must be f32, f16, bf16, q8_0, q4_0, q4_k, q5_k or q6_k");
    char e2[512];
    gguf_file *f = gguf_open(src_path, e2, sizeof e2);
    if (!f) return fail(err, errlen, "%s", e2);
    /* check every matrix first so nothing is half-done on a bad shape */
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        int want = t->n_dims >= 2 ? type : GGML_TYPE_F32;
        int rc = 0;
        if ((int)t->type != want && !type_supported(t->type))
            rc = fail(err, errlen, "%s: %.*s has type %s, which mkmodel cannot convert", src_path,
                      (int)t->name.len, t->name.ptr, ggml_type_name(t->type));
        else if ((int)t->type != want && ggml_row_size(want, t->ne[0]) == 0)
            rc = fail(err, errlen, "%s: %.*s: row length %llu is not a multiple of the %s block size",
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
        if (t->name.len >= sizeof name) { rc = fail(err, errlen, "%s: tensor name too long", src_path); break; }
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
            if (!row || !buf) { rc = fail(err, errlen, "out of memory converting %s", name); break; }
            for (uint64_t r = 0; r < rows; r++) {
                mkmodel_row_to_f32(row, t->type, (const uint8_t *)t->data + r * rb_in, t->ne[0]);
                mkmodel_row_from_f32(buf + r * rb_out, want, row, t->ne[0]);
            }
            data = buf;
        }
        if (!gguf_writer_add_tensor(w, name, (ggml_type)want, t->n_dims, t->ne, data))
            rc = fail(err, errlen, "%s: the GGUF writer rejected this tensor", name);
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
        finish_info(info, out_path);
    }
    gguf_writer_destroy(w);
    gguf_close(f);
    return rc ? -1 : 0;
}
