/* spec.c — the per-sequence speculation step: sequences, planning, the
 * draft phase, verify, accept and commit (see spec.h for the cache
 * invariant; the pair itself is spec_pair.c). */
#include "engine/spec/spec.h"
#include "engine/util.h"
#include "kernels/check.h"
#include "kernels/half.h"

#include "engine/grammar/grammar.h"
#include "engine/sample/gumbel.h"
#include "engine/sample/rng.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- sequences -------------------------------------------------------------- */

void spec_seq_free(spec_seq *s) {
    if (!s) return;
    if (s->tkv) kv_seq_destroy(s->sp->tpool, s->tkv);
    for (int i = 0; i < SPEC_DRAFTERS; i++)
        if (s->ds[i]) s->sp->drafters[i]->i->seq_destroy(s->sp->drafters[i], s->ds[i]);
    free(s->tokens);
    free(s->q);
    free(s->pen);
    free(s->rf);
    free(s);
}

static bool greedy(const spec_seq *s) { return s->prm.sc.temperature == 0.0f; }

/* ---- constraints (grammar.h): masks in lockstep ----------------------------- */

int spec_seq_grammar_budget(const spec_seq *s, int pos) {
    if (s->prm.grammar_budget <= 0) return -1;
    int b = s->prm.grammar_budget - (pos - s->n_prompt);
    return b < 1 ? 1 : b;
}

/* Masks logits (mutable) with grammar state st for the token at pos. */
static void grammar_mask_at(const spec_seq *s, int32_t st, uint64_t pos, float *logits) {
    grammar_mask_logits(s->prm.grammar, st, spec_seq_grammar_budget(s, (int)pos), logits);
}

/* Penalties and logit bias (sampler_penalize) for the token after the
 * accepted tokens and drafts[0, n_drafts). */
static void penalize(spec_seq *s, const int32_t *drafts, int n_drafts, float *logits) {
    if (s->pen)
        sampler_penalize(&s->prm.sc, s->tokens, s->n_tokens, drafts, n_drafts, s->pen, logits, s->sp->n_vocab);
}

/* The drafter's hook: q row j is masked by the state after the accepted
 * tokens and drafts [0, j), and penalised with that history — the same the
 * target's row j will see. */
static void draft_mask(void *ctx, int j, const drafter_node *nodes, float *logits) {
    spec_seq *s = ctx;
    if (s->prm.grammar) {
        if (j == 0) s->gpos[0] = s->gst;
        else s->gpos[j] = grammar_advance_token(s->prm.grammar, s->gpos[j - 1], nodes[j - 1].token);
        grammar_mask_at(s, s->gpos[j], (uint64_t)(s->n_tokens + j), logits);
    }
    if (s->pen) {
        int32_t d[GAMMA_MAX];
        for (int k = 0; k < j; k++) d[k] = nodes[k].token;
        penalize(s, d, j, logits);
    }
}

/* After proposing: the state copies for every position, and the chain cut at
 * the first draft the grammar refuses (a deterministic proposal may; a masked
 * sampled one cannot). The cut depends only on the context and the proposal,
 * so it keeps the rule lossless for point masses. Returns the kept length. */
static int grammar_cut(spec_seq *s, int g) {
    grammar_matcher *m = s->prm.grammar;
    s->gpos[0] = s->gst;
    for (int j = 0; j < g; j++) {
        if (!grammar_allows(m, s->gpos[j], spec_seq_grammar_budget(s, s->n_tokens + j), s->draft[j])) return j;
        s->gpos[j + 1] = grammar_advance_token(m, s->gpos[j], s->draft[j]);
    }
    return g;
}

/* Turns logits into the processed distribution and draws a token from it. */
static int32_t draw(spec_seq *s, float *logits, float *probs, uint64_t pos, uint32_t purpose) {
    if (s->prm.grammar) grammar_mask_at(s, s->gst, pos, logits);
    penalize(s, NULL, 0, logits);
    sampler_probs(s->sp->smp, &s->prm.sc, logits, probs);
    if (greedy(s)) return sampler_sample(probs, s->sp->n_vocab, 0.0);
    if (s->prm.coupled) return gumbel_sample(probs, s->sp->n_vocab, s->prm.seed, pos);
    return sampler_sample(probs, s->sp->n_vocab, rng_uniform(s->prm.seed, pos, purpose, 0));
}

/* ---- logprobs (spec.h spec_logprob) ----------------------------------------- */

static bool lp_better(float a, int32_t ia, float b, int32_t ib) { return a > b || (a == b && ia < ib); }

/* The emitted token's log softmax and the k best alternatives of one row of
 * raw (grammar-masked) logits; -inf entries are never alternatives. */
static void logprob_fill(const float *x, int V, int32_t tok, int k, spec_logprob *out) {
    float mx = -INFINITY;
    for (int i = 0; i < V; i++)
        if (x[i] > mx) mx = x[i];
    double z = 0;
    if (mx > -INFINITY)
        for (int i = 0; i < V; i++) z += exp((double)x[i] - (double)mx);
    double lse = (double)mx + log(z > 0 ? z : 1);
    out->logprob = (float)((double)x[tok] - lse);
    /* a min-heap of the k best (worst at the root) */
    int n = 0;
    int32_t *hid = out->top_id;
    float *hv = out->top_logprob;
    if (k > SPEC_TOP_LOGPROBS) k = SPEC_TOP_LOGPROBS;
    for (int i = 0; i < V && k > 0; i++) {
        float v = x[i];
        if (v == -INFINITY || v != v) continue;
        int at;
        if (n < k) {
            at = n++;
            while (at > 0 && lp_better(hv[(at - 1) / 2], hid[(at - 1) / 2], v, i)) {
                hv[at] = hv[(at - 1) / 2], hid[at] = hid[(at - 1) / 2];
                at = (at - 1) / 2;
            }
        } else {
            if (!lp_better(v, i, hv[0], hid[0])) continue;
            at = 0;
            for (;;) {
                int c = 2 * at + 1;
                if (c >= n) break;
                if (c + 1 < n && lp_better(hv[c], hid[c], hv[c + 1], hid[c + 1])) c++;
                if (!lp_better(v, i, hv[c], hid[c])) break;
                hv[at] = hv[c], hid[at] = hid[c];
                at = c;
            }
        }
        hv[at] = v, hid[at] = i;
    }
    /* heap → best first (insertion sort: k <= 20) */
    for (int i = 1; i < n; i++) {
        float v = hv[i];
        int32_t id = hid[i];
        int j = i;
        while (j > 0 && lp_better(v, id, hv[j - 1], hid[j - 1])) hv[j] = hv[j - 1], hid[j] = hid[j - 1], j--;
        hv[j] = v, hid[j] = id;
    }
    for (int i = 0; i < n; i++) hv[i] = (float)((double)hv[i] - lse);
    out->n_top = n;
}

bool spec_method_uses(const spec_seq_params *p, int slot) {
    spec_method m = p->method;
    if (m == SPEC_METHOD_OFF) return false;
    if (slot == SPEC_DRAFTER_MEDUSA)
        return (m == SPEC_METHOD_MEDUSA || m == SPEC_METHOD_AUTO) && !p->logprobs && !p->coupled &&
               !sampler_has_penalties(&p->sc);
    if (slot == SPEC_DRAFTER_EAGLE) return m == SPEC_METHOD_EAGLE || m == SPEC_METHOD_AUTO;
    if (m == SPEC_METHOD_MEDUSA || m == SPEC_METHOD_EAGLE) return false;
    if (m == SPEC_METHOD_AUTO) return true;
    return slot == (m == SPEC_METHOD_NGRAM ? SPEC_DRAFTER_NGRAM : SPEC_DRAFTER_MODEL);
}

/* Learning: appends features of positions [pos0, pos0 + n) (rows of n_feat
 * layers, F32) to s's record; positions from pos0 on replace older ones. */
static void record_features(spec_seq *s, const float *feat, int pos0, int n) {
    size_t F = (size_t)s->sp->n_feat * (size_t)s->sp->target->hp.dim;
    if (s->rf_gap) return;
    if (pos0 > s->rf_n) { /* a position without features: the record stops */
        s->rf_gap = true;
        return;
    }
    if (pos0 + n > s->rf_cap) {
        int cap = s->rf_cap ? s->rf_cap : 256;
        while (cap < pos0 + n) cap *= 2;
        uint16_t *p = realloc(s->rf, sizeof(uint16_t) * (size_t)cap * F);
        if (!p) {
            s->rf_gap = true;
            return;
        }
        s->rf = p, s->rf_cap = cap;
    }
    uint16_t *o = s->rf + (size_t)pos0 * F;
    for (size_t i = 0; i < (size_t)n * F; i++) o[i] = f32_to_fp16(feat[i]);
    s->rf_n = pos0 + n;
}

static bool reads_features(const spec_seq *s) {
    if (!s->sp->n_feat) return false;
    if (s->prm.record) return true;
    for (int i = 0; i < SPEC_DRAFTERS; i++)
        if (s->ds[i] && s->sp->drafters[i]->i->observe_features) return true;
    return false;
}

void spec_seq_observe_features(spec_seq *s, const int *rows, int n, int pos0) {
    spec_pair *sp = s->sp;
    if (!reads_features(s) || n <= 0) return;
    size_t D = (size_t)sp->target->hp.dim, k = (size_t)sp->n_feat;
    for (int at = 0; at < n; at += sp->feat_rows) { /* in pieces of the scratch's rows */
        int m = n - at < sp->feat_rows ? n - at : sp->feat_rows;
        bool ok = true;
        for (size_t t = 0; t < k && ok; t++) {
            ok = model_tap_rows(sp->target, (int)t, sp->hidden_rows, rows + at, m) == 0;
            for (int j = 0; ok && j < m; j++)
                memcpy(sp->feat + ((size_t)j * k + t) * D, sp->hidden_rows + (size_t)j * D, D * sizeof(float));
        }
        if (!ok) { /* cannot happen for rows of the last forward: the proposers start over, the record stops */
            for (int i = 0; i < SPEC_DRAFTERS; i++)
                if (s->ds[i] && sp->drafters[i]->i->observe_features)
                    sp->drafters[i]->i->commit(sp->drafters[i], s->ds[i], s->tokens, 0);
            s->rf_gap = true;
            return;
        }
        if (s->prm.record) record_features(s, sp->feat, pos0 + at, m);
        for (int i = 0; i < SPEC_DRAFTERS; i++) {
            drafter *d = sp->drafters[i];
            if (s->ds[i] && d->i->observe_features) d->i->observe_features(d, s->ds[i], sp->feat, pos0 + at, m);
        }
    }
}

void spec_seq_drop_drafter(spec_seq *s, int slot) {
    drafter *d = s->sp->drafters[slot];
    if (s->ds[slot]) d->i->seq_destroy(d, s->ds[slot]);
    s->ds[slot] = NULL;
}

drafter *spec_pair_swap_drafter(spec_pair *sp, spec_seq *const *seqs, int n, int slot, drafter *d) {
    for (int i = 0; i < n; i++)
        if (seqs[i]) spec_seq_drop_drafter(seqs[i], slot);
    drafter *old = spec_pair_set_drafter(sp, slot, d);
    for (int i = 0; d && i < n; i++) {
        spec_seq *s = seqs[i];
        if (s && s->prm.speculate && spec_method_uses(&s->prm, slot)) spec_seq_adopt_drafter(s, slot);
    }
    return old;
}

int spec_seq_adopt_drafter(spec_seq *s, int slot) {
    spec_pair *sp = s->sp;
    drafter *d = sp->drafters[slot];
    SPECD_CHECK(!s->ds[slot] && d);
    if (!(s->ds[slot] = d->i->seq_create(d, s->cap))) return -1;
    budget_seq_restart(&s->bud, slot); /* the old proposer's α says nothing of this one */
    if (!d->i->observe_features) return 0;
    /* the record, in pieces of the scratch's rows; a missing record leaves a gap (nothing proposed) */
    size_t F = (size_t)sp->n_feat * (size_t)sp->target->hp.dim;
    int have = s->prm.record && !s->rf_gap ? s->rf_n : 0, need = s->n_tokens - 1;
    if (have < need) {
        d->i->observe_features(d, s->ds[slot], sp->feat, need, 0); /* position need > 0 without the ones before */
        return 0;
    }
    for (int a = 0; a < need; a += sp->feat_rows) {
        int m = need - a < sp->feat_rows ? need - a : sp->feat_rows;
        for (size_t i = 0; i < (size_t)m * F; i++) sp->feat[i] = fp16_to_f32(s->rf[(size_t)a * F + i]);
        d->i->observe_features(d, s->ds[slot], sp->feat, a, m);
    }
    return 0;
}

void spec_seq_observe_hidden(spec_seq *s, int row) {
    spec_pair *sp = s->sp;
    for (int i = 0; i < SPEC_DRAFTERS; i++) {
        drafter *d = sp->drafters[i];
        if (!s->ds[i] || !d->i->needs_hidden) continue;
        if (row >= 0 && model_hidden_rows(sp->target, sp->hidden, &row, 1) == 0)
            d->i->observe_hidden(d, s->ds[i], sp->hidden, s->n_tokens);
        else
            d->i->commit(d, s->ds[i], s->tokens, 0); /* nothing fresh to propose from: a reset */
    }
}

/* ---- prefix reuse (kv.h) ---------------------------------------------------- */

/* Whether the sequence's draft cache must start from the target's prefix
 * length (it may draft with the draft model, which keeps a cache to share). */
static bool prefix_lockstep(const spec_pair *sp, const spec_seq_params *p, bool has_ds) {
    drafter *d = sp->drafters[SPEC_DRAFTER_MODEL];
    return d && has_ds && d->i->prefix_attach && p->speculate && spec_method_uses(p, SPEC_DRAFTER_MODEL);
}

/* Attaches the cached prefix of the prompt to the target cache and, for a
 * sequence that may draft with the draft model, to the draft's, at most the
 * target's length: the draft may start behind (a draft that never drafted
 * left no blocks) and catches up at its first proposal, which keeps the cache
 * invariant (the draft never ahead) and the outputs. At least the last prompt
 * token is left to prefill (its logits give the first token). */
static void prefix_attach(spec_seq *s, const int32_t *prompt, int n) {
    spec_pair *sp = s->sp;
    int lt = kv_seq_attach(sp->tpool, s->tkv, prompt, n, n - 1);
    if (prefix_lockstep(sp, &s->prm, s->ds[SPEC_DRAFTER_MODEL] != NULL)) {
        drafter *d = sp->drafters[SPEC_DRAFTER_MODEL];
        int ld = d->i->prefix_attach(d, s->ds[SPEC_DRAFTER_MODEL], prompt, n, lt);
        s->st.prefix_draft_offered += (uint64_t)n;
        s->st.prefix_draft_reused += (uint64_t)ld;
    }
    s->st.prefix_offered += (uint64_t)n;
    s->st.prefix_reused += (uint64_t)lt;
}

/* After a hard reset (both caches emptied): takes back from the index the
 * cached full blocks of the accepted positions [0, want) — the sequence's own,
 * idle since the truncate, or a twin — with the same rule as prefix_attach
 * (the draft at most the target's length). Indexed blocks hold positions that were final when
 * published, so they are what a re-prefill would compute. Returns the target
 * length attached (the re-prefill starts there; the draft catches up from its
 * own, never longer, length on its next proposal). */
static int prefix_reattach(spec_seq *s, int want) {
    spec_pair *sp = s->sp;
    int lt = kv_seq_attach(sp->tpool, s->tkv, s->tokens, want, want);
    if (lt > 0 && prefix_lockstep(sp, &s->prm, s->ds[SPEC_DRAFTER_MODEL] != NULL)) {
        drafter *d = sp->drafters[SPEC_DRAFTER_MODEL];
        d->i->prefix_attach(d, s->ds[SPEC_DRAFTER_MODEL], s->tokens, want, lt);
    }
    s->st.kv_reset_reused += (uint64_t)lt;
    return lt;
}

/* Offers the sequence's final full blocks to every cache that shares. */
static void prefix_publish(spec_seq *s) {
    spec_pair *sp = s->sp;
    if (!s->prefix) return;
    kv_seq_publish(sp->tpool, s->tkv, s->tokens, s->n_tokens);
    for (int i = 0; i < SPEC_DRAFTERS; i++)
        if (s->ds[i] && sp->drafters[i]->i->prefix_publish)
            sp->drafters[i]->i->prefix_publish(sp->drafters[i], s->ds[i], s->tokens, s->n_tokens);
}

void spec_prefix_probe(const spec_pair *sp, const int32_t *prompt, int n_prompt, const spec_seq_params *p,
                       int shared[2], int cow[2]) {
    shared[0] = shared[1] = cow[0] = cow[1] = 0;
    if (!sp->prefix_cache || p->no_prefix || n_prompt < 2) return;
    /* with a features reader loaded (an EAGLE-3 head) a sequence the policy
     * puts on it reuses nothing (spec_seq_create): admission counts no
     * sharing at all, whatever the method turns out to be */
    if (sp->n_feat) return;
    /* the policy may still change whether the draft attaches in lockstep, so
     * the figures hold either way: the target's shared blocks of the shorter
     * (lockstep) run, a copy when either run ends in a cut block, and nothing
     * taken off the draft's need */
    int B = sp->tpool->block_size, cap = kv_blocks_for(sp->tpool, n_prompt - 1);
    int k = kv_prefix_match(sp->tpool, prompt, n_prompt, cap, NULL), kl = k;
    const kv_pool *dp = spec_pair_draft_pool(sp);
    if (dp && sp->drafters[SPEC_DRAFTER_MODEL] && sp->drafters[SPEC_DRAFTER_MODEL]->i->prefix_attach)
        kl = kv_prefix_match(dp, prompt, n_prompt, k, NULL);
    kv_prefix_match(sp->tpool, prompt, n_prompt, kl, &shared[0]);
    cow[0] = (k > 0 && k * B > n_prompt - 1) || (kl > 0 && kl * B > n_prompt - 1);
    cow[1] = cow[0];
}

void spec_seq_blocks(const spec_seq *s, int held[2], int cow[2]) {
    held[0] = s->tkv->n_blocks;
    cow[0] = kv_seq_cow_pending(s->sp->tpool, s->tkv);
    drafter *d = s->sp->drafters[SPEC_DRAFTER_MODEL]; /* the draft slot's cache, through its table */
    drafter_seq *ds = s->ds[SPEC_DRAFTER_MODEL];
    const kv_seq *dk = d && d->i->seq_kv && ds ? d->i->seq_kv(d, ds) : NULL;
    const kv_pool *dp = spec_pair_draft_pool(s->sp);
    held[1] = dk ? dk->n_blocks : 0;
    cow[1] = dk && dp ? kv_seq_cow_pending(dp, dk) : 0;
}

spec_seq *spec_seq_create(spec_pair *sp, const int32_t *prompt, int n_prompt, const spec_seq_params *p, char *err,
                          size_t errlen) {
    int max_ctx = sp->max_ctx;
    if (n_prompt <= 0) return util_fail(err, errlen, "empty prompt"), NULL;
    if (n_prompt >= max_ctx)
        return util_fail(err, errlen, "prompt of %d tokens does not fit the context of %d", n_prompt, max_ctx), NULL;
    if (!sampler_config_validate(&p->sc, err, errlen)) return NULL;
    if ((unsigned)p->method > SPEC_METHOD_EAGLE) return util_fail(err, errlen, "unknown speculation method"), NULL;
    spec_seq *s = calloc(1, sizeof(*s));
    if (!s) return util_fail(err, errlen, "out of memory"), NULL;
    s->sp = sp;
    s->prm = *p;
    s->slot = -1;
    bool any = false;
    for (int i = 0; i < SPEC_DRAFTERS; i++) any |= sp->drafters[i] && spec_method_uses(&s->prm, i);
    if (!any && !s->prm.record) s->prm.speculate = false; /* recording: a learned head may be swapped in later */
    if (s->prm.speculate && !gamma_params_validate(&s->prm.gp, err, errlen)) goto fail;
    budget_seq_init(&s->bud, &s->prm.gp, p->speculate);
    s->cap = max_ctx + GAMMA_MAX + 2;
    if (s->prm.speculate && s->prm.gp.gamma_max > sp->max_gamma) {
        util_fail(err, errlen, "gamma_max %d exceeds the pair's limit of %d", s->prm.gp.gamma_max, sp->max_gamma);
        goto fail;
    }
    s->tokens = malloc(sizeof(int32_t) * (size_t)s->cap);
    if (sampler_has_penalties(&s->prm.sc) && !(s->pen = malloc(sizeof(int32_t) * (size_t)s->cap))) {
        util_fail(err, errlen, "out of memory");
        goto fail;
    }
    s->q = s->prm.speculate ? malloc(sizeof(float) * (size_t)sp->n_vocab * (size_t)sp->max_gamma) : NULL;
    if (s->prm.speculate && !s->q) {
        util_fail(err, errlen, "out of memory");
        goto fail;
    }
    s->tkv = kv_seq_create(sp->tpool, max_ctx + GAMMA_MAX + 1);
    if (!s->tokens || !s->tkv) {
        util_fail(err, errlen, "out of memory");
        goto fail;
    }
    /* the draft model keeps a cache even for plain sequences (as before: its
     * pool is sized for every sequence); other drafters only where used */
    for (int i = 0; i < SPEC_DRAFTERS; i++) {
        drafter *d = sp->drafters[i];
        if (!d || !(i == SPEC_DRAFTER_MODEL || (s->prm.speculate && spec_method_uses(&s->prm, i)))) continue;
        if (!(s->ds[i] = d->i->seq_create(d, max_ctx + GAMMA_MAX + 1))) {
            util_fail(err, errlen, "out of memory");
            goto fail;
        }
    }
    s->prefix = sp->prefix_cache && !p->no_prefix;
    if (reads_features(s)) s->prefix = false; /* a features reader needs every position's features: no reused blocks */
    if (s->prefix) prefix_attach(s, prompt, n_prompt);
    memcpy(s->tokens, prompt, sizeof(int32_t) * (size_t)n_prompt);
    s->n_tokens = s->n_prompt = n_prompt;
    if (s->prm.grammar && (s->gst = grammar_start(s->prm.grammar)) < 0) {
        util_fail(err, errlen, "the grammar matches nothing");
        goto fail;
    }
    return s;
fail:
    spec_seq_free(s);
    return NULL;
}

int spec_seq_prefill(spec_seq *s, int max_tokens, char *err, size_t errlen) {
    spec_pair *sp = s->sp;
    if (s->prefilled) return 1;
    int from = s->tkv->len, to = s->n_prompt;
    if (max_tokens > 0 && to - from > max_tokens) to = from + max_tokens;
    double t0 = clock_now_ms();
    /* a features reader gets each forward's rows: pieces of at most the scratch's rows */
    bool feats = reads_features(s);
    int piece = feats ? sp->feat_rows : to - from;
    for (int a = from; a < to; a += piece) {
        int b = to - a > piece ? a + piece : to;
        if (model_feed(sp->target, sp->tpool, s->tkv, s->tokens, a, b, sp->logits, err, errlen) != 0) return -1;
        if (feats) spec_seq_observe_features(s, sp->iota, b - a, a);
    }
    s->st.target_ms += clock_now_ms() - t0;
    s->st.prefill_tokens += (uint64_t)(to - from);
    prefix_publish(s);
    if (to < s->n_prompt) return 0;
    s->tokens[s->n_tokens] = draw(s, sp->logits, sp->p, (uint64_t)s->n_prompt, RNG_SAMPLE);
    if (s->prm.logprobs) logprob_fill(sp->logits, sp->n_vocab, s->tokens[s->n_tokens], s->prm.top_logprobs, &s->lp[0]);
    if (s->prm.grammar) s->gst = grammar_advance_token(s->prm.grammar, s->gst, s->tokens[s->n_tokens]);
    s->n_tokens++;
    s->st.tokens++;
    s->prefilled = true;
    spec_seq_observe_hidden(s, sp->target->n_out_last - 1); /* the row that sampled it */
    return 1;
}

spec_seq *spec_seq_start(spec_pair *sp, const int32_t *prompt, int n_prompt, const spec_seq_params *p, char *err,
                         size_t errlen) {
    spec_seq *s = spec_seq_create(sp, prompt, n_prompt, p, err, errlen);
    if (s && spec_seq_prefill(s, 0, err, errlen) != 1) {
        spec_seq_free(s);
        return NULL;
    }
    return s;
}

void spec_seq_set_gamma_params(spec_seq *s, const gamma_params *gp) {
    budget_seq_set_params(&s->bud, gp);
}

int spec_seq_check_kv(spec_seq *s, char *err, size_t errlen) {
    spec_pair *sp = s->sp;
    int want = s->n_tokens - 1;
    bool ok = s->tkv->len == want;
    for (int i = 0; i < SPEC_DRAFTERS; i++)
        if (s->ds[i] && drafter_state_len(sp->drafters[i], s->ds[i]) > want) ok = false;
    if (ok) return 0;
    /* a desynchronised cache would attend over a stale context: rebuild them */
    s->st.kv_resets++;
    kv_seq_truncate(sp->tpool, s->tkv, 0);
    for (int i = 0; i < SPEC_DRAFTERS; i++)
        if (s->ds[i]) sp->drafters[i]->i->commit(sp->drafters[i], s->ds[i], s->tokens, 0);
    int from = s->prefix ? prefix_reattach(s, want) : 0;
    if (from < want && model_feed(sp->target, sp->tpool, s->tkv, s->tokens, from, want, sp->logits, err, errlen) != 0)
        return -1;
    return 1;
}

/* Propose phase for every sequence with γ > 0: one batched propose call per
 * drafter over the sequences it serves. Tokens go to each sequence's draft[]
 * (and q, det); gam[] becomes what was proposed. A failing drafter's
 * sequences step plainly (no output gap) and are counted. */
static void draft_phase(spec_pair *sp, spec_seq **S, int n, int *gam, spec_step_info *info) {
    for (int slot = 0; slot < SPEC_DRAFTERS; slot++) {
        drafter *d = sp->drafters[slot];
        int m = 0, gmax = 0;
        for (int i = 0; i < n; i++) {
            if (gam[i] == 0 || S[i]->slot != slot) continue;
            SPECD_CHECK(d && S[i]->ds[slot]);
            sp->props[m] = (drafter_prop){.ds = S[i]->ds[slot], .tokens = S[i]->tokens, .n_tokens = S[i]->n_tokens,
                                          .budget = gam[i], .sc = &S[i]->prm.sc, .seed = S[i]->prm.seed,
                                          .coupled = S[i]->prm.coupled, .q = S[i]->q};
            if (S[i]->prm.grammar || S[i]->pen)
                sp->props[m].mask = draft_mask, sp->props[m].mask_ctx = S[i];
            sp->prop_of[m++] = i;
            gmax = gam[i] > gmax ? gam[i] : gmax;
        }
        if (!m) continue;
        char derr[256];
        int budget = 0; /* draft rows the call computes: each sequence's share of its time */
        for (int r = 0; r < m; r++) budget += gam[sp->prop_of[r]];
        double t0 = clock_now_ms();
        int rc = d->i->propose(d, sp->props, m, derr, sizeof(derr));
        double dt = clock_now_ms() - t0;
        for (int r = 0; r < m; r++) {
            int i = sp->prop_of[r];
            spec_seq *s = S[i];
            double share = budget > 0 ? dt * gam[i] / budget : dt / m;
            s->st.draft_ms += share;
            info[i].draft_ms = share;
            const drafter_prop *p = &sp->props[r];
            if (rc != 0) { /* no output gap: the step becomes a plain step */
                s->st.draft_failures++;
                budget_seq_failed(&s->bud, slot);
                gam[i] = 0;
                s->slot = -1;
                continue;
            }
            int g = p->n_nodes < gam[i] ? p->n_nodes : gam[i];
            for (int j = 0; j < g; j++) {
                SPECD_CHECK(p->nodes[j].parent == j - 1); /* chains only until tree verification lands */
                s->draft[j] = p->nodes[j].token;
                s->det[j] = p->nodes[j].deterministic;
            }
            if (s->prm.grammar) g = grammar_cut(s, g);
            gam[i] = g;
            if (g == 0) s->slot = -1;
        }
        if (rc == 0 && d->i->observe) d->i->observe(d, gmax, m, dt);
    }
    spec_pair_sync_draft_costs(sp);
}

/* Accept/reject and commit for one sequence after the verify call; logits are
 * its gamma+1 rows. */
static void accept_commit(spec_seq *s, int gamma, float *logits, spec_step_info *info) {
    spec_pair *sp = s->sp;
    size_t V = (size_t)sp->n_vocab;
    int N = s->n_tokens;
    int slot = gamma > 0 ? s->slot : -1;
    int32_t out[GAMMA_MAX + 1];
    int k, n_new;
    if (gamma == 0) {
        out[0] = draw(s, logits, sp->p, (uint64_t)N, RNG_SAMPLE);
        k = 0;
        n_new = 1;
        s->st.plain_steps++;
        spec_seq_note_other_step(s);
    } else {
        for (int j = 0; j <= gamma; j++) {
            /* row j: masked by the same state copy as the draft's q row j */
            if (s->prm.grammar && !s->prm.grammar_broken)
                grammar_mask_at(s, s->gpos[j], (uint64_t)(N + j), logits + (size_t)j * V);
            penalize(s, s->draft, s->prm.penalty_broken ? 0 : j, logits + (size_t)j * V);
            sampler_probs(sp->smp, &s->prm.sc, logits + (size_t)j * V, sp->p + (size_t)j * V);
        }
        accept_rng rng = {s->prm.seed, (uint64_t)N, sp->variant};
        if (s->prm.coupled && !greedy(s))
            k = accept_coupled(out, sp->p, s->draft, gamma, (int)V, s->prm.seed, (uint64_t)N, sp->variant);
        else
            k = accept_chain(out, sp->p, s->q, s->det, s->draft, gamma, (int)V, greedy(s), &rng, sp->scratch);
        n_new = k + 1;
        spec_method_stats *bm = &s->st.by[slot];
        s->st.verify_steps++, bm->verify_steps++;
        s->st.drafted += (uint64_t)gamma, bm->drafted += (uint64_t)gamma;
        s->st.accepted += (uint64_t)k, bm->accepted += (uint64_t)k;
        s->st.rejections += k < gamma, bm->rejections += k < gamma;
        for (int j = 0; j < gamma; j++) s->st.pos_reached[j]++, bm->pos_reached[j]++;
        for (int j = 0; j < k; j++) s->st.pos_accepted[j]++, bm->pos_accepted[j]++;
        budget_seq_verified(&s->bud, slot, gamma, k);
    }
    for (int i = 0; i < n_new; i++)
        if (tok_is_eog(sp->tok, out[i])) {
            n_new = i + 1;
            info->stopped = true;
            break;
        }
    /* token i was drawn from row i (masked in place by its grammar state) */
    if (s->prm.logprobs)
        for (int i = 0; i < n_new; i++) logprob_fill(logits + (size_t)i * V, (int)V, out[i], s->prm.top_logprobs, &s->lp[i]);
    /* commit the accepted prefix in the target cache and every drafter
     * together: length updates only */
    memcpy(s->tokens + N, out, sizeof(int32_t) * (size_t)n_new);
    s->n_tokens = N + n_new;
    /* the committed grammar state advances by the accepted tokens and the
     * correction/bonus only; the other copies are dropped */
    if (s->prm.grammar) {
        s->gst = k > 0 && k <= gamma ? s->gpos[k < n_new ? k : n_new] : s->gst;
        for (int i = k < n_new ? k : n_new; i < n_new; i++) s->gst = grammar_advance_token(s->prm.grammar, s->gst, out[i]);
    }
    kv_seq_truncate(sp->tpool, s->tkv, s->n_tokens - 1);
    int keep = N + k < s->n_tokens - 1 ? N + k : s->n_tokens - 1;
    for (int i = 0; i < SPEC_DRAFTERS; i++)
        if (s->ds[i]) sp->drafters[i]->i->commit(sp->drafters[i], s->ds[i], s->tokens, keep);
    prefix_publish(s);
    s->st.tokens += (uint64_t)n_new;
    if (slot >= 0) s->st.by[slot].tokens += (uint64_t)n_new;
    s->st.fallbacks = budget_seq_fallbacks(&s->bud);
    s->st.probes = budget_seq_probes(&s->bud);
    info->n_new = n_new;
    info->gamma = gamma;
    info->depth = info->nodes = gamma;
    info->method = slot;
    info->accepted = k < n_new ? k : n_new;
    info->bonus = gamma > 0 && k == gamma && n_new == gamma + 1;
}

int spec_chain_prepare(spec_pair *sp, spec_seq **S, int n, const int *max_new, const int *planned,
                       spec_step_info *info, model_seq *ms, char *err, size_t errlen) {
    if (n < 1 || n > sp->max_seqs) return util_fail(err, errlen, "batch of %d sequences (limit %d)", n, sp->max_seqs);
    for (int i = 0; i < n; i++)
        if (!S[i]->prefilled) return util_fail(err, errlen, "sequence %d is still prefilling", i);
    int *gam = sp->gam;
    int nd = 0, rows = 0;
    for (int i = 0; i < n; i++) {
        memset(&info[i], 0, sizeof(info[i]));
        info[i].method = -1;
        if (max_new[i] < 1) return util_fail(err, errlen, "max_new must be >= 1");
        if (spec_seq_check_kv(S[i], err, errlen) < 0) return -1;
        if (S[i]->n_tokens > sp->max_ctx) return util_fail(err, errlen, "context full (%d tokens)", S[i]->n_tokens);
        gam[i] = planned ? planned[i] : budget_pick(NULL, S[i], max_new[i], n, false).gamma;
        gam[i] = budget_chain_cap(S[i], gam[i], max_new[i]);
        if (!S[i]->prm.speculate || S[i]->slot < 0) gam[i] = 0;
        nd += gam[i] > 0;
    }
    if (nd) draft_phase(sp, S, n, gam, info);
    /* the verify rows: every sequence's last token and its drafts */
    for (int i = 0; i < n; i++) {
        spec_seq *s = S[i];
        s->vgam = gam[i];
        s->vtoks[0] = s->tokens[s->n_tokens - 1];
        memcpy(s->vtoks + 1, s->draft, sizeof(int32_t) * (size_t)gam[i]);
        ms[i] = (model_seq){.kv = s->tkv, .n = gam[i] + 1, .tokens = s->vtoks, .all_logits = true};
        rows += gam[i] + 1;
    }
    return rows;
}

void spec_chain_abort(spec_pair *sp, spec_seq **S, int n) {
    /* the sequences are unchanged: drafters drop what they proposed */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < SPEC_DRAFTERS; j++)
            if (S[i]->ds[j]) sp->drafters[j]->i->commit(sp->drafters[j], S[i]->ds[j], S[i]->tokens, S[i]->n_tokens - 1);
}

void spec_chain_finish(spec_pair *sp, spec_seq **S, int n, float *logits, int row0, double call_ms, int call_rows,
                       spec_step_info *info) {
    size_t row = 0;
    for (int i = 0; i < n; i++) {
        int g = S[i]->vgam;
        double share = call_ms * (g + 1) / call_rows; /* its verify rows' share of the call */
        S[i]->st.target_ms += share;
        info[i].target_ms = share;
        accept_commit(S[i], g, logits + row * (size_t)sp->n_vocab, &info[i]);
        int hr = row0 + (int)row + info[i].n_new - 1; /* the row that sampled the last token appended */
        if (sp->n_feat) { /* rows 0 .. n_new-1 fed the committed tokens at positions N-1 .. */
            int fr[GAMMA_MAX + 1];
            for (int j = 0; j < info[i].n_new; j++) fr[j] = row0 + (int)row + j;
            spec_seq_observe_features(S[i], fr, info[i].n_new, S[i]->n_tokens - info[i].n_new - 1);
        }
        spec_seq_observe_hidden(S[i], hr);
        row += (size_t)g + 1;
    }
}

int spec_pair_verify(spec_pair *sp, const model_seq *ms, int n, double *call_ms, char *err, size_t errlen) {
    int rows = 0;
    bool chains = true;
    double keys = 0, pairs = 0;
    for (int i = 0; i < n; i++) {
        rows += ms[i].n;
        chains &= ms[i].mask == NULL && ms[i].pos == NULL;
        keys += gamma_keys(ms[i].n, ms[i].kv->len);
        pairs += gamma_pairs(ms[i].n, ms[i].kv->len);
    }
    if (rows > sp->logit_rows)
        return util_fail(err, errlen, "%d verify rows exceed the step scratch of %d", rows, sp->logit_rows);
    double t0 = clock_now_ms();
    if (model_forward(sp->target, sp->tpool, ms, n, sp->logits, err, errlen) != 0) return -1;
    *call_ms = clock_now_ms() - t0;
    /* the γ cost model is fitted to causal verify calls (trees' masked rows cost otherwise) */
    if (chains) gamma_costs_observe_target(&sp->costs, rows, keys, pairs, *call_ms);
    return 0;
}

static int step_batch(spec_pair *sp, spec_seq **S, int n, const int *max_new, const int *planned,
                      spec_step_info *info, char *err, size_t errlen) {
    int rows = spec_chain_prepare(sp, S, n, max_new, planned, info, sp->ms, err, errlen);
    if (rows < 0) return -1;
    double tt;
    if (spec_pair_verify(sp, sp->ms, n, &tt, err, errlen) != 0) {
        spec_chain_abort(sp, S, n);
        return -1;
    }
    spec_chain_finish(sp, S, n, sp->logits, 0, tt, rows, info);
    return 0;
}

int spec_step_batch(spec_pair *sp, spec_seq **S, int n, const int *max_new, spec_step_info *info, char *err,
                    size_t errlen) {
    return step_batch(sp, S, n, max_new, NULL, info, err, errlen);
}

int spec_step_batch_planned(spec_pair *sp, spec_seq **S, int n, const int *max_new, const int *gamma,
                            spec_step_info *info, char *err, size_t errlen) {
    return step_batch(sp, S, n, max_new, gamma, info, err, errlen);
}

void spec_seq_note_other_step(spec_seq *s) {
    if (!s->prm.speculate) return;
    /* every chain proposer the sequence may use: a fallen-back proposer's
     * clock runs on plain steps, so it is probed again (the brief's rule) */
    bool used[SPEC_PROPOSERS] = {[SPEC_DRAFTER_MODEL] = spec_method_uses(&s->prm, SPEC_DRAFTER_MODEL),
                                 [SPEC_DRAFTER_NGRAM] = spec_method_uses(&s->prm, SPEC_DRAFTER_NGRAM),
                                 [SPEC_DRAFTER_EAGLE] = spec_method_uses(&s->prm, SPEC_DRAFTER_EAGLE)};
    budget_seq_plain(&s->bud, used);
}

int spec_seq_step(spec_seq *s, int max_new, spec_step_info *info, char *err, size_t errlen) {
    return spec_step_batch(s->sp, &s, 1, &max_new, info, err, errlen);
}
