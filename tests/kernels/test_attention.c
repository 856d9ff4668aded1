/* test_attention.c — ops_attention_head and ops_silu_mul on every SIMD path this
 * CPU has, against double-precision references written here. Attention: head
 * dims 8/64/80/128, GQA and one-kv-head-per-head, paged KV behind a reversed,
 * gapped block table, n_past 0/5/100 with 1 or 5 new rows, causal, a tree
 * ancestor mask and sliding windows; with an F32 and an F16 cache (the latter
 * bit for bit an F32 cache of its rounded values). The F32 <-> F16
 * conversions against half.h's scalar rule. silu_mul: random and extreme inputs, and
 * results independent of how the rows are split. Prints silu_mul's speed per
 * path (a figure, not asserted). */
#include "kernels/backend.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/ops.h"
#include "kernels/half.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rs = 88172645463325252ull;
static float frand(void) { /* uniform in [-1, 1) */
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((rs >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* ---- attention ---------------------------------------------------------- */

enum { BS = 16, ROW0 = 3, MAX_NEW = 5 };

/* One case's visibility. The new positions form a tree given by parent[]
 * (parent[i] < i, -1 for a root): causal is the chain parent[i] = i - 1 and is
 * passed as mask NULL; a tree is passed as its ancestor-or-self mask. */
typedef struct {
    const char *name;
    int tree;                 /* 0: causal (mask NULL), 1: ancestor mask */
    int parent[MAX_NEW];
} vis_kind;

static const vis_kind VIS[] = {
    {"causal", 0, {-1, 0, 1, 2, 3}},
    {"tree", 1, {-1, 0, 0, 1, 2}}, /* 0 -> {1, 2}, 1 -> 3, 2 -> 4: depths 0 1 1 2 2 */
};

static int is_ancestor_or_self(const int *parent, int j, int i) {
    for (int a = i; a >= 0; a = parent[a])
        if (a == j) return 1;
    return 0;
}

static int depth(const int *parent, int i) {
    int d = 0;
    for (int a = parent[i]; a >= 0; a = parent[a]) d++;
    return d;
}

/* out (E) for new row i, head h: softmax over the visible keys of
 * q.k / sqrt(E), times v, in double. kl, vl (n_keys, Hkv*E) are the keys and
 * values in logical order (not paged). A key at position P is visible to a row
 * at position Pi when the tree allows it and, with a window, P > Pi - W; a new
 * row's position is n_past + its depth in the tree. */
static void ref_row(double *out, const float *qi, const float *kl, const float *vl, const int *parent, int n_past,
                    int n_new, int window, int i, int kvh, int Hkv, int E) {
    int n_keys = n_past + n_new, kv_dim = Hkv * E;
    double *w = malloc(sizeof(double) * (size_t)n_keys);
    int Pi = n_past + depth(parent, i);
    double mx = -INFINITY;
    for (int p = 0; p < n_keys; p++) {
        int j = p - n_past;
        int P = j < 0 ? p : n_past + depth(parent, j);
        int vis = (j < 0 || is_ancestor_or_self(parent, j, i)) && (window <= 0 || P > Pi - window);
        w[p] = -INFINITY;
        if (!vis) continue;
        double d = 0;
        for (int e = 0; e < E; e++) d += (double)qi[e] * kl[(size_t)p * kv_dim + (size_t)kvh * E + e];
        w[p] = d / sqrt((double)E);
        if (w[p] > mx) mx = w[p];
    }
    double sum = 0;
    for (int p = 0; p < n_keys; p++) sum += w[p] = w[p] == -INFINITY ? 0.0 : exp(w[p] - mx);
    for (int e = 0; e < E; e++) out[e] = 0;
    for (int p = 0; p < n_keys; p++)
        for (int e = 0; e < E; e++) out[e] += w[p] / sum * vl[(size_t)p * kv_dim + (size_t)kvh * E + e];
    free(w);
}

/* A paged cache of `type` holding kl, vl ((n_keys, kv_dim) each) at the
 * positions of `blocks`, every other element NaN (pool blocks, padding). */
static kv_layer_view make_cache(kv_type type, const float *kl, const float *vl, int n_keys, int Hkv, int E,
                                const int32_t *blocks, int pool, size_t stride) {
    size_t es = kv_type_size(type), n = stride * pool;
    uint8_t *kp = malloc(es * n), *vp = malloc(es * n);
    for (size_t x = 0; x < n; x++) {
        if (type == KV_F16) ((uint16_t *)kp)[x] = ((uint16_t *)vp)[x] = 0x7e00; /* NaN */
        else ((float *)kp)[x] = ((float *)vp)[x] = NAN;
    }
    int kv_dim = Hkv * E;
    for (int p = 0; p < n_keys; p++) /* block layout (Hkv, BS, E) */
        for (int h = 0; h < Hkv; h++)
            for (int e = 0; e < E; e++) {
                size_t at = (size_t)blocks[p / BS] * stride + ((size_t)h * BS + p % BS) * E + e;
                size_t from = (size_t)p * kv_dim + (size_t)h * E + e;
                if (type == KV_F16) {
                    ((uint16_t *)kp)[at] = f32_to_fp16(kl[from]);
                    ((uint16_t *)vp)[at] = f32_to_fp16(vl[from]);
                } else {
                    ((float *)kp)[at] = kl[from];
                    ((float *)vp)[at] = vl[from];
                }
            }
    return (kv_layer_view){.k = kp, .v = vp, .block_stride = stride, .block_size = BS, .head_dim = E, .type = type};
}

/* Every value as an F16 cache holds it. */
static void round_f16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = fp16_to_f32(f32_to_fp16(x[i]));
}

/* An F16 cache case also checks its output bit for bit against an F32 cache
 * holding the same (rounded) values: the halves widen exactly, and the
 * arithmetic after that must be the F32 path's. */
static void attention_case(simd_level lvl, kv_type type, int E, int H, int Hkv, int n_past, int n_new,
                           const vis_kind *vk, int window) {
    int n_keys = n_past + n_new, kv_dim = Hkv * E;
    int n_blk = (n_keys + BS - 1) / BS;
    /* block b of the sequence lives in pool block 2*(n_blk-1-b)+1: reversed, with
     * a NaN-filled block between any two, so reading a wrong block shows */
    int pool = 2 * n_blk + 1;
    size_t stride = (size_t)BS * kv_dim + 8; /* padding, also NaN */
    int32_t blocks[8];
    for (int b = 0; b < n_blk; b++) blocks[b] = 2 * (n_blk - 1 - b) + 1;

    float *kl = malloc(sizeof(float) * (size_t)n_keys * kv_dim), *vl = malloc(sizeof(float) * (size_t)n_keys * kv_dim);
    for (size_t x = 0; x < (size_t)n_keys * kv_dim; x++) kl[x] = frand(), vl[x] = frand();
    if (type == KV_F16) round_f16(kl, (size_t)n_keys * kv_dim), round_f16(vl, (size_t)n_keys * kv_dim);
    kv_layer_view kv = make_cache(type, kl, vl, n_keys, Hkv, E, blocks, pool, stride);
    float *stage = malloc(sizeof(float) * BS * E);

    uint8_t mask[MAX_NEW * MAX_NEW];
    for (int i = 0; i < n_new; i++)
        for (int j = 0; j < n_new; j++) mask[i * n_new + j] = (uint8_t)is_ancestor_or_self(vk->parent, j, i);
    attn_seq s = {.row0 = ROW0, .n_new = n_new, .n_past = n_past, .blocks = blocks,
                  .mask = vk->tree ? mask : NULL, .window = window};

    /* rows outside row0 .. row0+n_new-1 must stay untouched */
    int M = ROW0 + n_new + 2;
    size_t qn = (size_t)M * H * E;
    float *q = malloc(sizeof(float) * qn), *out = malloc(sizeof(float) * qn);
    for (size_t x = 0; x < qn; x++) q[x] = 3.0f * frand(), out[x] = 12345.0f;
    float *scores = malloc(sizeof(float) * (size_t)n_keys);
    for (int h = 0; h < H; h++) ops_attention_head(lvl, out, q, &kv, &s, h, H, Hkv, E, scores, stage);
    if (type == KV_F16) {
        kv_layer_view k32 = make_cache(KV_F32, kl, vl, n_keys, Hkv, E, blocks, pool, stride);
        float *o32 = malloc(sizeof(float) * qn);
        for (size_t x = 0; x < qn; x++) o32[x] = 12345.0f;
        for (int h = 0; h < H; h++) ops_attention_head(lvl, o32, q, &k32, &s, h, H, Hkv, E, scores, stage);
        CHECKF(memcmp(out, o32, sizeof(float) * qn) == 0,
               "%s E %d H %d Hkv %d n_past %d n_new %d %s window %d: an F16 cache differs from an F32 cache of its "
               "values", simd_name(lvl), E, H, Hkv, n_past, n_new, vk->name, window);
        free(k32.k), free(k32.v), free(o32);
    }

    double worst = 0, worst_mag = 0, *ref = malloc(sizeof(double) * E);
    int worst_h = 0, worst_i = 0;
    for (int i = 0; i < n_new; i++)
        for (int h = 0; h < H; h++) {
            size_t off = ((size_t)(ROW0 + i) * H + h) * E;
            ref_row(ref, q + off, kl, vl, vk->parent, n_past, n_new, window, i, h / (H / Hkv), Hkv, E);
            double mag = 0, err = 0;
            for (int e = 0; e < E; e++) {
                if (fabs(ref[e]) > mag) mag = fabs(ref[e]);
                double d = fabs(out[off + e] - ref[e]);
                if (!(d <= err)) err = d; /* NaN sticks */
            }
            double rel = err / (mag + 1e-30);
            if (!(rel <= worst)) worst = rel, worst_mag = mag, worst_h = h, worst_i = i;
        }
    CHECKF(worst <= 1e-5,
           "%s %s cache E %d H %d Hkv %d n_past %d n_new %d %s window %d: head %d row %d: error %g of max|ref| %g",
           simd_name(lvl), kv_type_name(type), E, H, Hkv, n_past, n_new, vk->name, window, worst_h, worst_i, worst,
           worst_mag);
    int untouched = 1;
    for (int m = 0; m < M; m++)
        if (m < ROW0 || m >= ROW0 + n_new)
            for (size_t x = 0; x < (size_t)H * E; x++) untouched &= out[(size_t)m * H * E + x] == 12345.0f;
    CHECKF(untouched, "%s E %d H %d Hkv %d n_past %d n_new %d %s window %d: wrote outside the sequence's rows",
           simd_name(lvl), E, H, Hkv, n_past, n_new, vk->name, window);
    free(kv.k), free(kv.v), free(kl), free(vl), free(q), free(out), free(scores), free(ref), free(stage);
}

/* An F16 cache changes only how keys and values are loaded, so its grid is
 * smaller (every load shape: masked E 8 and 80, constant E 64; GQA; a past
 * of several blocks; trees and windows): the aarch64 run is under qemu. */
static int test_attention(simd_level lvl, kv_type type) {
    const int Es[] = {8, 64, 80, 128};
    const int heads[][2] = {{8, 2}, {4, 4}};
    const int pasts[] = {0, 5, 100};
    const int news[] = {1, 5};
    const int windows[] = {0, 2, 30}; /* 2 cuts inside the tree and the new rows; 30 inside the past */
    int f16 = type == KV_F16, n = 0;
    for (int a = 0; a < (f16 ? 3 : 4); a++)
        for (int g = 0; g < (f16 ? 1 : 2); g++)
            for (int b = f16; b < 3; b++)
                for (int c = 0; c < 2; c++)
                    for (int v = 0; v < 2; v++)
                        for (int w = 0; w < 3; w += 1 + f16, n++)
                            attention_case(lvl, type, Es[a], heads[g][0], heads[g][1], pasts[b], news[c], &VIS[v],
                                           windows[w]);
    return n;
}

/* A causal prefill (many new rows: the AVX-512 path scores them in tiles of
 * rows) gives every row the bits of that row alone in a one-row call at its
 * position (decode), with and without a window, for tile remainders too. */
static int prefill_case(simd_level lvl, kv_type type, int E, int n_past, int n_new, int window) {
    const int H = 4, Hkv = 2, kv_dim = Hkv * E;
    int n_keys = n_past + n_new, n_blk = (n_keys + BS - 1) / BS;
    size_t stride = (size_t)BS * kv_dim;
    int32_t *blocks = malloc(sizeof(int32_t) * (size_t)n_blk);
    for (int b = 0; b < n_blk; b++) blocks[b] = n_blk - 1 - b; /* reversed */
    float *kl = malloc(sizeof(float) * (size_t)n_keys * kv_dim), *vl = malloc(sizeof(float) * (size_t)n_keys * kv_dim);
    for (size_t x = 0; x < (size_t)n_keys * kv_dim; x++) kl[x] = frand(), vl[x] = frand();
    kv_layer_view kv = make_cache(type, kl, vl, n_keys, Hkv, E, blocks, n_blk, stride);
    float *stage = malloc(sizeof(float) * BS * E);
    size_t qn = (size_t)(ROW0 + n_new) * H * E;
    float *q = malloc(sizeof(float) * qn), *out = malloc(sizeof(float) * qn), *one = malloc(sizeof(float) * qn);
    float *scores = malloc(sizeof(float) * (size_t)n_keys);
    for (size_t x = 0; x < qn; x++) q[x] = 3.0f * frand(), out[x] = one[x] = 0.0f;
    attn_seq s = {.row0 = ROW0, .n_new = n_new, .n_past = n_past, .blocks = blocks, .window = window};
    for (int h = 0; h < H; h++) ops_attention_head(lvl, out, q, &kv, &s, h, H, Hkv, E, scores, stage);
    int bad = 0;
    for (int i = 0; i < n_new; i++) {
        attn_seq s1 = {.row0 = ROW0 + i, .n_new = 1, .n_past = n_past + i, .blocks = blocks, .window = window};
        for (int h = 0; h < H; h++) ops_attention_head(lvl, one, q, &kv, &s1, h, H, Hkv, E, scores, stage);
        size_t off = (size_t)(ROW0 + i) * H * E;
        bad += memcmp(out + off, one + off, sizeof(float) * H * E) != 0;
    }
    CHECKF(bad == 0, "%s %s cache E %d n_past %d n_new %d window %d: %d prefill rows differ from the same row alone",
           simd_name(lvl), kv_type_name(type), E, n_past, n_new, window, bad);
    free(kv.k), free(kv.v), free(kl), free(vl), free(blocks), free(q), free(out), free(one), free(scores), free(stage);
    return 1;
}

static int test_prefill(simd_level lvl, kv_type type) {
    const int Es[] = {64, 80, 128}, pasts[] = {0, 21}, news[] = {8, 13, 45}, windows[] = {0, 10};
    int f16 = type == KV_F16, n = 0;
    for (int a = 0; a < 3; a++)
        for (int b = f16; b < 2; b++)
            for (int c = f16; c < 3; c += 1 + f16)
                for (int w = 0; w < 2; w++) n += prefill_case(lvl, type, Es[a], pasts[b], news[c], windows[w]);
    return n;
}

/* ---- F32 <-> F16 (the F16 cache's conversions) ------------------------------ */

/* Every path rounds like half.h's scalar rule (nearest even) over normal and
 * subnormal halves, exact ties, overflow to inf and both signs; widening is
 * exact for every one of the 63,488 finite halves and the infinities. */
static void test_f16_convert(simd_level lvl) {
    enum { N = 70001 }; /* odd: the vector body and a tail */
    float *x = malloc(sizeof(float) * N), *back = malloc(sizeof(float) * N);
    uint16_t *h = malloc(sizeof(uint16_t) * N), *h16 = malloc(sizeof(uint16_t) * 65536);
    float *w = malloc(sizeof(float) * 65536);
    for (int i = 0; i < N; i++) {
        float r = frand();
        switch (i % 7) {
        case 0: x[i] = r; break;
        case 1: x[i] = r * 1e-6f; break;                             /* subnormal halves */
        case 2: x[i] = r * 7e4f; break;                              /* near and past 65504 */
        case 3: x[i] = fp16_to_f32((uint16_t)(i * 7919u % 0x7c00)) * (r < 0 ? -1.0f : 1.0f); break; /* exact */
        case 4: { /* exactly halfway between two halves: ties to even */
            uint16_t a = (uint16_t)(i * 104729u % 0x7bff);
            x[i] = 0.5f * (fp16_to_f32(a) + fp16_to_f32((uint16_t)(a + 1)));
            break;
        }
        case 5: x[i] = r * 3e-8f; break; /* below half the smallest subnormal, and around it */
        default: x[i] = r * 1000.0f; break;
        }
    }
    ops_f32_to_f16(lvl, h, x, N);
    int bad = 0, first = -1;
    for (int i = 0; i < N; i++)
        if (h[i] != f32_to_fp16(x[i])) bad++, first = first < 0 ? i : first;
    CHECKF(bad == 0, "%s f32 -> f16: %d of %d differ from the scalar rule (first: %.9g gave 0x%04x, want 0x%04x)",
           simd_name(lvl), bad, N, first >= 0 ? x[first] : 0.0, first >= 0 ? h[first] : 0,
           first >= 0 ? f32_to_fp16(x[first]) : 0);
    int n = 0;
    for (uint32_t u = 0; u < 65536; u++)
        if ((u & 0x7c00) != 0x7c00 || (u & 0x3ff) == 0) h16[n++] = (uint16_t)u; /* finite and +-inf */
    ops_f16_to_f32(lvl, w, h16, n);
    bad = 0;
    for (int i = 0; i < n; i++) bad += memcmp(&w[i], &(float){fp16_to_f32(h16[i])}, 4) != 0;
    CHECKF(bad == 0, "%s f16 -> f32: %d of %d halves widen wrongly", simd_name(lvl), bad, n);
    ops_f16_to_f32(lvl, back, h, N);
    bad = 0;
    for (int i = 0; i < N; i++) bad += fabsf(x[i]) <= 65504.0f && !(fabsf(back[i] - x[i]) <= fabsf(x[i]) * 0x1p-11f + 0x1p-25f);
    CHECKF(bad == 0, "%s f16 round trip: %d of %d values off by more than half an ulp", simd_name(lvl), bad, N);
    free(x), free(back), free(h), free(h16), free(w);
}

/* ---- silu_mul ----------------------------------------------------------- */

enum { SM = 5, SF = 1031 }; /* F odd: rows start at every alignment, tails of every length */

/* The loop ops_silu_mul had before (scalar libm expf), as the speed baseline. */
static void __attribute__((noinline)) silu_mul_libm(float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void test_silu(simd_level lvl) {
    size_t n = (size_t)SM * SF;
    float *x = malloc(sizeof(float) * n), *u = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n),
          *g1 = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        float r = frand();
        x[i] = i % 3 == 0 ? 20.0f * r : i % 3 == 1 ? 4.0f * r * r * r : 95.0f * r; /* wide, near 0, the clamp */
        u[i] = frand();
    }
    /* extremes at both ends of rows and in the middle: vector body and tails */
    const float special[] = {0.0f, -0.0f, 100.0f, -100.0f, 88.0f, -88.0f, 87.0f, -87.0f, 1e-30f, -1e-30f,
                             1e30f, -1e30f, 3.4e38f, -3.4e38f, 0.5f, -0.5f};
    const size_t n_special = sizeof special / sizeof special[0];
    const size_t at[] = {0, SF - 1, SF, 2 * SF + 7, 3 * SF + 500, n - 1};
    for (size_t a = 0; a < sizeof at / sizeof at[0]; a++)
        for (size_t k = 0; k < n_special && at[a] + k < n; k++) x[at[a] + k] = special[(k + a) % n_special];
    u[0] = 1.0f, u[1] = -0.75f; /* 0 and -0 at index 0, 1 with a nonzero u */

    memcpy(g, x, sizeof(float) * n);
    ops_silu_mul(lvl, g, u, SM, SF);
    double worst = 0;
    size_t worst_at = 0;
    int bad_finite = 0;
    for (size_t i = 0; i < n; i++) {
        double ref = (double)x[i] / (1.0 + exp(-(double)x[i])) * u[i];
        /* relative, plus a floor for results below 1e-35: x < -87 gives
         * x / exp(87 or 88) there (the exp's clamp), true values are smaller still */
        double err = fabs(g[i] - ref) / (fabs(ref) + 1e-28);
        if (!(err <= worst)) worst = err, worst_at = i;
        bad_finite += !isfinite(g[i]);
    }
    /* the exp's 1.01 ulp (<= 2 * 2^-24 relative) plus three roundings (1 + e,
     * the divide, the multiply): 5 * 2^-24 = 3e-7 */
    CHECKF(worst <= 3e-7, "%s silu_mul: relative error %g at x %g u %g (got %g, want %.9g)", simd_name(lvl), worst,
           x[worst_at], u[worst_at], g[worst_at], (double)x[worst_at] / (1.0 + exp(-(double)x[worst_at])) * u[worst_at]);
    CHECKF(bad_finite == 0, "%s silu_mul: %d non-finite results from finite inputs", simd_name(lvl), bad_finite);
    CHECKF(g[0] == 0.0f && g[1] == 0.0f, "%s silu_mul: x = 0, -0 gave %g, %g", simd_name(lvl), g[0], g[1]);
    for (size_t i = 0; i < n; i++) {
        if (x[i] == 100.0f || x[i] == 1e30f)
            CHECKF(g[i] == x[i] * u[i], "%s silu_mul: x %g u %g gave %g, want x*u", simd_name(lvl), x[i], u[i], g[i]);
        if (x[i] == -100.0f || x[i] == -1e30f || x[i] == -3.4e38f)
            CHECKF(isfinite(g[i]) && fabsf(g[i]) < 1e-35f, "%s silu_mul: x %g u %g gave %g, want ~0", simd_name(lvl),
                   x[i], u[i], g[i]);
    }
    fprintf(stderr, "%s silu_mul: max relative error %.3g (%.2f * 2^-24)\n", simd_name(lvl), worst,
            worst * 16777216.0);

    /* row by row (each row at a different alignment) and as one flat run of M*F
     * elements give the same bits: a result does not depend on M */
    memcpy(g1, x, sizeof(float) * n);
    for (int m = 0; m < SM; m++) ops_silu_mul(lvl, g1 + (size_t)m * SF, u + (size_t)m * SF, 1, SF);
    CHECKF(memcmp(g, g1, sizeof(float) * n) == 0, "%s silu_mul: M %d F %d differs from %d calls of M 1", simd_name(lvl),
           SM, SF, SM);
    memcpy(g1, x, sizeof(float) * n);
    ops_silu_mul(lvl, g1, u, 1, (int)n);
    CHECKF(memcmp(g, g1, sizeof(float) * n) == 0, "%s silu_mul: M %d F %d differs from M 1 F %zu", simd_name(lvl), SM,
           SF, n);
    free(x), free(u), free(g), free(g1);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* ns per element of a verify-sized call (5 rows of a 14336-wide FFN). The input
 * is restored before each call (silu_mul in place would shrink it towards
 * subnormals); the restore's own time is measured and taken off. */
static double silu_ns(int lvl) {
    int M = 5, F = 14336, reps = 400;
    size_t n = (size_t)M * F;
    float *x = malloc(sizeof(float) * n), *u = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = 6.0f * frand(), u[i] = frand();
    double best = INFINITY, copy = INFINITY;
    for (int trial = 0; trial < 3; trial++) {
        double t0 = now_s();
        for (int r = 0; r < reps; r++) {
            memcpy(g, x, sizeof(float) * n);
            if (lvl < 0) silu_mul_libm(g, u, n);
            else ops_silu_mul((simd_level)lvl, g, u, M, F);
        }
        double t1 = now_s();
        for (int r = 0; r < reps; r++) {
            memcpy(g, x, sizeof(float) * n);
            __asm__ volatile("" : : "r"(g) : "memory");
        }
        double t2 = now_s();
        if (t1 - t0 < best) best = t1 - t0;
        if (t2 - t1 < copy) copy = t2 - t1;
    }
    free(x), free(u), free(g);
    return (best - copy) / reps / n * 1e9;
}

int main(void) {
    simd_level best = simd_detect();
    int cases = 0;
    for (int lvl = SIMD_GENERIC; lvl <= (int)best; lvl++) {
        cases = 0;
        for (int t = KV_F32; t <= KV_F16; t++) {
            cases += test_attention((simd_level)lvl, (kv_type)t);
            cases += test_prefill((simd_level)lvl, (kv_type)t);
        }
        test_f16_convert((simd_level)lvl);
        test_silu((simd_level)lvl);
    }
    fprintf(stderr, "best SIMD path here: %s; %d attention cases per path checked\n", simd_name(best), cases);

    double base = silu_ns(-1);
    fprintf(stderr, "silu_mul speed, M 5 F 14336: libm expf loop %.3f ns/element\n", base);
    for (int lvl = SIMD_GENERIC; lvl <= (int)best; lvl++) {
        double t = silu_ns(lvl);
        fprintf(stderr, "silu_mul speed, M 5 F 14336: %-7s %.3f ns/element (%.1fx the libm loop)\n",
                simd_name((simd_level)lvl), t, base / t);
    }
    TEST_DONE();
}
