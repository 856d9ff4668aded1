/* plan.c — the micro-batch planner (see plan.h). */
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
