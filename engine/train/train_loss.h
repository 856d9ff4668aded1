/* train_loss.h — the training losses on one position's logits, each
 * returning the loss and WRITING its gradient with respect to the logits:
 * cross-entropy to a label, and distillation (KL from a teacher's
 * distribution restricted to its top-k tokens to the student's softmax).
 * Checked against float64 finite differences in tests/train/. */
#ifndef SPECD_TRAIN_LOSS_H
#define SPECD_TRAIN_LOSS_H

#include <stdint.h>

/* CE = logsumexp(z) - z[y]; dz (V) = wgt * (softmax(z) - onehot(y)). Returns CE. */
double tl_xent(float *dz, const float *z, int V, int32_t y, float wgt);

/* The teacher's distribution p over its top-k tokens ids (K) is
 * softmax(tz / temp) of their logits tz (K) (renormalized over the K);
 * KL(p || q) = sum_k p_k (log p_k - log q(ids[k])), q = softmax(z / temp) over
 * all V. dz (V) = wgt * (q - p scattered) / temp. Returns KL. */
double tl_kl_topk(float *dz, const float *z, int V, const int32_t *ids, const float *tz, int K, float temp, float wgt);

/* Adds wgt * the CE gradient into dz already holding another loss's
 * gradient (dz += ...); returns CE. */
double tl_xent_add(float *dz, const float *z, int V, int32_t y, float wgt);

/* The loss of M positions' logits z (M, V), REPLACED by its gradient: row
 * r's loss is weight[r] * (ce_w CE to labels[r] (NULL or < 0: none) + kl_w
 * KL to its teacher top-k (topk_id, topk_logit (M, K); K 0, NULL or a first
 * id < 0: none)) at temperature 1; a row without either (or weight 0) gets
 * a zero gradient. dz (V) scratch. Returns the summed loss; ce, kl (may be
 * NULL) receive the weighted sums of each loss alone. */
double tl_rows(float *z, float *dz, int M, int V, const int32_t *labels, int K, const int32_t *topk_id,
               const float *topk_logit, const float *weight, float ce_w, float kl_w, double *ce, double *kl);

#endif
