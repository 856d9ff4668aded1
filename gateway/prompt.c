/* prompt.c — turns a request's chat messages into prompt text with the
 * model's chat template (detected from its metadata), and the protocol limits
 * from the loaded engine. Event loop thread. */
#include "gateway/gw.h"


#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gw_limits_from_engine(gw_limits *lim, engine *e) {
    engine_info info;
    engine_get_info(e, &info);
    lim->gamma_min = info.gamma.gamma_min;
    lim->gamma_max = info.gamma.gamma_max;
    lim->max_ctx = info.max_ctx;
    lim->has_draft = info.has_draft;
    lim->tree = info.tree;
    lim->tree_budget = info.tree_bounds.budget;
    lim->tree_depth = info.tree_bounds.depth;
    lim->tree_topk = info.tree_bounds.topk;
}

int gw_prepare_prompt(engine *e, gw_msg *m, char *err, size_t errlen) {
    if (!m->messages) {
        m->req.prompt_text = m->prompt;
        return 0;
    }
    engine_info info;
    engine_get_info(e, &info);
    chat_msg *cm = calloc((size_t)m->n_messages, sizeof(chat_msg));
    if (!cm) return snprintf(err, errlen, "out of memory"), -1;
    for (int i = 0; i < m->n_messages; i++) cm[i] = (chat_msg){gw_role_name(m->messages[i].role), m->messages[i].content};
    chat_template_kind k = (chat_template_kind)info.chat_template;
    /* only the template's markup may spell special tokens: message content is plain text */
    int max_spans = 2 * m->n_messages + 2, n_spans = 0;
    int need = chat_render(k, cm, m->n_messages, true, info.bos_text, NULL, 0);
    char *text = need >= 0 ? malloc((size_t)need + 1) : NULL;
    tok_span *spans = malloc(sizeof *spans * (size_t)max_spans);
    if (!text || !spans ||
        chat_render_spans(k, cm, m->n_messages, true, info.bos_text, text, (size_t)need + 1, spans, max_spans,
                          &n_spans) < 0 || n_spans > max_spans) {
        free(cm);
        free(text);
        free(spans);
        return snprintf(err, errlen, "cannot render the chat template"), -1;
    }
    free(cm);
    free(m->prompt);
    free(m->spans);
    m->prompt = text;
    m->prompt_len = (size_t)need;
    m->spans = spans;
    m->req.prompt_text = text;
    m->req.special_spans = spans;
    m->req.n_special_spans = n_spans;
    return 0;
}
