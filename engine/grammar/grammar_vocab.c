/* grammar_vocab.c — a tokenizer's vocabulary as the matcher sees it: token
 * bytes, end-of-generation ids, and the byte trie in preorder that mask walks
 * prune. */
#include "engine/grammar/grammar_internal.h"

void grammar_vocab_destroy(grammar_vocab *v) {
    if (!v) return;
    free(v->blob), free(v->off), free(v->eog), free(v->eog_ids);
    free(v->nbyte), free(v->ndepth), free(v->nskip), free(v->ntok_off), free(v->ntok), free(v->nsub), free(v->nheight), free(v->ntok_len);
    free(v);
}

int grammar_vocab_size(const grammar_vocab *v) { return v->n; }
bool grammar_vocab_has_all_bytes(const grammar_vocab *v) { return v->all_bytes; }
int grammar_vocab_trie_nodes(const grammar_vocab *v) { return v->n_nodes; }
int grammar_vocab_max_len(const grammar_vocab *v) { return v ? v->max_len : 0; }

static const grammar_vocab *sort_v;
static int cmp_tok(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    int64_t lx = sort_v->off[x + 1] - sort_v->off[x], ly = sort_v->off[y + 1] - sort_v->off[y];
    int c = memcmp(sort_v->blob + sort_v->off[x], sort_v->blob + sort_v->off[y], (size_t)(lx < ly ? lx : ly));
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Builds the trie from blob/off (tokens of length 0 are left out). */
static bool vocab_trie(grammar_vocab *v) {
    int32_t *ord = malloc(sizeof(int32_t) * (size_t)(v->n + 1));
    if (!ord) return false;
    int m = 0;
    for (int t = 0; t < v->n; t++)
        if (v->off[t + 1] > v->off[t] && !v->eog[t]) ord[m++] = t;
    sort_v = v; /* engine start-up only; not reentrant */
    qsort(ord, (size_t)m, sizeof(int32_t), cmp_tok);
    size_t total = 1;
    for (int k = 0; k < m; k++) total += (size_t)(v->off[ord[k] + 1] - v->off[ord[k]]);
    v->nbyte = malloc(total), v->ndepth = malloc(sizeof(uint16_t) * total);
    v->nskip = malloc(sizeof(int32_t) * total), v->ntok_off = malloc(sizeof(int32_t) * (total + 1));
    v->ntok = malloc(sizeof(int32_t) * (size_t)(m + 1));
    int32_t *path = malloc(sizeof(int32_t) * (size_t)(v->max_len + 2));
    int32_t *tokcnt = calloc(total + 1, sizeof(int32_t));
    if (!v->nbyte || !v->ndepth || !v->nskip || !v->ntok_off || !v->ntok || !path || !tokcnt) {
        free(ord), free(path), free(tokcnt);
        return false;
    }
    int32_t nn = 1;
    v->nbyte[0] = 0, v->ndepth[0] = 0;
    path[0] = 0;
    int depth = 0; /* path[0..depth] is the current chain */
    const uint8_t *prev = NULL;
    int64_t plen = 0;
    int32_t *tok_node = malloc(sizeof(int32_t) * (size_t)(m + 1));
    if (!tok_node) {
        free(ord), free(path), free(tokcnt);
        return false;
    }
    for (int k = 0; k < m; k++) {
        const uint8_t *s = v->blob + v->off[ord[k]];
        int64_t len = v->off[ord[k] + 1] - v->off[ord[k]];
        int64_t c = 0;
        while (prev && c < len && c < plen && s[c] == prev[c]) c++;
        /* close nodes deeper than the common prefix */
        while (depth > c) v->nskip[path[depth]] = nn, depth--;
        for (int64_t j = c; j < len; j++) {
            v->nbyte[nn] = s[j];
            v->ndepth[nn] = (uint16_t)(j + 1);
            path[++depth] = nn++;
        }
        tok_node[k] = path[depth];
        tokcnt[path[depth]]++;
        prev = s, plen = len;
    }
    while (depth >= 0) v->nskip[path[depth]] = nn, depth--;
    v->n_nodes = nn;
    v->ntok_off[0] = 0;
    for (int32_t i = 0; i < nn; i++) v->ntok_off[i + 1] = v->ntok_off[i] + tokcnt[i];
    for (int32_t i = 0; i < nn; i++) tokcnt[i] = v->ntok_off[i];
    for (int k = 0; k < m; k++) v->ntok[tokcnt[tok_node[k]]++] = ord[k];
    free(tok_node), free(ord), free(path), free(tokcnt);
    /* subtree byte sets, children before parents (reverse preorder) */
    if (!(v->nsub = calloc((size_t)nn * 8, sizeof(uint32_t))) || !(v->nheight = calloc((size_t)nn, sizeof(uint16_t))) ||
        !(v->ntok_len = malloc(sizeof(uint16_t) * (size_t)(m + 1))))
        return false;
    for (int k = 0; k < m; k++) v->ntok_len[k] = (uint16_t)(v->off[v->ntok[k] + 1] - v->off[v->ntok[k]]);
    for (int32_t i = nn - 1; i >= 0; i--)
        for (int32_t c = i + 1; c < v->nskip[i]; c = v->nskip[c]) {
            if (v->nheight[c] + 1 > v->nheight[i]) v->nheight[i] = (uint16_t)(v->nheight[c] + 1);
            uint32_t *dst = v->nsub + (size_t)i * 8;
            const uint32_t *src = v->nsub + (size_t)c * 8;
            for (int w = 0; w < 8; w++) dst[w] |= src[w];
            dst[v->nbyte[c] >> 5] |= 1u << (v->nbyte[c] & 31);
        }
    return true;
}

grammar_vocab *grammar_vocab_from_strings(int n, const char *const *s, const int *len, const bool *eog) {
    grammar_vocab *v = calloc(1, sizeof(*v));
    if (!v) return NULL;
    v->n = n;
    int64_t total = 0;
    for (int t = 0; t < n; t++) total += len[t] > 0 ? len[t] : 0;
    v->blob = malloc((size_t)total + 1), v->off = malloc(sizeof(int64_t) * (size_t)(n + 1));
    v->eog = calloc((size_t)n + 1, 1), v->eog_ids = malloc(sizeof(int32_t) * (size_t)(n + 1));
    if (!v->blob || !v->off || !v->eog || !v->eog_ids) goto fail;
    bool seen[256] = {0};
    int64_t o = 0;
    for (int t = 0; t < n; t++) {
        v->off[t] = o;
        int l = len[t] > 0 ? len[t] : 0;
        if (eog && eog[t]) {
            v->eog[t] = 1, v->eog_ids[v->n_eog++] = t;
            l = 0;
        }
        memcpy(v->blob + o, s[t], (size_t)l);
        if (l == 1) seen[(uint8_t)s[t][0]] = true;
        if (l > v->max_len) v->max_len = l;
        o += l;
    }
    v->off[n] = o;
    v->all_bytes = true;
    for (int b = 0; b < 256; b++) v->all_bytes &= seen[b];
    if (!vocab_trie(v)) goto fail;
    return v;
fail:
    grammar_vocab_destroy(v);
    return NULL;
}

grammar_vocab *grammar_vocab_create(const tokenizer *t) {
    int n = tok_n_vocab(t);
    char **s = calloc((size_t)n, sizeof(char *));
    int *len = calloc((size_t)n, sizeof(int));
    bool *eog = calloc((size_t)n, sizeof(bool));
    size_t cap = tok_max_token_len(t) * 4 + 16;
    char *buf = malloc(cap * (size_t)n);
    grammar_vocab *v = NULL;
    if (s && len && eog && buf) {
        for (int i = 0; i < n; i++) {
            s[i] = buf + cap * (size_t)i;
            eog[i] = tok_is_eog(t, i);
            tok_type ty = tok_token_type(t, i);
            int l = (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNUSED || ty == TOK_TYPE_UNKNOWN) ? 0
                                                                                              : tok_piece(t, i, s[i], cap);
            len[i] = l > 0 ? l : 0;
        }
        v = grammar_vocab_from_strings(n, (const char *const *)s, len, eog);
    }
    free(s), free(len), free(eog), free(buf);
    return v;
}

