/* train_ckpt.h — training checkpoints: the model's shape and parameters,
 * the optimizer's moments and step, and the run's data seed, in one file
 * written atomically (a temporary renamed over the path). Loading one and
 * training on with the same options and data takes exactly the steps the
 * uninterrupted run took (same losses).
 *
 * Threading: any one thread. */
#ifndef SPECD_TRAIN_CKPT_H
#define SPECD_TRAIN_CKPT_H

#include "engine/train/train_loop.h"

/* Writes m, st and seed to path. Returns 0, or -1 with err. */
int train_ckpt_save(const char *path, const train_model *m, const train_state *st, uint64_t seed, char *err,
                    size_t errlen);
/* Reads path into a new model *m (caller owns; train_model_destroy) and a
 * new state *st (train_state_free); *seed gets the run's seed (may be NULL).
 * Returns 0, or -1 with err (missing, truncated or corrupt file). */
int train_ckpt_load(const char *path, train_model **m, train_state *st, uint64_t *seed, char *err, size_t errlen);

#endif
