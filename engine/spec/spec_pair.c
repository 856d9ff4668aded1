/* spec_pair.c — the target and its proposers (see spec.h): statistics, model
 * identity, opening the target and sizing the pair for the proposers
 * installed in it (through their table: drafter.h), calibration. The
 * proposers are built by their own modules (proposers/; pair_load.c for the
 * draft model and the lookup). */
#include "engine/spec/spec.h"
#include "engine/util.h"
#include "kernels/check.h"

#include "engine/errkind.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- statistics ---------------------------------------------------------- */

double spec_stats_alpha(const spec_stats *s) {
    uint64_t d = s->accepted + s->rejections;
    return d ? (double)s->accepted / (double)d : 0.0;
}

double spec_stats_mean_accepted(const spec_stats *s) {
    return s->verify_steps ? (double)s->accepted / (double)s->verify_steps : 0.0;
}

double spec_stats_tokens_per_pass(const spec_stats *s) {
    uint64_t passes = s->verify_steps + s->plain_steps;
    return passes ? (double)s->tokens / (double)passes : 0.0;
}

void spec_method_stats_note(spec_method_stats *b, const spec_step_info *info) {
    b->verify_steps++, b->drafted += (uint64_t)info->gamma, b->accepted += (uint64_t)info->accepted;
    b->rejections += !info->bonus, b->tokens += (uint64_t)info->n_new;
}

void spec_stats_add(spec_stats *a, const spec_stats *s) {
    a->verify_steps += s->verify_steps, a->plain_steps += s->plain_steps, a->drafted += s->drafted;
    a->accepted += s->accepted, a->rejections += s->rejections, a->tokens += s->tokens;
    for (int i = 0; i < GAMMA_MAX; i++) a->pos_reached[i] += s->pos_reached[i], a->pos_accepted[i] += s->pos_accepted[i];
    a->fallbacks += s->fallbacks, a->probes += s->probes, a->draft_failures += s->draft_failures;
    a->kv_resets += s->kv_resets, a->draft_ms += s->draft_ms, a->target_ms += s->target_ms;
    a->prefix_offered += s->prefix_offered, a->prefix_reused += s->prefix_reused;
    a->prefix_draft_offered += s->prefix_draft_offered, a->prefix_draft_reused += s->prefix_draft_reused;
    a->prefill_tokens += s->prefill_tokens, a->kv_reset_reused += s->kv_reset_reused;
    a->tree_steps += s->tree_steps, a->tree_nodes += s->tree_nodes;
    for (int m = 0; m < SPEC_PROPOSERS; m++) {
        spec_method_stats *x = &a->by[m];
        const spec_method_stats *y = &s->by[m];
        x->verify_steps += y->verify_steps, x->drafted += y->drafted, x->accepted += y->accepted;
        x->rejections += y->rejections, x->tokens += y->tokens;
        for (int i = 0; i < GAMMA_MAX; i++) x->pos_reached[i] += y->pos_reached[i], x->pos_accepted[i] += y->pos_accepted[i];
    }
}

/* ---- identity ------------------------------------------------------------- */

void spec_model_identity(const model *m, const tokenizer *t, spec_model_id *out) {
    memset(out, 0, sizeof(*out));
    snprintf(out->arch, sizeof(out->arch), "%s", m->arch);
    out->n_layer = m->hp.n_layer, out->dim = m->hp.dim, out->n_head = m->hp.n_head;
    out->n_kv_head = m->hp.n_kv_head, out->ff = m->hp.ff, out->n_vocab = m->hp.n_vocab;
    snprintf(out->weight_type, sizeof(out->weight_type), "%s", ggml_type_name(m->layers[0].wq.file_type));
    /* the header holds every metadata value and tensor name/shape/type/offset;
     * with the file size it identifies the file without reading gigabytes */
    uint64_t h = 1469598103934665603ull;
    const uint8_t *b = m->gguf->base;
    size_t hdr = m->gguf->data_offset < m->gguf->size ? (size_t)m->gguf->data_offset : m->gguf->size;
    for (size_t i = 0; i < hdr; i++) h = (h ^ b[i]) * 1099511628211ull;
    uint64_t sz = m->gguf->size;
    for (int i = 0; i < 8; i++) h = (h ^ ((sz >> (8 * i)) & 0xff)) * 1099511628211ull;
    out->header_hash = h;
    out->tokenizer_hash = tok_hash(t);
    snprintf(out->id, sizeof(out->id), "%s-%016llx", m->arch, (unsigned long long)h);
}

int spec_pair_reserve_rows(spec_pair *sp, int rows) {
    if (rows <= sp->logit_rows) return 0;
    float *l = realloc(sp->logits, sizeof(float) * (size_t)sp->n_vocab * (size_t)rows);
    if (!l) return -1;
    sp->logits = l;
    sp->logit_rows = rows;
    return 0;
}

bool spec_pair_has_draft(const spec_pair *sp) { return sp->drafters[SPEC_DRAFTER_MODEL] != NULL; }
model *spec_pair_draft_model(const spec_pair *sp) {
    drafter *d = sp->drafters[SPEC_DRAFTER_MODEL];
    return d && d->i->model ? d->i->model(d) : NULL;
}
kv_pool *spec_pair_draft_pool(const spec_pair *sp) {
    drafter *d = sp->drafters[SPEC_DRAFTER_MODEL];
    return d && d->i->kv_pool ? d->i->kv_pool(d) : NULL;
}

/* The target's layer taps for the first features-reading proposer (none:
 * off) and the scratch that carries them. Returns 0, or -1 when out of
 * memory (then no proposer reads features). */
static int pair_taps(spec_pair *sp) {
    free(sp->feat), free(sp->hidden_rows), free(sp->iota);
    sp->feat = sp->hidden_rows = NULL, sp->iota = NULL, sp->n_feat = 0;
    int layers[MODEL_MAX_TAPS], k = 0;
    for (int i = 0; i < SPEC_DRAFTERS && !k; i++)
        if (sp->drafters[i] && sp->drafters[i]->i->feature_layers) k = sp->drafters[i]->i->feature_layers(sp->drafters[i], layers);
    if (!k && sp->n_learn) { /* learning without a features reader: the learner's layers */
        k = sp->n_learn;
        memcpy(layers, sp->learn_layers, sizeof(int) * (size_t)k);
    }
    if (model_set_taps(sp->target, layers, k) != 0) return -1;
    if (!k) return 0;
    size_t R = (size_t)sp->target->mp.max_batch, D = (size_t)sp->target->hp.dim;
    sp->feat = malloc(sizeof(float) * R * (size_t)k * D);
    sp->hidden_rows = malloc(sizeof(float) * R * D);
    sp->iota = malloc(sizeof(int) * R);
    if (!sp->feat || !sp->hidden_rows || !sp->iota) {
        model_set_taps(sp->target, NULL, 0);
        return -1;
    }
    for (size_t r = 0; r < R; r++) sp->iota[r] = (int)r;
    sp->feat_rows = (int)R, sp->n_feat = k;
    return 0;
}

int spec_pair_set_learn_taps(spec_pair *sp, const int *layers, int n) {
    SPECD_CHECK(n >= 0 && n <= MODEL_MAX_TAPS);
    if (n) memcpy(sp->learn_layers, layers, sizeof(int) * (size_t)n);
    sp->n_learn = n;
    return pair_taps(sp);
}

drafter *spec_pair_set_drafter(spec_pair *sp, int slot, drafter *d) {
    SPECD_CHECK(slot >= 0 && slot < SPEC_DRAFTERS);
    SPECD_CHECK(!d || d->i->version == DRAFTER_INTERFACE_VERSION);
    drafter *old = sp->drafters[slot];
    sp->drafters[slot] = d;
    if ((d && d->i->feature_layers) || (old && old->i->feature_layers)) pair_taps(sp);
    return old;
}

/* ---- the pair ------------------------------------------------------------- */

void spec_pair_free(spec_pair *sp) {
    if (!sp) return;
    kv_pool_destroy(sp->tpool);
    for (int i = 0; i < SPEC_DRAFTERS; i++) drafter_destroy(sp->drafters[i]);
    model_free(sp->target);
    tok_destroy(sp->tok);
    sampler_destroy(sp->smp);
    free(sp->p);
    free(sp->logits);
    free(sp->scratch);
    free(sp->hidden);
    free(sp->feat), free(sp->hidden_rows), free(sp->iota);
    free(sp->ms);
    free(sp->gam);
    free(sp->props);
    free(sp->prop_of);
    free(sp);
}

void spec_pair_dropped(spec_pair *sp, const char *what, const char *source, const char *why, FILE *log) {
    sp->draft_oom = true;
    if (log)
        fprintf(log, "specd: WARNING: %s %s does not fit in memory; decoding without speculation (%s)\n", what,
                source ? source : "(unnamed)", why);
}

spec_pair *spec_pair_open(const char *target_path, backend *be, const spec_pair_params *pp, engine_status *st,
                          char *err, size_t errlen) {
    spec_pair_params prm = pp ? *pp : (spec_pair_params){0};
    char sub[640];
    spec_pair *sp = calloc(1, sizeof(*sp));
    if (!sp) return util_fail_st(st, ENGINE_ERR_OOM, err, errlen, "out of memory"), NULL;
    model_params mp = {.max_batch = 512, .max_ctx = prm.max_ctx, .kv = prm.kv_type};
    if (prm.tensor_parallel > 1) {
        if (!prm.target_shards || prm.target_shards[0] != be) {
            util_fail_st(st, ENGINE_ERR_INVALID, err, errlen, "tensor parallelism: shard 0 must be the pair's backend");
            goto fail;
        }
        sp->target = model_load_tp(target_path, prm.target_shards, prm.tensor_parallel, prm.tp_comm, &mp, st, err,
                                   errlen);
    } else {
        sp->target = model_load(target_path, be, &mp, st, err, errlen);
    }
    if (!sp->target) goto fail;
    if (!(sp->tok = tok_create(sp->target->gguf, sub, sizeof(sub)))) {
        util_fail_st(st, ENGINE_ERR_INVALID, err, errlen, "%s: %s", target_path, sub);
        goto fail;
    }
    sp->n_vocab = sp->target->hp.n_vocab;
    if (tok_n_vocab(sp->tok) != sp->n_vocab) {
        util_fail_st(st, ENGINE_ERR_INVALID, err, errlen, "%s: tokenizer has %d tokens but the model's vocabulary is %d",
                     target_path, tok_n_vocab(sp->tok), sp->n_vocab);
        goto fail;
    }
    sp->max_ctx = sp->target->mp.max_ctx;
    engine_status_set(st, ENGINE_OK);
    return sp;
fail:
    spec_pair_free(sp);
    return NULL;
}

int spec_pair_ready(spec_pair *sp, const spec_pair_params *pp, FILE *log, engine_status *st, char *err,
                    size_t errlen) {
    spec_pair_params prm = pp ? *pp : (spec_pair_params){0};
    if (prm.block_size <= 0) prm.block_size = 16;
    if (prm.draft_mem_warn_pct <= 0) prm.draft_mem_warn_pct = 20.0f;
    /* the draft slot's model names the draft and caps the context of both pools */
    int max_ctx = sp->target->mp.max_ctx;
    const model *dmod = spec_pair_draft_model(sp);
    if (dmod) {
        spec_model_identity(dmod, sp->tok, &sp->draft_id);
        if (dmod->mp.max_ctx < max_ctx) max_ctx = dmod->mp.max_ctx;
    }
    spec_model_identity(sp->target, sp->tok, &sp->target_id);
    /* one full-context sequence, the γ+1 verify overhang, and calibration */
    sp->max_ctx = max_ctx;
    int blocks = prm.kv_blocks > 0 ? prm.kv_blocks : (max_ctx + GAMMA_MAX + 2) / prm.block_size + 4;
    if (!(sp->tpool = model_kv_pool(sp->target, prm.block_size, blocks, st, err, errlen))) return -1;
    sp->max_seqs = prm.max_seqs > 0 ? prm.max_seqs : 32;
    for (int i = 0; i < SPEC_DRAFTERS; i++) { /* the proposers' pools come after the target's */
        drafter *d = sp->drafters[i];
        engine_status dst = ENGINE_OK;
        if (!d || !d->i->reserve || d->i->reserve(d, prm.block_size, blocks, sp->max_seqs, &dst, err, errlen) == 0)
            continue;
        if (dst != ENGINE_ERR_OOM) { /* the proposer's own failure, not a shortage */
            engine_status_set(st, dst);
            return -1;
        }
        spec_pair_dropped(sp, d->i->name, d->source, err, log);
        drafter_destroy(spec_pair_set_drafter(sp, i, NULL));
        if (i == SPEC_DRAFTER_MODEL) memset(&sp->draft_id, 0, sizeof(sp->draft_id));
    }
    kv_pool *dpool = spec_pair_draft_pool(sp);
    if (prm.prefix_cache) { /* each pool's chains start from its own model's identity */
        sp->prefix_cache = true;
        kv_pool_set_prefix(sp->tpool, true, sp->target_id.header_hash ^ sp->target_id.tokenizer_hash,
                           prm.prefix_max_idle);
        if (dpool)
            kv_pool_set_prefix(dpool, true, sp->draft_id.header_hash ^ sp->draft_id.tokenizer_hash,
                               prm.prefix_max_idle);
    }
    size_t V = (size_t)sp->n_vocab;
    sp->smp = sampler_create(sp->n_vocab);
    sp->max_gamma = prm.max_gamma > 0 && prm.max_gamma <= GAMMA_MAX ? prm.max_gamma : 8;
    size_t rows = (size_t)sp->max_seqs * (size_t)(sp->max_gamma + 1);
    if (rows < GAMMA_CAL_ROWS) rows = GAMMA_CAL_ROWS; /* calibration's widest call */
    sp->p = malloc(sizeof(float) * V * (size_t)(sp->max_gamma + 1));
    sp->logits = malloc(sizeof(float) * V * rows);
    sp->logit_rows = (int)rows;
    sp->scratch = malloc(sizeof(float) * V);
    sp->hidden = malloc(sizeof(float) * (size_t)sp->target->hp.dim);
    sp->ms = malloc(sizeof(model_seq) * (size_t)sp->max_seqs);
    sp->gam = malloc(sizeof(int) * (size_t)sp->max_seqs);
    sp->props = malloc(sizeof(drafter_prop) * (size_t)sp->max_seqs);
    sp->prop_of = malloc(sizeof(int) * (size_t)sp->max_seqs);
    if (!sp->smp || !sp->p || !sp->logits || !sp->scratch || !sp->hidden || !sp->ms || !sp->gam || !sp->props || !sp->prop_of)
        return util_fail_st(st, ENGINE_ERR_OOM, err, errlen, "out of memory: the pair's step scratch (%zu rows)", rows);
    if (log)
        fprintf(log, "specd: KV cache %s: %d blocks of %d positions, %.1f MB (target)\n", kv_type_name(sp->tpool->type),
                sp->tpool->n_blocks, sp->tpool->block_size, (double)kv_pool_bytes(sp->tpool) / 1e6);
    if ((dmod = spec_pair_draft_model(sp))) { /* the draft's memory share, from its model and pool */
        const drafter *d = sp->drafters[SPEC_DRAFTER_MODEL];
        double dkv = dpool ? (double)kv_pool_bytes(dpool) : 0.0;
        double tmem = (double)sp->target->weight_bytes + (double)kv_pool_bytes(sp->tpool);
        double dmem = (double)dmod->weight_bytes + dkv;
        sp->draft_mem_pct = 100.0 * dmem / tmem;
        if (log) {
            fprintf(log, "specd: %s %s: %.1f MB weights + %.1f MB KV = %.1f%% of the target's %.1f MB%s\n",
                    d->i->name, d->source ? d->source : "(unnamed)", dmod->weight_bytes / 1e6, dkv / 1e6,
                    sp->draft_mem_pct, tmem / 1e6,
                    sp->draft_mem_pct > prm.draft_mem_warn_pct ? " — WARNING: above the limit; speculation pays "
                                                                 "best with a much smaller draft" : "");
        }
    }
    engine_status_set(st, ENGINE_OK);
    return 0;
}

/* The draft figures of the cost model come from the drafter in slot `slot`. */
/* Keeps the published cost model's draft figures those of the draft model. */
void spec_pair_sync_draft_costs(spec_pair *sp) {
    drafter *d = sp->drafters[SPEC_DRAFTER_MODEL];
    if (d) d->i->cost(d, &sp->costs.draft_ms, &sp->costs.draft_ms_per_row);
}

void spec_pair_calibrate(spec_pair *sp) {
    /* 1 and 5 positions: the verify shape of one sequence; 5 and 21: the slope
     * once many rows make the pass compute-bound (batched verification); 1 and
     * 5 positions at a long context: what attention adds per key and row */
    int far = sp->max_ctx - 16 < 520 ? sp->max_ctx - 16 : 520;
    int n[5] = {1, 5, GAMMA_CAL_ROWS, 1, 5}, past[5] = {GAMMA_CAL_CTX, GAMMA_CAL_CTX, GAMMA_CAL_CTX, far, far};
    double t[5];
    model_time_calls(sp->target, sp->tpool, GAMMA_CAL_CTX, n, past, far > 64 ? 5 : 3, t, sp->logits);
    if (far <= 64) t[3] = t[4] = 0;
    gamma_costs_calibrate(&sp->costs, t[0], t[1], t[2], far, t[3], t[4]);
    for (int i = 0; i < SPEC_DRAFTERS; i++)
        if (sp->drafters[i] && sp->drafters[i]->i->calibrate) sp->drafters[i]->i->calibrate(sp->drafters[i]);
    spec_pair_sync_draft_costs(sp);
}
