/* tokenizer.c — tokenizers built from GGUF metadata: SentencePiece-style (SPM:
 * greedy score-driven bigram merging, byte fallback) and byte-level BPE (gpt2:
 * hand-written regex pre-tokenizers, GPT-2 byte<->unicode mapping, ranked
 * merges). This file: the facts, the draft/target comparison and the encode
 * driver (special tokens, runs handed to the SPM or BPE encoder); the parts
 * live beside it (tok_internal.h lists them). Not here: a general regex engine
 * (each pre-tokenizer is code). */
#include "engine/tokenizer/tok_internal.h"

/* ---- facts ------------------------------------------------------------- */

tok_kind tok_get_kind(const tokenizer *t) { return t->kind; }

const char *tok_kind_name(tok_kind k) {
    switch (k) {
    case TOK_KIND_SPM: return "llama";
    case TOK_KIND_BPE: return "gpt2";
    }
    return "?";
}

tok_pre tok_get_pre(const tokenizer *t) { return t->pre; }

const char *tok_pre_name(tok_pre p) {
    switch (p) {
    case TOK_PRE_NONE: return "none";
    case TOK_PRE_GPT2: return "gpt-2";
    case TOK_PRE_LLAMA3: return "llama-bpe";
    case TOK_PRE_QWEN2: return "qwen2";
    case TOK_PRE_STARCODER: return "starcoder";
    case TOK_PRE_FALCON: return "falcon";
    case TOK_PRE_DEEPSEEK_CODER: return "deepseek-coder";
    case TOK_PRE_DEEPSEEK_LLM: return "deepseek-llm";
    case TOK_PRE_DEFAULT: return "default";
    }
    return "?";
}

int32_t tok_n_merges(const tokenizer *t) { return t->n_merges; }
int32_t tok_n_vocab(const tokenizer *t) { return t->n_vocab; }
bool tok_valid_id(const tokenizer *t, int32_t id) { return id >= 0 && id < t->n_vocab; }
int32_t tok_bos(const tokenizer *t) { return t->bos; }
int32_t tok_eos(const tokenizer *t) { return t->eos; }
int32_t tok_unk(const tokenizer *t) { return t->unk; }
int32_t tok_pad(const tokenizer *t) { return t->pad; }
bool tok_add_bos(const tokenizer *t) { return t->add_bos; }
bool tok_add_eos(const tokenizer *t) { return t->add_eos; }
bool tok_add_space_prefix(const tokenizer *t) { return t->add_space_prefix; }
size_t tok_max_token_len(const tokenizer *t) { return t->max_len; }
uint64_t tok_hash(const tokenizer *t) { return t->hash; }

bool tok_is_eog(const tokenizer *t, int32_t id) {
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}

const char *tok_token_str(const tokenizer *t, int32_t id, size_t *len) {
    check_id(t, id, "tok_token_str");
    if (len) *len = t->len[id];
    return t->text + t->off[id];
}

tok_type tok_token_type(const tokenizer *t, int32_t id) {
    check_id(t, id, "tok_token_type");
    return (tok_type)t->type[id];
}

float tok_score(const tokenizer *t, int32_t id) {
    check_id(t, id, "tok_score");
    return t->score[id];
}

int32_t tok_find(const tokenizer *t, const char *piece, size_t len) {
    return map_find(t, piece, len);
}

/* ---- compare ----------------------------------------------------------- */

/* Quotes s for a message: printable bytes as is, others as \xNN, max 40 bytes. */
static void quote(char *dst, size_t cap, const char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 8 < cap; i++) {
        uint8_t c = (uint8_t)s[i];
        if (i >= 40) { memcpy(dst + o, "...", 3); o += 3; break; }
        if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') o += (size_t)snprintf(dst + o, cap - o, "\\x%02X", c);
        else dst[o++] = (char)c;
    }
    dst[o] = '\0';
}

int tok_compare(const tokenizer *a, const tokenizer *b, char *msg, size_t n) {
    char qa[200], qb[200];
    if (a->kind != b->kind) {
        util_fail(msg, n, "tokenizer model: target '%s' vs draft '%s'", tok_kind_name(a->kind), tok_kind_name(b->kind));
        return 1;
    }
    if (a->n_vocab != b->n_vocab) {
        util_fail(msg, n, "vocabulary size: target %" PRId32 " vs draft %" PRId32, a->n_vocab, b->n_vocab);
        return 1;
    }
    for (int32_t i = 0; i < a->n_vocab; i++) {
        const char *sa = a->text + a->off[i], *sb = b->text + b->off[i];
        quote(qa, sizeof qa, sa, a->len[i]);
        if (a->len[i] != b->len[i] || memcmp(sa, sb, a->len[i]) != 0) {
            quote(qb, sizeof qb, sb, b->len[i]);
            util_fail(msg, n, "token %" PRId32 ": target '%s' vs draft '%s'", i, qa, qb);
            return 1;
        }
        if (a->type[i] != b->type[i]) {
            util_fail(msg, n, "token %" PRId32 " '%s': type target %d vs draft %d", i, qa, a->type[i], b->type[i]);
            return 1;
        }
        if (memcmp(&a->score[i], &b->score[i], sizeof(float)) != 0) {
            util_fail(msg, n, "token %" PRId32 " '%s': score target %.9g vs draft %.9g", i, qa,
                    (double)a->score[i], (double)b->score[i]);
            return 1;
        }
    }
    static const char *const names[6] = {"bos", "eos", "unknown", "padding", "eot", "eom"};
    const int32_t ia[6] = {a->bos, a->eos, a->unk, a->pad, a->eot, a->eom};
    const int32_t ib[6] = {b->bos, b->eos, b->unk, b->pad, b->eot, b->eom};
    for (int i = 0; i < 6; i++) {
        if (ia[i] != ib[i]) {
            util_fail(msg, n, "%s token id: target %" PRId32 " vs draft %" PRId32, names[i], ia[i], ib[i]);
            return 1;
        }
    }
    static const char *const fnames[3] = {"add_bos_token", "add_eos_token", "add_space_prefix"};
    const bool fa[3] = {a->add_bos, a->add_eos, a->add_space_prefix};
    const bool fb[3] = {b->add_bos, b->add_eos, b->add_space_prefix};
    for (int i = 0; i < 3; i++) {
        if (fa[i] != fb[i]) {
            util_fail(msg, n, "%s: target %s vs draft %s", fnames[i], fa[i] ? "true" : "false", fb[i] ? "true" : "false");
            return 1;
        }
    }
    if (a->pre != b->pre) {
        util_fail(msg, n, "pre-tokenizer: target '%s' vs draft '%s'", tok_pre_name(a->pre), tok_pre_name(b->pre));
        return 1;
    }
    if (a->n_merges != b->n_merges) {
        util_fail(msg, n, "merges: target %" PRId32 " vs draft %" PRId32, a->n_merges, b->n_merges);
        return 1;
    }
    for (int32_t i = 0; i < a->n_merges; i++) {
        const char *sa = a->mtext + a->moff[i], *sb = b->mtext + b->moff[i];
        if (a->mlen[i] != b->mlen[i] || memcmp(sa, sb, a->mlen[i]) != 0) {
            quote(qa, sizeof qa, sa, a->mlen[i]);
            quote(qb, sizeof qb, sb, b->mlen[i]);
            util_fail(msg, n, "merge %" PRId32 ": target '%s' vs draft '%s'", i, qa, qb);
            return 1;
        }
    }
    util_fail(msg, n, "identical");
    return 0;
}

/* Longest special token starting at text (leftmost-longest): user-defined
 * tokens within len bytes, control and unknown tokens within ctl_len bytes
 * (0: none; ctl_len <= len). */
static int32_t match_special(const tokenizer *t, const char *text, size_t len, size_t ctl_len, size_t *mlen) {
    uint8_t c = (uint8_t)text[0];
    for (uint32_t k = t->special_start[c]; k < t->special_start[c + 1]; k++) {
        int32_t id = t->special[k];
        size_t n = t->len[id];
        if (n <= (t->type[id] == TOK_TYPE_USER_DEFINED ? len : ctl_len) && memcmp(text, t->text + t->off[id], n) == 0) {
            *mlen = n;
            return id;
        }
    }
    return -1;
}

/* parse_special: control tokens anywhere; else only inside spans[0..n_spans). */
static int encode(const tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                  const tok_span *spans, int n_spans, int32_t *out, int max_out) {
    if (len > TOK_MAX_TEXT) TOK_ABORT("tok_encode: text of %zu bytes (limit %zu)", len, TOK_MAX_TEXT);
    if (max_out < 0) max_out = 0;
    const bool bpe = t->kind == TOK_KIND_BPE;

    spm_state st = {.t = t, .out = out, .max_out = max_out};
    if (add_special && t->add_bos && t->bos >= 0) emit(&st, t->bos);
    if (len > 0) {
        /* escaped text <= 3 + 3*len bytes; symbols <= that; each merge queues
         * at most 2 bigrams and there are < nsym merges, plus nsym initial */
        size_t esc_cap = 3 + 3 * len;
        st.heap_cap = 3 * (len + 2);
        size_t cp_bytes = bpe ? 3 * (len + 1) * sizeof(uint32_t) : 0;
        size_t bytes = cp_bytes + esc_cap + (len + 2) * sizeof(spm_sym) + st.heap_cap * sizeof(spm_bigram);
        char *scratch = malloc(bytes);
        if (!scratch) TOK_ABORT("out of memory (%zu bytes)", bytes);
        st.sym = (spm_sym *)scratch;
        st.heap = (spm_bigram *)(scratch + (len + 2) * sizeof(spm_sym));
        char *cp_area = scratch + (len + 2) * sizeof(spm_sym) + st.heap_cap * sizeof(spm_bigram);
        st.cp = bpe ? (uint32_t *)cp_area : NULL;
        st.cpoff = bpe ? st.cp + (len + 1) : NULL;
        st.ends = bpe ? st.cpoff + (len + 1) : NULL;
        st.esc = cp_area + cp_bytes;

        /* every run starts the text or follows a special token, so each one
         * gets the space prefix (as llama.cpp and HF's legacy SPM do) */
        size_t run = 0;
        if (parse_special || n_spans > 0 ? t->n_special > 0 : t->n_user > 0) {
            int si = 0; /* first span that ends after i */
            for (size_t i = 0; i < len;) {
                size_t mlen = 0, ctl_len = parse_special ? len - i : 0;
                if (!parse_special) {
                    while (si < n_spans && spans[si].end <= i) si++;
                    if (si < n_spans && spans[si].start <= i)
                        ctl_len = (spans[si].end < len ? spans[si].end : len) - i;
                }
                int32_t id = match_special(t, text + i, len - i, ctl_len, &mlen);
                if (id < 0) { i++; continue; }
                if (i > run) (bpe ? tok_bpe_run : tok_spm_run)(&st, text + run, i - run);
                emit(&st, id);
                i += mlen;
                run = i;
            }
        }
        if (run < len) (bpe ? tok_bpe_run : tok_spm_run)(&st, text + run, len - run);
        free(scratch);
    }
    if (add_special && t->add_eos && t->eos >= 0) emit(&st, t->eos);
    return st.count <= max_out ? st.count : -st.count;
}

int tok_encode(const tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special, int32_t *out,
               int max_out) {
    return encode(t, text, len, add_special, parse_special, NULL, 0, out, max_out);
}

int tok_encode_spans(const tokenizer *t, const char *text, size_t len, bool add_special, const tok_span *spans,
                     int n_spans, int32_t *out, int max_out) {
    if (!spans) n_spans = 0;
    for (int k = 1; k < n_spans; k++)
        if (spans[k].start < spans[k - 1].end) TOK_ABORT("tok_encode_spans: span %d overlaps or is out of order", k);
    return encode(t, text, len, add_special, false, spans, n_spans > 0 ? n_spans : 0, out, max_out);
}

