/* test_spec_hidden.c — the hidden state every step hands to a proposer that
 * reads the target's features (drafter_i needs_hidden / observe_hidden, what
 * the Medusa heads and a feature-level head use): a recording proposer sits
 * in the heads' slot, and after the prefill and after every chain step —
 * plain, all drafts accepted (the bonus row), drafts rejected (the
 * correction row), stopped short by max_new — what it got is the target's
 * final-normed hidden state at the row that sampled the sequence's last
 * token, i.e. what a fresh prefill of every token but the last computes at
 * its last row, for the sequence's n_tokens. A wrong row (one off either
 * way) fails on the first speculative step. A sequence that cannot use the
 * heads (logprobs) holds no state of the slot and is never observed. And a
 * step on another proposer (spec_seq_note_other_step: Medusa, for the auto
 * method) advances the draft's fallback countdown as a plain step does. */
#include "tests/spec/spec_util.h"

typedef struct {
    float *h, *ref, *logits;
    int at, D, steps, checked, fails, observed;
    double worst;
    spec_pair *sp;
} hid_ctx;

/* The recording proposer: one per test, its state is the context. */
static hid_ctx *rec_ctx;
static void rec_destroy(drafter *d) { free(d); }
static drafter_seq *rec_seq_create(drafter *d, int max_len) {
    (void)d, (void)max_len;
    return (drafter_seq *)rec_ctx;
}
static void rec_seq_destroy(drafter *d, drafter_seq *ds) { (void)d, (void)ds; }
static void rec_commit(drafter *d, drafter_seq *ds, const int32_t *t, int n) { (void)d, (void)ds, (void)t, (void)n; }
static void rec_cost(drafter *d, double *a, double *b) { (void)d, *a = 0, *b = 0; }
static void rec_observe_hidden(drafter *d, drafter_seq *ds, const float *h, int n_tokens) {
    (void)d;
    hid_ctx *c = (hid_ctx *)ds;
    memcpy(c->h, h, sizeof(float) * (size_t)c->D);
    c->at = n_tokens;
    c->observed++;
}
static const drafter_i rec_i = {.version = DRAFTER_INTERFACE_VERSION, .name = "recorder", .needs_hidden = true,
                                .destroy = rec_destroy, .seq_create = rec_seq_create, .seq_destroy = rec_seq_destroy,
                                .commit = rec_commit, .cost = rec_cost, .observe_hidden = rec_observe_hidden};

static void after_step(spec_seq *s, void *vc) {
    hid_ctx *c = vc;
    c->steps++;
    CHECKF(c->at == s->n_tokens, "recorded for %d tokens, the sequence has %d", c->at, s->n_tokens);
    spec_pair *sp = c->sp;
    kv_seq *kv = kv_seq_create(sp->tpool, sp->target->mp.max_ctx + 1);
    CHECK(kv && su_feed(sp->target, sp->tpool, kv, s->tokens, s->n_tokens - 1, c->logits) == 0);
    int row = 0;
    CHECK(model_hidden_rows(sp->target, c->ref, &row, 1) == 0);
    kv_seq_destroy(sp->tpool, kv);
    int same = 0;
    double d = su_rel_diff(c->h, c->ref, c->D, &same);
    c->worst = d > c->worst ? d : c->worst;
    c->checked++;
    if (d > 1e-3) c->fails++;
}

int main(void) {
    char tpath[512], dpath[512];
    tu_model(tpath, sizeof tpath, "stories260K.gguf");
    su_tmp_path(dpath, sizeof dpath, "hidden-draft.gguf");
    su_mkmodel(dpath, tpath, 7, 2, 64, 128, 512); /* random weights: its drafts are mostly rejected */
    backend *be = backend_cpu_create(1);
    su_prompt prompts[4];
    const char *drafts[2] = {tpath, dpath}; /* itself (every draft accepted), random (rejections) */
    for (int d = 0; d < 2; d++) {
        spec_pair *sp = su_load(tpath, drafts[d], be, 256);
        int np = su_prompts(sp->tok, prompts, 4);
        int D = sp->target->hp.dim;
        hid_ctx c = {.h = malloc(sizeof(float) * (size_t)D), .ref = malloc(sizeof(float) * (size_t)D),
                     .logits = malloc(sizeof(float) * (size_t)sp->n_vocab), .at = -1, .D = D, .sp = sp};
        rec_ctx = &c;
        drafter *rec = calloc(1, sizeof(*rec));
        rec->i = &rec_i, rec->n_vocab = sp->n_vocab;
        CHECK(spec_pair_set_drafter(sp, SPEC_DRAFTER_MEDUSA, rec) == NULL);
        for (int pi = 0; pi < np; pi++)
            for (int gamma = 0; gamma <= 4; gamma += 2) {
                spec_seq_params prm = su_params(0.0f, 1, gamma, false);
                /* both hold the heads' slot; a medusa sequence's chain steps are
                 * plain (the heads propose trees only) */
                prm.method = gamma ? SPEC_METHOD_AUTO : SPEC_METHOD_MEDUSA;
                prm.speculate = true;
                char err[512];
                c.at = -1;
                spec_seq *s = spec_seq_start(sp, prompts[pi].ids, prompts[pi].n, &prm, err, sizeof err);
                CHECKF(s, "%s", err);
                if (!s) continue;
                after_step(s, &c); /* the prefill's row */
                /* 21 tokens: the last step is cut short by max_new */
                for (int made = 1; made < 21 && !tok_is_eog(sp->tok, s->tokens[s->n_tokens - 1]);) {
                    spec_step_info info;
                    CHECKF(spec_seq_step(s, 21 - made, &info, err, sizeof err) == 0, "%s", err);
                    after_step(s, &c);
                    made = s->n_tokens - s->n_prompt;
                }
                spec_seq_free(s);
                /* a sequence the heads cannot serve holds no state: never observed */
                prm.logprobs = true;
                int before = c.observed;
                if ((s = spec_seq_start(sp, prompts[pi].ids, prompts[pi].n, &prm, err, sizeof err))) {
                    CHECK(!s->ds[SPEC_DRAFTER_MEDUSA]);
                    spec_step_info info;
                    CHECK(spec_seq_step(s, 4, &info, err, sizeof err) == 0);
                    CHECK(c.observed == before);
                    spec_seq_free(s);
                }
            }
        fprintf(stderr, "draft %s: %d steps checked, worst relative difference %.2e, %d over 1e-3\n",
                d ? "random" : "self", c.checked, c.worst, c.fails);
        CHECK(c.checked >= 3 * 4 && c.fails == 0);
        /* steps on another proposer (Medusa) run the draft's fallback clock
         * like plain steps: after plain_left of them it probes again */
        {
            spec_seq_params prm = su_params(0.0f, 1, 4, true);
            char err[512];
            spec_seq *s = spec_seq_start(sp, prompts[0].ids, prompts[0].n, &prm, err, sizeof err);
            CHECKF(s, "%s", err);
            if (s) {
                budget_chain *ch = &s->bud.chain[SPEC_DRAFTER_MODEL]; /* the draft model's chains */
                ch->plain_left = 5;
                uint64_t p0 = ch->probes;
                for (int k = 0; k < 4; k++) spec_seq_note_other_step(s);
                CHECK(ch->plain_left == 1 && ch->probes == p0);
                spec_seq_note_other_step(s);
                CHECKF(ch->plain_left == 0 && ch->probes == p0 + 1, "plain_left %d, probes %llu", ch->plain_left,
                       (unsigned long long)(ch->probes - p0));
                spec_seq_free(s);
            }
        }
        free(c.h), free(c.ref), free(c.logits);
        spec_pair_free(sp);
    }
    backend_destroy(be);
    unlink(dpath);
    TEST_DONE();
}
