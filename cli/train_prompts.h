/* train_prompts.h — prompts for the trainers that distill from a target
 * (distill-draft, train-eagle), with their shared data options and target
 * loading: the starts of a corpus's lines — or of
 * every sentence in them — each 4 to plen tokens (the length drawn per
 * prompt), then prompts the target writes
 * itself from BOS (a warm-up of plen - 1 tokens its generation writes in
 * the same pass), in a seeded order so a held-out share comes from
 * everywhere.
 *
 * Threading: the caller's. */
#ifndef SPECD_CLI_TRAIN_PROMPTS_H
#define SPECD_CLI_TRAIN_PROMPTS_H

#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int32_t **p;    /* (n) each prompt's tokens, owned */
    int *len;       /* (n) */
    int *warm;      /* (n) tokens the target writes before its continuation proper */
    int n, cap;
} train_prompts;

/* Builds tp (zeroed by the caller) from the corpora (at most max prompts
 * from them; sentences: one at every sentence start, else one per line) and tprompts target-written prompts, shuffled with *rs.
 * Returns 0, or -1 with err (an unreadable corpus, no BOS for target
 * prompts, out of memory). */
int train_prompts_build(train_prompts *tp, const tokenizer *tok, const char *const *corpora, int n_corpora, int max,
                        int plen, bool sentences, int tprompts, uint64_t *rs, char *err, size_t errlen);
void train_prompts_free(train_prompts *tp);

/* The distilling trainers' data options, each command setting its own
 * defaults first: --corpus FILE (up to 16), --prompts N, --target-prompts
 * N, --prompt-len P, --prompt-temp T, --gen-len G, --gen-temp T[,T...],
 * --gen-batch B, --topk K. A list of continuation temperatures (at most 8)
 * takes them in turn, one per chunk of prompts the target continues
 * (train_gen_temp): data for a head that serves greedy and sampled requests. */
typedef struct {
    const char *corpora[16];
    int n_corpora;
    int max_prompts, tprompts, plen, gen, gbatch, topk;
    float gen_temp, prompt_temp;
    float gen_temps[8];         /* --gen-temp's list; n_gen_temps 0: gen_temp alone */
    int n_gen_temps;
} train_data_args;

/* The continuation temperature of the chunk-th chunk of prompts. */
float train_gen_temp(const train_data_args *a, int chunk);

/* argv[*i] when it is one of those options: takes it and its value (*i
 * moves past it) and returns 1; 0 when it is not one of them; -1 (reported
 * as cmd's error) for a 17th corpus. */
int train_data_arg(const char *cmd, int argc, char **argv, int *i, train_data_args *a);

/* The target a distilling trainer continues prompts with: loaded on a new
 * CPU backend of `threads` (*be), sized for da's prompts, continuations and
 * lockstep batch, with its tokenizer (*tok). NULL when either fails to
 * load: reported as cmd's error, nothing left to free. */
model *train_target_load(const char *cmd, const char *path, int threads, const train_data_args *da, backend **be,
                         tokenizer **tok);

#endif
