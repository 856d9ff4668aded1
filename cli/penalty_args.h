/* penalty_args.h — the penalty and logit-bias flags `specd generate` and
 * `specd verify` share: --repeat-penalty R, --presence-penalty P,
 * --frequency-penalty F, --repeat-last-n N, --logit-bias ID=B[,ID=B...]
 * (sampler_config's history-dependent fields). Header-only: two callers. */
#ifndef SPECD_CLI_PENALTY_ARGS_H
#define SPECD_CLI_PENALTY_ARGS_H

#include "cli/util.h"
#include "engine/engine.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PENALTY_ARGS_USAGE \
    "  --repeat-penalty R --presence-penalty P --frequency-penalty F --repeat-last-n N\n" \
    "               penalties over the last N tokens (default 64, -1 all), as the API's fields\n" \
    "  --logit-bias ID=B[,ID=B...]  added to those tokens' logits (B in [-100, 100])\n"

/* Reads one of the flags at argv[*i] into sc (bias: room for SAMPLER_MAX_BIAS
 * entries, sc->logit_bias points there). Returns 1 when it was one (and *i
 * moved past its value), 0 when not, -1 after printing a usage error. */
static inline int penalty_arg(const char *cmd, int argc, char **argv, int *i, sampler_config *sc, sampler_bias *bias) {
    const char *a = argv[*i];
    if (!strcmp(a, "--repeat-penalty")) sc->repeat_penalty = (float)arg_double(argc, argv, i, 0.0001, 100);
    else if (!strcmp(a, "--presence-penalty")) sc->presence_penalty = (float)arg_double(argc, argv, i, -2, 2);
    else if (!strcmp(a, "--frequency-penalty")) sc->frequency_penalty = (float)arg_double(argc, argv, i, -2, 2);
    else if (!strcmp(a, "--repeat-last-n")) sc->penalty_last_n = (int)arg_long(argc, argv, i, -1, 1 << 24);
    else if (!strcmp(a, "--logit-bias")) {
        const char *s = arg_str(argc, argv, i);
        while (*s) {
            char *end;
            long id = strtol(s, &end, 10);
            double b = *end == '=' ? strtod(end + 1, &end) : 1e9;
            if (id < 0 || !(b >= -100 && b <= 100) || (*end && *end != ',') || sc->n_logit_bias >= SAMPLER_MAX_BIAS) {
                fprintf(stderr, "specd %s: --logit-bias takes ID=BIAS[,ID=BIAS...] with BIAS in [-100, 100] "
                                "(at most %d), got '%s'\n", cmd, SAMPLER_MAX_BIAS, argv[*i]);
                return -1;
            }
            bias[sc->n_logit_bias++] = (sampler_bias){(int32_t)id, (float)b};
            s = *end ? end + 1 : end;
        }
        sc->logit_bias = bias;
    } else return 0;
    return 1;
}

#endif
