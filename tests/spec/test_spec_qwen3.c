/* test_spec_qwen3.c — Qwen3 (per-head q/k RMSNorm) as target and draft: greedy
 * speculative decoding equals plain greedy decoding token for token (20 corpus
 * prompts x gamma 1..6 x adaptive off/on) for a qwen3 target drafted by a
 * smaller qwen3 model, by its own Q8_0 copy (high acceptance with real
 * rejections) and by itself; the load keeps the q/k norms and NeoX RoPE. */
#include "tests/spec/spec_util.h"

#define N_PROMPTS 20
#define N_GEN 32

static su_prompt prompts[N_PROMPTS];
static int n_prompts;

static void mk_qwen3(const char *out, const char *tok_src, uint64_t seed, int layers, int dim, int heads, int kv,
                     int head_dim, int ff) {
    mkmodel_opts o;
    mkmodel_opts_init(&o);
    o.arch = "qwen3";
    o.n_layers = layers, o.dim = dim, o.n_heads = heads, o.n_kv_heads = kv, o.head_dim = head_dim, o.ff = ff;
    o.ctx = 256, o.seed = seed, o.tokenizer_path = tok_src, o.name = "qwen3-test";
    char err[512];
    if (mkmodel_random(out, &o, NULL, err, sizeof(err)) != 0) {
        fprintf(stderr, "mkmodel_random %s: %s\n", out, err);
        exit(1);
    }
}

static void greedy_pair(const char *label, spec_pair *sp, double min_alpha, bool want_rejections) {
    CHECKF(!strcmp(sp->target->arch, "qwen3") && sp->target->hp.qk_norm && sp->target->hp.rope_neox &&
           sp->target->layers[0].q_norm && sp->target->layers[0].k_norm && !sp->target->layers[0].bq,
           "%s: target loaded as qwen3 (q/k norms, NeoX RoPE, no biases)", label);
    spec_pair_calibrate(sp);
    int32_t ref[N_GEN], out[N_GEN];
    int runs = 0, mism = 0;
    spec_stats tot = {0};
    for (int i = 0; i < n_prompts; i++) {
        int nr = su_plain_greedy(sp, prompts[i].ids, prompts[i].n, N_GEN, ref);
        for (int gamma = 1; gamma <= 6; gamma++)
            for (int ad = 0; ad < 2; ad++) {
                spec_seq_params prm = su_params(0.0f, 1, gamma, ad);
                spec_seq *s = NULL;
                int n = su_generate(sp, prompts[i].ids, prompts[i].n, N_GEN, &prm, out, NULL, NULL, &s);
                runs++;
                bool same = n == nr && !memcmp(out, ref, sizeof(int32_t) * (size_t)nr);
                if (!same && mism++ < 5) {
                    int at = 0;
                    while (at < n && at < nr && out[at] == ref[at]) at++;
                    fprintf(stderr, "%s: prompt %d gamma %d %s: differs from plain greedy at token %d\n", label, i,
                            gamma, ad ? "adaptive" : "fixed", at);
                }
                CHECK(same);
                if (s) {
                    CHECK(s->st.kv_resets == 0 && s->st.draft_failures == 0);
                    spec_stats_add(&tot, &s->st);
                }
                spec_seq_free(s);
            }
    }
    fprintf(stderr, "%-30s %d runs, %d differ from plain greedy; %llu verify steps, alpha %.3f, %llu rejections\n",
            label, runs, mism, (unsigned long long)tot.verify_steps, spec_stats_alpha(&tot),
            (unsigned long long)tot.rejections);
    CHECKF(tot.verify_steps > 0, "%s: speculation never ran", label);
    CHECKF(spec_stats_alpha(&tot) >= min_alpha, "%s: acceptance %.3f, expected at least %.2f", label,
           spec_stats_alpha(&tot), min_alpha);
    if (want_rejections) CHECKF(tot.rejections > 0, "%s: no rejection exercised", label);
}

int main(void) {
    char tok[512], tq[512], dq[512], tq8[512];
    tu_model(tok, sizeof(tok), "stories260K.gguf");
    backend *be = backend_cpu_create(1);
    CHECK(be != NULL);
    su_tmp_path(tq, sizeof(tq), "qwen3-target.gguf");
    su_tmp_path(dq, sizeof(dq), "qwen3-draft.gguf");
    su_tmp_path(tq8, sizeof(tq8), "qwen3-target-q8.gguf");
    /* heads * head dim (4 * 32 = 128) != dim 96, as in real Qwen3 */
    mk_qwen3(tq, tok, 31, 3, 96, 4, 2, 32, 256);
    mk_qwen3(dq, tq, 32, 2, 64, 4, 2, 16, 128);
    char err[512];
    if (mkmodel_quantize(tq8, tq, GGML_TYPE_Q8_0, NULL, err, sizeof(err)) != 0) {
        fprintf(stderr, "mkmodel_quantize: %s\n", err);
        return 1;
    }

    spec_pair *sp = su_load(tq, dq, be, 256);
    model *dm = spec_pair_draft_model(sp);
    CHECKF(dm && !strcmp(dm->arch, "qwen3") && dm->layers[0].q_norm, "draft loaded as qwen3");
    n_prompts = su_prompts(sp->tok, prompts, N_PROMPTS);
    CHECKF(n_prompts == N_PROMPTS, "only %d prompts from the corpus", n_prompts);
    greedy_pair("qwen3 target + qwen3 draft", sp, 0.0, true);
    spec_pair_free(sp);
    sp = su_load(tq, tq8, be, 256);
    greedy_pair("qwen3 target + its Q8_0 copy", sp, 0.6, true);
    spec_pair_free(sp);
    sp = su_load(tq, tq, be, 256);
    greedy_pair("qwen3 target as its draft", sp, 0.99, false);
    spec_pair_free(sp);

    const char *names[] = {"qwen3-target.gguf", "qwen3-draft.gguf", "qwen3-target-q8.gguf"};
    su_tmp_cleanup(names, 3);
    backend_destroy(be);
    TEST_DONE();
}
