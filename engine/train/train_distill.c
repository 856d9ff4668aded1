/* train_distill.c — the target's batched continuations with the top-k of
 * every fed position's logits (see train_distill.h). */
#include "engine/train/train_distill.h"
#include "engine/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void train_topk(int32_t *ids, float *vals, const float *z, int V, int K) {
    int n = 0;
    for (int v = 0; v < V; v++) {
        if (n == K && z[v] <= vals[K - 1]) continue;
        int j = n < K ? n++ : K - 1;
        while (j > 0 && vals[j - 1] < z[v]) vals[j] = vals[j - 1], ids[j] = ids[j - 1], j--;
        vals[j] = z[v], ids[j] = v;
    }
}

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
    int idx, len, hot, cap;
    int32_t *tok;       /* (cap) */
    int32_t *kid;       /* (cap, K) top-k after feeding tok[a] */
    float *kz;          /* (cap, K) */
    float *feat;        /* (cap, n_taps * D) the taps at each fed position, or NULL */
    kv_seq *kv;
} gseq;

/* the taps of the last forward's input rows [r0, r0 + c) into positions
 * [a, a + c) of s->feat */
static int keep_taps(model *m, int n_taps, float *tmp, gseq *s, int a, int r0, int c) {
    int D = m->hp.dim;
    for (int t = 0; t < n_taps; t++) {
        int rows[512];
        for (int r = 0; r < c; r++) rows[r] = r0 + r;
        if (model_tap_rows(m, t, tmp, rows, c) != 0) return -1;
        for (int r = 0; r < c; r++)
            memcpy(s->feat + ((size_t)(a + r) * n_taps + t) * D, tmp + (size_t)r * D, sizeof(float) * (size_t)D);
    }
    return 0;
}

/* keeps a finished sequence in a train_data */
static int to_data(void *ctx, const int32_t *tok, int len, const int32_t *kid, const float *kz, const float *feat) {
    (void)feat;
    return train_data_add_seq(ctx, tok, len, kid, kz);
}

int64_t train_distill_add(train_data *d, model *m, const tokenizer *tok, const int32_t *const *prompts,
                          const int *n_prompt, const int *warm, int n, int gen, float temp, float warm_temp, int batch,
                          uint64_t *rs, char *err, size_t errlen) {
    return train_distill_run(m, tok, prompts, n_prompt, warm, n, gen, temp, warm_temp, batch, rs, d->K, NULL, 0,
                             to_data, d, err, errlen);
}

int64_t train_distill_run(model *m, const tokenizer *tok, const int32_t *const *prompts, const int *n_prompt,
                          const int *warm, int n, int gen, float temp, float warm_temp, int batch, uint64_t *rs, int K,
                          const int *layers, int n_taps, train_distill_sink sink, void *sink_ctx, char *err,
                          size_t errlen) {
    int V = m->hp.n_vocab, ctx = m->mp.max_ctx, mb = m->mp.max_batch, D = m->hp.dim;
    if (K < 1 || K > V) return util_fail(err, errlen, "top-k of %d for a vocabulary of %d", K, V);
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
    if (n_taps > 0 && model_set_taps(m, layers, n_taps) != 0)
        return util_fail(err, errlen, "the target cannot tap those %d layers", n_taps);
    if (n_taps > 0 && mb > 512) mb = 512; /* keep_taps' row list (taps only: a plain run keeps its batch) */
    engine_status st;
    kv_pool *pool = model_kv_pool(m, bs, batch * ((cap + bs - 1) / bs + 1), &st, err, errlen);
    gseq *sq = calloc((size_t)batch, sizeof(gseq));
    model_seq *ms = calloc((size_t)batch, sizeof(model_seq));
    int rows_max = mb > batch ? mb : batch;
    float *logits = malloc(sizeof(float) * (size_t)rows_max * V);
    int *rows = malloc(sizeof(int) * (size_t)batch);
    float *tmp = n_taps > 0 ? malloc(sizeof(float) * (size_t)rows_max * D) : NULL;
    int64_t added = 0;
    if (!pool || !sq || !ms || !logits || !rows || (n_taps > 0 && !tmp)) {
        if (pool) util_fail(err, errlen, "out of memory: distillation scratch");
        added = -1;
        goto done;
    }
    for (int j = 0; j < batch; j++) {
        sq[j].tok = malloc(sizeof(int32_t) * (size_t)cap);
        sq[j].kid = malloc(sizeof(int32_t) * (size_t)cap * K);
        sq[j].kz = malloc(sizeof(float) * (size_t)cap * K);
        sq[j].kv = kv_seq_create(pool, cap);
        sq[j].idx = -1;
        if (n_taps > 0) sq[j].feat = malloc(sizeof(float) * (size_t)cap * n_taps * D);
        if (!sq[j].tok || !sq[j].kid || !sq[j].kz || !sq[j].kv || (n_taps > 0 && !sq[j].feat)) {
            added = util_fail(err, errlen, "out of memory: distillation scratch");
            goto done;
        }
    }
    int next = 0, live = 0;
    bool full = false;
    while ((next < n || live > 0) && !full) {
        for (int j = 0; j < batch && next < n; j++) {
            gseq *s = &sq[j];
            if (s->idx >= 0) continue;
            s->idx = next++;
            s->len = n_prompt[s->idx];
            s->hot = s->len + (warm ? warm[s->idx] : 0);
            s->cap = s->hot + gen;
            memcpy(s->tok, prompts[s->idx], sizeof(int32_t) * (size_t)s->len);
            kv_seq_truncate(pool, s->kv, 0);
            for (int a = 0; a < s->len; a += mb) { /* the prompt's rows, all kept */
                int c = s->len - a < mb ? s->len - a : mb;
                model_seq one = {.kv = s->kv, .n = c, .tokens = s->tok + a, .all_logits = true};
                if (model_forward(m, pool, &one, 1, logits, err, errlen) != 0) {
                    added = -1;
                    goto done;
                }
                for (int r = 0; r < c; r++)
                    train_topk(s->kid + (size_t)(a + r) * K, s->kz + (size_t)(a + r) * K, logits + (size_t)r * V, V, K);
                if (n_taps > 0 && keep_taps(m, n_taps, tmp, s, a, 0, c) != 0) {
                    added = util_fail(err, errlen, "the target's layer taps failed");
                    goto done;
                }
                if (a + c == s->len)
                    s->tok[s->len] = pick(logits + (size_t)(c - 1) * V, V, s->len < s->hot ? warm_temp : temp, rs);
            }
            s->len++;
            live++;
        }
        for (int j = 0; j < batch; j++) {
            gseq *s = &sq[j];
            if (s->idx < 0) continue;
            if (s->len < s->cap && !(tok && tok_is_eog(tok, s->tok[s->len - 1]))) continue;
            int kept = sink(sink_ctx, s->tok, s->len, s->kid, s->kz, s->feat);
            if (kept < 0) {
                added = util_fail(err, errlen, "out of memory: distillation data");
                goto done;
            }
            added += kept;
            full = kept == 0;
            s->idx = -1;
            live--;
        }
        if (live == 0) continue;
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
            gseq *s = &sq[rows[r]];
            const float *z = logits + (size_t)r * V;
            train_topk(s->kid + (size_t)(s->len - 1) * K, s->kz + (size_t)(s->len - 1) * K, z, V, K);
            if (n_taps > 0 && keep_taps(m, n_taps, tmp, s, s->len - 1, r, 1) != 0) {
                added = util_fail(err, errlen, "the target's layer taps failed");
                goto done;
            }
            s->tok[s->len] = pick(z, V, s->len < s->hot ? warm_temp : temp, rs);
            s->len++;
        }
    }
done:
    for (int j = 0; sq && j < batch; j++) {
        free(sq[j].tok), free(sq[j].kid), free(sq[j].kz), free(sq[j].feat);
        if (sq[j].kv) kv_seq_destroy(pool, sq[j].kv);
    }
    free(sq), free(ms), free(logits), free(rows), free(tmp);
    kv_pool_destroy(pool);
    if (n_taps > 0) model_set_taps(m, NULL, 0);
    return added;
}
