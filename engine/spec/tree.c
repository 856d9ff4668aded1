/* tree.c — tree verify rows and the lossless multi-candidate acceptance rule
 * (see tree.h for the rule and its proof sketch). The sampling walk and the
 * exact-law walk are one function, so the enumeration test checks the code
 * that runs, not a copy of it. */
#include "engine/spec/tree.h"

#include "engine/sample/rng.h"
#include "engine/sample/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

bool tree_validate(const drafter_node *nodes, int n, int V, int *depth) {
    if (n < 0 || n > DRAFTER_MAX_NODES) return false;
    for (int i = 0; i < n; i++) {
        int pa = nodes[i].parent;
        if (pa < -1 || pa >= i || nodes[i].token < 0 || nodes[i].token >= V) return false;
        if (depth) depth[i] = pa < 0 ? 1 : depth[pa] + 1;
    }
    return true;
}

int tree_rows(int32_t *tokens, int32_t *pos, uint8_t *mask, int32_t root_token, int root_pos,
              const drafter_node *nodes, int n, int V) {
    int depth[DRAFTER_MAX_NODES];
    if (!tree_validate(nodes, n, V, depth)) return -1;
    int R = n + 1;
    memset(mask, 0, (size_t)R * (size_t)R);
    tokens[0] = root_token;
    pos[0] = root_pos;
    mask[0] = 1;
    for (int i = 0; i < n; i++) {
        int r = 1 + i;
        tokens[r] = nodes[i].token;
        pos[r] = root_pos + depth[i];
        mask[(size_t)r * R] = 1; /* the root is every node's ancestor */
        for (int a = i; a >= 0; a = nodes[a].parent) mask[(size_t)r * R + 1 + a] = 1;
    }
    return R;
}

bool tree_path_rows(int *src, const int16_t *path, int k) {
    bool contiguous = true;
    for (int j = 0; j < k; j++) {
        src[j] = 1 + path[j];
        contiguous &= path[j] == j;
    }
    return contiguous;
}

/* ---- the walk ---------------------------------------------------------- */

typedef struct {
    const tree_view *t;
    tree_variant variant;
    bool law, greedy;
    uint64_t seed, pos0;
    double *res, *qe;        /* law: (depth + 1, V) each, one row per depth; sampling: (V) each */
    int16_t path[DRAFTER_MAX_NODES + 1];
    int k;
    tree_emit_fn emit;
    void *ctx;
    int32_t *out;            /* sampling: path tokens then the last token */
} walk;

/* q_k of sibling c as doubles into qe, or NULL for a point mass. earlier:
 * the ns siblings tried before c. */
static const double *sibling_q(walk *w, double *qe, int c, const int *earlier, int ns) {
    const tree_view *t = w->t;
    if (t->nodes[c].deterministic) return NULL;
    const float *q = t->q + (size_t)c * (size_t)t->V;
    /* the drafter drew in proportion to the float row (inverse CDF on u·total),
     * so the law it used is the row over its own sum, not over 1 ± rounding */
    double m = 0;
    for (int i = 0; i < t->V; i++) m += q[i];
    for (int i = 0; i < t->V; i++) qe[i] = m > 0 ? q[i] / m : 0;
    if (w->variant == TREE_BROKEN_REMOVE_REJECTED && ns > 0) {
        for (int j = 0; j < ns; j++) qe[t->nodes[earlier[j]].token] = 0;
        m = 0;
        for (int i = 0; i < t->V; i++) m += qe[i];
        if (m > 0)
            for (int i = 0; i < t->V; i++) qe[i] /= m;
    }
    return qe;
}

/* r ← normalize(max(0, r − q)); a point mass (q NULL): r without tok. When
 * nothing is left (the rejection had probability 0) r is kept. */
static void reject_update(double *r, const double *q, int32_t tok, int V) {
    double m = 0;
    if (!q) {
        for (int i = 0; i < V; i++) m += i == tok ? 0 : r[i];
        if (!(m > 1e-300)) return;
        r[tok] = 0;
        for (int i = 0; i < V; i++) r[i] /= m;
        return;
    }
    for (int i = 0; i < V; i++) {
        double d = r[i] - q[i];
        m += d > 0 ? d : 0;
    }
    if (!(m > 1e-300)) return;
    for (int i = 0; i < V; i++) {
        double d = r[i] - q[i];
        r[i] = d > 0 ? d / m : 0;
    }
}

/* Inverse CDF over r in index order (as sampler_sample); the last token with
 * weight when rounding leaves u past the end. */
static int32_t draw_from(const double *r, int V, double u) {
    double tot = 0;
    for (int i = 0; i < V; i++) tot += r[i];
    double x = u * tot, c = 0;
    int32_t last = 0;
    for (int i = 0; i < V; i++) {
        if (!(r[i] > 0)) continue;
        c += r[i];
        last = i;
        if (c > x) return i;
    }
    return last;
}

static void walk_node(walk *w, int cur, int depth, double weight) {
    const tree_view *t = w->t;
    const int V = t->V;
    const float *p = t->p + (size_t)(cur + 1) * (size_t)V;
    double *res = w->law ? w->res + (size_t)depth * V : w->res;
    double *qe = w->law ? w->qe + (size_t)depth * V : w->qe;
    uint64_t pos = w->pos0 + (uint64_t)depth; /* the position of the token decided here */
    double pm = 0; /* p over its own sum, as the target's plain sampler draws */
    for (int i = 0; i < V; i++) pm += p[i];
    for (int i = 0; i < V; i++) res[i] = pm > 0 ? p[i] / pm : 0;
    int earlier[DRAFTER_MAX_NODES], ns = 0;
    for (int c = cur + 1; c < t->n_nodes; c++) {
        if (t->nodes[c].parent != cur) continue;
        int32_t tok = t->nodes[c].token;
        const double *q = w->greedy ? NULL : sibling_q(w, qe, c, earlier, ns);
        double a;
        if (w->greedy) a = p[tok] > 0.5f ? 1.0 : 0.0;
        else if (!q) a = res[tok];
        else a = q[tok] > 0 ? fmin(1.0, res[tok] / q[tok]) : 1.0;
        if (w->law) {
            if (a > 0) {
                w->path[w->k++] = (int16_t)c;
                walk_node(w, c, depth + 1, weight * a);
                w->k--;
            }
            weight *= 1.0 - a;
            if (!(weight > 0)) return;
        } else {
            bool ok;
            if (w->greedy) ok = a > 0.5;
            else {
                double u = rng_uniform(w->seed, pos, RNG_ACCEPT, (uint32_t)ns);
                ok = q ? u * q[tok] < res[tok] : u < res[tok];
            }
            if (ok) {
                w->path[w->k] = (int16_t)c;
                w->out[w->k++] = tok;
                walk_node(w, c, depth + 1, 1.0);
                return;
            }
        }
        if (!w->greedy && w->variant != TREE_BROKEN_NO_RESIDUAL) reject_update(res, q, tok, V);
        earlier[ns++] = c;
    }
    /* every child rejected (correction from r) or a leaf (bonus from p = r) */
    if (w->greedy) {
        int32_t top = (int32_t)sampler_sample(p, V, 0.0);
        if (w->law) w->emit(w->ctx, w->path, w->k, top, weight);
        else w->out[w->k] = top;
        return;
    }
    if (w->law) {
        for (int i = 0; i < V; i++)
            if (res[i] > 0) w->emit(w->ctx, w->path, w->k, (int32_t)i, weight * res[i]);
        return;
    }
    double u = rng_uniform(w->seed, pos, ns ? RNG_RESIDUAL : RNG_BONUS, 0);
    w->out[w->k] = draw_from(res, V, u);
}

int tree_accept(int32_t *out, int16_t *path, const tree_view *t, bool greedy, const tree_rng *rng, double *scratch) {
    walk w = {.t = t, .variant = rng->variant, .greedy = greedy, .seed = rng->seed, .pos0 = rng->pos0,
              .res = scratch, .qe = scratch + t->V, .out = out};
    walk_node(&w, -1, 0, 1.0);
    memcpy(path, w.path, sizeof(int16_t) * (size_t)w.k);
    return w.k;
}

int tree_accept_law(const tree_view *t, bool greedy, tree_variant variant, tree_emit_fn emit, void *ctx) {
    if (!tree_validate(t->nodes, t->n_nodes, t->V, NULL)) return -1;
    size_t n = (size_t)(t->n_nodes + 1) * (size_t)t->V;
    double *buf = malloc(sizeof(double) * 2 * n);
    if (!buf) return -1;
    walk w = {.t = t, .variant = variant, .law = true, .greedy = greedy, .res = buf, .qe = buf + n,
              .emit = emit, .ctx = ctx};
    walk_node(&w, -1, 0, 1.0);
    free(buf);
    return 0;
}
