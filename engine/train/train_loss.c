/* train_loss.c — cross-entropy and top-k distillation losses (see train_loss.h). */
#include "engine/train/train_loss.h"

#include <math.h>

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
