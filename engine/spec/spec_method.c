/* spec_method.c — the names of the speculation methods and drafter slots
 * (spec.h), apart from the step itself so that parsers (the gateway's
 * protocol layer and its fuzz targets) need nothing of the engine's models. */
#include "engine/spec/spec.h"

#include <string.h>

static const char *const method_names[] = {"draft", "ngram", "auto", "off", "medusa", "eagle"};

const char *spec_method_name(spec_method m) {
    return (unsigned)m < sizeof(method_names) / sizeof(method_names[0]) ? method_names[m] : "?";
}

int spec_method_parse(const char *s) {
    for (int i = 0; i < (int)(sizeof(method_names) / sizeof(method_names[0])); i++)
        if (s && !strcmp(s, method_names[i])) return i;
    return -1;
}

int spec_verify_parse(const char *s) {
    if (s && !strcmp(s, "rejection")) return 0;
    if (s && !strcmp(s, "coupled")) return 1;
    return -1;
}

const char *spec_drafter_name(int slot) {
    return slot == SPEC_DRAFTER_MODEL    ? "draft"
           : slot == SPEC_DRAFTER_NGRAM  ? "ngram"
           : slot == SPEC_PROPOSER_MEDUSA ? "medusa"
           : slot == SPEC_PROPOSER_EAGLE ? "eagle"
                                          : "plain";
}
