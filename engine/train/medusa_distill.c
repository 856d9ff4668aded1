/* medusa_distill.c — the target's own continuations, batched, with the
 * hidden states of the generating passes kept as training data (see
 * medusa_distill.h). */
#include "engine/train/medusa_distill.h"
#include "engine/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* argmax at temp 0, else a draw from softmax(logits / temp) */
static int32_t pick(const float *logits, int V, float temp, uint64_t *rs) {
    int32_t best = 0;
    for (int v = 1; v < V; v++)
        if (logits[v] > logits[best]) best = v;
    if (temp <= 0) return best;
    double mx = logits[best], s = 0;
    for (int v = 0; v < V; v++) s += exp((logits[v] - mx) / temp);
    double u = (double)(util_splitmix64(rs) >> 11) / 9007199254740992.0 * s, c = 0;
    for (int v = 0; v < V; v++)
        if ((c += exp((logits[v] - mx) / temp)) > u) return v;
    return V - 1;
}

typedef struct {
    int idx;            /* prompt index */
    int len;            /* tokens so far */
    int hot;            /* tokens up to here are drawn at warm_temp */
    int cap;            /* n_prompt + warm + gen */
    int32_t *tok;       /* (cap) */
    float *h;           /* (cap, D): h[a] = hidden state after feeding token a */
    kv_seq *kv;
} dseq;

/* positions [0, len-1) of one finished sequence into d */
static int64_t append(medusa_data *d, const dseq *s) {
    int K = d->n_heads, D = d->dim;
    int64_t added = 0;
    for (int a = 0; a + 1 < s->len && d->n < d->cap; a++, added++) {
        int64_t i = d->n++;
        memcpy(d->h + (size_t)i * D, s->h + (size_t)a * D, sizeof(float) * (size_t)D);
        d->next[i] = s->tok[a + 1];
        for (int k = 0; k < K; k++) d->lab[i * K + k] = a + 2 + k < s->len ? s->tok[a + 2 + k] : -1;
    }
    return added;
}

/* the prompt, in max_batch pieces, keeping every row's hidden state; the
 * last row's logits land in logits */
static int prefill(model *m, kv_pool *pool, dseq *s, float *logits, int *rows, char *err, size_t errlen) {
    int V = m->hp.n_vocab, D = m->hp.dim, mb = m->mp.max_batch;
    for (int a = 0; a < s->len; a += mb) {
        int c = s->len - a < mb ? s->len - a : mb;
        model_seq ms = {.kv = s->kv, .n = c, .tokens = s->tok + a, .all_logits = true};
        if (model_forward(m, pool, &ms, 1, logits, err, errlen) != 0) return -1;
        for (int j = 0; j < c; j++) rows[j] = j;
        if (s->h) model_hidden_rows(m, s->h + (size_t)a * D, rows, c);
        if (a + c == s->len) memmove(logits, logits + (size_t)(c - 1) * V, sizeof(float) * (size_t)V);
    }
    return 0;
}

int64_t medusa_distill_add(medusa_data *d, model *m, const tokenizer *tok, const int32_t *const *prompts,
                           const int *n_prompt, const int *warm, int n, int gen, float temp, float warm_temp,
                           int batch, uint64_t *rs, int32_t *out, int *out_len, char *err, size_t errlen) {
    int V = m->hp.n_vocab, D = m->hp.dim, ctx = m->mp.max_ctx, mb = m->mp.max_batch;
    if (d && d->dim != D) return util_fail(err, errlen, "data of dimension %d for a target of %d", d->dim, D);
    if (batch < 1) batch = 1;
    if (batch > mb) batch = mb;
    if (batch > n) batch = n > 0 ? n : 1;
    int max_np = 1;
    for (int i = 0; i < n; i++) {
        int w = warm ? warm[i] : 0;
        if (w < 0 || n_prompt[i] < 1 || n_prompt[i] + w + gen > ctx)
            return util_fail(err, errlen, "prompt %d: %d tokens + %d generated do not fit a context of %d", i,
                             n_prompt[i], w + gen, ctx);
        if (n_prompt[i] + w > max_np) max_np = n_prompt[i] + w;
    }
    int cap = max_np + gen, bs = 16;
    int rows_max = mb > batch ? mb : batch;
    engine_status st;
    kv_pool *pool = model_kv_pool(m, bs, batch * ((cap + bs - 1) / bs + 1), &st, err, errlen);
    dseq *sq = calloc((size_t)batch, sizeof(dseq));
    model_seq *ms = calloc((size_t)batch, sizeof(model_seq));
    float *logits = malloc(sizeof(float) * (size_t)rows_max * V);
    int *rows = malloc(sizeof(int) * (size_t)rows_max);
    int64_t added = 0;
    if (!pool || !sq || !ms || !logits || !rows) {
        if (pool) util_fail(err, errlen, "out of memory: self-distillation scratch");
        added = -1;
        goto done;
    }
    for (int j = 0; j < batch; j++) {
        sq[j].tok = malloc(sizeof(int32_t) * (size_t)cap);
        sq[j].h = d ? malloc(sizeof(float) * (size_t)cap * D) : NULL;
        sq[j].kv = kv_seq_create(pool, cap);
        if (!sq[j].tok || (d && !sq[j].h) || !sq[j].kv) {
            added = util_fail(err, errlen, "out of memory: self-distillation scratch");
            goto done;
        }
    }
    int next = 0, live = 0;
    for (int j = 0; j < batch; j++) sq[j].idx = -1;
    while ((next < n || live > 0) && (!d || d->n < d->cap)) {
        /* empty slots take the next prompts: prefill and their first token */
        for (int j = 0; j < batch && next < n; j++) {
            dseq *s = &sq[j];
            if (s->idx >= 0) continue;
            s->idx = next++;
            s->len = n_prompt[s->idx];
            s->hot = s->len + (warm ? warm[s->idx] : 0);
            s->cap = s->hot + gen;
            memcpy(s->tok, prompts[s->idx], sizeof(int32_t) * (size_t)s->len);
            kv_seq_truncate(pool, s->kv, 0);
            if (prefill(m, pool, s, logits, rows, err, errlen) != 0) {
                added = -1;
                goto done;
            }
            s->tok[s->len] = pick(logits, V, s->len < s->hot ? warm_temp : temp, rs);
            s->len++;
            live++;
        }
        /* finished sequences leave (their last token is never fed) */
        for (int j = 0; j < batch; j++) {
            dseq *s = &sq[j];
            if (s->idx < 0) continue;
            if (s->len < s->cap && !(tok && tok_is_eog(tok, s->tok[s->len - 1]))) continue;
            if (d) added += append(d, s);
            if (out) {
                memcpy(out + (size_t)s->idx * ctx, s->tok, sizeof(int32_t) * (size_t)s->len);
                out_len[s->idx] = s->len;
            }
            s->idx = -1;
            live--;
        }
        if (live == 0) continue;
        /* one step for every live sequence */
        int nb = 0;
        for (int j = 0; j < batch; j++)
            if (sq[j].idx >= 0) {
                ms[nb] = (model_seq){.kv = sq[j].kv, .n = 1, .tokens = &sq[j].tok[sq[j].len - 1]};
                rows[nb++] = j;
            }
        if (model_forward(m, pool, ms, nb, logits, err, errlen) != 0) {
            added = -1;
            goto done;
        }
        for (int r = 0; r < nb; r++) {
            dseq *s = &sq[rows[r]];
            int one = r;
            if (d) model_hidden_rows(m, s->h + (size_t)(s->len - 1) * D, &one, 1);
            s->tok[s->len] = pick(logits + (size_t)r * V, V, s->len < s->hot ? warm_temp : temp, rs);
            s->len++;
        }
    }
done:
    for (int j = 0; sq && j < batch; j++) {
        free(sq[j].tok);
        free(sq[j].h);
        if (sq[j].kv) kv_seq_destroy(pool, sq[j].kv);
    }
    free(sq);
    free(ms);
    free(logits);
    free(rows);
    kv_pool_destroy(pool);
    return added;
}
