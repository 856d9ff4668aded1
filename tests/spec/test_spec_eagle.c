/* test_spec_eagle.c — an EAGLE-3 head as a proposer (draft_eagle.h) in the
 * pair's eagle slot, on stories260K with a random head (mkmodel --arch
 * eagle3; its drafts are mostly rejected, which exercises every rollback):
 *   - the features: before every step, what the head drafts from is
 *     recomputed from nothing — a fresh target prefill of the accepted
 *     tokens, its taps at the head's three layers, a fresh head forward of the
 *     rows (token i+1, features of i) — and the step's first draft
 *     distribution q must equal it (T = 1, alone and in a batch of 3). A
 *     proposer that paired a token with the wrong position's features, kept
 *     a draft row's features, or lost a committed one fails here;
 *   - lossless: greedy output equals plain decoding on 12 prompts at γ = 1,
 *     3 and 6, alone and batched, with the head's verify steps counted
 *     under its own name and no cache reset;
 *   - a head of another hidden size, or a llama model given as a head, is
 *     refused with its reason. */
#include "engine/spec/proposers/draft_eagle.h"
#include "tests/spec/spec_util.h"

#include <math.h>

#define N_GEN 24

static void mkhead(const char *out, int dim, uint64_t seed) {
    mkmodel_opts o;
    mkmodel_opts_init(&o);
    o.arch = "eagle3", o.dim = dim, o.n_heads = 8, o.n_kv_heads = 4, o.ff = 172, o.vocab = 512, o.seed = seed;
    char err[512];
    if (mkmodel_random(out, &o, NULL, err, sizeof(err)) != 0) {
        fprintf(stderr, "mkmodel eagle3: %s\n", err);
        exit(1);
    }
}

/* An independent recomputation of the head's first draft distribution for
 * the accepted tokens t[0, n): its own target and head instances. */
typedef struct {
    model *tgt, *head;
    kv_pool *tp, *hp;
    int layers[3], D, V;
    float *feat, *tap, *lg, *q;
    sampler *smp;
} recomp;

static void recomp_q0(recomp *r, const int32_t *t, int n, const sampler_config *sc) {
    char err[512];
    int D = r->D, rows[256];
    for (int i = 0; i < 256; i++) rows[i] = i;
    kv_seq *kv = kv_seq_create(r->tp, 512), *hk = kv_seq_create(r->hp, 512);
    model_seq ms = {.kv = kv, .n = n - 1, .tokens = t};
    CHECKF(model_forward(r->tgt, r->tp, &ms, 1, r->lg, err, sizeof err) == 0, "target: %s", err);
    for (int l = 0; l < 3; l++) {
        CHECK(model_tap_rows(r->tgt, l, r->tap, rows, n - 1) == 0);
        for (int i = 0; i < n - 1; i++) memcpy(r->feat + ((size_t)i * 3 + l) * D, r->tap + (size_t)i * D, sizeof(float) * D);
    }
    model_seq hs = {.kv = hk, .n = n - 1, .tokens = t + 1, .feat = r->feat, .feat_fc = true};
    CHECKF(model_forward(r->head, r->hp, &hs, 1, r->lg, err, sizeof err) == 0, "head: %s", err);
    sampler_probs(r->smp, sc, r->lg, r->q); /* the random head's vocabulary is the target's (no d2t) */
    kv_seq_destroy(r->tp, kv), kv_seq_destroy(r->hp, hk);
}

int main(void) {
    char tpath[512], hpath[512], bad[512], err[1024];
    tu_model(tpath, sizeof tpath, "stories260K.gguf");
    su_tmp_path(hpath, sizeof hpath, "eagle-head.gguf");
    su_tmp_path(bad, sizeof bad, "eagle-head32.gguf");
    mkhead(hpath, 64, 3);
    mkhead(bad, 32, 3);
    backend *be = backend_cpu_create(1);
    spec_pair *sp = su_load(tpath, NULL, be, 256);
    engine_status st;

    /* refusals */
    CHECK(!draft_eagle_load(sp, bad, 0, &st, err, sizeof err) && st == ENGINE_ERR_INVALID && strstr(err, "hidden size"));
    CHECK(!draft_eagle_load(sp, tpath, 0, &st, err, sizeof err) && strstr(err, "not an eagle3 head"));
    drafter *d = draft_eagle_load(sp, hpath, 0, &st, err, sizeof err);
    CHECKF(d, "load: %s", err);
    if (!d) TEST_DONE();
    CHECK(spec_pair_set_drafter(sp, SPEC_DRAFTER_EAGLE, d) == NULL);

    su_prompt prompts[12];
    int np = su_prompts(sp->tok, prompts, 12);

    /* the features, recomputed from nothing before every step */
    recomp rc = {.D = sp->target->hp.dim, .V = sp->n_vocab};
    CHECK(draft_eagle_layers(d, rc.layers) == 3);
    rc.tgt = model_load(tpath, be, NULL, NULL, err, sizeof err);
    rc.head = model_load(hpath, be, NULL, NULL, err, sizeof err);
    CHECK(rc.tgt && rc.head && model_set_taps(rc.tgt, rc.layers, 3) == 0);
    rc.tp = model_kv_pool(rc.tgt, 16, 64, NULL, err, sizeof err);
    rc.hp = model_kv_pool(rc.head, 16, 64, NULL, err, sizeof err);
    rc.feat = malloc(sizeof(float) * 256 * 3 * rc.D), rc.tap = malloc(sizeof(float) * 256 * rc.D);
    rc.lg = malloc(sizeof(float) * 256 * rc.V), rc.q = malloc(sizeof(float) * rc.V);
    rc.smp = sampler_create(rc.V);
    int compared = 0, q_bad = 0, accepted = 0;
    double worst = 0;
    for (int B = 1; B <= 3; B += 2)
        for (int base = 0; base + B <= np && base < 6; base += B) {
            spec_seq *S[3];
            float *q0[3];
            for (int j = 0; j < B; j++) {
                spec_seq_params prm = su_params(1.0f, 7 + base + j, 3, false);
                prm.method = SPEC_METHOD_EAGLE;
                S[j] = spec_seq_start(sp, prompts[base + j].ids, prompts[base + j].n, &prm, err, sizeof err);
                CHECKF(S[j], "start: %s", err);
                q0[j] = malloc(sizeof(float) * rc.V);
            }
            for (int step = 0; step < 10; step++) {
                for (int j = 0; j < B; j++) {
                    recomp_q0(&rc, S[j]->tokens, S[j]->n_tokens, &S[j]->prm.sc);
                    memcpy(q0[j], rc.q, sizeof(float) * rc.V);
                }
                int mx[3] = {4, 4, 4};
                spec_step_info info[3];
                CHECKF(spec_step_batch(sp, S, B, mx, info, err, sizeof err) == 0, "step: %s", err);
                for (int j = 0; j < B; j++) {
                    if (info[j].method != SPEC_DRAFTER_EAGLE || info[j].gamma == 0) continue;
                    double e = 0;
                    for (int v = 0; v < rc.V; v++) e = fmax(e, fabs((double)S[j]->q[v] - q0[j][v]));
                    worst = fmax(worst, e);
                    q_bad += e > 1e-5;
                    compared++;
                    accepted += info[j].accepted;
                }
            }
            for (int j = 0; j < B; j++) {
                CHECK(S[j]->st.kv_resets == 0);
                spec_seq_free(S[j]);
                free(q0[j]);
            }
        }
    CHECKF(compared >= 30 && q_bad == 0, "first draft distribution vs a recomputation from nothing: %d of %d differ "
           "(worst %.2e)", q_bad, compared, worst);
    fprintf(stderr, "features: %d steps' first drafts equal a recomputation from nothing (worst %.2e); %d drafts "
                    "accepted\n", compared, worst, accepted);

    /* lossless: greedy = plain */
    int mism = 0, runs = 0;
    uint64_t steps = 0;
    for (int g = 1; g <= 6; g = g == 1 ? 3 : 6 + (g == 6)) {
        for (int B = 1; B <= 4; B += 3)
            for (int base = 0; base + B <= np; base += B) {
                spec_seq *S[4];
                int32_t ref[4][N_GEN + 8];
                int nr[4];
                for (int j = 0; j < B; j++) {
                    nr[j] = su_plain_greedy(sp, prompts[base + j].ids, prompts[base + j].n, N_GEN, ref[j]);
                    spec_seq_params prm = su_params(0.0f, 1, g, false);
                    prm.method = SPEC_METHOD_EAGLE;
                    S[j] = spec_seq_start(sp, prompts[base + j].ids, prompts[base + j].n, &prm, err, sizeof err);
                }
                for (;;) {
                    spec_seq *live[4];
                    int mx[4], nl = 0;
                    for (int j = 0; j < B; j++) {
                        int made = S[j]->n_tokens - S[j]->n_prompt;
                        if (made < N_GEN && !tok_is_eog(sp->tok, S[j]->tokens[S[j]->n_tokens - 1]))
                            mx[nl] = N_GEN - made, live[nl++] = S[j];
                    }
                    if (!nl) break;
                    spec_step_info info[4];
                    CHECKF(spec_step_batch(sp, live, nl, mx, info, err, sizeof err) == 0, "step: %s", err);
                }
                for (int j = 0; j < B; j++) {
                    int n = S[j]->n_tokens - S[j]->n_prompt;
                    mism += n != nr[j] || memcmp(S[j]->tokens + S[j]->n_prompt, ref[j], sizeof(int32_t) * (size_t)n);
                    steps += S[j]->st.by[SPEC_PROPOSER_EAGLE].verify_steps;
                    CHECK(S[j]->st.kv_resets == 0);
                    runs++;
                    spec_seq_free(S[j]);
                }
            }
        if (g == 6) break;
    }
    CHECKF(mism == 0, "%d of %d greedy runs differ from plain decoding", mism, runs);
    CHECKF(steps > 0, "the head verified no drafts");
    fprintf(stderr, "greedy: %d runs (gamma 1, 3, 6; alone and by 4) equal plain decoding; %llu eagle verify steps\n",
            runs, (unsigned long long)steps);

    sampler_destroy(rc.smp);
    free(rc.feat), free(rc.tap), free(rc.lg), free(rc.q);
    kv_pool_destroy(rc.tp), kv_pool_destroy(rc.hp);
    model_free(rc.tgt), model_free(rc.head);
    spec_pair_free(sp);
    backend_destroy(be);
    unlink(hpath), unlink(bad);
    TEST_DONE();
}
