/* penalty_fields.h — the history-dependent sampling fields both APIs take
 * (OpenAI's presence_penalty, frequency_penalty and logit_bias; vLLM's
 * repetition_penalty and llama.cpp's repeat_penalty / repeat_last_n) read
 * into an engine request's sampler config. Per request; gateway thread. */
#ifndef SPECD_GW_PENALTY_FIELDS_H
#define SPECD_GW_PENALTY_FIELDS_H

#include "engine/engine.h"
#include "gateway/fields.h"

#include <jansson.h>

/* The keys read here (for the WebSocket's list of known fields). */
extern const char *const gw_penalty_keys[];
extern const int gw_n_penalty_keys;

/* Reads the fields from obj (absent or null: off) into req->sc. A
 * logit_bias ({"id": bias} as OpenAI sends it, or llama.cpp's [[id, bias],
 * ...]; bias in [-100, 100], false = -100) is copied into *bias (malloc'd,
 * the caller frees it; req->sc.logit_bias points at it). Token ids are
 * checked against the vocabulary by engine_submit. Returns 0, or -1 with fe
 * naming the field, the allowed values and what was sent. */
int gw_penalties_parse(json_t *obj, engine_request *req, sampler_bias **bias, gw_field_error *fe);

#endif
