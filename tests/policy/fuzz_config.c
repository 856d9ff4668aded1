/* fuzz_config.c — libFuzzer target for the config loader: YAML bytes →
 * validated snapshot or a one-line "NAME:..." error; a loaded snapshot is read
 * back through rule lookup and the restart diff. Built by run_fuzz.sh. */
#include "policy/config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const vars[] = {"SPECD_FUZZ_TOKEN=t", NULL};
    const pol_env env = {vars};
    char err[512];
    err[0] = 0;
    pol_config *c = pol_config_load_mem((const char *)data, size, "fuzz.yaml", &env, err, sizeof(err));
    if (!c) {
        /* every rejection explains itself, on one line, naming the input */
        if (strncmp(err, "fuzz.yaml", 9) != 0 || strchr(err, '\n')) {
            fprintf(stderr, "bad error message: '%s'\n", err);
            abort();
        }
        return 0;
    }
    const pol_rule *r = pol_config_rule(c, "m", "code");
    if (r->gamma_min < 1 || r->gamma_min > r->gamma_max || r->gamma_max > POL_GAMMA_LIMIT ||
        r->gamma_default < r->gamma_min || r->gamma_default > r->gamma_max)
        abort();
    for (int i = 0; i < c->n_rules; i++)
        if (c->rules[i].gamma_min > c->rules[i].gamma_max) abort();
    static pol_config *d;
    if (!d) d = pol_config_default();
    char note[256];
    pol_restart_keys(d, c, note, sizeof(note));
    pol_config_free(c);
    return 0;
}
