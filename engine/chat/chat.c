/* chat.c — chat template detection and rendering (see chat.h). Each family's
 * renderer mirrors its reference Jinja template as published with the models
 * (Hugging Face tokenizer_config.json, rendered with trim_blocks/lstrip_blocks). */
#include "engine/chat/chat.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

/* ---- output ---------------------------------------------------------------- */

typedef struct {
    char *out;
    size_t cap, len; /* len counts every byte, written or not */
    tok_span *spans; /* markup spans written so far (max_spans of them fit) */
    int max_spans, n_spans; /* n_spans counts every span, written or not */
    size_t last_end; /* end of the last markup span (valid when n_spans > 0) */
} chat_buf;

/* Message content: always plain text. */
static void put(chat_buf *b, const char *s, size_t n) {
    if (b->len < b->cap) {
        size_t room = b->cap - b->len;
        memcpy(b->out + b->len, s, n < room ? n : room);
    }
    b->len += n;
}

static void puts_(chat_buf *b, const char *s) { put(b, s, strlen(s)); }

/* The template's own markup (and the role names, which come from a fixed
 * set): the only bytes that may spell special tokens. Adjacent markup joins
 * one span. */
static void lit(chat_buf *b, const char *s) {
    size_t n = strlen(s), start = b->len;
    put(b, s, n);
    if (n == 0) return;
    if (b->n_spans > 0 && b->last_end == start) {
        if (b->n_spans <= b->max_spans) b->spans[b->n_spans - 1].end = b->len;
    } else {
        if (b->n_spans < b->max_spans) b->spans[b->n_spans] = (tok_span){start, b->len};
        b->n_spans++;
    }
    b->last_end = b->len;
}

/* Role names are markup when they are the standard ones; any other name a
 * caller passes is rendered as plain text. */
static void role(chat_buf *b, const char *r) {
    static const char *const known[] = {"system", "user", "assistant", "tool"};
    for (size_t k = 0; k < sizeof known / sizeof *known; k++)
        if (!strcmp(r, known[k])) {
            lit(b, r);
            return;
        }
    puts_(b, r);
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Python str.strip() / Jinja |trim for ASCII whitespace. */
static void put_stripped(chat_buf *b, const char *s) {
    size_t n = strlen(s), a = 0;
    while (a < n && is_space(s[a])) a++;
    while (n > a && is_space(s[n - 1])) n--;
    put(b, s + a, n - a);
}

static const char *text(const char *s) { return s ? s : ""; }
static bool role_is(const chat_msg *m, const char *r) { return m->role && strcmp(m->role, r) == 0; }

/* ---- families ------------------------------------------------------------ */

/* Llama 2: the first message, when it is a system message, is folded into the
 * first turn as "<<SYS>>\n...\n<</SYS>>\n\n"; each user turn is
 * bos "[INST] " strip(text) " [/INST]", each assistant turn " " strip(text) " </s>". */
static void render_llama2(chat_buf *b, const chat_msg *m, int n, const char *bos) {
    int start = 0;
    const char *sys = NULL;
    if (n > 0 && role_is(&m[0], "system")) {
        sys = text(m[0].content);
        start = 1;
    }
    if (sys && start == n) { /* only a system message: the template would drop it; keep it as a turn */
        lit(b, "[INST] <<SYS>>\n");
        puts_(b, sys);
        lit(b, "\n<</SYS>> [/INST]");
        return;
    }
    for (int i = start; i < n; i++) {
        bool user = !role_is(&m[i], "assistant");
        if (user) {
            if (i > start) lit(b, bos);
            lit(b, "[INST] ");
        } else {
            lit(b, " ");
        }
        if (i == start && sys) {
            /* strip() applies to the whole folded text: leading space of the
             * system prompt after "<<SYS>>\n" survives, the user text's tail not */
            const char *c = text(m[i].content);
            size_t len = strlen(c);
            while (len > 0 && is_space(c[len - 1])) len--;
            lit(b, "<<SYS>>\n");
            puts_(b, sys);
            lit(b, len ? "\n<</SYS>>\n\n" : "\n<</SYS>>"); /* empty text: strip eats the "\n\n" */
            put(b, c, len);
        } else {
            put_stripped(b, text(m[i].content));
        }
        lit(b, user ? " [/INST]" : " </s>");
    }
}

static void render_llama3(chat_buf *b, const chat_msg *m, int n, bool gen) {
    for (int i = 0; i < n; i++) {
        lit(b, "<|start_header_id|>");
        role(b, text(m[i].role));
        lit(b, "<|end_header_id|>\n\n");
        put_stripped(b, text(m[i].content));
        lit(b, "<|eot_id|>");
    }
    if (gen) lit(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void render_chatml(chat_buf *b, const chat_msg *m, int n, bool gen) {
    for (int i = 0; i < n; i++) {
        lit(b, "<|im_start|>");
        role(b, text(m[i].role));
        lit(b, "\n");
        puts_(b, text(m[i].content));
        lit(b, "<|im_end|>\n");
    }
    if (gen) lit(b, "<|im_start|>assistant\n");
}

/* Mistral-7B-Instruct v0.1: "[INST] " u " [/INST]" then a "</s>". The original
 * template refuses a system message; like the later revisions we fold a
 * leading one into the first user turn as "s\n\nu". */
static void render_mistral(chat_buf *b, const chat_msg *m, int n) {
    int start = 0;
    const char *sys = NULL;
    if (n > 0 && role_is(&m[0], "system")) {
        sys = text(m[0].content);
        start = 1;
    }
    if (sys && (start == n || role_is(&m[start], "assistant"))) {
        lit(b, "[INST] ");
        puts_(b, sys);
        lit(b, " [/INST]");
        sys = NULL;
    }
    for (int i = start; i < n; i++) {
        if (role_is(&m[i], "assistant")) {
            puts_(b, text(m[i].content));
            lit(b, "</s>");
            continue;
        }
        lit(b, "[INST] ");
        if (sys) {
            puts_(b, sys);
            lit(b, "\n\n");
            sys = NULL;
        }
        puts_(b, text(m[i].content));
        lit(b, " [/INST]");
    }
}

static void render_zephyr(chat_buf *b, const chat_msg *m, int n, bool gen) {
    for (int i = 0; i < n; i++) {
        lit(b, "<|");
        role(b, text(m[i].role));
        lit(b, "|>\n");
        puts_(b, text(m[i].content));
        lit(b, "</s>\n");
    }
    if (gen) lit(b, "<|assistant|>\n");
}

static void render_plain(chat_buf *b, const chat_msg *m, int n, bool gen) {
    for (int i = 0; i < n; i++) {
        const char *r = text(m[i].role);
        if (!strcmp(r, "system")) lit(b, "System");
        else if (!strcmp(r, "user")) lit(b, "User");
        else if (!strcmp(r, "assistant")) lit(b, "Assistant");
        else if (r[0]) {
            char c = (char)toupper((unsigned char)r[0]);
            put(b, &c, 1);
            puts_(b, r + 1);
        } else {
            lit(b, "User");
        }
        /* a finished assistant turn reads as its generation prompt
         * ("Assistant:") followed by the answer as generated: an answer that
         * begins with its own whitespace gets no second space, so a resent
         * history is byte for byte what the model saw and produced (and its
         * cached KV blocks match: prefix reuse) */
        const char *c = text(m[i].content);
        lit(b, !strcmp(r, "assistant") && isspace((unsigned char)c[0]) ? ":" : ": ");
        puts_(b, c);
        lit(b, "\n");
    }
    if (gen) lit(b, "Assistant:");
}

int chat_render(chat_template_kind k, const chat_msg *msgs, int n, bool add_generation_prompt, const char *bos_text,
                char *out, size_t cap) {
    return chat_render_spans(k, msgs, n, add_generation_prompt, bos_text, out, cap, NULL, 0, NULL);
}

int chat_render_spans(chat_template_kind k, const chat_msg *msgs, int n, bool add_generation_prompt,
                      const char *bos_text, char *out, size_t cap, tok_span *spans, int max_spans, int *n_spans) {
    chat_buf b = {out, cap ? cap - 1 : 0, 0, spans, spans ? max_spans : 0, 0, 0};
    if (n < 0) n = 0;
    const char *bos = bos_text ? bos_text : "<s>";
    switch (k) {
    case CHAT_TEMPLATE_LLAMA2: render_llama2(&b, msgs, n, bos); break;
    case CHAT_TEMPLATE_LLAMA3: render_llama3(&b, msgs, n, add_generation_prompt); break;
    case CHAT_TEMPLATE_CHATML: render_chatml(&b, msgs, n, add_generation_prompt); break;
    case CHAT_TEMPLATE_MISTRAL: render_mistral(&b, msgs, n); break;
    case CHAT_TEMPLATE_ZEPHYR: render_zephyr(&b, msgs, n, add_generation_prompt); break;
    default: render_plain(&b, msgs, n, add_generation_prompt); break;
    }
    if (cap) out[b.len < cap - 1 ? b.len : cap - 1] = '\0';
    if (n_spans) *n_spans = b.n_spans;
    return b.len > (size_t)2147483647 ? 2147483647 : (int)b.len;
}

/* ---- detection and names ----------------------------------------------------- */

static bool has(const char *s, size_t n, const char *needle) { return memmem(s, n, needle, strlen(needle)) != NULL; }

chat_template_kind chat_template_detect(const gguf_file *f, const tokenizer *t) {
    gguf_str s;
    if (f && gguf_get_str(f, "tokenizer.chat_template", &s) && s.len > 0) {
        const char *p = s.ptr;
        size_t n = (size_t)s.len;
        if (has(p, n, "<|im_start|>")) return CHAT_TEMPLATE_CHATML;
        if (has(p, n, "<|start_header_id|>")) return CHAT_TEMPLATE_LLAMA3;
        if (has(p, n, "[INST]")) return has(p, n, "<<SYS>>") ? CHAT_TEMPLATE_LLAMA2 : CHAT_TEMPLATE_MISTRAL;
        if (has(p, n, "<|user|>")) return CHAT_TEMPLATE_ZEPHYR;
    }
    if (t) {
        if (tok_find(t, "<|im_start|>", 12) >= 0) return CHAT_TEMPLATE_CHATML;
        if (tok_find(t, "<|start_header_id|>", 19) >= 0) return CHAT_TEMPLATE_LLAMA3;
    }
    return CHAT_TEMPLATE_PLAIN;
}

static const char *const chat_names[CHAT_TEMPLATE_COUNT] = {"plain", "llama2", "llama3", "chatml", "mistral", "zephyr"};

chat_template_kind chat_template_from_name(const char *name) {
    if (!name) return (chat_template_kind)-1;
    for (int k = 0; k < CHAT_TEMPLATE_COUNT; k++)
        if (!strcasecmp(name, chat_names[k])) return (chat_template_kind)k;
    if (!strcasecmp(name, "tinyllama")) return CHAT_TEMPLATE_ZEPHYR;
    if (!strcasecmp(name, "qwen")) return CHAT_TEMPLATE_CHATML;
    return (chat_template_kind)-1;
}

const char *chat_template_name(chat_template_kind k) {
    return (int)k >= 0 && k < CHAT_TEMPLATE_COUNT ? chat_names[k] : "?";
}
