/* sampler.c — logits → processed distribution (temperature, top-k, top-p, min-p) by
 * O(V) passes and an 8-bit radix select over order keys (no sort of the vocabulary),
 * and allocation-free inverse-CDF and residual draws. Contract in sampler.h. */
#include "engine/sampler.h"
#include "engine/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SAMPLER_ASSERT(c) do { if (!(c)) { fprintf(stderr, "%s:%d: sampler invariant failed: %s\n", \
    __FILE__, __LINE__, #c); abort(); } } while (0)

struct sampler {
    int n_vocab;
    float *w;      /* (V) unnormalised weights exp((logit - max) / T), by token id */
    uint32_t *key; /* (V) rank keys: logit mapped to an unsigned int of the same order */
    int32_t *cand; /* (V) current candidate token ids, ascending */
    int32_t *tmp;  /* (V) radix-select boundary bucket */
    float *probs;  /* (V) output buffer for sampler_sample_logits(probs_out = NULL) */
};

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
    if (err && n > 0) err[0] = '\0';
    return true;
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

/* ---- ranking helpers ------------------------------------------------------- */

/* Maps a logit to an unsigned key with the same order (NaN as -inf, -0 as +0), so a
 * radix select over bytes ranks tokens exactly like comparing floats would. */
static inline uint32_t logit_key(float x) {
    if (x != x) x = -INFINITY;
    if (x == 0.0f) x = 0.0f;
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* The rank boundary found by radix_cut: a token is kept iff its key > key, or
 * key == key and its id <= id_cut (ties ranked by ascending id). */
typedef struct { uint32_t key; int32_t id_cut; } rank_cut;

static const rank_cut KEEP_ALL = { 0, INT32_MAX };

/* Over candidates ids[n] (ascending; NULL = 0..n-1), ranked by (key desc, id asc),
 * finds the first rank at which the cumulative weight (mass[id], or 1 per token when
 * mass is NULL) reaches target. Four passes of an 8-bit radix select, each over the
 * bucket that holds the boundary, then a walk over the equal-key tokens in id order.
 * If rounding keeps the cumulative weight below target, everything is kept. */
static rank_cut radix_cut(sampler *s, const int32_t *ids, int n, const float *mass, double target) {
    const uint32_t *key = s->key;
    const int32_t *cur = ids;
    int ncur = n;
    double above = 0.0; /* weight of tokens ranked above the current bucket */
    for (int shift = 24; shift >= 0; shift -= 8) {
        double h[256];
        memset(h, 0, sizeof h);
        if (mass) {
            for (int j = 0; j < ncur; j++) {
                int id = cur ? cur[j] : j;
                h[(key[id] >> shift) & 255u] += mass[id];
            }
        } else {
            for (int j = 0; j < ncur; j++) {
                int id = cur ? cur[j] : j;
                h[(key[id] >> shift) & 255u] += 1.0;
            }
        }
        int d = 255;
        for (; d >= 0; d--) {
            if (above + h[d] >= target) break;
            above += h[d];
        }
        if (d < 0) return KEEP_ALL;
        int m = 0; /* gather the boundary bucket (in place once cur == tmp) */
        for (int j = 0; j < ncur; j++) {
            int id = cur ? cur[j] : j;
            if (((key[id] >> shift) & 255u) == (uint32_t)d) s->tmp[m++] = id;
        }
        cur = s->tmp;
        ncur = m;
    }
    SAMPLER_ASSERT(ncur > 0);
    rank_cut c = { key[cur[0]], cur[ncur - 1] };
    for (int j = 0; j < ncur; j++) {
        above += mass ? (double)mass[cur[j]] : 1.0;
        if (above >= target) { c.id_cut = cur[j]; break; }
    }
    return c;
}

/* Keeps the candidates inside cut c; writes them (ascending) to dst, which may be ids. */
static int gather_cut(int32_t *dst, const int32_t *ids, int n, const uint32_t *key, rank_cut c) {
    int m = 0;
    for (int j = 0; j < n; j++) {
        int id = ids ? ids[j] : j;
        uint32_t k = key[id];
        if (k > c.key || (k == c.key && id <= c.id_cut)) dst[m++] = id;
    }
    return m;
}

static double sum_over(const float *w, const int32_t *ids, int n) {
    double z = 0.0;
    for (int j = 0; j < n; j++) z += w[ids[j]];
    return z;
}

static void one_hot(float *probs, int n, int id) {
    memset(probs, 0, (size_t)n * sizeof(float));
    probs[id] = 1.0f;
}

/* ---- processing ------------------------------------------------------------ */

int sampler_argmax(const float *logits, int n) {
    int best = -1;
    float bv = 0.0f;
    for (int i = 0; i < n; i++) {
        float v = logits[i];
        if (v == v && (best < 0 || v > bv)) { best = i; bv = v; }
    }
    return best < 0 ? 0 : best;
}

void sampler_probs(sampler *s, const sampler_config *cfg, const float *logits, float *probs) {
    SAMPLER_ASSERT(s && cfg && logits && probs && probs != logits);
    SAMPLER_ASSERT(sampler_config_validate(cfg, NULL, 0));
    const int V = s->n_vocab;
    if (cfg->temperature == 0.0f) { one_hot(probs, V, sampler_argmax(logits, V)); return; }

    float mx = -INFINITY;
    for (int i = 0; i < V; i++) mx = logits[i] > mx ? logits[i] : mx; /* NaN never wins */
    if (mx == -INFINITY) { one_hot(probs, V, 0); return; }
    const bool inf_mode = mx == INFINITY; /* uniform over the +inf logits */
    const float T = cfg->temperature;
    const bool use_k = cfg->top_k > 0 && cfg->top_k < V;
    const bool use_p = cfg->top_p < 1.0f;
    float *w = s->w;
    uint32_t *key = s->key;

    /* candidates: NULL = every token; else ascending ids in s->cand */
    int32_t *cand = NULL;
    int nc = V;
    if (use_k || use_p)
        for (int i = 0; i < V; i++) key[i] = logit_key(logits[i]);

    /* top-k by logit: temperature > 0 is monotone, so the ranks are those of step 1 */
    if (use_k) {
        rank_cut c = radix_cut(s, NULL, V, NULL, (double)cfg->top_k);
        nc = gather_cut(s->cand, NULL, V, key, c);
        cand = s->cand;
    }

    /* temperature + softmax numerators over the candidates (the max has weight 1) */
    double z = 0.0;
    if (cand) {
        for (int j = 0; j < nc; j++) {
            int id = cand[j];
            float l = logits[id];
            float x = inf_mode ? (l == INFINITY ? 0.0f : -INFINITY) : (l - mx) / T;
            float e = x == x ? expf(x) : 0.0f;
            w[id] = e;
            z += e;
        }
    } else {
        double z4[4] = { 0, 0, 0, 0 };
        int i = 0;
        for (; i + 4 <= V; i += 4) {
            for (int k = 0; k < 4; k++) {
                float l = logits[i + k];
                float x = inf_mode ? (l == INFINITY ? 0.0f : -INFINITY) : (l - mx) / T;
                float e = x == x ? expf(x) : 0.0f;
                w[i + k] = e;
                z4[k] += e;
            }
        }
        for (; i < V; i++) {
            float l = logits[i];
            float x = inf_mode ? (l == INFINITY ? 0.0f : -INFINITY) : (l - mx) / T;
            float e = x == x ? expf(x) : 0.0f;
            w[i] = e;
            z4[0] += e;
        }
        z = (z4[0] + z4[1]) + (z4[2] + z4[3]);
    }

    /* top-p: shortest ranked prefix with mass >= top_p of the current distribution */
    if (use_p) {
        rank_cut c = radix_cut(s, cand, nc, w, (double)cfg->top_p * z);
        nc = gather_cut(s->cand, cand, nc, key, c);
        cand = s->cand;
        z = sum_over(w, cand, nc);
    }

    /* min-p: the max token always survives steps 2-3 and has weight exactly 1 */
    if (cfg->min_p > 0.0f) {
        const float thr = cfg->min_p;
        int m = 0;
        if (cand) {
            for (int j = 0; j < nc; j++) if (w[cand[j]] >= thr) s->cand[m++] = cand[j];
        } else {
            for (int i = 0; i < V; i++) if (w[i] >= thr) s->cand[m++] = i;
        }
        cand = s->cand;
        nc = m;
        z = sum_over(w, cand, nc);
    }

    SAMPLER_ASSERT(z > 0.0);
    const double inv = 1.0 / z;
    if (cand) {
        memset(probs, 0, (size_t)V * sizeof(float));
        for (int j = 0; j < nc; j++) probs[cand[j]] = (float)(w[cand[j]] * inv);
    } else {
        for (int i = 0; i < V; i++) probs[i] = (float)(w[i] * inv);
    }
}

/* ---- drawing --------------------------------------------------------------- */

#define CDF_BLOCK 64

/* weight of token i: p[i], or max(0, p[i] - q[i]) for the residual (q non-NULL) */
static inline float cdf_weight(const float *p, const float *q, int i) {
    float r = q ? p[i] - q[i] : p[i];
    return r > 0.0f ? r : 0.0f;
}

static double block_sum(const float *p, const float *q, int b, int e) {
    double a[4] = { 0, 0, 0, 0 };
    int i = b;
    for (; i + 4 <= e; i += 4)
        for (int k = 0; k < 4; k++) a[k] += cdf_weight(p, q, i + k);
    for (; i < e; i++) a[0] += cdf_weight(p, q, i);
    return (a[0] + a[1]) + (a[2] + a[3]);
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
        if (bs <= 0.0) continue;
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
    SAMPLER_ASSERT(0 && "block with positive sum has no positive weight");
    return -1;
}

int sampler_sample(const float *probs, int n_vocab, double u) {
    SAMPLER_ASSERT(probs && n_vocab > 0 && u >= 0.0 && u < 1.0);
    double total = 0.0;
    for (int b = 0; b < n_vocab; b += CDF_BLOCK)
        total += block_sum(probs, NULL, b, b + CDF_BLOCK < n_vocab ? b + CDF_BLOCK : n_vocab);
    if (!(total > 0.0)) return -1;
    return cdf_search(probs, NULL, n_vocab, u * total);
}

int sampler_sample_residual(const float *p, const float *q, int n_vocab, double u) {
    SAMPLER_ASSERT(p && q && n_vocab > 0 && u >= 0.0 && u < 1.0);
    double total = 0.0;
    for (int b = 0; b < n_vocab; b += CDF_BLOCK)
        total += block_sum(p, q, b, b + CDF_BLOCK < n_vocab ? b + CDF_BLOCK : n_vocab);
    if (!(total >= 1e-12)) return sampler_sample(p, n_vocab, u);
    return cdf_search(p, q, n_vocab, u * total);
}

int sampler_sample_logits(sampler *s, const sampler_config *cfg, const float *logits,
                          float *probs_out, uint64_t seed, uint64_t position) {
    float *probs = probs_out ? probs_out : s->probs;
    sampler_probs(s, cfg, logits, probs);
    return sampler_sample(probs, s->n_vocab, rng_uniform(seed, position, RNG_SAMPLE, 0));
}
