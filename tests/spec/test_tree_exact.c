/* test_tree_exact.c — lossless tree acceptance (engine/spec/tree.h) checked exactly:
 * for vocabularies of 2..4 tokens, random target conditionals p(· | context)
 * and drafter laws q(· | context), random trees of depth <= 3 with <= 3
 * children per node, every way the drafter can fill the tree (i.i.d.
 * children, children without replacement, deterministic children, and i.i.d.
 * mixed with deterministic) is enumerated with its probability, and the exact
 * law of the acceptance walk (tree_accept_law, the same walk tree_accept runs)
 * gives the joint law of the first two output tokens, which must equal
 * p(t1) p(t2 | t1) to 1e-9. The two broken variants (no residual update
 * between siblings; i.i.d. siblings treated as drawn without replacement) go
 * through the same enumeration and must be caught, and so must the converse
 * (drawn without replacement, judged with the unreduced q). Then: tree_accept's
 * sampled outcomes against the law (frequencies), a chain takes the same
 * decisions as accept_chain, greedy follows the argmax, and tree_rows
 * writes positions root + depth and the ancestor mask. */
#include "engine/spec/accept.h"
#include "engine/sample/rng.h"
#include "engine/sample/sampler.h"
#include "engine/spec/tree.h"
#include "tests/sampler/chi2.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#define VMAX 4
#define NMAX 6
#define NCTX (1 + 4 + 16 + 64) /* contexts of length 0..3 over VMAX tokens */

enum { M_IID, M_NOREPL, M_DET, M_MIXED, M_COUNT };
static const char *mode_name[M_COUNT] = {"i.i.d.", "without replacement", "deterministic", "i.i.d.+deterministic"};

typedef struct {
    int V, n;
    int parent[NMAX], depth[NMAX];
    float P[NCTX][VMAX], Q[NCTX][VMAX];
    int32_t detpick[NCTX][3];
    int mode;
    bool det_of[NMAX]; /* M_MIXED: which nodes are deterministic */
    /* the tree being filled */
    drafter_node nodes[NMAX];
    float p[(NMAX + 1) * VMAX], q[NMAX * VMAX];
    int ctx_of[NMAX];
    /* accumulated joint law of (t1, t2) */
    double J[VMAX][VMAX];
    double wdraft;
    tree_variant variant;
    bool greedy, stale_q;
} kase;

static int ctx_child(int ctx, int len, int tok, int V) {
    /* contexts are numbered by length, then base-V digits */
    static const int off[4] = {0, 1, 5, 21};
    (void)len;
    if (ctx == 0) return off[1] + tok;
    if (ctx < off[2]) return off[2] + (ctx - off[1]) * V + tok;
    return off[3] + (ctx - off[2]) * V + tok;
}

static double norm_of(const float *x, int V, int t) {
    double s = 0;
    for (int i = 0; i < V; i++) s += x[i];
    return x[t] / s;
}

/* kind 0 dense, 1 with zeros, 2 one-hot, 3 peaked */
static void rand_dist(float *out, int V, int kind, uint64_t *rs) {
    double w[VMAX], s = 0;
    for (int i = 0; i < V; i++) {
        w[i] = t_unif(rs) + 0.02;
        if (kind == 1 && t_unif(rs) < 0.35) w[i] = 0;
        if (kind == 3) w[i] = w[i] * w[i] * w[i] * w[i];
        s += w[i];
    }
    if (kind == 2 || s == 0) {
        memset(w, 0, sizeof(w));
        w[t_splitmix(rs) % (uint64_t)V] = s = 1;
    }
    for (int i = 0; i < V; i++) out[i] = (float)(w[i] / s);
}

static void emit(void *ctx, const int16_t *path, int k, int32_t token, double prob) {
    kase *c = ctx;
    double w = c->wdraft * prob;
    if (k >= 2) c->J[c->nodes[path[0]].token][c->nodes[path[1]].token] += w;
    else if (k == 1) c->J[c->nodes[path[0]].token][token] += w;
    else /* the next step draws t2 from the target after t1 */
        for (int t2 = 0; t2 < c->V; t2++) c->J[token][t2] += w * norm_of(c->P[ctx_child(0, 0, token, c->V)], c->V, t2);
}

static void fill(kase *c, int i, double w) {
    if (i == c->n) {
        tree_view tv = {c->n, c->nodes, c->p, c->q, c->V};
        c->wdraft = w;
        CHECK(tree_accept_law(&tv, c->greedy, c->variant, emit, c) == 0);
        return;
    }
    int V = c->V, pa = c->parent[i];
    int ctx = pa < 0 ? 0 : c->ctx_of[pa];
    int rank = 0, earlier[NMAX];
    for (int j = 0; j < i; j++)
        if (c->parent[j] == pa) earlier[rank++] = j;
    bool det = c->mode == M_DET || (c->mode == M_MIXED && c->det_of[i]);
    c->nodes[i].parent = (int16_t)pa;
    c->nodes[i].deterministic = det;
    if (det) {
        int32_t tok = c->detpick[ctx][rank];
        c->nodes[i].token = tok;
        c->ctx_of[i] = ctx_child(ctx, 0, tok, V);
        memcpy(c->p + (size_t)(1 + i) * V, c->P[c->ctx_of[i]], sizeof(float) * V);
        fill(c, i + 1, w);
        return;
    }
    float *qr = c->q + (size_t)i * V, qn[VMAX];
    memcpy(qn, c->Q[ctx], sizeof(float) * V);
    if (c->mode == M_NOREPL) {
        double m = 0;
        for (int j = 0; j < rank; j++) qn[c->nodes[earlier[j]].token] = 0;
        for (int t = 0; t < V; t++) m += qn[t];
        for (int t = 0; t < V; t++) qn[t] = (float)(qn[t] / m);
    }
    /* stale_q: drawn without replacement, but the q row handed to the rule is
     * the unreduced q (the siblings treated as i.i.d.) */
    memcpy(qr, c->stale_q ? c->Q[ctx] : qn, sizeof(float) * V);
    for (int32_t tok = 0; tok < V; tok++) {
        double pr = norm_of(qn, V, tok);
        if (!(pr > 0)) continue;
        c->nodes[i].token = tok;
        c->ctx_of[i] = ctx_child(ctx, 0, tok, V);
        memcpy(c->p + (size_t)(1 + i) * V, c->P[c->ctx_of[i]], sizeof(float) * V);
        fill(c, i + 1, w * pr);
    }
}

/* The deviation of the law of (t1, t2) from the target's. */
static double law_error(kase *c, tree_variant v) {
    memset(c->J, 0, sizeof(c->J));
    c->variant = v;
    memcpy(c->p, c->P[0], sizeof(float) * c->V);
    fill(c, 0, 1.0);
    double e = 0;
    for (int a = 0; a < c->V; a++)
        for (int b = 0; b < c->V; b++)
            e = fmax(e, fabs(c->J[a][b] - norm_of(c->P[0], c->V, a) * norm_of(c->P[ctx_child(0, 0, a, c->V)], c->V, b)));
    return e;
}

static void rand_shape(kase *c, uint64_t *rs) {
    int maxkids = c->mode == M_NOREPL && c->V < 3 ? c->V : 3;
    c->n = 1 + (int)(t_splitmix(rs) % NMAX);
    int kids[NMAX + 1] = {0};
    for (int i = 0; i < c->n; i++) {
        int cand[NMAX + 1], nc = 0;
        for (int pa = -1; pa < i; pa++) {
            int d = pa < 0 ? 0 : c->depth[pa];
            if (d < 3 && kids[pa + 1] < maxkids) cand[nc++] = pa;
        }
        /* favour siblings at the root and early nodes, where they matter most */
        int pa = cand[t_splitmix(rs) % (uint64_t)nc];
        if (t_unif(rs) < 0.3 && kids[0] < maxkids) pa = -1;
        c->parent[i] = pa;
        c->depth[i] = pa < 0 ? 1 : c->depth[pa] + 1;
        kids[pa + 1]++;
        c->det_of[i] = t_unif(rs) < 0.5;
    }
}

static void test_exact(void) {
    uint64_t rs = 20261201;
    static kase c;
    for (int mode = 0; mode < M_COUNT; mode++) {
        long cases = 0, app_nr = 0, caught_nr = 0, app_rm = 0, caught_rm = 0;
        double worst = 0;
        for (int rep = 0; rep < 400; rep++) {
            memset(&c, 0, sizeof(c));
            c.mode = mode;
            c.V = 2 + rep % 3;
            for (int x = 0; x < NCTX; x++) {
                rand_dist(c.P[x], c.V, (rep + x) % 4 == 2 && rep % 5 == 0 ? 2 : (rep + x) % 4 == 2 ? 0 : (rep + x) % 4, &rs);
                /* without replacement needs q > 0 on enough tokens for every sibling */
                rand_dist(c.Q[x], c.V, mode == M_NOREPL ? 0 : (rep + 2 * x) % 4, &rs);
                for (int r = 0; r < 3; r++) c.detpick[x][r] = (int32_t)(t_splitmix(&rs) % (uint64_t)c.V);
            }
            rand_shape(&c, &rs);
            double e = law_error(&c, TREE_CORRECT);
            CHECKF(e <= 1e-9, "%s rep=%d V=%d n=%d: the law of (t1, t2) deviates by %.3g", mode_name[mode], rep, c.V,
                   c.n, e);
            worst = fmax(worst, e);
            cases++;
            bool siblings = false, sampled_siblings = false;
            for (int i = 0; i < c.n; i++)
                for (int j = 0; j < i; j++)
                    if (c.parent[i] == c.parent[j]) {
                        siblings = true;
                        bool di = mode == M_DET || (mode == M_MIXED && c.det_of[i]);
                        bool dj = mode == M_DET || (mode == M_MIXED && c.det_of[j]);
                        sampled_siblings |= !di && !dj && c.depth[i] == 1;
                    }
            if (siblings) {
                app_nr++;
                caught_nr += law_error(&c, TREE_BROKEN_NO_RESIDUAL) > 1e-6;
            }
            if (sampled_siblings && mode != M_NOREPL) {
                app_rm++;
                caught_rm += law_error(&c, TREE_BROKEN_REMOVE_REJECTED) > 1e-6;
            }
            /* the converse mistake; with 2 tokens it is harmless (the residual
             * after a rejection is a point mass at the other token) */
            if (sampled_siblings && mode == M_NOREPL && c.V > 2) {
                app_rm++;
                c.stale_q = true;
                caught_rm += law_error(&c, TREE_CORRECT) > 1e-6;
                c.stale_q = false;
            }
        }
        CHECKF(caught_nr * 2 > app_nr && app_nr > 100, "%s: no-residual variant caught in %ld of %ld", mode_name[mode],
               caught_nr, app_nr);
        if (mode != M_DET)
            CHECKF(caught_rm * 2 > app_rm && app_rm > 30, "%s: remove-rejected (w/o replacement: unreduced q) variant caught in %ld of %ld",
                   mode_name[mode], caught_rm, app_rm);
        fprintf(stderr, "%-22s %ld trees (V=2..4, <= %d nodes, depth <= 3), max |P(t1,t2) - p| = %.3g; broken: "
                        "no residual caught %ld/%ld, %s caught %ld/%ld\n",
                mode_name[mode], cases, NMAX, worst, caught_nr, app_nr,
                mode == M_NOREPL ? "unreduced q" : "remove-rejected", caught_rm, app_rm);
    }
}

/* tree_accept samples what tree_accept_law says: outcome frequencies over
 * many seeds against the exact law. */
static int outcome_code(const int16_t *path, int k, int32_t tok) {
    int code = 0;
    for (int j = 0; j < k; j++) code = code * 7 + path[j] + 1;
    return (code * 7 + k) * VMAX + tok;
}

typedef struct {
    double P[4096];
} olaw;

static void emit_code(void *ctx, const int16_t *path, int k, int32_t token, double prob) {
    olaw *o = ctx;
    o->P[outcome_code(path, k, token) % 4096] += prob;
}

static void test_sampling(void) {
    uint64_t rs = 777;
    static kase c;
    static olaw L, F;
    double scratch[2 * VMAX];
    int bad = 0, trees = 0;
    for (int mode = 0; mode < M_COUNT; mode++)
        for (int rep = 0; rep < 6; rep++) {
            memset(&c, 0, sizeof(c));
            c.mode = mode;
            c.V = 3 + rep % 2;
            for (int x = 0; x < NCTX; x++) {
                rand_dist(c.P[x], c.V, 0, &rs);
                rand_dist(c.Q[x], c.V, 0, &rs);
                for (int r = 0; r < 3; r++) c.detpick[x][r] = (int32_t)(t_splitmix(&rs) % (uint64_t)c.V);
            }
            rand_shape(&c, &rs);
            /* one fixed drafted tree: the first filling with positive probability */
            for (int i = 0; i < c.n; i++) {
                int pa = c.parent[i], ctx = pa < 0 ? 0 : c.ctx_of[pa], rank = 0;
                for (int j = 0; j < i; j++) rank += c.parent[j] == pa;
                bool det = mode == M_DET || (mode == M_MIXED && c.det_of[i]);
                int32_t tok = det ? c.detpick[ctx][rank] : (int32_t)((rank + i) % c.V);
                float *qr = c.q + (size_t)i * c.V;
                memcpy(qr, c.Q[ctx], sizeof(float) * c.V);
                c.nodes[i] = (drafter_node){tok, (int16_t)pa, det};
                c.ctx_of[i] = ctx_child(ctx, 0, tok, c.V);
                memcpy(c.p + (size_t)(1 + i) * c.V, c.P[c.ctx_of[i]], sizeof(float) * c.V);
            }
            memcpy(c.p, c.P[0], sizeof(float) * c.V);
            tree_view tv = {c.n, c.nodes, c.p, c.q, c.V};
            memset(&L, 0, sizeof(L));
            memset(&F, 0, sizeof(F));
            CHECK(tree_accept_law(&tv, false, TREE_CORRECT, emit_code, &L) == 0);
            const int N = 40000;
            for (int s = 0; s < N; s++) {
                int32_t out[NMAX + 1];
                int16_t path[NMAX];
                tree_rng rng = {(uint64_t)(s * 131 + rep), (uint64_t)(s % 17), TREE_CORRECT};
                int k = tree_accept(out, path, &tv, false, &rng, scratch);
                for (int j = 0; j < k; j++) CHECK(out[j] == c.nodes[path[j]].token);
                F.P[outcome_code(path, k, out[k]) % 4096] += 1.0 / N;
            }
            trees++;
            for (int o = 0; o < 4096; o++) {
                double sd = sqrt(L.P[o] * (1 - L.P[o]) / N);
                if (fabs(F.P[o] - L.P[o]) > 5 * sd + 1e-4) bad++;
                CHECKF(!(F.P[o] > 0 && L.P[o] == 0), "%s rep=%d: tree_accept took an outcome of law 0", mode_name[mode],
                       rep);
            }
        }
    CHECKF(bad == 0, "%d sampled outcome frequencies off the exact law by more than 5 sd", bad);
    fprintf(stderr, "tree_accept vs tree_accept_law: %d trees x 40000 draws, %d outcome frequencies beyond 5 sd\n",
            trees, bad);
}

/* A chain through tree_accept takes accept_chain's decisions (same coins). */
static void test_chain(void) {
    uint64_t rs = 31337;
    enum { V = 16, G = 6 };
    float p[(G + 1) * V], q[G * V], fscratch[V];
    double scratch[2 * V];
    long same = 0, total = 0;
    for (int rep = 0; rep < 20000; rep++) {
        int gamma = 1 + rep % G;
        drafter_node nodes[G];
        int32_t draft[G], o1[G + 1], o2[G + 1];
        bool det[G];
        int16_t path[G];
        for (int j = 0; j <= gamma; j++) {
            double w[V], s = 0;
            for (int i = 0; i < V; i++) s += w[i] = t_unif(&rs) * t_unif(&rs);
            for (int i = 0; i < V; i++) p[j * V + i] = (float)(w[i] / s);
        }
        for (int j = 0; j < gamma; j++) {
            double w[V], s = 0;
            for (int i = 0; i < V; i++) s += w[i] = t_unif(&rs) * t_unif(&rs);
            for (int i = 0; i < V; i++) q[j * V + i] = (float)(w[i] / s);
            det[j] = rep % 3 == 0 && j % 2;
            draft[j] = sampler_sample(q + j * V, V, t_unif(&rs));
            nodes[j] = (drafter_node){draft[j], (int16_t)(j - 1), det[j]};
        }
        accept_rng ar = {(uint64_t)rep, 100, ACCEPT_CORRECT};
        tree_rng tr = {(uint64_t)rep, 100, TREE_CORRECT};
        tree_view tv = {gamma, nodes, p, q, V};
        int k1 = accept_chain(o1, p, q, det, draft, gamma, V, false, &ar, fscratch);
        int k2 = tree_accept(o2, path, &tv, false, &tr, scratch);
        total++;
        same += k1 == k2 && !memcmp(o1, o2, sizeof(int32_t) * (size_t)(k1 + 1));
        for (int j = 0; j < k2; j++) CHECK(path[j] == j);
    }
    /* only u within float rounding of a decision boundary may differ */
    CHECKF(same >= total - total / 1000, "a chain through tree_accept matched accept_chain in %ld of %ld", same, total);
    fprintf(stderr, "chain: tree_accept == accept_chain in %ld of %ld\n", same, total);
}

/* Greedy: follow the child equal to the argmax; the law is one outcome. */
static double g_mass;
static int g_k;
static int32_t g_tok;
static void emit_greedy(void *ctx, const int16_t *path, int k, int32_t token, double prob) {
    (void)ctx, (void)path;
    g_mass += prob;
    g_k = k;
    g_tok = token;
}

static void test_greedy(void) {
    uint64_t rs = 5;
    enum { V = 8 };
    for (int rep = 0; rep < 3000; rep++) {
        int n = 1 + rep % 10;
        drafter_node nodes[10];
        float p[11 * V] = {0};
        int32_t top[11];
        for (int r = 0; r <= n; r++) {
            top[r] = (int32_t)(t_splitmix(&rs) % V);
            p[r * V + top[r]] = 1;
        }
        for (int i = 0; i < n; i++) {
            int pa = (int)(t_splitmix(&rs) % (uint64_t)(i + 1)) - 1;
            int32_t want = top[pa + 1];
            nodes[i] = (drafter_node){t_unif(&rs) < 0.6 ? want : (int32_t)(t_splitmix(&rs) % V), (int16_t)pa, rep % 2};
        }
        /* expected: walk the first child equal to the argmax */
        int cur = -1, k = 0;
        for (;;) {
            int next = -1;
            for (int c = cur + 1; c < n && next < 0; c++)
                if (nodes[c].parent == cur && nodes[c].token == top[cur + 1]) next = c;
            if (next < 0) break;
            cur = next, k++;
        }
        tree_view tv = {n, nodes, p, NULL, V};
        int32_t out[11];
        int16_t path[10];
        tree_rng tr = {(uint64_t)rep, 0, TREE_CORRECT};
        double scratch[2 * V];
        int kk = tree_accept(out, path, &tv, true, &tr, scratch);
        CHECKF(kk == k && out[k] == top[cur + 1], "greedy rep=%d: %d accepted (want %d)", rep, kk, k);
        g_mass = 0;
        CHECK(tree_accept_law(&tv, true, TREE_CORRECT, emit_greedy, NULL) == 0);
        CHECK(fabs(g_mass - 1) < 1e-12 && g_k == k && g_tok == top[cur + 1]);
    }
}

static void test_rows(void) {
    /* root - a - c
     *      \ b     (a, b siblings at depth 1; c at depth 2) */
    drafter_node nodes[3] = {{5, -1, false}, {6, -1, false}, {7, 0, true}};
    int32_t tok[4], pos[4];
    uint8_t mask[16];
    CHECK(tree_rows(tok, pos, mask, 9, 100, nodes, 3, 10) == 4);
    CHECK(tok[0] == 9 && tok[1] == 5 && tok[2] == 6 && tok[3] == 7);
    CHECK(pos[0] == 100 && pos[1] == 101 && pos[2] == 101 && pos[3] == 102);
    static const uint8_t want[16] = {1, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 0, 1, 1, 0, 1};
    CHECK(!memcmp(mask, want, 16));
    drafter_node bad[2] = {{1, 1, false}, {1, -1, false}};
    CHECK(tree_rows(tok, pos, mask, 9, 100, bad, 2, 10) == -1);
    /* a chain: consecutive positions, causal mask, contiguous path */
    drafter_node chain[3] = {{1, -1, false}, {2, 0, false}, {3, 1, false}};
    CHECK(tree_rows(tok, pos, mask, 9, 50, chain, 3, 10) == 4);
    for (int r = 0; r < 4; r++) {
        CHECK(pos[r] == 50 + r);
        for (int a = 0; a < 4; a++) CHECK(mask[r * 4 + a] == (a <= r));
    }
    int src[3];
    int16_t path[3] = {0, 1, 2}, path2[2] = {0, 2};
    CHECK(tree_path_rows(src, path, 3) && src[2] == 3);
    CHECK(!tree_path_rows(src, path2, 2) && src[1] == 3);
}

int main(void) {
    test_rows();
    test_exact();
    test_sampling();
    test_chain();
    test_greedy();
    TEST_DONE();
}
