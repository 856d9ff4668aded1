/* tree_ctl.c — the shape controller (see tree_ctl.h). */
#include "engine/spec/tree_ctl.h"

#include <string.h>

#define EWMA 0.1
#define SPEED_EWMA 0.3   /* the host's speed moves within seconds ... */
#define EXTRA_EWMA 0.03  /* ... an entry's own cost rarely: a running mean, then this slow EWMA */
#define TREE_MARGIN 1.05
#define BACKOFF_BELOW 0.8 /* an entry under this share of the best rate backs off its re-probes */
#define BACKOFF_MAX 4

void tree_ctl_init(tree_ctl *c, const double *t_rows, int budget_max, int depth_max, int topk_max) {
    const tree_shape menu[] = {{0, 0, 0}, {4, 3, 2}, {8, 4, 2}, {16, 5, 3}, {budget_max, depth_max, topk_max}};
    memset(c, 0, sizeof(*c));
    c->explore = 3;
    c->reprobe = 48;
    c->retire = TREE_CTL_RETIRE;
    c->speed = 1.0;
    for (int i = 0; i < (int)(sizeof(menu) / sizeof(menu[0])) && c->n < TREE_CTL_MENU; i++) {
        tree_shape s = menu[i];
        if (s.budget > budget_max) s.budget = budget_max;
        if (s.depth > depth_max) s.depth = depth_max;
        if (s.topk > topk_max) s.topk = topk_max;
        if (s.depth > s.budget) s.depth = s.budget; /* a budget of n holds at most n levels, n children */
        if (s.topk > s.budget) s.topk = s.budget;
        if (i > 0 && (s.budget < 1 || s.depth < 1 || s.topk < 1)) continue;
        bool dup = false;
        for (int j = 0; j < c->n; j++) dup |= !memcmp(&c->menu[j], &s, sizeof(s));
        if (dup) continue;
        c->menu[c->n] = s;
        c->tpp[c->n] = 1.0; /* the prior: what plain decoding gives */
        c->rows[c->n] = (double)s.budget + 1;
        c->n++;
    }
    cost_curve_init(&c->curve, t_rows, TREE_CTL_ROWS);
}

/* ms of a pass of R rows, at the speed the curve was measured */
static double t_of(const tree_ctl *c, int R) { return cost_curve_ms(&c->curve, R); }

double tree_ctl_verify_ms(const tree_ctl *c, int rows) { return t_of(c, rows); }

double tree_ctl_rate(const tree_ctl *c, int e, int batch) {
    if (batch < 1) batch = 1;
    int rows = (int)(c->rows[e] + 0.5);
    double ms = t_of(c, batch * rows) / (double)batch + c->extra_ms[e];
    if (ms < 1e-6) ms = 1e-6; /* the residual may undershoot a curve measured too slow */
    return c->tpp[e] / (ms * c->speed);
}

/* The most tree entry e could deliver per ms: every level accepted plus the
 * bonus, nothing spent beyond its share of the verify pass. */
static double ceiling(const tree_ctl *c, int e, int batch) {
    double ms = t_of(c, batch * (c->menu[e].budget + 1)) / (double)batch * c->speed;
    return (c->menu[e].depth + 1) / (ms > 1e-6 ? ms : 1e-6);
}

/* Whether trying e can pay: a tree whose ceiling is below what the chain path
 * measurably delivers never wins, so probing it only costs (a 16-node tree
 * on a compute-bound curve: measured 15% of the conc-1 speed). */
static bool worth_trying(const tree_ctl *c, int e, int batch) {
    return e == 0 || !c->seen[0] || ceiling(c, e, batch) > tree_ctl_rate(c, 0, batch);
}

/* Steps e waits unobserved before its re-probe: longer when it lost the last
 * ones (backoff), far longer once it lost `retire` in a row (retired). */
static long wait_of(const tree_ctl *c, int e) {
    bool retired = e > 0 && c->losses[e] >= c->retire;
    return (long)c->reprobe << (retired ? TREE_CTL_RETIRED_SHIFT : c->backoff[e]);
}

int tree_ctl_pick(const tree_ctl *c, int batch) {
    for (int e = 0; e < c->n; e++)
        if (c->seen[e] < c->explore && worth_trying(c, e, batch)) return e;
    for (int e = 0; e < c->n; e++)
        if (c->age[e] >= wait_of(c, e) && worth_trying(c, e, batch)) return e;
    /* a tree must beat the chain path by TREE_MARGIN: measurements are noisy,
     * and a tree that only ties costs compute other sequences could use */
    int best = 0;
    double br = tree_ctl_rate(c, 0, batch) * TREE_MARGIN;
    for (int e = 1; e < c->n; e++) {
        double r = tree_ctl_rate(c, e, batch);
        if (r > br) best = e, br = r;
    }
    return best;
}

void tree_ctl_seed(tree_ctl *c, const tree_ctl *prior) {
    for (int e = 0; e < c->n; e++)
        for (int f = 0; f < prior->n; f++) {
            if (memcmp(&c->menu[e], &prior->menu[f], sizeof(tree_shape)) || !prior->seen[f]) continue;
            c->tpp[e] = prior->tpp[f], c->rows[e] = prior->rows[f], c->extra_ms[e] = prior->extra_ms[f];
            c->backoff[e] = prior->backoff[f], c->losses[e] = prior->losses[f];
            c->speed = prior->speed;
            c->seen[e] = prior->seen[f] < c->explore ? prior->seen[f] : c->explore;
        }
}

void tree_ctl_observe(tree_ctl *c, int e, int tokens, int rows, int batch, int call_rows, double step_ms) {
    if (e < 0 || e >= c->n) return;
    double a = c->seen[e] ? EWMA : 1.0;
    /* a re-probe: explored, and unobserved for `reprobe` observations (at a
     * batch of B, the engine-wide controller sees one step's B at once) */
    bool reprobed = c->seen[e] >= c->explore && c->age[e] >= c->reprobe;
    for (int f = 0; f < c->n; f++) c->age[f]++;
    c->age[e] = 0;
    c->tpp[e] += a * ((double)tokens - c->tpp[e]);
    c->rows[e] += a * ((double)rows - c->rows[e]);
    if (batch < 1) batch = 1;
    double share = t_of(c, call_rows) / (double)batch; /* this step's share of the verify pass */
    if (c->seen[e] && step_ms > 0) {
        /* the host's speed: what the step took over what this entry's model
         * predicts at the measured speed */
        double pred = share + c->extra_ms[e];
        if (pred > 1e-6) {
            double r = step_ms / pred;
            r = r < 0.05 ? 0.05 : r > 50 ? 50 : r;
            c->speed += SPEED_EWMA * (r - c->speed);
        }
    }
    /* all but the verify pass's share, at the measured speed */
    double extra = step_ms / c->speed - share, ax = 1.0 / (double)(c->seen[e] + 1);
    c->extra_ms[e] += (ax > EXTRA_EWMA ? ax : EXTRA_EWMA) * (extra - c->extra_ms[e]);
    c->seen[e]++;
    /* an entry well below the best backs off, and a tree that stays there
     * after its exploration retires; near it, it is re-probed as usual */
    double best = 0;
    for (int f = 0; f < c->n; f++)
        if (c->seen[f] && tree_ctl_rate(c, f, batch) > best) best = tree_ctl_rate(c, f, batch);
    if (tree_ctl_rate(c, e, batch) < BACKOFF_BELOW * best) {
        /* never the chain path: it is the baseline every tree is judged
         * against, and a chain measured slow early (a request's first steps,
         * a busy moment) must be re-measured soon, or the trees it let in
         * stay in (measured: trees on 96% of the F16 target's steps at
         * 0.94x the chain's speed) */
        if (e > 0 && c->backoff[e] < BACKOFF_MAX) c->backoff[e]++;
        if (e > 0 && reprobed && c->losses[e] < c->retire) c->losses[e]++;
    } else {
        c->backoff[e] = 0, c->losses[e] = 0;
    }
}
