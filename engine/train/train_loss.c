/* train_loss.c — cross-entropy and top-k distillation losses (see train_loss.h). */
#include "engine/train/train_loss.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* log sum exp(z / temp) in double */
static double lse(const float *z, int V, float temp) {
    float mx = z[0];
    for (int v = 1; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    double s = 0;
    for (int v = 0; v < V; v++) s += exp((double)(z[v] - mx) / temp);
    return mx / temp + log(s);
}

static double xent(float *dz, const float *z, int V, int32_t y, float wgt, int add) {
    double l = lse(z, V, 1.0f);
    for (int v = 0; v < V; v++) {
        float g = wgt * (float)(exp(z[v] - l) - (v == y));
        dz[v] = add ? dz[v] + g : g;
    }
    return l - z[y];
}

double tl_xent(float *dz, const float *z, int V, int32_t y, float wgt) { return xent(dz, z, V, y, wgt, 0); }
double tl_xent_add(float *dz, const float *z, int V, int32_t y, float wgt) { return xent(dz, z, V, y, wgt, 1); }

double tl_kl_topk(float *dz, const float *z, int V, const int32_t *ids, const float *tz, int K, float temp, float wgt) {
    double lq = lse(z, V, temp), lp = lse(tz, K, temp), kl = 0;
    float s = wgt / temp;
    for (int v = 0; v < V; v++) dz[v] = s * (float)exp(z[v] / temp - lq);
    for (int k = 0; k < K; k++) {
        double lpk = tz[k] / temp - lp, p = exp(lpk);
        kl += p * (lpk - (z[ids[k]] / temp - lq));
        dz[ids[k]] -= s * (float)p;
    }
    return kl;
}

double tl_rows(float *z, float *dz, int M, int V, const int32_t *labels, int K, const int32_t *topk_id,
               const float *topk_logit, const float *weight, float ce_w, float kl_w, double *ce, double *kl) {
    double loss = 0, sce = 0, skl = 0;
    for (int r = 0; r < M; r++) {
        float *zr = z + (size_t)r * V, wt = weight[r];
        int32_t y = labels ? labels[r] : -1;
        bool has_kl = K > 0 && topk_id && kl_w > 0 && topk_id[(size_t)r * K] >= 0;
        bool has_ce = y >= 0 && y < V && ce_w > 0;
        if (wt == 0 || (!has_kl && !has_ce)) {
            memset(zr, 0, sizeof(float) * (size_t)V);
            continue;
        }
        if (has_kl) {
            double k = tl_kl_topk(dz, zr, V, topk_id + (size_t)r * K, topk_logit + (size_t)r * K, K, 1.0f, wt * kl_w);
            skl += wt * k, loss += wt * kl_w * k;
            if (has_ce) {
                double e = tl_xent_add(dz, zr, V, y, wt * ce_w);
                sce += wt * e, loss += wt * ce_w * e;
            }
        } else {
            double e = tl_xent(dz, zr, V, y, wt * ce_w);
            sce += wt * e, loss += wt * ce_w * e;
        }
        memcpy(zr, dz, sizeof(float) * (size_t)V);
    }
    if (ce) *ce = sce;
    if (kl) *kl = skl;
    return loss;
}
