/* engine_names.c — the names of the engine's tree modes (engine.h), apart from
 * the engine itself so that parsers (the gateway's protocol layer and its fuzz
 * targets) need nothing of the engine's models. */
#include "engine/engine.h"

#include <string.h>

const char *engine_tree_name(engine_tree t) {
    static const char *names[] = {"default", "off", "auto", "fixed"};
    return (unsigned)t <= ENGINE_TREE_FIXED ? names[t] : "?";
}

int engine_tree_parse(const char *s) {
    for (int t = ENGINE_TREE_OFF; t <= ENGINE_TREE_FIXED; t++)
        if (s && !strcmp(s, engine_tree_name((engine_tree)t))) return t;
    return -1;
}
