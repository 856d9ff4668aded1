/* train_optim.c — AdamW, warm-up + cosine, clipping (see train_optim.h). */
#include "engine/train/train_optim.h"

#include <math.h>

void train_optim_init(train_optim *o) {
    *o = (train_optim){.lr = 1e-3f, .min_lr = 0.1f, .warmup = 0, .steps = 1, .wd = 0.1f, .b1 = 0.9f, .b2 = 0.95f,
                       .eps = 1e-8f, .clip = 1.0f};
}

double train_lr(const train_optim *o, int64_t step) {
    if (step < o->warmup) return o->lr * (double)(step + 1) / (double)o->warmup;
    double span = (double)(o->steps - o->warmup);
    double t = span > 0 ? (double)(step - o->warmup) / span : 1;
    if (t > 1) t = 1;
    double f = o->min_lr + (1 - o->min_lr) * 0.5 * (1 + cos(M_PI * t));
    return o->lr * f;
}

double train_clip(float *g, size_t n, float max) {
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)g[i] * g[i];
    double norm = sqrt(ss);
    if (max > 0 && norm > max) {
        float s = (float)(max / norm);
        for (size_t i = 0; i < n; i++) g[i] *= s;
    }
    return norm;
}

void train_adamw(train_model *m, float *mom, float *vel, const float *g, int64_t step, double lr, const train_optim *o) {
    train_adamw_tensors(m->t, m->n_tensors, m->params, mom, vel, g, step, lr, o);
}

void train_adamw_tensors(const train_tensor *tt0, int nt, float *params, float *mom, float *vel, const float *g,
                         int64_t step, double lr, const train_optim *o) {
    float b1 = o->b1, b2 = o->b2;
    float bc1 = (float)(1 - pow(b1, (double)(step + 1))), bc2 = (float)(1 - pow(b2, (double)(step + 1)));
    float flr = (float)lr;
    for (int t = 0; t < nt; t++) {
        const train_tensor *tt = &tt0[t];
        size_t n = (size_t)tt->rows * tt->cols, o0 = tt->off;
        float decay = tt->matrix ? 1.0f - flr * o->wd : 1.0f;
        float *p = params + o0, *mm = mom + o0, *vv = vel + o0;
        const float *gg = g + o0;
        for (size_t i = 0; i < n; i++) {
            mm[i] = b1 * mm[i] + (1 - b1) * gg[i];
            vv[i] = b2 * vv[i] + (1 - b2) * gg[i] * gg[i];
            p[i] = p[i] * decay - flr * (mm[i] / bc1) / (sqrtf(vv[i] / bc2) + o->eps);
        }
    }
}
