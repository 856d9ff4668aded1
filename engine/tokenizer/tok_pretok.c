/* tok_pretok.c — the byte-level BPE pre-tokenizers: each llama.cpp regex
 * written as code (gpt-2, llama-bpe, qwen2, starcoder, falcon, deepseek-coder,
 * deepseek-llm, default), applied pass by pass as llama.cpp does; the
 * tokenizer.ggml.pre names that select them; and tok_split. */
#include "engine/tokenizer/tok_internal.h"

#define CP_INVALID UINT32_MAX

static inline bool cp_L(uint32_t c) { return c != CP_INVALID && uni_classify(c) == UNI_L; }
static inline bool cp_N(uint32_t c) { return c != CP_INVALID && uni_classify(c) == UNI_N; }
static inline bool cp_S(uint32_t c) { return c != CP_INVALID && uni_is_space(c); }
/* [^\s\p{L}\p{N}] */
static inline bool cp_O(uint32_t c) { return c == CP_INVALID || (!uni_is_space(c) && uni_classify(c) == UNI_OTHER); }
static inline bool cp_RN(uint32_t c) { return c == '\r' || c == '\n'; }
static inline uint32_t cp_lower_ascii(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* 's|'t|'re|'ve|'m|'ll|'d at i (ASCII case folded when fold): end, or i. */
static size_t pre_contraction(const cps *c, size_t i, bool fold) {
    if (c->cp[i] != '\'' || i + 1 >= c->n) return i;
    uint32_t a = c->cp[i + 1], b = i + 2 < c->n ? c->cp[i + 2] : 0;
    if (fold) { a = cp_lower_ascii(a); b = cp_lower_ascii(b); }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return i;
}

/* \s+(?!\S)|\s+ at a white space i: the run, less its last character when
 * a non-space follows and the run is longer than one (both alternatives). */
static size_t pre_space_run(const cps *c, size_t i) {
    size_t j = i;
    while (j < c->n && cp_S(c->cp[j])) j++;
    if (j < c->n && j - i > 1) return j - 1;
    return j;
}

static size_t pre_gpt2(const cps *c, size_t i) {
    const uint32_t *cp = c->cp;
    size_t n = c->n, j;
    if ((j = pre_contraction(c, i, false)) > i) return j;
    size_t k = i + (cp[i] == ' ' && i + 1 < n ? 1 : 0); /* after the optional ' ' */
    if (cp_L(cp[k])) { while (k < n && cp_L(cp[k])) k++; return k; }
    if (cp_N(cp[k])) { while (k < n && cp_N(cp[k])) k++; return k; }
    if (cp_O(cp[k])) { while (k < n && cp_O(cp[k])) k++; return k; }
    return pre_space_run(c, i); /* cp[i] is white space here */
}

static size_t pre_llama3(const cps *c, size_t i, size_t max_digits) {
    const uint32_t *cp = c->cp;
    size_t n = c->n, j;
    if ((j = pre_contraction(c, i, true)) > i) return j;
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    j = i;
    if (!cp_L(cp[j]) && !cp_N(cp[j]) && !cp_RN(cp[j]) && j + 1 < n && cp_L(cp[j + 1])) j++;
    if (cp_L(cp[j])) { while (j < n && cp_L(cp[j])) j++; return j; }
    /* \p{N}{1,3} */
    if (cp_N(cp[i])) {
        j = i;
        while (j < n && j - i < max_digits && cp_N(cp[j])) j++;
        return j;
    }
    /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
    j = i + (cp[i] == ' ' && i + 1 < n ? 1 : 0);
    if (cp_O(cp[j])) {
        while (j < n && cp_O(cp[j])) j++;
        while (j < n && cp_RN(cp[j])) j++;
        return j;
    }
    /* \s*[\r\n]+: up to the last \r or \n of the white space run */
    size_t end = i, last = SIZE_MAX;
    while (end < n && cp_S(cp[end])) { if (cp_RN(cp[end])) last = end; end++; }
    if (last != SIZE_MAX) return last + 1;
    return pre_space_run(c, i);
}

/* ---- multi-pass pre-tokenizers ------------------------------------------
 * A pre-tokenizer is a list of regexes applied in turn, as llama.cpp does:
 * each one splits every fragment left by the previous ones into its matches
 * (leftmost first) and the text between them, and both kinds of fragment go on
 * to the next regex; a regex's lookahead ends at its fragment's end. Each
 * regex here is code: pass_match says where a match starting at q ends (q when
 * none starts there). */

typedef enum {
    PASS_GPT2,        /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
    PASS_LLAMA3,      /* the Llama 3 regex, \p{N}{1,3} */
    PASS_QWEN2,       /* the same with single digits */
    PASS_DIGIT,       /* \p{N} */
    PASS_FALCON_PUNCT,/* [\p{P}\$\+<=>\^~\|`]+ */
    PASS_DEFAULT_PUNCT,/* [\p{P}\$\+<=>\^~\|]+ (falcon's without the backtick) */
    PASS_3DIGITS,     /* [0-9][0-9][0-9] */
    PASS_RN,          /* [\r\n] */
    PASS_SP_LETTERS,  /* \s?\p{L}+ */
    PASS_SP_PUNCT,    /* \s?\p{P}+ */
    PASS_CJK,         /* [一-龥ࠀ-一가-퟿]+ */
    PASS_DS_LETTERS,  /* \s?[A-Za-zµÀ-Ö...𞤀-𞥃]+ (deepseek-llm's explicit letter list) */
    PASS_DS_PUNCT,    /* \s?[!-/:-~！-／：-～‘-‟　-。]+ */
    PASS_TRAILING_SP, /* \s+$ */
    PASS_NUMBER,      /* \p{N}+ */
} pre_pass;

static const pre_pass PRE_GPT2[] = {PASS_GPT2};
static const pre_pass PRE_LLAMA3[] = {PASS_LLAMA3};
static const pre_pass PRE_QWEN2[] = {PASS_QWEN2};
static const pre_pass PRE_STARCODER[] = {PASS_DIGIT, PASS_GPT2};
static const pre_pass PRE_FALCON[] = {PASS_FALCON_PUNCT, PASS_GPT2, PASS_3DIGITS};
static const pre_pass PRE_DEEPSEEK_CODER[] = {PASS_RN, PASS_SP_LETTERS, PASS_SP_PUNCT, PASS_CJK, PASS_DIGIT};
static const pre_pass PRE_DEFAULT[] = {PASS_DEFAULT_PUNCT, PASS_GPT2, PASS_NUMBER, PASS_3DIGITS};
static const pre_pass PRE_DEEPSEEK_LLM[] = {PASS_RN, PASS_DS_LETTERS, PASS_DS_PUNCT, PASS_TRAILING_SP, PASS_CJK,
                                            PASS_NUMBER};

/* The letter ranges of deepseek-llm's second regex, as llama.cpp publishes
 * it (sorted; written out as code points so no Unicode normalization can
 * change them: U+1F7D, U+1FD3, U+1FDB, U+1FBE, U+2126 and U+212A are the
 * compatibility characters of the original). */
static const uni_span DS_LETTERS[] = {
    {0x41, 0x5A}, {0x61, 0x7A}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x1BA}, {0x1BC, 0x1BF},
    {0x1C4, 0x293}, {0x295, 0x2AF}, {0x370, 0x373}, {0x376, 0x376}, {0x377, 0x377}, {0x37B, 0x37D},
    {0x37F, 0x37F}, {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C}, {0x38E, 0x3A1}, {0x3A3, 0x3F5},
    {0x3F7, 0x481}, {0x48A, 0x52F}, {0x531, 0x556}, {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD},
    {0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A},
    {0x1E00, 0x1F15}, {0x1F18, 0x1F1D}, {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57},
    {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4},
    {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3},
    {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102},
    {0x2107, 0x2107}, {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124},
    {0x2126, 0x2126}, {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139},
    {0x213C, 0x213F}, {0x2145, 0x2149}, {0x214E, 0x214E}, {0x2183, 0x2183}, {0x2184, 0x2184},
    {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF2}, {0x2CF3, 0x2CF3},
    {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787}, {0xA78B, 0xA78E},
    {0xAB70, 0xABBF}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A},
    {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2},
    {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};

static bool cp_ds_letter(uint32_t c) {
    return uni_in_spans(DS_LETTERS, sizeof DS_LETTERS / sizeof DS_LETTERS[0], c);
}
static bool cp_ds_punct(uint32_t c) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x7E) || (c >= 0xFF01 && c <= 0xFF0F) ||
           (c >= 0xFF1A && c <= 0xFF5E) || (c >= 0x2018 && c <= 0x201F) || (c >= 0x3000 && c <= 0x3002);
}

static inline bool cp_P(uint32_t c) { return c != CP_INVALID && uni_is_punct(c); }
static inline bool cp_falcon_punct(uint32_t c) {
    return cp_P(c) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' || c == '~' || c == '|' ||
           c == '`';
}
static inline bool cp_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x0800 && c <= 0x4E00) || (c >= 0xAC00 && c <= 0xD7FF);
}
static inline bool cp_digit09(uint32_t c) { return c >= '0' && c <= '9'; }

/* \s?X+ at q for a class X: end, or q. */
static size_t pass_sp_run(const cps *c, size_t q, bool (*cls)(uint32_t)) {
    size_t j = q;
    if (cp_S(c->cp[j]) && j + 1 < c->n && cls(c->cp[j + 1])) j++;
    if (!cls(c->cp[j])) return q;
    while (j < c->n && cls(c->cp[j])) j++;
    return j;
}

static size_t pass_match(pre_pass p, const cps *c, size_t q) {
    const uint32_t *cp = c->cp;
    size_t j = q;
    switch (p) {
    case PASS_GPT2: return pre_gpt2(c, q);
    case PASS_LLAMA3: return pre_llama3(c, q, 3);
    case PASS_QWEN2: return pre_llama3(c, q, 1);
    case PASS_DIGIT: return cp_N(cp[q]) ? q + 1 : q;
    case PASS_FALCON_PUNCT: while (j < c->n && cp_falcon_punct(cp[j])) j++; return j;
    case PASS_DEFAULT_PUNCT: while (j < c->n && cp[j] != '`' && cp_falcon_punct(cp[j])) j++; return j;
    case PASS_3DIGITS:
        return q + 3 <= c->n && cp_digit09(cp[q]) && cp_digit09(cp[q + 1]) && cp_digit09(cp[q + 2]) ? q + 3 : q;
    case PASS_RN: return cp_RN(cp[q]) ? q + 1 : q;
    case PASS_SP_LETTERS: return pass_sp_run(c, q, cp_L);
    case PASS_SP_PUNCT: return pass_sp_run(c, q, cp_P);
    case PASS_CJK: while (j < c->n && cp_cjk(cp[j])) j++; return j;
    case PASS_DS_LETTERS: return pass_sp_run(c, q, cp_ds_letter);
    case PASS_DS_PUNCT: return pass_sp_run(c, q, cp_ds_punct);
    case PASS_TRAILING_SP: while (j < c->n && cp_S(cp[j])) j++; return j == c->n ? j : q;
    case PASS_NUMBER: while (j < c->n && cp_N(cp[j])) j++; return j;
    }
    return q;
}

typedef struct {
    const pre_pass *passes;
    int n_passes;
    uint32_t *ends;   /* piece ends (code point indices), in order */
    size_t n_ends;
} pre_split_state;

/* Splits fragment [a, b) with passes k.. and appends the final pieces' ends. */
static void pre_fragment(pre_split_state *ps, const uint32_t *cp, int k, size_t a, size_t b) {
    if (a >= b) return;
    if (k == ps->n_passes) {
        ps->ends[ps->n_ends++] = (uint32_t)b;
        return;
    }
    cps view = {cp, b}; /* lookaheads end at the fragment's end */
    size_t p = a;
    while (p < b) {
        size_t q = p, e = p;
        while (q < b && (e = pass_match(ps->passes[k], &view, q)) <= q) q++;
        if (q == b) {
            pre_fragment(ps, cp, k + 1, p, b);
            return;
        }
        pre_fragment(ps, cp, k + 1, p, q);
        pre_fragment(ps, cp, k + 1, q, e);
        p = e;
    }
}

/* All pre-token ends of a run of n code points into ends (room for n);
 * returns their count. */
size_t tok_pre_split(tok_pre pre, const cps *c, uint32_t *ends) {
    pre_split_state ps = {.ends = ends};
    switch (pre) {
#define PRE(a) ps.passes = a, ps.n_passes = (int)(sizeof(a) / sizeof(a[0]))
    case TOK_PRE_GPT2: PRE(PRE_GPT2); break;
    case TOK_PRE_LLAMA3: PRE(PRE_LLAMA3); break;
    case TOK_PRE_QWEN2: PRE(PRE_QWEN2); break;
    case TOK_PRE_STARCODER: PRE(PRE_STARCODER); break;
    case TOK_PRE_FALCON: PRE(PRE_FALCON); break;
    case TOK_PRE_DEEPSEEK_CODER: PRE(PRE_DEEPSEEK_CODER); break;
    case TOK_PRE_DEEPSEEK_LLM: PRE(PRE_DEEPSEEK_LLM); break;
    case TOK_PRE_DEFAULT: PRE(PRE_DEFAULT); break;
#undef PRE
    default: TOK_ABORT("pre-tokenizer %d", (int)pre);
    }
    pre_fragment(&ps, c->cp, 0, 0, c->n);
    return ps.n_ends;
}

int tok_split_pre(tok_pre pre, const char *text, size_t len, size_t *ends, int max) {
    if (len > TOK_MAX_TEXT) TOK_ABORT("tok_split: text of %zu bytes (limit %zu)", len, TOK_MAX_TEXT);
    if (max < 0) max = 0;
    if (pre == TOK_PRE_NONE) {
        if (len == 0) return 0;
        if (max > 0) ends[0] = len;
        return max > 0 ? 1 : -1;
    }
    uint32_t *cp = malloc(3 * (len + 1) * sizeof *cp);
    if (!cp) TOK_ABORT("out of memory");
    uint32_t *off = cp + len + 1, *pe = off + len + 1;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t cl;
        cp[n] = utf8_decode(text + i, len - i, &cl);
        off[n++] = (uint32_t)i;
        i += cl;
    }
    off[n] = (uint32_t)len;
    cps c = {cp, n};
    int count = (int)tok_pre_split(pre, &c, pe);
    for (int k = 0; k < count && k < max; k++) ends[k] = off[pe[k]];
    free(cp);
    return count <= max ? count : -count;
}

int tok_split(const tokenizer *t, const char *text, size_t len, size_t *ends, int max) {
    return tok_split_pre(t->kind == TOK_KIND_BPE ? t->pre : TOK_PRE_NONE, text, len, ends, max);
}

/* ---- names ----------------------------------------------------------------
 * The tokenizer.ggml.pre values specd accepts, each with the pre-tokenizer
 * llama.cpp gives it (src/llama-vocab.cpp, llama_vocab::impl::load; "gpt-neox"
 * is specd's own: the GPT-NeoX tokenizer uses the gpt-2 regex). */

static const struct {
    const char *name;
    tok_pre pre;
} PRE_NAMES[] = {
    {"default", TOK_PRE_DEFAULT},     {"gpt-2", TOK_PRE_GPT2},
    {"mpt", TOK_PRE_GPT2},            {"gpt-neox", TOK_PRE_GPT2},
    {"olmo", TOK_PRE_GPT2},           {"llama-bpe", TOK_PRE_LLAMA3},
    {"qwen2", TOK_PRE_QWEN2},         {"starcoder", TOK_PRE_STARCODER},
    {"refact", TOK_PRE_STARCODER},    {"smollm", TOK_PRE_STARCODER},
    {"command-r", TOK_PRE_STARCODER}, {"falcon", TOK_PRE_FALCON},
    {"deepseek-llm", TOK_PRE_DEEPSEEK_LLM}, {"deepseek-coder", TOK_PRE_DEEPSEEK_CODER},
};

tok_pre tok_pre_parse(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof PRE_NAMES / sizeof PRE_NAMES[0]; i++)
        if (strlen(PRE_NAMES[i].name) == len && memcmp(PRE_NAMES[i].name, name, len) == 0) return PRE_NAMES[i].pre;
    return TOK_PRE_NONE;
}

void tok_pre_list(char *buf, size_t n) {
    size_t o = 0;
    if (n) buf[0] = '\0';
    for (size_t i = 0; i < sizeof PRE_NAMES / sizeof PRE_NAMES[0] && o < n; i++) {
        int w = snprintf(buf + o, n - o, "%s'%s'", i ? ", " : "", PRE_NAMES[i].name);
        if (w < 0) break;
        o += (size_t)w;
    }
}
