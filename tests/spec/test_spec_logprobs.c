/* test_spec_logprobs.c — per-token log probabilities (spec.h spec_logprob) on
 * the real pair (stories260K target, llama2xs-281K draft):
 *   - every emitted token's logprob and its top-k alternatives equal the log
 *     softmax of the target's logits at that position, computed here from a
 *     plain forward pass over the same tokens (model_forward alone);
 *   - greedy, the draft changes nothing: the same tokens and logprobs with
 *     speculation off, with the draft model (γ 4) and with n-gram proposals;
 *   - under a grammar (JSON mode) the numbers are the log softmax of the
 *     grammar-masked logits, and every alternative is a token the grammar
 *     allows there. */
#include "engine/grammar/grammar.h"
#include "tests/grammar/grammar_util.h"
#include "tests/spec/spec_util.h"

#define N_PROMPTS 20
#define N_GEN 32
#define TOP 5
#define TOL 2e-3 /* absolute, in nats: logits agree to ~1e-5 relative across batch shapes */

static su_prompt prompts[N_PROMPTS];
static int n_prompts;

typedef struct {
    int n;
    int32_t tok[N_GEN + GAMMA_MAX + 1];
    spec_logprob lp[N_GEN + GAMMA_MAX + 1];
} run;

static uint64_t verify_steps, accepted;

static void gen(spec_pair *sp, const su_prompt *pr, int method, bool spec, grammar_matcher *m, run *out) {
    spec_seq_params p = su_params(0.0f, 7, 4, false);
    p.method = method;
    p.speculate = spec;
    p.logprobs = true;
    p.top_logprobs = TOP;
    p.grammar = m;
    char err[512];
    spec_seq *s = spec_seq_start(sp, pr->ids, pr->n, &p, err, sizeof err);
    CHECKF(s != NULL, "spec_seq_start: %s", err);
    out->n = 0;
    out->tok[out->n] = s->tokens[s->n_tokens - 1];
    out->lp[out->n++] = s->lp[0];
    while (out->n < N_GEN && !tok_is_eog(sp->tok, s->tokens[s->n_tokens - 1])) {
        spec_step_info info;
        if (spec_seq_step(s, N_GEN - out->n, &info, err, sizeof err) != 0) break;
        for (int i = 0; i < info.n_new; i++) {
            out->tok[out->n] = s->tokens[s->n_tokens - info.n_new + i];
            out->lp[out->n++] = s->lp[i];
        }
    }
    verify_steps += s->st.verify_steps, accepted += s->st.accepted;
    spec_seq_free(s);
}

static double worst_ref, worst_spec;
static int top_mismatch, not_allowed, not_argmax;

/* The reference: a fresh cache, the prompt, then one token per call; at each
 * position the log softmax (double) of the logits, masked by the grammar state
 * of the tokens before it when m is set. */
static void check_ref(spec_pair *sp, const su_prompt *pr, grammar_matcher *m, const run *r) {
    int V = sp->n_vocab;
    float *logits = malloc(sizeof(float) * (size_t)V);
    double *ls = malloc(sizeof(double) * (size_t)V);
    kv_seq *kv = kv_seq_create(sp->tpool, sp->target->mp.max_ctx + 1);
    CHECK(logits && ls && kv && su_feed(sp->target, sp->tpool, kv, pr->ids, pr->n, logits) == 0);
    int32_t st = m ? grammar_start(m) : 0;
    for (int i = 0; i < r->n; i++) {
        if (m) grammar_mask_logits(m, st, -1, logits);
        double mx = -INFINITY, z = 0;
        for (int v = 0; v < V; v++) mx = logits[v] > mx ? logits[v] : mx;
        for (int v = 0; v < V; v++) z += exp((double)logits[v] - mx);
        for (int v = 0; v < V; v++) ls[v] = (double)logits[v] - mx - log(z);
        const spec_logprob *l = &r->lp[i];
        double d = fabs(l->logprob - ls[r->tok[i]]);
        if (d > worst_ref) worst_ref = d;
        int allowed = 0;
        for (int v = 0; v < V; v++) allowed += logits[v] != -INFINITY;
        CHECKF(l->n_top == (allowed < TOP ? allowed : TOP), "%d alternatives, %d tokens allowed", l->n_top, allowed);
        not_argmax += l->top_id[0] != r->tok[i] && fabs(ls[l->top_id[0]] - ls[r->tok[i]]) > TOL;
        for (int k = 0; k < l->n_top; k++) {
            int32_t id = l->top_id[k];
            d = fabs(l->top_logprob[k] - ls[id]);
            if (d > worst_ref) worst_ref = d;
            if (k > 0) CHECK(l->top_logprob[k] <= l->top_logprob[k - 1]);
            if (m) not_allowed += !grammar_allows(m, st, -1, id);
            /* nothing outside the list is more probable than its last entry */
            if (k == l->n_top - 1)
                for (int v = 0; v < V; v++) {
                    bool in = false;
                    for (int j = 0; j < l->n_top; j++) in |= l->top_id[j] == v;
                    if (!in && ls[v] > ls[id] + TOL) {
                        top_mismatch++;
                        break;
                    }
                }
        }
        if (m) st = grammar_advance_token(m, st, r->tok[i]);
        if (i + 1 == r->n) break;
        char err[256];
        model_seq ms = {.kv = kv, .n = 1, .tokens = &r->tok[i]};
        CHECKF(model_forward(sp->target, sp->tpool, &ms, 1, logits, err, sizeof err) == 0, "forward: %s", err);
    }
    kv_seq_destroy(sp->tpool, kv);
    free(logits), free(ls);
}

static void compare(const run *a, const run *b, int *diff_tokens) {
    if (a->n != b->n || memcmp(a->tok, b->tok, sizeof(int32_t) * (size_t)a->n)) {
        (*diff_tokens)++;
        return;
    }
    for (int i = 0; i < a->n; i++) {
        double d = fabs(a->lp[i].logprob - b->lp[i].logprob);
        if (d > worst_spec) worst_spec = d;
        for (int k = 0; k < a->lp[i].n_top && k < b->lp[i].n_top; k++) {
            d = fabs(a->lp[i].top_logprob[k] - b->lp[i].top_logprob[k]);
            if (d > worst_spec) worst_spec = d;
        }
    }
}

static void suite(spec_pair *sp, grammar_matcher *m, const char *label) {
    worst_ref = worst_spec = 0;
    top_mismatch = not_allowed = not_argmax = 0;
    int diff_tokens = 0, tokens = 0;
    verify_steps = accepted = 0;
    static run plain, draft, ngram;
    for (int i = 0; i < n_prompts; i++) {
        gen(sp, &prompts[i], SPEC_METHOD_DRAFT, false, m, &plain);
        gen(sp, &prompts[i], SPEC_METHOD_DRAFT, true, m, &draft);
        gen(sp, &prompts[i], SPEC_METHOD_NGRAM, true, m, &ngram);
        check_ref(sp, &prompts[i], m, &plain);
        check_ref(sp, &prompts[i], m, &draft);
        compare(&plain, &draft, &diff_tokens);
        compare(&plain, &ngram, &diff_tokens);
        tokens += plain.n;
    }
    fprintf(stderr, "%-6s %d prompts, %d tokens: |logprob - reference| <= %.2g, |speculative - plain| <= %.2g, "
                    "%d runs with other tokens; %llu verify steps accepted %llu drafts\n", label, n_prompts, tokens, worst_ref,
            worst_spec, diff_tokens, (unsigned long long)verify_steps, (unsigned long long)accepted);
    CHECK(verify_steps > 0 && accepted > 0);
    CHECKF(worst_ref < TOL, "%s: logprobs differ from the plain forward's log softmax by %g", label, worst_ref);
    CHECKF(worst_spec < TOL, "%s: speculation changed logprobs by %g", label, worst_spec);
    CHECKF(diff_tokens == 0, "%s: %d speculative runs emitted other tokens", label, diff_tokens);
    CHECKF(top_mismatch == 0, "%s: %d top lists miss a more probable token", label, top_mismatch);
    CHECKF(not_argmax == 0, "%s: %d greedy tokens are not the top alternative", label, not_argmax);
    CHECKF(not_allowed == 0, "%s: %d alternatives the grammar refuses", label, not_allowed);
}

int main(void) {
    char tpath[512], dpath[512];
    tu_model(tpath, sizeof(tpath), "stories260K.gguf");
    tu_model(dpath, sizeof(dpath), "llama2xs-281K.gguf");
    backend *be = backend_cpu_create(1);
    spec_pair *sp = su_load(tpath, dpath, be, 256);
    n_prompts = su_prompts(sp->tok, prompts, N_PROMPTS);
    CHECK(n_prompts > 0);
    suite(sp, NULL, "free");
    grammar_vocab *v = grammar_vocab_create(sp->tok);
    char err[256];
    grammar *gj = grammar_parse(grammar_json_gbnf(), strlen(grammar_json_gbnf()), err, sizeof err);
    CHECK(v && gj);
    grammar_matcher *mj = grammar_matcher_create(gj, v);
    suite(sp, mj, "json");
    grammar_matcher_destroy(mj);
    grammar_destroy(gj);
    grammar_vocab_destroy(v);
    spec_pair_free(sp);
    backend_destroy(be);
    TEST_DONE();
}
