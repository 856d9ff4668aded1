/* bench_tree.c — tree speculation benchmark (issue 17; a printed figure, not a
 * timed test): the target's verify cost curve t(rows) relative to a 1-row
 * step, then greedy and T = 0.8 generation of N tokens per prompt with plain
 * decoding, chains (γ 2..8, fixed) and draft-model trees of 4/8/16 nodes, in
 * alternated rounds, reporting tokens per target pass, tokens per second
 * and the speedup over plain.
 *
 *   bench_tree TARGET.gguf DRAFT.gguf [threads=2] [tokens=200] [rounds=5] [prompts=3] */
#include "engine/spec/proposers/draft_tree.h"
#include "engine/spec/tree_ctl.h"
#include "tests/sampler/chi2.h"
#include "tests/spec/spec_util.h"

#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

typedef struct {
    const char *name;
    int gamma;                  /* chain γ (spec_seq_step); 0 with budget 0: plain */
    tree_shape sh;              /* budget > 0: a draft tree */
} cfg;

static const cfg cfgs[] = {
    {"plain", 0, {0, 0, 0}},
    {"chain g2", 2, {0, 0, 0}},   {"chain g4", 4, {0, 0, 0}},  {"chain g6", 6, {0, 0, 0}},
    {"chain g8", 8, {0, 0, 0}},   {"tree 4 (2x3)", 0, {4, 3, 2}}, {"tree 8 (2x4)", 0, {8, 4, 2}},
    {"tree 16 (3x5)", 0, {16, 5, 3}},
    {"auto (tree_ctl)", -1, {0, 0, 0}},
};
#define N_CFG (int)(sizeof(cfgs) / sizeof(cfgs[0]))

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_tree TARGET.gguf DRAFT.gguf [threads] [tokens] [rounds] [prompts]\n");
        return 2;
    }
    int threads = argc > 3 ? atoi(argv[3]) : 2, n_gen = argc > 4 ? atoi(argv[4]) : 200;
    int rounds = argc > 5 ? atoi(argv[5]) : 5, n_pr = argc > 6 ? atoi(argv[6]) : 3;
    backend *be = backend_cpu_create(threads);
    spec_pair *sp = su_load(argv[1], argv[2], be, 512);
    spec_pair_calibrate(sp);
    su_prompt prompts[8];
    if (n_pr > 8) n_pr = 8;
    n_pr = su_prompts(sp->tok, prompts, n_pr);

    /* t(rows): fastest of several calls, relative to 1 row */
    int rows[8] = {1, 2, 5, 9, 12, 17, 24, 32}, past[8];
    double t[8];
    for (int j = 0; j < 8; j++) past[j] = 64;
    model_time_calls(sp->target, sp->tpool, 64, rows, past, 8, t, sp->logits);
    printf("verify cost t(rows)/t(1) at 64 cached positions, %d threads:", threads);
    for (int j = 0; j < 8; j++) printf(" %d:%.2f", rows[j], t[j] / t[0]);
    printf("  (t(1) = %.2f ms)\n", t[0]);

    double curve[TREE_CTL_ROWS + 1] = {0};
    for (int j = 0; j < 8; j++) curve[rows[j]] = t[j];

    spec_tree_ctx *tc = spec_tree_create(sp);
    draft_tree *dt = draft_tree_create(sp);
    for (int temp = 0; temp < 2; temp++) {
        float T = temp ? 0.8f : 0.0f;
        double ms[N_CFG] = {0}, toks[N_CFG] = {0}, passes[N_CFG] = {0};
        tree_ctl ctl; /* one per run: what each shape delivers is learned across prompts */
        tree_ctl_init(&ctl, curve, 16, 8, 4);
        long picks[TREE_CTL_MENU] = {0};
        for (int r = 0; r < rounds; r++)
            for (int c0 = 0; c0 < N_CFG; c0++) {
                int c = (c0 + r) % N_CFG; /* alternate the order each round */
                for (int p = 0; p < n_pr; p++) {
                    spec_seq_params prm = su_params(T, 7 + (uint64_t)r, cfgs[c].gamma > 0 ? cfgs[c].gamma : 0, false);
                    char err[512];
                    spec_seq *s = spec_seq_start(sp, prompts[p].ids, prompts[p].n, &prm, err, sizeof(err));
                    if (!s) {
                        fprintf(stderr, "start: %s\n", err);
                        return 1;
                    }
                    int np = prompts[p].n;
                    double t0 = now_ms();
                    long np_ = 0;
                    while (s->n_tokens - np < n_gen && !tok_is_eog(sp->tok, s->tokens[s->n_tokens - 1])) {
                        int mx = n_gen - (s->n_tokens - np);
                        spec_step_info info;
                        int rc;
                        if (cfgs[c].gamma < 0) { /* auto: the controller's shape, plain when it says so */
                            int e = tree_ctl_pick(&ctl, 1);
                            double a = now_ms();
                            rc = e ? draft_tree_step(dt, tc, &s, 1, &ctl.menu[e], NULL, &mx, &info, err, sizeof(err))
                                   : spec_seq_step(s, mx, &info, err, sizeof(err)); /* the chain path */
                            if (!rc)
                                tree_ctl_observe(&ctl, e, info.n_new, info.gamma + 1, 1, info.gamma + 1, now_ms() - a);
                            picks[e]++;
                        } else {
                            rc = cfgs[c].sh.budget ? draft_tree_step(dt, tc, &s, 1, &cfgs[c].sh, NULL, &mx, &info, err,
                                                                     sizeof(err))
                                                   : spec_seq_step(s, mx, &info, err, sizeof(err));
                        }
                        if (rc) break;
                        np_++;
                    }
                    ms[c] += now_ms() - t0;
                    toks[c] += s->n_tokens - np - 1; /* the prefill's token is not a step's */
                    passes[c] += (double)np_;
                    spec_seq_free(s);
                }
            }
        printf("\nT=%.1f, %d tokens x %d prompts x %d rounds:\n", T, n_gen, n_pr, rounds);
        printf("  %-16s %10s %10s %8s\n", "config", "tok/pass", "tok/s", "speedup");
        double plain = toks[0] / ms[0];
        for (int c = 0; c < N_CFG; c++)
            printf("  %-16s %10.2f %10.1f %8.2f\n", cfgs[c].name, toks[c] / passes[c], 1e3 * toks[c] / ms[c],
                   (toks[c] / ms[c]) / plain);
        printf("  auto's picks:");
        for (int e = 0; e < ctl.n; e++)
            printf(" %s%d/%d/%d: %ld (%.2f tok/pass)", e ? "" : "chain path ", ctl.menu[e].budget, ctl.menu[e].depth,
                   ctl.menu[e].topk, picks[e], ctl.tpp[e]);
        printf("\n");
    }
    draft_tree_destroy(dt);
    spec_tree_destroy(tc);
    spec_pair_free(sp);
    backend_destroy(be);
    return 0;
}
