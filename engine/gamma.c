/* gamma.c — speculation depth controller and cost model (see gamma.h). */
#include "engine/gamma.h"

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

double gamma_target_ms(const gamma_costs *c, int m) {
    if (m < 1) m = 1;
    int small = m - 1 < 4 ? m - 1 : 4, big = m > 5 ? m - 5 : 0;
    return c->target_ms + c->target_ms_per_pos * small + c->target_ms_per_pos_big * big;
}

void gamma_costs_observe_target(gamma_costs *c, int positions, double ms) {
    if (!(ms > 0)) return;
    if (positions > 5 && c->target_ms > 0) {
        /* a batched pass: what it costs past the first 5 rows goes to the
         * big-batch slope, so the model learns what rows really cost here
         * (per-sequence attention and sampling included, which the one-sequence
         * calibration does not see); the base stays the small-pass figure */
        double big = (ms - gamma_target_ms(c, 5)) / (positions - 5);
        if (big < c->target_ms_per_pos) big = c->target_ms_per_pos;
        c->target_ms_per_pos_big = (1 - COST_EMA) * c->target_ms_per_pos_big + COST_EMA * big;
        return;
    }
    /* attribute the measurement to the base cost, holding the per-position slopes */
    double base = ms - (gamma_target_ms(c, positions) - c->target_ms);
    if (base <= 0) base = ms / positions;
    c->target_ms = c->target_ms > 0 ? (1 - COST_EMA) * c->target_ms + COST_EMA * base : base;
}

double gamma_expected_tokens(double a, int g) {
    if (g <= 0) return 1.0;
    if (a >= 1.0) return g + 1.0;
    if (a <= 0.0) return 1.0;
    return (1.0 - pow(a, g + 1)) / (1.0 - a);
}

double gamma_rate(const gamma_costs *c, double a, int g) {
    double t = gamma_target_ms(c, g + 1) + c->draft_ms * g;
    return t > 0 ? gamma_expected_tokens(a, g) / t : 0.0;
}

double gamma_rate_batch(const gamma_costs *c, double a, int g, int batch) {
    if (batch < 1) batch = 1;
    /* the batch shares each call: one target pass over batch*(g+1) rows and g
     * draft calls over batch rows; this sequence's share is 1/batch of it */
    double draft = g > 0 ? g * (c->draft_ms + c->draft_ms_per_row * (batch - 1)) : 0.0;
    double t = (gamma_target_ms(c, batch * (g + 1)) + draft) / batch;
    return t > 0 ? gamma_expected_tokens(a, g) / t : 0.0;
}

void gamma_ctl_init(gamma_ctl *g, const gamma_params *p) {
    memset(g, 0, sizeof(*g));
    g->prm = *p;
    g->gamma = p->gamma_default;
}

void gamma_ctl_set_params(gamma_ctl *g, const gamma_params *p) {
    g->prm = *p;
    if (g->gamma > p->gamma_max) g->gamma = p->gamma_max;
    if (g->gamma < p->gamma_min) g->gamma = p->gamma_min;
}

double gamma_ctl_alpha(const gamma_ctl *g) {
    int acc = 0, rej = 0;
    for (int i = 0; i < g->n; i++) {
        acc += g->acc[i];
        rej += g->rej[i];
    }
    if (acc + rej == 0) return -1.0;
    return (double)acc / (acc + rej);
}

static void window_reset(gamma_ctl *g) {
    g->n = g->head = g->steps = g->low_streak = 0;
}

int gamma_ctl_next(gamma_ctl *g, const gamma_costs *c) { return gamma_ctl_next_batch(g, c, 1); }

/* Whether plain decoding beats the best γ in [gamma_min, gamma_max] at this
 * batch size and acceptance a; *best gets that γ. */
static bool plain_wins(const gamma_ctl *g, const gamma_costs *c, double a, int batch, int *best) {
    double best_rate = -1;
    *best = g->prm.gamma_min;
    for (int k = g->prm.gamma_min; k <= g->prm.gamma_max; k++) {
        double r = gamma_rate_batch(c, a, k, batch);
        if (r > best_rate) best_rate = r, *best = k;
    }
    return gamma_rate_batch(c, a, 0, batch) > best_rate;
}

int gamma_ctl_next_batch(gamma_ctl *g, const gamma_costs *c, int batch) {
    if (g->plain_left > 0) return 0;
    bool may_skip = g->prm.adaptive && batch > 1 && g->prm.fallback_alpha > 0;
    int best;
    if (!g->prm.adaptive || g->steps < g->prm.warmup) {
        g->gamma = g->prm.adaptive ? g->prm.gamma_default : g->gamma;
        /* warm-up at a big batch: with no α of its own yet, the sequence asks
         * the cost model at the prior; drafting starts once it pays (or the
         * batch shrinks), and its first verify steps then fill the window */
        if (may_skip && plain_wins(g, c, GAMMA_PRIOR_ALPHA, batch, &best)) return 0;
        return g->gamma;
    }
    double a = gamma_ctl_alpha(g);
    if (a < 0) return g->gamma;
    bool plain = plain_wins(g, c, a, batch, &best);
    g->gamma = best;
    /* plain decoding is faster at this batch size: skip drafting this step,
     * but keep the window so speculation returns when the batch shrinks */
    return may_skip && plain ? 0 : best;
}

void gamma_ctl_observe(gamma_ctl *g, int gamma, int accepted) {
    int w = g->prm.window;
    int slot = g->n < w ? g->n++ : g->head;
    if (g->n == w && slot == g->head) g->head = (g->head + 1) % w;
    g->acc[slot] = (uint8_t)accepted;
    g->rej[slot] = accepted < gamma;
    g->steps++;
    double a = gamma_ctl_alpha(g);
    bool decided = g->steps >= g->prm.warmup && a >= 0;
    if (decided && a < g->prm.fallback_alpha) g->low_streak++;
    else g->low_streak = 0;
    if (decided && a >= g->prm.fallback_alpha) g->probing = false; /* the probe found α recovered */
    if (g->low_streak >= (g->probing ? 1 : g->prm.fallback_steps)) {
        g->plain_left = g->prm.probe_interval;
        g->fallbacks++;
        window_reset(g);
    }
}

void gamma_ctl_observe_plain(gamma_ctl *g) {
    if (g->plain_left > 0 && --g->plain_left == 0) {
        g->probes++;
        g->probing = true;
        window_reset(g);
    }
}

void gamma_ctl_fail(gamma_ctl *g) {
    g->plain_left = g->prm.probe_interval;
    g->fallbacks++;
    window_reset(g);
}
