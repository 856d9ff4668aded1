/* protocol.h — the socket-free half of the WebSocket `/v1/stream` protocol
 * (subprotocol `specd.v1`): parses and validates client JSON frames into an
 * engine_request, and serializes engine events into server JSON frames.
 * It deliberately knows nothing of sockets, libwebsockets, chat templates or
 * the OpenAI HTTP shapes (gateway/openai_request.c, openai_response.c).
 *
 * Client → server (text frames):
 *   {"type":"generate","id":<string 1..GW_ID_MAX bytes | integer>,
 *    "prompt":"..." | "messages":[{"role":"system|user|assistant","content":"..."},...],
 *    "max_tokens":N, "temperature":T, "top_p":P, "top_k":K, "min_p":M, "seed":S,
 *    "stop":["..."] | "...", "speculation":{"mode":"auto|draft|off","gamma":N,"adaptive":bool},
 *    "content_type":"chat|code|structured|..."}
 *   {"type":"cancel","id":...}
 *   {"type":"ping"[,"id":...]}
 * Optional fields may be absent or null (= default). Unknown keys are ignored
 * (forward compatibility), except per-model sampling keys such as
 * "draft_temperature": draft and target share one sampling config, so those
 * are rejected with out_of_range.
 *
 * Server → client: start, tokens, done, error, pong (see the gw_write_* below).
 *
 * Threads: every function here is reentrant and may be called from any thread;
 * nothing here keeps state. gw_parse allocates (it is per request, not per
 * token); the gw_write_* serializers never allocate, so the loop thread can
 * write a frame straight into its send buffer (after LWS_PRE). */
#ifndef SPECD_GATEWAY_PROTOCOL_H
#define SPECD_GATEWAY_PROTOCOL_H

#include "engine/engine.h"
#include "gateway/fields.h"

#include <stdbool.h>
#include <stddef.h>

#define GW_ID_MAX 100          /* bytes of a string id */
#define GW_ID_JSON_MAX 608     /* an id as JSON text: worst case 6 bytes per id byte + quotes + NUL */
#define GW_CONTENT_TYPE_MAX 64 /* content_type: 1..63 bytes of [A-Za-z0-9_.-] */
/* Frame sizes the serializers can need at most (NUL included), for fixed buffers. */
#define GW_TOKENS_JSON_MAX                                                                                     \
    (ENGINE_TEXT_MAX * 6 + (GAMMA_MAX + 1) * (12 + 80 + SPEC_TOP_LOGPROBS * 56) + GW_ID_JSON_MAX + 240)
#define GW_DONE_JSON_MAX (GW_ID_JSON_MAX + 1024 + GAMMA_MAX * 128)

/* The error codes (GW_ERR_*) and the limits (gw_limits) are in gateway/fields.h. */

typedef enum { GW_MSG_GENERATE = 1, GW_MSG_CANCEL, GW_MSG_PING } gw_msg_type;
typedef enum { GW_ROLE_SYSTEM = 0, GW_ROLE_USER, GW_ROLE_ASSISTANT } gw_role;

const char *gw_msg_type_name(gw_msg_type t); /* "generate", "cancel", "ping" */
const char *gw_role_name(gw_role r);         /* "system", "user", "assistant" */

typedef struct {
    gw_role role;
    char *content;          /* owned, NUL-terminated, valid UTF-8 without NUL bytes */
    size_t content_len;
} gw_chat_msg;

/* A parsed client message. Owns every pointer in it (including those inside
 * req); free with gw_msg_free. It may be moved by plain struct assignment
 * (the pointers are heap storage, never into the struct itself); free exactly
 * one copy. */
typedef struct {
    gw_msg_type type;
    /* The id as canonical JSON text ("\"abc\"", "42"), to echo verbatim and to
     * compare: two ids name the same request iff their texts are equal
     * (strcmp). "" only for a ping sent without an id. */
    char id[GW_ID_JSON_MAX];
    /* generate only (zero otherwise): */
    char *prompt;           /* owned; NULL when messages were given */
    size_t prompt_len;
    gw_chat_msg *messages;  /* owned, n_messages > 0; NULL when prompt was given */
    int n_messages;
    bool seed_set;          /* false: no seed given, req.seed is 0 — the server picks one */
    /* Ready for engine_submit once the server has set notify/user (and, for
     * messages, rendered the chat template into prompt_text and its markup
     * into special_spans → spans):
     *   prompt_text = prompt (or NULL), no special spans (plain text), sc, seed,
     *   max_tokens (default applied), stop[] → stop_owned, mode, gamma (0 =
     *   engine default), adaptive/adaptive_set, content_type → content_type. */
    engine_request req;
    char *stop_owned[ENGINE_MAX_STOP]; /* owned; req.stop[i] points at these */
    char *content_type;     /* owned or NULL; req.content_type points at it */
    char *grammar;          /* owned or NULL: GBNF of 'grammar' or 'response_format' (req.grammar) */
    sampler_bias *logit_bias; /* owned or NULL: 'logit_bias' (req.sc.logit_bias points here) */
    tok_span *spans;        /* owned or NULL: the chat template's markup; req.special_spans points at it */
} gw_msg;

/* Why a frame was refused. code is one of the GW_ERR_* literals (static
 * storage); message is one human-readable line naming the field, the allowed
 * values and what was received; id is the request's id as JSON text when the
 * frame had a valid one (so the error can be tagged with it), else "". */
typedef struct {
    const char *code;
    char message[200];
    char id[GW_ID_JSON_MAX];
} gw_error;

/* Parses and validates one text frame buf[len] (need not be NUL-terminated).
 * Returns 0 with *out filled (caller owns it: gw_msg_free), or -1 with *err
 * filled and *out zeroed (nothing to free). Never aborts on any input.
 * Checks, in order: size (message_too_large), JSON (invalid_json; duplicate
 * keys and \u0000 count as invalid), object (not_object), id, type
 * (missing_field / unknown_type), then each field of a generate
 * (wrong_type, out_of_range, missing_field, no_draft); the first failure is
 * reported; on success err->code is NULL. A field the message type does not
 * define, at the top level or inside speculation / messages[i], is refused
 * (unknown_field, "unknown field 'max_token' (did you mean 'max_tokens'?)")
 * rather than ignored: a typo must not quietly become a default. (The
 * draft_/target_ sampling keys keep their own out_of_range message.) Integer fields may be written as
 * integral reals (3.0, 1e3); an integer id may not. */
int gw_parse(const char *buf, size_t len, const gw_limits *lim, gw_msg *out, gw_error *err);

/* Frees what m owns and zeroes it (NULL and zeroed messages are fine). */
void gw_msg_free(gw_msg *m);

/* ---- serializers ------------------------------------------------------------
 * Each gw_write_* writes one frame, NUL-terminated, into dst[cap] when it fits
 * and returns the length the frame needs (excluding the NUL), like snprintf:
 * a return >= cap means dst holds a truncated prefix only (dst may be NULL
 * with cap 0 to measure). They never allocate. Each gw_json_* returns the
 * same frame malloc'd (caller frees; NULL only when out of memory).
 * id_json is an id from gw_parse (written verbatim); NULL or "" omits "id".
 * Text is always valid JSON: invalid UTF-8 becomes U+FFFD, control bytes
 * (NUL included) are escaped. Non-finite numbers are written as null. */

/* {"type":"start","id":..,"session":"<uuid>","prompt_tokens":N,"queue_ms":x} */
size_t gw_write_start(char *dst, size_t cap, const char *id_json, const char *session_uuid, int prompt_tokens,
                      double queue_ms);
char *gw_json_start(const char *id_json, const char *session_uuid, int prompt_tokens, double queue_ms);

/* {"type":"tokens","id":..,"text":"...","token_ids":[..],"accepted":k,"gamma":g,
 *  "last":"correction"|"bonus"|"sample"} from an ENGINE_EV_TOKENS event.
 * accepted = leading tokens that were accepted drafts; last says what the
 * final token was (sample: a plain step or the first token). When the
 * request asked for logprobs (ev->has_logprobs) also "logprobs":[{"token_id",
 * "logprob","top_logprobs":[{"token_id","logprob"}]}], one per token_ids
 * entry (the target's processed distribution, engine.h; -inf and anything
 * below -9999 written -9999). At most
 * GW_TOKENS_JSON_MAX bytes with the NUL. */
size_t gw_write_tokens(char *dst, size_t cap, const char *id_json, const engine_event *ev);
char *gw_json_tokens(const char *id_json, const engine_event *ev);

/* {"type":"done","id":..,"finish_reason":"length|stop|cancelled|error",
 *  "usage":{"prompt_tokens","completion_tokens","total_tokens"},
 *  "ttft_ms","tpot_ms","alpha","mean_accepted","gamma_used","tokens_per_pass",
 *  "speculation":{"verify_steps","plain_steps","drafted","accepted","rejections",
 *     "tokens","per_position":[{"position":i,"drafted":n,"accepted":m},...],
 *     "fallbacks","probes","draft_failures","kv_resets","draft_ms","target_ms"}}
 * (draft_ms/target_ms: this request's share of the batched model calls it
 * was in — each call's wall time x its rows / the call's rows — so they sum
 * to wall time over concurrent requests; alone, they are the wall time)
 * from an ENGINE_EV_FINISHED event; prompt_tokens comes from the request's
 * started event (the finished event does not carry it). alpha = accepted /
 * (accepted + rejections); mean_accepted = accepted drafts per verify step;
 * gamma_used = drafted per verify step (mean γ); per_position lists positions
 * 1.. up to the last one that was ever drafted. At most GW_DONE_JSON_MAX bytes. */
size_t gw_write_done(char *dst, size_t cap, const char *id_json, int prompt_tokens, const engine_event *ev);
char *gw_json_done(const char *id_json, int prompt_tokens, const engine_event *ev);

/* {"type":"error","id":..,"code":"...","message":"..."} */
size_t gw_write_error(char *dst, size_t cap, const char *id_json, const char *code, const char *message);
char *gw_json_error(const char *id_json, const char *code, const char *message);

/* {"type":"pong"[,"id":..]} */
size_t gw_write_pong(char *dst, size_t cap, const char *id_json);
char *gw_json_pong(const char *id_json);

/* Writes a random (version 4) UUID, 36 chars + NUL, from getrandom or
 * /dev/urandom. Returns 0, or -1 (out zeroed) when no randomness is available. */
int gw_uuid4(char out[37]);

#endif
