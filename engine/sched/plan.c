/* plan.c — micro-batch planner and outlier γ cap (see plan.h). */
#include "engine/sched/plan.h"
#include "kernels/check.h"

#include <stdio.h>
#include <stdlib.h>

#define NG (GAMMA_MAX + 1) /* distinct γ values */

int plan_bins(const int *gamma, int n, float padding_cap, plan_bin *bins, int *order, double *padding_ratio) {
    SPECD_CHECK(n >= 0);
    SPECD_CHECK(padding_cap >= 1.0f); /* also rejects NaN */
    if (n == 0) {
        if (padding_ratio) *padding_ratio = 1.0;
        return 0;
    }
    SPECD_CHECK(gamma && bins && order);

    /* Counting sort by γ, stable in the sequence index. */
    int count[NG] = {0};
    for (int i = 0; i < n; i++) {
        SPECD_CHECK(gamma[i] >= 0 && gamma[i] <= GAMMA_MAX);
        count[gamma[i]]++;
    }
    int pos[NG];
    for (int g = 0, at = 0; g < NG; g++) pos[g] = at, at += count[g];
    for (int i = 0; i < n; i++) order[pos[gamma[i]]++] = i;

    /* Groups: the distinct γ values present, ascending; prefix sums of the
     * member count and real positions. */
    int k = 0, gval[NG];
    int64_t cnt_pre[NG + 1] = {0}, real_pre[NG + 1] = {0};
    for (int g = 0; g < NG; g++) {
        if (!count[g]) continue;
        gval[k] = g;
        cnt_pre[k + 1] = cnt_pre[k] + count[g];
        real_pre[k + 1] = real_pre[k] + (int64_t)count[g] * (g + 1);
        k++;
    }

    /* Exact search over cuts between groups: best[j] = the best plan of the
     * first j groups as (bins, rectangular positions); cut[j] = where its last
     * bin starts. A bin of groups [i, j) is allowed when rect ≤ cap × real. */
    int best_bins[NG + 1], cut[NG + 1];
    int64_t best_rect[NG + 1];
    best_bins[0] = 0, best_rect[0] = 0, cut[0] = 0;
    for (int j = 1; j <= k; j++) {
        best_bins[j] = -1;
        for (int i = 0; i < j; i++) {
            int64_t members = cnt_pre[j] - cnt_pre[i];
            int64_t real = real_pre[j] - real_pre[i];
            int64_t rect = members * (gval[j - 1] + 1);
            if ((double)rect > (double)padding_cap * (double)real) continue;
            int b = best_bins[i] + 1;
            int64_t r = best_rect[i] + rect;
            if (best_bins[j] < 0 || b < best_bins[j] || (b == best_bins[j] && r < best_rect[j]))
                best_bins[j] = b, best_rect[j] = r, cut[j] = i;
        }
        SPECD_CHECK(best_bins[j] > 0); /* a single group always fits (ratio 1) */
    }

    int nb = best_bins[k];
    for (int j = k, b = nb - 1; j > 0; j = cut[j], b--) {
        int i = cut[j];
        bins[b] = (plan_bin){.gamma = gval[j - 1], .n = (int)(cnt_pre[j] - cnt_pre[i]), .first = (int)cnt_pre[i]};
    }
    if (padding_ratio) *padding_ratio = (double)best_rect[k] / (double)real_pre[k];
    return nb;
}

void plan_history_add(plan_history *h, int accepted) {
    SPECD_CHECK(accepted >= 0 && accepted <= GAMMA_MAX);
    SPECD_CHECK(h->head >= 0 && h->head < PLAN_HISTORY_LEN && h->n >= 0 && h->n <= PLAN_HISTORY_LEN);
    h->hist[h->head] = (uint8_t)accepted;
    h->head = (h->head + 1) % PLAN_HISTORY_LEN;
    if (h->n < PLAN_HISTORY_LEN) h->n++;
}

int plan_history_p95(const plan_history *h) {
    if (h->n < PLAN_HISTORY_MIN) return -1;
    /* The held samples are the n slots ending just before head; when the ring
     * is not full they are slots [0, n), which is the same set. */
    int count[NG] = {0};
    for (int i = 0; i < h->n; i++) {
        int v = h->hist[(h->head - 1 - i + PLAN_HISTORY_LEN) % PLAN_HISTORY_LEN];
        SPECD_CHECK(v <= GAMMA_MAX);
        count[v]++;
    }
    int below = 0;
    for (int v = 0; v < NG; v++) {
        below += count[v];
        if ((int64_t)below * 100 >= (int64_t)95 * h->n) return v;
    }
    SPECD_CHECK(0);
    return -1;
}

int plan_cap_gamma(int gamma, const plan_history *h) {
    if (gamma <= 0) return gamma;
    int p95 = plan_history_p95(h);
    if (p95 < 0) return gamma;
    return gamma < p95 + 1 ? gamma : p95 + 1; /* p95 ≥ 0, so the result is ≥ 1 */
}
