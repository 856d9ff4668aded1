/* train_loop.h — training a train_model on a train_data: data-parallel
 * steps (the batch split over worker threads, each with its own backend,
 * activations and gradient; the gradients summed in a fixed order, so a run
 * is deterministic for a given thread count), AdamW (train_optim.h),
 * checkpoints that resume exactly (train_ckpt.h), a progress callback with
 * loss, tokens/s, FLOP/s and ETA; and held-out evaluation: loss and the
 * acceptance a draft with these weights would get against the teacher whose
 * top-k the data holds (greedy: argmax equals the teacher's; at temperature
 * T: sum over the teacher's top-k of min(p_T, q_T), p renormalized over its
 * top-k).
 *
 * Threading: one caller thread; train_run and train_evaluate fan out over
 * their own threads. */
#ifndef SPECD_TRAIN_LOOP_H
#define SPECD_TRAIN_LOOP_H

#include "engine/train/train_data.h"
#include "engine/train/train_model.h"
#include "engine/train/train_optim.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

/* The optimizer's state: AdamW moments and the next step. */
typedef struct {
    float *mom, *vel;       /* (n_params) each, owned */
    int64_t step;           /* steps taken */
} train_state;

/* Zeroed state for m; -1 when out of memory. */
int train_state_init(train_state *st, const train_model *m);
void train_state_free(train_state *st);

typedef struct {
    int64_t step, steps;
    double loss;            /* mean training loss over the steps since the last report */
    double lr, gnorm;       /* this step's */
    double tok_per_s;       /* trained positions per second since the last report */
    double flop_per_s;      /* forward + backward matmul FLOPs per second, same window */
    double eta_s;
} train_progress;

typedef struct {
    train_optim opt;        /* opt.steps: the run's total steps */
    int batch;              /* examples per step (16) */
    int threads;            /* data-parallel workers, one backend thread each (1) */
    uint64_t seed;          /* the data order (1) */
    float ce_w, kl_w;       /* loss weights (CE 1, KL 0) */
    const char *ckpt_path;  /* NULL: no checkpoints */
    int64_t ckpt_every;     /* steps between checkpoints (0: only at the end and on a stop) */
    int progress_every;     /* steps between progress calls (0: never) */
    void (*progress)(void *ctx, const train_progress *p);
    void *progress_ctx;
    volatile sig_atomic_t *stop; /* set: stop after the current step (a checkpoint is written) */
    double *losses;         /* (opt.steps) each step's training loss, or NULL */
    int64_t stop_at;        /* > 0: stop once this many steps are taken, as a stop would (tests of resume) */
} train_opts;

typedef struct {
    int64_t steps;          /* steps taken by this call */
    double seconds, positions, flops;
    double last_loss;
    bool interrupted;
} train_result;

void train_opts_init(train_opts *o);

/* Trains m from st->step up to o->opt.steps on examples [0, n_train) of d.
 * Step s's examples are fixed by (o->seed, s) alone (a per-epoch
 * permutation), so a run resumed from a checkpoint of step s takes exactly
 * the steps the uninterrupted run took. Returns 0, or -1 with err (out of
 * memory, no data, checkpoint write failure). */
int train_run(train_model *m, train_state *st, const train_data *d, int64_t n_train, const train_opts *o,
              train_result *res, char *err, size_t errlen);

typedef struct {
    double ce;              /* mean cross-entropy to the labels */
    double kl;              /* mean KL to the teacher's top-k (0 without) */
    double acc_greedy;      /* share of positions whose argmax is the teacher's (the label without top-k) */
    double acc_temp;        /* expected acceptance at temperature temp (needs top-k; else 0) */
    int64_t positions;
} train_eval;

/* Evaluates m on examples [from, to) of d over `threads` threads. Returns
 * 0, or -1 when out of memory. */
int train_evaluate(const train_model *m, const train_data *d, int64_t from, int64_t to, int threads, float temp,
                   train_eval *ev);

#define TRAIN_MAX_WORKERS 64

/* Runs fn on n (<= TRAIN_MAX_WORKERS) workers, the array ws of elements of
 * `size` bytes: workers 1.. on threads of their own, 0 on the caller. */
void train_fan_out(void *ws, size_t size, int n, void *(*fn)(void *));
/* perm (n) = the seeded permutation of epoch e (the data order of a run). */
void train_epoch_perm(int64_t *perm, int64_t n, uint64_t seed, int64_t e);

/* The matmul peak of this machine for the trainer: F32 FLOP/s of the CPU
 * backend's matmul with `threads` threads on an (M, K) x (K, N) product of
 * the given sizes, best of a few runs of about `ms` milliseconds in all. */
double train_matmul_peak(int threads, int M, int K, int N, double ms);

#endif
