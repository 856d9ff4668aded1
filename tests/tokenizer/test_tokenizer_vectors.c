/* test_tokenizer_vectors.c — llama.cpp's llama-spm tokenizer vectors: every
 * .inp string must encode to exactly its .out line (no BOS), and decode back
 * to itself. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/tokenizer.h"
#include "tests/testutil.h"

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) buf = realloc(buf, (cap *= 2) + 1);
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

int main(void) {
    const char *models = getenv("SPECD_MODELS");
    if (!models) SKIP("SPECD_MODELS not set");
    char path[4096], inp_path[4200], out_path[4200], err[512];
    snprintf(path, sizeof path, "%s/tokenizer-vectors/ggml-vocab-llama-spm.gguf", models);
    snprintf(inp_path, sizeof inp_path, "%s.inp", path);
    snprintf(out_path, sizeof out_path, "%s.out", path);

    gguf_file *g = gguf_open(path, err, sizeof err);
    if (!g) SKIP("cannot open %s: %s", path, err);
    tokenizer *t = tok_create(g, err, sizeof err);
    CHECKF(t != NULL, "tok_create: %s", err);
    if (!t) TEST_DONE();
    gguf_close(g); /* the tokenizer must not depend on the mapping */
    CHECK(tok_n_vocab(t) == 32000);
    CHECK(tok_bos(t) == 1 && tok_eos(t) == 2 && tok_unk(t) == 0);
    CHECK(tok_add_bos(t) && !tok_add_eos(t) && tok_add_space_prefix(t));

    size_t inp_len, out_len;
    char *inp = read_all(inp_path, &inp_len);
    char *outs = read_all(out_path, &out_len);
    CHECKF(inp && outs, "cannot read %s / %s", inp_path, out_path);
    if (!inp || !outs) TEST_DONE();

    /* The .inp is a sequence of "<string>\n__ggml_vocab_test__\n": each
     * string ends right before the newline that precedes the separator line,
     * so a string may itself end with (or be) newlines. */
    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t seplen = sizeof sep - 1;
    char *inp_end = inp + inp_len;
    char *cur = inp;
    char *line = outs, *outs_end = outs + out_len;
    int n_strings = 0, n_match = 0;
    int32_t ids[8192], want[8192];
    static char dec[65536];
    while (cur < inp_end) {
        char *s_end = strstr(cur, sep);
        CHECKF(s_end != NULL, "unterminated string at offset %td of .inp", cur - inp);
        if (!s_end) break;
        size_t slen = (size_t)(s_end - cur);

        /* matching .out line: space-separated ids */
        CHECKF(line < outs_end, ".out has fewer lines than .inp has strings (%d)", n_strings + 1);
        if (line >= outs_end) break;
        char *nl = memchr(line, '\n', (size_t)(outs_end - line));
        if (!nl) nl = outs_end;
        *nl = '\0';
        int nw = 0;
        for (char *p = line, *q; nw < 8192; p = q) {
            long v = strtol(p, &q, 10);
            if (q == p) break;
            want[nw++] = (int32_t)v;
        }
        line = nl + 1;

        int n = tok_encode(t, cur, slen, false, false, ids, 8192);
        bool same = n == nw && memcmp(ids, want, (size_t)n * sizeof *ids) == 0;
        if (!same) {
            fprintf(stderr, "string %d (%zu bytes) mismatch:\n  want:", n_strings, slen);
            for (int i = 0; i < nw; i++) fprintf(stderr, " %d", want[i]);
            fprintf(stderr, "\n  got: ");
            for (int i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
            fputc('\n', stderr);
        }
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
        cur = s_end + seplen;
    }
    CHECKF(line >= outs_end, ".out has more lines than .inp has strings (%d)", n_strings);
    CHECKF(n_strings == 46, "expected 46 vectors, parsed %d", n_strings);
    fprintf(stderr, "%d/%d vectors match\n", n_match, n_strings);

    free(inp);
    free(outs);
    tok_destroy(t);
    TEST_DONE();
}
