/* penalty_fields.c — presence/frequency/repetition penalties and logit_bias
 * from a request object (see penalty_fields.h). */
#include "gateway/penalty_fields.h"

#include <stdarg.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const gw_penalty_keys[] = {"presence_penalty", "frequency_penalty", "repetition_penalty",
                                       "repeat_penalty", "repeat_last_n", "logit_bias"};
const int gw_n_penalty_keys = (int)(sizeof(gw_penalty_keys) / sizeof(gw_penalty_keys[0]));

static int pf_fail(gw_field_error *fe, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int pf_fail(gw_field_error *fe, const char *code, const char *param, const char *fmt, ...) {
    fe->code = code;
    snprintf(fe->param, sizeof fe->param, "%s", param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fe->message, sizeof fe->message, fmt, ap);
    va_end(ap);
    return -1;
}

static json_t *pf_field(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_null(v) ? NULL : v;
}

/* A number field in [lo, hi]; absent keeps *out. */
static int pf_num(json_t *o, const char *k, double lo, double hi, float *out, gw_field_error *fe) {
    json_t *v = pf_field(o, k);
    if (!v) return 0;
    if (!json_is_number(v)) return pf_fail(fe, GW_ERR_WRONG_TYPE, k, "'%s' must be a number", k);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return pf_fail(fe, GW_ERR_OUT_OF_RANGE, k, "'%s' must be in [%g, %g], got %g", k, lo, hi, x);
    *out = (float)x;
    return 0;
}

static int pf_bias_value(json_t *v, float *out, gw_field_error *fe) {
    if (json_is_false(v)) {
        *out = -100.0f;
        return 0;
    }
    if (!json_is_number(v) || !(json_number_value(v) >= -100 && json_number_value(v) <= 100))
        return pf_fail(fe, GW_ERR_OUT_OF_RANGE, "logit_bias", "'logit_bias' values must be numbers in [-100, 100] (or "
                       "false: -100)");
    *out = (float)json_number_value(v);
    return 0;
}

static int pf_bias_id(const char *s, int64_t i, bool is_str, int32_t *out, gw_field_error *fe) {
    if (is_str) {
        char *end;
        long long x = strtoll(s, &end, 10);
        if (!*s || *end) return pf_fail(fe, GW_ERR_OUT_OF_RANGE, "logit_bias", "'logit_bias' keys must be token ids, got '%.40s'", s);
        i = x;
    }
    if (i < 0 || i > INT32_MAX) return pf_fail(fe, GW_ERR_OUT_OF_RANGE, "logit_bias", "'logit_bias' token id %lld is out of range", (long long)i);
    *out = (int32_t)i;
    return 0;
}

static int pf_logit_bias(json_t *v, engine_request *req, sampler_bias **bias, gw_field_error *fe) {
    size_t n = json_is_object(v) ? json_object_size(v) : json_is_array(v) ? json_array_size(v) : 0;
    if (!json_is_object(v) && !json_is_array(v))
        return pf_fail(fe, GW_ERR_WRONG_TYPE, "logit_bias", "'logit_bias' must be an object of token id -> bias (or an array of "
                       "[id, bias] pairs)");
    if (n == 0) return 0;
    if (n > SAMPLER_MAX_BIAS)
        return pf_fail(fe, GW_ERR_OUT_OF_RANGE, "logit_bias", "'logit_bias' has %zu entries, at most %d", n, SAMPLER_MAX_BIAS);
    sampler_bias *b = malloc(n * sizeof *b);
    if (!b) return pf_fail(fe, GW_ERR_INTERNAL, "logit_bias", "out of memory");
    size_t k = 0;
    if (json_is_object(v)) {
        const char *key;
        json_t *val;
        json_object_foreach(v, key, val) {
            if (pf_bias_id(key, 0, true, &b[k].id, fe) || pf_bias_value(val, &b[k].bias, fe)) goto fail;
            k++;
        }
    } else {
        json_t *pair;
        json_array_foreach(v, k, pair) {
            if (!json_is_array(pair) || json_array_size(pair) != 2 || !json_is_integer(json_array_get(pair, 0))) {
                pf_fail(fe, GW_ERR_WRONG_TYPE, "logit_bias", "'logit_bias[%zu]' must be an [id, bias] pair", k);
                goto fail;
            }
            if (pf_bias_id(NULL, json_integer_value(json_array_get(pair, 0)), false, &b[k].id, fe) ||
                pf_bias_value(json_array_get(pair, 1), &b[k].bias, fe))
                goto fail;
        }
        k = n;
    }
    *bias = b;
    req->sc.logit_bias = b;
    req->sc.n_logit_bias = (int)k;
    return 0;
fail:
    free(b);
    return -1;
}

int gw_penalties_parse(json_t *obj, engine_request *req, sampler_bias **bias, gw_field_error *fe) {
    sampler_config *sc = &req->sc;
    if (pf_num(obj, "presence_penalty", -2, 2, &sc->presence_penalty, fe) ||
        pf_num(obj, "frequency_penalty", -2, 2, &sc->frequency_penalty, fe))
        return -1;
    json_t *rp = pf_field(obj, "repetition_penalty"), *rl = pf_field(obj, "repeat_penalty");
    if (rp && rl && !json_equal(rp, rl))
        return pf_fail(fe, GW_ERR_OUT_OF_RANGE, "repeat_penalty", "'repetition_penalty' and 'repeat_penalty' (its "
                       "llama.cpp name) differ: give one");
    float r = 1.0f;
    if (pf_num(obj, rp ? "repetition_penalty" : "repeat_penalty", 0.0001, 100, &r, fe)) return -1;
    sc->repeat_penalty = r;
    json_t *ln = pf_field(obj, "repeat_last_n");
    if (ln) {
        if (!json_is_integer(ln) || json_integer_value(ln) < -1 || json_integer_value(ln) > (1 << 24))
            return pf_fail(fe, GW_ERR_OUT_OF_RANGE, "repeat_last_n", "'repeat_last_n' must be an integer in [-1, %d] "
                           "(-1 = the whole sequence; default %d)", 1 << 24, SAMPLER_LAST_N_DEFAULT);
        /* llama.cpp's 0 turns the penalties off */
        sc->penalty_last_n = (int)json_integer_value(ln);
        if (sc->penalty_last_n == 0) sc->repeat_penalty = 1.0f, sc->presence_penalty = sc->frequency_penalty = 0.0f;
    }
    json_t *lb = pf_field(obj, "logit_bias");
    return lb ? pf_logit_bias(lb, req, bias, fe) : 0;
}
