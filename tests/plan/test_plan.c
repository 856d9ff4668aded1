/* test_plan.c — the micro-batch planner on synthetic γ sets (bins, padding
 * cap, optimality against brute force) and the outlier γ cap (p95 of the
 * accepted-length ring, including wrap-around). */
#include "engine/sched/plan.h"
#include "tests/testutil.h"

#include <math.h>
#include <string.h>

#define MAXN 64

typedef struct {
    int nb;
    plan_bin bins[MAXN];
    int order[MAXN];
    double ratio;
} plan_out;

/* Plans and checks every structural invariant; returns the plan. */
static plan_out plan_checked(const int *g, int n, float cap) {
    plan_out o;
    memset(&o, 0xff, sizeof(o));
    o.nb = plan_bins(g, n, cap, o.bins, o.order, &o.ratio);
    CHECKF(o.nb >= (n > 0) && o.nb <= n, "n %d: %d bins", n, o.nb);
    /* order is a permutation sorted by (γ, index) */
    int seen[MAXN] = {0};
    for (int i = 0; i < n; i++) {
        CHECKF(o.order[i] >= 0 && o.order[i] < n, "order[%d] = %d", i, o.order[i]);
        if (o.order[i] >= 0 && o.order[i] < n) seen[o.order[i]]++;
        if (i > 0 && o.order[i - 1] >= 0 && o.order[i - 1] < n && o.order[i] >= 0 && o.order[i] < n) {
            int a = o.order[i - 1], b = o.order[i];
            CHECKF(g[a] < g[b] || (g[a] == g[b] && a < b), "order not sorted at %d", i);
        }
    }
    for (int i = 0; i < n; i++) CHECKF(seen[i] == 1, "index %d appears %d times in order", i, seen[i]);
    /* bins tile order, ascending γ, gamma = max member γ, ratio ≤ cap; a γ is never split */
    long rect_all = 0, real_all = 0;
    int at = 0;
    for (int b = 0; b < o.nb; b++) {
        const plan_bin *B = &o.bins[b];
        CHECKF(B->first == at && B->n > 0, "bin %d: first %d (want %d) n %d", b, B->first, at, B->n);
        if (B->first != at || B->n <= 0 || at + B->n > n) return o;
        int mx = -1;
        long real = 0;
        for (int m = at; m < at + B->n; m++) {
            int gi = g[o.order[m]];
            mx = gi > mx ? gi : mx;
            real += gi + 1;
        }
        long rect = (long)B->n * (B->gamma + 1);
        CHECKF(B->gamma == mx, "bin %d: gamma %d, max member %d", b, B->gamma, mx);
        CHECKF((double)rect <= (double)cap * (double)real, "bin %d ratio %ld/%ld over cap %g", b, rect, real,
               (double)cap);
        if (b > 0) CHECKF(o.bins[b - 1].gamma < B->gamma, "bins not ascending / γ split at bin %d", b);
        rect_all += rect, real_all += real;
        at += B->n;
    }
    CHECKF(at == n, "bins cover %d of %d", at, n);
    if (n > 0) CHECKF(o.ratio == (double)rect_all / (double)real_all, "ratio %.17g vs %ld/%ld", o.ratio, rect_all,
                      real_all);
    else CHECK(o.ratio == 1.0);
    return o;
}

/* Brute force over every cut of the distinct-γ groups: fewest bins, then
 * fewest rectangular positions. */
static void brute(const int *g, int n, float cap, int *best_bins, long *best_rect) {
    int cnt[GAMMA_MAX + 1] = {0}, gv[GAMMA_MAX + 1], gc[GAMMA_MAX + 1], k = 0;
    for (int i = 0; i < n; i++) cnt[g[i]]++;
    for (int v = 0; v <= GAMMA_MAX; v++)
        if (cnt[v]) gv[k] = v, gc[k] = cnt[v], k++;
    *best_bins = 1 << 30, *best_rect = 1L << 60;
    for (unsigned mask = 0; mask < (1u << (k - 1)); mask++) { /* bit i: cut after group i */
        int bins = 0, ok = 1;
        long rect_all = 0, members = 0, real = 0;
        for (int i = 0; i < k; i++) {
            members += gc[i], real += (long)gc[i] * (gv[i] + 1);
            if (i == k - 1 || (mask >> i & 1)) {
                long rect = members * (gv[i] + 1);
                if ((double)rect > (double)cap * (double)real) ok = 0;
                rect_all += rect, bins++, members = 0, real = 0;
            }
        }
        if (ok && (bins < *best_bins || (bins == *best_bins && rect_all < *best_rect)))
            *best_bins = bins, *best_rect = rect_all;
    }
}

static void expect_bins(const plan_out *o, int nb, const int (*want)[2], const char *what) {
    CHECKF(o->nb == nb, "%s: %d bins, want %d", what, o->nb, nb);
    for (int b = 0; b < nb && b < o->nb; b++)
        CHECKF(o->bins[b].gamma == want[b][0] && o->bins[b].n == want[b][1], "%s: bin %d = (γ %d, n %d), want (%d, %d)",
               what, b, o->bins[b].gamma, o->bins[b].n, want[b][0], want[b][1]);
}

static void test_bins(void) {
    { /* all equal: one bin, no padding, order = identity */
        int g[5] = {4, 4, 4, 4, 4};
        plan_out o = plan_checked(g, 5, 1.5f);
        expect_bins(&o, 1, (const int[][2]){{4, 5}}, "equal");
        CHECK(o.ratio == 1.0);
        for (int i = 0; i < 5; i++) CHECK(o.order[i] == i);
    }
    { /* {1,1,8,8}: merged would be 36/22 = 1.64 > 1.5 → two bins; at 2.0 one bin */
        int g[4] = {8, 1, 8, 1};
        plan_out o = plan_checked(g, 4, 1.5f);
        expect_bins(&o, 2, (const int[][2]){{1, 2}, {8, 2}}, "1188@1.5");
        CHECK(o.ratio == 1.0);
        CHECK(o.order[0] == 1 && o.order[1] == 3 && o.order[2] == 0 && o.order[3] == 2);
        o = plan_checked(g, 4, 2.0f);
        expect_bins(&o, 1, (const int[][2]){{8, 4}}, "1188@2");
        CHECK(o.ratio == 36.0 / 22.0);
    }
    { /* spread 2..8, shuffled */
        int g[7] = {5, 2, 8, 3, 7, 4, 6};
        plan_out o = plan_checked(g, 7, 1.0f);
        expect_bins(&o, 7, (const int[][2]){{2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}, {7, 1}, {8, 1}}, "spread@1");
        CHECK(o.ratio == 1.0);
        /* 1.25: [2,3,4] is exactly 15/12 = 1.25 (the cap is inclusive), [5..8] 36/30 */
        o = plan_checked(g, 7, 1.25f);
        expect_bins(&o, 2, (const int[][2]){{4, 3}, {8, 4}}, "spread@1.25");
        CHECK(o.ratio == 51.0 / 42.0);
        /* 1.5: all in one, exactly 63/42 = 1.5 */
        o = plan_checked(g, 7, 1.5f);
        expect_bins(&o, 1, (const int[][2]){{8, 7}}, "spread@1.5");
        CHECK(o.ratio == 1.5);
        o = plan_checked(g, 7, 3.0f);
        expect_bins(&o, 1, (const int[][2]){{8, 7}}, "spread@3");
        CHECK(o.ratio == 1.5);
        /* just under 1.5: [2..8] no longer fits */
        o = plan_checked(g, 7, nextafterf(1.5f, 0.0f));
        CHECK(o.nb == 2);
    }
    { /* γ = 0 members: kept apart when merging breaks the cap, merged when it doesn't */
        int g[4] = {3, 0, 0, 0}; /* merged: 16/7 */
        plan_out o = plan_checked(g, 4, 1.5f);
        expect_bins(&o, 2, (const int[][2]){{0, 3}, {3, 1}}, "0003");
        CHECK(o.order[0] == 1 && o.order[1] == 2 && o.order[2] == 3 && o.order[3] == 0);
        int h[5] = {4, 4, 0, 4, 4}; /* merged: 25/21 */
        o = plan_checked(h, 5, 1.5f);
        expect_bins(&o, 1, (const int[][2]){{4, 5}}, "04444");
        CHECK(o.ratio == 25.0 / 21.0);
        int z[3] = {0, 0, 0};
        o = plan_checked(z, 3, 1.5f);
        expect_bins(&o, 1, (const int[][2]){{0, 3}}, "000");
    }
    { /* extending a bin can LOWER its ratio: {0},{5} is 12/7 but {0,5,10×4} is 66/51,
       * so a left-to-right greedy would stop at two bins; the planner finds one. */
        int g[6] = {10, 0, 10, 5, 10, 10};
        plan_out o = plan_checked(g, 6, 1.5f);
        expect_bins(&o, 1, (const int[][2]){{10, 6}}, "nonmonotone");
        CHECK(o.ratio == 66.0 / 51.0);
    }
    { /* n = 1 and n = 0 */
        int g[1] = {7};
        plan_out o = plan_checked(g, 1, 1.5f);
        expect_bins(&o, 1, (const int[][2]){{7, 1}}, "n1");
        CHECK(o.order[0] == 0 && o.ratio == 1.0);
        o = plan_checked(g, 0, 1.5f);
        CHECK(o.nb == 0 && o.ratio == 1.0);
    }
    { /* determinism and optimality on random sets (γ ≤ 10 keeps brute force small) */
        uint64_t s = 0x9e3779b97f4a7c15ull;
        const float caps[] = {1.0f, 1.1f, 1.25f, 1.5f, 2.0f, 3.0f};
        for (int it = 0; it < 600; it++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            int n = 1 + (int)((s >> 33) % 40);
            int spread = 1 + (int)((s >> 20) % 11);
            int g[MAXN];
            for (int i = 0; i < n; i++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                g[i] = (int)((s >> 33) % (uint64_t)spread);
            }
            float cap = caps[it % 6];
            plan_out a = plan_checked(g, n, cap), b = plan_checked(g, n, cap);
            CHECKF(a.nb == b.nb && !memcmp(a.bins, b.bins, sizeof(plan_bin) * (size_t)a.nb) &&
                       !memcmp(a.order, b.order, sizeof(int) * (size_t)n),
                   "iteration %d: not deterministic", it);
            int bb;
            long br;
            brute(g, n, cap, &bb, &br);
            long rect = 0;
            for (int k = 0; k < a.nb; k++) rect += (long)a.bins[k].n * (a.bins[k].gamma + 1);
            CHECKF(a.nb == bb && rect == br, "iteration %d (n %d, cap %g): %d bins / %ld positions, best %d / %ld", it,
                   n, (double)cap, a.nb, rect, bb, br);
        }
    }
}

static void test_history(void) {
    plan_history h = {0};
    CHECK(plan_history_p95(&h) == -1);
    CHECK(plan_cap_gamma(6, &h) == 6);
    for (int i = 0; i < PLAN_HISTORY_MIN - 1; i++) plan_history_add(&h, 2);
    CHECK(plan_history_p95(&h) == -1); /* 19 samples: not yet */
    CHECK(plan_cap_gamma(6, &h) == 6);
    plan_history_add(&h, 2);
    CHECK(plan_history_p95(&h) == 2);
    CHECK(plan_cap_gamma(6, &h) == 3);
    CHECK(plan_cap_gamma(3, &h) == 3);
    CHECK(plan_cap_gamma(2, &h) == 2);
    CHECK(plan_cap_gamma(0, &h) == 0);

    /* 100 samples: 95 × 2 and 5 × 7 → p95 = 2; 94 × 2 and 6 × 7 → p95 = 7 */
    h = (plan_history){0};
    for (int i = 0; i < 100; i++) plan_history_add(&h, i % 20 == 19 ? 7 : 2);
    CHECK(plan_history_p95(&h) == 2);
    CHECK(plan_cap_gamma(8, &h) == 3);
    h = (plan_history){0};
    for (int i = 0; i < 100; i++) plan_history_add(&h, i < 6 ? 7 : 2);
    CHECK(plan_history_p95(&h) == 7);
    CHECK(plan_cap_gamma(8, &h) == 8);
    CHECK(plan_cap_gamma(16, &h) == 8);

    /* 0..15 five times each (80%) and 20 × GAMMA_MAX: p95 = GAMMA_MAX */
    h = (plan_history){0};
    for (int i = 0; i < 100; i++) plan_history_add(&h, i % 20 > GAMMA_MAX ? GAMMA_MAX : i % 20);
    CHECK(plan_history_p95(&h) == GAMMA_MAX);
    h = (plan_history){0};
    for (int i = 0; i < 100; i++) plan_history_add(&h, i % 10); /* 10 each of 0..9 */
    CHECK(plan_history_p95(&h) == 9);

    /* nothing ever accepted: p95 = 0, and a γ ≥ 1 is capped to 1, never 0 */
    h = (plan_history){0};
    for (int i = 0; i < 50; i++) plan_history_add(&h, 0);
    CHECK(plan_history_p95(&h) == 0);
    CHECK(plan_cap_gamma(5, &h) == 1);
    CHECK(plan_cap_gamma(1, &h) == 1);
    CHECK(plan_cap_gamma(0, &h) == 0);

    /* wrap-around: the ring keeps the newest PLAN_HISTORY_LEN samples */
    h = (plan_history){0};
    for (int i = 0; i < PLAN_HISTORY_LEN; i++) plan_history_add(&h, 1);
    CHECK(h.n == PLAN_HISTORY_LEN && plan_history_p95(&h) == 1);
    for (int i = 0; i < PLAN_HISTORY_LEN; i++) plan_history_add(&h, 6);
    CHECK(h.n == PLAN_HISTORY_LEN && plan_history_p95(&h) == 6); /* every 1 overwritten */
    for (int i = 0; i < 240; i++) plan_history_add(&h, 0);        /* 240 × 0 + 16 × 6: 93.75% */
    CHECK(plan_history_p95(&h) == 6);
    for (int i = 0; i < 4; i++) plan_history_add(&h, 0);          /* 244 × 0 + 12 × 6: 95.3% */
    CHECK(plan_history_p95(&h) == 0);
    CHECK(plan_cap_gamma(4, &h) == 1);
    for (int i = 0; i < 13; i++) plan_history_add(&h, 3);         /* 243 × 0 + 13 × 3: 94.9% */
    CHECK(plan_history_p95(&h) == 3);

    /* after any number of adds the ring holds exactly the newest min(adds, LEN) samples */
    for (int adds = 1; adds < 3 * PLAN_HISTORY_LEN; adds += 37) {
        h = (plan_history){0};
        int want[GAMMA_MAX + 1] = {0}, got[GAMMA_MAX + 1] = {0};
        for (int i = 0; i < adds; i++) {
            int v = (i * 7 + i / 5) % (GAMMA_MAX + 1);
            plan_history_add(&h, v);
            if (i >= adds - PLAN_HISTORY_LEN) want[v]++;
        }
        int held = adds < PLAN_HISTORY_LEN ? adds : PLAN_HISTORY_LEN;
        CHECKF(h.n == held, "%d adds: n %d", adds, h.n);
        for (int i = 0; i < held; i++) got[h.hist[i]]++;
        CHECKF(!memcmp(want, got, sizeof(want)), "%d adds: the ring does not hold the newest samples", adds);
    }
}

int main(void) {
    test_bins();
    test_history();
    TEST_DONE();
}
