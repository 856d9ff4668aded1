/* grammar_internal.h — what the grammar files share (not a public header:
 * engine/grammar/grammar.h is the contract): grammar_parse.c (the GBNF parser and the
 * compiled form), grammar_vocab.c (the vocabulary trie), grammar_match.c (the
 * byte-level pushdown matcher with interned states), grammar_mask.c (token
 * masks: trie walks, key masks, prepare).
 *
 * Compiled form: every rule is a list of alternatives, each a run of elements
 * ending in END; an element is a byte set (256-bit map) or a reference to a
 * rule. Character classes over code points become alternatives of byte-set
 * sequences (UTF-8), repetitions become helper rules, so matching is over
 * bytes only. A parser stack is a chain of interned nodes (position, parent):
 * the top is a byte-set position, the rest are return positions; a state is
 * the sorted set of stack tops (node 0 = the empty stack: the root is done).
 * Byte steps are memoised per (state, byte), a state's whole row at once. A
 * state's mask is the union of its tops' key masks (see "key masks": the
 * tokens decided by a top's upper frames alone, made once per grammar by one
 * trie walk each) plus a check of the few tokens that depend on the frames
 * below; a token budget near its end falls back to one walk over the
 * vocabulary trie in preorder, pruning a subtree as soon as its prefix dies. */
#ifndef SPECD_GRAMMAR_INTERNAL_H
#define SPECD_GRAMMAR_INTERNAL_H

#include "engine/grammar/grammar.h"

#include "engine/tokenizer/tokenizer.h"

#include <math.h>
#include <sys/mman.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define G_ASSERT(c)                                                                                            \
    do {                                                                                                       \
        if (!(c)) {                                                                                            \
            fprintf(stderr, "%s:%d: grammar invariant failed: %s\n", __FILE__, __LINE__, #c);                  \
            abort();                                                                                           \
        }                                                                                                      \
    } while (0)

enum { EL_END = 0, EL_BYTES = 1, EL_REF = 2 };
#define G_INF (1 << 29)
#define G_MAX_NODES (1 << 22)     /* interned stack nodes per matcher */
#define G_MAX_STEPS (1 << 20)     /* closure work items per byte step */
#define G_MAX_REPEAT 10000
#define G_MASK_BYTES (64u << 20)  /* cached masks per matcher */
#define G_HOLE 1                  /* the stack node "whatever lies below": a local walk's bottom (see key masks) */

/* ---- growable arrays ------------------------------------------------------ */

static inline bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}


/* ---- compiled grammar ------------------------------------------------------ */

struct grammar {
    int n_rules;
    char **names;              /* (n_rules) */
    int32_t *alt_off, *alt_n;  /* (n_rules) into alt_start */
    int32_t *alt_start;        /* positions */
    uint8_t *kind;             /* (n_code) */
    int32_t *arg;              /* (n_code) */
    int32_t *sufmin;           /* (n_code) fewest bytes from a position to its alternative's end */
    int32_t n_code;
    uint8_t (*sets)[32];       /* (n_sets) byte bitmaps */
    int n_sets;
    int root;
};

static inline bool set_has(const uint8_t *s, unsigned b) { return s[b >> 3] >> (b & 7) & 1; }

/* ---- vocabulary (grammar_vocab.c) ------------------------------------------- */

struct grammar_vocab {
    int n;
    uint8_t *blob;             /* token bytes */
    int64_t *off;              /* (n + 1) */
    uint8_t *eog;              /* (n) */
    int32_t *eog_ids;
    int n_eog;
    bool all_bytes;
    /* trie in preorder: node 0 is the root (empty prefix) */
    int32_t n_nodes;
    uint8_t *nbyte;            /* (n_nodes) the edge byte into the node */
    uint16_t *ndepth;          /* (n_nodes) */
    int32_t *nskip;            /* (n_nodes) the first node after the subtree */
    int32_t *ntok_off;         /* (n_nodes + 1) into ntok */
    int32_t *ntok;             /* token ids, grouped by node */
    uint32_t *nsub;            /* (n_nodes, 8) bitmap of the edge bytes below each node (its subtree) */
    uint16_t *nheight;         /* (n_nodes) the longest path below each node */
    uint16_t *ntok_len;        /* byte length of each ntok entry (a subtree's tokens in one sequential pass) */
    int max_len;
};

/* ---- matcher (grammar_match.c) ------------------------------------------------ */

#define G_UNSEEN (-2)
#define G_DENSE_ROWS 65536 /* 64 MiB of rows at most */
#define G_ROW_CHUNK 2048   /* rows per allocation: 2 MiB, one huge page */

struct grammar_matcher {
    const grammar *g;
    const grammar_vocab *v;
    /* stack nodes: (pos, parent), node 0 = the empty stack */
    int32_t *npos, *npar, *ndist;
    size_t nn, ncap;
    int32_t *nhash;
    uint32_t nhmask;
    /* states: sorted sets of stack tops */
    int32_t *spool;
    size_t sp_n, sp_cap;
    int64_t *soff;
    int32_t *scnt, *sdist, *smask, *smaxd;
    size_t ns, scap;
    int32_t *shash;
    uint32_t shmask;
    /* byte-step memo: key state * 256 + byte + 1 (0 = empty slot) */
    uint64_t *akey;
    int32_t *aval;
    size_t an;
    uint32_t amask;
    /* masks */
    int words;
    uint32_t *masks;
    size_t nmask, maskcap;
    size_t mask_hw;            /* the most mask slots ever in use (the pool's touched part) */
    uint32_t *tmp;
    /* scratch */
    int32_t *work;
    size_t wcap;
    int32_t *tops;
    size_t tcap;
    uint64_t *vkey;
    uint32_t vmask;
    int32_t *walk_state;       /* (max_len + 2) trie walk: state per depth */
    int32_t *chain;            /* (max_len + 2) subtree_chain: the state at each depth below a node */
    /* dense byte-step rows over the memo above: drow[st][b] (G_UNSEEN until
     * computed), allocated on a state's first step, at most G_DENSE_ROWS rows;
     * a trie walk is one load per node instead of a hash probe */
    int32_t **drow;
    size_t ndrow, nrows;
    int32_t **chunks;          /* the rows' memory: G_ROW_CHUNK rows each */
    size_t nchunks, chunk_cap, row_used;
    /* key masks: a top's mask by its K upper frames alone (see mask_keyed) */
    int32_t *kkey, *kdeep;     /* (nkmap) per node: its key node (-2: not yet) and the node below the key's frames */
    size_t nkmap;
    int32_t *kslot;            /* (nkslot) per key node: its gkey index, -1 none yet */
    size_t nkslot;
    struct gkey *keys;
    size_t nkeys, kcap, key_bytes;
    uint8_t *hh;               /* (max_len + 2) local walk: a state at depth <= d held G_HOLE */
    int32_t *kseen;            /* scratch: the keys of one state */
    size_t kseen_cap;
    uint64_t closure_steps;    /* work items all closures took (prepare's budget) */
    bool overflow;
    grammar_stats st;
};

/* A key's mask: the tokens its frames accept whatever lies below (acc), the
 * tokens that leave the frames and then die there, so only the real stack can
 * say (cd, in trie order, lcp[k] = bytes shared with cd[k - 1]), and the
 * largest distance to the frames' end over acc (maxlocal). */
struct gkey {
    uint32_t *acc;             /* (words), NULL when the tokens are few: then the list */
    int32_t *list;             /* (nlist) */
    int32_t nlist;
    int32_t *cd;               /* (ncd) */
    uint16_t *lcp;             /* (ncd) */
    int32_t ncd;
    int32_t maxlocal;
};

/* The interned stack node (pos, par); -1 when out of room (m->overflow set). */
int32_t gm_node_intern(grammar_matcher *m, int32_t pos, int32_t par);
/* The interned state of the n tops t (sorted in place and deduplicated; GRAMMAR_DEAD for none). */
int32_t gm_state_intern(grammar_matcher *m, int32_t *t, int32_t n);
/* Closure of the work items m->work[0..nw) (pairs pos, parent) into a state. */
int32_t gm_closure(grammar_matcher *m, size_t nw);
/* One byte step of state st (memoised); GRAMMAR_DEAD from a dead state or a byte it refuses. */
int32_t gm_step_byte(grammar_matcher *m, int32_t st, uint8_t b);

#endif
