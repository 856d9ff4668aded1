/* sampler.c — logits → processed distribution (temperature, top-k, top-p, min-p) by
 * O(V) vector passes and a radix select over order keys (no sort of the vocabulary),
 * and allocation-free inverse-CDF and residual draws. Contract in sampler.h. */
#include "engine/sample/sampler.h"
#include "kernels/check.h"
#include "engine/sample/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sampler {
    int n_vocab;
    float *w;      /* (V) unnormalised weights exp((logit - max) / T), by token id */
    uint32_t *key; /* (V) rank keys: logit mapped to an unsigned int of the same order */
    int32_t *cand; /* (V) current candidate token ids, ascending */
    int32_t *tmp;  /* (V) radix-select boundary bucket */
    float *probs;  /* (V) output buffer for sampler_sample_logits(probs_out = NULL) */
};

/* ---- 4-lane vectors (GCC/Clang vector extensions; SSE2 at the x86-64 baseline) ---
 * The engine builds at -O2, where GCC does not auto-vectorize these loops, so the
 * hot passes are written with explicit vectors. Every op is lane-wise, so a value
 * computed in any lane is bitwise the same as in any other (determinism). */

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));
typedef uint32_t v4u __attribute__((vector_size(16)));

static inline v4f v4_load(const float *p) { v4f v; memcpy(&v, p, sizeof v); return v; }
static inline void v4_store(float *p, v4f v) { memcpy(p, &v, sizeof v); }
static inline v4f v4_splat(float x) { return (v4f){ x, x, x, x }; }
static inline v4f v4_and(v4f v, v4i mask) { return (v4f)((v4i)v & mask); }
static inline float v4_hsum(v4f v) { return (v[0] + v[1]) + (v[2] + v[3]); }

/* exp(x) for x <= 0 in 4 lanes: Cody–Waite reduction x = n ln2 + r, |r| <= ln2/2, and
 * the degree-7 Taylor polynomial of exp(r) (truncation < 6e-9 relative; a few ulp in
 * all). exp(0) is exactly 1. Lanes with x < -87 (result < 1.7e-38), -inf or NaN
 * give 0: probabilities that small relative to the max token are flushed. */
static inline v4f v4_exp_nonpos(v4f x) {
    const v4i keep = x >= v4_splat(-87.0f);
    x = v4_and(x, keep);
    const v4f magic = v4_splat(12582912.0f); /* 1.5 * 2^23: adding it rounds to integer */
    v4f k = (x * v4_splat(1.44269504088896341f) + magic) - magic;
    v4f r = x - k * v4_splat(0.693359375f);   /* ln2 high part (exact in few bits) */
    r = r - k * v4_splat(-2.12194440e-4f);    /* ln2 low part */
    v4f p = v4_splat(1.0f / 5040.0f);
    p = p * r + v4_splat(1.0f / 720.0f);
    p = p * r + v4_splat(1.0f / 120.0f);
    p = p * r + v4_splat(1.0f / 24.0f);
    p = p * r + v4_splat(1.0f / 6.0f);
    p = p * r + v4_splat(0.5f);
    p = p * r + v4_splat(1.0f);
    p = p * r + v4_splat(1.0f);
    v4i n = __builtin_convertvector(k, v4i);
    v4f scale = (v4f)((n + 127) << 23);
    return v4_and(p * scale, keep);
}

/* Maps logits to unsigned keys of the same order: NaN as -inf, -0 as +0 (so equal
 * values tie and are ranked by id), negatives bit-flipped, positives sign-set. */
static inline v4u v4_logit_key(v4f l) {
    l = (v4f)(((v4i)l & (l == l)) | ((v4i)v4_splat(-INFINITY) & ~(l == l)));
    l = l + v4_splat(0.0f);                   /* -0 + 0 = +0 */
    v4i u = (v4i)l;
    return (v4u)(u ^ ((u >> 31) | (v4i){ INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN }));
}

/* ---- config ---------------------------------------------------------------- */

sampler_config sampler_config_default(void) {
    return (sampler_config){ .temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f };
}

static bool fail(char *err, size_t n, const char *fmt, double v) {
    if (err && n > 0) snprintf(err, n, fmt, v);
    return false;
}

bool sampler_config_validate(const sampler_config *cfg, char *err, size_t n) {
    if (!cfg) {
        if (err && n > 0) snprintf(err, n, "sampler config missing");
        return false;
    }
    if (!(isfinite(cfg->temperature) && cfg->temperature >= 0.0f))
        return fail(err, n, "temperature must be a finite number >= 0 (0 = greedy), got %g", cfg->temperature);
    if (cfg->top_k < 0)
        return fail(err, n, "top_k must be >= 0 (0 = off), got %g", (double)cfg->top_k);
    if (!(cfg->top_p > 0.0f && cfg->top_p <= 1.0f))
        return fail(err, n, "top_p must be in (0, 1] (1 = off), got %g", cfg->top_p);
    if (!(cfg->min_p >= 0.0f && cfg->min_p < 1.0f))
        return fail(err, n, "min_p must be in [0, 1) (0 = off), got %g", cfg->min_p);
    if (!(isfinite(cfg->repeat_penalty) && cfg->repeat_penalty >= 0.0f && cfg->repeat_penalty <= 100.0f))
        return fail(err, n, "repeat_penalty must be in (0, 100] (1 = off), got %g", cfg->repeat_penalty);
    if (!(cfg->presence_penalty >= -2.0f && cfg->presence_penalty <= 2.0f))
        return fail(err, n, "presence_penalty must be in [-2, 2] (0 = off), got %g", cfg->presence_penalty);
    if (!(cfg->frequency_penalty >= -2.0f && cfg->frequency_penalty <= 2.0f))
        return fail(err, n, "frequency_penalty must be in [-2, 2] (0 = off), got %g", cfg->frequency_penalty);
    if (cfg->penalty_last_n < -1)
        return fail(err, n, "repeat_last_n must be >= -1 (-1 = the whole sequence), got %g", (double)cfg->penalty_last_n);
    if (cfg->n_logit_bias < 0 || cfg->n_logit_bias > SAMPLER_MAX_BIAS || (cfg->n_logit_bias > 0 && !cfg->logit_bias))
        return fail(err, n, "logit_bias may have at most %g entries", (double)SAMPLER_MAX_BIAS);
    for (int i = 0; i < cfg->n_logit_bias; i++)
        if (!(cfg->logit_bias[i].bias >= -100.0f && cfg->logit_bias[i].bias <= 100.0f) || cfg->logit_bias[i].id < 0)
            return fail(err, n, "logit_bias values must be in [-100, 100] for token ids >= 0, got %g",
                        cfg->logit_bias[i].bias);
    if (err && n > 0) err[0] = '\0';
    return true;
}

/* ---- penalties (history-dependent, before sampler_probs) -------------------- */

bool sampler_has_penalties(const sampler_config *cfg) {
    return (cfg->repeat_penalty != 0.0f && cfg->repeat_penalty != 1.0f) || cfg->presence_penalty != 0.0f ||
           cfg->frequency_penalty != 0.0f || cfg->n_logit_bias > 0;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

void sampler_penalize(const sampler_config *cfg, const int32_t *hist, int n_hist, const int32_t *ext, int n_ext,
                      int32_t *scratch, float *logits, int n_vocab) {
    for (int i = 0; i < cfg->n_logit_bias; i++)
        if (cfg->logit_bias[i].id < n_vocab) logits[cfg->logit_bias[i].id] += cfg->logit_bias[i].bias;
    float rp = cfg->repeat_penalty == 0.0f ? 1.0f : cfg->repeat_penalty;
    if (rp == 1.0f && cfg->presence_penalty == 0.0f && cfg->frequency_penalty == 0.0f) return;
    int total = n_hist + n_ext;
    int w = cfg->penalty_last_n == 0 ? SAMPLER_LAST_N_DEFAULT : cfg->penalty_last_n < 0 ? total : cfg->penalty_last_n;
    if (w > total) w = total;
    /* the window: the last w tokens of hist ++ ext, sorted so equal ids are runs */
    int from_ext = w < n_ext ? w : n_ext, from_hist = w - from_ext;
    memcpy(scratch, hist + n_hist - from_hist, sizeof(int32_t) * (size_t)from_hist);
    memcpy(scratch + from_hist, ext + n_ext - from_ext, sizeof(int32_t) * (size_t)from_ext);
    qsort(scratch, (size_t)w, sizeof(int32_t), cmp_i32);
    for (int i = 0; i < w;) {
        int j = i;
        while (j < w && scratch[j] == scratch[i]) j++;
        int32_t id = scratch[i];
        if (id >= 0 && id < n_vocab) {
            float l = logits[id];
            l = l > 0.0f ? l / rp : l * rp;
            l -= (float)(j - i) * cfg->frequency_penalty + cfg->presence_penalty;
            if (logits[id] != -INFINITY) logits[id] = l;
        }
        i = j;
    }
}

/* ---- create / destroy ------------------------------------------------------ */

sampler *sampler_create(int n_vocab) {
    if (n_vocab < 1) return NULL;
    size_t V = (size_t)n_vocab;
    /* one allocation; every per-call buffer points into it */
    size_t bytes = sizeof(sampler) + V * (sizeof(float) * 2 + sizeof(uint32_t) + sizeof(int32_t) * 2);
    char *mem = malloc(bytes);
    if (!mem) return NULL;
    sampler *s = (sampler *)mem;
    char *p = mem + sizeof(sampler);
    s->n_vocab = n_vocab;
    s->w = (float *)p;        p += V * sizeof(float);
    s->probs = (float *)p;    p += V * sizeof(float);
    s->key = (uint32_t *)p;   p += V * sizeof(uint32_t);
    s->cand = (int32_t *)p;   p += V * sizeof(int32_t);
    s->tmp = (int32_t *)p;
    return s;
}

void sampler_destroy(sampler *s) { free(s); }

int sampler_n_vocab(const sampler *s) { return s->n_vocab; }

/* ---- ranking: radix select over order keys ---------------------------------- */

/* The rank boundary found by radix_cut: a token is kept iff its key > key, or
 * key == key and its id <= id_cut (equal keys are ranked by ascending id). */
typedef struct { uint32_t key; int32_t id_cut; } rank_cut;

static const rank_cut KEEP_ALL = { 0, INT32_MAX };

/* Digits of the 32-bit key, most significant first: 11 + 11 + 10 bits. The first
 * digit is sign + exponent + 2 mantissa bits of the logit, so typical logits spread
 * over many buckets at once. */
enum { RADIX_LEVELS = 3, RADIX_BUCKETS = 2048 };
static const int radix_shift[RADIX_LEVELS] = { 21, 10, 0 };
static const uint32_t radix_mask[RADIX_LEVELS] = { 0x7FF, 0x7FF, 0x3FF };

/* Over candidates ids[n] (ascending; NULL = 0..n-1), ranked by (key desc, id asc),
 * finds the first rank at which the cumulative weight (mass[id], or 1 per token when
 * mass is NULL) reaches target: per digit, a histogram of the weight, the bucket
 * holding the boundary, then only that bucket goes on; at the end the tokens with
 * one equal key are walked in id order. If rounding keeps the cumulative weight
 * below target, everything is kept. */
static rank_cut radix_cut(sampler *s, const int32_t *ids, int n, const float *mass, double target) {
    const uint32_t *key = s->key;
    const int32_t *cur = ids;
    int ncur = n;
    double above = 0.0; /* weight of the tokens ranked above the current bucket */
    double h[RADIX_BUCKETS];
    uint32_t cnt[RADIX_BUCKETS];
    for (int lv = 0; lv < RADIX_LEVELS; lv++) {
        const int sh = radix_shift[lv];
        const uint32_t mk = radix_mask[lv];
        /* only the digits present: [lo, hi]. The buckets outside are empty, and
         * skipping them adds nothing to above (the same sums, bit for bit); with
         * a small vocabulary (or a bucket of a few tokens) clearing and walking
         * all 2048 cost more than the tokens themselves */
        uint64_t occ[RADIX_BUCKETS / 64] = {0}; /* the digits present, for the walk down */
        uint32_t lo = mk, hi = 0;
        for (int j = 0; j < ncur; j++) {
            uint32_t dg = (key[cur ? cur[j] : j] >> sh) & mk;
            lo = dg < lo ? dg : lo;
            hi = dg > hi ? dg : hi;
            occ[dg / 64] |= 1ull << (dg % 64);
        }
        if (ncur == 0) return KEEP_ALL;
        const size_t span = hi - lo + 1;
        if (mass) {
            memset(h + lo, 0, span * sizeof h[0]);
            if (cur) for (int j = 0; j < ncur; j++) h[(key[cur[j]] >> sh) & mk] += mass[cur[j]];
            else     for (int j = 0; j < ncur; j++) h[(key[j] >> sh) & mk] += mass[j];
        } else {
            memset(cnt + lo, 0, span * sizeof cnt[0]);
            if (cur) for (int j = 0; j < ncur; j++) cnt[(key[cur[j]] >> sh) & mk]++;
            else     for (int j = 0; j < ncur; j++) cnt[(key[j] >> sh) & mk]++;
            for (uint32_t d = lo; d <= hi; d++) h[d] = cnt[d];
        }
        /* the walk down visits the occupied buckets only (an empty one adds 0) */
        int d = -1;
        for (int wi = (int)(hi / 64); wi >= (int)(lo / 64) && d < 0; wi--) {
            for (uint64_t bits = occ[wi]; bits; bits &= ~(1ull << (63 - __builtin_clzll(bits)))) {
                int b = wi * 64 + 63 - __builtin_clzll(bits);
                if (above + h[b] >= target) { d = b; break; }
                above += h[b];
            }
        }
        if (d < 0) return KEEP_ALL;
        int m = 0; /* gather the boundary bucket, keeping id order (in place once cur == tmp) */
        for (int j = 0; j < ncur; j++) {
            int id = cur ? cur[j] : j;
            if (((key[id] >> sh) & mk) == (uint32_t)d) s->tmp[m++] = id;
        }
        cur = s->tmp;
        ncur = m;
    }
    SPECD_CHECK(ncur > 0);
    rank_cut c = { key[cur[0]], cur[ncur - 1] };
    for (int j = 0; j < ncur; j++) {
        above += mass ? (double)mass[cur[j]] : 1.0;
        if (above >= target) { c.id_cut = cur[j]; break; }
    }
    return c;
}

/* Keeps the candidates inside cut c, writing them (ascending) to dst, which may be
 * ids; returns their number and their total weight in *z. */
static int gather_cut(int32_t *dst, const int32_t *ids, int n, const uint32_t *key, rank_cut c,
                      const float *w, double *z) {
    int m = 0;
    double sum = 0.0;
    for (int j = 0; j < n; j++) {
        int id = ids ? ids[j] : j;
        uint32_t k = key[id];
        if (k > c.key || (k == c.key && id <= c.id_cut)) {
            dst[m++] = id;
            if (w) sum += w[id];
        }
    }
    if (z) *z = sum;
    return m;
}

/* ---- processing ------------------------------------------------------------ */

/* largest logit, NaN ignored (-inf if there is none) */
static float max_logit(const float *l, int n) {
    v4f m = v4_splat(-INFINITY);
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        v4f v = v4_load(l + i);
        v4i gt = v > m;                        /* false for NaN */
        m = (v4f)(((v4i)v & gt) | ((v4i)m & ~gt));
    }
    float mx = -INFINITY;
    for (int k = 0; k < 4; k++) mx = m[k] > mx ? m[k] : mx;
    for (; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    return mx;
}

int sampler_argmax(const float *logits, int n) {
    float mx = max_logit(logits, n);
    for (int i = 0; i < n; i++)
        if (logits[i] == mx) return i;
    return 0; /* all NaN */
}

static int one_hot_argmax(float *probs, const float *logits, int n) {
    int id = sampler_argmax(logits, n);
    memset(probs, 0, (size_t)n * sizeof(float));
    probs[id] = 1.0f;
    return id;
}

/* Weights exp((l - mx) / T), computed as (l - mx) * (1/T) when 1/T is finite.
 * inf_mode (mx = +inf): 1 for +inf logits, 0 for the rest. */
typedef struct { float mx, inv_t, t; bool inv_ok, inf_mode; } temper;

static inline v4f v4_weight(const temper *tp, v4f l) {
    if (tp->inf_mode) return v4_and(v4_splat(1.0f), l == v4_splat(INFINITY));
    v4f d = l - v4_splat(tp->mx);
    d = tp->inv_ok ? d * v4_splat(tp->inv_t) : d / v4_splat(tp->t);
    return v4_exp_nonpos(d);
}

/* w[i] for every token; returns their sum (float lanes per 16, double across). */
static double weigh_all(sampler *s, const temper *tp, const float *l) {
    const int V = s->n_vocab;
    float *w = s->w;
    double z = 0.0;
    int i = 0;
    for (; i + 16 <= V; i += 16) {
        v4f a = v4_weight(tp, v4_load(l + i)), b = v4_weight(tp, v4_load(l + i + 4));
        v4f c = v4_weight(tp, v4_load(l + i + 8)), d = v4_weight(tp, v4_load(l + i + 12));
        v4_store(w + i, a); v4_store(w + i + 4, b); v4_store(w + i + 8, c); v4_store(w + i + 12, d);
        z += v4_hsum((a + b) + (c + d));
    }
    for (; i < V; i += 4) { /* tail through the same lane code, padded with -inf */
        float tl[4] = { -INFINITY, -INFINITY, -INFINITY, -INFINITY }, tw[4];
        int m = V - i < 4 ? V - i : 4;
        memcpy(tl, l + i, (size_t)m * sizeof(float));
        v4_store(tw, v4_weight(tp, v4_load(tl)));
        for (int k = 0; k < m; k++) { w[i + k] = tw[k]; z += tw[k]; }
    }
    return z;
}

/* w[id] for the listed tokens only, 4 at a time through the same lane code (so a
 * token's weight is bitwise the one weigh_all gives). Returns their sum. */
static double weigh_ids(sampler *s, const temper *tp, const float *l, const int32_t *ids, int n) {
    double z = 0.0;
    for (int j = 0; j < n; j += 4) {
        float tl[4] = { -INFINITY, -INFINITY, -INFINITY, -INFINITY }, tw[4];
        int m = n - j < 4 ? n - j : 4;
        for (int k = 0; k < m; k++) tl[k] = l[ids[j + k]];
        v4_store(tw, v4_weight(tp, v4_load(tl)));
        for (int k = 0; k < m; k++) { s->w[ids[j + k]] = tw[k]; z += tw[k]; }
    }
    return z;
}

/* rank keys of the listed tokens (NULL = all n) */
static void keys_for(sampler *s, const float *l, const int32_t *ids, int n) {
    for (int j = 0; j < n; j += 4) {
        float tl[4] = { 0, 0, 0, 0 };
        int m = n - j < 4 ? n - j : 4;
        for (int k = 0; k < m; k++) tl[k] = l[ids ? ids[j + k] : j + k];
        v4u key = v4_logit_key(v4_load(tl));
        for (int k = 0; k < m; k++) s->key[ids ? ids[j + k] : j + k] = key[k];
    }
}

/* Appends, in ascending order, the ids i in [0, n) with x[i] >= thr (NaN never) to
 * dst; adds their mass[i] (if mass) into *sum. Returns how many. */
static int collect_ge(int32_t *dst, const float *x, int n, float thr, const float *mass, double *sum) {
    const v4f t = v4_splat(thr);
    int m = 0, i = 0;
    double z = 0.0;
    for (; i + 4 <= n; i += 4) {
        v4i ge = v4_load(x + i) >= t;
        uint64_t h[2];
        memcpy(h, &ge, sizeof h);
        if (!(h[0] | h[1])) continue;
        for (int k = 0; k < 4; k++)
            if (ge[k]) { dst[m++] = i + k; if (mass) z += mass[i + k]; }
    }
    for (; i < n; i++)
        if (x[i] >= thr) { dst[m++] = i; if (mass) z += mass[i]; }
    if (sum) *sum = z;
    return m;
}

/* inverse of the order maps: the float whose rank key (logit_key) or, for weights
 * (non-negative floats), whose bits are `key` */
static float float_of_logit_key(uint32_t key) {
    uint32_t u = (key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static float float_of_bits(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }
static uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, sizeof u); return u; }

/* Prefilter for top-k / top-p over a large vocabulary: a 1-in-16 subsample picks a
 * threshold (the low end of the level-0 bucket where the subsample's count or mass
 * from the top passes the need, with margin); one vector pass collects the tokens at
 * or above it. Every token left out ranks below every token collected, so if the
 * collected ones hold enough (count >= k, mass >= target) the exact selection among
 * them equals the selection over all; otherwise all are used: a poor estimate costs
 * time, never correctness. */
enum { SUB_STRIDE = 16, PREFILTER_MIN_V = 4096 };

void sampler_probs(sampler *s, const sampler_config *cfg, const float *logits, float *probs) {
    SPECD_CHECK(s && cfg && logits && probs && probs != logits);
    SPECD_CHECK(sampler_config_validate(cfg, NULL, 0));
    const int V = s->n_vocab;
    if (cfg->temperature == 0.0f) { one_hot_argmax(probs, logits, V); return; }

    const float mx = max_logit(logits, V);
    if (mx == -INFINITY) { one_hot_argmax(probs, logits, V); return; } /* all -inf/NaN */
    temper tp = { .mx = mx, .t = cfg->temperature, .inv_t = 1.0f / cfg->temperature };
    tp.inv_ok = isfinite(tp.inv_t);
    tp.inf_mode = mx == INFINITY;
    const bool use_k = cfg->top_k > 0 && cfg->top_k < V;
    const bool use_p = cfg->top_p < 1.0f;
    float *w = s->w;
    int32_t *cand = NULL; /* NULL = every token; else ascending ids in s->cand */
    int nc = V;
    double z;

    /* 2. top-k, by logit: temperature > 0 is monotone, so these are the ranks of step 1.
     * Candidates: the tokens at or above a threshold estimated from a subsample (if
     * they are at least k), else all; then an exact radix select among them. */
    if (use_k) {
        const int k = cfg->top_k;
        bool done = false;
        if (V >= PREFILTER_MIN_V && k <= V / 64) {
            uint32_t cnt[RADIX_BUCKETS] = { 0 };
            for (int i = 0; i < V; i += SUB_STRIDE) {
                float tl[4] = { logits[i], 0, 0, 0 };
                cnt[v4_logit_key(v4_load(tl))[0] >> 21]++;
            }
            const uint32_t want = 2u * (uint32_t)(k / SUB_STRIDE) + 8u;
            uint32_t cum = 0;
            int d = RADIX_BUCKETS - 1;
            for (; d >= 0 && cum + cnt[d] < want; d--) cum += cnt[d];
            uint32_t lo_key = (uint32_t)(d < 0 ? 0 : d) << 21;
            if (d > 0 && lo_key > 0x007FFFFFu) { /* above the key of -inf: a real threshold */
                nc = collect_ge(s->cand, logits, V, float_of_logit_key(lo_key), NULL, NULL);
                done = nc >= k;
            }
        }
        cand = s->cand;
        if (!done) { nc = V; cand = NULL; }
        keys_for(s, logits, cand, nc);
        rank_cut c = radix_cut(s, cand, nc, NULL, (double)k);
        nc = gather_cut(s->cand, cand, nc, s->key, c, NULL, NULL);
        cand = s->cand;
        z = weigh_ids(s, &tp, logits, cand, nc);
    } else {
        z = weigh_all(s, &tp, logits);
    }

    /* 3. top-p: the shortest ranked prefix with mass >= top_p of the distribution so far.
     * Over the whole vocabulary, candidates are again the tokens at or above a weight
     * threshold from a subsample, used if they hold at least the target mass. */
    if (use_p) {
        const double target = (double)cfg->top_p * z;
        if (!cand) {
            bool done = false;
            if (V >= PREFILTER_MIN_V) {
                double h[RADIX_BUCKETS] = { 0 }, zs = 0.0;
                for (int i = 0; i < V; i += SUB_STRIDE) { h[bits_of(w[i]) >> 21] += w[i]; zs += w[i]; }
                const double want = zs * ((double)cfg->top_p + 0.5 * (1.0 - (double)cfg->top_p));
                double cum = 0.0;
                int d = RADIX_BUCKETS - 1;
                for (; d >= 0 && cum + h[d] < want; d--) cum += h[d];
                if (d > 0) {
                    double got;
                    nc = collect_ge(s->cand, w, V, float_of_bits((uint32_t)d << 21), w, &got);
                    done = got >= target;
                }
            }
            cand = done ? s->cand : NULL;
            if (!done) nc = V;
            keys_for(s, logits, cand, nc);
        } /* else: keys were made by top-k */
        rank_cut c = radix_cut(s, cand, nc, w, target);
        nc = gather_cut(s->cand, cand, nc, s->key, c, w, &z);
        cand = s->cand;
    }

    /* 4. min-p: the max token survives steps 2-3 and has weight exactly exp(0) = 1 */
    if (cfg->min_p > 0.0f) {
        const float thr = cfg->min_p;
        if (cand) {
            int m = 0;
            z = 0.0;
            for (int j = 0; j < nc; j++)
                if (w[cand[j]] >= thr) { s->cand[m++] = cand[j]; z += w[cand[j]]; }
            nc = m;
        } else {
            nc = collect_ge(s->cand, w, V, thr, w, &z);
            cand = s->cand;
        }
    }

    SPECD_CHECK(z > 0.0);
    const float inv = (float)(1.0 / z);
    if (cand) {
        memset(probs, 0, (size_t)V * sizeof(float));
        for (int j = 0; j < nc; j++) probs[cand[j]] = w[cand[j]] * inv;
    } else {
        int i = 0;
        for (; i + 4 <= V; i += 4) v4_store(probs + i, v4_load(w + i) * v4_splat(inv));
        for (; i < V; i++) probs[i] = w[i] * inv;
    }
}

/* ---- drawing --------------------------------------------------------------- */

enum { CDF_BLOCK = 64 };

/* weight of token i: max(0, p[i]) or, for the residual (q non-NULL), max(0, p[i] - q[i]) */
static inline float cdf_weight(const float *p, const float *q, int i) {
    float r = q ? p[i] - q[i] : p[i];
    return r > 0.0f ? r : 0.0f;
}

/* the same weights, 4 lanes (NaN → 0) */
static inline v4f cdf_weight4(const float *p, const float *q, int i) {
    v4f r = q ? v4_load(p + i) - v4_load(q + i) : v4_load(p + i);
    return v4_and(r, r > v4_splat(0.0f));
}

/* sum of the weights of [b, e): 16-token groups in float lanes, groups in double */
static double block_sum(const float *p, const float *q, int b, int e) {
    double z = 0.0;
    int i = b;
    for (; i + 16 <= e; i += 16) {
        v4f a = (cdf_weight4(p, q, i) + cdf_weight4(p, q, i + 4)) +
                (cdf_weight4(p, q, i + 8) + cdf_weight4(p, q, i + 12));
        z += v4_hsum(a);
    }
    for (; i < e; i++) z += cdf_weight(p, q, i);
    return z;
}

static double total_weight(const float *p, const float *q, int n) {
    double z = 0.0;
    for (int b = 0; b < n; b += CDF_BLOCK) z += block_sum(p, q, b, b + CDF_BLOCK < n ? b + CDF_BLOCK : n);
    return z;
}

/* First token whose cumulative weight exceeds target, skipping whole blocks whose
 * sum stays at or below it; if rounding never lets it exceed, the last token of
 * non-zero weight; -1 if there is none. */
static int cdf_search(const float *p, const float *q, int n, double target) {
    double cum = 0.0;
    int last_block = -1;
    for (int b = 0; b < n; b += CDF_BLOCK) {
        int e = b + CDF_BLOCK < n ? b + CDF_BLOCK : n;
        double bs = block_sum(p, q, b, e);
        if (!(bs > 0.0)) continue;
        last_block = b;
        if (cum + bs <= target) { cum += bs; continue; }
        for (int i = b; i < e; i++) {
            float r = cdf_weight(p, q, i);
            if (r > 0.0f) {
                cum += r;
                if (cum > target) return i;
            }
        }
    }
    if (last_block < 0) return -1;
    int e = last_block + CDF_BLOCK < n ? last_block + CDF_BLOCK : n;
    for (int i = e - 1; i >= last_block; i--)
        if (cdf_weight(p, q, i) > 0.0f) return i;
    SPECD_CHECK(0 && "block with positive sum has no positive weight");
    return -1;
}

int sampler_sample(const float *probs, int n_vocab, double u) {
    SPECD_CHECK(probs && n_vocab > 0 && u >= 0.0 && u < 1.0);
    double total = total_weight(probs, NULL, n_vocab);
    if (!(total > 0.0)) return -1;
    return cdf_search(probs, NULL, n_vocab, u * total);
}

int sampler_sample_residual(const float *p, const float *q, int n_vocab, double u) {
    SPECD_CHECK(p && q && n_vocab > 0 && u >= 0.0 && u < 1.0);
    double total = total_weight(p, q, n_vocab);
    if (!(total >= 1e-12)) return sampler_sample(p, n_vocab, u);
    return cdf_search(p, q, n_vocab, u * total);
}

int sampler_sample_logits(sampler *s, const sampler_config *cfg, const float *logits,
                          float *probs_out, uint64_t seed, uint64_t position) {
    SPECD_CHECK(s && cfg && logits);
    float *probs = probs_out ? probs_out : s->probs;
    if (cfg->temperature == 0.0f) return one_hot_argmax(probs, logits, s->n_vocab);
    sampler_probs(s, cfg, logits, probs);
    return sampler_sample(probs, s->n_vocab, rng_uniform(seed, position, RNG_SAMPLE, 0));
}
