/* test_tokenizer_vectors.c — llama.cpp's llama-spm tokenizer vectors: every
 * .inp string must encode to exactly its .out line (no BOS), and decode back
 * to itself. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/testutil.h"
#include "tests/tokenizer/vectors.h"

int main(void) {
    const char *models = getenv("SPECD_MODELS");
    if (!models) SKIP("SPECD_MODELS not set");
    char path[4096], inp_path[4200], out_path[4200], err[512];
    snprintf(path, sizeof path, "%s/tokenizer-vectors/ggml-vocab-llama-spm.gguf", models);
    snprintf(inp_path, sizeof inp_path, "%s.inp", path);
    snprintf(out_path, sizeof out_path, "%s.out", path);

    gguf_file *g = gguf_open(path, NULL, err, sizeof err);
    if (!g) SKIP("cannot open %s: %s", path, err);
    tokenizer *t = tok_create(g, err, sizeof err);
    CHECKF(t != NULL, "tok_create: %s", err);
    if (!t) TEST_DONE();
    gguf_close(g); /* the tokenizer must not depend on the mapping */
    CHECK(tok_n_vocab(t) == 32000);
    CHECK(tok_bos(t) == 1 && tok_eos(t) == 2 && tok_unk(t) == 0);
    CHECK(tok_add_bos(t) && !tok_add_eos(t) && tok_add_space_prefix(t));

    size_t inp_len, out_len;
    char *inp = vec_read_all(inp_path, &inp_len);
    char *outs = vec_read_all(out_path, &out_len);
    CHECKF(inp && outs, "cannot read %s / %s", inp_path, out_path);
    if (!inp || !outs) TEST_DONE();

    /* The .inp is a sequence of "<string>\n__ggml_vocab_test__\n": each
     * string ends right before the newline that precedes the separator line,
     * so a string may itself end with (or be) newlines. */
    vec_iter it;
    vec_init(&it, inp, inp_len, outs, out_len);
    int n_strings = 0, n_match = 0;
    int32_t ids[8192], want[8192];
    static char dec[65536];
    const char *cur;
    size_t slen;
    int nw;
    while (vec_next(&it, &cur, &slen, want, 8192, &nw) == 1) {
        int n = tok_encode(t, cur, slen, false, false, ids, 8192);
        bool same = vec_same(n_strings, slen, want, nw, ids, n);
        CHECKF(same, "vector %d", n_strings);
        n_match += same;

        int dn = tok_decode(t, ids, n, dec, sizeof dec, 0);
        CHECKF(dn == (int)slen && memcmp(dec, cur, slen) == 0,
               "vector %d: decode(encode(s)) != s ('%.*s' vs '%.*s')", n_strings,
               dn < 0 ? 0 : dn, dec, (int)slen, cur);

        /* with BOS: same ids after it; decode drops the BOS and the prefix */
        int32_t ids2[8193];
        int n2 = tok_encode(t, cur, slen, true, false, ids2, 8193);
        CHECK(n2 == n + 1 && ids2[0] == 1 && memcmp(ids2 + 1, ids, (size_t)n * sizeof *ids) == 0);
        dn = tok_decode(t, ids2, n2, dec, sizeof dec, 0);
        CHECKF(dn == (int)slen && memcmp(dec, cur, slen) == 0, "vector %d: BOS round trip", n_strings);

        n_strings++;
    }
    vec_finish(&it);
    CHECKF(n_strings == 46, "expected 46 vectors, parsed %d", n_strings);
    fprintf(stderr, "%d/%d vectors match\n", n_match, n_strings);

    free(inp);
    free(outs);
    tok_destroy(t);
    TEST_DONE();
}
