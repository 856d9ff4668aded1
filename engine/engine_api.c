/* engine_api.c — the engine.h functions that callers of the engine (the
 * gateway, the CLI's serving commands) use instead of the internal modules:
 * the loaded pair's tokenizer and chat template, and the cost model's
 * prediction. Each is one call into the module that owns it, so the
 * behaviour is the module's; what this file adds is that the callers need
 * no header but engine.h. */
#include "engine/engine.h"
#include "engine/chat/chat.h"
#include "engine/spec/gamma.h"
#include "engine/tokenizer/tokenizer.h"

_Static_assert((int)ENGINE_DECODE_SPECIAL == (int)TOK_DECODE_SPECIAL &&
                   (int)ENGINE_DECODE_CONTINUATION == (int)TOK_DECODE_CONTINUATION,
               "engine.h's decode flags are the tokenizer's");

/* ---- tokens ------------------------------------------------------------- */

int engine_n_vocab(const engine *e) {
    return tok_n_vocab(engine_tokenizer(e));
}

bool engine_token_valid(const engine *e, int32_t id) {
    return tok_valid_id(engine_tokenizer(e), id);
}

bool engine_token_is_eog(const engine *e, int32_t id) {
    return tok_is_eog(engine_tokenizer(e), id);
}

int engine_token_piece(const engine *e, int32_t id, char *buf, size_t n) {
    return tok_piece(engine_tokenizer(e), id, buf, n);
}

int engine_tokenize(const engine *e, const char *text, size_t len, bool add_special, bool parse_special, int32_t *out,
                    int max_out) {
    return tok_encode(engine_tokenizer(e), text, len, add_special, parse_special, out, max_out);
}

int engine_detokenize(const engine *e, const int32_t *ids, int n, char *buf, size_t cap, unsigned flags) {
    return tok_decode(engine_tokenizer(e), ids, n, buf, cap, flags);
}

/* ---- the chat template ---------------------------------------------------- */

int engine_chat_apply(const engine *e, const char *messages_json, size_t messages_len, const char *tools_json,
                      size_t tools_len, bool add_generation_prompt, char **out, size_t *out_len, tok_span **spans,
                      int *n_spans, char *err, size_t errlen) {
    return chat_tmpl_apply(engine_chat_tmpl(e), messages_json, messages_len, tools_json, tools_len,
                           add_generation_prompt, out, out_len, spans, n_spans, err, errlen);
}

chat_tool_format engine_chat_tool_format(const engine *e) {
    return chat_tmpl_tool_format(engine_chat_tmpl(e));
}

bool engine_chat_is_jinja(const engine *e) {
    return chat_tmpl_is_jinja(engine_chat_tmpl(e));
}

const char *engine_chat_source(const engine *e) {
    return chat_tmpl_source(engine_chat_tmpl(e));
}

/* ---- the cost model's prediction ------------------------------------------ */

double engine_predicted_speedup(const gamma_costs *c, double alpha, const int *gamma_hist, int ctx) {
    if (!(c->target_ms > 0)) return 0;
    /* the mix's expected tokens over its cost, against plain decoding's one
     * token per 1-row pass at the same context */
    double num = 0, den = 0;
    for (int g = 0; g <= GAMMA_MAX; g++) {
        if (!gamma_hist[g]) continue;
        num += gamma_hist[g] * gamma_expected_tokens(alpha, g);
        den += gamma_hist[g] *
               (gamma_target_ms(c, g + 1, gamma_keys(g + 1, ctx), gamma_pairs(g + 1, ctx)) + c->draft_ms * g);
    }
    return den > 0 ? (num / den) * gamma_target_ms(c, 1, gamma_keys(1, ctx), gamma_pairs(1, ctx)) : 0;
}
