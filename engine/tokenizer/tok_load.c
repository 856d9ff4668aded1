/* tok_load.c — a tokenizer from GGUF metadata: the model kind and
 * pre-tokenizer, vocabulary strings, scores and types, decoded pieces, the
 * piece -> id map, byte fallback, special tokens, BPE merges and the identity
 * hash; and tok_destroy. */
#include "engine/tokenizer/tok_internal.h"

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


/* Copies the merges and builds the (left, right) -> rank map. A merge is
 * "left right": split at the first space after the first byte (a mapped
 * token never holds a space). */
static bool build_merges(tokenizer *t, const gguf_kv *km, char *err, size_t errlen) {
    int32_t n = (int32_t)km->arr_n;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) total += km->arr_str[i].len + 1;
    if (total > UINT32_MAX) {
        util_fail(err, errlen, "tokenizer: merges total %" PRIu64 " bytes (limit 4 GiB)", total);
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
            util_fail(err, errlen, "tokenizer: merge %" PRId32 " '%s' is not 'left right'", i, q);
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
        util_fail(err, errlen, "tokenizer: %s has type %s, expected an integer", key,
                gguf_vtype_name(kv->type));
        return false;
    }
    if (v == -1 || v == 0xFFFFFFFFLL) { *out = -1; return true; }
    if (v < 0 || v >= n_vocab) {
        util_fail(err, errlen, "tokenizer: %s = %" PRId64 " is out of range (vocabulary has %" PRId32 " tokens)",
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
        util_fail(err, errlen, "tokenizer: %s has type %s, expected bool", key, gguf_vtype_name(kv->type));
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
        util_fail(err, errlen, "tokenizer: token strings total %" PRIu64 " bytes (limit 4 GiB)", total);
        return false;
    }
    t->text = malloc(total ? total : 1);
    /* decoded pieces are at most max(len, 3) each */
    uint64_t dtotal = 0;
    for (int32_t i = 0; i < n; i++) dtotal += (strs[i].len > 3 ? strs[i].len : 3);
    if (dtotal > UINT32_MAX) {
        util_fail(err, errlen, "tokenizer: decoded pieces exceed 4 GiB");
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
                util_fail(err, errlen, "tokenizer: token %" PRId32 " has type byte but its text is not <0xNN>", i);
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
                const byte_map *bm = tok_byte_map();
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

    /* byte fallback. BPE: the token of the byte's mapped code point, or -1:
     * a vocabulary may lack some (Falcon's has no token for 0x03). As in
     * llama.cpp, such a byte still loads and is dropped when encoded (see
     * tok_bpe.c); the unknown token is not used for it. */
    for (int b = 0; b < 256 && t->kind == TOK_KIND_BPE; b++) {
        const byte_map *bm = tok_byte_map();
        int32_t id = map_find(t, bm->enc[b], bm->enc_len[b]);
        if (id >= 0 && !mergeable(t->type[id])) id = -1;
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
        /* else the unknown token, as SentencePiece without byte fallback; a
         * vocabulary with neither still loads and drops the byte when encoded
         * (llama.cpp loads it too, and then fails on such text) */
        if (id < 0) id = t->unk;
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
        util_fail(err, errlen, "tokenizer: no tokenizer.ggml.model in the file");
        return NULL;
    }
    char mname[64];
    snprintf(mname, sizeof mname, "%.*s", (int)(model.len < 48 ? model.len : 48), model.ptr);
    tok_kind kind;
    if (gguf_str_eq(model, "llama")) kind = TOK_KIND_SPM;
    else if (gguf_str_eq(model, "gpt2")) kind = TOK_KIND_BPE;
    else {
        util_fail(err, errlen, "tokenizer model '%s' not supported (supported: 'llama', 'gpt2')", mname);
        return NULL;
    }
    tok_pre pre = TOK_PRE_NONE;
    const gguf_kv *kmerges = NULL;
    if (kind == TOK_KIND_BPE) {
        gguf_str ps;
        pre = TOK_PRE_DEFAULT; /* llama.cpp's choice when the key is missing */
        if (gguf_find(f, "tokenizer.ggml.pre")) {
            if (!gguf_get_str(f, "tokenizer.ggml.pre", &ps)) {
                util_fail(err, errlen, "tokenizer: tokenizer.ggml.pre is not a string");
                return NULL;
            }
            pre = tok_pre_parse(ps.ptr, ps.len);
            if (pre == TOK_PRE_NONE) {
                char names[512];
                tok_pre_list(names, sizeof names);
                util_fail(err, errlen, "tokenizer: pre-tokenizer '%.*s' (tokenizer.ggml.pre) not supported "
                        "(supported: %s)", (int)(ps.len < 48 ? ps.len : 48), ps.ptr, names);
                return NULL;
            }
        }
        kmerges = gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_TYPE_STRING);
        if (!kmerges) {
            util_fail(err, errlen, "tokenizer: tokenizer.ggml.merges missing or not a string array "
                    "(needed by model 'gpt2')");
            return NULL;
        }
        if (kmerges->arr_n > TOK_MAX_VOCAB) {
            util_fail(err, errlen, "tokenizer: tokenizer.ggml.merges has %" PRIu64 " entries (limit %d)",
                    kmerges->arr_n, TOK_MAX_VOCAB);
            return NULL;
        }
    }
    const bool spm = kind == TOK_KIND_SPM;

    const gguf_kv *ktok = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
    if (!ktok) {
        util_fail(err, errlen, "tokenizer: tokenizer.ggml.tokens missing or not a string array");
        return NULL;
    }
    if (ktok->arr_n == 0 || ktok->arr_n > TOK_MAX_VOCAB) {
        util_fail(err, errlen, "tokenizer: tokenizer.ggml.tokens has %" PRIu64 " entries (need 1..%d)",
                ktok->arr_n, TOK_MAX_VOCAB);
        return NULL;
    }
    int32_t n = (int32_t)ktok->arr_n;

    const gguf_kv *kscore = gguf_find(f, "tokenizer.ggml.scores");
    if (kscore && !(kscore->type == GGUF_TYPE_ARRAY && kscore->arr_type == GGUF_TYPE_FLOAT32 &&
                    kscore->arr_n == (uint64_t)n)) {
        util_fail(err, errlen, "tokenizer: tokenizer.ggml.scores must be %" PRId32 " float32 values", n);
        return NULL;
    }
    const gguf_kv *ktype = gguf_find(f, "tokenizer.ggml.token_type");
    if (ktype && !(ktype->type == GGUF_TYPE_ARRAY &&
                   (ktype->arr_type == GGUF_TYPE_INT32 || ktype->arr_type == GGUF_TYPE_UINT32) &&
                   ktype->arr_n == (uint64_t)n)) {
        util_fail(err, errlen, "tokenizer: tokenizer.ggml.token_type must be %" PRId32 " int32 values", n);
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
                util_fail(err, errlen, "tokenizer: token %" PRId32 " has unknown type %" PRId32, i, v);
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

