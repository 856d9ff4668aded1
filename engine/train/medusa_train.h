/* medusa_train.h — Medusa-1 training of the heads (medusa.h) with a frozen
 * backbone: one target pass over the training text gives the final-normed
 * hidden states (kept in memory: tokens x D floats, bounded by the caller's
 * token limit), then head k learns the token k+1 positions after the one the
 * target's own head predicts (cross-entropy weighted head_decay^(k-1)) with a
 * hand-written backward pass (medusa_sample_grad, checked against central
 * finite differences in tests/medusa/test_medusa_grad.c), AdamW, linear warmup
 * then cosine decay, mini-batches split over threads, and a held-out split
 * (the last holdout share of the positions) for the loss and the per-head
 * top-1..top-8 accuracies stored in the heads file.
 *
 * Not here: soft targets from the target's distribution (self-distillation
 * uses the target's own generated text as the training text, with the
 * hidden states of the generating passes: medusa_distill.h), on-disk caches of the hidden states.
 *
 * Threading: one caller thread; medusa_train fans out over its own threads. */
#ifndef SPECD_MEDUSA_TRAIN_H
#define SPECD_MEDUSA_TRAIN_H

#include "engine/model/kv.h"
#include "engine/spec/proposers/medusa.h"
#include "engine/model/model.h"

#include <signal.h>
#include <stdint.h>

/* The hidden states of the training text and each position's labels. */
typedef struct {
    int dim;                    /* D */
    int n_heads;                /* K: labels per position */
    int64_t n;                  /* positions */
    int64_t cap;
    float *h;                   /* (cap, D) final-normed hidden state at each position */
    int32_t *lab;               /* (cap, K) lab[i*K + k] = the token k+2 positions after i (head k+1's
                                 * target); -1 past the end of its document */
    int32_t *next;              /* (cap) the token right after i (what the target's own head predicts), -1 at the end */
} medusa_data;

/* Room for max_positions positions; NULL when out of memory. */
medusa_data *medusa_data_create(int dim, int n_heads, int64_t max_positions);
void medusa_data_destroy(medusa_data *d); /* accepts NULL */

/* Runs the target over one document tokens[0, n) in chunks of at most
 * `chunk` positions (each chunk from an empty cache of `pool`, so its
 * positions see only their chunk: keep chunks long) and appends its
 * positions with their labels, stopping when the data is full. Returns the
 * positions added, or -1 with err (target failure). */
int64_t medusa_data_add(medusa_data *d, model *m, kv_pool *pool, const int32_t *tokens, int n, int chunk, char *err,
                        size_t errlen);

#define MEDUSA_GROUP 16          /* samples computed in lockstep (weight rows read once for all) */

/* Scratch floats medusa_sample_grad / medusa_group_grad need. */
size_t medusa_scratch_floats(const medusa_heads *mh);

/* One sample: hidden h (D) and its token tok (the one right after it: the
 * token input's x, read only with token input; < 0 none) with labels lab (K;
 * < 0 = no target for that head) through every head; returns
 * sum_k hw[k] * CE_k and, when grad is not NULL, ADDS the gradient of that
 * sum with respect to mh->params into grad (same layout; the shared output
 * matrix O (V, D) and the token embedding E (V, D) are frozen and get none).
 * correct (K, may be NULL) is incremented where the head's argmax is its label. */
/* be computes the products (the backend table; a host-memory backend,
 * used by this thread alone: a one-thread CPU backend per worker). */
double medusa_sample_grad(backend *be, const medusa_heads *mh, const float *O, const float *E, const float *h,
                          int32_t tok, const int32_t *lab, const float *hw, float *grad, float *scratch, int *correct);
/* The same summed over G <= MEDUSA_GROUP samples h[s], tok[s], lab[s]: the
 * loss is the sum of the samples' and the gradient their sum (what the
 * trainer runs). */
double medusa_group_grad(backend *be, const medusa_heads *mh, const float *O, const float *E, const float *const *h,
                         const int32_t *tok, const int32_t *const *lab, int G, const float *hw, float *grad,
                         float *scratch, int *correct);

struct medusa_progress;

typedef struct {
    int epochs;                 /* passes over the training positions (1) */
    int64_t max_steps;          /* 0: epochs decide */
    int batch;                  /* positions per step (64) */
    float lr;                   /* peak learning rate (1e-3) */
    float weight_decay;         /* AdamW's, on W and own output matrices (0.01) */
    float warmup;               /* share of the steps of linear warmup (0.05) */
    float head_decay;           /* head k's loss weight head_decay^(k-1) (0.8) */
    float holdout;              /* share of positions held out (0.05) */
    int threads;                /* workers (1) */
    uint64_t seed;              /* the shuffle (1) */
    int progress_every;         /* steps between progress callbacks (0: never) */
    volatile sig_atomic_t *stop;/* set (e.g. by SIGINT): the trainer stops after the current step */
    void (*progress)(void *ctx, const struct medusa_progress *p);
    void *progress_ctx;
} medusa_train_opts;

typedef struct medusa_progress {
    int64_t step, steps;
    int epoch;
    double loss;                /* training loss, mean over the last progress_every steps */
    double acc1[MEDUSA_MAX_HEADS]; /* training top-1 over the same steps */
    double samples_per_s, eta_s;
} medusa_progress;

typedef struct {
    double loss0, loss1;        /* weighted held-out loss before and after */
    double head_loss0[MEDUSA_MAX_HEADS], head_loss1[MEDUSA_MAX_HEADS]; /* per head CE */
    double unigram_acc;         /* held-out: share of head-1 labels equal to the most frequent training label */
    double train_loss;          /* last progress window's */
    int64_t steps, n_train, n_heldout;
    double seconds;
    bool interrupted;           /* stopped early by opts.stop */
} medusa_train_result;

void medusa_train_opts_init(medusa_train_opts *o);

/* Trains mh (its parameters are updated in place; own output matrices should
 * start as copies of O) on d, then measures held-out loss and accuracies into
 * mh->acc / acc_tokens / heldout_loss / train_loss. O: the target's output
 * matrix (V, D) floats (medusa_target_output); E: its token embedding
 * (medusa_target_embedding; needed only with token input, else may be NULL). Returns 0, or -1 with err
 * (too few positions, out of memory). An interrupted run still returns 0
 * with res->interrupted and usable, measured heads. */
int medusa_train(medusa_heads *mh, const float *O, const float *E, const medusa_data *d, const medusa_train_opts *o,
                 medusa_train_result *res, char *err, size_t errlen);

/* Held-out figures of mh on positions [from, to) of d: weighted loss, per
 * head CE (head_loss, K) and cumulative top-j accuracy (acc, K x MEDUSA_ACC_K),
 * over `threads` threads (NAN when out of memory). */
double medusa_evaluate(const medusa_heads *mh, const float *O, const float *E, const medusa_data *d, int64_t from,
                       int64_t to, float head_decay, int threads, double *head_loss, float (*acc)[MEDUSA_ACC_K]);

#endif
