/* train_data.h — training examples: fixed-length windows of T input tokens,
 * each position with its label (the next token) and, for distillation, the
 * teacher's top-k tokens and logits there. Text becomes windows of T+1
 * tokens; a generated sequence becomes one example (padded: positions past
 * its end carry no label and no top-k).
 *
 * Threading: built by one thread, then read by any number. */
#ifndef SPECD_TRAIN_DATA_H
#define SPECD_TRAIN_DATA_H

#include <stdint.h>

typedef struct {
    int T;                  /* positions per example */
    int K;                  /* teacher top-k per position (0: labels only) */
    int64_t n, cap;         /* examples */
    int32_t *tokens;        /* (cap, T) inputs */
    int32_t *labels;        /* (cap, T) the token after each input, -1 none */
    int32_t *topk_id;       /* (cap, T, K) the teacher's top-k tokens, best first (K > 0) */
    float *topk_logit;      /* (cap, T, K) their logits */
} train_data;

/* Room for cap examples; NULL when out of memory. */
train_data *train_data_create(int T, int K, int64_t cap);
void train_data_destroy(train_data *d); /* accepts NULL */

/* Cuts toks[0, n) into windows of T+1 tokens (stride T) and appends them
 * (labels only); a short tail is padded. Returns examples added (stops when
 * full). */
int64_t train_data_add_text(train_data *d, const int32_t *toks, int n);

/* Appends one example: inputs toks[0, n-1) (at most T), labels toks[1, n),
 * the teacher's top-k at each input (topk_id, topk_logit (n-1, K), may be
 * NULL). Returns 1, or 0 when full. */
int train_data_add_seq(train_data *d, const int32_t *toks, int n, const int32_t *topk_id, const float *topk_logit);

/* Positions with a label or top-k in examples [from, to). */
int64_t train_data_positions(const train_data *d, int64_t from, int64_t to);

#endif
