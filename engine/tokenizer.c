/* tokenizer.c — tokenizers built from GGUF metadata: SentencePiece-style (SPM:
 * greedy score-driven bigram merging, byte fallback) and byte-level BPE (gpt2:
 * hand-written regex pre-tokenizers, GPT-2 byte<->unicode mapping, ranked
 * merges); load + copy, decode, streaming UTF-8-safe decode, identity hash and
 * comparison. Not here: a general regex engine (each pre-tokenizer is code). */
#include "engine/tokenizer.h"
#include "engine/unicode_tables.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
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

typedef struct {
    char enc[256][2];   /* UTF-8 of byte_cp(b) */
    uint8_t enc_len[256];
    int16_t dec[0x144]; /* code point -> byte, -1 if not a mapped code point */
} byte_map;

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

static const byte_map *get_byte_map(void) {
    pthread_once(&BYTE_MAP_ONCE, byte_map_init);
    return &BYTE_MAP;
}

/* ---- small helpers ------------------------------------------------------- */

static void set_err(char *err, size_t n, const char *fmt, ...) {
    if (!err || n == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
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

static void check_id(const tokenizer *t, int32_t id, const char *fn) {
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

static int32_t map_find(const tokenizer *t, const char *s, size_t n) {
    if (n > t->max_len) return -1;
    uint32_t h = str_hash(s, n);
    for (uint32_t i = h & t->map_mask;; i = (i + 1) & t->map_mask) {
        int32_t id = t->map[i].id;
        if (id < 0) return -1;
        if (t->map[i].h == h && t->len[id] == n && memcmp(t->text + t->off[id], s, n) == 0) return id;
    }
}

static void map_insert(tokenizer *t, int32_t id) {
    const char *s = t->text + t->off[id];
    size_t n = t->len[id];
    uint32_t h = str_hash(s, n);
    for (uint32_t i = h & t->map_mask;; i = (i + 1) & t->map_mask) {
        int32_t cur = t->map[i].id;
        if (cur < 0) { t->map[i].id = id; t->map[i].h = h; return; }
        if (t->map[i].h == h && t->len[cur] == n && memcmp(t->text + t->off[cur], s, n) == 0) {
            t->map[i].id = id; /* duplicate string: the later id wins */
            return;
        }
    }
}

/* Does piece hold a "▁" right after something that is not "▁"? */
static bool space_inside(const char *s, size_t n) {
    for (size_t p = 1; p + 3 <= n; p++) {
        if (memcmp(s + p, SPACE_ESC, 3) != 0) continue;
        if (p < 3 || memcmp(s + p - 3, SPACE_ESC, 3) != 0) return true;
    }
    return false;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* "<0xNN>" -> NN, else -1. */
static int parse_byte_token(const char *s, size_t n) {
    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    int hi = hexval(s[3]), lo = hexval(s[4]);
    if (hi < 0 || lo < 0) return -1;
    return hi * 16 + lo;
}

/* The code point at s (n > 0 bytes): sets *cl to its byte count (char_len) and
 * returns it, or UINT32_MAX for an invalid, overlong, surrogate or truncated
 * sequence, in which case *cl is 1. */
static uint32_t utf8_decode(const char *s, size_t n, size_t *cl) {
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

/* Copies the merges and builds the (left, right) -> rank map. A merge is
 * "left right": split at the first space after the first byte (a mapped
 * token never holds a space). */
static bool build_merges(tokenizer *t, const gguf_kv *km, char *err, size_t errlen) {
    int32_t n = (int32_t)km->arr_n;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) total += km->arr_str[i].len + 1;
    if (total > UINT32_MAX) {
        set_err(err, errlen, "tokenizer: merges total %" PRIu64 " bytes (limit 4 GiB)", total);
        return false;
    }
    t->n_merges = n;
    t->mtext = malloc(total ? total : 1);
    t->moff = malloc((size_t)(n ? n : 1) * sizeof *t->moff);
    t->mlen = malloc((size_t)(n ? n : 1) * sizeof *t->mlen);
    t->msplit = malloc((size_t)(n ? n : 1) * sizeof *t->msplit);
    uint32_t cap = 16;
    while (cap < 2u * (uint32_t)n) cap <<= 1;
    t->mmap = malloc(cap * sizeof *t->mmap);
    if (!t->mtext || !t->moff || !t->mlen || !t->msplit || !t->mmap) TOK_ABORT("out of memory");
    memset(t->mmap, 0xff, cap * sizeof *t->mmap);
    t->mmap_mask = cap - 1;
    uint32_t pos = 0;
    for (int32_t i = 0; i < n; i++) {
        const gguf_str *m = &km->arr_str[i];
        const char *sp = m->len > 1 ? memchr(m->ptr + 1, ' ', m->len - 1) : NULL;
        if (!sp || sp + 1 == m->ptr + m->len) {
            char q[64];
            snprintf(q, sizeof q, "%.*s", (int)(m->len < 40 ? m->len : 40), m->ptr);
            set_err(err, errlen, "tokenizer: merge %" PRId32 " '%s' is not 'left right'", i, q);
            return false;
        }
        t->moff[i] = pos;
        t->mlen[i] = (uint32_t)m->len;
        t->msplit[i] = (uint32_t)(sp - m->ptr);
        memcpy(t->mtext + pos, m->ptr, m->len);
        t->mtext[pos + m->len] = '\0';
        pos += (uint32_t)m->len + 1;
        const char *s = t->mtext + t->moff[i];
        size_t ln = t->msplit[i], rn = m->len - ln - 1;
        uint32_t h = merge_hash(s, ln, s + ln + 1, rn);
        for (uint32_t k = h & t->mmap_mask;; k = (k + 1) & t->mmap_mask) {
            int32_t cur = t->mmap[k].rank;
            if (cur < 0) { t->mmap[k].rank = i; t->mmap[k].h = h; break; }
            if (t->mmap[k].h == h && t->mlen[cur] == m->len && t->msplit[cur] == ln &&
                memcmp(t->mtext + t->moff[cur], s, m->len) == 0)
                break; /* repeated pair: the first rank stays */
        }
    }
    return true;
}

/* ---- load -------------------------------------------------------------- */

/* Reads an optional special id. Absent or the "none" markers (-1, 0xFFFFFFFF)
 * leave *out = dflt (when in range) or -1; other out-of-range values fail. */
static bool load_special(const gguf_file *f, const char *key, int32_t dflt, int32_t n_vocab,
                         int32_t *out, char *err, size_t errlen) {
    *out = (dflt >= 0 && dflt < n_vocab) ? dflt : -1;
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return true;
    int64_t v;
    if (!gguf_get_i64(f, key, &v)) {
        set_err(err, errlen, "tokenizer: %s has type %s, expected an integer", key,
                gguf_vtype_name(kv->type));
        return false;
    }
    if (v == -1 || v == 0xFFFFFFFFLL) { *out = -1; return true; }
    if (v < 0 || v >= n_vocab) {
        set_err(err, errlen, "tokenizer: %s = %" PRId64 " is out of range (vocabulary has %" PRId32 " tokens)",
                key, v, n_vocab);
        return false;
    }
    *out = (int32_t)v;
    return true;
}

static bool load_flag(const gguf_file *f, const char *key, bool dflt, bool *out,
                      char *err, size_t errlen) {
    *out = dflt;
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return true;
    if (!gguf_get_bool(f, key, out)) {
        set_err(err, errlen, "tokenizer: %s has type %s, expected bool", key, gguf_vtype_name(kv->type));
        return false;
    }
    return true;
}

static uint64_t compute_hash(const tokenizer *t) {
    uint64_t h = FNV_INIT;
    int32_t head[8] = {(int32_t)t->kind, t->n_vocab, t->bos, t->eos, t->unk, t->pad, t->eot, t->eom};
    h = fnv1a(h, head, sizeof head);
    uint8_t flags[3] = {t->add_bos, t->add_eos, t->add_space_prefix};
    h = fnv1a(h, flags, sizeof flags);
    for (int32_t i = 0; i < t->n_vocab; i++) {
        uint32_t n = t->len[i];
        h = fnv1a(h, &n, sizeof n);
        h = fnv1a(h, t->text + t->off[i], n);
        h = fnv1a(h, &t->score[i], sizeof(float));
        h = fnv1a(h, &t->type[i], 1);
    }
    if (t->kind == TOK_KIND_BPE) {
        int32_t tail[2] = {(int32_t)t->pre, t->n_merges};
        h = fnv1a(h, tail, sizeof tail);
        for (int32_t i = 0; i < t->n_merges; i++) {
            uint32_t n = t->mlen[i];
            h = fnv1a(h, &n, sizeof n);
            h = fnv1a(h, t->mtext + t->moff[i], n);
        }
    }
    return h;
}

static int cmp_special(const void *pa, const void *pb, void *ctx) {
    const tokenizer *t = ctx;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    uint8_t fa = (uint8_t)t->text[t->off[a]], fb = (uint8_t)t->text[t->off[b]];
    if (fa != fb) return fa < fb ? -1 : 1;
    if (t->len[a] != t->len[b]) return t->len[a] > t->len[b] ? -1 : 1;
    return a < b ? -1 : (a > b);
}

static bool build_tables(tokenizer *t, const gguf_str *strs, char *err, size_t errlen) {
    int32_t n = t->n_vocab;
    /* vocab strings */
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) total += strs[i].len + 1;
    if (total > UINT32_MAX) {
        set_err(err, errlen, "tokenizer: token strings total %" PRIu64 " bytes (limit 4 GiB)", total);
        return false;
    }
    t->text = malloc(total ? total : 1);
    /* decoded pieces are at most max(len, 3) each */
    uint64_t dtotal = 0;
    for (int32_t i = 0; i < n; i++) dtotal += (strs[i].len > 3 ? strs[i].len : 3);
    if (dtotal > UINT32_MAX) {
        set_err(err, errlen, "tokenizer: decoded pieces exceed 4 GiB");
        return false;
    }
    t->dtext = malloc(dtotal ? dtotal : 1);
    if (!t->text || !t->dtext) TOK_ABORT("out of memory");
    uint32_t pos = 0, dpos = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t len = strs[i].len;
        t->off[i] = pos;
        t->len[i] = (uint32_t)len;
        memcpy(t->text + pos, strs[i].ptr, len);
        t->text[pos + len] = '\0';
        if (len > t->max_len) t->max_len = len;
        const char *s = t->text + pos;
        pos += (uint32_t)len + 1;

        char *d = t->dtext + dpos;
        uint32_t dn = 0;
        switch (t->type[i]) {
        case TOK_TYPE_BYTE: {
            int b = parse_byte_token(s, len);
            if (b < 0) {
                set_err(err, errlen, "tokenizer: token %" PRId32 " has type byte but its text is not <0xNN>", i);
                return false;
            }
            d[dn++] = (char)b;
            break;
        }
        case TOK_TYPE_UNKNOWN:
            memcpy(d, UNK_TEXT, 3);
            dn = 3;
            break;
        case TOK_TYPE_CONTROL:
        case TOK_TYPE_UNUSED:
            break;
        case TOK_TYPE_USER_DEFINED:
            memcpy(d, s, len);
            dn = (uint32_t)len;
            break;
        default: /* normal, undefined. SPM: "▁" -> ' '; BPE: code points back
                  * to bytes (one that is not a mapped code point: as is) */
            if (t->kind == TOK_KIND_BPE) {
                const byte_map *bm = get_byte_map();
                for (size_t k = 0; k < len;) {
                    size_t cl;
                    uint32_t cp = utf8_decode(s + k, len - k, &cl);
                    if (cp < 0x144 && bm->dec[cp] >= 0) d[dn++] = (char)bm->dec[cp];
                    else { memcpy(d + dn, s + k, cl); dn += (uint32_t)cl; }
                    k += cl;
                }
                break;
            }
            for (size_t k = 0; k < len;) {
                if (k + 3 <= len && memcmp(s + k, SPACE_ESC, 3) == 0) { d[dn++] = ' '; k += 3; }
                else d[dn++] = s[k++];
            }
            break;
        }
        t->doff[i] = dpos;
        t->dlen[i] = dn;
        if (dn > t->max_dlen) t->max_dlen = dn;
        dpos += dn;
    }

    /* piece -> id map at load factor <= 1/2 */
    uint32_t cap = 16;
    while (cap < 2u * (uint32_t)n) cap <<= 1;
    t->map = malloc(cap * sizeof *t->map);
    if (!t->map) TOK_ABORT("out of memory");
    memset(t->map, 0xff, cap * sizeof *t->map);
    t->map_mask = cap - 1;
    for (int32_t i = 0; i < n; i++) map_insert(t, i);
    t->word_split = true;
    for (int32_t i = 0; i < n && t->word_split; i++)
        if (mergeable(t->type[i]) && space_inside(t->text + t->off[i], t->len[i])) t->word_split = false;

    /* byte fallback. BPE: the token of the byte's mapped code point */
    for (int b = 0; b < 256 && t->kind == TOK_KIND_BPE; b++) {
        const byte_map *bm = get_byte_map();
        int32_t id = map_find(t, bm->enc[b], bm->enc_len[b]);
        if (id >= 0 && !mergeable(t->type[id])) id = -1;
        if (id < 0) id = t->unk;
        if (id < 0) {
            set_err(err, errlen, "tokenizer: no token for byte 0x%02X (no token '%.*s', no unknown token)",
                    b, (int)bm->enc_len[b], bm->enc[b]);
            return false;
        }
        t->byte_id[b] = id;
    }
    for (int b = 0; b < 256 && t->kind == TOK_KIND_SPM; b++) {
        char buf[8];
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        int32_t id = map_find(t, buf, 6);
        if (id < 0 || t->type[id] != TOK_TYPE_BYTE) {
            char c = (char)b;
            id = map_find(t, &c, 1);
            if (id >= 0 && !mergeable(t->type[id])) id = -1;
        }
        if (id < 0) id = t->unk;
        if (id < 0) {
            set_err(err, errlen, "tokenizer: no token for byte 0x%02X (no <0x%02X> byte token, "
                    "no single-byte token, no unknown token)", b, b);
            return false;
        }
        t->byte_id[b] = id;
    }

    /* special tokens matched whole in text */
    int32_t ns = 0;
    for (int32_t i = 0; i < n; i++) {
        uint8_t ty = t->type[i];
        if (t->len[i] > 0 && (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN || ty == TOK_TYPE_USER_DEFINED))
            ns++;
    }
    t->special = malloc((ns ? ns : 1) * sizeof *t->special);
    if (!t->special) TOK_ABORT("out of memory");
    ns = 0;
    for (int32_t i = 0; i < n; i++) {
        uint8_t ty = t->type[i];
        if (t->len[i] > 0 && (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN || ty == TOK_TYPE_USER_DEFINED))
            t->special[ns++] = i;
        if (t->len[i] > 0 && ty == TOK_TYPE_USER_DEFINED) t->n_user++;
    }
    t->n_special = ns;
    qsort_r(t->special, (size_t)ns, sizeof *t->special, cmp_special, t);
    int32_t k = 0;
    for (int c = 0; c < 256; c++) {
        t->special_start[c] = (uint32_t)k;
        while (k < ns && (uint8_t)t->text[t->off[t->special[k]]] == c) k++;
    }
    t->special_start[256] = (uint32_t)ns;
    return true;
}

tokenizer *tok_create(const gguf_file *f, char *err, size_t errlen) {
    gguf_str model;
    if (!gguf_get_str(f, "tokenizer.ggml.model", &model)) {
        set_err(err, errlen, "tokenizer: no tokenizer.ggml.model in the file");
        return NULL;
    }
    char mname[64];
    snprintf(mname, sizeof mname, "%.*s", (int)(model.len < 48 ? model.len : 48), model.ptr);
    tok_kind kind;
    if (gguf_str_eq(model, "llama")) kind = TOK_KIND_SPM;
    else if (gguf_str_eq(model, "gpt2")) kind = TOK_KIND_BPE;
    else {
        set_err(err, errlen, "tokenizer model '%s' not supported (supported: 'llama', 'gpt2')", mname);
        return NULL;
    }
    tok_pre pre = TOK_PRE_NONE;
    const gguf_kv *kmerges = NULL;
    if (kind == TOK_KIND_BPE) {
        gguf_str ps;
        pre = TOK_PRE_GPT2;
        if (gguf_find(f, "tokenizer.ggml.pre")) {
            if (!gguf_get_str(f, "tokenizer.ggml.pre", &ps)) {
                set_err(err, errlen, "tokenizer: tokenizer.ggml.pre is not a string");
                return NULL;
            }
            if (gguf_str_eq(ps, "default") || gguf_str_eq(ps, "gpt-2")) pre = TOK_PRE_GPT2;
            else if (gguf_str_eq(ps, "llama-bpe")) pre = TOK_PRE_LLAMA3;
            else if (gguf_str_eq(ps, "qwen2")) pre = TOK_PRE_QWEN2;
            else if (gguf_str_eq(ps, "mpt") || gguf_str_eq(ps, "gpt-neox") || gguf_str_eq(ps, "olmo"))
                pre = TOK_PRE_GPT2; /* the gpt-2 regex itself */
            else if (gguf_str_eq(ps, "starcoder") || gguf_str_eq(ps, "refact") || gguf_str_eq(ps, "smollm") ||
                     gguf_str_eq(ps, "command-r"))
                pre = TOK_PRE_STARCODER;
            else if (gguf_str_eq(ps, "falcon")) pre = TOK_PRE_FALCON;
            else if (gguf_str_eq(ps, "deepseek-coder")) pre = TOK_PRE_DEEPSEEK_CODER;
            else if (gguf_str_eq(ps, "deepseek-llm")) pre = TOK_PRE_DEEPSEEK_LLM;
            else {
                set_err(err, errlen, "tokenizer: pre-tokenizer '%.*s' (tokenizer.ggml.pre) not supported "
                        "(supported: 'default', 'gpt-2', 'mpt', 'gpt-neox', 'olmo', 'llama-bpe', 'qwen2', "
                        "'starcoder', 'refact', 'smollm', 'command-r', 'falcon', 'deepseek-llm', 'deepseek-coder')",
                        (int)(ps.len < 48 ? ps.len : 48), ps.ptr);
                return NULL;
            }
        }
        kmerges = gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_TYPE_STRING);
        if (!kmerges) {
            set_err(err, errlen, "tokenizer: tokenizer.ggml.merges missing or not a string array "
                    "(needed by model 'gpt2')");
            return NULL;
        }
        if (kmerges->arr_n > TOK_MAX_VOCAB) {
            set_err(err, errlen, "tokenizer: tokenizer.ggml.merges has %" PRIu64 " entries (limit %d)",
                    kmerges->arr_n, TOK_MAX_VOCAB);
            return NULL;
        }
    }
    const bool spm = kind == TOK_KIND_SPM;

    const gguf_kv *ktok = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
    if (!ktok) {
        set_err(err, errlen, "tokenizer: tokenizer.ggml.tokens missing or not a string array");
        return NULL;
    }
    if (ktok->arr_n == 0 || ktok->arr_n > TOK_MAX_VOCAB) {
        set_err(err, errlen, "tokenizer: tokenizer.ggml.tokens has %" PRIu64 " entries (need 1..%d)",
                ktok->arr_n, TOK_MAX_VOCAB);
        return NULL;
    }
    int32_t n = (int32_t)ktok->arr_n;

    const gguf_kv *kscore = gguf_find(f, "tokenizer.ggml.scores");
    if (kscore && !(kscore->type == GGUF_TYPE_ARRAY && kscore->arr_type == GGUF_TYPE_FLOAT32 &&
                    kscore->arr_n == (uint64_t)n)) {
        set_err(err, errlen, "tokenizer: tokenizer.ggml.scores must be %" PRId32 " float32 values", n);
        return NULL;
    }
    const gguf_kv *ktype = gguf_find(f, "tokenizer.ggml.token_type");
    if (ktype && !(ktype->type == GGUF_TYPE_ARRAY &&
                   (ktype->arr_type == GGUF_TYPE_INT32 || ktype->arr_type == GGUF_TYPE_UINT32) &&
                   ktype->arr_n == (uint64_t)n)) {
        set_err(err, errlen, "tokenizer: tokenizer.ggml.token_type must be %" PRId32 " int32 values", n);
        return NULL;
    }

    tokenizer *t = calloc(1, sizeof *t);
    if (!t) TOK_ABORT("out of memory");
    t->kind = kind;
    t->pre = pre;
    t->ignore_merges = pre == TOK_PRE_LLAMA3;
    t->n_vocab = n;
    t->off = malloc((size_t)n * sizeof *t->off);
    t->len = malloc((size_t)n * sizeof *t->len);
    t->doff = malloc((size_t)n * sizeof *t->doff);
    t->dlen = malloc((size_t)n * sizeof *t->dlen);
    t->score = malloc((size_t)n * sizeof *t->score);
    t->type = malloc((size_t)n);
    if (!t->off || !t->len || !t->doff || !t->dlen || !t->score || !t->type) TOK_ABORT("out of memory");

    for (int32_t i = 0; i < n; i++) {
        if (kscore) memcpy(&t->score[i], (const char *)kscore->arr_data + 4 * (size_t)i, 4);
        else t->score[i] = 0.0f;
    }
    if (!load_special(f, "tokenizer.ggml.bos_token_id", spm ? 1 : -1, n, &t->bos, err, errlen) ||
        !load_special(f, "tokenizer.ggml.eos_token_id", spm ? 2 : -1, n, &t->eos, err, errlen) ||
        !load_special(f, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1, n, &t->unk, err, errlen) ||
        !load_special(f, "tokenizer.ggml.padding_token_id", -1, n, &t->pad, err, errlen) ||
        !load_special(f, "tokenizer.ggml.eot_token_id", -1, n, &t->eot, err, errlen) ||
        !load_special(f, "tokenizer.ggml.eom_token_id", -1, n, &t->eom, err, errlen) ||
        !load_flag(f, "tokenizer.ggml.add_bos_token", spm || pre == TOK_PRE_LLAMA3, &t->add_bos, err, errlen) ||
        !load_flag(f, "tokenizer.ggml.add_eos_token", false, &t->add_eos, err, errlen) ||
        !load_flag(f, "tokenizer.ggml.add_space_prefix", spm, &t->add_space_prefix, err, errlen))
        goto fail;

    for (int32_t i = 0; i < n; i++) {
        if (ktype) {
            int32_t v;
            memcpy(&v, (const char *)ktype->arr_data + 4 * (size_t)i, 4);
            if (v < TOK_TYPE_UNDEFINED || v > TOK_TYPE_BYTE) {
                set_err(err, errlen, "tokenizer: token %" PRId32 " has unknown type %" PRId32, i, v);
                goto fail;
            }
            t->type[i] = (uint8_t)v;
        } else {
            /* no types stored: infer the ones that change behaviour */
            const gguf_str *s = &ktok->arr_str[i];
            if (spm && parse_byte_token(s->ptr, s->len) >= 0) t->type[i] = TOK_TYPE_BYTE;
            else if (i == t->unk) t->type[i] = TOK_TYPE_UNKNOWN;
            else if (i == t->bos || i == t->eos) t->type[i] = TOK_TYPE_CONTROL;
            else t->type[i] = TOK_TYPE_NORMAL;
        }
    }
    if (!build_tables(t, ktok->arr_str, err, errlen)) goto fail;
    if (kmerges && !build_merges(t, kmerges, err, errlen)) goto fail;

    int32_t eogs[3] = {t->eos, t->eot, t->eom};
    for (int i = 0; i < 3; i++) {
        if (eogs[i] < 0) continue;
        bool dup = false;
        for (int j = 0; j < t->n_eog; j++) dup |= t->eog[j] == eogs[i];
        if (!dup) t->eog[t->n_eog++] = eogs[i];
    }
    t->hash = compute_hash(t);
    return t;
fail:
    tok_destroy(t);
    return NULL;
}

void tok_destroy(tokenizer *t) {
    if (!t) return;
    free(t->text);
    free(t->off);
    free(t->len);
    free(t->dtext);
    free(t->doff);
    free(t->dlen);
    free(t->score);
    free(t->type);
    free(t->map);
    free(t->special);
    free(t->mtext);
    free(t->moff);
    free(t->mlen);
    free(t->msplit);
    free(t->mmap);
    free(t);
}

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
        set_err(msg, n, "tokenizer model: target '%s' vs draft '%s'", tok_kind_name(a->kind), tok_kind_name(b->kind));
        return 1;
    }
    if (a->n_vocab != b->n_vocab) {
        set_err(msg, n, "vocabulary size: target %" PRId32 " vs draft %" PRId32, a->n_vocab, b->n_vocab);
        return 1;
    }
    for (int32_t i = 0; i < a->n_vocab; i++) {
        const char *sa = a->text + a->off[i], *sb = b->text + b->off[i];
        quote(qa, sizeof qa, sa, a->len[i]);
        if (a->len[i] != b->len[i] || memcmp(sa, sb, a->len[i]) != 0) {
            quote(qb, sizeof qb, sb, b->len[i]);
            set_err(msg, n, "token %" PRId32 ": target '%s' vs draft '%s'", i, qa, qb);
            return 1;
        }
        if (a->type[i] != b->type[i]) {
            set_err(msg, n, "token %" PRId32 " '%s': type target %d vs draft %d", i, qa, a->type[i], b->type[i]);
            return 1;
        }
        if (memcmp(&a->score[i], &b->score[i], sizeof(float)) != 0) {
            set_err(msg, n, "token %" PRId32 " '%s': score target %.9g vs draft %.9g", i, qa,
                    (double)a->score[i], (double)b->score[i]);
            return 1;
        }
    }
    static const char *const names[6] = {"bos", "eos", "unknown", "padding", "eot", "eom"};
    const int32_t ia[6] = {a->bos, a->eos, a->unk, a->pad, a->eot, a->eom};
    const int32_t ib[6] = {b->bos, b->eos, b->unk, b->pad, b->eot, b->eom};
    for (int i = 0; i < 6; i++) {
        if (ia[i] != ib[i]) {
            set_err(msg, n, "%s token id: target %" PRId32 " vs draft %" PRId32, names[i], ia[i], ib[i]);
            return 1;
        }
    }
    static const char *const fnames[3] = {"add_bos_token", "add_eos_token", "add_space_prefix"};
    const bool fa[3] = {a->add_bos, a->add_eos, a->add_space_prefix};
    const bool fb[3] = {b->add_bos, b->add_eos, b->add_space_prefix};
    for (int i = 0; i < 3; i++) {
        if (fa[i] != fb[i]) {
            set_err(msg, n, "%s: target %s vs draft %s", fnames[i], fa[i] ? "true" : "false", fb[i] ? "true" : "false");
            return 1;
        }
    }
    if (a->pre != b->pre) {
        set_err(msg, n, "pre-tokenizer: target '%s' vs draft '%s'", tok_pre_name(a->pre), tok_pre_name(b->pre));
        return 1;
    }
    if (a->n_merges != b->n_merges) {
        set_err(msg, n, "merges: target %" PRId32 " vs draft %" PRId32, a->n_merges, b->n_merges);
        return 1;
    }
    for (int32_t i = 0; i < a->n_merges; i++) {
        const char *sa = a->mtext + a->moff[i], *sb = b->mtext + b->moff[i];
        if (a->mlen[i] != b->mlen[i] || memcmp(sa, sb, a->mlen[i]) != 0) {
            quote(qa, sizeof qa, sa, a->mlen[i]);
            quote(qb, sizeof qb, sb, b->mlen[i]);
            set_err(msg, n, "merge %" PRId32 ": target '%s' vs draft '%s'", i, qa, qb);
            return 1;
        }
    }
    set_err(msg, n, "identical");
    return 0;
}

/* ---- encode (SPM) ------------------------------------------------------- */

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

/* heap order: higher score first; equal scores: leftmost first */
static inline bool bigram_before(const spm_bigram *x, const spm_bigram *y) {
    return x->score > y->score || (x->score == y->score && x->left < y->left);
}

static void heap_push(spm_state *st, spm_bigram b) {
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

static spm_bigram heap_pop(spm_state *st) {
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
    heap_push(st, (spm_bigram){left, right, st->t->score[id], size});
}

static inline bool is_space(const spm_state *st, int32_t i) {
    const spm_sym *s = &st->sym[i];
    return s->n == 3 && memcmp(st->esc + s->start, SPACE_ESC, 3) == 0;
}

static void spm_chunk(spm_state *st, int32_t c0, int32_t c1);

/* Tokenizes one run of plain text (no special tokens inside). */
static void spm_run(spm_state *st, const char *text, size_t len) {
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
        spm_bigram b = heap_pop(st);
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
            for (uint32_t k = 0; k < s->n; k++) emit(st, t->byte_id[(uint8_t)st->esc[s->start + k]]);
        }
    }
}

/* ---- encode (BPE) ------------------------------------------------------- */

/* Code points of a text run for the pre-tokenizers: cp[i] starts at byte
 * off[i]; an invalid byte is one "character" with cp = UINT32_MAX. */
typedef struct {
    const uint32_t *cp;
    size_t n;
} cps;

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
static size_t pre_split(const tokenizer *t, const cps *c, uint32_t *ends) {
    pre_split_state ps = {.ends = ends};
    switch (t->pre) {
#define PRE(a) ps.passes = a, ps.n_passes = (int)(sizeof(a) / sizeof(a[0]))
    case TOK_PRE_GPT2: PRE(PRE_GPT2); break;
    case TOK_PRE_LLAMA3: PRE(PRE_LLAMA3); break;
    case TOK_PRE_QWEN2: PRE(PRE_QWEN2); break;
    case TOK_PRE_STARCODER: PRE(PRE_STARCODER); break;
    case TOK_PRE_FALCON: PRE(PRE_FALCON); break;
    case TOK_PRE_DEEPSEEK_CODER: PRE(PRE_DEEPSEEK_CODER); break;
    case TOK_PRE_DEEPSEEK_LLM: PRE(PRE_DEEPSEEK_LLM); break;
#undef PRE
    default: TOK_ABORT("pre-tokenizer %d", (int)t->pre);
    }
    pre_fragment(&ps, c->cp, 0, 0, c->n);
    return ps.n_ends;
}

/* Encodes one pre-token (raw bytes word[0..len)): byte-map it into st->esc,
 * one symbol per byte, then merge the lowest-ranked adjacent pair first. */
static void bpe_try_bigram(spm_state *st, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const spm_sym *l = &st->sym[left], *r = &st->sym[right];
    int32_t rank = merge_find(st->t, st->esc + l->start, l->n, st->esc + r->start, r->n);
    if (rank < 0) return;
    heap_push(st, (spm_bigram){left, right, -(float)rank, l->n + r->n});
}

static void bpe_word(spm_state *st, const char *word, size_t len) {
    const tokenizer *t = st->t;
    const byte_map *bm = get_byte_map();
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
        spm_bigram b = heap_pop(st);
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
        for (uint32_t k = 0; k < s->n;) { /* one mapped code point per byte */
            size_t cl;
            uint32_t cp = utf8_decode(st->esc + s->start + k, s->n - k, &cl);
            if (cp >= 0x144 || bm->dec[cp] < 0) TOK_ABORT("bpe: symbol holds an unmapped code point");
            emit(st, t->byte_id[bm->dec[cp]]);
            k += (uint32_t)cl;
        }
    }
}

/* Tokenizes one run of plain text: pre-tokenize, then BPE each piece.
 * st->cp / st->cpoff have room for len + 1 entries. */
static void bpe_run(spm_state *st, const char *text, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t cl;
        st->cp[n] = utf8_decode(text + i, len - i, &cl);
        st->cpoff[n++] = (uint32_t)i;
        i += cl;
    }
    st->cpoff[n] = (uint32_t)len;
    cps c = {st->cp, n};
    size_t n_pieces = pre_split(st->t, &c, st->ends);
    for (size_t k = 0, i = 0; k < n_pieces; i = st->ends[k++])
        bpe_word(st, text + st->cpoff[i], st->cpoff[st->ends[k]] - st->cpoff[i]);
}

int tok_split(const tokenizer *t, const char *text, size_t len, size_t *ends, int max) {
    if (len > TOK_MAX_TEXT) TOK_ABORT("tok_split: text of %zu bytes (limit %zu)", len, TOK_MAX_TEXT);
    if (max < 0) max = 0;
    if (t->kind != TOK_KIND_BPE) {
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
    int count = (int)pre_split(t, &c, pe);
    for (int k = 0; k < count && k < max; k++) ends[k] = off[pe[k]];
    free(cp);
    return count <= max ? count : -count;
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
                if (i > run) (bpe ? bpe_run : spm_run)(&st, text + run, i - run);
                emit(&st, id);
                i += mlen;
                run = i;
            }
        }
        if (run < len) (bpe ? bpe_run : spm_run)(&st, text + run, len - run);
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

/* ---- decode -------------------------------------------------------------- */

/* The bytes id contributes under flags. Sets *is_special when the rendered
 * token is one tok_encode matches whole (so a space prefix follows it). */
static inline void render(const tokenizer *t, int32_t id, unsigned flags, const char **p, size_t *n,
                          bool *is_special) {
    uint8_t ty = t->type[id];
    *is_special = false;
    if ((ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN) && (flags & TOK_DECODE_SPECIAL)) {
        *p = t->text + t->off[id];
        *n = t->len[id];
        *is_special = true;
        return;
    }
    *p = t->dtext + t->doff[id];
    *n = t->dlen[id];
    *is_special = ty == TOK_TYPE_USER_DEFINED;
}

int tok_piece(const tokenizer *t, int32_t id, char *buf, size_t n) {
    check_id(t, id, "tok_piece");
    size_t len = t->dlen[id];
    if (len > n) return -(int)len;
    memcpy(buf, t->dtext + t->doff[id], len);
    return (int)len;
}

/* Applies the space-prefix rule to one rendered token; advances p and n. */
static inline void apply_strip(const tokenizer *t, bool *strip, bool is_special, const char **p, size_t *n) {
    if (is_special) {
        /* matched whole by the encoder: never stripped, and the text run after
         * it got a space prefix */
        *strip = t->add_space_prefix;
        return;
    }
    if (*n == 0 || !*strip) return;
    *strip = false;
    if ((*p)[0] == ' ') { (*p)++; (*n)--; }
}

int tok_decode(const tokenizer *t, const int32_t *ids, int n, char *buf, size_t cap, unsigned flags) {
    bool strip = t->add_space_prefix && !(flags & TOK_DECODE_CONTINUATION);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        check_id(t, ids[i], "tok_decode");
        const char *p;
        size_t len;
        bool sp;
        render(t, ids[i], flags, &p, &len, &sp);
        apply_strip(t, &strip, sp, &p, &len);
        if (len > 0 && total + len <= cap) memcpy(buf + total, p, len);
        total += len;
    }
    if (total > (size_t)0x7fffffff) TOK_ABORT("tok_decode: %zu bytes of text", total);
    return total <= cap ? (int)total : -(int)total;
}

/* ---- streaming decode ------------------------------------------------------ */

void tok_stream_init(tok_stream *s, const tokenizer *t, unsigned flags) {
    memset(s, 0, sizeof *s);
    s->flags = flags;
    s->strip = t->add_space_prefix && !(flags & TOK_DECODE_CONTINUATION);
}

size_t tok_stream_max_out(const tokenizer *t) {
    size_t piece = t->max_len > t->max_dlen ? t->max_len : t->max_dlen;
    if (piece < 3) piece = 3;
    /* every byte may turn into U+FFFD, plus the replacement of held bytes */
    return 3 * piece + 3;
}

static inline size_t put_fffd(char *out, size_t o) {
    out[o] = '\xef';
    out[o + 1] = '\xbf';
    out[o + 2] = '\xbd';
    return o + 3;
}

/* Is c a valid byte at position npend of a sequence starting with lead? */
static inline bool utf8_cont_ok(uint8_t lead, uint8_t npend, uint8_t c) {
    if (npend == 1) {
        switch (lead) {
        case 0xE0: return c >= 0xA0 && c <= 0xBF;
        case 0xED: return c >= 0x80 && c <= 0x9F;
        case 0xF0: return c >= 0x90 && c <= 0xBF;
        case 0xF4: return c >= 0x80 && c <= 0x8F;
        default: break;
        }
    }
    return c >= 0x80 && c <= 0xBF;
}

int tok_stream_feed(tok_stream *s, const tokenizer *t, int32_t id, char *out, size_t cap) {
    check_id(t, id, "tok_stream_feed");
    size_t need_cap = tok_stream_max_out(t);
    if (cap < need_cap) return -(int)need_cap;
    const char *p;
    size_t len;
    bool sp;
    render(t, id, s->flags, &p, &len, &sp);
    apply_strip(t, &s->strip, sp, &p, &len);

    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t c = (uint8_t)p[i];
        if (s->need) {
            if (utf8_cont_ok(s->pend[0], s->npend, c)) {
                s->pend[s->npend++] = c;
                if (s->npend == s->need) {
                    memcpy(out + o, s->pend, s->npend);
                    o += s->npend;
                    s->npend = s->need = 0;
                }
                continue;
            }
            /* the held prefix can no longer complete: one U+FFFD for it,
             * then c starts afresh */
            o = put_fffd(out, o);
            s->npend = s->need = 0;
        }
        if (c < 0x80) out[o++] = (char)c;
        else if (c >= 0xC2 && c <= 0xDF) { s->pend[0] = c; s->npend = 1; s->need = 2; }
        else if (c >= 0xE0 && c <= 0xEF) { s->pend[0] = c; s->npend = 1; s->need = 3; }
        else if (c >= 0xF0 && c <= 0xF4) { s->pend[0] = c; s->npend = 1; s->need = 4; }
        else o = put_fffd(out, o);
    }
    return (int)o;
}

int tok_stream_flush(tok_stream *s, char *out, size_t cap) {
    if (!s->need) return 0;
    if (cap < 3) return -3;
    s->npend = s->need = 0;
    put_fffd(out, 0);
    return 3;
}
