/* chat_tmpl.c — the served model's chat template: loaded from the GGUF's
 * tokenizer.chat_template (or a named one, or a file), compiled once by the
 * Jinja renderer, applied to OpenAI-shaped messages and tools with message
 * text marked as data so it never spells special tokens (see chat.h). */
#include "engine/chat/chat.h"
#include "engine/chat/jinja.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

struct chat_tmpl {
    jinja_template *jt;          /* NULL: a built-in family */
    chat_template_kind family;
    chat_tool_format tools;
    char *text;                  /* the Jinja source ("" for a family) */
    char source[300];
    char bos[64], eos[64];
    bool add_bos;                /* the tokenizer prepends BOS itself */
    bool object_args;            /* formats tool_call arguments with tojson: give it objects */
    bool wants_functions;        /* reads 'functions' / 'datetime' (Firefunction v2) */
};

const char *chat_tool_format_name(chat_tool_format f) {
    static const char *const n[] = {"generic", "llama3", "hermes", "mistral", "functionary-v3.1", "functionary-v3.2",
                                    "firefunction", "command-r7b", "command-r"};
    return (unsigned)f < CHAT_TOOLS_COUNT ? n[f] : "?";
}

chat_tool_format chat_tool_format_detect(const char *s) {
    if (!s) return CHAT_TOOLS_GENERIC;
    if (strstr(s, "functools[")) return CHAT_TOOLS_FIREFUNCTION;
    if (strstr(s, "<function=")) return CHAT_TOOLS_FUNCTIONARY31;
    if (strstr(s, ">>>") && strstr(s, "recipient")) return CHAT_TOOLS_FUNCTIONARY32;
    if (strstr(s, "<tool_call>")) return CHAT_TOOLS_HERMES;
    if (strstr(s, "[TOOL_CALLS]")) return CHAT_TOOLS_MISTRAL;
    if (strstr(s, "<|START_ACTION|>")) return CHAT_TOOLS_COMMAND_R7B;
    if (strstr(s, "Action:") && strstr(s, "tool_name")) return CHAT_TOOLS_COMMAND_R;
    if (strstr(s, "<|python_tag|>") || (strstr(s, "<|start_header_id|>") && strstr(s, "tools"))) return CHAT_TOOLS_LLAMA3;
    return CHAT_TOOLS_GENERIC;
}

static char *read_file(const char *path, size_t *n) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    char *s = malloc((size_t)st.st_size + 1);
    size_t got = s ? fread(s, 1, (size_t)st.st_size, fp) : 0;
    fclose(fp);
    if (!s || got != (size_t)st.st_size) {
        free(s);
        return NULL;
    }
    s[got] = '\0';
    *n = got;
    return s;
}

static char *gguf_text(const gguf_file *f, const char *key, size_t *n) {
    gguf_str gs;
    if (!f || !gguf_get_str(f, key, &gs)) return NULL;
    char *s = malloc(gs.len + 1);
    if (!s) return NULL;
    memcpy(s, gs.ptr, gs.len);
    s[gs.len] = '\0';
    *n = gs.len;
    return s;
}

static void token_text(const tokenizer *t, int32_t id, char *out, size_t cap) {
    size_t n = 0;
    const char *s = t && id >= 0 ? tok_token_str(t, id, &n) : NULL;
    snprintf(out, cap, "%.*s", s ? (int)n : 0, s ? s : "");
}

chat_tmpl *chat_tmpl_load(const gguf_file *f, const tokenizer *t, const char *override, char *err, size_t errlen) {
    chat_tmpl *ct = calloc(1, sizeof *ct);
    if (!ct) return snprintf(err, errlen, "out of memory"), NULL;
    token_text(t, t ? tok_bos(t) : -1, ct->bos, sizeof ct->bos);
    token_text(t, t ? tok_eos(t) : -1, ct->eos, sizeof ct->eos);
    ct->add_bos = t ? tok_add_bos(t) : false;
    size_t n = 0;
    char *text = NULL;
    if (override && *override) {
        char key[300];
        snprintf(key, sizeof key, "tokenizer.chat_template.%s", override);
        if ((text = read_file(override, &n))) snprintf(ct->source, sizeof ct->source, "file %s", override);
        else if ((text = gguf_text(f, key, &n))) snprintf(ct->source, sizeof ct->source, "%s", key);
        else if ((int)chat_template_from_name(override) >= 0) {
            ct->family = chat_template_from_name(override);
            snprintf(ct->source, sizeof ct->source, "built-in family %s", chat_template_name(ct->family));
        } else {
            snprintf(err, errlen, "chat template '%s': not a readable file, no tokenizer.chat_template.%s in the model, "
                                  "and not a built-in family (llama2, llama3, chatml, mistral, zephyr, plain)",
                     override, override);
            chat_tmpl_free(ct);
            return NULL;
        }
    } else if ((text = gguf_text(f, "tokenizer.chat_template", &n))) {
        snprintf(ct->source, sizeof ct->source, "tokenizer.chat_template");
    } else {
        ct->family = chat_template_detect(f, t);
        snprintf(ct->source, sizeof ct->source, "none in the model: built-in family %s", chat_template_name(ct->family));
    }
    if (text) {
        char jerr[400];
        if (!(ct->jt = jinja_compile(text, n, jerr, sizeof jerr))) {
            snprintf(err, errlen, "%s: %s", ct->source, jerr);
            free(text);
            chat_tmpl_free(ct);
            return NULL;
        }
        ct->text = text;
        ct->family = chat_template_detect(f, t);
        ct->tools = chat_tool_format_detect(text);
        ct->object_args = strstr(text, "arguments | tojson") || strstr(text, "arguments|tojson") ||
                          strstr(text, "function|tojson") || strstr(text, "function | tojson") ||
                          strstr(text, "arguments | items") || strstr(text, "arguments|items");
        ct->wants_functions = strstr(text, "functions") && strstr(text, "datetime");
    } else {
        ct->text = calloc(1, 1);
        if (!ct->text) {
            chat_tmpl_free(ct);
            return snprintf(err, errlen, "out of memory"), NULL;
        }
    }
    return ct;
}

void chat_tmpl_free(chat_tmpl *ct) {
    if (!ct) return;
    jinja_destroy(ct->jt);
    free(ct->text);
    free(ct);
}

bool chat_tmpl_is_jinja(const chat_tmpl *ct) { return ct && ct->jt; }
chat_template_kind chat_tmpl_family(const chat_tmpl *ct) { return ct ? ct->family : CHAT_TEMPLATE_PLAIN; }
chat_tool_format chat_tmpl_tool_format(const chat_tmpl *ct) { return ct ? ct->tools : CHAT_TOOLS_GENERIC; }
const char *chat_tmpl_source(const chat_tmpl *ct) { return ct ? ct->source : "none"; }
const char *chat_tmpl_text(const chat_tmpl *ct) { return ct && ct->text ? ct->text : ""; }

static bool known_role(const char *r, size_t n) {
    static const char *const known[] = {"system", "user", "assistant", "tool", "ipython", "developer", "tool_results", "function"};
    for (size_t k = 0; k < sizeof known / sizeof *known; k++)
        if (strlen(known[k]) == n && !memcmp(known[k], r, n)) return true;
    return false;
}

/* Markup runs of a rendering as token spans. */
static int make_spans(const uint8_t *data, size_t from, size_t len, tok_span **spans) {
    int n = 0, cap = 16;
    tok_span *s = malloc(sizeof *s * (size_t)cap);
    if (!s) return -1;
    size_t k = from;
    while (k < len) {
        if (data && data[k]) {
            k++;
            continue;
        }
        size_t st = k;
        while (k < len && !(data && data[k])) k++;
        if (n == cap) {
            cap *= 2;
            tok_span *ns = realloc(s, sizeof *s * (size_t)cap);
            if (!ns) {
                free(s);
                return -1;
            }
            s = ns;
        }
        s[n++] = (tok_span){st - from, k - from};
    }
    *spans = s;
    return n;
}

/* The built-in family path: roles and contents out of the JSON. */
static int apply_family(const chat_tmpl *ct, jinja_render *r, jinja_value *msgs, bool gen, char **out, size_t *out_len,
                        tok_span **spans, int *n_spans, char *err, size_t errlen) {
    int n = jinja_list_len(msgs);
    chat_msg *cm = calloc((size_t)n + 1, sizeof *cm);
    if (!cm) return snprintf(err, errlen, "out of memory"), -1;
    for (int i = 0; i < n; i++) {
        jinja_value *m = jinja_list_at(msgs, i);
        const char *role = jinja_string_of(jinja_dict_get(m, "role"), NULL);
        const char *content = jinja_string_of(jinja_dict_get(m, "content"), NULL);
        cm[i] = (chat_msg){role ? role : "user", content ? content : ""};
    }
    const char *bos = ct->bos[0] ? ct->bos : NULL;
    int need = chat_render(ct->family, cm, n, gen, bos, NULL, 0);
    int max_spans = 2 * n + 2, ns = 0;
    char *buf = malloc((size_t)need + 1);
    tok_span *sp = malloc(sizeof *sp * (size_t)max_spans);
    if (!buf || !sp) {
        free(cm), free(buf), free(sp);
        return snprintf(err, errlen, "out of memory"), -1;
    }
    chat_render_spans(ct->family, cm, n, gen, bos, buf, (size_t)need + 1, sp, max_spans, &ns);
    free(cm);
    *out = buf;
    *out_len = (size_t)need;
    *spans = sp;
    *n_spans = ns < max_spans ? ns : max_spans;
    return 0;
}

int chat_tmpl_apply(const chat_tmpl *ct, const char *messages_json, size_t messages_len, const char *tools_json,
                    size_t tools_len, bool add_generation_prompt, char **out, size_t *out_len, tok_span **spans,
                    int *n_spans, char *err, size_t errlen) {
    *out = NULL;
    *spans = NULL;
    *n_spans = 0;
    *out_len = 0;
    jinja_render *r = jinja_render_begin(ct->jt, NULL);
    char jerr[300];
    jinja_value *msgs = jinja_from_json(r, messages_json, messages_len, true, jerr, sizeof jerr);
    if (!msgs || jinja_list_len(msgs) < 0) {
        snprintf(err, errlen, "messages: %s", msgs ? "not an array" : jerr);
        jinja_render_end(r);
        return -1;
    }
    jinja_value *tools = NULL;
    if (tools_json && tools_len) {
        tools = jinja_from_json(r, tools_json, tools_len, true, jerr, sizeof jerr);
        if (!tools || jinja_list_len(tools) < 0) {
            snprintf(err, errlen, "tools: %s", tools ? "not an array" : jerr);
            jinja_render_end(r);
            return -1;
        }
        if (jinja_list_len(tools) == 0) tools = NULL;
    }
    if (!ct->jt) {
        int rc = tools ? -2 : apply_family(ct, r, msgs, add_generation_prompt, out, out_len, spans, n_spans, err, errlen);
        if (rc == -2)
            snprintf(err, errlen, "the model has no Jinja chat template (%s): tools need one (--chat-template)", ct->source);
        jinja_render_end(r);
        return rc;
    }
    for (int i = 0; i < jinja_list_len(msgs); i++) {
        jinja_value *m = jinja_list_at(msgs, i);
        size_t rn;
        const char *role = jinja_string_of(jinja_dict_get(m, "role"), &rn);
        if (role && known_role(role, rn)) jinja_dict_set(r, m, "role", jinja_string(r, role, rn, false));
        jinja_value *c = jinja_dict_get(m, "content");
        if (c && !jinja_string_of(c, NULL) && jinja_list_len(c) < 0) jinja_dict_set(r, m, "content", jinja_string(r, "", 0, true));
        jinja_value *calls = jinja_dict_get(m, "tool_calls");
        for (int k = 0; ct->object_args && k < jinja_list_len(calls); k++) {
            jinja_value *fn = jinja_dict_get(jinja_list_at(calls, k), "function");
            size_t an;
            const char *args = jinja_string_of(jinja_dict_get(fn, "arguments"), &an);
            jinja_value *obj = args ? jinja_from_json(r, args, an, true, NULL, 0) : NULL;
            if (obj) jinja_dict_set(r, fn, "arguments", obj);
        }
    }
    jinja_define(r, "messages", msgs);
    if (tools) jinja_define(r, "tools", tools);
    jinja_define(r, "add_generation_prompt", jinja_bool(r, add_generation_prompt));
    jinja_define(r, "bos_token", jinja_string(r, ct->bos, strlen(ct->bos), false));
    jinja_define(r, "eos_token", jinja_string(r, ct->eos, strlen(ct->eos), false));
    if (ct->wants_functions) {
        char when[64];
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        size_t wn = strftime(when, sizeof when, "%b %d %Y %H:%M:%S GMT", &tm);
        jinja_define(r, "datetime", jinja_string(r, when, wn, false));
        jinja_value *fj = tools ? jinja_to_json(r, tools, 2) : jinja_string(r, "", 0, false);
        if (fj) jinja_define(r, "functions", fj);
    }
    if (jinja_run(r, jerr, sizeof jerr) < 0) {
        snprintf(err, errlen, "chat template: %s", jerr);
        jinja_render_end(r);
        return -1;
    }
    size_t len;
    const uint8_t *data;
    const char *text = jinja_output(r, &len, &data);
    size_t from = 0, bl = strlen(ct->bos);
    if (ct->add_bos && bl && len >= bl && !memcmp(text, ct->bos, bl)) {
        bool markup = true;
        for (size_t k = 0; k < bl; k++) markup = markup && !(data && data[k]);
        if (markup) from = bl; /* the tokenizer adds BOS itself */
    }
    char *o = malloc(len - from + 1);
    int ns = o ? make_spans(data, from, len, spans) : -1;
    if (!o || ns < 0) {
        free(o);
        jinja_render_end(r);
        return snprintf(err, errlen, "out of memory"), -1;
    }
    memcpy(o, text + from, len - from);
    o[len - from] = '\0';
    *out = o;
    *out_len = len - from;
    *n_spans = ns;
    jinja_render_end(r);
    return 0;
}
