/* test_spec_eog.c — generation stops on every end-of-generation token the
 * metadata names (tokenizer.ggml.eot_token_id / eom_token_id, as Llama 3's
 * <|eot_id|> and <|eom_id|>), in plain and in speculative decoding, even when
 * the stop token arrives inside an accepted draft run. The model is
 * stories260K with one of its ordinary tokens declared eot (then eom): greedy
 * decoding must end exactly where that token first appears. */
#include "tests/spec/spec_util.h"

/* A copy of src with key set to token id. */
static void write_with_stop(const char *src, const char *dst, const char *key, int32_t id) {
    char err[512];
    gguf_file *f = gguf_open(src, NULL, err, sizeof err);
    if (!f) {
        fprintf(stderr, "gguf_open: %s\n", err);
        exit(1);
    }
    gguf_writer *w = gguf_writer_create();
    gguf_writer_copy_kv(w, f, NULL);
    gguf_writer_set_u32(w, key, (uint32_t)id);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        CHECK(gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data));
    }
    if (gguf_writer_write(w, dst, err, sizeof err) != 0) {
        fprintf(stderr, "gguf_writer_write: %s\n", err);
        exit(1);
    }
    gguf_writer_destroy(w);
    gguf_close(f);
}

static void last_step(spec_seq *s, const spec_step_info *info, void *ctx) { *(spec_step_info *)ctx = *info; }

int main(void) {
    char src[512], path[512];
    tu_model(src, sizeof src, "stories260K.gguf");
    backend *be = backend_cpu_create(1);
    spec_pair *base = su_load(src, NULL, be, 256);
    su_prompt prompts[4];
    int np = su_prompts(base->tok, prompts, 4);
    static const char *const keys[] = {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"};
    int cases = 0;
    for (int k = 0; k < 2; k++)
        for (int pi = 0; pi < np && pi < 2; pi++) {
            int32_t ref[48];
            int nr = su_plain_greedy(base, prompts[pi].ids, prompts[pi].n, 48, ref);
            /* the first token, from position 6 on, that has not appeared before */
            int at = -1;
            for (int i = 6; i < nr && at < 0; i++) {
                bool seen = tok_is_eog(base->tok, ref[i]);
                for (int j = 0; j < i && !seen; j++) seen = ref[j] == ref[i];
                if (!seen) at = i;
            }
            if (at < 0) continue;
            su_tmp_path(path, sizeof path, "stop.gguf");
            write_with_stop(src, path, keys[k], ref[at]);
            spec_pair *sp = su_load(path, path, be, 256); /* the model drafts for itself: long accepted runs */
            CHECK(tok_is_eog(sp->tok, ref[at]));
            for (int gamma = 0; gamma <= 6; gamma += 3) {
                spec_seq_params prm = su_params(0.0f, 1, gamma, false);
                int32_t out[48];
                spec_seq *s = NULL;
                spec_step_info last = {0};
                int n = su_generate(sp, prompts[pi].ids, prompts[pi].n, 48, &prm, out, last_step, &last, &s);
                CHECKF(n == at + 1 && !memcmp(out, ref, sizeof(int32_t) * (size_t)(at + 1)),
                       "%s = %d, gamma %d: generated %d tokens, expected to stop after %d", keys[k], ref[at], gamma,
                       n, at + 1);
                /* the step that produced it says so, and appended nothing after it */
                CHECKF(at == 0 || last.stopped, "%s, gamma %d: the last step does not report the stop", keys[k],
                       gamma);
                CHECK(s && s->n_tokens - s->n_prompt == at + 1);
                spec_seq_free(s);
                cases++;
            }
            spec_pair_free(sp);
            unlink(path);
        }
    fprintf(stderr, "%d stop cases (eot and eom, plain and gamma 3/6 with self-drafting)\n", cases);
    CHECK(cases >= 6);
    spec_pair_free(base);
    su_tmp_cleanup(NULL, 0);
    backend_destroy(be);
    TEST_DONE();
}
