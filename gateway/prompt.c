/* prompt.c — turns a request's chat messages into prompt text with the
 * model's chat template (detected from its metadata), and the protocol limits
 * from the loaded engine. Event loop thread. */
#include "gateway/gw.h"

#include "engine/chat.h"

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
}

int gw_prepare_prompt(gw_msg *m, char *err, size_t errlen) {
    if (!m->messages) {
        m->req.prompt_text = m->prompt;
        return 0;
    }
    engine_info info;
    engine_get_info(gw_srv->eng, &info);
    chat_msg *cm = calloc((size_t)m->n_messages, sizeof(chat_msg));
    if (!cm) return snprintf(err, errlen, "out of memory"), -1;
    for (int i = 0; i < m->n_messages; i++) cm[i] = (chat_msg){gw_role_name(m->messages[i].role), m->messages[i].content};
    chat_template_kind k = (chat_template_kind)info.chat_template;
    int need = chat_render(k, cm, m->n_messages, true, info.bos_text, NULL, 0);
    char *text = need >= 0 ? malloc((size_t)need + 1) : NULL;
    if (!text || chat_render(k, cm, m->n_messages, true, info.bos_text, text, (size_t)need + 1) < 0) {
        free(cm);
        free(text);
        return snprintf(err, errlen, "cannot render the chat template"), -1;
    }
    free(cm);
    free(m->prompt);
    m->prompt = text;
    m->prompt_len = (size_t)need;
    m->req.prompt_text = text;
    m->req.parse_special = true;
    return 0;
}
