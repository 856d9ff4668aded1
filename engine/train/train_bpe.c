/* train_bpe.c — byte-level BPE training (see train_bpe.h). */
#include "engine/train/train_bpe.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- a string -> count map (open addressing) ------------------------------------------ */

typedef struct {
    char **key;
    size_t *klen;
    int64_t *cnt;
    size_t cap, n;
} wmap;

static uint64_t fnv(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

static int wmap_grow(wmap *m) {
    size_t nc = m->cap ? 2 * m->cap : 4096;
    char **k = calloc(nc, sizeof(char *));
    size_t *kl = calloc(nc, sizeof(size_t));
    int64_t *c = calloc(nc, sizeof(int64_t));
    if (!k || !kl || !c) {
        free(k), free(kl), free(c);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->key[i]) {
            size_t j = fnv(m->key[i], m->klen[i]) & (nc - 1);
            while (k[j]) j = (j + 1) & (nc - 1);
            k[j] = m->key[i], kl[j] = m->klen[i], c[j] = m->cnt[i];
        }
    free(m->key), free(m->klen), free(m->cnt);
    m->key = k, m->klen = kl, m->cnt = c, m->cap = nc;
    return 0;
}

static int wmap_add(wmap *m, const char *s, size_t n) {
    if ((m->n + 1) * 2 > m->cap && wmap_grow(m)) return -1;
    size_t j = fnv(s, n) & (m->cap - 1);
    while (m->key[j] && !(m->klen[j] == n && !memcmp(m->key[j], s, n))) j = (j + 1) & (m->cap - 1);
    if (!m->key[j]) {
        if (!(m->key[j] = malloc(n ? n : 1))) return -1;
        memcpy(m->key[j], s, n);
        m->klen[j] = n, m->n++;
    }
    m->cnt[j]++;
    return 0;
}

/* ---- GPT-2's byte <-> printable code point mapping ------------------------------------------ */

static int byte_cp(int b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return b;
    int n = 0;
    for (int c = 0; c < b; c++)
        if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))) n++;
    return 256 + n;
}

static int utf8(char *o, int cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    o[0] = (char)(0xC0 | (cp >> 6)), o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* ---- training ------------------------------------------------------------------------------ */

typedef struct {
    int32_t *sym;   /* symbols of one distinct piece */
    int n;
    int64_t cnt;
} word;

int train_bpe(gguf_writer *w, const char *const *texts, const size_t *lens, int n, int n_vocab, char *err,
              size_t errlen) {
    if (n_vocab < 258) return util_fail(err, errlen, "a byte-level vocabulary needs at least 258 tokens (got %d)", n_vocab);
    wmap m = {0};
    int rc = -1;
    word *ws = NULL;
    char **tok = NULL;
    size_t *tlen = NULL;
    int32_t (*mg)[2] = NULL;
    int64_t *pc = NULL;
    int32_t *pa = NULL, *pb = NULL;
    for (int t = 0; t < n; t++) {
        size_t *ends = malloc(sizeof(size_t) * (lens[t] + 1));
        if (!ends) goto oom;
        int np = tok_split_pre(TOK_PRE_GPT2, texts[t], lens[t], ends, (int)(lens[t] + 1));
        size_t s = 0;
        for (int i = 0; i < np; s = ends[i++])
            if (wmap_add(&m, texts[t] + s, ends[i] - s)) {
                free(ends);
                goto oom;
            }
        free(ends);
    }
    ws = calloc(m.n ? m.n : 1, sizeof(word));
    int nw = 0;
    if (!ws) goto oom;
    for (size_t i = 0; i < m.cap; i++)
        if (m.key[i]) {
            word *x = &ws[nw++];
            x->n = (int)m.klen[i], x->cnt = m.cnt[i];
            if (!(x->sym = malloc(sizeof(int32_t) * (m.klen[i] ? m.klen[i] : 1)))) goto oom;
            for (size_t k = 0; k < m.klen[i]; k++) x->sym[k] = (unsigned char)m.key[i][k];
        }
    int max_merges = n_vocab - 257;
    tok = calloc((size_t)n_vocab, sizeof(char *));
    tlen = calloc((size_t)n_vocab, sizeof(size_t));
    mg = malloc(sizeof(*mg) * (size_t)(max_merges > 0 ? max_merges : 1));
    if (!tok || !tlen || !mg) goto oom;
    for (int b = 0; b < 256; b++) {
        if (!(tok[b] = malloc(4))) goto oom;
        tlen[b] = (size_t)utf8(tok[b], byte_cp(b));
    }
    int nt = 256;
    /* pair counts: a hash of (a, b) -> count, rebuilt each round */
    size_t total = 0, pcap = 1 << 16;
    for (int i = 0; i < nw; i++) total += (size_t)ws[i].n;
    while (pcap < 2 * total + 2) pcap <<= 1; /* distinct pairs <= symbols: the table stays under half full */
    pc = malloc(sizeof(int64_t) * pcap);
    pa = malloc(sizeof(int32_t) * pcap);
    pb = malloc(sizeof(int32_t) * pcap);
    if (!pc || !pa || !pb) goto oom;
    for (int r = 0; r < max_merges; r++) {
        for (size_t i = 0; i < pcap; i++) pa[i] = -1;
        int64_t best = 1;
        int32_t ba = -1, bb = -1;
        for (int i = 0; i < nw; i++)
            for (int k = 0; k + 1 < ws[i].n; k++) {
                int32_t a = ws[i].sym[k], b = ws[i].sym[k + 1];
                size_t j = (size_t)(((uint64_t)a * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)b * 0xC2B2AE3D27D4EB4Full)) >> 20;
                j &= pcap - 1;
                while (pa[j] >= 0 && !(pa[j] == a && pb[j] == b)) j = (j + 1) & (pcap - 1);
                if (pa[j] < 0) pa[j] = a, pb[j] = b, pc[j] = 0;
                pc[j] += ws[i].cnt;
                if (pc[j] > best || (pc[j] == best && ba >= 0 && (a < ba || (a == ba && b < bb)))) best = pc[j], ba = a, bb = b;
            }
        if (ba < 0) break; /* no pair occurs twice */
        if (!(tok[nt] = malloc(tlen[ba] + tlen[bb]))) goto oom;
        memcpy(tok[nt], tok[ba], tlen[ba]);
        memcpy(tok[nt] + tlen[ba], tok[bb], tlen[bb]);
        tlen[nt] = tlen[ba] + tlen[bb];
        mg[r][0] = ba, mg[r][1] = bb;
        for (int i = 0; i < nw; i++) { /* merge left to right */
            int o = 0;
            for (int k = 0; k < ws[i].n; k++) {
                if (k + 1 < ws[i].n && ws[i].sym[k] == ba && ws[i].sym[k + 1] == bb) ws[i].sym[o++] = nt, k++;
                else ws[i].sym[o++] = ws[i].sym[k];
            }
            ws[i].n = o;
        }
        nt++;
    }
    int n_merges = nt - 256;
    /* the keys */
    const char *eot = "<|endoftext|>";
    if (!(tok[nt] = malloc(strlen(eot)))) goto oom;
    memcpy(tok[nt], eot, strlen(eot));
    tlen[nt] = strlen(eot);
    int V = nt + 1;
    int32_t *types = malloc(sizeof(int32_t) * (size_t)V);
    char **ms = malloc(sizeof(char *) * (size_t)(n_merges ? n_merges : 1));
    if (!types || !ms) {
        free(types), free(ms);
        goto oom;
    }
    for (int i = 0; i < V; i++) types[i] = i == nt ? TOK_TYPE_CONTROL : TOK_TYPE_NORMAL;
    for (int r = 0; r < n_merges; r++) {
        size_t la = tlen[mg[r][0]], lb = tlen[mg[r][1]];
        if (!(ms[r] = malloc(la + lb + 2))) {
            for (int q = 0; q < r; q++) free(ms[q]);
            free(types), free(ms);
            goto oom;
        }
        memcpy(ms[r], tok[mg[r][0]], la);
        ms[r][la] = ' ';
        memcpy(ms[r] + la + 1, tok[mg[r][1]], lb);
        ms[r][la + 1 + lb] = 0;
    }
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, tlen, (uint64_t)V);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)V);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)ms, NULL, (uint64_t)n_merges);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)nt);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)nt);
    gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)nt);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    for (int r = 0; r < n_merges; r++) free(ms[r]);
    free(types), free(ms);
    rc = V;
    goto done;
oom:
    util_fail(err, errlen, "out of memory training the BPE vocabulary");
done:
    for (size_t i = 0; i < m.cap; i++) free(m.key[i]);
    free(m.key), free(m.klen), free(m.cnt);
    for (size_t i = 0; ws && i < m.n; i++) free(ws[i].sym);
    free(ws);
    for (int i = 0; tok && i < n_vocab; i++) free(tok[i]);
    free(tok), free(tlen), free(mg), free(pc), free(pa), free(pb);
    return rc;
}
