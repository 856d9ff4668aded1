/* mkmodel_vocab.c — the synthetic byte-fallback SPM vocabulary of random
 * models without --tokenizer. */
#include "cli/mkmodel_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- synthetic SPM vocabulary -------------------------------------------
 * <unk> <s> </s>, the 256 byte tokens, single characters, then BPE merges
 * learned from a small frequency-ranked English word list (score = -rank, so
 * SPM's "merge the highest-scoring bigram" replays the BPE order), then
 * two- and three-word pieces, which are reachable by the same merging. */

static const char *const k_words[] = {
    "the", "and", "to", "a", "was", "he", "she", "it", "of", "in", "you", "that", "her", "his",
    "they", "i", "with", "said", "for", "on", "is", "but", "had", "so", "not", "at", "be", "one",
    "day", "there", "were", "all", "very", "we", "up", "time", "little", "what", "have", "him",
    "do", "saw", "can", "big", "as", "them", "my", "go", "out", "once", "upon", "play", "happy",
    "from", "this", "are", "did", "could", "would", "like", "then", "when", "no", "me", "your",
    "their", "about", "into", "over", "just", "now", "see", "came", "went", "get", "got", "made",
    "make", "new", "friend", "friends", "mom", "dad", "dog", "cat", "bird", "tree", "park",
    "ball", "toy", "girl", "boy", "named", "lily", "tom", "ben", "sam", "sue", "loved", "love",
    "wanted", "want", "help", "helped", "look", "looked", "found", "find", "went", "home",
    "house", "sun", "water", "fun", "good", "bad", "sad", "scared", "nice", "kind", "pretty",
    "red", "blue", "green", "small", "long", "old", "young", "man", "woman", "people", "world",
    "thing", "things", "know", "knew", "think", "thought", "because", "after", "before", "again",
    "every", "never", "always", "some", "many", "much", "more", "most", "other", "another",
    "who", "which", "how", "why", "where", "here", "only", "also", "back", "down", "off",
    "away", "around", "through", "under", "together", "outside", "inside", "learned", "smiled",
    "laughed", "ran", "run", "jumped", "walked", "played", "asked", "felt", "feel", "took",
    "take", "gave", "give", "put", "let", "try", "tried", "started", "began", "way", "best",
    "hand", "head", "eyes", "face", "food", "cake", "apple", "box", "car", "boat", "school",
    "sky", "flower", "flowers", "garden", "forest", "river", "shiny", "special", "surprise",
    "should", "will", "been", "has", "if", "or", "an", "by", "say", "each", "first", "last",
    "two", "three", "family", "night", "morning", "story", "end", "yes", "thank", "sorry",
};

typedef struct {
    char **s;
    uint32_t *len;
    float *score;
    int32_t *type;
    uint32_t n, cap;
    bool oom;
} vocab_b;

static void vb_add(vocab_b *v, const char *s, size_t len, int type)
{
    if (v->oom) return;
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? 2 * v->cap : 1024;
        char **ns = realloc(v->s, cap * sizeof *ns);
        if (ns) v->s = ns;
        uint32_t *nl = realloc(v->len, cap * sizeof *nl);
        if (nl) v->len = nl;
        float *nsc = realloc(v->score, cap * sizeof *nsc);
        if (nsc) v->score = nsc;
        int32_t *nt = realloc(v->type, cap * sizeof *nt);
        if (nt) v->type = nt;
        if (!ns || !nl || !nsc || !nt) { v->oom = true; return; }
        v->cap = cap;
    }
    char *c = malloc(len + 1);
    if (!c) { v->oom = true; return; }
    memcpy(c, s, len);
    c[len] = 0;
    v->s[v->n] = c;
    v->len[v->n] = (uint32_t)len;
    /* normal pieces count down from 0 in id order; specials and bytes score 0 */
    v->score[v->n] = type == 1 ? (float)MK_MIN_VOCAB - (float)v->n : 0.0f;
    v->type[v->n] = type;
    v->n++;
}

static void vb_free(vocab_b *v)
{
    for (uint32_t i = 0; i < v->n; i++) free(v->s[i]);
    free(v->s);
    free(v->len);
    free(v->score);
    free(v->type);
}

static int vb_find(const vocab_b *v, uint32_t from, const char *s, size_t len)
{
    for (uint32_t i = from; i < v->n; i++)
        if (v->len[i] == len && memcmp(v->s[i], s, len) == 0) return (int)i;
    return -1;
}

typedef struct {
    int *sym;
    int n;
    uint64_t freq;
} bpe_word;

typedef struct {
    uint64_t key; /* a << 32 | b */
    uint64_t freq;
} bpe_pair;

static int pair_cmp(const void *x, const void *y)
{
    uint64_t a = ((const bpe_pair *)x)->key, b = ((const bpe_pair *)y)->key;
    return a < b ? -1 : a > b;
}

static void vb_add_concat(vocab_b *v, uint32_t a, uint32_t b)
{
    size_t la = v->len[a], lb = v->len[b];
    char *tmp = malloc(la + lb);
    if (!tmp) { v->oom = true; return; }
    memcpy(tmp, v->s[a], la);
    memcpy(tmp + la, v->s[b], lb);
    vb_add(v, tmp, la + lb, 1);
    free(tmp);
}

static int synth_vocab(vocab_b *v, uint32_t n_vocab, char *err, size_t errlen)
{
    static const char SP[] = "\xe2\x96\x81"; /* U+2581, SentencePiece's space */
    vb_add(v, "<unk>", 5, 2);
    vb_add(v, "<s>", 3, 3);
    vb_add(v, "</s>", 4, 3);
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        vb_add(v, s, 6, 6);
    }
    int char_id[128];
    for (int c = 0; c < 128; c++) char_id[c] = -1;
    int sp_id = -1;
    if (v->n < n_vocab) { sp_id = (int)v->n; vb_add(v, SP, 3, 1); }
    for (int c = 0x21; c < 0x7f && v->n < n_vocab; c++) {
        char s = (char)c;
        char_id[c] = (int)v->n;
        vb_add(v, &s, 1, 1);
    }
    uint32_t merged_from = v->n;

    /* the corpus: distinct words, Zipf-like integer weights */
    size_t nw_all = sizeof k_words / sizeof k_words[0];
    bpe_word *words = calloc(nw_all, sizeof *words);
    bpe_pair *pairs = NULL;
    int *final_ids = NULL;
    int nw = 0, rc = 0;
    if (!words) { rc = util_fail(err, errlen, "out of memory"); goto done; }
    size_t total_sym = 0;
    for (size_t i = 0; i < nw_all; i++) {
        bool dup = false;
        for (size_t j = 0; j < i && !dup; j++) dup = strcmp(k_words[i], k_words[j]) == 0;
        if (dup) continue;
        size_t l = strlen(k_words[i]);
        bpe_word *wd = &words[nw++];
        wd->sym = malloc((l + 1) * sizeof(int));
        if (!wd->sym) { rc = util_fail(err, errlen, "out of memory"); goto done; }
        wd->freq = 1000000u / (uint64_t)(i + 10);
        wd->sym[wd->n++] = sp_id;
        for (size_t k = 0; k < l; k++) wd->sym[wd->n++] = char_id[(unsigned char)k_words[i][k]];
        total_sym += (size_t)wd->n;
    }
    if (sp_id < 0 || v->n >= n_vocab) goto done; /* no room beyond single characters */
    for (int i = 0; i < nw; i++)
        for (int k = 0; k < words[i].n; k++)
            if (words[i].sym[k] < 0) goto done; /* a character did not fit: nothing to merge */

    pairs = malloc(total_sym * sizeof *pairs);
    if (!pairs) { rc = util_fail(err, errlen, "out of memory"); goto done; }
    while (v->n < n_vocab && !v->oom) {
        size_t np = 0;
        for (int i = 0; i < nw; i++)
            for (int k = 0; k + 1 < words[i].n; k++)
                pairs[np++] = (bpe_pair){(uint64_t)words[i].sym[k] << 32 | (uint32_t)words[i].sym[k + 1],
                                         words[i].freq};
        if (np == 0) break;
        qsort(pairs, np, sizeof *pairs, pair_cmp);
        uint64_t best_key = 0, best_f = 0;
        for (size_t i = 0; i < np;) {
            size_t j = i;
            uint64_t f = 0;
            while (j < np && pairs[j].key == pairs[i].key) f += pairs[j++].freq;
            if (f > best_f) { best_f = f; best_key = pairs[i].key; }
            i = j;
        }
        uint32_t a = (uint32_t)(best_key >> 32), b = (uint32_t)best_key;
        size_t la = v->len[a], lb = v->len[b];
        char buf[256];
        if (la + lb > sizeof buf) break; /* cannot happen with the built-in words */
        memcpy(buf, v->s[a], la);
        memcpy(buf + la, v->s[b], lb);
        int id = vb_find(v, merged_from, buf, la + lb);
        if (id < 0) { id = (int)v->n; vb_add(v, buf, la + lb, 1); }
        for (int i = 0; i < nw; i++) {
            int o = 0;
            for (int k = 0; k < words[i].n; k++) {
                if (k + 1 < words[i].n && words[i].sym[k] == (int)a && words[i].sym[k + 1] == (int)b) {
                    words[i].sym[o++] = id;
                    k++;
                } else {
                    words[i].sym[o++] = words[i].sym[k];
                }
            }
            words[i].n = o;
        }
    }
    if (v->n >= n_vocab || v->oom) goto done;

    /* every word is one token now: add word pairs, then triples (pair + word) */
    final_ids = malloc((size_t)nw * sizeof *final_ids);
    if (!final_ids) { rc = util_fail(err, errlen, "out of memory"); goto done; }
    for (int i = 0; i < nw; i++) final_ids[i] = words[i].sym[0];
    uint32_t pair_from = v->n;
    for (int s = 0; s <= 2 * (nw - 1) && v->n < n_vocab && !v->oom; s++)
        for (int i = s < nw ? 0 : s - nw + 1; i <= s && i < nw && v->n < n_vocab; i++)
            vb_add_concat(v, (uint32_t)final_ids[i], (uint32_t)final_ids[s - i]);
    uint32_t pair_to = v->n;
    for (uint32_t p = pair_from; p < pair_to && v->n < n_vocab && !v->oom; p++)
        for (int k = 0; k < nw && v->n < n_vocab; k++) vb_add_concat(v, p, (uint32_t)final_ids[k]);
    if (v->n < n_vocab && !v->oom)
        rc = util_fail(err, errlen, "--vocab %u is larger than the synthetic tokenizer can fill", n_vocab);

done:
    if (!rc && v->oom) rc = util_fail(err, errlen, "out of memory building the vocabulary");
    for (int i = 0; i < nw; i++) free(words[i].sym);
    free(words);
    free(pairs);
    free(final_ids);
    return rc;
}

int mk_write_synth_tokenizer(gguf_writer *w, uint32_t n_vocab, char *err, size_t errlen)
{
    vocab_b v = {0};
    int rc = synth_vocab(&v, n_vocab, err, errlen);
    if (rc == 0) {
        size_t *lens = malloc(v.n * sizeof *lens);
        if (!lens) {
            rc = util_fail(err, errlen, "out of memory");
        } else {
            for (uint32_t i = 0; i < v.n; i++) lens[i] = v.len[i];
            gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
            gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.s, lens, v.n);
            gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v.score, v.n);
            gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v.type, v.n);
            gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
            gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
            gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
            gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
            gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
            gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", true);
            free(lens);
        }
    }
    vb_free(&v);
    return rc;
}

