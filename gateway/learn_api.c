/* learn_api.c — the "learn" stats object and POST /admin/learn's body and
 * answer (see learn_api.h). */
#include "gateway/learn_api.h"

#include "gateway/fields.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

json_t *gw_learn_json(const engine_learn_stats *ls, bool admin) {
    json_t *o = json_object(), *r = json_object();
    if (!o || !r) {
        json_decref(o), json_decref(r);
        return NULL;
    }
    json_object_set_new(o, "enabled", json_boolean(ls->enabled));
    json_object_set_new(o, "paused", json_boolean(ls->paused));
    json_object_set_new(o, "state", json_string(ls->state[0] ? ls->state : "off"));
    json_object_set_new(o, "head_version", json_integer(ls->head_version));
    json_object_set_new(o, "has_head", json_boolean(ls->has_head));
    if (admin) json_object_set_new(o, "head_path", json_string(ls->head_path));
    json_object_set_new(r, "samples", json_integer(ls->ring_samples));
    json_object_set_new(r, "positions", json_integer((json_int_t)ls->ring_positions));
    json_object_set_new(r, "bytes", json_integer((json_int_t)ls->ring_bytes));
    json_object_set_new(r, "cap", json_integer((json_int_t)ls->ring_cap));
    json_object_set_new(r, "pushed", json_integer((json_int_t)ls->ring_pushed));
    json_object_set_new(r, "dropped", json_integer((json_int_t)ls->ring_dropped));
    json_object_set_new(o, "ring", r);
    json_object_set_new(o, "opted_out", json_integer((json_int_t)ls->opted_out));
    json_object_set_new(o, "swaps", json_integer((json_int_t)ls->swaps));
    json_object_set_new(o, "rejected", json_integer((json_int_t)ls->rejected));
    json_object_set_new(o, "rollbacks", json_integer((json_int_t)ls->rollbacks));
    json_object_set_new(o, "train_positions", json_integer((json_int_t)ls->train_positions));
    json_object_set_new(o, "train_pos_per_s", json_real(ls->train_pos_per_s));
    json_object_set_new(o, "train_cpu_share", json_real(ls->train_cpu_share));
    json_object_set_new(o, "rounds", json_integer(ls->rounds));
    json_object_set_new(o, "live_accept", json_real(ls->live_accept));
    json_object_set_new(o, "cand_accept", json_real(ls->cand_accept));
    json_object_set_new(o, "eval_rows", json_integer((json_int_t)ls->eval_rows));
    json_object_set_new(o, "message", json_string(ls->message));
    return o;
}

static char *dump(json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* 400 {"ok": false, "code", "message"}. */
static char *refuse(int *status, const char *code, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    *status = 400;
    return dump(json_pack("{s:b,s:s,s:s}", "ok", 0, "code", code, "message", msg));
}

static const char *const ops[] = {"pause", "resume", "save", "rollback", "status"};
#define N_OPS ((int)(sizeof ops / sizeof ops[0]))

char *gw_learn_admin(engine *e, const char *body, size_t len, int *status) {
    json_error_t je;
    json_t *root = len ? json_loadb(body, len, JSON_REJECT_DUPLICATES, &je) : NULL;
    char d[64];
    if (!root) {
        if (!len) return refuse(status, GW_ERR_INVALID_JSON, "the body must be a JSON object: {\"op\": \"pause\"}");
        return refuse(status, GW_ERR_INVALID_JSON, "invalid JSON at line %d column %d: %s", je.line, je.column, je.text);
    }
    char *out = NULL;
    if (!json_is_object(root)) {
        out = refuse(status, GW_ERR_NOT_OBJECT, "the body must be a JSON object, got %s",
                     gw_json_describe(root, d, sizeof d));
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "op") && strcmp(key, "path")) {
            out = refuse(status, GW_ERR_UNKNOWN_FIELD, "unknown field '%.48s' (op, path)", key);
            goto done;
        }
    }
    json_t *jop = json_object_get(root, "op"), *jpath = json_object_get(root, "path");
    if (!jop) {
        out = refuse(status, GW_ERR_MISSING_FIELD, "field 'op' is required: pause, resume, save, rollback or status");
        goto done;
    }
    if (!json_is_string(jop)) {
        out = refuse(status, GW_ERR_WRONG_TYPE, "field 'op' must be a string, got %s",
                     gw_json_describe(jop, d, sizeof d));
        goto done;
    }
    const char *op = json_string_value(jop);
    int k = 0;
    while (k < N_OPS && strcmp(op, ops[k])) k++;
    if (k == N_OPS) {
        out = refuse(status, GW_ERR_OUT_OF_RANGE,
                     "field 'op' must be one of pause, resume, save, rollback, status, got %s",
                     gw_json_describe(jop, d, sizeof d));
        goto done;
    }
    bool save = !strcmp(op, "save");
    if (jpath && !save) {
        out = refuse(status, GW_ERR_UNKNOWN_FIELD, "field 'path' is for op 'save' only");
        goto done;
    }
    if (save && !jpath) {
        out = refuse(status, GW_ERR_MISSING_FIELD, "op 'save' needs 'path': the file to copy the live head to");
        goto done;
    }
    if (save && (!json_is_string(jpath) || !json_string_length(jpath) ||
                 json_string_length(jpath) > GW_LEARN_PATH_MAX ||
                 strlen(json_string_value(jpath)) != json_string_length(jpath))) {
        out = refuse(status, json_is_string(jpath) ? GW_ERR_OUT_OF_RANGE : GW_ERR_WRONG_TYPE,
                     "field 'path' must be a file name of 1 to %d bytes (no NUL), got %s", GW_LEARN_PATH_MAX,
                     gw_json_describe(jpath, d, sizeof d));
        goto done;
    }

    char msg[512] = "";
    int rc = 0;
    if (strcmp(op, "status") != 0) rc = engine_learn_control(e, op, save ? json_string_value(jpath) : NULL, msg, sizeof msg);
    engine_learn_stats ls;
    engine_get_learn_stats(e, &ls);
    if (rc == 0 && !msg[0]) snprintf(msg, sizeof msg, "%s", ls.message[0] ? ls.message : ls.state);
    *status = rc == 0 ? 200 : 409;
    json_t *o = json_object();
    if (o) {
        json_object_set_new(o, "ok", json_boolean(rc == 0));
        if (rc) json_object_set_new(o, "code", json_string("learn_refused"));
        json_object_set_new(o, "message", json_string(msg));
        json_t *l = gw_learn_json(&ls, true);
        if (l) json_object_set_new(o, "learn", l);
    }
    out = dump(o);
done:
    json_decref(root);
    return out;
}
