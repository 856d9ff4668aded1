/* grammar_mask.c — token masks: the trie walk with subtree shortcuts, key
 * masks (a top's tokens decided by its upper frames alone), preparing every
 * key, and the mask API. */
#include "engine/grammar/grammar_internal.h"

#include "kernels/clock.h"

#define G_FIXED_MIN 16 /* subtrees smaller than this are walked: the check costs more */

/* Whether the state at every depth below a node is the same for all its
 * paths: every byte of sub (the subtree's byte set) steps chain[j-1] to one
 * chain[j], j = 1..h, chain[0] = s (a string's character loop maps s to
 * itself; a bounded string {0,n} to the next position; a dead state stays
 * dead). Then every token below ends in the chain state of its depth. */
static bool subtree_chain(grammar_matcher *m, int32_t s, const uint32_t *sub, int h, int32_t *chain) {
    chain[0] = s;
    for (int j = 1; j <= h; j++) {
        int32_t cur = chain[j - 1], nxt = G_UNSEEN;
        if (cur < 0) {
            chain[j] = GRAMMAR_DEAD;
            continue;
        }
        const int32_t *row = NULL;
        for (int w = 0; w < 8; w++)
            for (uint32_t bits = sub[w]; bits; bits &= bits - 1) {
                uint8_t b = (uint8_t)(w * 32 + __builtin_ctz(bits));
                row = (size_t)cur < m->ndrow ? m->drow[cur] : NULL;
                int32_t r = row && row[b] != G_UNSEEN ? row[b] : gm_step_byte(m, cur, b);
                if (nxt == G_UNSEEN) nxt = r;
                else if (r != nxt) return false;
            }
        chain[j] = nxt;
        if (nxt == cur) { /* a fixpoint: the same below */
            for (int k = j + 1; k <= h; k++) chain[k] = nxt;
            break;
        }
    }
    return true;
}

/* One preorder walk of the trie from st into mask; budget < 0: no limit.
 * Returns the largest remaining distance among allowed tokens. */
static int32_t walk(grammar_matcher *m, int32_t st, int budget, uint32_t *mask) {
    const grammar_vocab *v = m->v;
    memset(mask, 0, sizeof(uint32_t) * (size_t)m->words);
    int32_t maxd = 0;
    m->st.walks++;
    if (st < 0) return 0;
    int32_t *ws = m->walk_state;
    ws[0] = st;
    int32_t i = 1, n = v->n_nodes;
    uint64_t visited = 0;
    while (i < n) {
        visited++;
        int d = v->ndepth[i];
        int32_t ps = ws[d - 1];
        const int32_t *row = (size_t)ps < m->ndrow ? m->drow[ps] : NULL;
        int32_t s = row && row[v->nbyte[i]] != G_UNSEEN ? row[v->nbyte[i]] : gm_step_byte(m, ps, v->nbyte[i]);
        if (s < 0) {
            i = v->nskip[i];
            continue;
        }
        ws[d] = s;
        int32_t end = v->nskip[i];
        /* a state every byte below this node maps to itself (a JSON string's
         * character loop): the whole subtree's tokens end in s, so they are
         * all allowed or all refused alike, without visiting a node */
        int h = v->nheight[i];
        bool fixed = end - i > G_FIXED_MIN && subtree_chain(m, s, v->nsub + (size_t)i * 8, h, m->chain);
        if (fixed) { /* the tokens below, by their depth's chain state */
            const int32_t *ch = m->chain;
            bool all = true;
            for (int j = 1; j <= h && all; j++)
                all = ch[j] >= 0 && (budget < 0 || m->sdist[ch[j]] <= budget - 1);
            int32_t u0 = v->ntok_off[i + 1], u1 = v->ntok_off[end];
            for (int32_t k = u0; k < u1; k++) {
                int32_t t = v->ntok[k];
                int32_t cs = ch[v->ntok_len[k] - d];
                if (!all && (cs < 0 || (budget >= 0 && m->sdist[cs] > budget - 1))) continue;
                mask[t >> 5] |= 1u << (t & 31);
                if (m->sdist[cs] > maxd) maxd = m->sdist[cs];
            }
        }
        int32_t t0 = v->ntok_off[i], t1 = v->ntok_off[i + 1];
        if (t0 < t1) {
            int32_t dist = m->sdist[s];
            if (budget < 0 || dist <= budget - 1) {
                for (int32_t k = t0; k < t1; k++) mask[v->ntok[k] >> 5] |= 1u << (v->ntok[k] & 31);
                if (dist > maxd) maxd = dist;
            }
        }
        if (fixed) m->st.subtrees_skipped++;
        i = fixed ? end : i + 1;
    }
    m->st.nodes_visited += visited;
    if (grammar_accepting(m, st))
        for (int k = 0; k < v->n_eog; k++) mask[v->eog_ids[k] >> 5] |= 1u << (v->eog_ids[k] & 31);
    return maxd;
}

/* The mask cache's memory, in huge pages where the kernel gives them: a
 * fresh 4 KiB page costs a fault on first touch (over 10 us on a virtual
 * machine), and a 102k-token mask spans four. NULL on failure. */
static uint32_t *mask_pool(grammar_matcher *m) {
    size_t bytes = sizeof(uint32_t) * (size_t)m->words * m->maskcap;
    void *p = NULL;
    if (posix_memalign(&p, (size_t)2 << 20, bytes)) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE); /* advice: nothing to do when refused */
#endif
    return p;
}

/* ---- key masks ----------------------------------------------------------------
 *
 * A state's mask is the union of its tops' masks, and a top's mask depends
 * on its whole stack only through the tokens that empty its upper frames.
 * So a top is masked by its key: its G_KEY_FRAMES upper frames over G_HOLE
 * ("whatever lies below"), or the top itself when its stack is no deeper.
 * One trie walk per key (from the local state {key}) sorts the vocabulary
 * into tokens accepted whatever lies below (a local path survives the whole
 * token, possibly ending exactly at G_HOLE: any real stack below continues
 * from there), tokens refused whatever lies below (every path dies without
 * ever reaching G_HOLE), and the few context-dependent rest (a path reached
 * G_HOLE before the token ended, and every local path died), which a mask
 * checks against the real state by stepping their bytes. The keys of a
 * grammar are few (a byte position times the continuation positions of its
 * rule, see grammar_matcher_prepare) and shared by every state, so a state
 * seen for the first time costs an OR of a few bitmaps and a short list.
 * Exact: a token is allowed by the real state iff some path of some top
 * survives it; a path that stays in its top's frames is the key's local
 * path, one that goes below them passed G_HOLE locally, so the token is in
 * acc or cd of that key. */

#define G_KEY_FRAMES 3
#define G_KEY_BYTES (256u << 20) /* key masks per matcher; past it masks fall back to whole walks */

static bool has_hole(const grammar_matcher *m, int32_t s) {
    const int32_t *t = m->spool + m->soff[s];
    int32_t n = m->scnt[s];
    return t[0] == G_HOLE || (t[0] == 0 && n > 1 && t[1] == G_HOLE);
}

/* The key node of real top id (id itself when its stack has at most
 * G_KEY_FRAMES frames) and the real node below the key's frames (0 for an
 * exact key). -1 when a bound was hit. */
static int32_t key_of(grammar_matcher *m, int32_t id, int32_t *deep) {
    if ((size_t)id < m->nkmap && m->kkey[id] != -2) return *deep = m->kdeep[id], m->kkey[id];
    int32_t fr[G_KEY_FRAMES], c = id, key = id, dp = 0;
    int nf = 0;
    for (; nf < G_KEY_FRAMES && c != 0; nf++) fr[nf] = c, c = m->npar[c];
    if (c != 0) { /* deeper than the frames: the key ends in G_HOLE */
        key = G_HOLE;
        for (int j = nf - 1; j >= 0 && key >= 0; j--) key = gm_node_intern(m, m->npos[fr[j]], key);
        if (key < 0) return -1;
        dp = c;
    }
    if ((size_t)id >= m->nkmap) {
        size_t nc = m->nkmap ? m->nkmap : 1024;
        while (nc <= (size_t)id) nc *= 2;
        int32_t *a = realloc(m->kkey, sizeof(int32_t) * nc), *b = a ? realloc(m->kdeep, sizeof(int32_t) * nc) : NULL;
        if (a) m->kkey = a;
        if (!b) return -1;
        m->kdeep = b;
        for (size_t k = m->nkmap; k < nc; k++) m->kkey[k] = -2;
        m->nkmap = nc;
    }
    m->kkey[id] = key, m->kdeep[id] = dp;
    *deep = dp;
    return key;
}

static bool cd_push(struct gkey *e, size_t *cap, int32_t t) {
    if (!grow((void **)&e->cd, cap, (size_t)e->ncd + 1, sizeof(int32_t))) return false;
    e->cd[e->ncd++] = t;
    return true;
}

/* The gkey index of key node key, walking the trie for it the first time;
 * -1 when out of memory or over G_KEY_BYTES. */
static int32_t key_entry(grammar_matcher *m, int32_t key) {
    if ((size_t)key < m->nkslot && m->kslot[key] >= 0) return m->kslot[key];
    size_t words = (size_t)m->words;
    if (m->key_bytes + words * 4 > G_KEY_BYTES) return -1;
    if ((size_t)key >= m->nkslot) {
        size_t nc = m->nkslot ? m->nkslot : 1024;
        while (nc <= (size_t)key) nc *= 2;
        int32_t *a = realloc(m->kslot, sizeof(int32_t) * nc);
        if (!a) return -1;
        for (size_t k = m->nkslot; k < nc; k++) a[k] = -1;
        m->kslot = a, m->nkslot = nc;
    }
    if (!grow((void **)&m->keys, &m->kcap, m->nkeys + 1, sizeof(struct gkey))) return -1;
    int32_t one = key, st0 = gm_state_intern(m, &one, 1);
    if (st0 < 0) return -1;
    struct gkey e = {.acc = calloc(words, sizeof(uint32_t))};
    if (!e.acc) return -1;
    size_t cdcap = 0;
    const grammar_vocab *v = m->v;
    int32_t *ws = m->walk_state;
    uint8_t *hh = m->hh;
    ws[0] = st0, hh[0] = 0; /* st0 is one byte position: no G_HOLE */
    int32_t i = 1, n = v->n_nodes;
    bool ok = true;
    uint64_t visited = 0;
    m->st.walks++;
    while (i < n && ok) {
        visited++;
        int d = v->ndepth[i];
        int32_t s = gm_step_byte(m, ws[d - 1], v->nbyte[i]), end = v->nskip[i];
        if (s < 0) {
            if (hh[d - 1]) /* left the frames on the way: the real state decides */
                for (int32_t k = v->ntok_off[i]; k < v->ntok_off[end] && ok; k++) ok = cd_push(&e, &cdcap, v->ntok[k]);
            i = end;
            continue;
        }
        ws[d] = s, hh[d] = hh[d - 1] || has_hole(m, s);
        for (int32_t k = v->ntok_off[i]; k < v->ntok_off[i + 1]; k++) e.acc[v->ntok[k] >> 5] |= 1u << (v->ntok[k] & 31);
        if (v->ntok_off[i] < v->ntok_off[i + 1] && m->sdist[s] > e.maxlocal) e.maxlocal = m->sdist[s];
        /* a subtree every byte of which keeps a live state per depth: all accepted */
        int h = v->nheight[i];
        if (end - i > G_FIXED_MIN && subtree_chain(m, s, v->nsub + (size_t)i * 8, h, m->chain)) {
            bool all = true;
            for (int j = 1; j <= h && all; j++) all = m->chain[j] >= 0;
            if (all) {
                for (int32_t k = v->ntok_off[i + 1]; k < v->ntok_off[end]; k++) {
                    int32_t t = v->ntok[k], cs = m->chain[v->ntok_len[k] - d];
                    e.acc[t >> 5] |= 1u << (t & 31);
                    if (m->sdist[cs] > e.maxlocal) e.maxlocal = m->sdist[cs];
                }
                m->st.subtrees_skipped++;
                i = end;
                continue;
            }
        }
        i++;
    }
    m->st.nodes_visited += visited;
    if (ok && e.ncd && !(e.lcp = malloc(sizeof(uint16_t) * (size_t)e.ncd))) ok = false;
    if (!ok || m->overflow) {
        free(e.acc), free(e.cd), free(e.lcp);
        return -1;
    }
    for (int32_t k = 0; k < e.ncd; k++) {
        int l = 0;
        if (k) {
            const uint8_t *a = v->blob + v->off[e.cd[k - 1]], *b = v->blob + v->off[e.cd[k]];
            int la = (int)(v->off[e.cd[k - 1] + 1] - v->off[e.cd[k - 1]]), lb = (int)(v->off[e.cd[k] + 1] - v->off[e.cd[k]]);
            while (l < la && l < lb && a[l] == b[l]) l++;
        }
        e.lcp[k] = (uint16_t)l;
    }
    /* few tokens (a literal's first byte): a list, set bit by bit, instead
     * of a bitmap to OR word by word */
    int32_t cnt = 0;
    for (size_t w = 0; w < words; w++) cnt += __builtin_popcount(e.acc[w]);
    if ((size_t)cnt * 8 < words && (e.list = malloc(sizeof(int32_t) * (size_t)(cnt + 1)))) {
        for (size_t w = 0; w < words; w++)
            for (uint32_t x = e.acc[w]; x; x &= x - 1) e.list[e.nlist++] = (int32_t)(w * 32 + (size_t)__builtin_ctz(x));
        free(e.acc);
        e.acc = NULL;
    }
    m->key_bytes += (e.acc ? words * 4 : (size_t)e.nlist * 4) + (size_t)e.ncd * 6;
    m->keys[m->nkeys] = e;
    m->kslot[key] = (int32_t)m->nkeys;
    m->st.keys = ++m->nkeys;
    m->st.key_bytes = m->key_bytes;
    return m->kslot[key];
}

/* st's mask (no budget) from its tops' keys into mask; false when a key
 * could not be had (the caller walks instead). *maxd: an upper bound on the
 * distance left after any allowed token (exact for the context-dependent
 * ones, key's maxlocal plus the distance below its frames for the rest). */
static bool mask_keyed(grammar_matcher *m, int32_t st, uint32_t *mask, int32_t *maxd) {
    const grammar_vocab *v = m->v;
    size_t words = (size_t)m->words;
    int32_t n = m->scnt[st], nseen = 0, md = 0;
    if (!grow((void **)&m->kseen, &m->kseen_cap, (size_t)n, sizeof(int32_t))) return false;
    memset(mask, 0, sizeof(uint32_t) * words);
    for (int32_t k = 0; k < n; k++) {
        int32_t id = m->spool[m->soff[st] + k], deep;
        if (id == 0) continue;
        int32_t key = key_of(m, id, &deep), ei = key < 0 ? -1 : key_entry(m, key);
        if (ei < 0) return false;
        const struct gkey *e = &m->keys[ei];
        int32_t d = e->maxlocal + (deep > 0 ? m->ndist[deep] : 0);
        if (d > md) md = d;
        bool dup = false;
        for (int32_t j = 0; j < nseen && !dup; j++) dup = m->kseen[j] == ei;
        if (dup) continue;
        m->kseen[nseen++] = ei;
        if (e->acc)
            for (size_t w = 0; w < words; w++) mask[w] |= e->acc[w];
        else
            for (int32_t j = 0; j < e->nlist; j++) mask[e->list[j] >> 5] |= 1u << (e->list[j] & 31);
    }
    /* the context-dependent tokens, stepped from st with the trie order's
     * shared prefixes: ws[0..vd] are the states of the last stepped prefix */
    int32_t *ws = m->walk_state;
    for (int32_t j = 0; j < nseen; j++) {
        const struct gkey *e = &m->keys[m->kseen[j]];
        int vd = 0;
        ws[0] = st;
        for (int32_t k = 0; k < e->ncd; k++) {
            int32_t t = e->cd[k];
            if (e->lcp[k] < vd) vd = e->lcp[k];
            if (mask[t >> 5] >> (t & 31) & 1) continue;
            const uint8_t *b = v->blob + v->off[t];
            int len = (int)(v->off[t + 1] - v->off[t]);
            int32_t s = ws[vd];
            while (vd < len && s >= 0) s = gm_step_byte(m, s, b[vd]), ws[++vd] = s;
            m->st.cd_checked++;
            if (s < 0 || vd < len) continue;
            mask[t >> 5] |= 1u << (t & 31);
            if (m->sdist[s] > md) md = m->sdist[s];
        }
    }
    if (m->overflow) return false;
    if (grammar_accepting(m, st))
        for (int k = 0; k < v->n_eog; k++) mask[v->eog_ids[k] >> 5] |= 1u << (v->eog_ids[k] & 31);
    *maxd = md;
    return true;
}

/* ---- preparing every key ------------------------------------------------------ */

#define G_PREP_PAR 4096   /* continuation positions per rule */
#define G_PREP_KEYS 16384 /* keys prepared at most (the rest on first use) */
#define G_PREP_NODES (16u << 20) /* trie nodes prepare visits at most (a few hundred ms) */
#define G_PREP_STEPS (8u << 20)  /* closure work items prepare spends at most */
#define G_PREP_WORK (8u << 20)   /* set operations finding the continuation positions */
#define G_PREFAULT_BYTES (8u << 20) /* cached masks' memory touched by prepare */

typedef struct {
    int32_t *v;
    size_t n, cap;
} i32set;

static bool set_add(i32set *s, int32_t x, bool *changed, uint64_t *work) {
    *work += s->n + 1;
    if (*work > G_PREP_WORK) return false;
    for (size_t k = 0; k < s->n; k++)
        if (s->v[k] == x) return true;
    if (s->n >= G_PREP_PAR || !grow((void **)&s->v, &s->cap, s->n + 1, sizeof(int32_t))) return false;
    s->v[s->n++] = x;
    *changed = true;
    return true;
}

typedef struct {
    grammar_matcher *m;
    const int32_t *rule_of;
    const i32set *par;
    int32_t fr[G_KEY_FRAMES];
    int nkeys;
    uint64_t node_cap, step_cap;
    double deadline;           /* clock_now_ms() bound (0: none) */
    unsigned ticks;
    bool failed, late;
} prep;

/* Whether prepare has used its budget (the keys left are made on first use). */
static bool prep_spent(prep *P) {
    if (P->nkeys >= G_PREP_KEYS || P->m->st.nodes_visited >= P->node_cap || P->m->closure_steps >= P->step_cap)
        return true;
    /* the deadline, read every 64 checks (a clock read costs ~20 ns) */
    if (P->deadline > 0 && (++P->ticks & 63) == 0 && clock_now_ms() > P->deadline) P->late = true;
    return P->late;
}

static void prep_key(prep *P, int j, int32_t bottom) {
    int32_t node = bottom;
    for (int i = j - 1; i >= 0 && node >= 0; i--) node = gm_node_intern(P->m, P->fr[i], node);
    if (node < 0 || key_entry(P->m, node) < 0) P->failed = true;
    else P->nkeys++;
}

/* Keys with frames fr[0..j): every way the frames continue below fr[j - 1]. */
static void prep_rec(prep *P, int j) {
    const i32set *s = &P->par[P->rule_of[P->fr[j - 1]]];
    bool hole = false;
    for (size_t k = 0; k < s->n && !P->failed && !prep_spent(P); k++) {
        int32_t x = s->v[k];
        if (x == 0) prep_key(P, j, 0);
        else if (j == G_KEY_FRAMES) {
            if (!hole) prep_key(P, j, G_HOLE), hole = true;
        } else {
            P->fr[j] = x;
            prep_rec(P, j + 1);
        }
    }
}

int grammar_matcher_prepare(grammar_matcher *m) { return grammar_matcher_prepare_until(m, 0); }

int grammar_matcher_prepare_until(grammar_matcher *m, double deadline_ms) {
    const grammar *g = m->g;
    int32_t *rule_of = malloc(sizeof(int32_t) * (size_t)(g->n_code + 1));
    i32set *par = calloc((size_t)g->n_rules, sizeof(i32set));
    int result = -1;
    if (!rule_of || !par) goto done;
    for (int r = 0; r < g->n_rules; r++)
        for (int32_t a = 0; a < g->alt_n[r]; a++)
            for (int32_t p = g->alt_start[g->alt_off[r] + a];; p++) {
                rule_of[p] = r;
                if (g->kind[p] == EL_END) break;
            }
    /* the positions a rule's frame can return to (0: the end of the output);
     * a reference in tail position returns where its own rule does */
    bool changed = true, ok = true;
    uint64_t work = 0;
    ok = set_add(&par[g->root], 0, &changed, &work);
    while (changed && ok) {
        changed = false;
        if (deadline_ms > 0 && clock_now_ms() > deadline_ms) {
            result = -2;
            goto done;
        }
        for (int32_t p = 0; p < g->n_code && ok; p++) {
            if (g->kind[p] != EL_REF) continue;
            i32set *dst = &par[g->arg[p]];
            if (g->kind[p + 1] != EL_END) ok = set_add(dst, p + 1, &changed, &work);
            else {
                const i32set *src = &par[rule_of[p]];
                for (size_t k = 0; k < src->n && ok; k++) ok = set_add(dst, src->v[k], &changed, &work);
            }
        }
    }
    if (!ok) goto done;
    prep P = {.m = m, .rule_of = rule_of, .par = par, .node_cap = m->st.nodes_visited + G_PREP_NODES,
              .step_cap = m->closure_steps + G_PREP_STEPS, .deadline = deadline_ms};
    for (int32_t p = 0; p < g->n_code && !P.failed && !prep_spent(&P); p++)
        if (g->kind[p] == EL_BYTES) P.fr[0] = p, prep_rec(&P, 1);
    result = P.late ? -2 : P.failed ? -1 : P.nkeys;
    /* touch the rest of the current row chunk and the first masks' memory
     * now, not a page fault every few new states later */
    if (m->nchunks && m->row_used < G_ROW_CHUNK)
        memset(m->chunks[m->nchunks - 1] + (size_t)256 * m->row_used, 0xff,
               sizeof(int32_t) * 256 * (G_ROW_CHUNK - m->row_used));
    if (!m->masks && (m->masks = mask_pool(m))) {
        size_t bytes = sizeof(uint32_t) * (size_t)m->words * m->maskcap;
        memset(m->masks, 0, bytes < G_PREFAULT_BYTES ? bytes : G_PREFAULT_BYTES);
    }
done:
    if (par)
        for (int r = 0; r < g->n_rules; r++) free(par[r].v);
    free(par), free(rule_of);
    return result;
}

const uint32_t *grammar_mask(grammar_matcher *m, int32_t st, int budget) {
    m->st.masks++;
    if (st < 0) { /* dead (only after a state bound was hit): end the output */
        memset(m->tmp, 0, sizeof(uint32_t) * (size_t)m->words);
        for (int k = 0; k < m->v->n_eog; k++) m->tmp[m->v->eog_ids[k] >> 5] |= 1u << (m->v->eog_ids[k] & 31);
        return m->tmp;
    }
    int32_t slot = m->smask[st];
    if (slot < 0) {
        if (m->nmask == m->maskcap) { /* full: start over (the states stay) */
            for (size_t k = 0; k < m->ns; k++) m->smask[k] = -1;
            m->nmask = 0;
        }
        if (!m->masks) {
            m->masks = mask_pool(m);
            if (!m->masks) {
                walk(m, st, budget, m->tmp);
                return m->tmp;
            }
        }
        slot = (int32_t)m->nmask++;
        if (m->nmask > m->mask_hw) m->mask_hw = m->nmask;
        uint32_t *dst = m->masks + (size_t)slot * (size_t)m->words;
        int32_t maxd;
        if (!mask_keyed(m, st, dst, &maxd)) maxd = walk(m, st, -1, dst); /* may grow smaxd */
        m->smaxd[st] = maxd;
        m->smask[st] = slot;
    } else {
        m->st.mask_hits++;
    }
    if (budget >= 0 && budget - 1 < m->smaxd[st]) {
        walk(m, st, budget, m->tmp);
        return m->tmp;
    }
    return m->masks + (size_t)slot * (size_t)m->words;
}

void grammar_mask_logits(grammar_matcher *m, int32_t st, int budget, float *logits) {
    const uint32_t *mask = grammar_mask(m, st, budget);
    int n = m->v->n;
    for (int w = 0; w < m->words; w++) {
        uint32_t x = mask[w];
        if (x == 0xFFFFFFFFu) continue;
        int t0 = w * 32, t1 = t0 + 32 < n ? t0 + 32 : n;
        for (int t = t0; t < t1; t++)
            if (!(x >> (t - t0) & 1)) logits[t] = -INFINITY;
    }
}

bool grammar_allows(grammar_matcher *m, int32_t st, int budget, int32_t t) {
    if (t < 0 || t >= m->v->n) return false;
    const uint32_t *mask = grammar_mask(m, st, budget);
    return mask[t >> 5] >> (t & 31) & 1;
}

void grammar_matcher_stats(const grammar_matcher *m, grammar_stats *out) { *out = m->st; }
