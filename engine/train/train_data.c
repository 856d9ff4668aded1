/* train_data.c — training examples (see train_data.h). */
#include "engine/train/train_data.h"

#include <stdlib.h>
#include <string.h>

train_data *train_data_create(int T, int K, int64_t cap) {
    train_data *d = calloc(1, sizeof(*d));
    if (!d) return NULL;
    d->T = T, d->K = K, d->cap = cap;
    size_t P = (size_t)cap * T;
    d->tokens = malloc(sizeof(int32_t) * P);
    d->labels = malloc(sizeof(int32_t) * P);
    if (K > 0) {
        d->topk_id = malloc(sizeof(int32_t) * P * K);
        d->topk_logit = malloc(sizeof(float) * P * K);
    }
    if (!d->tokens || !d->labels || (K > 0 && (!d->topk_id || !d->topk_logit))) {
        train_data_destroy(d);
        return NULL;
    }
    return d;
}

void train_data_destroy(train_data *d) {
    if (!d) return;
    free(d->tokens), free(d->labels), free(d->topk_id), free(d->topk_logit);
    free(d);
}

int train_data_add_seq(train_data *d, const int32_t *toks, int n, const int32_t *topk_id, const float *topk_logit) {
    if (d->n >= d->cap || n < 2) return 0;
    int T = d->T, K = d->K, m = n - 1 < T ? n - 1 : T;
    size_t o = (size_t)d->n * T;
    for (int t = 0; t < T; t++) {
        d->tokens[o + t] = t < m ? toks[t] : toks[m - 1];
        d->labels[o + t] = t < m ? toks[t + 1] : -1;
    }
    if (K > 0) {
        size_t ko = o * K;
        if (topk_id) {
            memcpy(d->topk_id + ko, topk_id, sizeof(int32_t) * (size_t)m * K);
            memcpy(d->topk_logit + ko, topk_logit, sizeof(float) * (size_t)m * K);
        }
        for (size_t i = (topk_id ? (size_t)m : 0) * K; i < (size_t)T * K; i++) d->topk_id[ko + i] = -1, d->topk_logit[ko + i] = 0;
    }
    d->n++;
    return 1;
}

int64_t train_data_add_text(train_data *d, const int32_t *toks, int n) {
    int64_t added = 0;
    for (int s = 0; s + 1 < n && d->n < d->cap; s += d->T) {
        int len = n - s < d->T + 1 ? n - s : d->T + 1;
        added += train_data_add_seq(d, toks + s, len, NULL, NULL);
    }
    return added;
}

int64_t train_data_positions(const train_data *d, int64_t from, int64_t to) {
    int64_t c = 0;
    for (size_t i = (size_t)from * d->T; i < (size_t)to * d->T; i++)
        c += d->labels[i] >= 0 || (d->K > 0 && d->topk_id[i * d->K] >= 0);
    return c;
}
