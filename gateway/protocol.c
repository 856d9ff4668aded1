/* protocol.c — /v1/stream frames: the jansson-based parser/validator of client
 * messages and the non-allocating writer of server messages (see protocol.h). */
#include "gateway/protocol.h"

#include "gateway/fields.h"
#include "gateway/json_schema.h"
#include "gateway/penalty_fields.h"
#include "policy/suggest.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

const char *gw_msg_type_name(gw_msg_type t) {
    switch (t) {
    case GW_MSG_GENERATE: return "generate";
    case GW_MSG_CANCEL: return "cancel";
    case GW_MSG_PING: return "ping";
    }
    return "?";
}

static const char *const role_names[] = {"system", "user", "assistant"};

/* The fields each message defines (anything else is refused as unknown_field).
 * A new field goes into its list here and gets parsed in parse_generate. */
static const char *const generate_fields[] = {"type",  "id",    "prompt", "messages",    "max_tokens",
                                              "temperature", "top_p", "top_k", "min_p", "seed",
                                              "stop",  "speculation", "content_type", "grammar",
                                              "response_format", "prefix_cache", "learn", "logprobs", "top_logprobs",
                                              /* penalty_fields.c (gw_penalty_keys) */
                                              "presence_penalty", "frequency_penalty", "repetition_penalty",
                                              "repeat_penalty", "repeat_last_n", "logit_bias"};
static const char *const control_fields[] = {"type", "id"}; /* cancel, ping */
static const char *const speculation_fields[] = {"mode",        "method",     "verify",    "gamma", "adaptive",
                                                 "tree",        "tree_budget", "tree_depth", "tree_topk"};
static const char *const message_fields[] = {"role", "content", "name"}; /* name: OpenAI's, not rendered */
#define NFIELDS(a) ((int)(sizeof(a) / sizeof((a)[0])))

const char *gw_role_name(gw_role r) {
    return (unsigned)r < sizeof(role_names) / sizeof(role_names[0]) ? role_names[r] : "?";
}

/* ---- writer: bounded output, counts what it would need ---------------------- */

typedef struct {
    char *dst;
    size_t cap, len;
} wbuf;

static void w_bytes(wbuf *w, const void *s, size_t n) {
    if (w->len < w->cap) {
        size_t k = w->cap - w->len < n ? w->cap - w->len : n;
        memcpy(w->dst + w->len, s, k);
    }
    w->len += n;
}

static void w_str(wbuf *w, const char *s) { w_bytes(w, s, strlen(s)); }

static size_t w_end(wbuf *w) {
    if (w->cap) w->dst[w->len < w->cap ? w->len : w->cap - 1] = '\0';
    return w->len;
}

static void w_i64(wbuf *w, long long v) {
    char b[32];
    w_bytes(w, b, (size_t)snprintf(b, sizeof(b), "%lld", v));
}

static void w_u64(wbuf *w, uint64_t v) {
    char b[32];
    w_bytes(w, b, (size_t)snprintf(b, sizeof(b), "%llu", (unsigned long long)v));
}

/* A JSON number with at most `decimals` fractional digits, trailing zeros
 * trimmed; null when not finite (JSON has no NaN/inf). */
static void w_num(wbuf *w, double x, int decimals) {
    char b[64];
    if (!isfinite(x)) {
        w_str(w, "null");
        return;
    }
    if (fabs(x) >= 1e15) {
        w_bytes(w, b, (size_t)snprintf(b, sizeof(b), "%.6e", x));
        return;
    }
    int n = snprintf(b, sizeof(b), "%.*f", decimals, x);
    if (strchr(b, '.')) {
        while (n > 0 && b[n - 1] == '0') n--;
        if (n > 0 && b[n - 1] == '.') n--;
    }
    b[n] = '\0';
    if (strcmp(b, "-0") == 0) b[0] = '0', b[1] = '\0', n = 1;
    w_bytes(w, b, (size_t)n);
}

/* Length (2..4) of the valid UTF-8 sequence that starts with lead byte p[0],
 * or 0; *k = how many bytes from p[0] form the maximal invalid prefix
 * (>= 1), which becomes one U+FFFD (Unicode's "maximal subpart" practice). */
static int utf8_seq(const unsigned char *p, size_t n, size_t *k) {
    unsigned c = p[0], lo = 0x80, hi = 0xBF;
    int need;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) need = 2, lo = 0xA0;
    else if (c == 0xED) need = 2, hi = 0x9F; /* no surrogates */
    else if (c >= 0xE1 && c <= 0xEF) need = 2;
    else if (c == 0xF0) need = 3, lo = 0x90;
    else if (c == 0xF4) need = 3, hi = 0x8F; /* <= U+10FFFF */
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else {
        *k = 1;
        return 0;
    }
    int got = 0;
    for (int j = 1; j <= need && (size_t)j < n; j++) {
        unsigned b = p[j];
        if (b < (j == 1 ? lo : 0x80) || b > (j == 1 ? hi : 0xBF)) break;
        got++;
    }
    *k = (size_t)got + 1;
    return got == need ? need + 1 : 0;
}

/* A JSON string literal of s[n]: escapes quotes, backslashes and control bytes,
 * replaces invalid UTF-8 with U+FFFD, copies everything else verbatim. */
static void w_jstr(wbuf *w, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, start = 0;
    w_bytes(w, "\"", 1);
    while (i < n) {
        unsigned c = p[i];
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
            i++;
            continue;
        }
        size_t k = 1;
        if (c >= 0x80) {
            int len = utf8_seq(p + i, n - i, &k);
            if (len) {
                i += (size_t)len;
                continue;
            }
        }
        w_bytes(w, p + start, i - start);
        if (c >= 0x80) {
            w_bytes(w, "\xEF\xBF\xBD", 3);
        } else {
            char e[6] = {'\\', 0};
            size_t en = 2;
            switch (c) {
            case '"': e[1] = '"'; break;
            case '\\': e[1] = '\\'; break;
            case '\n': e[1] = 'n'; break;
            case '\r': e[1] = 'r'; break;
            case '\t': e[1] = 't'; break;
            case '\b': e[1] = 'b'; break;
            case '\f': e[1] = 'f'; break;
            default:
                e[1] = 'u', e[2] = '0', e[3] = '0', e[4] = hex[c >> 4], e[5] = hex[c & 15];
                en = 6;
            }
            w_bytes(w, e, en);
        }
        i += k;
        start = i;
    }
    w_bytes(w, p + start, i - start);
    w_bytes(w, "\"", 1);
}

/* `{"type":"<type>"` plus `,"id":<id_json>` when there is an id. */
static void w_head(wbuf *w, const char *type, const char *id_json) {
    w_str(w, "{\"type\":\"");
    w_str(w, type);
    w_str(w, "\"");
    if (id_json && id_json[0]) {
        w_str(w, ",\"id\":");
        w_str(w, id_json);
    }
}

/* Runs a gw_write_* call (written in terms of dst, cap) twice: measure, then
 * fill a malloc'd buffer of the right size. */
#define GW_JSON_DUP(CALL)                                                                                          \
    do {                                                                                                           \
        char *dst = NULL;                                                                                          \
        size_t cap = 0;                                                                                            \
        cap = (CALL) + 1;                                                                                          \
        dst = malloc(cap);                                                                                         \
        if (!dst) return NULL;                                                                                     \
        (void)(CALL);                                                                                              \
        return dst;                                                                                                \
    } while (0)

/* ---- serializers ------------------------------------------------------------ */

size_t gw_write_start(char *dst, size_t cap, const char *id_json, const char *session_uuid, int prompt_tokens,
                      double queue_ms) {
    wbuf w = {dst, cap, 0};
    w_head(&w, "start", id_json);
    w_str(&w, ",\"session\":");
    const char *s = session_uuid ? session_uuid : "";
    w_jstr(&w, s, strlen(s));
    w_str(&w, ",\"prompt_tokens\":");
    w_i64(&w, prompt_tokens);
    w_str(&w, ",\"queue_ms\":");
    w_num(&w, queue_ms, 3);
    w_str(&w, "}");
    return w_end(&w);
}

char *gw_json_start(const char *id_json, const char *session_uuid, int prompt_tokens, double queue_ms) {
    GW_JSON_DUP(gw_write_start(dst, cap, id_json, session_uuid, prompt_tokens, queue_ms));
}

/* A log probability as written: -inf, NaN and anything below -9999 as -9999
 * (a probability of 0 at float precision), so a frame's size stays bounded. */
static double lp_clamp(float x) { return x >= -9999.0f && x <= 0.0f ? x : x > 0.0f ? 0.0 : -9999.0; }

size_t gw_write_tokens(char *dst, size_t cap, const char *id_json, const engine_event *ev) {
    wbuf w = {dst, cap, 0};
    int text_len = ev->text_len < 0 ? 0 : ev->text_len > ENGINE_TEXT_MAX ? ENGINE_TEXT_MAX : ev->text_len;
    int n = ev->n_tokens < 0 ? 0 : ev->n_tokens > GAMMA_MAX + 1 ? GAMMA_MAX + 1 : ev->n_tokens;
    w_head(&w, "tokens", id_json);
    w_str(&w, ",\"text\":");
    w_jstr(&w, ev->text, (size_t)text_len);
    w_str(&w, ",\"token_ids\":[");
    for (int i = 0; i < n; i++) {
        if (i) w_str(&w, ",");
        w_i64(&w, ev->tokens[i]);
    }
    w_str(&w, "],\"accepted\":");
    w_i64(&w, ev->n_accepted);
    w_str(&w, ",\"t_emit_ms\":");
    w_num(&w, ev->t_emit_ms, 3);
    w_str(&w, ",\"accepted_bytes\":");
    w_i64(&w, ev->text_accepted_len < 0 ? 0 : ev->text_accepted_len > text_len ? text_len : ev->text_accepted_len);
    w_str(&w, ",\"gamma\":");
    w_i64(&w, ev->gamma);
    w_str(&w, ",\"last\":\"");
    w_str(&w, ev->last_is_correction ? "correction" : ev->last_is_bonus ? "bonus" : "sample");
    w_str(&w, "\"");
    if (ev->has_logprobs) { /* one entry per token_ids entry; -inf written -9999 as on the OpenAI endpoints */
        w_str(&w, ",\"logprobs\":[");
        for (int i = 0; i < n; i++) {
            const spec_logprob *l = &ev->lp[i];
            w_str(&w, i ? ",{\"token_id\":" : "{\"token_id\":");
            w_i64(&w, ev->tokens[i]);
            w_str(&w, ",\"logprob\":");
            w_num(&w, lp_clamp(l->logprob), 7);
            w_str(&w, ",\"top_logprobs\":[");
            int nt = l->n_top < 0 ? 0 : l->n_top > SPEC_TOP_LOGPROBS ? SPEC_TOP_LOGPROBS : l->n_top;
            for (int k = 0; k < nt; k++) {
                w_str(&w, k ? ",{\"token_id\":" : "{\"token_id\":");
                w_i64(&w, l->top_id[k]);
                w_str(&w, ",\"logprob\":");
                w_num(&w, lp_clamp(l->top_logprob[k]), 7);
                w_str(&w, "}");
            }
            w_str(&w, "]}");
        }
        w_str(&w, "]");
    }
    w_str(&w, "}");
    return w_end(&w);
}

char *gw_json_tokens(const char *id_json, const engine_event *ev) {
    GW_JSON_DUP(gw_write_tokens(dst, cap, id_json, ev));
}

static double ratio(uint64_t num, uint64_t den) { return den ? (double)num / (double)den : 0.0; }

size_t gw_write_done(char *dst, size_t cap, const char *id_json, int prompt_tokens, const engine_event *ev) {
    wbuf w = {dst, cap, 0};
    const spec_stats *st = &ev->st;
    w_head(&w, "done", id_json);
    w_str(&w, ",\"finish_reason\":\"");
    w_str(&w, gw_finish_name(ev->reason));
    w_str(&w, "\",\"usage\":{\"prompt_tokens\":");
    w_i64(&w, prompt_tokens);
    w_str(&w, ",\"completion_tokens\":");
    w_i64(&w, ev->completion_tokens);
    w_str(&w, ",\"total_tokens\":");
    w_i64(&w, (long long)prompt_tokens + ev->completion_tokens);
    w_str(&w, "},\"ttft_ms\":");
    w_num(&w, ev->ttft_ms, 3);
    w_str(&w, ",\"tpot_ms\":");
    w_num(&w, ev->tpot_ms, 3);
    /* the definitions of spec_stats_alpha / _mean_accepted / _tokens_per_pass */
    w_str(&w, ",\"alpha\":");
    w_num(&w, ratio(st->accepted, st->accepted + st->rejections), 4);
    w_str(&w, ",\"mean_accepted\":");
    w_num(&w, ratio(st->accepted, st->verify_steps), 4);
    w_str(&w, ",\"gamma_used\":");
    w_num(&w, ratio(st->drafted, st->verify_steps), 4);
    w_str(&w, ",\"tokens_per_pass\":");
    w_num(&w, ratio(st->tokens, st->verify_steps + st->plain_steps), 4);
    w_str(&w, ",\"speculation\":{\"verify_steps\":");
    w_u64(&w, st->verify_steps);
    w_str(&w, ",\"plain_steps\":");
    w_u64(&w, st->plain_steps);
    w_str(&w, ",\"drafted\":");
    w_u64(&w, st->drafted);
    w_str(&w, ",\"accepted\":");
    w_u64(&w, st->accepted);
    w_str(&w, ",\"rejections\":");
    w_u64(&w, st->rejections);
    w_str(&w, ",\"tokens\":");
    w_u64(&w, st->tokens);
    w_str(&w, ",\"by_method\":{");
    for (int m = 0; m < SPEC_PROPOSERS; m++) { /* which proposer made the verify steps */
        w_str(&w, m ? ",\"" : "\"");
        w_str(&w, spec_drafter_name(m));
        w_str(&w, "\":{");
        for (int f = 0; f < GW_BY_METHOD_FIELDS; f++) { /* the fields every report shows (fields.h) */
            w_str(&w, f ? ",\"" : "\"");
            w_str(&w, gw_by_method_field[f]);
            w_str(&w, "\":");
            w_u64(&w, gw_by_method_value(&st->by[m], f));
        }
        w_str(&w, "}");
    }
    w_str(&w, "},\"per_position\":[");
    int last = 0;
    for (int i = 0; i < GAMMA_MAX; i++)
        if (st->pos_reached[i]) last = i + 1;
    for (int i = 0; i < last; i++) {
        w_str(&w, i ? ",{\"position\":" : "{\"position\":");
        w_i64(&w, i + 1);
        w_str(&w, ",\"drafted\":");
        w_u64(&w, st->pos_reached[i]);
        w_str(&w, ",\"accepted\":");
        w_u64(&w, st->pos_accepted[i]);
        w_str(&w, "}");
    }
    w_str(&w, "],\"fallbacks\":");
    w_u64(&w, st->fallbacks);
    w_str(&w, ",\"probes\":");
    w_u64(&w, st->probes);
    w_str(&w, ",\"draft_failures\":");
    w_u64(&w, st->draft_failures);
    w_str(&w, ",\"kv_resets\":");
    w_u64(&w, st->kv_resets);
    w_str(&w, ",\"draft_ms\":");
    w_num(&w, st->draft_ms, 3);
    w_str(&w, ",\"target_ms\":");
    w_num(&w, st->target_ms, 3);
    w_str(&w, "}}");
    return w_end(&w);
}

char *gw_json_done(const char *id_json, int prompt_tokens, const engine_event *ev) {
    GW_JSON_DUP(gw_write_done(dst, cap, id_json, prompt_tokens, ev));
}

size_t gw_write_error(char *dst, size_t cap, const char *id_json, const char *code, const char *message) {
    wbuf w = {dst, cap, 0};
    const char *c = code ? code : GW_ERR_INTERNAL, *m = message ? message : "";
    w_head(&w, "error", id_json);
    w_str(&w, ",\"code\":");
    w_jstr(&w, c, strlen(c));
    w_str(&w, ",\"message\":");
    w_jstr(&w, m, strlen(m));
    w_str(&w, "}");
    return w_end(&w);
}

char *gw_json_error(const char *id_json, const char *code, const char *message) {
    GW_JSON_DUP(gw_write_error(dst, cap, id_json, code, message));
}

size_t gw_write_pong(char *dst, size_t cap, const char *id_json) {
    wbuf w = {dst, cap, 0};
    w_head(&w, "pong", id_json);
    w_str(&w, "}");
    return w_end(&w);
}

char *gw_json_pong(const char *id_json) { GW_JSON_DUP(gw_write_pong(dst, cap, id_json)); }

/* ---- uuid ------------------------------------------------------------------- */

int gw_uuid4(char out[37]) {
    unsigned char b[16];
    size_t got = 0;
    while (got < sizeof(b)) {
        ssize_t r = getrandom(b + got, sizeof(b) - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    if (got < sizeof(b)) {
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        got = 0;
        while (fd >= 0 && got < sizeof(b)) {
            ssize_t r = read(fd, b + got, sizeof(b) - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (size_t)r;
        }
        if (fd >= 0) close(fd);
    }
    if (got < sizeof(b)) {
        memset(out, 0, 37);
        return -1;
    }
    b[6] = (unsigned char)((b[6] & 0x0F) | 0x40); /* version 4 */
    b[8] = (unsigned char)((b[8] & 0x3F) | 0x80); /* RFC 4122 variant */
    static const char hex[] = "0123456789abcdef";
    char *o = out;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) *o++ = '-';
        *o++ = hex[b[i] >> 4];
        *o++ = hex[b[i] & 15];
    }
    *o = '\0';
    return 0;
}

/* ---- parser helpers ------------------------------------------------------------ */

static int fail(gw_error *err, const char *code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err->code = code;
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    return -1;
}

#define describe gw_json_describe

/* obj[key], with null treated as absent. */
static json_t *opt(json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return v && !json_is_null(v) ? v : NULL;
}

static int get_string(const json_t *v, const char *field, gw_error *err) {
    char d[48];
    if (!json_is_string(v))
        return fail(err, GW_ERR_WRONG_TYPE, "field '%s' must be a string, got %s", field, describe(v, d, sizeof(d)));
    return 0;
}

static char *dupn(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

static int oom(gw_error *err) { return fail(err, GW_ERR_INTERNAL, "out of memory"); }

/* The id as canonical JSON text into out[GW_ID_JSON_MAX]. */
static int parse_id(const json_t *v, char *out, gw_error *err) {
    char d[48];
    if (json_is_string(v)) {
        size_t n = json_string_length(v);
        if (n < 1 || n > GW_ID_MAX)
            return fail(err, GW_ERR_OUT_OF_RANGE, "field 'id' must be a string of 1..%d bytes or an integer, got %s",
                        GW_ID_MAX, n ? describe(v, d, sizeof(d)) : "an empty string");
        wbuf w = {out, GW_ID_JSON_MAX, 0};
        w_jstr(&w, json_string_value(v), n);
        if (w_end(&w) >= GW_ID_JSON_MAX) abort(); /* invariant: GW_ID_JSON_MAX covers 6 bytes per id byte */
        return 0;
    }
    if (json_is_integer(v)) {
        snprintf(out, GW_ID_JSON_MAX, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return 0;
    }
    return fail(err, GW_ERR_WRONG_TYPE, "field 'id' must be a string or an integer, got %s", describe(v, d, sizeof(d)));
}

/* Draft and target share one sampling config: per-model keys are refused
 * rather than silently ignored. `where` is "" or "speculation.". */
/* Refuses the first key of obj that is not in known[0..n), naming the closest
 * known one when it looks like a typo. where prefixes the field ("speculation."). */
static int reject_unknown(json_t *obj, const char *where, const char *const *known, int n, gw_error *err) {
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        int k = 0;
        while (k < n && strcmp(key, known[k]) != 0) k++;
        if (k < n) continue;
        const char *s = pol_suggest(key, known, n);
        if (s)
            return fail(err, GW_ERR_UNKNOWN_FIELD, "unknown field '%s%.48s' (did you mean '%s%s'?)", where, key, where,
                        s);
        return fail(err, GW_ERR_UNKNOWN_FIELD, "unknown field '%s%.48s'", where, key);
    }
    return 0;
}

static int reject_split_sampling(json_t *obj, const char *where, gw_error *err) {
    static const char *const base[] = {"temperature", "top_p", "top_k", "min_p", "seed"};
    static const char *const pat[] = {"draft_%s", "%s_draft", "target_%s", "%s_target"};
    char key[32];
    for (size_t b = 0; b < sizeof(base) / sizeof(base[0]); b++)
        for (size_t p = 0; p < sizeof(pat) / sizeof(pat[0]); p++) {
            snprintf(key, sizeof(key), pat[p], base[b]);
            if (json_object_get(obj, key))
                return fail(err, GW_ERR_OUT_OF_RANGE,
                            "field '%s%s' is not accepted: draft and target share one sampling config (use '%s')",
                            where, key, base[b]);
        }
    return 0;
}

static int parse_messages(json_t *jm, gw_msg *m, gw_error *err) {
    char d[48], f[48];
    if (!json_is_array(jm))
        return fail(err, GW_ERR_WRONG_TYPE, "field 'messages' must be an array of {role, content} objects, got %s",
                    describe(jm, d, sizeof(d)));
    size_t n = json_array_size(jm);
    if (n == 0) return fail(err, GW_ERR_OUT_OF_RANGE, "field 'messages' must hold at least one message");
    if (n > INT_MAX) return fail(err, GW_ERR_OUT_OF_RANGE, "field 'messages' holds too many messages");
    m->messages = calloc(n, sizeof(*m->messages));
    if (!m->messages) return oom(err);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(jm, i);
        if (!json_is_object(e))
            return fail(err, GW_ERR_WRONG_TYPE, "field 'messages[%zu]' must be an object {role, content}, got %s", i,
                        describe(e, d, sizeof(d)));
        snprintf(f, sizeof(f), "messages[%zu].", i);
        if (reject_unknown(e, f, message_fields, NFIELDS(message_fields), err)) return -1;
        json_t *role = opt(e, "role"), *content = opt(e, "content");
        if (!role) return fail(err, GW_ERR_MISSING_FIELD, "field 'messages[%zu].role' is required", i);
        snprintf(f, sizeof(f), "messages[%zu].role", i);
        if (get_string(role, f, err)) return -1;
        int r = -1;
        for (int k = 0; k < 3; k++)
            if (strcmp(json_string_value(role), role_names[k]) == 0) r = k;
        if (r < 0)
            return fail(err, GW_ERR_OUT_OF_RANGE, "field '%s' must be one of system, user, assistant, got %s", f,
                        describe(role, d, sizeof(d)));
        if (!content) return fail(err, GW_ERR_MISSING_FIELD, "field 'messages[%zu].content' is required", i);
        snprintf(f, sizeof(f), "messages[%zu].content", i);
        if (get_string(content, f, err)) return -1;
        gw_chat_msg *cm = &m->messages[i];
        cm->role = (gw_role)r;
        cm->content_len = json_string_length(content);
        cm->content = dupn(json_string_value(content), cm->content_len);
        m->n_messages = (int)i + 1; /* what gw_msg_free must release */
        if (!cm->content) return oom(err);
    }
    return 0;
}

static int parse_stop(json_t *js, gw_msg *m, gw_error *err) {
    char d[48], f[32];
    json_t *one[1] = {js};
    json_t **items = one;
    size_t n = 1;
    if (json_is_array(js)) {
        n = json_array_size(js);
        if (n > ENGINE_MAX_STOP)
            return fail(err, GW_ERR_OUT_OF_RANGE, "field 'stop' holds at most %d strings, got %zu", ENGINE_MAX_STOP,
                        n);
        items = NULL;
    } else if (!json_is_string(js)) {
        return fail(err, GW_ERR_WRONG_TYPE, "field 'stop' must be a string or an array of strings, got %s",
                    describe(js, d, sizeof(d)));
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = items ? items[i] : json_array_get(js, i);
        if (items) snprintf(f, sizeof(f), "stop");
        else snprintf(f, sizeof(f), "stop[%zu]", i);
        if (get_string(s, f, err)) return -1;
        size_t len = json_string_length(s);
        if (len < 1 || len > ENGINE_STOP_LEN - 1)
            return fail(err, GW_ERR_OUT_OF_RANGE, "field '%s' must be a string of 1..%d bytes, got %zu bytes", f,
                        ENGINE_STOP_LEN - 1, len);
        m->stop_owned[i] = dupn(json_string_value(s), len);
        if (!m->stop_owned[i]) return oom(err);
        m->req.stop[i] = m->stop_owned[i];
    }
    return 0;
}

static int parse_speculation(json_t *js, const gw_limits *lim, gw_msg *m, gw_error *err) {
    char d[48];
    if (!json_is_object(js))
        return fail(err, GW_ERR_WRONG_TYPE, "field 'speculation' must be an object {mode, gamma, adaptive}, got %s",
                    describe(js, d, sizeof(d)));
    if (reject_split_sampling(js, "speculation.", err)) return -1;
    if (reject_unknown(js, "speculation.", speculation_fields, NFIELDS(speculation_fields), err)) return -1;
    gw_field_target t = {.req = &m->req};
    gw_field_error fe;
    if (gw_fields_parse(js, GW_FIELDS_SPECULATION, lim, &t, &fe)) return fail(err, fe.code, "%s", fe.message);
    return 0;
}

/* grammar (GBNF) or response_format (as OpenAI's) into m->grammar, compiled
 * once here so a bad one is refused with its reason. */
static int parse_constraint(json_t *root, const gw_limits *lim, gw_msg *m, gw_error *err) {
    json_t *rf = json_object_get(root, "response_format"), *g = json_object_get(root, "grammar");
    char msg[170]; /* fits the error message after its prefix: js_schema_to_gbnf shortens the path, not the reason */
    js_limits jl = js_default_limits();
    if (lim->schema_max_enum > 0) jl.max_enum = lim->schema_max_enum;
    if (lim->grammar_max_bytes > 0) jl.max_bytes = lim->grammar_max_bytes;
    char *text = NULL;
    if (json_is_null(rf)) rf = NULL;
    if (json_is_null(g)) g = NULL;
    if (rf) {
        json_t *t = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
        const char *ts = json_is_string(t) ? json_string_value(t) : "";
        if (!strcmp(ts, "json_object")) {
            text = strdup(grammar_json_gbnf());
        } else if (!strcmp(ts, "json_schema")) {
            json_t *js = json_object_get(rf, "json_schema"), *sc = json_is_object(js) ? json_object_get(js, "schema") : NULL;
            if (!sc) return fail(err, GW_ERR_MISSING_FIELD, "field 'response_format.json_schema.schema' is required");
            if (!(text = js_schema_to_gbnf_limited(sc, &jl, msg, sizeof msg)))
                return fail(err, GW_ERR_INVALID_GRAMMAR, "JSON Schema not supported: %s", msg);
        } else if (strcmp(ts, "text") != 0) {
            return fail(err, GW_ERR_OUT_OF_RANGE,
                        "field 'response_format' must be {\"type\": \"text\" | \"json_object\" | \"json_schema\"}");
        }
    }
    if (g) {
        if (!json_is_string(g)) {
            free(text);
            return fail(err, GW_ERR_WRONG_TYPE, "field 'grammar' must be a string (GBNF)");
        }
        if (text) {
            free(text);
            return fail(err, GW_ERR_OUT_OF_RANGE, "field 'grammar' cannot be combined with a JSON 'response_format'");
        }
        if (json_string_length(g) == 0)
            return fail(err, GW_ERR_INVALID_GRAMMAR, "field 'grammar' is empty (leave it out for unconstrained output)");
        text = strndup(json_string_value(g), json_string_length(g));
    }
    if (!text) return 0;
    /* compiled off this thread: the engine's compile worker answers a bad one (invalid_grammar) */
    m->grammar = text;
    m->req.grammar = text;
    return 0;
}

static int parse_content_type(json_t *v, gw_msg *m, gw_error *err) {
    if (get_string(v, "content_type", err)) return -1;
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    bool ok = n >= 1 && n < GW_CONTENT_TYPE_MAX;
    for (size_t i = 0; ok && i < n; i++) {
        char c = s[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
             c == '.';
    }
    if (!ok)
        return fail(err, GW_ERR_OUT_OF_RANGE,
                    "field 'content_type' must be 1..%d characters of [A-Za-z0-9_.-] (e.g. chat, code, structured)",
                    GW_CONTENT_TYPE_MAX - 1);
    m->content_type = dupn(s, n);
    if (!m->content_type) return oom(err);
    m->req.content_type = m->content_type;
    return 0;
}

static int parse_generate(json_t *root, const gw_limits *lim, gw_msg *m, gw_error *err) {
    json_t *v;
    if (reject_split_sampling(root, "", err)) return -1;
    if (reject_unknown(root, "", generate_fields, NFIELDS(generate_fields), err)) return -1;

    json_t *jp = opt(root, "prompt"), *jm = opt(root, "messages");
    if (!jp && !jm) return fail(err, GW_ERR_MISSING_FIELD, "one of the fields 'prompt' or 'messages' is required");
    if (jp && jm) return fail(err, GW_ERR_OUT_OF_RANGE, "give either 'prompt' or 'messages', not both");
    if (jp) {
        if (get_string(jp, "prompt", err)) return -1;
        m->prompt_len = json_string_length(jp);
        m->prompt = dupn(json_string_value(jp), m->prompt_len);
        if (!m->prompt) return oom(err);
        m->req.prompt_text = m->prompt;
    } else if (parse_messages(jm, m, err)) {
        return -1;
    }

    gw_field_target t = {.req = &m->req};
    gw_field_error fe;
    if (gw_fields_parse(root, GW_FIELDS_TOP, lim, &t, &fe)) return fail(err, fe.code, "%s", fe.message);
    m->seed_set = t.seed_set;
    if (gw_penalties_parse(root, &m->req, &m->logit_bias, &fe)) return fail(err, fe.code, "%s", fe.message);
    /* logprobs (bool) and top_logprobs (0..SPEC_TOP_LOGPROBS, needs logprobs),
     * as on the chat endpoint; each tokens frame then lists its tokens' */
    char dsc[48];
    if ((v = opt(root, "logprobs"))) {
        if (!json_is_boolean(v))
            return fail(err, GW_ERR_WRONG_TYPE, "field 'logprobs' must be true or false, got %s",
                        gw_json_describe(v, dsc, sizeof(dsc)));
        m->req.logprobs = json_is_true(v);
    }
    if ((v = opt(root, "top_logprobs"))) {
        long long k = json_is_integer(v) ? json_integer_value(v) : -1;
        if (!json_is_integer(v))
            return fail(err, GW_ERR_WRONG_TYPE, "field 'top_logprobs' must be an integer, got %s",
                        gw_json_describe(v, dsc, sizeof(dsc)));
        if (k < 0 || k > SPEC_TOP_LOGPROBS)
            return fail(err, GW_ERR_OUT_OF_RANGE, "field 'top_logprobs' must be an integer in [0, %d], got %s",
                        SPEC_TOP_LOGPROBS, gw_json_describe(v, dsc, sizeof(dsc)));
        if (k > 0 && !m->req.logprobs)
            return fail(err, GW_ERR_OUT_OF_RANGE, "field 'top_logprobs' needs 'logprobs': true");
        m->req.top_logprobs = (int)k;
    }
    if ((v = opt(root, "stop")) && parse_stop(v, m, err)) return -1;
    if ((v = opt(root, "speculation")) && parse_speculation(v, lim, m, err)) return -1;
    if ((v = opt(root, "content_type")) && parse_content_type(v, m, err)) return -1;
    if (parse_constraint(root, lim, m, err)) return -1;

    char msg[160];
    if (!sampler_config_validate(&m->req.sc, msg, sizeof(msg))) /* belt and braces: the checks above cover it */
        return fail(err, GW_ERR_OUT_OF_RANGE, "%s", msg);
    return 0;
}

/* ---- gw_parse ------------------------------------------------------------------ */

int gw_parse(const char *buf, size_t len, const gw_limits *lim, gw_msg *out, gw_error *err) {
    gw_limits dl;
    char d[48];
    memset(out, 0, sizeof(*out));
    err->code = NULL;
    err->message[0] = '\0';
    err->id[0] = '\0';
    if (!lim) {
        dl = gw_limits_default();
        lim = &dl;
    }
    if (lim->max_message_bytes > 0 && len > (size_t)lim->max_message_bytes)
        return fail(err, GW_ERR_MESSAGE_TOO_LARGE, "message of %zu bytes exceeds the limit of %d bytes", len,
                    lim->max_message_bytes);

    json_error_t je;
    json_t *root = json_loadb(buf ? buf : "", buf ? len : 0, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!root) return fail(err, GW_ERR_INVALID_JSON, "invalid JSON at line %d column %d: %s", je.line, je.column, je.text);
    int rc = -1;
    if (!json_is_object(root)) {
        fail(err, GW_ERR_NOT_OBJECT, "a message must be a JSON object, got %s", describe(root, d, sizeof(d)));
        goto done;
    }
    json_t *jid = opt(root, "id");
    if (jid && parse_id(jid, out->id, err)) goto done;
    memcpy(err->id, out->id, sizeof(err->id)); /* later errors are tagged with the id */

    json_t *jt = json_object_get(root, "type");
    if (!jt) {
        fail(err, GW_ERR_MISSING_FIELD, "field 'type' is required (generate, cancel or ping)");
        goto done;
    }
    if (!json_is_string(jt)) {
        fail(err, GW_ERR_WRONG_TYPE, "field 'type' must be a string, got %s", describe(jt, d, sizeof(d)));
        goto done;
    }
    const char *t = json_string_value(jt);
    if (strcmp(t, "generate") == 0) out->type = GW_MSG_GENERATE;
    else if (strcmp(t, "cancel") == 0) out->type = GW_MSG_CANCEL;
    else if (strcmp(t, "ping") == 0) out->type = GW_MSG_PING;
    else {
        fail(err, GW_ERR_UNKNOWN_TYPE, "unknown message type %s (expected generate, cancel or ping)",
             describe(jt, d, sizeof(d)));
        goto done;
    }
    if (out->type != GW_MSG_PING && !out->id[0]) {
        fail(err, GW_ERR_MISSING_FIELD, "field 'id' is required for %s", t);
        goto done;
    }
    if (out->type != GW_MSG_GENERATE && reject_unknown(root, "", control_fields, NFIELDS(control_fields), err))
        goto done;
    if (out->type == GW_MSG_GENERATE && parse_generate(root, lim, out, err)) goto done;
    rc = 0;
done:
    json_decref(root);
    if (rc) gw_msg_free(out);
    return rc;
}

void gw_msg_free(gw_msg *m) {
    if (!m) return;
    free(m->prompt);
    for (int i = 0; i < m->n_messages; i++) free(m->messages[i].content);
    free(m->messages);
    for (int i = 0; i < ENGINE_MAX_STOP; i++) free(m->stop_owned[i]);
    free(m->content_type);
    free(m->grammar);
    free(m->logit_bias);
    free(m->spans);
    memset(m, 0, sizeof(*m));
}
