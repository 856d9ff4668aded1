/* test_tok_missing_bytes.c — vocabularies that lack some byte tokens (Falcon's
 * has none for 0x03) load and tokenize as llama.cpp does. Byte-level BPE
 * (llm_tokenizer_bpe): a final symbol that is no token falls back to one-byte
 * tokens for the bytes of its mapped text, and a byte with none is dropped;
 * merges still run on the missing characters. SPM: the unknown token, and a
 * drop when there is none.
 *
 * The real vocabularies of ../shared/models/tokenizer-vectors/ are rewritten
 * with some byte tokens renamed to strings no text can produce (ids stay, so
 * llama.cpp's expected ids still apply): gpt-2 against its vectors' .out
 * lines with the removed ids taken out (what llama.cpp's rule gives for them),
 * deepseek-llm and llama-spm against the complete vocabulary on corpus text.
 * A synthetic vocabulary checks the fallback cases by hand. */
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/testutil.h"
#include "tests/tokenizer/vectors.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static tokenizer *tok_from_writer(gguf_writer *w, char *err, size_t errlen) {
    char path[] = "/tmp/specd_missing_bytes_XXXXXX";
    int fd = mkstemp(path);
    tokenizer *t = NULL;
    if (fd < 0) { snprintf(err, errlen, "mkstemp failed"); gguf_writer_destroy(w); return NULL; }
    close(fd);
    if (gguf_writer_write(w, path, err, errlen) == 0) {
        gguf_file *f = gguf_open(path, NULL, err, errlen);
        if (f) { t = tok_create(f, err, errlen); gguf_close(f); }
    }
    unlink(path);
    gguf_writer_destroy(w);
    return t;
}

/* A copy of g's tokenizer with tokens ids[0..n) renamed to "\x01removed-N"
 * and typed unused (byte 0x01 maps to U+0101 in BPE text and is in no SPM
 * test text: no text reaches them). */
static tokenizer *without(const gguf_file *g, const tokenizer *full, const int32_t *ids, int n, char *err,
                          size_t errlen) {
    static const char *const skip[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type", NULL};
    int32_t V = tok_n_vocab(full);
    const char **strs = malloc((size_t)V * sizeof *strs);
    size_t *lens = malloc((size_t)V * sizeof *lens);
    char (*names)[24] = malloc((size_t)n * sizeof *names);
    int32_t *types = malloc((size_t)V * sizeof *types);
    for (int32_t i = 0; i < V; i++) {
        strs[i] = tok_token_str(full, i, &lens[i]);
        types[i] = tok_token_type(full, i);
    }
    for (int k = 0; k < n; k++) {
        snprintf(names[k], sizeof names[k], "\x01removed-%d", k);
        strs[ids[k]] = names[k];
        lens[ids[k]] = strlen(names[k]);
        types[ids[k]] = TOK_TYPE_UNUSED;
    }
    gguf_writer *w = gguf_writer_create();
    gguf_writer_copy_kv(w, g, skip);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, lens, (uint64_t)V);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)V);
    tokenizer *t = tok_from_writer(w, err, errlen);
    free(strs);
    free(lens);
    free(names);
    free(types);
    return t;
}

static bool in(int32_t id, const int32_t *set, int n) {
    for (int k = 0; k < n; k++)
        if (set[k] == id) return true;
    return false;
}

/* want with the removed ids dropped (BPE) or replaced by unk (SPM, unk >= 0). */
static int expected(const int32_t *full, int nf, const int32_t *removed, int nr, int32_t unk, int32_t *out) {
    int n = 0;
    for (int i = 0; i < nf; i++) {
        if (!in(full[i], removed, nr)) out[n++] = full[i];
        else if (unk >= 0) out[n++] = unk;
    }
    return n;
}

static gguf_file *open_vocab(const char *name, char *path, size_t n) {
    const char *models = getenv("SPECD_MODELS");
    if (!models) SKIP("SPECD_MODELS not set");
    char err[512];
    snprintf(path, n, "%s/tokenizer-vectors/%s", models, name);
    gguf_file *g = gguf_open(path, NULL, err, sizeof err);
    if (!g) SKIP("cannot open %s: %s", path, err);
    return g;
}

/* The ids of the tokens whose text is one of texts[0..n). */
static int ids_of(const tokenizer *t, const char *const *texts, int n, int32_t *ids) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        int32_t id = -1;
        for (int32_t j = 0; j < tok_n_vocab(t) && id < 0; j++) {
            size_t len;
            const char *s = tok_token_str(t, j, &len);
            if (len == strlen(texts[i]) && !memcmp(s, texts[i], len)) id = j;
        }
        CHECKF(id >= 0, "no token '%s' in the vocabulary", texts[i]);
        if (id >= 0) ids[k++] = id;
    }
    return k;
}

/* gpt-2: ETX (0x03, the byte Falcon lacks), "\n", " ", "e", "z", 0xF0 (emoji lead) removed. */
static void test_gpt2(void) {
    char path[4096], err[512];
    gguf_file *g = open_vocab("ggml-vocab-gpt-2.gguf", path, sizeof path);
    tokenizer *full = tok_create(g, err, sizeof err);
    CHECKF(full != NULL, "gpt-2: %s", err);
    if (!full) { gguf_close(g); return; }
    static const char *const texts[] = {"\xc4\x83", "\xc4\x8a", "\xc4\xa0", "e", "z", "\xc3\xb0"};
    int32_t rm[6];
    int nr = ids_of(full, texts, 6, rm);
    tokenizer *t = without(g, full, rm, nr, err, sizeof err);
    CHECKF(t != NULL, "gpt-2 without %d byte tokens must load: %s", nr, err);
    if (!t) { tok_destroy(full); gguf_close(g); return; }
    CHECK(tok_compare(t, full, NULL, 0) != 0); /* it is another vocabulary */

    /* every vector: llama.cpp's ids for the complete vocabulary minus the removed ones */
    char inp_path[4200], out_path[4200];
    snprintf(inp_path, sizeof inp_path, "%s.inp", path);
    snprintf(out_path, sizeof out_path, "%s.out", path);
    size_t inp_len, out_len;
    char *inp = vec_read_all(inp_path, &inp_len), *outs = vec_read_all(out_path, &out_len);
    CHECKF(inp && outs, "cannot read %s / %s", inp_path, out_path);
    vec_iter it;
    if (inp && outs) vec_init(&it, inp, inp_len, outs, out_len);
    static int32_t want[8192], exp[8192], got[8192];
    int n_vec = 0, n_touched = 0, n_ok = 0;
    const char *s;
    size_t slen;
    int nw;
    while (inp && outs && vec_next(&it, &s, &slen, want, 8192, &nw) == 1) {
        int ne = expected(want, nw, rm, nr, -1, exp);
        int ng = tok_encode(t, s, slen, false, false, got, 8192);
        n_ok += vec_same(n_vec, slen, exp, ne, got, ng);
        n_touched += ne != nw;
        n_vec++;
    }
    if (inp && outs) vec_finish(&it);
    CHECKF(n_vec > 20 && n_ok == n_vec, "gpt-2 without bytes: %d of %d vectors as llama.cpp", n_ok, n_vec);
    CHECKF(n_touched >= 10, "only %d vectors hold a removed byte token", n_touched);
    fprintf(stderr, "gpt-2 with %d byte tokens removed: %d/%d vectors as llama.cpp (%d of them lose tokens)\n", nr,
            n_ok, n_vec, n_touched);
    free(inp);
    free(outs);

    /* by hand: ETX alone is dropped (Falcon's case); "\n\n" (one pre-token at
     * the end) still merges to its token, a lone "\n" goes */
    int32_t a[16], b[16];
    int n = tok_encode(t, "a\x03" "b", 3, false, false, a, 16);
    int na = tok_encode(t, "a", 1, false, false, b, 16);
    int nb = tok_encode(t, "b", 1, false, false, b + na, 16 - na);
    CHECKF(n == na + nb && !memcmp(a, b, sizeof(int32_t) * (size_t)n), "a ETX b: %d tokens", n);
    n = tok_encode(t, "\x03\x03\x03", 3, false, false, a, 16);
    CHECKF(n == 0, "ETX ETX ETX: %d tokens, expected none", n);
    static const char *const nl2[] = {"\xc4\x8a\xc4\x8a"};
    int32_t id_nl2;
    if (ids_of(full, nl2, 1, &id_nl2) == 1) {
        n = tok_encode(t, "x\n\n", 3, false, false, a, 16);
        CHECKF(n == 2 && a[1] == id_nl2, "x\\n\\n: %d tokens (the pair merges)", n);
        n = tok_encode(t, "x\ny", 3, false, false, a, 16);
        int nx = tok_encode(t, "x", 1, false, false, b, 16);
        nx += tok_encode(t, "y", 1, false, false, b + nx, 16 - nx);
        CHECKF(n == 2 && nx == 2 && !memcmp(a, b, 2 * sizeof(int32_t)), "x\\ny: %d tokens (the newline goes)", n);
    }
    /* decoding what was encoded never fails */
    char dec[64];
    n = tok_encode(t, "zebra\x03 \xf0\x9f\x98\x80!", 12, false, false, a, 16);
    CHECK(n > 0 && tok_decode(t, a, n, dec, sizeof dec, 0) >= 0);
    tok_destroy(t);
    tok_destroy(full);
    gguf_close(g);
}

/* deepseek-llm (102k) and llama-spm: the complete vocabulary's ids with the
 * removed ones dropped (BPE) or made unknown (SPM), on corpus text with the
 * removed bytes sprinkled in. */
static void test_corpus(const char *name, const char *const *texts, int n_texts) {
    char path[4096], err[512];
    gguf_file *g = open_vocab(name, path, sizeof path);
    tokenizer *full = tok_create(g, err, sizeof err);
    CHECKF(full != NULL, "%s: %s", name, err);
    if (!full) { gguf_close(g); return; }
    int32_t rm[8];
    int nr = ids_of(full, texts, n_texts, rm);
    tokenizer *t = without(g, full, rm, nr, err, sizeof err);
    CHECKF(t != NULL, "%s without %d byte tokens must load: %s", name, nr, err);
    const char *models = getenv("SPECD_MODELS");
    char cpath[4096];
    snprintf(cpath, sizeof cpath, "%s/corpora/tinyshakespeare_input.txt", models);
    size_t clen;
    char *corpus = vec_read_all(cpath, &clen);
    CHECKF(corpus != NULL, "cannot read %s", cpath);
    if (!t || !corpus) { free(corpus); tok_destroy(t); tok_destroy(full); gguf_close(g); return; }
    bool spm = tok_get_kind(full) == TOK_KIND_SPM;
    int32_t unk = spm ? tok_unk(full) : -1;
    static const char extra[] = {'\x03', '\x03', '\n', 'z', '\x7f', '\x03'};
    static int32_t ref[4096], exp[4096], got[4096];
    static char chunk[1200];
    int n_chunks = 0, n_ok = 0, n_touched = 0;
    for (size_t off = 0; off + 1000 < clen && n_chunks < 200; off += 5003, n_chunks++) {
        memcpy(chunk, corpus + off, 1000);
        for (int k = 0; k < 6; k++) chunk[(size_t)(k * 157 + n_chunks * 13) % 1000] = extra[k];
        int nf = tok_encode(full, chunk, 1000, false, false, ref, 4096);
        int ne = expected(ref, nf, rm, nr, unk, exp);
        int ng = tok_encode(t, chunk, 1000, false, false, got, 4096);
        bool ok = ng == ne && !memcmp(got, exp, sizeof(int32_t) * (size_t)ne);
        if (!ok && n_chunks - n_ok < 3) fprintf(stderr, "%s chunk %d: %d tokens, expected %d\n", name, n_chunks, ng, ne);
        n_ok += ok;
        n_touched += ne != nf || (spm && memcmp(ref, exp, sizeof(int32_t) * (size_t)nf));
    }
    CHECKF(n_ok == n_chunks && n_touched > n_chunks / 2, "%s: %d of %d chunks as expected, %d touched", name, n_ok,
           n_chunks, n_touched);
    fprintf(stderr, "%s with %d byte tokens removed: %d/%d corpus chunks as the rule says (%d touched)\n", name, nr,
            n_ok, n_chunks, n_touched);
    free(corpus);
    tok_destroy(t);
    tok_destroy(full);
    gguf_close(g);
}

/* ---- a synthetic vocabulary: each fallback case by hand ----------------------
 * Tokens: the GPT-2 form of every byte except 0x03, 'q' and ' ' (U+0120 "Ġ");
 * then "qu", "xy" is a merge with no token, "Ġz" too. */
static size_t put_cp(char *d, unsigned cp) {
    if (cp < 0x80) { d[0] = (char)cp; return 1; }
    d[0] = (char)(0xC0 | (cp >> 6));
    d[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static void test_synthetic(void) {
    static char store[256][8];
    const char *strs[260];
    int32_t types[260];
    int n = 0;
    unsigned next = 0x100;
    int32_t id_of[256];
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        size_t k = put_cp(store[b], printable ? (unsigned)b : next++);
        store[b][k] = '\0';
        id_of[b] = -1;
        if (b == 0x03 || b == 'q' || b == ' ') continue;
        id_of[b] = n;
        strs[n] = store[b];
        types[n++] = TOK_TYPE_NORMAL;
    }
    int32_t id_qu = n;
    strs[n] = "qu", types[n++] = TOK_TYPE_NORMAL;
    int32_t id_unk = n;
    strs[n] = "<unk>", types[n++] = TOK_TYPE_UNKNOWN;
    static const char *const merges[] = {"q u", "x y", "\xc4\xa0 z"};
    gguf_writer *w = gguf_writer_create();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, NULL, (uint64_t)n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)n);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, 3);
    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)id_unk);
    char err[256];
    tokenizer *t = tok_from_writer(w, err, sizeof err);
    CHECKF(t != NULL, "synthetic vocabulary without 3 byte tokens must load: %s", err);
    if (!t) return;
    int32_t ids[16];
    struct { const char *text; int32_t want[6]; int n; const char *why; } cases[] = {
        {"qua", {id_qu, id_of['a']}, 2, "a missing character still merges"},
        {"qa", {id_of['a']}, 1, "a missing byte alone is dropped (not the unknown token)"},
        {"a\x03" "b", {id_of['a'], id_of['b']}, 2, "Falcon's ETX is dropped"},
        {"xy", {id_of['x'], id_of['y']}, 2, "a merged symbol with no token falls back to one-byte tokens"},
        {"a z", {id_of['a'], id_of['z']}, 2, "a merged symbol's non-ASCII byte texts have no one-byte token"},
        {"\xc3\xa9", {id_of[0xC3], id_of[0xA9]}, 2, "complete bytes still map to their tokens"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int k = tok_encode(t, cases[c].text, strlen(cases[c].text), false, false, ids, 16);
        CHECKF(k == cases[c].n && !memcmp(ids, cases[c].want, sizeof(int32_t) * (size_t)k), "'%s': %d tokens (%s)",
               cases[c].text, k, cases[c].why);
    }
    tok_destroy(t);
}

int main(void) {
    test_synthetic();
    test_gpt2();
    static const char *const ds[] = {"\xc4\x83", "\xc4\x8a", "z", "\xc4\xa1"}; /* ETX, \n, z, DEL */
    test_corpus("ggml-vocab-deepseek-llm.gguf", ds, 4);
    static const char *const spm[] = {"<0x03>", "<0x0A>", "<0x7F>"};
    test_corpus("ggml-vocab-llama-spm.gguf", spm, 3);
    TEST_DONE();
}
