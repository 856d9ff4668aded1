/* test_spec_draft_oom.c — the brief's "draft model OOM" row: when the draft's
 * scratch or KV pool cannot be allocated (the CPU backend's memory cap stands
 * in for a full GPU), the pair still loads, warns, marks draft_oom and decodes
 * plainly — the same tokens as plain greedy decoding; with room for both, the
 * draft loads and speculation runs. A target that does not fit still fails
 * with the reason. */
#include "tests/spec/spec_util.h"

int main(void) {
    char tpath[512], dpath[512];
    tu_model(tpath, sizeof(tpath), "stories260K.gguf");
    tu_model(dpath, sizeof(dpath), "llama2xs-281K.gguf");
    backend *be = backend_cpu_create(1);
    spec_pair_params pp = {.max_ctx = 256, .kv_blocks = 40};
    char err[1024];

    /* what the target alone takes (scratch + KV pool) */
    spec_pair *alone = spec_pair_load(tpath, NULL, be, &pp, NULL, err, sizeof(err));
    CHECK(alone != NULL);
    size_t target_bytes = backend_cpu_memory_used(be);
    spec_pair_free(alone);
    CHECK(backend_cpu_memory_used(be) == 0);

    /* room for the target and part of the draft: the draft is dropped */
    backend_cpu_limit_memory(be, target_bytes + 4096);
    FILE *log = tmpfile();
    spec_pair *sp = spec_pair_load(tpath, dpath, be, &pp, log, err, sizeof(err));
    CHECKF(sp != NULL, "the pair must load without its draft: %s", sp ? "" : err);
    if (sp) {
        CHECK(sp->draft == NULL && sp->dpool == NULL && sp->draft_oom);
        char text[2048] = "";
        rewind(log);
        size_t n = fread(text, 1, sizeof(text) - 1, log);
        text[n] = 0;
        CHECKF(strstr(text, "does not fit in memory") && strstr(text, "decoding without speculation"),
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
    sp = spec_pair_load(tpath, dpath, be, &pp, NULL, err, sizeof(err));
    CHECK(sp && sp->draft && !sp->draft_oom);
    size_t pair_bytes = backend_cpu_memory_used(be);
    CHECK(pair_bytes > target_bytes);
    spec_pair_free(sp);
    fprintf(stderr, "target alone %zu bytes of backend memory, with the draft %zu\n", target_bytes, pair_bytes);

    /* room for the draft's weights and scratch but not its KV pool (allocated last) */
    backend_cpu_limit_memory(be, pair_bytes - 1);
    sp = spec_pair_load(tpath, dpath, be, &pp, NULL, err, sizeof(err));
    CHECKF(sp && !sp->draft && !sp->dpool && sp->draft_oom, "draft KV pool OOM: %s", sp ? "draft kept" : err);
    CHECK(backend_cpu_memory_used(be) == target_bytes); /* the dropped draft's scratch went back */
    spec_pair_free(sp);

    /* no room for the target: a clear failure, not a silent plain server */
    backend_cpu_limit_memory(be, target_bytes / 2);
    sp = spec_pair_load(tpath, dpath, be, &pp, NULL, err, sizeof(err));
    CHECKF(sp == NULL && strstr(err, "memory"), "target OOM: %s", sp ? "loaded" : err);
    fprintf(stderr, "target OOM: %s\n", err);
    spec_pair_free(sp);
    backend_destroy(be);
    TEST_DONE();
}
