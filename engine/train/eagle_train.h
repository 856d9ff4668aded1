/* eagle_train.h — training an EAGLE-3 draft head (model.h's eagle3 layout,
 * issue 36) on a frozen target: the data (the target's own continuations
 * with its residual stream at three layers and its top-k at every position,
 * from the generating passes themselves: train_distill.h), the head's F32
 * parameters, its forward and backward with the training-time test, AdamW
 * training over worker threads, held-out figures, and the head as a GGUF
 * side file that specd loads (--eagle).
 *
 * The head as it drafts (draft_eagle.h): row i pairs token x[i+1] with the
 * target's features f[i] (fused by fc, 3D -> D) at RoPE position i and
 * predicts x[i+2]; after its first draft it feeds its own output (the
 * layer's final residual) as the next row's feature. Training runs the same
 * J steps (the training-time test, EAGLE-3): step 0 over the target's
 * features, step j over step j - 1's outputs, row t of step j drafting
 * position t + j (token x[t+j+1], predicting x[t+j+2], the target's top-k
 * at position t + j + 1 as the teacher) and attending to step 0's rows 0..t
 * and to its own row t of steps 1..j — exactly the rows a head's cache
 * holds when it drafts the (j+1)-th token after position t. Step j's loss
 * weighs step_decay^j. The decoder layer's forward and backward are
 * train_layer.h's (one implementation with whole-model training).
 *
 * Parameters trained: fc, the layer (its norms and matrices, hidden_norm),
 * the output norm and the output head (over the target's whole vocabulary;
 * no reduced draft vocabulary), the last two starting as the target's — or,
 * with a shared output, the target's own output head, frozen and not
 * written to the file (the loader lends the target's: a head of an 8B
 * target then stays under 4 % of its bytes). The token embedding is the
 * target's, frozen.
 *
 * Threading: one caller thread; eagle_train and eagle_evaluate fan out over
 * their own threads. */
#ifndef SPECD_EAGLE_TRAIN_H
#define SPECD_EAGLE_TRAIN_H

#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/train/train_loop.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#define EAGLE_PARTS 3            /* target layers fused by fc */

/* ---- data ------------------------------------------------------------------------------------------ */

/* Sequences of the target's tokens with, at every position p, the target's
 * residual stream entering its three tapped layers (F16, the three planes
 * side by side: (3, D) per position) and its top-k logits after feeding
 * x[p]. */
typedef struct {
    int D, K, T;                 /* width, top-k per position, most positions per sequence */
    int64_t n, cap;              /* sequences */
    int32_t *len;                /* (cap) */
    int32_t *tok;                /* (cap, T) */
    uint16_t *feat;              /* (cap, T, 3D) F16 */
    int32_t *kid;                /* (cap, T, K) */
    float *kz;                   /* (cap, T, K) */
} eagle_data;

/* Room for cap sequences of up to T positions; NULL when out of memory. */
eagle_data *eagle_data_create(int D, int K, int T, int64_t cap);
void eagle_data_destroy(eagle_data *d); /* accepts NULL */
/* Appends one sequence (its first min(n, T) positions): tokens, features
 * (n, 3D) F32 and top-k (n, K) of positions [0, n - 1) (the last token was
 * never fed: its row is stored empty). Returns 1 (a sequence of fewer than
 * 2 tokens is dropped), or 0 when full. */
int eagle_data_add(eagle_data *d, const int32_t *tok, int n, const float *feat, const int32_t *kid, const float *kz);
/* The same for data without the target's top-k (d->K must be 1: the
 * teacher puts all its mass on the token that followed, so the KL term is
 * its cross-entropy), features already F16 (n - 1, 3D): the learning
 * ring's. */
int eagle_data_add_f16(eagle_data *d, const int32_t *tok, int n, const uint16_t *feat);
/* Positions that train a step-0 row (sum over sequences of len - 2). */
int64_t eagle_data_positions(const eagle_data *d, int64_t from, int64_t to);

/* The target (m, with taps at layers[3]) continues the prompts as
 * train_distill_add does (same arguments) and each finished sequence with
 * its features and top-k (d->K) is appended to d. Returns the sequences
 * added, or -1 with err. */
int64_t eagle_distill_add(eagle_data *d, model *m, const int *layers, const tokenizer *tok,
                          const int32_t *const *prompts, const int *n_prompt, const int *warm, int n, int gen,
                          float temp, float warm_temp, int batch, uint64_t *rs, char *err, size_t errlen);

/* ---- the head ---------------------------------------------------------------------------------------- */

#define EAGLE_MAX_TENSORS 16

typedef struct {
    int V, D, H, Hkv, E, F;      /* vocabulary, width, heads, kv heads, head dim, feed-forward */
    int ctx;                     /* context length written to the GGUF */
    float eps, rope_base;
    int layers[EAGLE_PARTS];     /* the target layers read (eagle3.target_layers) */
    size_t n_params;
    float *params;               /* (n_params) owned */
    int n_tensors;
    train_tensor t[EAGLE_MAX_TENSORS]; /* GGUF names; fc, the layer, output_norm, output */
    float inv_freq[128];
    float *embd;                 /* (V, D) the target's token embedding, owned, frozen */
    float *out_shared;           /* (V, D) the target's output head, owned, frozen; NULL: the head trains its own */
} eagle_head;

/* Views of a buffer laid out like the parameters. */
typedef struct {
    float *fc;                   /* (D, 3D) */
    train_layer_w layer;         /* wq wk wv (N, 2D) */
    float *out_norm;             /* (D) */
    float *output;               /* (V, D); a shared output: the target's (NULL in a gradient's view) */
} eagle_view;

/* A head for target m reading its layers[3], of feed-forward width ff (0:
 * the target's), its own output head or the target's (shared_output): the layer's matrices seeded
 * N(0, 0.02^2) (wo and w_down scaled by 1/sqrt(2)), norms 1, fc the identity
 * on the last (highest) layer's third plus noise, the output norm and head
 * copied from the target's. The target's shape must be llama's (its head
 * count and head dim are the head's). NULL with err. */
eagle_head *eagle_head_create(model *m, const int *layers, int ff, bool shared_output, uint64_t seed, char *err,
                              size_t errlen);
/* The same without a target: a head of this shape with the same seeded
 * layer and fc, output matrix (own or shared) and norms seeded too, and a zeroed embedding
 * (V, D) for the caller to fill (tests). NULL on a bad shape or out of
 * memory. */
eagle_head *eagle_head_alloc(int V, int D, int H, int Hkv, int E, int F, float eps, float rope_base, bool shared_output,
                             uint64_t seed);
void eagle_head_destroy(eagle_head *h); /* accepts NULL */
/* grad: base is a gradient (a shared output head has none: NULL). */
void eagle_head_view(const eagle_head *h, float *base, eagle_view *v, bool grad);
/* A head written by eagle_head_save (its matrices F32 or F16, the whole
 * vocabulary, own or shared output) for target m, read back to train on
 * (learning from traffic fine-tunes the live head). NULL with err for a
 * file it cannot take: another target's, a reduced draft vocabulary (a
 * converted checkpoint's d2t), quantized matrices, a bad shape. */
eagle_head *eagle_head_load(model *m, const char *path, char *err, size_t errlen);
/* A copy of h (parameters, frozen tables); NULL when out of memory. */
eagle_head *eagle_head_clone(const eagle_head *h);

/* The head as an eagle3 GGUF at path (model.h's layout): matrices in type
 * (F32 or F16), norms F32, the target's token embedding tensor and
 * tokenizer copied from its file, eagle3.target_layers. Returns 0 or -1. */
int eagle_head_save(const eagle_head *h, const model *target, const char *path, ggml_type type, const char *desc,
                    char *err, size_t errlen);

/* ---- forward and backward ---------------------------------------------------------------------------- */

/* A batch: S sequences of T rows, J steps. Row t of sequence s: feat (S*T,
 * 3D) the target's features at position t; tok (S, T + J) tok[s][i] = x[i+1]
 * (step j row t feeds tok[s][t + j]); per step j (S*T): lab[j] the label
 * x[t+j+2] (< 0 none), kid[j], kz[j] (S*T, K) the teacher's top-k (K 0:
 * none), wt[j] the row's weight (0: no loss). */
typedef struct {
    int S, T, J, K;
    const float *feat;
    const int32_t *tok;
    const int32_t *lab[TRAIN_MAX_STEPS];
    const int32_t *kid[TRAIN_MAX_STEPS];
    const float *kz[TRAIN_MAX_STEPS];
    const float *wt[TRAIN_MAX_STEPS];
    float ce_w, kl_w;
} eagle_batch;

typedef struct eagle_work eagle_work;
/* Activations and scratch for batches of up to S x T rows and J steps. */
eagle_work *eagle_work_create(const eagle_head *h, int S, int T, int J);
void eagle_work_destroy(eagle_work *w); /* accepts NULL */

/* The forward of b: step j's logits (S*T, V) at logits[j], valid until the
 * next call on w. */
void eagle_forward(train_ctx *c, eagle_work *w, const eagle_head *h, const eagle_batch *b, const float **logits);
/* Forward, loss (sum over steps and rows of wt * (ce_w CE + kl_w KL)) and
 * backward: ADDS the gradient into grad (n_params). correct[j] (may be
 * NULL) += rows of step j with weight > 0 whose argmax is the teacher's
 * first choice (the label without top-k). */
double eagle_forward_backward(train_ctx *c, eagle_work *w, const eagle_head *h, const eagle_batch *b, float *grad,
                              int64_t *correct);

/* ---- training ------------------------------------------------------------------------------------------ */

struct eagle_progress;

/* AdamW's state kept by a caller that trains one head in many calls (the
 * learner's rounds): the moments (n_params each, zeroed for a new head) and
 * the optimizer steps taken so far. */
typedef struct {
    float *mom, *vel;
    int64_t step;
} eagle_optim_state;

typedef struct {
    int J;                       /* training-time-test steps (4) */
    float step_decay;            /* step j's weight step_decay^j (0.8) */
    int batch;                   /* sequences per step (4) */
    int64_t steps;               /* optimizer steps (0: epochs decide) */
    int epochs;                  /* passes over the training sequences (1) */
    train_optim opt;             /* lr, warm-up, cosine, wd, clip; opt.steps and warmup set by eagle_train */
    float warmup;                /* share of the steps of warm-up (0.05) */
    float ce_w, kl_w;            /* loss weights (CE 0.1, KL 1) */
    float holdout;               /* share of sequences held out (0.05) */
    int threads;                 /* workers (1) */
    uint64_t seed;               /* the data order (1) */
    int progress_every;          /* steps between progress calls (0: never) */
    void (*progress)(void *ctx, const struct eagle_progress *p);
    void *progress_ctx;
    volatile sig_atomic_t *stop; /* set: stop after the current step */
    eagle_optim_state *state;    /* NULL: fresh moments; else the moments and step count go on from state
                                  * (and are left there); the rate is warm-up then cosine over this call's
                                  * steps either way (a round of the learner ends annealed, as it is scored) */
    bool skip_before;            /* do not measure the held-out figures before training (res->before 0) */
} eagle_train_opts;

typedef struct eagle_progress {
    int64_t step, steps;
    double loss;                 /* mean training loss per weighted row since the last report */
    double acc[TRAIN_MAX_STEPS]; /* training top-1 of each step, same window */
    int J;
    double pos_per_s;            /* step-0 rows trained per second, same window */
    double eta_s;
} eagle_progress;

typedef struct {
    double acc[TRAIN_MAX_STEPS]; /* top-1 per step: argmax = the teacher's first choice (greedy target) */
    double accept_len;           /* mean leading run of correct steps: tokens a greedy chain of J drafts gets
                                  * accepted per target pass, minus the pass's own token */
    double loss;                 /* mean weighted loss per row */
    int64_t rows;                /* step-0 rows evaluated */
} eagle_eval;

typedef struct {
    eagle_eval before, after;    /* held-out */
    double unigram_acc;          /* held-out: share of step-0 labels equal to the most frequent training label */
    int64_t steps, n_train, n_heldout; /* steps; sequences */
    double seconds, positions;   /* training time; step-0 rows trained */
    bool interrupted;
} eagle_train_result;

void eagle_train_opts_init(eagle_train_opts *o);
/* Trains h on d (the last holdout share of sequences held out) and measures
 * the held-out figures before and after. Returns 0, or -1 with err (too few
 * sequences, out of memory). A stopped run returns 0 with res->interrupted
 * and a usable, measured head. */
int eagle_train(eagle_head *h, const eagle_data *d, const eagle_train_opts *o, eagle_train_result *res, char *err,
                size_t errlen);
/* Held-out figures of h on sequences [from, to) of d with J steps. Returns
 * 0, or -1 when out of memory. */
int eagle_evaluate(const eagle_head *h, const eagle_data *d, int64_t from, int64_t to, int J, float step_decay,
                   int threads, eagle_eval *ev);

#endif
