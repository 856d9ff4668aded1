/* accept.c — the lossless accept/reject rule (see accept.h). */
#include "engine/spec/accept.h"

#include "engine/sample/gumbel.h"

#include "engine/sample/rng.h"
#include "engine/sample/sampler.h"

#include <math.h>

double accept_prob(double p, double q) {
    if (q <= 0.0) return 1.0; /* d cannot have been drawn from q; accept is the only mass-preserving choice */
    double r = p / q;
    return r < 1.0 ? r : 1.0;
}

double accept_residual(float *out, const float *p, const float *q, int V, accept_variant variant) {
    double mass = 0.0;
    for (int i = 0; i < V; i++) {
        double d = (double)p[i] - (double)q[i];
        if (variant == ACCEPT_BROKEN_RESIDUAL_ABS) d = fabs(d);
        else if (d < 0) d = 0;
        out[i] = (float)d;
        mass += d;
    }
    if (!(mass >= 1e-12)) { /* p == q: a rejection had probability zero; p keeps the marginal exact */
        for (int i = 0; i < V; i++) out[i] = p[i];
        return 0.0;
    }
    for (int i = 0; i < V; i++) out[i] = (float)(out[i] / mass);
    return mass;
}

int accept_sample_without(const float *p, int V, int32_t d, double u) {
    double total = 0.0;
    for (int i = 0; i < V; i++)
        if (i != d) total += p[i];
    if (!(total > 0.0)) return sampler_sample(p, V, u);
    double x = u * total, c = 0.0;
    int last = -1;
    for (int i = 0; i < V; i++) {
        if (i == d || !(p[i] > 0.0f)) continue;
        c += p[i];
        last = i;
        if (c > x) return i;
    }
    return last; /* rounding left u * total past the end: the last token with weight */
}

int accept_step(int32_t *out, const float *p, const float *q, const int32_t *draft, int gamma, int V, bool greedy,
                const accept_rng *rng, float *scratch) {
    return accept_chain(out, p, q, NULL, draft, gamma, V, greedy, rng, scratch);
}

int accept_chain(int32_t *out, const float *p, const float *q, const bool *det, const int32_t *draft, int gamma, int V,
                 bool greedy, const accept_rng *rng, float *scratch) {
    for (int j = 0; j < gamma; j++) {
        const float *pj = p + (size_t)j * V, *qj = det && det[j] ? NULL : q + (size_t)j * V;
        int32_t d = draft[j];
        uint64_t pos = rng->pos0 + (uint64_t)j;
        bool ok;
        if (greedy) {
            ok = pj[d] > 0.5f; /* one-hot p: d is the target's argmax */
        } else if (!qj) {
            double u = rng_uniform(rng->seed, pos, RNG_ACCEPT, 0);
            ok = u < (double)pj[d]; /* q[d] = 1: P(accept) = p[d] */
        } else {
            double u = rng_uniform(rng->seed, pos, RNG_ACCEPT, 0);
            ok = u * (double)qj[d] < (double)pj[d]; /* P(accept) = min(1, p/q) */
        }
        if (ok) {
            out[j] = d;
            continue;
        }
        double u = rng_uniform(rng->seed, pos, RNG_RESIDUAL, 0);
        if (greedy) {
            out[j] = sampler_sample(pj, V, 0.0); /* the one-hot's token */
        } else if (!qj) {
            out[j] = rng->variant == ACCEPT_CORRECT ? accept_sample_without(pj, V, d, u) : sampler_sample(pj, V, u);
        } else if (rng->variant == ACCEPT_CORRECT || rng->variant == ACCEPT_BROKEN_POINT_KEEP) {
            out[j] = sampler_sample_residual(pj, qj, V, u);
        } else {
            accept_residual(scratch, pj, qj, V, rng->variant);
            out[j] = sampler_sample(scratch, V, u);
        }
        return j;
    }
    const float *pb = p + (size_t)gamma * V;
    out[gamma] = greedy ? sampler_sample(pb, V, 0.0)
                        : sampler_sample(pb, V, rng_uniform(rng->seed, rng->pos0 + (uint64_t)gamma, RNG_BONUS, 0));
    return gamma;
}

int accept_coupled(int32_t *out, const float *p, const int32_t *draft, int gamma, int V, uint64_t seed,
                   uint64_t pos0, accept_variant variant) {
    for (int j = 0;; j++) {
        const float *pj = p + (size_t)j * (size_t)V;
        out[j] = gumbel_sample(pj, V, seed, pos0 + (uint64_t)j);
        if (j < gamma && variant == ACCEPT_BROKEN_COUPLED && pj[draft[j]] >= pj[out[j]]) out[j] = draft[j];
        if (j == gamma || draft[j] != out[j]) return j;
    }
}
