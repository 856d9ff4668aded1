/* test_tokenizer_bpe.c — byte-level BPE: llama.cpp's gpt-2 vectors (every .inp
 * string encodes to exactly its .out line, decodes back, streams as valid
 * UTF-8), special tokens, byte pieces, identity, and hand-derived pre-tokenizer
 * splits for every family (test_pretok_ref.py compares them all with the
 * regexes on many more strings; the cases it found are written out here).
 *
 * How the expected splits were derived: by applying each family's regex (see
 * tok_pre in engine/tokenizer/tokenizer.h) by hand, alternative by alternative, left to
 * right, with Python-regex semantics (greedy, first alternative that matches
 * wins; \s+(?!\S) backs off one space before a non-space). Each case notes the
 * alternative that decides it. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/testutil.h"
#include "tests/tokenizer/vectors.h"

/* Is s[0..n) well-formed UTF-8 (no overlongs, surrogates, > U+10FFFF)? */
static bool utf8_valid(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) { i++; continue; }
        else if (c >= 0xC2 && c <= 0xDF) k = 1;
        else if (c >= 0xE0 && c <= 0xEF) { k = 2; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
        else if (c >= 0xF0 && c <= 0xF4) { k = 3; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
        else return false;
        if (i + k >= n) return false;
        if (s[i + 1] < lo || s[i + 1] > hi) return false;
        for (size_t j = 2; j <= k; j++)
            if (s[i + j] < 0x80 || s[i + j] > 0xBF) return false;
        i += k + 1;
    }
    return true;
}

/* ---- the gpt-2 vectors ---------------------------------------------------- */

static void test_vectors(const tokenizer *t, const char *path) {
    char inp_path[4200], out_path[4200];
    snprintf(inp_path, sizeof inp_path, "%s.inp", path);
    snprintf(out_path, sizeof out_path, "%s.out", path);
    size_t inp_len, out_len;
    char *inp = vec_read_all(inp_path, &inp_len);
    char *outs = vec_read_all(out_path, &out_len);
    CHECKF(inp && outs, "cannot read %s / %s", inp_path, out_path);
    if (!inp || !outs) { free(inp); free(outs); return; }

    /* "<string>\n__ggml_vocab_test__\n" repeated (as in test_tokenizer_vectors.c) */
    vec_iter it;
    vec_init(&it, inp, inp_len, outs, out_len);
    int n_strings = 0, n_match = 0;
    static int32_t ids[8192], ids2[8192], want[8192];
    static char dec[65536], sbuf[65536];
    size_t smax = tok_stream_max_out(t);
    char *chunk = malloc(smax);
    const char *cur;
    size_t slen;
    int nw;
    while (vec_next(&it, &cur, &slen, want, 8192, &nw) == 1) {
        int n = tok_encode(t, cur, slen, false, false, ids, 8192);
        bool same = vec_same(n_strings, slen, want, nw, ids, n);
        CHECKF(same, "vector %d", n_strings);
        n_match += same;
        /* no special token in these strings: parse_special and add_special
         * (gpt-2 adds neither BOS nor EOS) change nothing */
        int n2 = tok_encode(t, cur, slen, true, true, ids2, 8192);
        CHECKF(n2 == n && memcmp(ids, ids2, (size_t)n * sizeof *ids) == 0, "vector %d: add/parse special",
               n_strings);

        int dn = tok_decode(t, ids, n, dec, sizeof dec, 0);
        CHECKF(dn == (int)slen && memcmp(dec, cur, slen) == 0, "vector %d: decode(encode(s)) != s",
               n_strings);

        /* streaming: each chunk is valid UTF-8; all together == s */
        tok_stream st;
        tok_stream_init(&st, t, 0);
        size_t so = 0;
        bool chunks_ok = true;
        for (int i = 0; i < n; i++) {
            int k = tok_stream_feed(&st, t, ids[i], chunk, smax);
            CHECK(k >= 0);
            if (k < 0) break;
            chunks_ok &= utf8_valid((const unsigned char *)chunk, (size_t)k);
            if (so + (size_t)k <= sizeof sbuf) memcpy(sbuf + so, chunk, (size_t)k);
            so += (size_t)k;
        }
        char fl[3];
        CHECKF(tok_stream_flush(&st, fl, sizeof fl) == 0, "vector %d: stream holds bytes at the end",
               n_strings);
        CHECKF(chunks_ok, "vector %d: a stream chunk is not valid UTF-8", n_strings);
        CHECKF(so == slen && memcmp(sbuf, cur, slen) == 0, "vector %d: streamed text != s", n_strings);

        n_strings++;
    }
    vec_finish(&it);
    CHECKF(n_strings >= 40, "expected the full vector set, parsed %d", n_strings);
    fprintf(stderr, "gpt-2: %d/%d vectors match\n", n_match, n_strings);
    free(chunk);
    free(inp);
    free(outs);
}

/* ---- facts, specials, pieces, streaming of split characters ------------------ */

static void test_gpt2_facts(const tokenizer *t) {
    CHECK(tok_get_kind(t) == TOK_KIND_BPE);
    CHECK(strcmp(tok_kind_name(tok_get_kind(t)), "gpt2") == 0);
    CHECK(tok_get_pre(t) == TOK_PRE_GPT2 && strcmp(tok_pre_name(tok_get_pre(t)), "gpt-2") == 0);
    CHECK(tok_n_vocab(t) == 50257);
    CHECK(tok_n_merges(t) == 50000);
    CHECK(tok_bos(t) == 50256 && tok_eos(t) == 50256 && tok_unk(t) == -1);
    CHECK(!tok_add_bos(t) && !tok_add_eos(t) && !tok_add_space_prefix(t));
    CHECK(tok_is_eog(t, 50256));
    CHECK(tok_token_type(t, 50256) == TOK_TYPE_CONTROL);

    /* "<|endoftext|>" whole only with parse_special */
    static const char eot[] = "a<|endoftext|>b";
    int32_t ids[64];
    int n = tok_encode(t, eot, sizeof eot - 1, false, true, ids, 64);
    CHECKF(n == 3 && ids[1] == 50256, "parse_special: n=%d", n);
    int n2 = tok_encode(t, eot, sizeof eot - 1, false, false, ids, 64);
    CHECKF(n2 > 3, "plain text: n=%d", n2);
    bool has = false;
    for (int i = 0; i < n2 && i < 64; i++) has |= ids[i] == 50256;
    CHECK(!has);
    n = tok_encode(t, eot, sizeof eot - 1, false, true, ids, 64);
    char buf[128];
    int dn = tok_decode(t, ids, n, buf, sizeof buf, TOK_DECODE_SPECIAL);
    CHECKF(dn == (int)sizeof eot - 1 && memcmp(buf, eot, (size_t)dn) == 0, "special round trip");
    dn = tok_decode(t, ids, n, buf, sizeof buf, 0);
    CHECK(dn == 2 && memcmp(buf, "ab", 2) == 0);

    /* pieces are raw bytes: "Ġ" -> ' ', "â" (byte 0xE2) -> 0xE2 alone */
    int32_t sp = tok_find(t, "\xc4\xa0", 2), e2 = tok_find(t, "\xc3\xa2", 2);
    CHECK(sp >= 0 && e2 >= 0);
    if (sp >= 0 && e2 >= 0) {
        CHECK(tok_piece(t, sp, buf, sizeof buf) == 1 && buf[0] == ' ');
        CHECK(tok_piece(t, e2, buf, sizeof buf) == 1 && (unsigned char)buf[0] == 0xE2);
        CHECK(tok_piece(t, e2, buf, 0) == -1);
    }
    CHECK(tok_piece(t, 50256, buf, sizeof buf) == 0);

    /* "🦙" is 4 bytes that gpt-2 splits over several tokens: the stream holds
     * them until the character is complete */
    static const char llama[] = "\xf0\x9f\xa6\x99!";
    n = tok_encode(t, llama, sizeof llama - 1, false, false, ids, 64);
    CHECKF(n >= 3, "llama emoji in %d tokens", n);
    tok_stream st;
    tok_stream_init(&st, t, 0);
    size_t smax = tok_stream_max_out(t), tot = 0;
    char *out = malloc(smax);
    char all[64];
    for (int i = 0; i < n; i++) {
        int k = tok_stream_feed(&st, t, ids[i], out, smax);
        CHECK(k >= 0 && (k == 0 || utf8_valid((unsigned char *)out, (size_t)k)));
        if (i == 0) CHECKF(k == 0, "first piece of the emoji emitted %d bytes", k);
        if (k > 0 && tot + (size_t)k <= sizeof all) memcpy(all + tot, out, (size_t)k);
        if (k > 0) tot += (size_t)k;
    }
    CHECK(tot == sizeof llama - 1 && memcmp(all, llama, tot) == 0);
    /* an unfinished character: flushed as U+FFFD */
    tok_stream_init(&st, t, 0);
    CHECK(tok_stream_feed(&st, t, ids[0], out, smax) == 0);
    CHECK(tok_stream_flush(&st, all, sizeof all) == 3 && memcmp(all, "\xef\xbf\xbd", 3) == 0);
    free(out);

    /* any bytes round-trip, invalid UTF-8 included */
    static const char junk[] = "a\xff\xfe" "b\xc3 \x80\x80\xed\xa0\x80z\0\x01";
    n = tok_encode(t, junk, sizeof junk - 1, false, false, ids, 64);
    CHECK(n > 0);
    dn = tok_decode(t, ids, n, buf, sizeof buf, 0);
    CHECK(dn == (int)sizeof junk - 1 && memcmp(buf, junk, sizeof junk - 1) == 0);
}

/* ---- pre-tokenizer splits ---------------------------------------------------- */

/* Checks that tok_split(text) gives exactly the NULL-terminated pieces, and
 * that text round-trips through encode/decode. */
static void expect_split(const tokenizer *t, const char *text, const char *const *pieces) {
    size_t ends[64];
    size_t len = strlen(text);
    int n = tok_split(t, text, len, ends, 64);
    int want = 0;
    while (pieces[want]) want++;
    bool ok = n == want;
    size_t pos = 0;
    for (int i = 0; ok && i < n; i++) {
        size_t pl = strlen(pieces[i]);
        ok = ends[i] == pos + pl && memcmp(text + pos, pieces[i], pl) == 0;
        pos = ends[i];
    }
    if (!ok) {
        fprintf(stderr, "%s split of '%s': got", tok_pre_name(tok_get_pre(t)), text);
        for (int i = 0, p = 0; i < n && i < 64; p = (int)ends[i], i++)
            fprintf(stderr, " [%.*s]", (int)ends[i] - p, text + p);
        fputc('\n', stderr);
    }
    CHECKF(ok, "%s split of '%s'", tok_pre_name(tok_get_pre(t)), text);

    int32_t ids[256];
    char buf[512];
    int k = tok_encode(t, text, len, false, false, ids, 256);
    int dn = k > 0 ? tok_decode(t, ids, k, buf, sizeof buf, 0) : 0;
    CHECKF(dn == (int)len && memcmp(buf, text, len) == 0, "round trip of '%s'", text);
}

#define SPLIT(t, text, ...) expect_split(t, text, (const char *const[]){__VA_ARGS__, NULL})

static void test_split_gpt2(const tokenizer *t) {
    /* contractions (case-sensitive), " ?\p{L}+", \s+(?!\S) backing off */
    SPLIT(t, "Hello world's  end\n\n x", "Hello", " world", "'s", " ", " end", "\n\n", " x");
    /* "'M" is no contraction here: ' ?[^\s\p{L}\p{N}]+' takes the quote */
    SPLIT(t, "I'M", "I", "'", "M");
    /* " ?\p{N}+" is unbounded; "½" is No (a number); "ü" a letter */
    SPLIT(t, "F\xc3\xbchrer 12345 3\xc2\xbd", "F\xc3\xbchrer", " 12345", " 3\xc2\xbd");
    /* punctuation runs, a trailing space run is all \s+(?!\S) */
    SPLIT(t, "x!?  ", "x", "!?", "  ");
    /* a tab before a letter is no optional ' ': \s+ then the word */
    SPLIT(t, "\tword", "\t", "word");
    /* "'ll" / "'ve" / "'re" */
    SPLIT(t, "we'll they've you're", "we", "'ll", " they", "'ve", " you", "'re");
}

static void test_split_llama3(const tokenizer *t) {
    /* (?i) contractions */
    SPLIT(t, "I'M here", "I", "'M", " here");
    /* [^\r\n\p{L}\p{N}]?\p{L}+: one leading non-letter (space, $, tab) joins */
    SPLIT(t, "Hello, World!", "Hello", ",", " World", "!");
    SPLIT(t, "$hello\tthere", "$hello", "\tthere");
    /* \p{N}{1,3} */
    SPLIT(t, "12345", "123", "45");
    SPLIT(t, "3.14", "3", ".", "14");
    /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' takes the newlines after punctuation */
    SPLIT(t, "!!\n\nok", "!!\n\n", "ok");
    /* \s*[\r\n]+ up to the last newline of a space run; then \s+(?!\S) backs
     * off one; then \s+ takes the lone space before "3" ... */
    SPLIT(t, "a\r\n\r\nb", "a", "\r\n\r\n", "b");
    SPLIT(t, "x  \n  y", "x", "  \n", " ", " y");
    SPLIT(t, "F\xc3\xbchrer 3\xc2\xbd", "F\xc3\xbchrer", " ", "3\xc2\xbd");
    /* a letter after "\n" does not take it as its optional prefix */
    SPLIT(t, "a\nb", "a", "\n", "b");
}

static void test_split_qwen2(const tokenizer *t) {
    SPLIT(t, "12345", "1", "2", "3", "4", "5");
    SPLIT(t, "I'M here 42", "I", "'M", " here", " ", "4", "2");
}

/* Own vectors for the multi-regex pre-tokenizers. Each expected split was
 * derived by hand from the regex list llama.cpp gives the family (applied in
 * order; every regex splits each fragment left by the previous ones into its
 * leftmost matches and the text between, and a lookahead ends at the
 * fragment's end), with the general categories of Unicode 14:
 *   starcoder/refact/smollm: \p{N} | gpt-2
 *   falcon: [\p{P}\$\+<=>\^~\|`]+ | gpt-2 | [0-9][0-9][0-9]
 *   deepseek-coder: [\r\n] | \s?\p{L}+ | \s?\p{P}+ | [一-龥ࠀ-一가-퟿]+ | \p{N}
 *   deepseek-llm: [\r\n] | \s?[its letter list]+ | \s?[!-/:-~！-／：-～‘-‟　-。]+ | \s+$ |
 *                 [一-龥ࠀ-一가-퟿]+ | \p{N}+
 *   default: [\p{P}\$\+<=>\^~\|]+ | gpt-2 | \p{N}+ | [0-9][0-9][0-9] */
static void test_split_starcoder(const tokenizer *t) {
    /* digits first, one each: "abc " is its own fragment, so gpt-2's \s+(?!\S)
     * takes its trailing space (no " 1" as plain gpt-2 would make) */
    SPLIT(t, "abc 12345 x", "abc", " ", "1", "2", "3", "4", "5", " x");
    SPLIT(t, "I'm 3x", "I", "'m", " ", "3", "x");
    /* "½" is No, a number of its own */
    SPLIT(t, "a\xc2\xbd" "b", "a", "\xc2\xbd", "b");
}

static void test_split_falcon(const tokenizer *t) {
    /* punctuation runs are cut out first; then gpt-2 keeps " 12345" whole;
     * then [0-9]{3} finds "123" at its second character */
    SPLIT(t, "Hello, world! 12345", "Hello", ",", " world", "!", " ", "123", "45");
    /* + and = are in the explicit set (they are Sm, not P) */
    SPLIT(t, "a+=b", "a", "+=", "b");
    SPLIT(t, "x $100", "x", " ", "$", "100");
    SPLIT(t, "1234567", "123", "456", "7");
}

static void test_split_deepseek_coder(const tokenizer *t) {
    /* "\n" alone; \s?\p{L}+ takes "def", " f", "x", " return" (the first of two
     * spaces stays behind); \s?\p{P}+ takes "(" and "):"; \p{N} splits " 42" */
    SPLIT(t, "def f(x):\n  return 42", "def", " f", "(", "x", "):", "\n", " ", " return", " ", "4", "2");
    /* CJK ideographs are letters, so \s?\p{L}+ takes the whole word; the CJK
     * range regex then separates them from the Latin letters */
    SPLIT(t, "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c" "abc",
          "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c", "abc");
    /* '=' (Sm) and '$' (Sc) are not \p{P}: they stay with the spaces */
    SPLIT(t, "x = $5", "x", " = $", "5");
    SPLIT(t, "a.b", "a", ".", "b");
}

static void test_split_deepseek_llm(const tokenizer *t) {
    /* "\n" alone; letters with one leading space; "!" then the trailing spaces
     * of its fragment (\s+$ ends at the fragment's end, before the "\n") */
    SPLIT(t, "Hello, world!  \n", "Hello", ",", " world", "!", "  ", "\n");
    /* a space before digits belongs to no letter or punctuation run; \p{N}+ keeps "123" whole */
    SPLIT(t, "abc 123 def", "abc", " ", "123", " def");
    /* CJK is not in the letter list: the CJK range regex takes it */
    SPLIT(t, "\xe4\xbd\xa0\xe5\xa5\xbd" "abc", "\xe4\xbd\xa0\xe5\xa5\xbd", "abc");
    /* '=' is in !-/:-~ */
    SPLIT(t, "x=1", "x", "=", "1");
}

static void test_split_default(const tokenizer *t) {
    /* found by test_pretok_ref.py when "default" was read as plain gpt-2: the
     * punctuation pass comes first, so a quotation mark (Pi) leaves the space
     * before it alone and an apostrophe (Po) never starts a contraction */
    SPLIT(t, " \xe2\x80\x9c", " ", "\xe2\x80\x9c");
    SPLIT(t, "couldn't", "couldn", "'", "t");
    /* gpt-2 keeps " 12345"; \p{N}+ then cuts the space off, and 3-digit groups follow */
    SPLIT(t, "x 12345", "x", " ", "123", "45");
    /* '$' and '+' are in the punctuation set, the backtick (falcon's) is not */
    SPLIT(t, "a$+`b", "a", "$+", "`", "b");
}

/* ---- variants of the gpt-2 vocabulary with another pre -------------------- */

/* Writes w to a temporary file, loads the tokenizer from it (NULL with err on
 * failure) and destroys w. */
static tokenizer *tok_from_writer(gguf_writer *w, char *err, size_t errlen) {
    char path[] = "/tmp/specd_bpe_XXXXXX";
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

static tokenizer *with_pre(const gguf_file *g, const char *pre, char *err, size_t errlen) {
    static const char *const skip[] = {"tokenizer.ggml.pre", NULL};
    gguf_writer *w = gguf_writer_create();
    gguf_writer_copy_kv(w, g, skip);
    gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    return tok_from_writer(w, err, errlen);
}

/* ---- a synthetic BPE vocabulary ---------------------------------------------
 * Tokens 0..255: GPT-2's printable form of byte 0..255 (written out again here,
 * independently of the engine: printable Latin-1 bytes stand for themselves,
 * the other 68 become U+0100.. in byte order); 256 "bc"; 257 "abc"; 258 "<|x|>"
 * (control). Merges: the given list. */

static size_t put_cp(char *d, unsigned cp) {
    if (cp < 0x80) { d[0] = (char)cp; return 1; }
    d[0] = (char)(0xC0 | (cp >> 6));
    d[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static tokenizer *synth_bpe(const char *pre, const char *const *merges, int n_merges, char *err, size_t errlen) {
    static char store[259][8];
    const char *strs[259];
    int32_t types[259];
    unsigned next = 0x100;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        size_t n = put_cp(store[b], printable ? (unsigned)b : next++);
        store[b][n] = '\0';
        strs[b] = store[b];
        types[b] = TOK_TYPE_NORMAL;
    }
    strs[256] = "bc";
    strs[257] = "abc";
    strs[258] = "<|x|>";
    types[256] = types[257] = TOK_TYPE_NORMAL;
    types[258] = TOK_TYPE_CONTROL;
    gguf_writer *w = gguf_writer_create();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, NULL, 259);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, 259);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, (uint64_t)n_merges);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 258);
    return tok_from_writer(w, err, errlen);
}

static void test_synthetic(void) {
    char err[256], msg[256];
    static const char *const m1[] = {"b c", "a b", "b c"}; /* the repeat keeps rank 0 */
    static const char *const m2[] = {"a b", "b c"};
    tokenizer *q = synth_bpe("qwen2", m1, 3, err, sizeof err);
    tokenizer *l = synth_bpe("llama-bpe", m1, 3, err, sizeof err);
    tokenizer *q2 = synth_bpe("qwen2", m2, 2, err, sizeof err);
    static const char *const bad[] = {"bc"};
    tokenizer *b = synth_bpe("qwen2", bad, 1, err, sizeof err);
    CHECK(b == NULL);
    CHECKF(strstr(err, "merge 0") != NULL, "bad merge message: '%s'", err);
    CHECKF(q && l && q2, "synthetic: %s", err);
    if (!q || !l || !q2) goto out;
    CHECK(tok_n_merges(q) == 3 && tok_bos(q) == -1 && tok_eos(q) == 258 && tok_is_eog(q, 258));

    /* each byte alone is its own token: the byte mapping matches the table above */
    char all[256];
    int32_t ids[300];
    for (int i = 0; i < 256; i++) all[i] = (char)i;
    bool bytes_ok = true;
    for (int i = 0; i < 256; i++) {
        int n = tok_encode(q, all + i, 1, false, false, ids, 300);
        bytes_ok &= n == 1 && ids[0] == i;
    }
    CHECK(bytes_ok);
    int n = tok_encode(q, all, 256, false, false, ids, 300);
    char buf[600];
    CHECK(n > 0 && tok_decode(q, ids, n, buf, sizeof buf, 0) == 256 && memcmp(buf, all, 256) == 0);

    /* "abc": merge "b c" (rank 0) wins over "a b" (rank 1) -> a + bc; llama-bpe
     * takes the whole-word token "abc" without merging */
    n = tok_encode(q, "abc", 3, false, false, ids, 300);
    CHECKF(n == 2 && ids[0] == 'a' && ids[1] == 256, "qwen2 abc: n=%d", n);
    n = tok_encode(l, "abc", 3, false, false, ids, 300);
    CHECKF(n == 1 && ids[0] == 257, "llama-bpe abc: n=%d", n);
    /* ranks reversed: "a b" merges first and blocks "b c"; "ab" is no token,
     * so its bytes are emitted: a, b, c */
    n = tok_encode(q2, "abc", 3, false, false, ids, 300);
    CHECKF(n == 3 && ids[0] == 'a' && ids[1] == 'b' && ids[2] == 'c', "q2 abc: n=%d", n);
    /* the control token, only with parse_special */
    n = tok_encode(q, "bc<|x|>bc", 9, false, true, ids, 300);
    CHECK(n == 3 && ids[0] == 256 && ids[1] == 258 && ids[2] == 256);
    n = tok_encode(q, "bc<|x|>bc", 9, false, false, ids, 300);
    CHECK(n > 3);

    /* merges are part of the identity */
    CHECK(tok_compare(q, q2, msg, sizeof msg) == 1);
    CHECKF(strstr(msg, "merges: target 3 vs draft 2") != NULL, "compare: %s", msg);
    CHECK(tok_hash(q) != tok_hash(q2));
    tokenizer *q3 = synth_bpe("qwen2", (const char *const[]){"a b", "a b", "b c"}, 3, err, sizeof err);
    CHECK(q3 && tok_compare(q, q3, msg, sizeof msg) == 1 && strstr(msg, "merge 0: target 'b c' vs draft 'a b'"));
    CHECK(q3 && tok_hash(q) != tok_hash(q3));
    tok_destroy(q3);
out:
    tok_destroy(b);
    tok_destroy(q);
    tok_destroy(l);
    tok_destroy(q2);
}

int main(void) {
    const char *models = getenv("SPECD_MODELS");
    if (!models) SKIP("SPECD_MODELS not set");
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/tokenizer-vectors/ggml-vocab-gpt-2.gguf", models);
    gguf_file *g = gguf_open(path, NULL, err, sizeof err);
    if (!g) SKIP("cannot open %s: %s", path, err);
    tokenizer *t = tok_create(g, err, sizeof err);
    CHECKF(t != NULL, "tok_create: %s", err);
    if (!t) { gguf_close(g); TEST_DONE(); }

    test_vectors(t, path);
    test_gpt2_facts(t);
    test_split_gpt2(t);
    test_synthetic();

    tokenizer *l3 = with_pre(g, "llama-bpe", err, sizeof err);
    CHECKF(l3 != NULL, "llama-bpe: %s", err);
    tokenizer *qw = with_pre(g, "qwen2", err, sizeof err);
    CHECKF(qw != NULL, "qwen2: %s", err);
    tokenizer *dflt = with_pre(g, "default", err, sizeof err);
    CHECKF(dflt != NULL, "default: %s", err);
    /* no tokenizer.ggml.pre at all: "default", as llama.cpp reads it */
    static const char *const no_pre[] = {"tokenizer.ggml.pre", NULL};
    gguf_writer *wn = gguf_writer_create();
    gguf_writer_copy_kv(wn, g, no_pre);
    tokenizer *nokey = tok_from_writer(wn, err, sizeof err);
    CHECKF(nokey && tok_get_pre(nokey) == TOK_PRE_DEFAULT && strcmp(tok_pre_name(TOK_PRE_DEFAULT), "default") == 0,
           "no tokenizer.ggml.pre: %s", nokey ? tok_pre_name(tok_get_pre(nokey)) : err);
    if (nokey && dflt) CHECK(tok_compare(nokey, dflt, NULL, 0) == 0 && tok_hash(nokey) == tok_hash(dflt));
    tok_destroy(nokey);
    tokenizer *bad = with_pre(g, "tekken", err, sizeof err);
    CHECK(bad == NULL);
    CHECKF(strstr(err, "'tekken'") && strstr(err, "llama-bpe") && strstr(err, "qwen2") &&
           strstr(err, "gpt-2"), "unknown pre message: '%s'", err);
    /* the multi-regex families, and aliases of the gpt-2 regex */
    static const struct { const char *name; tok_pre want; void (*check)(const tokenizer *); } fam[] = {
        {"starcoder", TOK_PRE_STARCODER, test_split_starcoder}, {"smollm", TOK_PRE_STARCODER, test_split_starcoder},
        {"refact", TOK_PRE_STARCODER, test_split_starcoder},    {"falcon", TOK_PRE_FALCON, test_split_falcon},
        {"deepseek-coder", TOK_PRE_DEEPSEEK_CODER, test_split_deepseek_coder},
        {"deepseek-llm", TOK_PRE_DEEPSEEK_LLM, test_split_deepseek_llm},
        {"mpt", TOK_PRE_GPT2, test_split_gpt2},                 {"gpt-neox", TOK_PRE_GPT2, test_split_gpt2},
        {"olmo", TOK_PRE_GPT2, test_split_gpt2},                {"default", TOK_PRE_DEFAULT, test_split_default},
    };
    for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++) {
        char ferr[512];
        tokenizer *ft = with_pre(g, fam[i].name, ferr, sizeof ferr);
        CHECKF(ft && tok_get_pre(ft) == fam[i].want, "pre '%s': %s", fam[i].name, ft ? "wrong family" : ferr);
        if (ft) fam[i].check(ft);
        tok_destroy(ft);
    }
    char derr[512];
    tokenizer *dl = with_pre(g, "deepseek-v3", derr, sizeof derr);
    CHECKF(!dl && strstr(derr, "'deepseek-v3'") && strstr(derr, "deepseek-coder") && strstr(derr, "falcon"),
           "deepseek-v3: %s", derr);
    tok_destroy(dl);
    gguf_close(g);

    if (l3) {
        CHECK(tok_get_pre(l3) == TOK_PRE_LLAMA3 && tok_add_bos(l3));
        test_split_llama3(l3);
        /* same vocabulary and merges, another pre-tokenizer: not the same tokenizer */
        char msg[256];
        CHECK(tok_compare(t, l3, msg, sizeof msg) == 1);
        CHECKF(strstr(msg, "add_bos_token") || strstr(msg, "pre-tokenizer"), "compare: %s", msg);
        CHECK(tok_hash(t) != tok_hash(l3));
        int32_t ids[8];
        int n = tok_encode(l3, "hi", 2, true, false, ids, 8);
        CHECK(n == 2 && ids[0] == 50256);
    }
    if (qw) {
        CHECK(tok_get_pre(qw) == TOK_PRE_QWEN2 && !tok_add_bos(qw));
        test_split_qwen2(qw);
        char msg[256];
        CHECK(tok_compare(t, qw, msg, sizeof msg) == 1 && strstr(msg, "pre-tokenizer"));
    }
    if (dflt) {
        /* "default" is not "gpt-2" (llama.cpp gives it its own regex list) */
        char msg[256];
        CHECK(tok_compare(t, dflt, msg, sizeof msg) == 1);
        CHECKF(strstr(msg, "pre-tokenizer: target 'gpt-2' vs draft 'default'"), "gpt-2 vs default: %s", msg);
        CHECK(tok_hash(t) != tok_hash(dflt));
    }
    tok_destroy(bad);
    tok_destroy(dflt);
    tok_destroy(qw);
    tok_destroy(l3);
    tok_destroy(t);
    TEST_DONE();
}
