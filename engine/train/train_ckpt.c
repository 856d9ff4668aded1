/* train_ckpt.c — checkpoint files (see train_ckpt.h). Layout: "SPDTCKP1",
 * the shape (9 int32, 2 float32, tied int32), seed u64, step i64, n_params
 * u64, then params, mom, vel (n_params float32 each), then an FNV-1a
 * checksum of everything before it. */
#include "engine/train/train_ckpt.h"
#include "engine/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char MAGIC[8] = {'S', 'P', 'D', 'T', 'C', 'K', 'P', '1'};

typedef struct {
    FILE *f;
    uint64_t h;
    int bad;
} io;

static void fnv(uint64_t *h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) *h = (*h ^ b[i]) * 0x100000001b3ull;
}
static void put(io *o, const void *p, size_t n) {
    fnv(&o->h, p, n);
    if (fwrite(p, 1, n, o->f) != n) o->bad = 1;
}
static void get(io *o, void *p, size_t n) {
    if (o->bad || fread(p, 1, n, o->f) != n) {
        o->bad = 1;
        memset(p, 0, n);
        return;
    }
    fnv(&o->h, p, n);
}

int train_ckpt_save(const char *path, const train_model *m, const train_state *st, uint64_t seed, char *err,
                    size_t errlen) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    io o = {fopen(tmp, "wb"), 0xcbf29ce484222325ull, 0};
    if (!o.f) return util_fail(err, errlen, "cannot write checkpoint %s", tmp);
    const train_cfg *c = &m->c;
    int32_t sh[10] = {c->V, c->D, c->L, c->H, c->Hkv, c->E, c->F, c->ctx, c->tied, 0};
    float fl[2] = {c->eps, c->rope_base};
    uint64_t np = m->n_params;
    int64_t step = st->step;
    put(&o, MAGIC, 8);
    put(&o, sh, sizeof sh);
    put(&o, fl, sizeof fl);
    put(&o, &seed, 8);
    put(&o, &step, 8);
    put(&o, &np, 8);
    put(&o, m->params, sizeof(float) * np);
    put(&o, st->mom, sizeof(float) * np);
    put(&o, st->vel, sizeof(float) * np);
    uint64_t h = o.h;
    put(&o, &h, 8);
    if (fclose(o.f) != 0 || o.bad) {
        unlink(tmp);
        return util_fail(err, errlen, "cannot write checkpoint %s (disk full?)", path);
    }
    if (rename(tmp, path) != 0) {
        unlink(tmp);
        return util_fail(err, errlen, "cannot rename checkpoint into %s", path);
    }
    return 0;
}

int train_ckpt_load(const char *path, train_model **mp, train_state *st, uint64_t *seed, char *err, size_t errlen) {
    *mp = NULL;
    memset(st, 0, sizeof(*st));
    io o = {fopen(path, "rb"), 0xcbf29ce484222325ull, 0};
    if (!o.f) return util_fail(err, errlen, "cannot open checkpoint %s", path);
    char mg[8];
    int32_t sh[10];
    float fl[2];
    uint64_t sd, np, h;
    int64_t step;
    get(&o, mg, 8);
    if (o.bad || memcmp(mg, MAGIC, 8)) {
        fclose(o.f);
        return util_fail(err, errlen, "%s is not a specd training checkpoint", path);
    }
    get(&o, sh, sizeof sh);
    get(&o, fl, sizeof fl);
    get(&o, &sd, 8);
    get(&o, &step, 8);
    get(&o, &np, 8);
    train_cfg c = {sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], sh[6], sh[7], fl[0], fl[1], sh[8] != 0};
    train_model *m = o.bad ? NULL : train_model_create(&c, 0, err, errlen);
    if (!m || m->n_params != np || train_state_init(st, m) != 0) {
        if (m && m->n_params != np) util_fail(err, errlen, "%s: corrupt checkpoint (parameter count)", path);
        else if (o.bad) util_fail(err, errlen, "%s: truncated checkpoint", path);
        train_model_destroy(m);
        fclose(o.f);
        return -1;
    }
    get(&o, m->params, sizeof(float) * np);
    get(&o, st->mom, sizeof(float) * np);
    get(&o, st->vel, sizeof(float) * np);
    uint64_t want = o.h;
    get(&o, &h, 8);
    fclose(o.f);
    if (o.bad || h != want) {
        train_model_destroy(m);
        train_state_free(st);
        return util_fail(err, errlen, "%s: %s checkpoint", path, o.bad ? "truncated" : "corrupt (checksum)");
    }
    st->step = step;
    if (seed) *seed = sd;
    *mp = m;
    return 0;
}
