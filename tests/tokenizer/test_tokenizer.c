/* test_tokenizer.c — SPM tokenizer behaviour on the real tiny models
 * (stories260K & co.) and on small synthetic vocabularies written with the GGUF
 * writer: known ids, round trips, streaming UTF-8 decode, special tokens,
 * merge order, load errors, tok_compare/tok_hash, and an encode speed figure. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/testutil.h"

static const char *g_models;

static tokenizer *load(const char *rel, char *err, size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_models, rel);
    gguf_file *g = gguf_open(path, NULL, err, errlen);
    if (!g) return NULL;
    tokenizer *t = tok_create(g, err, errlen);
    gguf_close(g); /* the tokenizer must not need the mapping */
    return t;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    *len = fread(buf, 1, (size_t)n, f);
    buf[*len] = '\0';
    fclose(f);
    return buf;
}

/* Independent strict UTF-8 check (RFC 3629: no overlongs, surrogates, > U+10FFFF). */
static bool utf8_valid(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k;
        unsigned cp;
        if (c < 0x80) { i++; continue; }
        else if ((c & 0xE0) == 0xC0) { k = 1; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { k = 2; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { k = 3; cp = c & 0x07; }
        else return false;
        if (i + k >= n) return false; /* truncated */
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000)) return false;
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += k + 1;
    }
    return true;
}

static bool ids_same(const int32_t *a, int na, const int32_t *b, int nb) {
    return na == nb && na >= 0 && memcmp(a, b, (size_t)na * sizeof *a) == 0;
}

/* encode -> decode must give s back; returns the token count. */
static int roundtrip(const tokenizer *t, const char *s, size_t n, bool add_special, bool parse_special,
                     unsigned flags, const char *what) {
    int cap = (int)n + 8;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    int k = tok_encode(t, s, n, add_special, parse_special, ids, cap);
    CHECKF(k >= 0, "%s: encode gave %d", what, k);
    if (k < 0) { free(ids); return k; }
    char *buf = malloc(n + 64);
    int d = tok_decode(t, ids, k, buf, n + 64, flags);
    CHECKF(d == (int)n && memcmp(buf, s, n) == 0, "%s: decode(encode(s)) != s (%d vs %zu bytes)", what, d, n);
    free(buf);
    free(ids);
    return k;
}

/* Streams ids one at a time; checks every chunk is valid UTF-8 and returns the
 * concatenation (malloc'd) in *out. */
static size_t stream_all(const tokenizer *t, const int32_t *ids, int n, unsigned flags, char **out) {
    size_t mo = tok_stream_max_out(t);
    char *chunk = malloc(mo);
    char *all = malloc((size_t)n * mo + 4);
    size_t total = 0;
    tok_stream st;
    tok_stream_init(&st, t, flags);
    for (int i = 0; i < n; i++) {
        int k = tok_stream_feed(&st, t, ids[i], chunk, mo);
        CHECKF(k >= 0 && (size_t)k <= mo, "feed gave %d", k);
        if (k < 0) break;
        CHECKF(utf8_valid((unsigned char *)chunk, (size_t)k), "stream chunk %d is not valid UTF-8", i);
        memcpy(all + total, chunk, (size_t)k);
        total += (size_t)k;
    }
    int k = tok_stream_flush(&st, all + total, 4);
    CHECK(k >= 0);
    if (k > 0) total += (size_t)k;
    free(chunk);
    *out = all;
    return total;
}

static int32_t byte_tok(const tokenizer *t, unsigned b) {
    char s[8];
    snprintf(s, sizeof s, "<0x%02X>", b);
    return tok_find(t, s, 6);
}

/* ---- real models ----------------------------------------------------------- */

static void test_stories(void) {
    char err[512];
    tokenizer *t = load("stories260K.gguf", err, sizeof err);
    CHECKF(t != NULL, "stories260K: %s", err);
    if (!t) return;
    CHECK(tok_get_kind(t) == TOK_KIND_SPM);
    CHECK(strcmp(tok_kind_name(tok_get_kind(t)), "llama") == 0);
    CHECK(tok_n_vocab(t) == 512);
    CHECK(tok_bos(t) == 1 && tok_eos(t) == 2 && tok_unk(t) == 0 && tok_pad(t) == -1);
    CHECK(tok_add_bos(t) && !tok_add_eos(t) && tok_add_space_prefix(t));
    CHECK(tok_is_eog(t, 2) && !tok_is_eog(t, 1) && !tok_is_eog(t, 403));
    CHECK(tok_token_type(t, 0) == TOK_TYPE_UNKNOWN && tok_token_type(t, 1) == TOK_TYPE_CONTROL);
    CHECK(tok_token_type(t, 3) == TOK_TYPE_BYTE && tok_token_type(t, 258) == TOK_TYPE_BYTE);
    CHECK(tok_token_type(t, 403) == TOK_TYPE_NORMAL);
    CHECK(byte_tok(t, 0) == 3 && byte_tok(t, 0xFF) == 258);
    CHECK(!tok_valid_id(t, -1) && !tok_valid_id(t, 512) && tok_valid_id(t, 511));
    size_t l;
    const char *s = tok_token_str(t, 403, &l);
    CHECK(l == strlen("\xe2\x96\x81Once") && strcmp(s, "\xe2\x96\x81Once") == 0);
    CHECK(tok_find(t, "\xe2\x96\x81Once", l) == 403);
    CHECK(tok_find(t, "nope-not-a-token", 16) == -1);

    /* "Once upon a time": every word is one vocabulary piece ("▁Once" 403,
     * "▁upon" 407, "▁a" 261, "▁time" 378), reachable by merges, so SPM must
     * produce exactly them after BOS. */
    const char *once = "Once upon a time";
    int32_t ids[64];
    int n = tok_encode(t, once, strlen(once), true, false, ids, 64);
    const int32_t want[5] = {1, 403, 407, 261, 378};
    CHECKF(n == 5 && memcmp(ids, want, sizeof want) == 0, "Once upon a time -> %d tokens", n);
    n = tok_encode(t, once, strlen(once), false, false, ids, 64);
    CHECK(n == 4 && memcmp(ids, want + 1, 4 * sizeof *ids) == 0);

    /* too-small output: -(needed), the first max_out written */
    int32_t small[2] = {-7, -7};
    CHECK(tok_encode(t, once, strlen(once), true, false, small, 2) == -5);
    CHECK(small[0] == 1 && small[1] == 403);
    CHECK(tok_encode(t, once, strlen(once), true, false, NULL, 0) == -5);
    CHECK(tok_encode(t, "", 0, false, false, NULL, 0) == 0);
    CHECK(tok_encode(t, "", 0, true, false, ids, 64) == 1 && ids[0] == 1);

    /* pieces and decode details */
    char buf[64];
    CHECK(tok_piece(t, 403, buf, sizeof buf) == 5 && memcmp(buf, " Once", 5) == 0);
    CHECK(tok_piece(t, 403, buf, 4) == -5);
    CHECK(tok_piece(t, 1, buf, sizeof buf) == 0);
    CHECK(tok_piece(t, byte_tok(t, 'A'), buf, sizeof buf) == 1 && buf[0] == 'A');
    CHECK(tok_piece(t, 0, buf, sizeof buf) == 3 && memcmp(buf, "\xe2\x96\x85", 3) == 0);
    CHECK(tok_decode(t, want, 5, buf, sizeof buf, 0) == 16 && memcmp(buf, once, 16) == 0);
    CHECK(tok_decode(t, want, 5, buf, 10, 0) == -16);
    CHECK(tok_decode(t, want + 1, 1, buf, sizeof buf, TOK_DECODE_CONTINUATION) == 5 &&
          memcmp(buf, " Once", 5) == 0);
    CHECK(tok_decode(t, want, 2, buf, sizeof buf, TOK_DECODE_SPECIAL) == 7 && memcmp(buf, "<s>Once", 7) == 0);
    CHECK(tok_decode(t, NULL, 0, buf, sizeof buf, 0) == 0);

    /* special tokens in text: plain text unless parse_special */
    const char *st = "<s>Once</s>";
    n = tok_encode(t, st, strlen(st), false, true, ids, 64);
    CHECKF(n == 3 && ids[0] == 1 && ids[1] == 403 && ids[2] == 2, "parse_special: %d tokens", n);
    roundtrip(t, st, strlen(st), false, true, TOK_DECODE_SPECIAL, "<s>Once</s> special");
    roundtrip(t, "a <unk> b<s>", 12, false, true, TOK_DECODE_SPECIAL, "a <unk> b<s> special");
    n = tok_encode(t, "<unk>", 5, false, true, ids, 64);
    CHECK(n == 1 && ids[0] == 0);
    CHECK(tok_decode(t, ids, 1, buf, sizeof buf, 0) == 3 && memcmp(buf, "\xe2\x96\x85", 3) == 0);
    n = tok_encode(t, st, strlen(st), false, false, ids, 64);
    bool has_ctl = false;
    for (int i = 0; i < n; i++) has_ctl |= ids[i] == 1 || ids[i] == 2;
    CHECK(n > 3 && !has_ctl);
    roundtrip(t, st, strlen(st), false, false, 0, "<s>Once</s> as text");
    roundtrip(t, st, strlen(st), true, false, 0, "<s>Once</s> as text with BOS");
    /* "<0x41>" typed in text is text, never the byte token */
    n = tok_encode(t, "<0x41>", 6, false, false, ids, 64);
    for (int i = 0; i < n; i++) CHECK(ids[i] != byte_tok(t, 'A'));
    roundtrip(t, "<0x41>", 6, false, false, 0, "<0x41>");

    /* spans: control tokens only where their whole text lies inside a span
     * (a chat template's markup); elsewhere exactly the plain tokenization */
    {
        int32_t a[64], b[64];
        const tok_span all = {0, strlen(st)}, first = {0, 3}, cut = {0, 2}, last = {7, 11};
        int na = tok_encode_spans(t, st, strlen(st), false, &all, 1, a, 64);
        int nb = tok_encode(t, st, strlen(st), false, true, b, 64);
        CHECKF(ids_same(a, na, b, nb), "spans over everything = parse_special (%d vs %d)", na, nb);
        na = tok_encode_spans(t, st, strlen(st), true, NULL, 0, a, 64);
        nb = tok_encode(t, st, strlen(st), true, false, b, 64);
        CHECKF(ids_same(a, na, b, nb), "no spans = plain text (%d vs %d)", na, nb);
        /* "<s>" in the span is BOS; "Once</s>" after it is plain text, tokenized as on its own */
        na = tok_encode_spans(t, st, strlen(st), false, &first, 1, a, 64);
        nb = tok_encode(t, st + 3, strlen(st) - 3, false, false, b, 64);
        CHECKF(na == nb + 1 && a[0] == 1 && ids_same(a + 1, na - 1, b, nb), "span over <s> only: %d", na);
        /* a span that holds only part of "<s>": no special token */
        na = tok_encode_spans(t, st, strlen(st), false, &cut, 1, a, 64);
        nb = tok_encode(t, st, strlen(st), false, false, b, 64);
        CHECKF(ids_same(a, na, b, nb), "a span cutting <s>: plain (%d vs %d)", na, nb);
        /* a span over the closing "</s>" (end clipped to the text) */
        const tok_span two[2] = {{0, 3}, {7, 100}};
        na = tok_encode_spans(t, st, strlen(st), false, two, 2, a, 64);
        CHECKF(na == 3 && a[0] == 1 && a[1] == 403 && a[2] == 2, "two spans: %d tokens", na);
        na = tok_encode_spans(t, st, strlen(st), false, &last, 1, a, 64);
        CHECKF(na >= 2 && a[na - 1] == 2 && a[0] != 1, "span over </s>: %d tokens", na);
        CHECK(tok_encode_spans(t, st, strlen(st), false, &all, 1, NULL, 0) == -3);
    }

    /* corpus: whole text, each story, each line; ids in range; curly quotes
     * exercise byte fallback */
    char path[4096];
    snprintf(path, sizeof path, "%s/corpora/tinystories_sample_cs336.txt", g_models);
    size_t clen;
    char *corpus = read_file(path, &clen);
    CHECKF(corpus != NULL, "cannot read %s", path);
    if (corpus) {
        int k = roundtrip(t, corpus, clen, true, false, 0, "whole corpus");
        int32_t *cids = malloc(((size_t)clen + 8) * sizeof *cids);
        int cn = tok_encode(t, corpus, clen, true, false, cids, (int)clen + 8);
        CHECK(cn == k && cn > 100 && cn < (int)clen / 2);
        /* text without special tokens: spans anywhere change nothing */
        {
            int32_t *sids = malloc(((size_t)clen + 8) * sizeof *sids);
            const tok_span sp[3] = {{0, 100}, {clen / 3, clen / 3 + 3}, {clen / 2, clen}};
            int sn = tok_encode_spans(t, corpus, clen, true, sp, 3, sids, (int)clen + 8);
            CHECK(ids_same(sids, sn, cids, cn));
            free(sids);
        }
        int nbyte = 0;
        for (int i = 0; i < cn; i++) {
            CHECK(tok_valid_id(t, cids[i]));
            nbyte += tok_token_type(t, cids[i]) == TOK_TYPE_BYTE;
        }
        CHECKF(nbyte > 0, "corpus should need byte fallback (curly quotes)");
        /* the stream gives the same bytes as one-shot decode */
        char *streamed;
        size_t sn = stream_all(t, cids, cn, 0, &streamed);
        CHECKF(sn == clen && memcmp(streamed, corpus, clen) == 0, "stream decode of the corpus differs");
        free(streamed);
        free(cids);

        int lines = 0;
        for (char *p = corpus; p < corpus + clen;) {
            char *e = memchr(p, '\n', (size_t)(corpus + clen - p));
            size_t ln = e ? (size_t)(e - p) : (size_t)(corpus + clen - p);
            roundtrip(t, p, ln, lines % 2 == 0, false, 0, "corpus line");
            lines++;
            p += ln + 1;
        }
        CHECK(lines > 10);
        free(corpus);
    }

    /* edge strings */
#define E(x) {x, sizeof(x) - 1}
    static const struct { const char *s; size_t n; } edges[] = {
        E(""), E(" "), E("  "), E("\n"), E(" \n "), E("a"), E(" a"), E("a "), E("  leading and trailing  "),
        E("tab\there"), E("\xe2\x96\x81x"), E("nul\0byte"), E("\xff\xfe broken \xc3"), E("\xf0\x9f\x8e"),
        E("\xe2 \xe2\x96 \xf0\x9f"), E("\xc3"), E("\x80\x80 "),
    };
#undef E
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++) {
        if (i == 10) continue; /* a literal U+2581 becomes a space: SPM cannot tell them apart */
        roundtrip(t, edges[i].s, edges[i].n, false, false, 0, "edge string");
        roundtrip(t, edges[i].s, edges[i].n, true, false, 0, "edge string with BOS");
    }
    n = tok_encode(t, edges[10].s, 4, false, false, ids, 64);
    CHECK(tok_decode(t, ids, n, buf, sizeof buf, 0) == 2 && memcmp(buf, " x", 2) == 0);

    tok_destroy(t);
}

static void test_stream(void) {
    char err[512];
    tokenizer *t = load("stories260K.gguf", err, sizeof err);
    CHECKF(t != NULL, "stories260K: %s", err);
    if (!t) return;
    size_t mo = tok_stream_max_out(t);
    char *out = malloc(mo);
    tok_stream st;

    /* multi-byte text fed as byte tokens, one byte at a time */
    const char *text = "h\xc3\xa9llo w\xc3\xb6rld \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x8e\x89";
    size_t tl = strlen(text);
    int32_t ids[64];
    for (size_t i = 0; i < tl; i++) ids[i] = byte_tok(t, (unsigned char)text[i]);
    char *streamed;
    size_t sn = stream_all(t, ids, (int)tl, 0, &streamed);
    CHECK(sn == tl && memcmp(streamed, text, tl) == 0);
    free(streamed);
    char one[128];
    CHECK(tok_decode(t, ids, (int)tl, one, sizeof one, 0) == (int)tl && memcmp(one, text, tl) == 0);
    /* held until complete: "é" = C3 A9, "🎉" = F0 9F 8E 89 */
    tok_stream_init(&st, t, 0);
    CHECK(tok_stream_feed(&st, t, byte_tok(t, 0xC3), out, mo) == 0);
    CHECK(tok_stream_feed(&st, t, byte_tok(t, 0xA9), out, mo) == 2 && memcmp(out, "\xc3\xa9", 2) == 0);
    CHECK(tok_stream_feed(&st, t, byte_tok(t, 0xF0), out, mo) == 0);
    CHECK(tok_stream_feed(&st, t, byte_tok(t, 0x9F), out, mo) == 0);
    CHECK(tok_stream_feed(&st, t, byte_tok(t, 0x8E), out, mo) == 0);
    CHECK(tok_stream_feed(&st, t, byte_tok(t, 0x89), out, mo) == 4);
    CHECK(tok_stream_flush(&st, out, mo) == 0);
    /* the same text through the real encoder, token by token */
    int n = tok_encode(t, text, tl, true, false, ids, 64);
    CHECK(n > 0);
    sn = stream_all(t, ids, n, 0, &streamed);
    CHECK(sn == tl && memcmp(streamed, text, tl) == 0);
    free(streamed);

    /* invalid sequences become U+FFFD once they cannot complete */
    const char *R = "\xef\xbf\xbd";
    tok_stream_init(&st, t, 0);
    CHECK(tok_stream_feed(&st, t, byte_tok(t, 0xC3), out, mo) == 0);
    CHECK(tok_stream_feed(&st, t, byte_tok(t, 'A'), out, mo) == 4 && memcmp(out, "\xef\xbf\xbd" "A", 4) == 0);
    CHECK(tok_stream_feed(&st, t, byte_tok(t, 0x80), out, mo) == 3 && memcmp(out, R, 3) == 0);
    CHECK(tok_stream_feed(&st, t, byte_tok(t, 0xE6), out, mo) == 0);
    CHECK(tok_stream_feed(&st, t, byte_tok(t, 0x97), out, mo) == 0);
    CHECK(tok_stream_flush(&st, out, 3) == 3 && memcmp(out, R, 3) == 0);
    CHECK(tok_stream_flush(&st, out, 3) == 0);
    /* surrogate ED A0 80 and overlong C0 AF: no valid prefix, one U+FFFD per byte */
    const unsigned bad[5] = {0xED, 0xA0, 0x80, 0xC0, 0xAF};
    size_t total = 0;
    tok_stream_init(&st, t, 0);
    for (int i = 0; i < 5; i++) {
        int k = tok_stream_feed(&st, t, byte_tok(t, bad[i]), out, mo);
        CHECK(k >= 0);
        for (int j = 0; j + 3 <= k; j += 3) CHECK(memcmp(out + j, R, 3) == 0);
        total += (size_t)(k > 0 ? k : 0);
    }
    total += (size_t)tok_stream_flush(&st, out, 3);
    CHECKF(total == 15, "5 invalid bytes -> %zu bytes of U+FFFD", total);
    /* a control token in the middle does not break a held sequence */
    tok_stream_init(&st, t, 0);
    CHECK(tok_stream_feed(&st, t, byte_tok(t, 0xC3), out, mo) == 0);
    CHECK(tok_stream_feed(&st, t, 2, out, mo) == 0);
    CHECK(tok_stream_feed(&st, t, byte_tok(t, 0xA9), out, mo) == 2);
    /* leading space: dropped at the start, kept for a continuation */
    tok_stream_init(&st, t, 0);
    CHECK(tok_stream_feed(&st, t, 1, out, mo) == 0);
    CHECK(tok_stream_feed(&st, t, 403, out, mo) == 4 && memcmp(out, "Once", 4) == 0);
    CHECK(tok_stream_feed(&st, t, 407, out, mo) == 5 && memcmp(out, " upon", 5) == 0);
    tok_stream_init(&st, t, TOK_DECODE_CONTINUATION);
    CHECK(tok_stream_feed(&st, t, 403, out, mo) == 5 && memcmp(out, " Once", 5) == 0);
    /* an output buffer below the bound is refused without consuming */
    CHECK(tok_stream_feed(&st, t, 403, out, mo - 1) == -(int)mo);
    free(out);
    tok_destroy(t);
}

static void test_compare(void) {
    char err[512], msg[512];
    tokenizer *a = load("stories260K.gguf", err, sizeof err);
    tokenizer *b = load("llama2xs-281K.gguf", err, sizeof err);
    tokenizer *c = load("aidreams260K.gguf", err, sizeof err);
    CHECKF(a && b && c, "load: %s", err);
    if (!a || !b || !c) goto out;
    CHECKF(tok_compare(a, b, msg, sizeof msg) == 0, "stories vs llama2xs: %s", msg);
    CHECK(tok_hash(a) == tok_hash(b));
    CHECK(tok_compare(a, a, NULL, 0) == 0);

    CHECK(tok_compare(a, c, msg, sizeof msg) == 1);
    CHECK(tok_hash(a) != tok_hash(c));
    int32_t first = -1;
    for (int32_t i = 0; i < tok_n_vocab(a) && first < 0; i++) {
        size_t la, lc;
        const char *sa = tok_token_str(a, i, &la), *sc = tok_token_str(c, i, &lc);
        if (la != lc || memcmp(sa, sc, la) != 0) first = i;
    }
    CHECK(first > 0);
    char want[512];
    snprintf(want, sizeof want, "token %d: target '%s' vs draft '%s'", first, tok_token_str(a, first, NULL),
             tok_token_str(c, first, NULL));
    CHECKF(strcmp(msg, want) == 0, "got \"%s\", want \"%s\"", msg, want);
    fprintf(stderr, "stories260K vs aidreams260K: %s\n", msg);
    CHECK(tok_compare(c, a, msg, sizeof msg) == 1 && strstr(msg, "token ") == msg);
out:
    tok_destroy(a);
    tok_destroy(b);
    tok_destroy(c);
}

/* A gpt2 vocabulary loads as byte-level BPE (its behaviour is tested in
 * test_tokenizer_bpe.c); an SPM and a BPE tokenizer never compare equal. */
static void test_gpt2_loads(void) {
    char err[512] = "";
    tokenizer *t = load("tokenizer-vectors/ggml-vocab-gpt-2.gguf", err, sizeof err);
    CHECKF(t != NULL, "gpt2: %s", err);
    if (t) {
        CHECK(tok_get_kind(t) == TOK_KIND_BPE && tok_n_vocab(t) == 50257);
        int32_t ids[8];
        CHECK(tok_encode(t, "Hello world", 11, true, false, ids, 8) == 2 && ids[0] == 15496 && ids[1] == 995);
        tokenizer *s = load("tokenizer-vectors/ggml-vocab-llama-spm.gguf", err, sizeof err);
        char msg[256];
        if (s) CHECK(tok_compare(s, t, msg, sizeof msg) == 1 && strstr(msg, "tokenizer model"));
        tok_destroy(s);
    }
    tok_destroy(t);
}

/* ---- synthetic vocabularies ---------------------------------------------- */

typedef struct {
    const char *s;
    float score;
    int type;
} tokdef;

/* Writes a vocabulary: <unk> <s> </s>, 256 byte tokens (if bytes), then defs.
 * extra(w) may add or override keys. Returns the tokenizer or NULL (err). */
static tokenizer *synth(const tokdef *defs, int ndefs, bool bytes, void (*extra)(gguf_writer *),
                        char *err, size_t errlen) {
    static char bytenames[256][8];
    const char *strs[600];
    float scores[600];
    int32_t types[600];
    int n = 0;
    strs[n] = "<unk>", scores[n] = 0, types[n++] = TOK_TYPE_UNKNOWN;
    strs[n] = "<s>", scores[n] = 0, types[n++] = TOK_TYPE_CONTROL;
    strs[n] = "</s>", scores[n] = 0, types[n++] = TOK_TYPE_CONTROL;
    if (bytes) {
        for (int b = 0; b < 256; b++) {
            snprintf(bytenames[b], 8, "<0x%02X>", b);
            strs[n] = bytenames[b], scores[n] = 0, types[n++] = TOK_TYPE_BYTE;
        }
    }
    for (int i = 0; i < ndefs; i++) strs[n] = defs[i].s, scores[n] = defs[i].score, types[n++] = defs[i].type;
    gguf_writer *w = gguf_writer_create();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, NULL, (uint64_t)n);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, (uint64_t)n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)n);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (extra) extra(w);
    char path[] = "/tmp/specd-tok-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) { snprintf(err, errlen, "mkstemp failed"); gguf_writer_destroy(w); return NULL; }
    close(fd);
    tokenizer *t = NULL;
    if (gguf_writer_write(w, path, err, errlen) == 0) {
        gguf_file *g = gguf_open(path, NULL, err, errlen);
        if (g) t = tok_create(g, err, errlen);
        gguf_close(g);
    }
    unlink(path);
    gguf_writer_destroy(w);
    return t;
}

#define SP "\xe2\x96\x81"
#define NB (3 + 256) /* first id after the byte tokens */

static bool ids_eq(const int32_t *got, int n, const int32_t *want, int nw) {
    return n == nw && memcmp(got, want, (size_t)n * sizeof *got) == 0;
}

static void test_synthetic_merges(void) {
    char err[512];
    static const tokdef defs[] = {
        {SP, -1, 1},      /* NB+0 */
        {"a", -1, 1},     /* NB+1 */
        {"b", -1, 1},     /* NB+2 */
        {"ab", -2, 1},    /* NB+3 */
        {"ba", -2, 1},    /* NB+4 */
        {"bb", -1.5f, 1}, /* NB+5 */
        {"x", -1, 1},     /* NB+6 */
        {"xx", 5, 3},     /* NB+7: control, high score: never a merge result */
        {"<ud>", -9, 4},  /* NB+8: user-defined */
        {"q", -1, 5},     /* NB+9: unused: never produced */
    };
    tokenizer *t = synth(defs, (int)(sizeof defs / sizeof *defs), true, NULL, err, sizeof err);
    CHECKF(t != NULL, "synth: %s", err);
    if (!t) return;
    int32_t ids[64];
    int n;
    CHECK(tok_find(t, "ab", 2) == NB + 3);
    /* equal scores: leftmost pair first. "aba" -> ▁ ab a; "bab" -> ▁ ba b */
    n = tok_encode(t, "aba", 3, false, false, ids, 64);
    CHECKF(ids_eq(ids, n, (int32_t[]){NB + 0, NB + 3, NB + 1}, 3), "aba: %d tokens", n);
    /* scores decide: "bb" (-1.5) beats "ab" (-2) */
    n = tok_encode(t, "abb", 3, false, false, ids, 64);
    CHECKF(ids_eq(ids, n, (int32_t[]){NB + 0, NB + 1, NB + 5}, 3), "abb: %d tokens", n);
    n = tok_encode(t, "bab", 3, false, false, ids, 64);
    CHECKF(ids_eq(ids, n, (int32_t[]){NB + 0, NB + 4, NB + 2}, 3), "bab: %d tokens", n);
    /* control "xx" is not produced from text unless parse_special */
    n = tok_encode(t, "xx", 2, false, false, ids, 64);
    CHECKF(ids_eq(ids, n, (int32_t[]){NB + 0, NB + 6, NB + 6}, 3), "xx as text: %d tokens", n);
    n = tok_encode(t, "xx", 2, false, true, ids, 64);
    CHECKF(ids_eq(ids, n, (int32_t[]){NB + 7}, 1), "xx special: %d tokens", n);
    n = tok_encode_spans(t, "xx", 2, false, &(tok_span){0, 2}, 1, ids, 64);
    CHECKF(ids_eq(ids, n, (int32_t[]){NB + 7}, 1), "xx in a span: %d tokens", n);
    n = tok_encode_spans(t, "xx", 2, false, &(tok_span){1, 2}, 1, ids, 64);
    CHECKF(ids_eq(ids, n, (int32_t[]){NB + 0, NB + 6, NB + 6}, 3), "xx half in a span: %d tokens", n);
    /* user-defined tokens outside the spans still match whole, as in plain text */
    n = tok_encode_spans(t, "a<ud>b", 6, false, &(tok_span){0, 1}, 1, ids, 64);
    CHECKF(ids_eq(ids, n, (int32_t[]){NB + 0, NB + 1, NB + 8, NB + 0, NB + 2}, 5), "a<ud>b with spans: %d", n);
    /* user-defined tokens are matched whole even without parse_special, and
     * the text after them gets the space prefix again */
    n = tok_encode(t, "a<ud>b", 6, false, false, ids, 64);
    CHECKF(ids_eq(ids, n, (int32_t[]){NB + 0, NB + 1, NB + 8, NB + 0, NB + 2}, 5), "a<ud>b: %d tokens", n);
    roundtrip(t, "a<ud>b", 6, false, false, 0, "a<ud>b");
    roundtrip(t, "<ud> a<ud><ud>", 14, true, false, 0, "<ud> a<ud><ud>");
    /* unused "q" is not emitted: byte fallback */
    n = tok_encode(t, "q", 1, false, false, ids, 64);
    CHECKF(ids_eq(ids, n, (int32_t[]){NB + 0, 3 + 'q'}, 2), "q: %d tokens", n);
    /* characters without a token: UTF-8 bytes */
    n = tok_encode(t, "\xc3\xa9", 2, false, false, ids, 64);
    CHECKF(ids_eq(ids, n, (int32_t[]){NB + 0, 3 + 0xC3, 3 + 0xA9}, 3), "e-acute: %d tokens", n);
    tok_destroy(t);

    /* a piece with a space inside ("a▁b"): merges must cross word starts */
    static const tokdef defs2[] = {
        {SP, -1, 1},         /* NB+0 */
        {"a", -1, 1},        /* NB+1 */
        {"b", -1, 1},        /* NB+2 */
        {"a" SP "b", -1, 1}, /* NB+3 */
        {"a" SP, -2, 1},     /* NB+4 */
    };
    t = synth(defs2, 5, true, NULL, err, sizeof err);
    CHECKF(t != NULL, "synth2: %s", err);
    if (!t) return;
    n = tok_encode(t, "a b a", 5, false, false, ids, 64);
    CHECKF(ids_eq(ids, n, (int32_t[]){NB + 0, NB + 3, NB + 0, NB + 1}, 4), "a b a: %d tokens", n);
    roundtrip(t, "a b a", 5, true, false, 0, "a b a");
    tok_destroy(t);
}

static void no_prefix(gguf_writer *w) {
    gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", false);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", true);
    gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", NB + 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", 0xFFFFFFFFu);
}
static void bad_bos(gguf_writer *w) { gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 9999); }
static void bad_model(gguf_writer *w) { gguf_writer_set_str(w, "tokenizer.ggml.model", "bert"); }
static void no_unk(gguf_writer *w) { gguf_writer_set_i32(w, "tokenizer.ggml.unknown_token_id", -1); }

static void test_synthetic_flags_and_errors(void) {
    char err[512];
    static const tokdef defs[] = {{SP, -1, 1}, {"a", -1, 1}, {"<eot>", 0, 3}};
    tokenizer *t = synth(defs, 3, true, no_prefix, err, sizeof err);
    CHECKF(t != NULL, "synth: %s", err);
    if (t) {
        CHECK(!tok_add_space_prefix(t) && tok_add_eos(t) && tok_pad(t) == -1);
        CHECK(tok_is_eog(t, 2) && tok_is_eog(t, NB + 1) && !tok_is_eog(t, NB + 0));
        int32_t ids[16];
        int n = tok_encode(t, "a a", 3, true, false, ids, 16);
        CHECKF(ids_eq(ids, n, (int32_t[]){1, NB + 1, NB + 0, NB + 1, 2}, 5), "a a: %d tokens", n);
        roundtrip(t, " a", 2, true, false, 0, "no-prefix vocab");
        tok_destroy(t);
    }

    err[0] = '\0';
    t = synth(defs, 3, true, bad_bos, err, sizeof err);
    CHECKF(t == NULL && strstr(err, "bos_token_id") && strstr(err, "9999"), "bad bos: '%s'", err);
    tok_destroy(t);
    err[0] = '\0';
    t = synth(defs, 3, true, bad_model, err, sizeof err);
    CHECKF(t == NULL && strstr(err, "'bert'"), "bad model: '%s'", err);
    tok_destroy(t);
    /* no byte tokens and no unknown token: it loads (as in llama.cpp) and a
     * byte with no token is dropped from the encoding */
    err[0] = '\0';
    t = synth(defs, 3, false, no_unk, err, sizeof err);
    CHECKF(t != NULL, "no fallback: '%s'", err);
    if (t) {
        int32_t ids[16];
        int n = tok_encode(t, "a\xc3\xa9" "a", 4, false, false, ids, 16);
        CHECKF(ids_eq(ids, n, (int32_t[]){3 + 0, 3 + 1, 3 + 1}, 3), "no fallback: %d tokens", n);
    }
    tok_destroy(t);
    /* no byte tokens but an unknown token: unknown bytes map to it */
    t = synth(defs, 3, false, NULL, err, sizeof err);
    CHECKF(t != NULL, "unk fallback: %s", err);
    if (t) {
        int32_t ids[16];
        int n = tok_encode(t, "a\xc3\xa9", 3, false, false, ids, 16);
        CHECKF(ids_eq(ids, n, (int32_t[]){3 + 0, 3 + 1, 0, 0}, 4), "unk fallback: %d tokens", n);
        tok_destroy(t);
    }

    /* missing tokens array */
    gguf_writer *w = gguf_writer_create();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    char path[] = "/tmp/specd-tok-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(gguf_writer_write(w, path, err, sizeof err) == 0);
    gguf_file *g = gguf_open(path, NULL, err, sizeof err);
    CHECK(g != NULL);
    if (g) {
        t = tok_create(g, err, sizeof err);
        CHECKF(t == NULL && strstr(err, "tokenizer.ggml.tokens"), "no tokens: '%s'", err);
        tok_destroy(t);
        gguf_close(g);
    }
    unlink(path);
    gguf_writer_destroy(w);
}

/* ---- speed figure (printed, not asserted) ---------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void bench_encode(void) {
    char err[512], path[4096];
    snprintf(path, sizeof path, "%s/corpora/tinyshakespeare_input.txt", g_models);
    size_t len;
    char *text = read_file(path, &len);
    if (!text) return;
    if (len > 10240) len = 10240;
    const char *vocabs[2] = {"stories260K.gguf", "tokenizer-vectors/ggml-vocab-llama-spm.gguf"};
    int32_t *ids = malloc((len + 8) * sizeof *ids);
    for (int v = 0; v < 2; v++) {
        tokenizer *t = load(vocabs[v], err, sizeof err);
        if (!t) continue;
        int n = 0, reps = 20;
        double t0 = now_s();
        for (int r = 0; r < reps; r++) n = tok_encode(t, text, len, true, false, ids, (int)len + 8);
        double ms = (now_s() - t0) * 1e3 / reps;
        CHECK(n > 0);
        roundtrip(t, text, len, true, false, 0, "shakespeare 10 KB");
        fprintf(stderr, "encode %zu bytes with %s: %d tokens, %.3f ms\n", len, vocabs[v], n, ms);
        tok_destroy(t);
    }
    free(ids);
    free(text);
}

int main(void) {
    g_models = getenv("SPECD_MODELS");
    if (!g_models) SKIP("SPECD_MODELS not set");
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/stories260K.gguf", g_models);
    if (access(probe, R_OK) != 0) SKIP("%s not readable", probe);
    test_stories();
    test_stream();
    test_compare();
    test_gpt2_loads();
    test_synthetic_merges();
    test_synthetic_flags_and_errors();
    bench_encode();
    TEST_DONE();
}
