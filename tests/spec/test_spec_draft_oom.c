/* test_spec_draft_oom.c — the brief's "draft model OOM" row: when the draft's
 * scratch or KV pool cannot be allocated (the CPU backend's memory cap stands
 * in for a full GPU), the pair still loads, warns, marks draft_oom and decodes
 * plainly — the same tokens as plain greedy decoding; with room for both, the
 * draft loads and speculation runs. A target that does not fit still fails
 * with the reason. A draft that fails for any other reason (not a GGUF file, a
 * different vocabulary) still fails the load with its own error, memory cap or
 * not: only a load whose status is ENGINE_ERR_OOM (errkind.h) counts as a
 * shortage, and its message still says "out of memory". */
#include "engine/errkind.h"
#include "tests/spec/spec_util.h"

/* Whether a load said it ran out of memory, by its status and in its words. */
static bool says_oom(engine_status st, const char *err) {
    return st == ENGINE_ERR_OOM && strstr(err, "out of memory") != NULL;
}

/* The producers' side of errkind.h: allocation failures of model loading and
 * KV pool creation are ENGINE_ERR_OOM, bad input is ENGINE_ERR_INVALID. be's
 * cap must leave too little for tpath's scratch. */
static void check_err_kinds(backend *be, const char *tpath, const char *junk, const char *cut) {
    char err[1024];
    engine_status st = ENGINE_OK;
    model_params mp = {.max_batch = 512, .max_ctx = 256};
    model *m = model_load(tpath, be, &mp, &st, err, sizeof(err));
    CHECKF(!m && says_oom(st, err) && strstr(err, tpath), "model OOM: %s (%s)", m ? "loaded" : err,
           engine_status_name(st));
    model_free(m);
    kv_pool *p = kv_pool_create_on(be, 64, 1024, 64, 16, 4096, &st, err, sizeof(err));
    CHECKF(!p && says_oom(st, err), "kv pool OOM: %s (%s)", p ? "created" : err, engine_status_name(st));
    kv_pool_destroy(p);
    p = kv_pool_create(0, 64, 64, 16, 4, &st, err, sizeof(err));
    CHECKF(!p && st == ENGINE_ERR_INVALID, "kv pool bad shape: %s (%s)", p ? "created" : err, engine_status_name(st));
    kv_pool_destroy(p);
    const char *bad[] = {junk, cut, "/nonexistent/specd-model.gguf"};
    for (int i = 0; i < 3; i++) {
        m = model_load(bad[i], be, &mp, &st, err, sizeof(err));
        CHECKF(!m && st == ENGINE_ERR_INVALID && strstr(err, bad[i]), "%s: %s (%s)", bad[i], m ? "loaded" : err,
               engine_status_name(st));
        model_free(m);
    }
}

/* A copy of the first n bytes of src at dst (a GGUF cut short). */
static void copy_head(const char *dst, const char *src, size_t n) {
    static char buf[1 << 16];
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    if (!in || !out) SKIP("cannot copy %s to %s", src, dst);
    size_t got = fread(buf, 1, n < sizeof(buf) ? n : sizeof(buf), in);
    fwrite(buf, 1, got, out);
    fclose(in);
    fclose(out);
}

int main(void) {
    char tpath[512], dpath[512];
    tu_model(tpath, sizeof(tpath), "stories260K.gguf");
    tu_model(dpath, sizeof(dpath), "llama2xs-281K.gguf");
    backend *be = backend_cpu_create(1);
    spec_pair_params pp = {.max_ctx = 256, .kv_blocks = 40};
    char err[1024];

    /* what the target alone takes (scratch + KV pool) */
    spec_pair *alone = spec_pair_load(tpath, NULL, be, &pp, NULL, NULL, err, sizeof(err));
    CHECK(alone != NULL);
    size_t target_bytes = backend_cpu_memory_used(be);
    spec_pair_free(alone);
    CHECK(backend_cpu_memory_used(be) == 0);

    /* room for the target and part of the draft: the draft is dropped */
    backend_cpu_limit_memory(be, target_bytes + 4096);
    FILE *log = tmpfile();
    engine_status st = ENGINE_ERR_BACKEND;
    spec_pair *sp = spec_pair_load(tpath, dpath, be, &pp, log, &st, err, sizeof(err));
    CHECKF(sp != NULL && st == ENGINE_OK, "the pair must load without its draft: %s", sp ? "" : err);
    if (sp) {
        CHECK(su_draft(sp) == NULL && su_dpool(sp) == NULL && sp->draft_oom);
        char text[2048] = "";
        rewind(log);
        size_t n = fread(text, 1, sizeof(text) - 1, log);
        text[n] = 0;
        CHECKF(strstr(text, "does not fit in memory") && strstr(text, "decoding without speculation") &&
               strstr(text, "out of memory"),
               "no warning on the log: '%s'", text);
        fprintf(stderr, "log: %s", text);
        /* plain decoding, token for token, with speculation asked for */
        su_prompt prompts[5];
        int np = su_prompts(sp->tok, prompts, 5);
        for (int i = 0; i < np; i++) {
            int32_t ref[32], out[32];
            int nr = su_plain_greedy(sp, prompts[i].ids, prompts[i].n, 32, ref);
            spec_seq_params prm = su_params(0.0f, 1, 4, false);
            spec_seq *s = NULL;
            int no = su_generate(sp, prompts[i].ids, prompts[i].n, 32, &prm, out, NULL, NULL, &s);
            CHECKF(no == nr && !memcmp(out, ref, sizeof(int32_t) * (size_t)nr), "prompt %d: output differs", i);
            CHECK(s && s->st.verify_steps == 0 && s->st.plain_steps > 0);
            spec_seq_free(s);
        }
        spec_pair_free(sp);
    }
    fclose(log);

    /* room for both: the draft is there and drafts */
    backend_cpu_limit_memory(be, 0);
    sp = spec_pair_load(tpath, dpath, be, &pp, NULL, &st, err, sizeof(err));
    CHECK(sp && su_draft(sp) && !sp->draft_oom && st == ENGINE_OK);
    size_t pair_bytes = backend_cpu_memory_used(be);
    CHECK(pair_bytes > target_bytes);
    spec_pair_free(sp);
    fprintf(stderr, "target alone %zu bytes of backend memory, with the draft %zu\n", target_bytes, pair_bytes);

    /* room for the draft's weights and scratch but not its KV pool (allocated last) */
    backend_cpu_limit_memory(be, pair_bytes - 1);
    sp = spec_pair_load(tpath, dpath, be, &pp, NULL, &st, err, sizeof(err));
    CHECKF(sp && !su_draft(sp) && !su_dpool(sp) && sp->draft_oom && st == ENGINE_OK, "draft KV pool OOM: %s",
           sp ? "draft kept" : err);
    CHECK(backend_cpu_memory_used(be) == target_bytes); /* the dropped draft's scratch went back */
    spec_pair_free(sp);

    /* no room for the target: a clear failure, not a silent plain server */
    backend_cpu_limit_memory(be, target_bytes / 2);
    sp = spec_pair_load(tpath, dpath, be, &pp, NULL, &st, err, sizeof(err));
    CHECKF(sp == NULL && says_oom(st, err), "target OOM: %s (%s)", sp ? "loaded" : err, engine_status_name(st));
    fprintf(stderr, "target OOM: %s\n", err);
    spec_pair_free(sp);

    /* drafts that are wrong, not too big: the load fails with the draft's own
     * error, with the cap that drops a draft too big and without it */
    char junk[512], cut[512], apath[512], want[1024];
    su_tmp_path(junk, sizeof(junk), "not-a-model.gguf");
    su_tmp_path(cut, sizeof(cut), "cut-short.gguf");
    FILE *jf = fopen(junk, "wb");
    if (!jf) SKIP("cannot write %s", junk);
    fputs("this is a text file, not a GGUF model\n", jf);
    fclose(jf);
    copy_head(cut, dpath, 4096);
    check_err_kinds(be, tpath, junk, cut);
    const size_t caps[] = {target_bytes + 4096, 0};
    const char *bad[] = {junk, cut};
    for (int c = 0; c < 2; c++) {
        for (int i = 0; i < 2; i++) {
            backend_cpu_limit_memory(be, 0);
            engine_status wst = ENGINE_OK;
            model *m = model_load(bad[i], be, NULL, &wst, want, sizeof(want)); /* what the draft's load says */
            CHECK(m == NULL && wst == ENGINE_ERR_INVALID);
            model_free(m);
            backend_cpu_limit_memory(be, caps[c]);
            sp = spec_pair_load(tpath, bad[i], be, &pp, NULL, &st, err, sizeof(err));
            CHECKF(sp == NULL && !strcmp(err, want) && st == ENGINE_ERR_INVALID, "bad draft %s (cap %zu): %s (%s)",
                   bad[i], caps[c], sp ? (sp->draft_oom ? "dropped as OOM" : "loaded") : err, engine_status_name(st));
            spec_pair_free(sp);
            CHECK(backend_cpu_memory_used(be) == 0);
        }
    }
    fprintf(stderr, "bad draft: %s\n", err);
    /* another vocabulary: refused, as spec_pair's test checks, and not a shortage */
    backend_cpu_limit_memory(be, 0);
    tu_model(apath, sizeof(apath), "aidreams260K.gguf");
    sp = spec_pair_load(tpath, apath, be, &pp, NULL, &st, err, sizeof(err));
    CHECKF(sp == NULL && strstr(err, "refused") && strstr(err, "differs") && st == ENGINE_ERR_INVALID,
           "draft with another vocabulary: %s", sp ? "loaded" : err);
    spec_pair_free(sp);
    const char *tmp[] = {"not-a-model.gguf", "cut-short.gguf"};
    su_tmp_cleanup(tmp, 2);
    backend_destroy(be);
    TEST_DONE();
}
