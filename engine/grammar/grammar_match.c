/* grammar_match.c — the byte-level pushdown matcher: interned stack nodes and
 * states, closure, memoised byte steps (dense rows), advancing by bytes and
 * tokens. */
#include "engine/grammar/grammar_internal.h"

static uint32_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (uint32_t)x;
}

static bool rehash_i32(int32_t **tab, uint32_t *mask, size_t count, uint32_t (*hash)(grammar_matcher *, int32_t),
                       grammar_matcher *m) {
    if ((count + 1) * 2 <= (size_t)*mask + 1) return true;
    uint32_t nm = (*mask + 1) * 2 - 1;
    int32_t *t = malloc(sizeof(int32_t) * ((size_t)nm + 1));
    if (!t) return false;
    memset(t, 0xff, sizeof(int32_t) * ((size_t)nm + 1));
    for (uint32_t k = 0; k <= *mask; k++) {
        int32_t id = (*tab)[k];
        if (id < 0) continue;
        uint32_t h = hash(m, id) & nm;
        while (t[h] >= 0) h = (h + 1) & nm;
        t[h] = id;
    }
    free(*tab);
    *tab = t;
    *mask = nm;
    return true;
}

static uint32_t node_hash(grammar_matcher *m, int32_t id) {
    return mix((uint64_t)(uint32_t)m->npos[id] << 32 | (uint32_t)m->npar[id]);
}

int32_t gm_node_intern(grammar_matcher *m, int32_t pos, int32_t par) {
    uint32_t h = mix((uint64_t)(uint32_t)pos << 32 | (uint32_t)par) & m->nhmask;
    for (; m->nhash[h] >= 0; h = (h + 1) & m->nhmask) {
        int32_t id = m->nhash[h];
        if (m->npos[id] == pos && m->npar[id] == par) return id;
    }
    if (m->nn >= G_MAX_NODES) return m->overflow = true, -1;
    size_t old = m->ncap; /* npar and ndist follow npos's capacity */
    if (!grow((void **)&m->npos, &m->ncap, m->nn + 1, sizeof(int32_t))) return m->overflow = true, -1;
    if (m->ncap != old) {
        int32_t *a = realloc(m->npar, sizeof(int32_t) * m->ncap), *b = a ? realloc(m->ndist, sizeof(int32_t) * m->ncap) : NULL;
        if (a) m->npar = a;
        if (b) m->ndist = b;
        if (!a || !b) return m->overflow = true, -1;
    }
    int32_t id = (int32_t)m->nn++;
    m->npos[id] = pos, m->npar[id] = par;
    long d = (long)m->g->sufmin[pos] + (par > 0 ? m->ndist[par] : 0);
    m->ndist[id] = (int32_t)(d > G_INF ? G_INF : d);
    m->nhash[h] = id;
    m->st.stack_nodes = m->nn;
    if (!rehash_i32(&m->nhash, &m->nhmask, m->nn, node_hash, m)) return m->overflow = true, -1;
    return id;
}

static uint32_t state_hash_of(const int32_t *t, int32_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int32_t k = 0; k < n; k++) h = (h ^ (uint32_t)t[k]) * 0x100000001b3ull;
    return mix(h);
}

static uint32_t state_hash(grammar_matcher *m, int32_t id) {
    return state_hash_of(m->spool + m->soff[id], m->scnt[id]);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

int32_t gm_state_intern(grammar_matcher *m, int32_t *t, int32_t n) {
    if (n == 0) return GRAMMAR_DEAD;
    qsort(t, (size_t)n, sizeof(int32_t), cmp_i32);
    int32_t u = 0;
    for (int32_t k = 0; k < n; k++)
        if (!u || t[u - 1] != t[k]) t[u++] = t[k];
    n = u;
    uint32_t h = state_hash_of(t, n) & m->shmask;
    for (; m->shash[h] >= 0; h = (h + 1) & m->shmask) {
        int32_t id = m->shash[h];
        if (m->scnt[id] == n && !memcmp(m->spool + m->soff[id], t, sizeof(int32_t) * (size_t)n)) return id;
    }
    if (!grow((void **)&m->spool, &m->sp_cap, m->sp_n + (size_t)n, sizeof(int32_t))) return m->overflow = true, -1;
    size_t old = m->scap;
    if (!grow((void **)&m->soff, &m->scap, m->ns + 1, sizeof(int64_t))) return m->overflow = true, -1;
    if (m->scap != old) {
        int32_t *a = realloc(m->scnt, sizeof(int32_t) * m->scap), *b = a ? realloc(m->sdist, sizeof(int32_t) * m->scap) : NULL;
        if (a) m->scnt = a;
        if (b) m->sdist = b;
        int32_t *c = b ? realloc(m->smask, sizeof(int32_t) * m->scap) : NULL;
        if (c) m->smask = c;
        int32_t *d = c ? realloc(m->smaxd, sizeof(int32_t) * m->scap) : NULL;
        if (d) m->smaxd = d;
        if (!d) return m->overflow = true, -1;
    }
    int32_t id = (int32_t)m->ns++;
    m->soff[id] = (int64_t)m->sp_n;
    m->scnt[id] = n;
    memcpy(m->spool + m->sp_n, t, sizeof(int32_t) * (size_t)n);
    m->sp_n += (size_t)n;
    int32_t d = G_INF;
    for (int32_t k = 0; k < n; k++) {
        int32_t x = t[k] == 0 ? 0 : m->ndist[t[k]];
        if (x < d) d = x;
    }
    m->sdist[id] = d;
    m->smask[id] = -1;
    m->smaxd[id] = 0;
    m->shash[h] = id;
    m->st.states = m->ns;
    if (!rehash_i32(&m->shash, &m->shmask, m->ns, state_hash, m)) return m->overflow = true, -1;
    return id;
}

/* Closure of the work items in m->work[0..nw) (pairs pos, parent) into a
 * state: rule references are expanded (tail calls push no return node),
 * finished alternatives return to their parent, byte sets become tops. */
int32_t gm_closure(grammar_matcher *m, size_t nw) {
    const grammar *g = m->g;
    size_t nt = 0;
    /* visited (pos, parent) pairs of this closure */
    memset(m->vkey, 0, sizeof(uint64_t) * ((size_t)m->vmask + 1));
    size_t nvis = 0, steps = 0;
    while (nw) {
        nw -= 2;
        int32_t pos = m->work[nw], par = m->work[nw + 1];
        if (++steps > G_MAX_STEPS) return m->overflow = true, GRAMMAR_DEAD;
        m->closure_steps++;
        uint64_t key = ((uint64_t)(uint32_t)pos << 32 | (uint32_t)par) + 1;
        uint32_t h = mix(key) & m->vmask;
        bool seen = false;
        for (; m->vkey[h]; h = (h + 1) & m->vmask)
            if (m->vkey[h] == key) {
                seen = true;
                break;
            }
        if (seen) continue;
        m->vkey[h] = key;
        if (++nvis * 2 > m->vmask) {
            /* grow the visited set and re-insert */
            uint32_t om = m->vmask, nm = (om + 1) * 4 - 1;
            uint64_t *nv = calloc((size_t)nm + 1, sizeof(uint64_t));
            if (!nv) return m->overflow = true, GRAMMAR_DEAD;
            for (uint32_t k = 0; k <= om; k++)
                if (m->vkey[k]) {
                    uint32_t j = mix(m->vkey[k]) & nm;
                    while (nv[j]) j = (j + 1) & nm;
                    nv[j] = m->vkey[k];
                }
            free(m->vkey);
            m->vkey = nv;
            m->vmask = nm;
        }
        uint8_t k = g->kind[pos];
        if (k == EL_BYTES) {
            int32_t id = gm_node_intern(m, pos, par);
            if (id < 0) return GRAMMAR_DEAD;
            if (!grow((void **)&m->tops, &m->tcap, nt + 1, sizeof(int32_t))) return m->overflow = true, GRAMMAR_DEAD;
            m->tops[nt++] = id;
        } else if (k == EL_END) {
            if (par == 0 || par == G_HOLE) { /* the root is done, or a local walk left its frames */
                if (!grow((void **)&m->tops, &m->tcap, nt + 1, sizeof(int32_t))) return m->overflow = true, GRAMMAR_DEAD;
                m->tops[nt++] = par;
            } else {
                if (!grow((void **)&m->work, &m->wcap, nw + 2, sizeof(int32_t))) return m->overflow = true, GRAMMAR_DEAD;
                m->work[nw++] = m->npos[par], m->work[nw++] = m->npar[par];
            }
        } else {
            int32_t r = g->arg[pos], cont = pos + 1;
            int32_t np = g->kind[cont] == EL_END ? par : gm_node_intern(m, cont, par);
            if (np < 0) return GRAMMAR_DEAD;
            int32_t na = g->alt_n[r];
            if (!grow((void **)&m->work, &m->wcap, nw + 2 * (size_t)na, sizeof(int32_t))) return m->overflow = true, GRAMMAR_DEAD;
            for (int32_t a = 0; a < na; a++) m->work[nw++] = g->alt_start[g->alt_off[r] + a], m->work[nw++] = np;
        }
    }
    return gm_state_intern(m, m->tops, (int32_t)nt);
}

static bool amemo_grow(grammar_matcher *m) {
    if ((m->an + 1) * 2 <= (size_t)m->amask + 1) return true;
    uint32_t om = m->amask, nm = (om + 1) * 2 - 1;
    uint64_t *k = calloc((size_t)nm + 1, sizeof(uint64_t));
    int32_t *v = malloc(sizeof(int32_t) * ((size_t)nm + 1));
    if (!k || !v) return free(k), free(v), false;
    for (uint32_t i = 0; i <= om; i++)
        if (m->akey[i]) {
            uint32_t j = mix(m->akey[i]) & nm;
            while (k[j]) j = (j + 1) & nm;
            k[j] = m->akey[i], v[j] = m->aval[i];
        }
    free(m->akey), free(m->aval);
    m->akey = k, m->aval = v, m->amask = nm;
    return true;
}

/* A dense row from the current chunk (rows are freed with the matcher
 * only). Chunks of G_ROW_CHUNK rows in huge pages where given: a 1 KiB row
 * per new state from malloc would fault a fresh 4 KiB page every four
 * states. NULL when out of memory. */
static int32_t *row_alloc(grammar_matcher *m) {
    if (m->row_used == G_ROW_CHUNK || !m->nchunks) {
        if (!grow((void **)&m->chunks, &m->chunk_cap, m->nchunks + 1, sizeof(int32_t *))) return NULL;
        void *p = NULL;
        size_t bytes = sizeof(int32_t) * 256 * G_ROW_CHUNK;
        if (posix_memalign(&p, (size_t)2 << 20, bytes)) return NULL;
#ifdef MADV_HUGEPAGE
        madvise(p, bytes, MADV_HUGEPAGE);
#endif
        m->chunks[m->nchunks++] = p;
        m->row_used = 0;
    }
    return m->chunks[m->nchunks - 1] + (size_t)256 * m->row_used++;
}

/* Records st --b--> r in st's dense row (allocating it; silently nothing
 * when out of memory or rows: the hash memo still has it). */
static void dense_put(grammar_matcher *m, int32_t st, uint8_t b, int32_t r) {
    if ((size_t)st >= m->ndrow) {
        size_t nc = m->ndrow ? m->ndrow : 256;
        while (nc <= (size_t)st) nc *= 2;
        int32_t **nd = realloc(m->drow, sizeof(int32_t *) * nc);
        if (!nd) return;
        memset(nd + m->ndrow, 0, sizeof(int32_t *) * (nc - m->ndrow));
        m->drow = nd, m->ndrow = nc;
    }
    int32_t *row = m->drow[st];
    if (!row) {
        if (m->nrows >= G_DENSE_ROWS || !(row = row_alloc(m))) return;
        for (int k = 0; k < 256; k++) row[k] = G_UNSEEN;
        m->drow[st] = row;
        m->nrows++;
    }
    row[b] = r;
}

static int32_t step_byte_memo(grammar_matcher *m, int32_t st, uint8_t b);

/* Fills st's whole dense row at once: bytes that the same subset of st's
 * tops accepts lead to the same state, so one closure per distinct subset
 * (a JSON string state: its character class, '\\', '"', the rest) instead of
 * one per byte. False (row untouched or partly filled, all entries right)
 * when st has over 64 tops, rows or memory ran out, or a bound was hit. */
static bool fill_row(grammar_matcher *m, int32_t st) {
    const grammar *g = m->g;
    int32_t n = m->scnt[st], pos[64], par[64], nk = 0;
    for (int32_t k = 0; k < n; k++) {
        int32_t id = m->spool[m->soff[st] + k];
        if (id == 0 || id == G_HOLE) continue;
        if (nk == 64) return false;
        pos[nk] = m->npos[id], par[nk] = m->npar[id], nk++;
    }
    dense_put(m, st, 0, G_UNSEEN); /* allocates the row */
    if ((size_t)st >= m->ndrow || !m->drow[st]) return false;
    uint64_t sig[256];
    for (int b = 0; b < 256; b++) {
        uint64_t x = 0;
        for (int32_t k = 0; k < nk; k++)
            if (set_has(g->sets[g->arg[pos[k]]], (unsigned)b)) x |= 1ull << k;
        sig[b] = x;
    }
    for (int b = 0; b < 256; b++) {
        if (m->drow[st][b] != G_UNSEEN) continue;
        int32_t r = GRAMMAR_DEAD;
        if (sig[b]) {
            size_t nw = 0;
            if (!grow((void **)&m->work, &m->wcap, 2 * (size_t)nk, sizeof(int32_t))) return false;
            for (int32_t k = 0; k < nk; k++)
                if (sig[b] >> k & 1) m->work[nw++] = pos[k] + 1, m->work[nw++] = par[k];
            r = gm_closure(m, nw);
            if (m->overflow) return false;
        }
        for (int c = b; c < 256; c++) /* the row pointer is stable: rows are never moved */
            if (sig[c] == sig[b]) m->drow[st][c] = r;
    }
    return true;
}

int32_t gm_step_byte(grammar_matcher *m, int32_t st, uint8_t b) {
    if (st < 0) return GRAMMAR_DEAD;
    if ((size_t)st < m->ndrow && m->drow[st] && m->drow[st][b] != G_UNSEEN) return m->drow[st][b];
    if (!m->overflow && fill_row(m, st)) return m->drow[st][b];
    int32_t r = step_byte_memo(m, st, b);
    if (!m->overflow) dense_put(m, st, b, r);
    return r;
}

static int32_t step_byte_memo(grammar_matcher *m, int32_t st, uint8_t b) {
    uint64_t key = (uint64_t)st * 256 + b + 1;
    uint32_t h = mix(key) & m->amask;
    for (; m->akey[h]; h = (h + 1) & m->amask)
        if (m->akey[h] == key) return m->aval[h];
    const grammar *g = m->g;
    size_t nw = 0;
    int32_t n = m->scnt[st];
    for (int32_t k = 0; k < n; k++) {
        int32_t id = m->spool[m->soff[st] + k];
        if (id == 0 || id == G_HOLE) continue;
        int32_t pos = m->npos[id];
        if (!set_has(g->sets[g->arg[pos]], b)) continue;
        if (!grow((void **)&m->work, &m->wcap, nw + 2, sizeof(int32_t))) return m->overflow = true, GRAMMAR_DEAD;
        m->work[nw++] = pos + 1, m->work[nw++] = m->npar[id];
    }
    int32_t r = nw ? gm_closure(m, nw) : GRAMMAR_DEAD;
    if (m->overflow) return GRAMMAR_DEAD; /* not memoised: the bound, not the grammar, said no */
    if (!amemo_grow(m)) return GRAMMAR_DEAD;
    h = mix(key) & m->amask;
    while (m->akey[h]) h = (h + 1) & m->amask;
    m->akey[h] = key, m->aval[h] = r;
    m->an++;
    return r;
}

grammar_matcher *grammar_matcher_create(const grammar *g, const grammar_vocab *v) {
    grammar_matcher *m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    m->g = g, m->v = v;
    m->words = (v->n + 31) / 32;
    m->nhmask = m->shmask = 1023, m->amask = 4095, m->vmask = 255;
    m->nhash = malloc(sizeof(int32_t) * 1024), m->shash = malloc(sizeof(int32_t) * 1024);
    m->akey = calloc(4096, sizeof(uint64_t)), m->aval = malloc(sizeof(int32_t) * 4096);
    m->vkey = calloc(256, sizeof(uint64_t));
    m->tmp = malloc(sizeof(uint32_t) * (size_t)m->words);
    m->walk_state = malloc(sizeof(int32_t) * (size_t)(v->max_len + 2));
    m->chain = malloc(sizeof(int32_t) * (size_t)(v->max_len + 2));
    m->hh = malloc((size_t)v->max_len + 2);
    if (!m->hh || !m->nhash || !m->shash || !m->akey || !m->aval || !m->vkey || !m->tmp || !m->walk_state || !m->chain) {
        grammar_matcher_destroy(m);
        return NULL;
    }
    memset(m->nhash, 0xff, sizeof(int32_t) * 1024);
    memset(m->shash, 0xff, sizeof(int32_t) * 1024);
    /* node 0: the empty stack */
    if (!grow((void **)&m->npos, &m->ncap, 2, sizeof(int32_t)) || !(m->npar = malloc(sizeof(int32_t) * m->ncap)) ||
        !(m->ndist = malloc(sizeof(int32_t) * m->ncap))) {
        grammar_matcher_destroy(m);
        return NULL;
    }
    m->npos[0] = -1, m->npar[0] = 0, m->ndist[0] = 0;
    m->npos[G_HOLE] = -2, m->npar[G_HOLE] = G_HOLE, m->ndist[G_HOLE] = 0;
    m->nn = 2;
    size_t maskbytes = sizeof(uint32_t) * (size_t)m->words;
    m->maskcap = G_MASK_BYTES / (maskbytes ? maskbytes : 1);
    if (m->maskcap < 16) m->maskcap = 16;
    return m;
}

size_t grammar_matcher_bytes(const grammar_matcher *m) {
    if (!m) return 0;
    size_t b = sizeof(*m);
    b += m->ncap * 3 * sizeof(int32_t) + ((size_t)m->nhmask + 1) * sizeof(int32_t);
    b += m->sp_cap * sizeof(int32_t) + m->scap * (sizeof(int64_t) + 4 * sizeof(int32_t)) + ((size_t)m->shmask + 1) * sizeof(int32_t);
    b += ((size_t)m->amask + 1) * (sizeof(uint64_t) + sizeof(int32_t)) + ((size_t)m->vmask + 1) * sizeof(uint64_t);
    if (m->masks) { /* the pool is reserved whole but touched as used (prepare touches its first 8 MiB) */
        size_t pool = sizeof(uint32_t) * (size_t)m->words * m->maskcap;
        size_t used = sizeof(uint32_t) * (size_t)m->words * m->mask_hw, pre = (size_t)8 << 20;
        if (used < pre) used = pre;
        used = (used + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
        b += used < pool ? used : pool;
    }
    b += sizeof(uint32_t) * (size_t)m->words + m->wcap * sizeof(int32_t) + m->tcap * sizeof(int32_t);
    b += m->nchunks * (size_t)G_ROW_CHUNK * 256 * sizeof(int32_t) + m->chunk_cap * sizeof(int32_t *) + m->ndrow * sizeof(int32_t *);
    b += m->nkmap * 2 * sizeof(int32_t) + m->nkslot * sizeof(int32_t) + m->kcap * sizeof(struct gkey) + m->key_bytes;
    const grammar *g = m->g;
    b += (size_t)g->n_code * (1 + 2 * sizeof(int32_t)) + (size_t)g->n_sets * 32 + (size_t)g->n_rules * (2 * sizeof(int32_t) + 16);
    return b;
}

void grammar_matcher_destroy(grammar_matcher *m) {
    if (!m) return;
    free(m->npos), free(m->npar), free(m->ndist), free(m->nhash);
    free(m->spool), free(m->soff), free(m->scnt), free(m->sdist), free(m->smask), free(m->smaxd), free(m->shash);
    free(m->akey), free(m->aval), free(m->masks), free(m->tmp), free(m->work), free(m->tops), free(m->vkey);
    free(m->walk_state), free(m->chain), free(m->hh), free(m->kseen);
    free(m->kkey), free(m->kdeep), free(m->kslot);
    for (size_t k = 0; k < m->nkeys; k++) free(m->keys[k].acc), free(m->keys[k].list), free(m->keys[k].cd), free(m->keys[k].lcp);
    free(m->keys);
    for (size_t k = 0; k < m->nchunks; k++) free(m->chunks[k]);
    free(m->chunks), free(m->drow);
    free(m);
}

int32_t grammar_start(grammar_matcher *m) {
    const grammar *g = m->g;
    int32_t na = g->alt_n[g->root];
    if (!grow((void **)&m->work, &m->wcap, 2 * (size_t)na, sizeof(int32_t))) return GRAMMAR_DEAD;
    size_t nw = 0;
    for (int32_t a = 0; a < na; a++) m->work[nw++] = g->alt_start[g->alt_off[g->root] + a], m->work[nw++] = 0;
    return gm_closure(m, nw);
}

int32_t grammar_advance_bytes(grammar_matcher *m, int32_t st, const uint8_t *s, int n) {
    for (int k = 0; k < n && st >= 0; k++) st = gm_step_byte(m, st, s[k]);
    return st;
}

bool grammar_accepting(const grammar_matcher *m, int32_t st) {
    return st >= 0 && m->scnt[st] > 0 && m->spool[m->soff[st]] == 0; /* sorted: node 0 first */
}

int grammar_min_remaining(const grammar_matcher *m, int32_t st) { return st < 0 ? G_INF : m->sdist[st]; }

int32_t grammar_advance_token(grammar_matcher *m, int32_t st, int32_t t) {
    const grammar_vocab *v = m->v;
    if (st < 0 || t < 0 || t >= v->n) return GRAMMAR_DEAD;
    if (v->eog[t]) return grammar_accepting(m, st) ? st : GRAMMAR_DEAD;
    int64_t len = v->off[t + 1] - v->off[t];
    if (len == 0) return GRAMMAR_DEAD;
    return grammar_advance_bytes(m, st, v->blob + v->off[t], (int)len);
}

