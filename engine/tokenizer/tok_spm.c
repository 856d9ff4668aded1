/* tok_spm.c — SentencePiece-style encoding: "▁" for spaces, greedy
 * score-driven bigram merging (word by word when no piece spans a word start),
 * byte fallback for what no piece covers; and the bigram heap BPE shares. */
#include "engine/tokenizer/tok_internal.h"

/* heap order: higher score first; equal scores: leftmost first */
static inline bool bigram_before(const spm_bigram *x, const spm_bigram *y) {
    return x->score > y->score || (x->score == y->score && x->left < y->left);
}

void tok_heap_push(spm_state *st, spm_bigram b) {
    if (st->nheap == st->heap_cap) TOK_ABORT("spm heap overflow (%zu)", st->nheap);
    size_t i = st->nheap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&b, &st->heap[p])) break;
        st->heap[i] = st->heap[p];
        i = p;
    }
    st->heap[i] = b;
}

spm_bigram tok_heap_pop(spm_state *st) {
    spm_bigram top = st->heap[0];
    spm_bigram last = st->heap[--st->nheap];
    size_t i = 0, n = st->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bigram_before(&st->heap[c + 1], &st->heap[c])) c++;
        if (!bigram_before(&st->heap[c], &last)) break;
        st->heap[i] = st->heap[c];
        i = c;
    }
    if (n) st->heap[i] = last;
    return top;
}

static void try_bigram(spm_state *st, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const spm_sym *l = &st->sym[left], *r = &st->sym[right];
    uint32_t size = l->n + r->n;
    int32_t id = map_find(st->t, st->esc + l->start, size);
    if (id < 0 || !mergeable(st->t->type[id])) return;
    tok_heap_push(st, (spm_bigram){left, right, st->t->score[id], size});
}

static inline bool is_space(const spm_state *st, int32_t i) {
    const spm_sym *s = &st->sym[i];
    return s->n == 3 && memcmp(st->esc + s->start, SPACE_ESC, 3) == 0;
}

static void spm_chunk(spm_state *st, int32_t c0, int32_t c1);

/* Tokenizes one run of plain text (no special tokens inside). */
void tok_spm_run(spm_state *st, const char *text, size_t len) {
    const tokenizer *t = st->t;
    size_t n = 0;
    if (t->add_space_prefix) { memcpy(st->esc, SPACE_ESC, 3); n = 3; }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') { memcpy(st->esc + n, SPACE_ESC, 3); n += 3; }
        else st->esc[n++] = text[i];
    }
    if (n == 0) return;

    int32_t nsym = 0;
    for (size_t i = 0; i < n;) {
        size_t cl = char_len(st->esc + i, n - i);
        st->sym[nsym] = (spm_sym){nsym - 1, nsym + 1, (uint32_t)i, (uint32_t)cl};
        nsym++;
        i += cl;
    }
    st->sym[nsym - 1].next = -1;

    /* merge chunk by chunk: the whole run, or each word (a space run and
     * what follows it) when no piece can span a word start */
    for (int32_t c0 = 0, c1; c0 < nsym; c0 = c1) {
        c1 = c0 + 1;
        if (t->word_split) {
            while (c1 < nsym && !(is_space(st, c1) && !is_space(st, c1 - 1))) c1++;
        } else {
            c1 = nsym;
        }
        st->sym[c0].prev = -1;
        st->sym[c1 - 1].next = -1;
        spm_chunk(st, c0, c1);
    }
}

static void spm_chunk(spm_state *st, int32_t c0, int32_t c1) {
    const tokenizer *t = st->t;
    st->nheap = 0;
    for (int32_t i = c0 + 1; i < c1; i++) try_bigram(st, i - 1, i);
    while (st->nheap > 0) {
        spm_bigram b = tok_heap_pop(st);
        spm_sym *l = &st->sym[b.left], *r = &st->sym[b.right];
        /* stale: one side already merged elsewhere (sizes only grow or drop to 0) */
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) st->sym[r->next].prev = b.left;
        try_bigram(st, l->prev, b.left);
        try_bigram(st, b.left, l->next);
    }

    for (int32_t i = c0; i >= 0; i = st->sym[i].next) {
        const spm_sym *s = &st->sym[i];
        int32_t id = map_find(t, st->esc + s->start, s->n);
        if (id >= 0 && mergeable(t->type[id])) {
            emit(st, id);
        } else {
            /* a byte with no token and no unknown token is dropped (tok_load.c) */
            for (uint32_t k = 0; k < s->n; k++) {
                int32_t bid = t->byte_id[(uint8_t)st->esc[s->start + k]];
                if (bid >= 0) emit(st, bid);
            }
        }
    }
}

