/* endpoints.h — the everyday endpoints beside completions, in llama.cpp's
 * server's shapes so its clients work unchanged:
 *   GET  /health        {"status":"ok"} (503 while draining)
 *   GET  /props         model, context, chat template, speculation setup
 *   POST /tokenize      {"content", "add_special"?, "parse_special"?, "with_pieces"?} -> {"tokens": [...]}
 *   POST /detokenize    {"tokens": [...]} -> {"content": "..."}
 *   GET  /v1/models/ID  the served model (or an alias), else 404 model_not_found
 * and the model-name check of completions (gw_model_known). Each returns a
 * malloc'd JSON body and sets *status. Loop thread. */
#ifndef SPECD_GATEWAY_ENDPOINTS_H
#define SPECD_GATEWAY_ENDPOINTS_H

#include "gateway/gw.h"

#include <stdbool.h>
#include <stddef.h>

bool gw_model_known(const gw_server *s, const char *name); /* the served model's name or one of models.alias */
char *gw_models_json(const gw_server *s);                  /* GET /v1/models: the name and its aliases */
char *gw_ep_model(const gw_server *s, const char *id, int *status);
char *gw_ep_health(const gw_server *s, int *status);
char *gw_ep_props(const gw_server *s, int *status);
char *gw_ep_tokenize(const gw_server *s, const char *body, size_t len, int *status);
char *gw_ep_detokenize(const gw_server *s, const char *body, size_t len, int *status);
/* POST /apply-template (llama.cpp's shape): a chat body ({"messages": [...],
 * "tools": [...]}) -> {"prompt": "..."}, the text the model's chat template
 * renders (with the generation prompt; a leading BOS the tokenizer adds is
 * not in it). 400 with the reason when the body or the template fails. */
char *gw_ep_apply_template(const gw_server *s, const char *body, size_t len, int *status);

#endif
