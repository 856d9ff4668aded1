/* gamma.c — the chain cost model (see gamma.h). */
#include "engine/spec/gamma.h"

#include "kernels/check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define COST_EMA 0.1 /* weight of a new measurement */

gamma_params gamma_params_default(void) {
    return (gamma_params){.gamma_min = 2, .gamma_max = 8, .gamma_default = 4, .adaptive = true, .window = 20,
                          .warmup = 5, .fallback_alpha = 0.4f, .fallback_steps = 10, .probe_interval = 32};
}

bool gamma_params_validate(const gamma_params *g, char *err, unsigned long n) {
    if (g->gamma_min < 1 || g->gamma_max > GAMMA_MAX || g->gamma_min > g->gamma_max)
        return snprintf(err, n, "gamma bounds [%d, %d] must satisfy 1 <= gamma_min <= gamma_max <= %d", g->gamma_min,
                        g->gamma_max, GAMMA_MAX), false;
    if (g->gamma_default < g->gamma_min || g->gamma_default > g->gamma_max)
        return snprintf(err, n, "gamma_default %d is outside [%d, %d]", g->gamma_default, g->gamma_min, g->gamma_max),
               false;
    if (g->window < 1 || g->window > GAMMA_WINDOW_MAX)
        return snprintf(err, n, "window %d must be in 1..%d", g->window, GAMMA_WINDOW_MAX), false;
    if (g->warmup < 0 || g->fallback_steps < 1 || g->probe_interval < 1)
        return snprintf(err, n, "warmup, fallback_steps and probe_interval must be positive"), false;
    if (!(g->fallback_alpha >= 0 && g->fallback_alpha <= 1))
        return snprintf(err, n, "fallback alpha %g must be in [0, 1]", (double)g->fallback_alpha), false;
    return true;
}

void gamma_costs_observe_draft(gamma_costs *c, double ms) {
    if (ms > 0) c->draft_ms = c->draft_ms > 0 ? (1 - COST_EMA) * c->draft_ms + COST_EMA * ms : ms;
}

double gamma_keys(int m, int n) { return (double)n + m; }
double gamma_pairs(int m, int n) { return (double)m * n + (double)m * (m + 1) / 2.0; }

void gamma_costs_set_curve(gamma_costs *c, const double *t, int n) {
    if (n < 1 || !(t[1] > 0)) return;
    cost_curve_init(&c->curve, t, n);
}

/* the per-position terms of the model (everything but the base and attention) */
static double pos_ms(const gamma_costs *c, int m) {
    if (m < 1) m = 1;
    if (c->curve.n > 0) return c->target_ms * (cost_curve_ratio(&c->curve, m) - 1.0);
    int small = m - 1 < 4 ? m - 1 : 4, big = m > 5 ? m - 5 : 0;
    return c->target_ms_per_pos * small + c->target_ms_per_pos_big * big;
}

static double att_ms(const gamma_costs *c, double keys, double pairs) {
    return c->target_ms_per_key * (keys > 0 ? keys : 0) + c->target_ms_per_pair * (pairs > 0 ? pairs : 0);
}

double gamma_target_ms(const gamma_costs *c, int m, double keys, double pairs) {
    return c->target_ms + pos_ms(c, m) + att_ms(c, keys, pairs);
}

void gamma_costs_calibrate(gamma_costs *c, double t1, double t5, double tw, int far, double t1f, double t5f) {
    const int n0 = GAMMA_CAL_CTX, W = GAMMA_CAL_ROWS;
    c->target_ms_per_key = c->target_ms_per_pair = 0;
    if (far > n0 && t1f > 0 && t5f > 0 && t1 > 0 && t5 > 0) {
        /* from context n0 to far: one row adds (far-n0)(key + pair), five rows
         * (far-n0)(key + 5 pair) */
        double d1 = (t1f - t1) / (far - n0), d5 = (t5f - t5) / (far - n0);
        double pair = (d5 - d1) / 4, key = d1 - pair;
        if (pair < 0) pair = 0, key = d1;
        if (key < 0) key = 0, pair = d1 > 0 ? d1 : 0;
        c->target_ms_per_key = key;
        c->target_ms_per_pair = pair;
    }
    c->key_prior = c->target_ms_per_key;
    c->pair_prior = c->target_ms_per_pair;
    memset(c->fit, 0, sizeof(c->fit));
    /* the calls less their attention: the base and the per-position slopes */
    double a1 = att_ms(c, gamma_keys(1, n0), gamma_pairs(1, n0)), a5 = att_ms(c, gamma_keys(5, n0), gamma_pairs(5, n0));
    double aw = att_ms(c, gamma_keys(W, n0), gamma_pairs(W, n0));
    c->target_ms = t1 > 0 ? t1 - a1 : 1.0;
    if (c->target_ms <= 0) c->target_ms = t1 > 0 ? t1 : 1.0;
    double small = t5 > t1 ? ((t5 - a5) - (t1 - a1)) / 4 : 0.0;
    double big = tw > t5 ? ((tw - aw) - (t5 - a5)) / (W - 5) : 0.0;
    c->target_ms_per_pos = small > 0 ? small : 0;
    c->target_ms_per_pos_big = big > c->target_ms_per_pos ? big : c->target_ms_per_pos;
}

/* The online fit runs on two time scales. The base follows the host fast (an
 * exponential moving average of what each pass cost beyond its attention
 * terms, weight COST_EMA), since a shared machine changes speed within
 * seconds. The two attention slopes need passes at different contexts, which
 * one growing sequence supplies only slowly, so they come from exponentially
 * weighted least squares over the last ~1/(1-SLOPE_DECAY) passes, with a ridge
 * toward the calibrated slopes worth PRIOR_OBS passes at a context spread of
 * PRIOR_SPAN keys: the data takes over once the contexts seen spread wider
 * than that. Keys and pairs of one-sequence passes at a fixed γ move together,
 * so such data fixes only their sum's direction and the prior keeps the split. */
#define SLOPE_DECAY 0.98
#define PRIOR_OBS 1.0
#define PRIOR_SPAN 256.0

enum { F_W, F_K, F_P, F_Y, F_KK, F_KP, F_PP, F_KY, F_PY };

void gamma_costs_observe_target(gamma_costs *c, int positions, double keys, double pairs, double ms) {
    if (!(ms > 0)) return;
    if (keys < 0) keys = 0;
    if (pairs < 0) pairs = 0;
    if (positions > 5 && c->curve.n > 0) {
        /* the curve keeps its measured shape; the pass tells the host's speed */
        double base = (ms - att_ms(c, keys, pairs)) / cost_curve_ratio(&c->curve, positions);
        if (base > 0) c->target_ms = c->target_ms > 0 ? (1 - COST_EMA) * c->target_ms + COST_EMA * base : base;
        return;
    }
    if (positions > 5 && c->target_ms > 0) {
        /* a batched pass: what it costs past the first 5 rows goes to the
         * big-batch slope, so the model learns what rows really cost here
         * (sampling and per-sequence work included, which the one-sequence
         * calibration does not see); the base stays the small-pass figure */
        double big = (ms - gamma_target_ms(c, 5, keys, pairs)) / (positions - 5);
        if (big < c->target_ms_per_pos) big = c->target_ms_per_pos;
        c->target_ms_per_pos_big = (1 - COST_EMA) * c->target_ms_per_pos_big + COST_EMA * big;
        return;
    }
    double y = ms - pos_ms(c, positions), *f = c->fit;
    double add[9] = {1, keys, pairs, y, keys * keys, keys * pairs, pairs * pairs, keys * y, pairs * y};
    for (int i = 0; i < 9; i++) f[i] = SLOPE_DECAY * f[i] + add[i];
    double w = f[F_W], mk = f[F_K] / w, mp = f[F_P] / w, my = f[F_Y] / w;
    double skk = f[F_KK] - w * mk * mk, skp = f[F_KP] - w * mk * mp, spp = f[F_PP] - w * mp * mp;
    double sky = f[F_KY] - w * mk * my, spy = f[F_PY] - w * mp * my;
    double r = PRIOR_OBS * PRIOR_SPAN * PRIOR_SPAN;
    /* (S + r I) [k p] = [sky spy] + r [k0 p0] */
    double a11 = skk + r, a12 = skp, a22 = spp + r, b1 = sky + r * c->key_prior, b2 = spy + r * c->pair_prior;
    double det = a11 * a22 - a12 * a12;
    double k = det > 0 ? (b1 * a22 - b2 * a12) / det : c->key_prior;
    double p = det > 0 ? (a11 * b2 - a12 * b1) / det : c->pair_prior;
    if (!(k >= 0)) k = 0;
    if (!(p >= 0)) p = 0;
    double att = k * keys + p * pairs;
    if (att > 0.95 * y) { /* slopes this pass cannot carry: scale them down, keep a base */
        k *= 0.95 * y / att, p *= 0.95 * y / att;
        att = 0.95 * y;
    }
    c->target_ms_per_key = k;
    c->target_ms_per_pair = p;
    double base = y - att;
    c->target_ms = c->target_ms > 0 ? (1 - COST_EMA) * c->target_ms + COST_EMA * base : base;
}

double gamma_expected_tokens(double a, int g) {
    if (g <= 0) return 1.0;
    if (a >= 1.0) return g + 1.0;
    if (a <= 0.0) return 1.0;
    return (1.0 - pow(a, g + 1)) / (1.0 - a);
}

double gamma_rate(const gamma_costs *c, double a, int g, int ctx) { return gamma_rate_batch(c, a, g, 1, ctx); }

double gamma_rate_batch(const gamma_costs *c, double a, int g, int batch, int ctx) {
    if (batch < 1) batch = 1;
    /* the batch shares each call: one target pass over batch*(g+1) rows and g
     * draft calls over batch rows; this sequence's share is 1/batch of it */
    double draft = g > 0 ? g * (c->draft_ms + c->draft_ms_per_row * (batch - 1)) : 0.0;
    double t = (gamma_target_ms(c, batch * (g + 1), batch * gamma_keys(g + 1, ctx), batch * gamma_pairs(g + 1, ctx)) +
                draft) /
               batch;
    return t > 0 ? gamma_expected_tokens(a, g) / t : 0.0;
}
