/* train_optim.h — the optimizer: AdamW with decoupled weight decay on the
 * matrices (not the norms), a learning rate that warms up linearly and then
 * follows a cosine down to a floor, and clipping of the global gradient norm.
 * Pure functions of (state, step): a resumed run takes the same steps. */
#ifndef SPECD_TRAIN_OPTIM_H
#define SPECD_TRAIN_OPTIM_H

#include "engine/train/train_model.h"

#include <stdint.h>

typedef struct {
    float lr;               /* peak learning rate */
    float min_lr;           /* the cosine's floor, a share of lr (0.1) */
    int64_t warmup;         /* linear warm-up steps */
    int64_t steps;          /* total steps (the cosine ends here) */
    float wd;               /* AdamW weight decay (0.1) */
    float b1, b2, eps;      /* 0.9, 0.95, 1e-8 */
    float clip;             /* max global gradient norm (1.0; 0: none) */
} train_optim;

void train_optim_init(train_optim *o);
/* The learning rate of step (0-based). */
double train_lr(const train_optim *o, int64_t step);
/* Scales g (n) to norm <= max when it is larger; returns the norm before. */
double train_clip(float *g, size_t n, float max);
/* One AdamW step (step 0-based) of m's parameters with gradient g and
 * moments mom, vel (n_params each). */
void train_adamw(train_model *m, float *mom, float *vel, const float *g, int64_t step, double lr, const train_optim *o);
/* The same over any parameter table: n tensors t laid out in params. */
void train_adamw_tensors(const train_tensor *t, int n, float *params, float *mom, float *vel, const float *g,
                         int64_t step, double lr, const train_optim *o);

#endif
