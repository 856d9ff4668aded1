/* tok_internal.h — what the tokenizer's files share (not a public header:
 * engine/tokenizer/tokenizer.h is the contract). The tokenizer struct, the piece -> id
 * map and small UTF-8/hash helpers, and the merge state the SPM and BPE
 * encoders both use. Files: tok_load.c (from GGUF), tok_spm.c (SentencePiece),
 * tok_bpe.c (byte-level BPE, the GPT-2 byte map), tok_pretok.c (the BPE
 * pre-tokenizers), tok_decode.c (decode, streaming decode), tokenizer.c (facts,
 * comparison, the encode driver). */
#ifndef SPECD_TOK_INTERNAL_H
#define SPECD_TOK_INTERNAL_H

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode_tables.h"
#include "engine/util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOK_ABORT(...) do { fprintf(stderr, "%s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)
#define TOK_MAX_VOCAB (1 << 24)
#define TOK_MAX_TEXT ((size_t)1 << 30)

static const char SPACE_ESC[3] = {'\xe2', '\x96', '\x81'}; /* U+2581 "▁" */
static const char UNK_TEXT[3] = {'\xe2', '\x96', '\x85'};  /* U+2585 "▅" */

struct tokenizer {
    tok_kind kind;
    int32_t n_vocab;
    /* vocab strings, each NUL-terminated inside text */
    char *text;
    uint32_t *off;      /* (n_vocab) */
    uint32_t *len;      /* (n_vocab) */
    /* decoded bytes of each token as they enter the text (tok_piece) */
    char *dtext;
    uint32_t *doff;     /* (n_vocab) */
    uint32_t *dlen;     /* (n_vocab) */
    float *score;       /* (n_vocab) */
    uint8_t *type;      /* (n_vocab) tok_type */
    /* open-addressing hash: vocab string -> id (id -1 = empty slot) */
    struct tok_slot { int32_t id; uint32_t h; } *map; /* (map_mask + 1) */
    uint32_t map_mask;
    /* no mergeable piece holds "▁" right after another character, so merges
     * never cross the start of a space run: encode may work word by word */
    bool word_split;
    int32_t byte_id[256];   /* byte fallback for each byte value */
    /* special tokens matched whole in text (control/unknown/user-defined),
     * bucketed by first byte, longest first within a bucket */
    int32_t *special;       /* (n_special) */
    uint32_t special_start[257];
    int32_t n_special;
    int32_t n_user;         /* user-defined among them */
    int32_t bos, eos, unk, pad, eot, eom;
    int32_t eog[3];
    int n_eog;
    bool add_bos, add_eos, add_space_prefix;
    size_t max_len;     /* longest vocab string */
    size_t max_dlen;    /* longest decoded piece */
    uint64_t hash;
    /* ---- BPE only ---- */
    tok_pre pre;
    bool ignore_merges;     /* a pre-token that is a whole vocab token is emitted as is */
    /* merges as stored, "left right", each NUL-terminated inside mtext;
     * rank = index; mmap: (left, right) -> rank (rank -1 = empty slot) */
    char *mtext;
    uint32_t *moff;         /* (n_merges) */
    uint32_t *mlen;         /* (n_merges) bytes of "left right" */
    uint32_t *msplit;       /* (n_merges) bytes of left */
    int32_t n_merges;
    struct tok_mslot { int32_t rank; uint32_t h; } *mmap; /* (mmap_mask + 1) */
    uint32_t mmap_mask;
};

/* ---- GPT-2 byte <-> unicode mapping (tok_bpe.c) -------------------------- */

typedef struct {
    char enc[256][2];   /* UTF-8 of byte_cp(b) */
    uint8_t enc_len[256];
    int16_t dec[0x144]; /* code point -> byte, -1 if not a mapped code point */
} byte_map;

/* The map, built once (thread-safe). */
const byte_map *tok_byte_map(void);

/* ---- small helpers ------------------------------------------------------- */

static inline uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}
#define FNV_INIT 0xcbf29ce484222325ULL

static inline uint32_t str_hash(const char *s, size_t n) {
    uint64_t h = fnv1a(FNV_INIT, s, n);
    return (uint32_t)(h ^ (h >> 32));
}

static inline void check_id(const tokenizer *t, int32_t id, const char *fn) {
    if (id < 0 || id >= t->n_vocab)
        TOK_ABORT("%s: token id %" PRId32 " out of range [0, %" PRId32 ")", fn, id, t->n_vocab);
}

/* Bytes of the character starting at s (n > 0 bytes left): the length its
 * lead byte announces (continuation bytes and 0xF8.. count as 1), cut short
 * at the first byte that is not a continuation byte, so invalid UTF-8 never
 * swallows the next character (an escaped space in particular). */
static inline size_t char_len(const char *s, size_t n) {
    static const uint8_t lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    size_t want = lens[(uint8_t)s[0] >> 4];
    if (want > n) want = n;
    size_t k = 1;
    while (k < want && ((uint8_t)s[k] & 0xC0) == 0x80) k++;
    return k;
}

/* Types whose strings can be produced by merging text characters. */
static inline bool mergeable(uint8_t type) {
    return type == TOK_TYPE_NORMAL || type == TOK_TYPE_USER_DEFINED || type == TOK_TYPE_UNDEFINED;
}

static inline int32_t map_find(const tokenizer *t, const char *s, size_t n) {
    if (n > t->max_len) return -1;
    uint32_t h = str_hash(s, n);
    for (uint32_t i = h & t->map_mask;; i = (i + 1) & t->map_mask) {
        int32_t id = t->map[i].id;
        if (id < 0) return -1;
        if (t->map[i].h == h && t->len[id] == n && memcmp(t->text + t->off[id], s, n) == 0) return id;
    }
}

/* The code point at s (n > 0 bytes): sets *cl to its byte count (char_len) and
 * returns it, or UINT32_MAX for an invalid, overlong, surrogate or truncated
 * sequence, in which case *cl is 1. */
static inline uint32_t utf8_decode(const char *s, size_t n, size_t *cl) {
    const uint8_t *u = (const uint8_t *)s;
    size_t k = char_len(s, n);
    uint32_t cp;
    *cl = 1;
    if (u[0] < 0x80) return u[0];
    if (k == 2 && u[0] >= 0xC2 && u[0] <= 0xDF) cp = ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
    else if (k == 3 && (u[0] & 0xF0) == 0xE0) {
        cp = ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
        if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)) return UINT32_MAX;
    } else if (k == 4 && u[0] >= 0xF0 && u[0] <= 0xF4) {
        cp = ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) |
             ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
        if (cp < 0x10000 || cp > 0x10FFFF) return UINT32_MAX;
    } else {
        return UINT32_MAX;
    }
    *cl = k;
    return cp;
}

static inline uint32_t merge_hash(const char *l, size_t ln, const char *r, size_t rn) {
    uint64_t h = fnv1a(FNV_INIT, l, ln);
    h = fnv1a(h, " ", 1);
    h = fnv1a(h, r, rn);
    return (uint32_t)(h ^ (h >> 32));
}

/* ---- merge state (SPM and BPE) -------------------------------------------- */

typedef struct {
    int32_t prev, next; /* neighbouring live symbols, -1 at the ends */
    uint32_t start, n;  /* bytes in the escaped text; n == 0: merged away */
} spm_sym;

typedef struct {
    int32_t left, right;
    float score;
    uint32_t size;      /* bytes of the merged piece when the bigram was queued */
} spm_bigram;

typedef struct {
    const tokenizer *t;
    char *esc;          /* escaped text of the current run */
    spm_sym *sym;
    spm_bigram *heap;
    size_t nheap, heap_cap;
    int32_t *out;
    int max_out;
    int count;
    uint32_t *cp;       /* BPE: code points of the current run (len + 1) */
    uint32_t *cpoff;    /* BPE: byte offset of each (len + 1) */
    uint32_t *ends;     /* BPE: pre-token ends of a run (len + 1) */
} spm_state;

static inline void emit(spm_state *st, int32_t id) {
    if (st->count < st->max_out) st->out[st->count] = id;
    st->count++;
}

/* The bigram heap (tok_spm.c): higher score first, equal scores leftmost first. */
void tok_heap_push(spm_state *st, spm_bigram b);
spm_bigram tok_heap_pop(spm_state *st);

/* Tokenizes one run of plain text (no special tokens inside) into st: SPM
 * (tok_spm.c) or BPE (tok_bpe.c; st->cp / st->cpoff / st->ends have room for
 * len + 1 entries). */
void tok_spm_run(spm_state *st, const char *text, size_t len);
void tok_bpe_run(spm_state *st, const char *text, size_t len);

/* ---- pre-tokenizers (tok_pretok.c) ---------------------------------------- */

/* Code points of a text run for the pre-tokenizers: cp[i] starts at byte
 * off[i]; an invalid byte is one "character" with cp = UINT32_MAX. */
typedef struct {
    const uint32_t *cp;
    size_t n;
} cps;

/* All pre-token ends of a run of n code points into ends (room for n);
 * returns their count. */
size_t tok_pre_split(tok_pre pre, const cps *c, uint32_t *ends);

#endif
