/* jinja_render.c — renders a chat template with a JSON context, for the
 * template x conversation comparison against Python's jinja2
 * (tests/chat/test_templates.py). Usage: jinja_render TEMPLATE CONTEXT.json
 * Every top-level key of the context becomes a variable (strings in it are
 * data, bos_token/eos_token markup). Prints the rendering, or "ERROR: msg"
 * on stderr with exit 3 when the template raises, 2 when it fails to load. */
#include "engine/chat/jinja.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)len + 1);
    if (!s || fread(s, 1, (size_t)len, f) != (size_t)len) { fclose(f); free(s); return NULL; }
    fclose(f);
    s[len] = '\0';
    *n = (size_t)len;
    return s;
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: jinja_render TEMPLATE CONTEXT.json\n"); return 1; }
    size_t tn, cn;
    char *src = slurp(argv[1], &tn), *ctx = slurp(argv[2], &cn);
    if (!src || !ctx) { fprintf(stderr, "cannot read input\n"); return 1; }
    char err[512];
    jinja_template *t = jinja_compile(src, tn, err, sizeof err);
    if (!t) { fprintf(stderr, "LOAD ERROR: %s\n", err); return 2; }
    jinja_render *r = jinja_render_begin(t, NULL);
    jinja_value *c = jinja_from_json(r, ctx, cn, true, err, sizeof err);
    if (!c) { fprintf(stderr, "context: %s\n", err); return 1; }
    /* walk the top-level keys via a second parse with markup strings for the tokens */
    jinja_value *ck = jinja_from_json(r, ctx, cn, false, err, sizeof err);
    static const char *const keys[] = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token",
                                       "custom_tools", "tools_in_user_message", "date_string", "builtin_tools",
                                       "documents", "functions", "datetime"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        bool markup = !strcmp(keys[k], "bos_token") || !strcmp(keys[k], "eos_token");
        jinja_value *v = jinja_dict_get(markup ? ck : c, keys[k]);
        if (v) jinja_define(r, keys[k], v);
    }
    if (jinja_run(r, err, sizeof err) < 0) { fprintf(stderr, "ERROR: %s\n", err); return 3; }
    size_t n;
    const char *out = jinja_output(r, &n, NULL);
    fwrite(out, 1, n, stdout);
    jinja_render_end(r);
    jinja_destroy(t);
    free(src);
    free(ctx);
    return 0;
}
