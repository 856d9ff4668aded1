/* tok_bpe.c — byte-level BPE encoding (gpt2): the GPT-2 byte <-> unicode
 * map, ranked merges applied lowest rank first within each pre-token, byte
 * tokens for what no merge covers. */
#include "engine/tokenizer/tok_internal.h"

#include <pthread.h>

/* ---- GPT-2 byte <-> unicode mapping ------------------------------------ */

/* Byte b is shown as code point byte_cp(b): printable Latin-1 bytes
 * (0x21..0x7E, 0xA1..0xAC, 0xAE..0xFF) as themselves, the other 68 as
 * U+0100.. in byte order. Every mapped code point is < 0x144. */
static bool byte_is_printable(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

static uint32_t byte_cp(int b) {
    if (byte_is_printable(b)) return (uint32_t)b;
    uint32_t k = 0;
    for (int c = 0; c < b; c++) k += !byte_is_printable(c);
    return 0x100 + k;
}


static byte_map BYTE_MAP;
static pthread_once_t BYTE_MAP_ONCE = PTHREAD_ONCE_INIT;

static void byte_map_init(void) {
    for (uint32_t c = 0; c < 0x144; c++) BYTE_MAP.dec[c] = -1;
    for (int b = 0; b < 256; b++) {
        uint32_t cp = byte_cp(b);
        if (cp < 0x80) {
            BYTE_MAP.enc[b][0] = (char)cp;
            BYTE_MAP.enc_len[b] = 1;
        } else {
            BYTE_MAP.enc[b][0] = (char)(0xC0 | (cp >> 6));
            BYTE_MAP.enc[b][1] = (char)(0x80 | (cp & 0x3F));
            BYTE_MAP.enc_len[b] = 2;
        }
        BYTE_MAP.dec[cp] = (int16_t)b;
    }
}

const byte_map *tok_byte_map(void) {
    pthread_once(&BYTE_MAP_ONCE, byte_map_init);
    return &BYTE_MAP;
}

/* Rank of merging symbol l[0..ln) with r[0..rn); -1 when no merge exists. */
static int32_t merge_find(const tokenizer *t, const char *l, size_t ln, const char *r, size_t rn) {
    uint32_t h = merge_hash(l, ln, r, rn);
    for (uint32_t i = h & t->mmap_mask;; i = (i + 1) & t->mmap_mask) {
        int32_t m = t->mmap[i].rank;
        if (m < 0) return -1;
        if (t->mmap[i].h == h && t->msplit[m] == ln && t->mlen[m] == ln + 1 + rn) {
            const char *s = t->mtext + t->moff[m];
            if (memcmp(s, l, ln) == 0 && memcmp(s + ln + 1, r, rn) == 0) return m;
        }
    }
}

/* Encodes one pre-token (raw bytes word[0..len)): byte-map it into st->esc,
 * one symbol per byte, then merge the lowest-ranked adjacent pair first. */
static void bpe_try_bigram(spm_state *st, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const spm_sym *l = &st->sym[left], *r = &st->sym[right];
    int32_t rank = merge_find(st->t, st->esc + l->start, l->n, st->esc + r->start, r->n);
    if (rank < 0) return;
    tok_heap_push(st, (spm_bigram){left, right, -(float)rank, l->n + r->n});
}

static void bpe_word(spm_state *st, const char *word, size_t len) {
    const tokenizer *t = st->t;
    const byte_map *bm = tok_byte_map();
    size_t n = 0;
    int32_t nsym = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t b = (uint8_t)word[i];
        st->sym[nsym] = (spm_sym){nsym - 1, nsym + 1, (uint32_t)n, bm->enc_len[b]};
        nsym++;
        memcpy(st->esc + n, bm->enc[b], bm->enc_len[b]);
        n += bm->enc_len[b];
    }
    if (nsym == 0) return;
    st->sym[nsym - 1].next = -1;
    if (t->ignore_merges) {
        int32_t id = map_find(t, st->esc, n);
        if (id >= 0 && mergeable(t->type[id])) { emit(st, id); return; }
    }
    st->nheap = 0;
    for (int32_t i = 1; i < nsym; i++) bpe_try_bigram(st, i - 1, i);
    while (st->nheap > 0) {
        spm_bigram b = tok_heap_pop(st);
        spm_sym *l = &st->sym[b.left], *r = &st->sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) st->sym[r->next].prev = b.left;
        bpe_try_bigram(st, l->prev, b.left);
        bpe_try_bigram(st, b.left, l->next);
    }
    for (int32_t i = 0; i >= 0; i = st->sym[i].next) {
        const spm_sym *s = &st->sym[i];
        int32_t id = map_find(t, st->esc + s->start, s->n);
        if (id >= 0 && mergeable(t->type[id])) { emit(st, id); continue; }
        /* A symbol that is no token (a byte the vocabulary lacks, or a merge
         * whose result it lacks) falls back as llama.cpp's llm_tokenizer_bpe
         * does: each BYTE of its mapped text looked up as a one-byte token,
         * and dropped when there is none (only printable ASCII maps to a
         * one-byte text, so a merged symbol's other characters go too). */
        for (uint32_t k = 0; k < s->n; k++) {
            id = map_find(t, st->esc + s->start + k, 1);
            if (id >= 0 && mergeable(t->type[id])) emit(st, id);
        }
    }
}

/* Tokenizes one run of plain text: pre-tokenize, then BPE each piece.
 * st->cp / st->cpoff have room for len + 1 entries. */
void tok_bpe_run(spm_state *st, const char *text, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t cl;
        st->cp[n] = utf8_decode(text + i, len - i, &cl);
        st->cpoff[n++] = (uint32_t)i;
        i += cl;
    }
    st->cpoff[n] = (uint32_t)len;
    cps c = {st->cp, n};
    size_t n_pieces = tok_pre_split(st->t->pre, &c, st->ends);
    for (size_t k = 0, i = 0; k < n_pieces; i = st->ends[k++])
        bpe_word(st, text + st->cpoff[i], st->cpoff[st->ends[k]] - st->cpoff[i]);
}

