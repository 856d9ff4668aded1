/* test_medusa_file.c — the Medusa heads side file: round trip (shared and own
 * output matrices, ResBlock and FFN heads, every parameter and accuracy
 * bit-exact; F16 and Q8_0 heads on the CPU backend against the host
 * forward), refusal of heads
 * trained for another target (naming both identities) and of a model file,
 * shape mismatch, non-finite weights, and fuzzing: every truncation and
 * thousands of random byte flips either load consistently or fail with a
 * message, never crash (run under the sanitizers in the asan build). */
#include "engine/spec/proposers/draft_medusa.h"
#include "tests/spec/spec_util.h"

#include <sys/stat.h>

static uint64_t rs = 777;
static uint64_t rnd(void) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return rs >> 17;
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

static medusa_heads *make(int K, int L, int F, int D, int V, bool own, bool tin, const char *id) {
    char err[256];
    medusa_heads *mh = medusa_heads_create(K, L, F, D, V, own, tin, NULL, err, sizeof(err));
    if (!mh) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    for (size_t i = 0; i < mh->n_params; i++) mh->params[i] = (float)((double)(rnd() % 20001) / 10000.0 - 1.0);
    snprintf(mh->target_id, sizeof(mh->target_id), "%s", id);
    snprintf(mh->target_name, sizeof(mh->target_name), "test target");
    for (int k = 0; k < K; k++)
        for (int j = 0; j < MEDUSA_ACC_K; j++) mh->acc[k][j] = (float)(0.1 * (j + 1) / (k + 1));
    mh->acc_tokens = 1234;
    mh->heldout_loss = 3.5f;
    return mh;
}

static bool same(const medusa_heads *a, const medusa_heads *b) {
    return a->n_heads == b->n_heads && a->n_layers == b->n_layers && a->ffn == b->ffn && a->dim == b->dim && a->n_vocab == b->n_vocab &&
           a->own_output == b->own_output && a->token_input == b->token_input && a->n_params == b->n_params && !strcmp(a->target_id, b->target_id) &&
           !memcmp(a->params, b->params, sizeof(float) * a->n_params) && !memcmp(a->acc, b->acc, sizeof(a->acc)) &&
           a->acc_tokens == b->acc_tokens && a->heldout_loss == b->heldout_loss;
}

int main(void) {
    char tpath[512], dpath[512], hp[512], hp2[512], err[1024];
    tu_model(tpath, sizeof(tpath), "stories260K.gguf");
    tu_model(dpath, sizeof(dpath), "llama2xs-281K.gguf");
    backend *be = backend_cpu_create(1);
    spec_pair *sp = su_load(tpath, dpath, be, 128);
    const char *tid = sp->target_id.id, *did = sp->draft_id.id;
    CHECK(strcmp(tid, did) != 0);
    su_tmp_path(hp, sizeof(hp), "heads.gguf");
    su_tmp_path(hp2, sizeof(hp2), "heads_own.gguf");

    /* round trips */
    medusa_heads *a = make(3, 2, 96, 64, 512, false, true, tid); /* FFN heads: the fuzzing below reads this file */
    CHECK(medusa_heads_save(a, hp, err, sizeof(err)) == 0);
    medusa_heads *b = medusa_heads_load(hp, tid, 64, 512, NULL, err, sizeof(err));
    CHECKF(b && same(a, b), "round trip (FFN, shared, token input): %s", b ? "differs" : err);
    CHECK(b && b->u && b->u[7] == a->u[7] && b->w2 && b->w2[3 * 2 * 64 * 96 - 1] == a->w2[3 * 2 * 64 * 96 - 1]);
    medusa_heads *rb = make(3, 2, 0, 64, 512, false, true, tid);
    CHECK(medusa_heads_save(rb, hp2, err, sizeof(err)) == 0);
    medusa_heads *rb2 = medusa_heads_load(hp2, tid, 64, 512, NULL, err, sizeof(err));
    CHECKF(rb2 && same(rb, rb2) && !rb2->w2, "round trip (ResBlocks, token input): %s", rb2 ? "differs" : err);
    medusa_heads_destroy(rb), medusa_heads_destroy(rb2);
    char e2[256];
    CHECK(!medusa_heads_create(2, 1, 40, 64, 512, false, false, NULL, e2, sizeof e2) && strstr(e2, "multiple of 32"));
    medusa_heads *c = make(2, 1, 0, 64, 512, true, false, tid);
    CHECK(medusa_heads_save(c, hp2, err, sizeof(err)) == 0);
    medusa_heads *c2 = medusa_heads_load(hp2, tid, 64, 512, NULL, err, sizeof(err));
    CHECKF(c2 && same(c, c2), "round trip (own output): %s", c2 ? "differs" : err);
    CHECK(c2 && c2->out && c2->out[5] == c->out[5]);

    /* quantized heads: the file keeps the type, params are the dequantized values */
    for (int qt = 0; qt < 4; qt++) { /* F16, Q8_0 (own output, token input), then both again as FFN heads */
        int type = qt & 1 ? GGML_TYPE_Q8_0 : GGML_TYPE_F16;
        medusa_heads *q = make(2, qt < 2 ? 1 : 2, qt < 2 ? 0 : 64, 64, 512, qt == 1, qt & 1, tid);
        CHECK(medusa_heads_set_type(q, type, NULL, err, sizeof(err)) == 0);
        CHECK(medusa_heads_save(q, hp2, err, sizeof(err)) == 0);
        medusa_heads *q2 = medusa_heads_load(hp2, tid, 64, 512, NULL, err, sizeof(err));
        CHECKF(q2 && q2->wtype == type && same(q, q2), "round trip (%s%s): %s", ggml_type_name(type),
               qt < 2 ? "" : ", FFN", q2 ? "differs" : err);
        if (qt < 2) CHECK(medusa_heads_bytes(q) < medusa_heads_bytes(c) * (qt ? 2 : 1));
        /* on the CPU backend the quantized rows are what the matmuls read */
        medusa_rt *rt = q2 ? medusa_rt_create(q2, sp->target, 2, NULL, err, sizeof(err)) : NULL;
        CHECKF(rt, "medusa_rt_create: %s", err);
        if (rt) {
            float h[2 * 64], lg[2 * 2 * 512], z[512], ys[3 * 64], x[64];
            int32_t tok[2] = {17, 300};
            for (int i = 0; i < 128; i++) h[i] = (float)((double)(rnd() % 2001) / 1000.0 - 1.0);
            float *O = medusa_target_output(sp->target, err, sizeof(err));
            float *E = medusa_target_embedding(sp->target, err, sizeof(err));
            CHECK(medusa_rt_logits(rt, lg, h, tok, 2, 2) == 0);
            int32_t badtok[2] = {17, 512};
            CHECK(!q2->token_input || medusa_rt_logits(rt, lg, h, badtok, 2, 2) == -1);
            CHECK(medusa_rt_logits(rt, lg, h, tok, 2, 2) == 0);
            double num = 0, den = 0;
            for (int k = 0; k < 2; k++)
                for (int r = 0; r < 2; r++) {
                    medusa_head_input(q2, E, tok[r], h + r * 64, x);
                    medusa_head_forward(q2, O, k, x, z, ys, NULL);
                    for (int v = 0; v < 512; v++) {
                        double dd = z[v] - lg[(k * 2 + r) * 512 + v];
                        num += dd * dd, den += (double)z[v] * z[v];
                    }
                }
            fprintf(stderr, "%s%s heads on the CPU backend vs host forward: rel err %.2e\n", ggml_type_name(type),
                    qt < 2 ? "" : " FFN", sqrt(num / den));
            CHECK(sqrt(num / den) < 2e-2);
            free(O);
            free(E);
            medusa_rt_destroy(rt);
        }
        medusa_heads_destroy(q), medusa_heads_destroy(q2);
    }

    /* another target: refused, naming both */
    engine_status st = ENGINE_OK;
    medusa_heads *x = medusa_heads_load(hp, did, 64, 512, &st, err, sizeof(err));
    CHECK(!x && st == ENGINE_ERR_INVALID);
    CHECKF(strstr(err, tid) && strstr(err, did) && strstr(err, "trained for"), "message: %s", err);
    fprintf(stderr, "wrong target: %s\n", err);
    /* the proposer checks it too */
    medusa_heads *wrong = make(2, 1, 0, 64, 512, false, false, did);
    st = ENGINE_OK;
    CHECK(draft_medusa_create(sp, wrong, &st, err, sizeof(err)) == NULL && strstr(err, "trained for") &&
          st == ENGINE_ERR_INVALID);
    medusa_heads_destroy(wrong);
    /* shape mismatch, a model file */
    st = ENGINE_OK;
    CHECK(!medusa_heads_load(hp, NULL, 128, 512, &st, err, sizeof(err)) && strstr(err, "hidden size") &&
          st == ENGINE_ERR_INVALID);
    st = ENGINE_OK;
    CHECK(!medusa_heads_load(tpath, NULL, 0, 0, &st, err, sizeof(err)) && strstr(err, "not a medusa heads file") &&
          st == ENGINE_ERR_INVALID);
    fprintf(stderr, "model file: %s\n", err);

    /* a NaN weight */
    a->params[77] = NAN;
    CHECK(medusa_heads_save(a, hp, err, sizeof(err)) == 0);
    st = ENGINE_OK;
    CHECK(!medusa_heads_load(hp, tid, 64, 512, &st, err, sizeof(err)) && strstr(err, "non-finite") &&
          st == ENGINE_ERR_INVALID);
    a->params[77] = 0.25f;
    CHECK(medusa_heads_save(a, hp, err, sizeof(err)) == 0);

    /* truncations: every length in the header region, then strides */
    size_t n = 0;
    uint8_t *buf = slurp(hp, &n), *cp = malloc(n);
    CHECK(buf && n > 1000);
    int trunc_ok = 1;
    for (size_t len = 0; len < n; len += len < 2048 ? 1 : 97) {
        memcpy(cp, buf, len);
        err[0] = 0;
        st = ENGINE_OK;
        medusa_heads *t = medusa_heads_load_mem(cp, len, tid, 64, 512, &st, err, sizeof(err));
        if (t || !err[0] || st != ENGINE_ERR_INVALID) trunc_ok = 0;
        medusa_heads_destroy(t);
    }
    CHECK(trunc_ok);
    medusa_heads *full = medusa_heads_load_mem(buf, n, tid, 64, 512, NULL, err, sizeof(err));
    CHECKF(full && same(a, full), "whole buffer: %s", err);
    medusa_heads_destroy(full);

    /* byte flips: load consistently (finite weights, sane shape) or fail with a message */
    int loaded = 0, refused = 0, bad = 0;
    for (int trial = 0; trial < 3000; trial++) {
        memcpy(cp, buf, n);
        int flips = 1 + (int)(rnd() % 4);
        for (int f = 0; f < flips; f++) {
            /* mostly the header, where the structure lives */
            size_t at = rnd() % 3 ? rnd() % 1200 : rnd() % n;
            cp[at] ^= (uint8_t)(1u << (rnd() % 8));
        }
        err[0] = 0;
        st = ENGINE_ERR_BACKEND;
        medusa_heads *t = medusa_heads_load_mem(cp, n, tid, 64, 512, &st, err, sizeof(err));
        if (t) {
            bad += st != ENGINE_OK;
            loaded++;
            for (size_t i = 0; i < t->n_params; i++) bad += !isfinite(t->params[i]);
            bad += t->dim != 64 || t->n_vocab != 512 || t->n_heads < 1 || t->n_heads > MEDUSA_MAX_HEADS;
            medusa_heads_destroy(t);
        } else {
            refused++;
            bad += !err[0] || st != ENGINE_ERR_INVALID; /* a flip is bad input, never a shortage */
        }
    }
    fprintf(stderr, "byte flips: %d loaded, %d refused with a message\n", loaded, refused);
    CHECK(bad == 0);
    CHECK(refused > 100);

    free(buf), free(cp);
    medusa_heads_destroy(a), medusa_heads_destroy(b), medusa_heads_destroy(c), medusa_heads_destroy(c2);
    spec_pair_free(sp);
    backend_destroy(be);
    const char *names[] = {"heads.gguf", "heads_own.gguf"};
    su_tmp_cleanup(names, 2);
    TEST_DONE();
}
