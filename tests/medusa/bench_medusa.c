/* bench_medusa.c — Medusa tree speculation against plain decoding on a target
 * with a heads file (a benchmark, not a test): over alternated rounds at
 * T = 0 and T = 0.8, tokens per target pass and decode tokens/s of plain
 * steps (empty trees through the same spec_tree_step) and of Medusa trees.
 * usage: bench_medusa TARGET HEADS [threads=1 tokens=64 prompts=10 rounds=5 budget=16 depth=4 topk=4] */
#include "engine/spec/proposers/draft_medusa.h"
#include "tests/spec/spec_util.h"

#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static su_prompt prompts[64];

/* generates n_gen tokens for each prompt; returns seconds, adds passes and tokens */
static double run(spec_pair *sp, draft_medusa *dm, spec_tree_ctx *tc, const tree_shape *sh, bool medusa, float temp,
                  int np, int n_gen, uint64_t seed, double *passes, double *tokens) {
    double t = 0;
    char err[512];
    for (int p = 0; p < np; p++) {
        spec_seq_params prm = su_params(temp, seed + (uint64_t)p, 0, false);
        spec_seq *s = spec_seq_start(sp, prompts[p].ids, prompts[p].n, &prm, err, sizeof(err));
        medusa_seq *ms = medusa_seq_create(dm);
        if (!s || !ms) {
            fprintf(stderr, "%s\n", err);
            exit(1);
        }
        medusa_seq_prefilled(dm, ms, s);
        double t0 = now_s();
        int start = s->n_tokens;
        while (s->n_tokens - start < n_gen && !tok_is_eog(sp->tok, s->tokens[s->n_tokens - 1])) {
            int mx = n_gen - (s->n_tokens - start);
            spec_step_info info;
            int rc;
            if (medusa) {
                rc = draft_medusa_step(dm, tc, &s, &ms, 1, sh, &mx, &info, err, sizeof(err));
            } else {
                spec_tree empty = {0};
                rc = spec_tree_step(tc, &s, 1, &empty, &mx, &info, err, sizeof(err));
            }
            if (rc) {
                fprintf(stderr, "step: %s\n", err);
                exit(1);
            }
            *passes += 1;
            *tokens += info.n_new;
        }
        t += now_s() - t0;
        spec_seq_free(s);
        medusa_seq_destroy(ms);
    }
    return t;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_medusa TARGET HEADS [threads tokens prompts rounds budget depth topk]\n");
        return 2;
    }
    int threads = argc > 3 ? atoi(argv[3]) : 1, n_gen = argc > 4 ? atoi(argv[4]) : 64;
    int np = argc > 5 ? atoi(argv[5]) : 10, rounds = argc > 6 ? atoi(argv[6]) : 5;
    tree_shape sh = {argc > 7 ? atoi(argv[7]) : 16, argc > 8 ? atoi(argv[8]) : 4, argc > 9 ? atoi(argv[9]) : 4};
    backend *be = backend_cpu_create(threads);
    spec_pair *sp = su_load(argv[1], NULL, be, 512);
    char err[1024];
    medusa_heads *mh = medusa_heads_load(argv[2], sp->target_id.id, sp->target->hp.dim, sp->n_vocab, NULL, err, sizeof(err));
    if (!mh) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    draft_medusa *dm = draft_medusa_create(sp, mh, NULL, err, sizeof(err));
    spec_tree_ctx *tc = spec_tree_create(sp);
    if (!dm || !tc) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    np = su_prompts(sp->tok, prompts, np < 64 ? np : 64);
    printf("target %s (%.1f MiB), heads %d x %d (%.1f KiB, %.2f%% of the target), shape budget %d depth %d topk %d\n",
           sp->target->name, sp->target->weight_bytes / 1048576.0, mh->n_heads, mh->n_layers,
           medusa_heads_bytes(mh) / 1024.0, 100.0 * medusa_heads_bytes(mh) / sp->target->weight_bytes, sh.budget,
           sh.depth, sh.topk);
    printf("head top-1 (held-out):");
    for (int k = 0; k < mh->n_heads; k++) printf(" %.3f", mh->acc[k][0]);
    printf("\n");
    float temps[2] = {0.0f, 0.8f};
    for (int ti = 0; ti < 2; ti++) {
        double tm[2] = {0}, ps[2] = {0}, tk[2] = {0};
        for (int r = 0; r < rounds; r++)
            for (int mode = 0; mode < 2; mode++) {
                int m = r % 2 ? 1 - mode : mode; /* alternate which goes first */
                tm[m] += run(sp, dm, tc, &sh, m == 1, temps[ti], np, n_gen, 1000 + (uint64_t)r, &ps[m], &tk[m]);
            }
        printf("T=%.1f plain:  %.3f tokens/pass, %.1f tokens/s\n", temps[ti], tk[0] / ps[0], tk[0] / tm[0]);
        printf("T=%.1f medusa: %.3f tokens/pass, %.1f tokens/s, speedup %.2fx\n", temps[ti], tk[1] / ps[1],
               tk[1] / tm[1], (tk[1] / tm[1]) / (tk[0] / tm[0]));
    }
    draft_medusa_destroy(dm);
    spec_tree_destroy(tc);
    medusa_heads_destroy(mh);
    spec_pair_free(sp);
    backend_destroy(be);
    return 0;
}
