/* test_gguf.c — GGUF writer->reader round trip of every value and several tensor
 * types, hand-built corrupt/hostile files (each must be rejected with a relevant
 * message), truncation at many offsets, random mutations, and the real models. */
#include "engine/gguf/gguf.h"
#include "tests/testutil.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

static char g_tmpdir[256];

static void tmp_path(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", g_tmpdir, name);
}

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *p = malloc(n > 0 ? (size_t)n : 1);
    if (fread(p, 1, (size_t)n, fp) != (size_t)n) { free(p); fclose(fp); return NULL; }
    fclose(fp);
    *len = (size_t)n;
    return p;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return g_rng;
}

/* With GGUF_CORPUS_OUT=DIR set, the small files built here are also saved to
 * DIR: that is how tests/gguf/corpus (the fuzzer's seeds) was made. */
static void save_corpus(const char *name, const void *p, size_t n)
{
    const char *dir = getenv("GGUF_CORPUS_OUT");
    if (!dir) return;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(p, 1, n, fp) != n) fprintf(stderr, "note: cannot write %s\n", path);
    if (fp) fclose(fp);
}

/* ---- type facts ------------------------------------------------------- */

static void test_type_facts(void)
{
    static const struct { int t; const char *name; uint32_t bs, ts; } k[] = {
        {GGML_TYPE_F32, "f32", 1, 4}, {GGML_TYPE_F16, "f16", 1, 2}, {GGML_TYPE_BF16, "bf16", 1, 2},
        {GGML_TYPE_Q4_0, "q4_0", 32, 18}, {GGML_TYPE_Q4_1, "q4_1", 32, 20}, {GGML_TYPE_Q5_0, "q5_0", 32, 22},
        {GGML_TYPE_Q5_1, "q5_1", 32, 24}, {GGML_TYPE_Q8_0, "q8_0", 32, 34}, {GGML_TYPE_Q8_1, "q8_1", 32, 36},
        {GGML_TYPE_Q2_K, "q2_k", 256, 84}, {GGML_TYPE_Q3_K, "q3_k", 256, 110}, {GGML_TYPE_Q4_K, "q4_k", 256, 144},
        {GGML_TYPE_Q5_K, "q5_k", 256, 176}, {GGML_TYPE_Q6_K, "q6_k", 256, 210}, {GGML_TYPE_Q8_K, "q8_k", 256, 292},
        {GGML_TYPE_I8, "i8", 1, 1}, {GGML_TYPE_I16, "i16", 1, 2}, {GGML_TYPE_I32, "i32", 1, 4},
        {GGML_TYPE_I64, "i64", 1, 8}, {GGML_TYPE_F64, "f64", 1, 8},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        CHECKF(ggml_blck_size(k[i].t) == k[i].bs, "%s block size", k[i].name);
        CHECKF(ggml_type_size(k[i].t) == k[i].ts, "%s type size", k[i].name);
        CHECKF(ggml_type_from_name(k[i].name) == k[i].t, "from_name(%s)", k[i].name);
        char up[16];
        size_t n = strlen(k[i].name);
        for (size_t j = 0; j <= n; j++) up[j] = (char)(k[i].name[j] >= 'a' && k[i].name[j] <= 'z' ? k[i].name[j] - 32 : k[i].name[j]);
        CHECKF(ggml_type_from_name(up) == k[i].t, "from_name(%s)", up);
        CHECK(ggml_type_name(k[i].t) != NULL);
        CHECK(ggml_row_size(k[i].t, (uint64_t)k[i].bs * 3) == (uint64_t)k[i].ts * 3);
    }
    CHECK(ggml_type_from_name("Q8_0") == GGML_TYPE_Q8_0);
    CHECK(ggml_type_from_name("q4_K") == GGML_TYPE_Q4_K);
    CHECK(ggml_type_from_name("q4") == -1);
    CHECK(ggml_type_from_name("") == -1);
    CHECK(ggml_type_from_name(NULL) == -1);
    CHECK(ggml_type_size(4) == 0 && ggml_type_name(4) == NULL); /* removed Q4_2 */
    CHECK(ggml_type_size(-1) == 0 && ggml_type_size(GGML_TYPE_COUNT) == 0 && ggml_type_size(1000) == 0);
    CHECK(ggml_row_size(GGML_TYPE_Q8_0, 33) == 0);
    CHECK(ggml_row_size(GGML_TYPE_F32, UINT64_MAX / 2) == 0); /* overflow */
    CHECK(ggml_row_size(99, 32) == 0);
    CHECK(strcmp(gguf_vtype_name(GGUF_TYPE_STRING), "string") == 0);
    CHECK(gguf_vtype_name(GGUF_TYPE_COUNT) == NULL && gguf_vtype_name(-1) == NULL);
}

/* ---- round trip ------------------------------------------------------- */

typedef struct {
    const char *name;
    ggml_type type;
    uint32_t n_dims;
    uint64_t ne[4];
    uint8_t *data;
    uint64_t nbytes;
} tspec;

static tspec g_t[] = {
    {"t.f32.1d", GGML_TYPE_F32, 1, {7, 1, 1, 1}, 0, 0},
    {"t.f16.2d", GGML_TYPE_F16, 2, {5, 3, 1, 1}, 0, 0},
    {"t.bf16.3d", GGML_TYPE_BF16, 3, {4, 3, 2, 1}, 0, 0},
    {"t.q8_0.2d", GGML_TYPE_Q8_0, 2, {64, 3, 1, 1}, 0, 0},
    {"t.i32.4d", GGML_TYPE_I32, 4, {2, 3, 2, 2}, 0, 0},
    {"t.q4_k.2d", GGML_TYPE_Q4_K, 2, {256, 2, 1, 1}, 0, 0},
    {"t.i8.1d", GGML_TYPE_I8, 1, {1, 1, 1, 1}, 0, 0},
    {"t.f32.4d", GGML_TYPE_F32, 4, {3, 1, 2, 5}, 0, 0},
    {"", GGML_TYPE_Q6_K, 1, {256, 1, 1, 1}, 0, 0}, /* empty name is legal */
};
#define N_T (sizeof g_t / sizeof g_t[0])

static const uint8_t a_u8[] = {0, 1, 255};
static const int8_t a_i8[] = {-128, 0, 127};
static const uint16_t a_u16[] = {0, 65535, 1234};
static const int16_t a_i16[] = {-32768, 32767};
static const uint32_t a_u32[] = {0, UINT32_MAX, 42, 7};
static const int32_t a_i32[] = {INT32_MIN, -1, INT32_MAX};
static const float a_f32[] = {1.5f, -0.0f, 3.25e-8f, INFINITY};
static const uint8_t a_bool[] = {1, 0, 1, 1, 0};
static const uint64_t a_u64[] = {UINT64_MAX, 0, 1ull << 63};
static const int64_t a_i64[] = {INT64_MIN, INT64_MAX, -5};
static const double a_f64[] = {3.141592653589793, -1e300, 0.0};
static const char *const a_str[] = {"hello", "", "wörld ☃", "a\nb"};
static const char str_nul[] = {'x', 0, 'y'}; /* embedded NUL, length 3 */

static void fill_writer(gguf_writer *w)
{
    gguf_writer_set_u8(w, "s.u8", 200);
    gguf_writer_set_i8(w, "s.i8", -100);
    gguf_writer_set_u16(w, "s.u16", 60000);
    gguf_writer_set_i16(w, "s.i16", -30000);
    gguf_writer_set_u32(w, "s.u32", 4000000000u);
    gguf_writer_set_i32(w, "s.i32", -2000000000);
    gguf_writer_set_f32(w, "s.f32", 0.1f);
    gguf_writer_set_bool(w, "s.bool.t", true);
    gguf_writer_set_bool(w, "s.bool.f", false);
    gguf_writer_set_str(w, "s.str", "hello gguf");
    gguf_writer_set_str(w, "s.str.empty", "");
    gguf_writer_set_strn(w, "s.str.nul", str_nul, sizeof str_nul);
    gguf_writer_set_u64(w, "s.u64", UINT64_MAX);
    gguf_writer_set_i64(w, "s.i64", INT64_MIN);
    gguf_writer_set_f64(w, "s.f64", -2.5e-300);
    gguf_writer_set_arr(w, "a.u8", GGUF_TYPE_UINT8, a_u8, 3);
    gguf_writer_set_arr(w, "a.i8", GGUF_TYPE_INT8, a_i8, 3);
    gguf_writer_set_arr(w, "a.u16", GGUF_TYPE_UINT16, a_u16, 3);
    gguf_writer_set_arr(w, "a.i16", GGUF_TYPE_INT16, a_i16, 2);
    gguf_writer_set_arr(w, "a.u32", GGUF_TYPE_UINT32, a_u32, 4);
    gguf_writer_set_arr(w, "a.i32", GGUF_TYPE_INT32, a_i32, 3);
    gguf_writer_set_arr(w, "a.f32", GGUF_TYPE_FLOAT32, a_f32, 4);
    gguf_writer_set_arr(w, "a.bool", GGUF_TYPE_BOOL, a_bool, 5);
    gguf_writer_set_arr(w, "a.u64", GGUF_TYPE_UINT64, a_u64, 3);
    gguf_writer_set_arr(w, "a.i64", GGUF_TYPE_INT64, a_i64, 3);
    gguf_writer_set_arr(w, "a.f64", GGUF_TYPE_FLOAT64, a_f64, 3);
    gguf_writer_set_arr_str(w, "a.str", a_str, NULL, 4);
    const char *with_nul[] = {str_nul, "zz"};
    const size_t lens[] = {sizeof str_nul, 2};
    gguf_writer_set_arr_str(w, "a.str.lens", with_nul, lens, 2);
    gguf_writer_set_arr(w, "a.empty.u32", GGUF_TYPE_UINT32, NULL, 0);
    gguf_writer_set_arr(w, "a.empty.f64", GGUF_TYPE_FLOAT64, NULL, 0);
    gguf_writer_set_arr_str(w, "a.empty.str", NULL, NULL, 0);
    gguf_writer_set_u32(w, "s.replaced", 1);
    gguf_writer_set_u32(w, "s.replaced", 2); /* keeps position, new value */
    gguf_writer_set_str(w, "", "empty key");
}

/* Expected order of keys in the written file. */
static const char *const g_keys[] = {
    "s.u8", "s.i8", "s.u16", "s.i16", "s.u32", "s.i32", "s.f32", "s.bool.t", "s.bool.f",
    "s.str", "s.str.empty", "s.str.nul", "s.u64", "s.i64", "s.f64",
    "a.u8", "a.i8", "a.u16", "a.i16", "a.u32", "a.i32", "a.f32", "a.bool", "a.u64", "a.i64", "a.f64",
    "a.str", "a.str.lens", "a.empty.u32", "a.empty.f64", "a.empty.str", "s.replaced", "",
};
#define N_KEYS (sizeof g_keys / sizeof g_keys[0])

static void check_arr(const gguf_file *f, const char *key, gguf_vtype t, const void *want, uint64_t n, size_t es)
{
    const gguf_kv *kv = gguf_get_arr(f, key, t);
    CHECKF(kv != NULL, "array %s", key);
    if (!kv) return;
    CHECKF(kv->arr_n == n, "%s: n %" PRIu64 " want %" PRIu64, key, kv->arr_n, n);
    if (kv->arr_n == n && n) CHECKF(memcmp(kv->arr_data, want, n * es) == 0, "%s bytes", key);
    CHECKF(gguf_get_arr(f, key, t == GGUF_TYPE_UINT8 ? GGUF_TYPE_INT8 : GGUF_TYPE_UINT8) == NULL, "%s wrong elem type", key);
}

static void check_contents(const gguf_file *f)
{
    CHECK(f->version == 3);
    CHECK(f->alignment == 32);
    CHECK(f->data_offset % 32 == 0);
    CHECKF(f->n_kv == N_KEYS, "n_kv %" PRIu64, f->n_kv);
    for (size_t i = 0; i < N_KEYS && i < f->n_kv; i++)
        CHECKF(gguf_str_eq(f->kv[i].key, g_keys[i]), "key #%zu order (%s)", i, g_keys[i]);

    uint64_t u; int64_t s; float fl; bool b; gguf_str st; char buf[64];
    const gguf_kv *kv;
    kv = gguf_find(f, "s.u8"); CHECK(kv && kv->type == GGUF_TYPE_UINT8 && kv->v.u == 200);
    kv = gguf_find(f, "s.i8"); CHECK(kv && kv->type == GGUF_TYPE_INT8 && kv->v.i == -100);
    kv = gguf_find(f, "s.u16"); CHECK(kv && kv->type == GGUF_TYPE_UINT16 && kv->v.u == 60000);
    kv = gguf_find(f, "s.i16"); CHECK(kv && kv->type == GGUF_TYPE_INT16 && kv->v.i == -30000);
    kv = gguf_find(f, "s.u32"); CHECK(kv && kv->type == GGUF_TYPE_UINT32 && kv->v.u == 4000000000u);
    kv = gguf_find(f, "s.i32"); CHECK(kv && kv->type == GGUF_TYPE_INT32 && kv->v.i == -2000000000);
    kv = gguf_find(f, "s.f32"); CHECK(kv && kv->type == GGUF_TYPE_FLOAT32 && (float)kv->v.f == 0.1f);
    kv = gguf_find(f, "s.bool.t"); CHECK(kv && kv->type == GGUF_TYPE_BOOL && kv->v.b);
    kv = gguf_find(f, "s.bool.f"); CHECK(kv && kv->type == GGUF_TYPE_BOOL && !kv->v.b);
    kv = gguf_find(f, "s.u64"); CHECK(kv && kv->type == GGUF_TYPE_UINT64 && kv->v.u == UINT64_MAX);
    kv = gguf_find(f, "s.i64"); CHECK(kv && kv->type == GGUF_TYPE_INT64 && kv->v.i == INT64_MIN);
    kv = gguf_find(f, "s.f64"); CHECK(kv && kv->type == GGUF_TYPE_FLOAT64 && kv->v.f == -2.5e-300);
    kv = gguf_find(f, "s.replaced"); CHECK(kv && kv->v.u == 2);
    kv = gguf_find(f, ""); CHECK(kv && kv->type == GGUF_TYPE_STRING && gguf_str_eq(kv->v.s, "empty key"));
    CHECK(gguf_find(f, "s.missing") == NULL);
    CHECK(gguf_find(f, "s.u") == NULL);

    CHECK(gguf_get_str(f, "s.str", &st) && gguf_str_eq(st, "hello gguf"));
    CHECK(gguf_get_str(f, "s.str.empty", &st) && st.len == 0);
    CHECK(gguf_get_str(f, "s.str.nul", &st) && st.len == 3 && memcmp(st.ptr, str_nul, 3) == 0);
    CHECK(gguf_get_cstr(f, "s.str", buf, sizeof buf) && strcmp(buf, "hello gguf") == 0);
    CHECK(gguf_get_cstr(f, "s.str", buf, 6) && strcmp(buf, "hello") == 0);
    CHECK(!gguf_get_cstr(f, "s.u8", buf, sizeof buf));
    CHECK(!gguf_get_str(f, "s.u8", &st));

    /* integer getters convert across widths/signedness when the value fits */
    CHECK(gguf_get_u64(f, "s.u8", &u) && u == 200);
    uint32_t u32;
    CHECK(gguf_get_u32(f, "s.u16", &u32) && u32 == 60000);
    CHECK(gguf_get_u32(f, "s.u32", &u32) && u32 == 4000000000u);
    CHECK(!gguf_get_u32(f, "s.u64", &u32));           /* out of range */
    CHECK(!gguf_get_u32(f, "s.i8", &u32));            /* negative */
    CHECK(!gguf_get_u64(f, "s.i64", &u));
    CHECK(gguf_get_i64(f, "s.i8", &s) && s == -100);
    CHECK(gguf_get_i64(f, "s.u32", &s) && s == 4000000000ll);
    CHECK(!gguf_get_i64(f, "s.u64", &s));             /* > INT64_MAX */
    CHECK(gguf_get_f32(f, "s.f32", &fl) && fl == 0.1f);
    CHECK(gguf_get_f32(f, "s.i16", &fl) && fl == -30000.0f);
    CHECK(gguf_get_f32(f, "s.f64", &fl));
    CHECK(!gguf_get_f32(f, "s.str", &fl));
    CHECK(gguf_get_bool(f, "s.bool.t", &b) && b);
    CHECK(!gguf_get_bool(f, "s.u8", &b));
    CHECK(!gguf_get_u64(f, "a.u8", &u));              /* arrays are not scalars */
    CHECK(!gguf_get_u64(f, "nope", &u));

    check_arr(f, "a.u8", GGUF_TYPE_UINT8, a_u8, 3, 1);
    check_arr(f, "a.i8", GGUF_TYPE_INT8, a_i8, 3, 1);
    check_arr(f, "a.u16", GGUF_TYPE_UINT16, a_u16, 3, 2);
    check_arr(f, "a.i16", GGUF_TYPE_INT16, a_i16, 2, 2);
    check_arr(f, "a.u32", GGUF_TYPE_UINT32, a_u32, 4, 4);
    check_arr(f, "a.i32", GGUF_TYPE_INT32, a_i32, 3, 4);
    check_arr(f, "a.f32", GGUF_TYPE_FLOAT32, a_f32, 4, 4);
    check_arr(f, "a.bool", GGUF_TYPE_BOOL, a_bool, 5, 1);
    check_arr(f, "a.u64", GGUF_TYPE_UINT64, a_u64, 3, 8);
    check_arr(f, "a.i64", GGUF_TYPE_INT64, a_i64, 3, 8);
    check_arr(f, "a.f64", GGUF_TYPE_FLOAT64, a_f64, 3, 8);
    check_arr(f, "a.empty.u32", GGUF_TYPE_UINT32, NULL, 0, 4);
    check_arr(f, "a.empty.f64", GGUF_TYPE_FLOAT64, NULL, 0, 8);
    kv = gguf_get_arr(f, "a.str", GGUF_TYPE_STRING);
    CHECK(kv && kv->arr_n == 4 && kv->arr_str);
    for (uint64_t i = 0; kv && kv->arr_str && i < 4; i++)
        CHECKF(gguf_str_eq(kv->arr_str[i], a_str[i]), "a.str[%" PRIu64 "]", i);
    kv = gguf_get_arr(f, "a.str.lens", GGUF_TYPE_STRING);
    CHECK(kv && kv->arr_n == 2 && kv->arr_str[0].len == 3 && memcmp(kv->arr_str[0].ptr, str_nul, 3) == 0 &&
          gguf_str_eq(kv->arr_str[1], "zz"));
    kv = gguf_get_arr(f, "a.empty.str", GGUF_TYPE_STRING);
    CHECK(kv && kv->arr_n == 0);

    CHECKF(f->n_tensors == N_T, "n_tensors %" PRIu64, f->n_tensors);
    for (size_t i = 0; i < N_T && i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        CHECKF(gguf_str_eq(t->name, g_t[i].name), "tensor #%zu name", i);
        CHECKF(gguf_find_tensor(f, g_t[i].name) == t, "find_tensor(%s)", g_t[i].name);
        CHECKF(t->type == g_t[i].type && t->n_dims == g_t[i].n_dims, "%s type/dims", g_t[i].name);
        CHECKF(memcmp(t->ne, g_t[i].ne, sizeof t->ne) == 0, "%s shape", g_t[i].name);
        CHECKF(t->nbytes == g_t[i].nbytes, "%s nbytes %" PRIu64 " want %" PRIu64, g_t[i].name, t->nbytes, g_t[i].nbytes);
        CHECKF(t->offset % 32 == 0 && (size_t)((const uint8_t *)t->data - f->base) % 32 == 0, "%s aligned", g_t[i].name);
        CHECKF(t->nbytes == g_t[i].nbytes && memcmp(t->data, g_t[i].data, t->nbytes) == 0, "%s bytes", g_t[i].name);
    }
    CHECK(gguf_find_tensor(f, "t.nope") == NULL);
}

static void make_tensors(void)
{
    for (size_t i = 0; i < N_T; i++) {
        uint64_t nb = ggml_row_size(g_t[i].type, g_t[i].ne[0]) * g_t[i].ne[1] * g_t[i].ne[2] * g_t[i].ne[3];
        g_t[i].nbytes = nb;
        g_t[i].data = malloc(nb);
        for (uint64_t j = 0; j < nb; j++) g_t[i].data[j] = (uint8_t)rnd();
    }
}

static volatile unsigned g_sink;

/* Walks every byte a parsed file points at (ASan checks the ranges). */
static unsigned walk(const gguf_file *f)
{
    unsigned acc = 0;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        for (uint64_t j = 0; j < kv->key.len; j++) acc += (uint8_t)kv->key.ptr[j];
        if (kv->type == GGUF_TYPE_STRING)
            for (uint64_t j = 0; j < kv->v.s.len; j++) acc += (uint8_t)kv->v.s.ptr[j];
        if (kv->type == GGUF_TYPE_ARRAY && kv->arr_type == GGUF_TYPE_STRING)
            for (uint64_t j = 0; j < kv->arr_n; j++)
                for (uint64_t c = 0; c < kv->arr_str[j].len; c++) acc += (uint8_t)kv->arr_str[j].ptr[c];
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const uint8_t *d = f->tensors[i].data;
        for (uint64_t j = 0; j < f->tensors[i].nbytes; j++) acc += d[j];
    }
    return acc;
}

static bool open_copy(const uint8_t *p, size_t n, char *err, size_t errlen);

static void test_round_trip(void)
{
    char path[512], path2[512], err[512];
    tmp_path(path, sizeof path, "rt.gguf");
    tmp_path(path2, sizeof path2, "rt2.gguf");
    gguf_writer *w = gguf_writer_create();
    fill_writer(w);
    for (size_t i = 0; i < N_T; i++)
        CHECKF(gguf_writer_add_tensor(w, g_t[i].name, g_t[i].type, g_t[i].n_dims, g_t[i].ne, g_t[i].data),
               "add_tensor %s", g_t[i].name);
    /* bad tensors are refused and leave the writer unchanged */
    uint64_t ne_ok[4] = {32, 2, 1, 1}, ne0[4] = {0, 1, 1, 1}, ne33[4] = {33, 1, 1, 1};
    uint64_t ne_big[4] = {1ull << 40, 1ull << 40, 1, 1};
    CHECK(!gguf_writer_add_tensor(w, "bad", GGML_TYPE_F32, 0, ne_ok, NULL));
    CHECK(!gguf_writer_add_tensor(w, "bad", GGML_TYPE_F32, 5, ne_ok, NULL));
    CHECK(!gguf_writer_add_tensor(w, "bad", GGML_TYPE_F32, 1, ne0, NULL));
    CHECK(!gguf_writer_add_tensor(w, "bad", GGML_TYPE_Q8_0, 1, ne33, NULL));
    CHECK(!gguf_writer_add_tensor(w, "bad", (ggml_type)4, 1, ne_ok, NULL));
    CHECK(!gguf_writer_add_tensor(w, "bad", GGML_TYPE_F32, 2, ne_big, NULL));
    CHECK(!gguf_writer_add_tensor(w, g_t[0].name, GGML_TYPE_F32, 1, ne_ok, NULL)); /* duplicate */
    CHECKF(gguf_writer_write(w, path, err, sizeof err) == 0, "write: %s", err);
    gguf_writer_destroy(w);
    gguf_writer_destroy(NULL);

    engine_status st = ENGINE_ERR_BACKEND;
    gguf_file *f = gguf_open(path, &st, err, sizeof err);
    CHECKF(f != NULL && st == ENGINE_OK, "open round trip: %s", err);
    if (!f) return;
    CHECK(f->mapped);
    check_contents(f);

    /* same bytes through gguf_open_mem */
    size_t len = 0;
    uint8_t *buf = read_all(path, &len);
    CHECK(buf && len == f->size);
    if (buf) save_corpus("roundtrip.gguf", buf, len);
    gguf_file *m = gguf_open_mem(buf, len, NULL, err, sizeof err);
    CHECKF(m != NULL, "open_mem: %s", err);
    if (m) { CHECK(!m->mapped); check_contents(m); gguf_close(m); }

    /* every truncation of the header, and a sample in the data, is rejected */
    uint64_t need = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (f->data_offset + f->tensors[i].offset + f->tensors[i].nbytes > need)
            need = f->data_offset + f->tensors[i].offset + f->tensors[i].nbytes;
    int accepted = 0, silent = 0;
    for (size_t n = 0; buf && n < need; n += (n < f->data_offset + 64 ? 1 : 97)) {
        err[0] = 0;
        if (open_copy(buf, n, err, sizeof err)) accepted++;
        else if (!err[0]) silent++;
    }
    CHECKF(accepted == 0 && silent == 0, "round-trip truncations: %d accepted, %d silent", accepted, silent);

    /* version 2 layout is identical */
    buf[4] = 2;
    m = gguf_open_mem(buf, len, NULL, err, sizeof err);
    CHECKF(m && m->version == 2, "v2: %s", err);
    gguf_close(m);
    free(buf);

    /* copy_kv with a skip prefix, tensors copied from the mapping */
    w = gguf_writer_create();
    const char *const skip[] = {"a.str", "s.bool", NULL};
    gguf_writer_copy_kv(w, f, skip);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        CHECK(gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data));
    }
    CHECKF(gguf_writer_write(w, path2, err, sizeof err) == 0, "write copy: %s", err);
    gguf_writer_destroy(w);
    gguf_file *g = gguf_open(path2, NULL, err, sizeof err);
    CHECKF(g != NULL, "open copy: %s", err);
    if (g) {
        CHECK(g->n_kv == f->n_kv - 4);
        CHECK(gguf_find(g, "a.str") == NULL && gguf_find(g, "a.str.lens") == NULL && gguf_find(g, "s.bool.t") == NULL);
        for (uint64_t i = 0; i < f->n_kv; i++) {
            const gguf_kv *a = &f->kv[i];
            char key[64];
            snprintf(key, sizeof key, "%.*s", (int)a->key.len, a->key.ptr);
            const gguf_kv *b = gguf_find(g, key);
            if (!b) continue;
            CHECKF(a->type == b->type && a->arr_type == b->arr_type && a->arr_n == b->arr_n, "copy %s", key);
            if (a->type == GGUF_TYPE_STRING) CHECK(a->v.s.len == b->v.s.len && memcmp(a->v.s.ptr, b->v.s.ptr, a->v.s.len) == 0);
            else if (a->type != GGUF_TYPE_ARRAY) CHECKF(a->v.u == b->v.u, "copy %s value", key);
        }
        CHECK(g->n_tensors == f->n_tensors);
        for (uint64_t i = 0; i < g->n_tensors && i < f->n_tensors; i++)
            CHECK(g->tensors[i].nbytes == f->tensors[i].nbytes &&
                  memcmp(g->tensors[i].data, f->tensors[i].data, f->tensors[i].nbytes) == 0);
        gguf_close(g);
    }
    gguf_close(f);
    gguf_close(NULL);

    /* a non-default alignment is honoured by writer and reader */
    w = gguf_writer_create();
    gguf_writer_set_u32(w, "general.alignment", 256);
    uint64_t ne[1] = {3};
    float v[3] = {1, 2, 3};
    CHECK(gguf_writer_add_tensor(w, "x", GGML_TYPE_F32, 1, ne, v));
    CHECK(gguf_writer_add_tensor(w, "y", GGML_TYPE_F32, 1, ne, v));
    CHECKF(gguf_writer_write(w, path2, err, sizeof err) == 0, "write aligned: %s", err);
    g = gguf_open(path2, NULL, err, sizeof err);
    CHECKF(g && g->alignment == 256 && g->data_offset % 256 == 0 && g->tensors[1].offset == 256 &&
           memcmp(g->tensors[1].data, v, sizeof v) == 0, "alignment 256: %s", err);
    gguf_close(g);
    gguf_writer_set_u32(w, "general.alignment", 48);
    CHECK(gguf_writer_write(w, path2, err, sizeof err) != 0 && strstr(err, "alignment"));
    gguf_writer_destroy(w);

    /* an empty file (no kv, no tensors) is valid */
    w = gguf_writer_create();
    CHECKF(gguf_writer_write(w, path2, err, sizeof err) == 0, "write empty: %s", err);
    gguf_writer_destroy(w);
    g = gguf_open(path2, NULL, err, sizeof err);
    CHECKF(g && g->n_kv == 0 && g->n_tensors == 0, "open empty: %s", err);
    gguf_close(g);

    w = gguf_writer_create();
    err[0] = 0;
    CHECK(gguf_writer_write(w, "/nonexistent-dir/x.gguf", err, sizeof err) != 0 && strstr(err, "nonexistent-dir"));
    gguf_writer_destroy(w);
}

/* ---- hand-built files -------------------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} buf;

static size_t put(buf *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    size_t at = b->n;
    memcpy(b->p + b->n, p, n);
    b->n += n;
    return at;
}
static size_t put_u32(buf *b, uint32_t v) { return put(b, &v, 4); }
static size_t put_u64(buf *b, uint64_t v) { return put(b, &v, 8); }
static size_t put_str(buf *b, const char *s)
{
    size_t at = put_u64(b, strlen(s));
    put(b, s, strlen(s));
    return at;
}
static void put_pad(buf *b, size_t align)
{
    static const uint8_t z[64];
    put(b, z, (align - b->n % align) % align);
}

/* Offsets of the fields the corruption cases patch. */
typedef struct {
    size_t version, n_tensors, n_kv;
    size_t k0_len, s0_len;                 /* "k.a" = string "llama" */
    size_t k1_name, k1_type, k1_arr_type, k1_arr_n; /* "k.b" = [u32 x 4] */
    size_t k2_type, k2_val;                /* "general.alignment" = u32 32 */
    size_t k3_arr_n, k3_s1_len;            /* "k.s" = ["ab", "cd"] */
    size_t t0_ndims, t0_ne0, t0_ne1, t0_type, t0_off;  /* "a" f32 [8, 2] at 0 */
    size_t t1_name, t1_ne0, t1_type, t1_off;           /* "b" q8_0 [32] at 64 */
    size_t data_end;                       /* end of the last tensor's bytes */
} layout;

static buf build_base(layout *L)
{
    buf b = {0};
    put(&b, "GGUF", 4);
    L->version = put_u32(&b, 3);
    L->n_tensors = put_u64(&b, 2);
    L->n_kv = put_u64(&b, 4);
    L->k0_len = put_str(&b, "k.a");
    put_u32(&b, GGUF_TYPE_STRING);
    L->s0_len = put_str(&b, "llama");
    L->k1_name = put_str(&b, "k.b") + 8;
    L->k1_type = put_u32(&b, GGUF_TYPE_ARRAY);
    L->k1_arr_type = put_u32(&b, GGUF_TYPE_UINT32);
    L->k1_arr_n = put_u64(&b, 4);
    for (uint32_t i = 0; i < 4; i++) put_u32(&b, i * 11);
    put_str(&b, "general.alignment");
    L->k2_type = put_u32(&b, GGUF_TYPE_UINT32);
    L->k2_val = put_u32(&b, 32);
    put_str(&b, "k.s");
    put_u32(&b, GGUF_TYPE_ARRAY);
    put_u32(&b, GGUF_TYPE_STRING);
    L->k3_arr_n = put_u64(&b, 2);
    put_str(&b, "ab");
    L->k3_s1_len = put_str(&b, "cd");
    put_str(&b, "a");
    L->t0_ndims = put_u32(&b, 2);
    L->t0_ne0 = put_u64(&b, 8);
    L->t0_ne1 = put_u64(&b, 2);
    L->t0_type = put_u32(&b, GGML_TYPE_F32);
    L->t0_off = put_u64(&b, 0);
    L->t1_name = put_str(&b, "b") + 8;
    put_u32(&b, 1);
    L->t1_ne0 = put_u64(&b, 32);
    L->t1_type = put_u32(&b, GGML_TYPE_Q8_0);
    L->t1_off = put_u64(&b, 64);
    put_pad(&b, 32);
    for (int i = 0; i < 64 + 34; i++) { uint8_t c = (uint8_t)(i * 7); put(&b, &c, 1); }
    L->data_end = b.n;
    put_pad(&b, 32);
    return b;
}

typedef struct { size_t off; int width; uint64_t val; } patch;

/* Opens an exact-size heap copy (so ASan sees any overread) of p[0..n). */
static bool open_copy(const uint8_t *p, size_t n, char *err, size_t errlen)
{
    uint8_t *c = malloc(n ? n : 1);
    if (n) memcpy(c, p, n);
    gguf_file *f = gguf_open_mem(c, n, NULL, err, errlen);
    bool ok = f != NULL;
    if (f) g_sink += walk(f); /* volatile: the reads cannot be optimized away */
    gguf_close(f);
    free(c);
    return ok;
}

static void expect_reject(const char *what, const buf *base, const patch *ps, int np, const char *want)
{
    uint8_t *c = malloc(base->n);
    memcpy(c, base->p, base->n);
    for (int i = 0; i < np; i++) {
        if (ps[i].width == 4) { uint32_t v = (uint32_t)ps[i].val; memcpy(c + ps[i].off, &v, 4); }
        else if (ps[i].width == 8) memcpy(c + ps[i].off, &ps[i].val, 8);
        else c[ps[i].off] = (uint8_t)ps[i].val;
    }
    char err[512] = "";
    engine_status st = ENGINE_OK;
    gguf_file *f = gguf_open_mem(c, base->n, &st, err, sizeof err);
    CHECKF(f == NULL, "%s: accepted", what);
    CHECKF(st == ENGINE_ERR_INVALID, "%s: status %s, not invalid", what, engine_status_name(st));
    CHECKF(err[0] != 0, "%s: empty message", what);
    CHECKF(strstr(err, "<memory>") == err, "%s: message does not name the file: %s", what, err);
    CHECKF(strstr(err, want) != NULL, "%s: message '%s' lacks '%s'", what, err, want);
    if (getenv("GGUF_TEST_VERBOSE")) fprintf(stderr, "%-28s -> %s\n", what, err);
    gguf_close(f);
    free(c);
}

static void test_corrupt(void)
{
    layout L;
    buf b = build_base(&L);
    char err[512];
    gguf_file *f = gguf_open_mem(b.p, b.n, NULL, err, sizeof err);
    CHECKF(f != NULL, "hand-built base file: %s", err);
    save_corpus("base.gguf", b.p, b.n);
    if (f) {
        CHECK(f->n_kv == 4 && f->n_tensors == 2 && f->alignment == 32);
        const gguf_kv *kv = gguf_get_arr(f, "k.s", GGUF_TYPE_STRING);
        CHECK(kv && kv->arr_n == 2 && gguf_str_eq(kv->arr_str[1], "cd"));
        CHECK(f->tensors[1].data == b.p + L.data_end - 34);
        gguf_close(f);
    }
    const uint64_t M = UINT64_MAX;
#define REJ(what, want, ...) do { const patch ps_[] = {__VA_ARGS__}; \
    expect_reject(what, &b, ps_, (int)(sizeof ps_ / sizeof ps_[0]), want); } while (0)
    REJ("bad magic", "bad magic 0x46554746", {0, 4, 0x46554746});
    REJ("version 1", "version 1", {L.version, 4, 1});
    REJ("version 99", "version 99", {L.version, 4, 99});
    REJ("version 0", "version 0", {L.version, 4, 0});
    REJ("big-endian", "big-endian GGUF", {L.version, 4, 0x03000000u});
    REJ("huge n_kv", "n_kv 1152921504606846976 is implausible", {L.n_kv, 8, 1ull << 60});
    REJ("max n_kv", "n_kv", {L.n_kv, 8, M});
    REJ("huge n_tensors", "n_tensors 1152921504606846976 is implausible", {L.n_tensors, 8, 1ull << 60});
    REJ("n_tensors 2^32", "n_tensors", {L.n_tensors, 8, 1ull << 32});
    REJ("one kv too many", "", {L.n_kv, 8, 5});
    REJ("one tensor too many", "", {L.n_tensors, 8, 3});
    REJ("key length max", "key length 18446744073709551615 past end", {L.k0_len, 8, M});
    REJ("key length 2^40", "key length", {L.k0_len, 8, 1ull << 40});
    REJ("string length max", "metadata key #0 ('k.a'): string length 18446744073709551615 past end",
        {L.s0_len, 8, M});
    REJ("string length 2^32", "string length", {L.s0_len, 8, 1ull << 32});
    REJ("bad value type 13", "bad value type 13", {L.k1_type, 4, 13});
    REJ("bad value type max", "bad value type 4294967295", {L.k1_type, 4, 0xffffffffu});
    REJ("bad array type", "('k.b'): bad array element type 13", {L.k1_arr_type, 4, 13});
    REJ("bad array type max", "array element type", {L.k1_arr_type, 4, 0x80000000u});
    REJ("huge array count", "array of 4611686018427387904 uint32", {L.k1_arr_n, 8, 1ull << 62});
    REJ("array count overflow", "array of", {L.k1_arr_n, 8, 1ull << 61});
    REJ("array count max", "array of", {L.k1_arr_n, 8, M});
    REJ("array count +1", "", {L.k1_arr_n, 8, 5});
    REJ("string array count", "array of 576460752303423488 string", {L.k3_arr_n, 8, 1ull << 59});
    REJ("string array elem length", "array string length", {L.k3_s1_len, 8, M - 1});
    REJ("nested array garbage", "", {L.k1_arr_type, 4, GGUF_TYPE_ARRAY});
    REJ("alignment 0", "general.alignment 0 is not a power of two", {L.k2_val, 4, 0});
    REJ("alignment 3", "general.alignment 3 is not a power of two", {L.k2_val, 4, 3});
    REJ("alignment 96", "power of two", {L.k2_val, 4, 96});
    REJ("alignment as float", "general.alignment has type float32", {L.k2_type, 4, GGUF_TYPE_FLOAT32});
    REJ("alignment as i32", "general.alignment has type int32, expected uint32", {L.k2_type, 4, GGUF_TYPE_INT32});
    REJ("alignment 128", "('b'): offset 64 is not a multiple of the alignment 128", {L.k2_val, 4, 128});
    REJ("duplicate key", "duplicate key", {L.k1_name + 2, 1, 'a'});
    REJ("n_dims 0", "tensor #0 ('a'): n_dims 0 out of range", {L.t0_ndims, 4, 0});
    REJ("n_dims 5", "n_dims 5 out of range", {L.t0_ndims, 4, 5});
    REJ("n_dims max", "n_dims 4294967295", {L.t0_ndims, 4, 0xffffffffu});
    REJ("ne 0", "ne[0] = 0 out of range", {L.t0_ne0, 8, 0});
    REJ("ne1 0", "ne[1] = 0", {L.t0_ne1, 8, 0});
    REJ("ne negative", "ne[0] = 9223372036854775808", {L.t0_ne0, 8, 1ull << 63});
    REJ("ne max", "out of range", {L.t0_ne0, 8, M});
    REJ("ne product overflow", "overflows", {L.t0_ne0, 8, 1ull << 40}, {L.t0_ne1, 8, 1ull << 40});
    REJ("ne product 2^63", "overflows", {L.t0_ne0, 8, 1ull << 62}, {L.t0_ne1, 8, 2});
    REJ("byte size overflow", "overflows", {L.t0_type, 4, GGML_TYPE_F64}, {L.t0_ne0, 8, 1ull << 60}, {L.t0_ne1, 8, 4});
    REJ("row size overflow", "overflows", {L.t0_type, 4, GGML_TYPE_F64}, {L.t0_ne0, 8, 1ull << 61});
    REJ("huge but valid shape", "past end", {L.t0_ne0, 8, 1ull << 30}, {L.t0_ne1, 8, 1ull << 30});
    REJ("unknown tensor type 4", "tensor #0 ('a'): unknown tensor type 4", {L.t0_type, 4, 4});
    REJ("unknown tensor type 99", "unknown tensor type 99", {L.t0_type, 4, 99});
    REJ("unknown tensor type max", "unknown tensor type 4294967295", {L.t0_type, 4, 0xffffffffu});
    REJ("q8_0 ne0 33", "('b'): ne[0] = 33 is not a multiple of the q8_0 block size 32", {L.t1_ne0, 8, 33});
    REJ("offset unaligned", "('b'): offset 65 is not a multiple of the alignment 32", {L.t1_off, 8, 65});
    REJ("offset past end", "('b'): data [1099511627776, +34) of the data section", {L.t1_off, 8, 1ull << 40});
    REJ("offset wraps", "past end of file", {L.t1_off, 8, M - 31});
    REJ("offset just past end", "past end of file", {L.t1_off, 8, 96});
    REJ("overlap", "tensors 'a' and 'b' overlap", {L.t1_off, 8, 32});
    REJ("same offset", "overlap", {L.t1_off, 8, 0});
    REJ("duplicate tensor", "tensor #1 ('a'): duplicate tensor name", {L.t1_name, 1, 'a'});
#undef REJ

    /* every truncation short of the last tensor's end is rejected with a message */
    int bad_msgs = 0, accepted = 0;
    for (size_t n = 0; n < L.data_end; n++) {
        err[0] = 0;
        if (open_copy(b.p, n, err, sizeof err)) accepted++;
        else if (!err[0] || !strstr(err, "<memory>")) bad_msgs++;
    }
    CHECKF(accepted == 0 && bad_msgs == 0, "truncations: %d accepted, %d without message", accepted, bad_msgs);
    /* the trailing padding is optional */
    CHECK(open_copy(b.p, L.data_end, err, sizeof err));
    err[0] = 0;
    CHECK(gguf_open_mem(NULL, 0, NULL, err, sizeof err) == NULL && strstr(err, "bad magic"));
    CHECK(gguf_open_mem(b.p, 3, NULL, NULL, 0) == NULL); /* no error buffer is fine */

    /* random mutations: reject or accept, never crash or read out of bounds */
    int acc = 0, rej = 0;
    uint8_t *c = malloc(b.n);
    static const uint64_t interesting[] = {0, 1, 2, 3, 4, 5, 8, 9, 12, 13, 31, 32, 33, 64, 255, 256,
                                           0x7fffffff, 0xffffffff, 1ull << 32, 1ull << 62, 1ull << 63, UINT64_MAX};
    for (int it = 0; it < 30000; it++) {
        memcpy(c, b.p, b.n);
        int k = 1 + (int)(rnd() % 3);
        for (int j = 0; j < k; j++) {
            size_t at = (size_t)(rnd() % (L.t1_off + 8));
            if (rnd() & 1) c[at] = (uint8_t)rnd();
            else {
                uint64_t v = interesting[rnd() % (sizeof interesting / sizeof interesting[0])];
                size_t w = (rnd() & 1) ? 4 : 8;
                if (at + w <= b.n) memcpy(c + at, &v, w);
            }
        }
        size_t n = (rnd() % 8 == 0) ? (size_t)(rnd() % b.n) : b.n;
        err[0] = 0;
        if (open_copy(c, n, err, sizeof err)) acc++;
        else { rej++; if (!err[0]) bad_msgs++; }
    }
    CHECKF(bad_msgs == 0, "%d mutated files rejected without a message", bad_msgs);
    fprintf(stderr, "mutations: %d accepted, %d rejected\n", acc, rej);
    free(c);
    free(b.p);
}

/* Arrays of arrays are legal (if rare): accepted, skipped, copied verbatim. */
static void test_nested(void)
{
    buf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, 0);
    put_u64(&b, 2);
    put_str(&b, "nested");
    put_u32(&b, GGUF_TYPE_ARRAY);
    put_u32(&b, GGUF_TYPE_ARRAY);
    put_u64(&b, 3);
    put_u32(&b, GGUF_TYPE_UINT8); put_u64(&b, 3); put(&b, "\x01\x02\x03", 3);
    put_u32(&b, GGUF_TYPE_STRING); put_u64(&b, 1); put_str(&b, "x");
    put_u32(&b, GGUF_TYPE_ARRAY); put_u64(&b, 1); put_u32(&b, GGUF_TYPE_INT64); put_u64(&b, 0);
    put_str(&b, "after");
    put_u32(&b, GGUF_TYPE_UINT16);
    uint16_t v = 7;
    put(&b, &v, 2);
    char err[512], path[512];
    save_corpus("nested.gguf", b.p, b.n);
    gguf_file *f = gguf_open_mem(b.p, b.n, NULL, err, sizeof err);
    CHECKF(f != NULL, "nested arrays: %s", err);
    if (f) {
        const gguf_kv *kv = gguf_find(f, "nested");
        CHECK(kv && kv->type == GGUF_TYPE_ARRAY && kv->arr_type == GGUF_TYPE_ARRAY && kv->arr_n == 3 &&
              kv->arr_data == b.p + 24 + 8 + 6 + 4 + 4 + 8);
        uint32_t u;
        CHECK(gguf_get_u32(f, "after", &u) && u == 7);
        /* copy_kv carries the nested value verbatim */
        gguf_writer *w = gguf_writer_create();
        gguf_writer_copy_kv(w, f, NULL);
        tmp_path(path, sizeof path, "nested.gguf");
        CHECKF(gguf_writer_write(w, path, err, sizeof err) == 0, "%s", err);
        gguf_writer_destroy(w);
        size_t len;
        uint8_t *d = read_all(path, &len);
        CHECK(d && len == (b.n + 31) / 32 * 32 && memcmp(d, b.p, b.n) == 0); /* same bytes + padding */
        free(d);
        gguf_close(f);
    }
    /* deep nesting is refused, not recursed into without bound */
    buf d = {0};
    put(&d, "GGUF", 4);
    put_u32(&d, 3);
    put_u64(&d, 0);
    put_u64(&d, 1);
    put_str(&d, "deep");
    put_u32(&d, GGUF_TYPE_ARRAY);
    for (int i = 0; i < 100; i++) { put_u32(&d, GGUF_TYPE_ARRAY); put_u64(&d, 1); }
    put_u32(&d, GGUF_TYPE_UINT8);
    put_u64(&d, 0);
    err[0] = 0;
    CHECK(gguf_open_mem(d.p, d.n, NULL, err, sizeof err) == NULL && strstr(err, "nested"));
    free(d.p);
    free(b.p);
}

static void test_open_errors(void)
{
    char err[512], path[512];
    engine_status st = ENGINE_OK;
    err[0] = 0;
    CHECK(gguf_open("/nonexistent/model.gguf", &st, err, sizeof err) == NULL && strstr(err, "/nonexistent/model.gguf: cannot open"));
    CHECK(st == ENGINE_ERR_INVALID);
    err[0] = 0;
    st = ENGINE_OK;
    CHECK(gguf_open(g_tmpdir, &st, err, sizeof err) == NULL && strstr(err, "not a regular file") &&
          st == ENGINE_ERR_INVALID);
    tmp_path(path, sizeof path, "empty.gguf");
    FILE *fp = fopen(path, "wb");
    fclose(fp);
    err[0] = 0;
    CHECK(gguf_open(path, NULL, err, sizeof err) == NULL && strstr(err, "empty.gguf") && strstr(err, "not a GGUF file"));
    fp = fopen(path, "wb");
    fputs("GGML-this is not gguf at all", fp);
    fclose(fp);
    err[0] = 0;
    st = ENGINE_OK;
    CHECK(gguf_open(path, &st, err, sizeof err) == NULL && strstr(err, "empty.gguf: offset 0: bad magic 0x4c4d4747 (not a GGUF file)"));
    CHECK(st == ENGINE_ERR_INVALID);
}

/* ---- real models ------------------------------------------------------- */

static gguf_file *open_model(const char *dir, const char *name)
{
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    gguf_file *f = gguf_open(path, NULL, err, sizeof err);
    CHECKF(f != NULL, "%s", err);
    return f;
}

static void check_llama(const gguf_file *f, const char *name, uint32_t blocks, uint32_t ff, uint32_t heads,
                        uint32_t kv_heads, uint32_t ctx, uint64_t n_tensors)
{
    uint32_t u;
    char arch[32];
    float eps;
    CHECKF(f->version == 3 && f->alignment == 32, "%s header", name);
    CHECKF(gguf_get_cstr(f, "general.architecture", arch, sizeof arch) && strcmp(arch, "llama") == 0, "%s arch", name);
    CHECKF(gguf_get_u32(f, "llama.block_count", &u) && u == blocks, "%s block_count", name);
    CHECKF(gguf_get_u32(f, "llama.embedding_length", &u) && u == 64, "%s dim", name);
    CHECKF(gguf_get_u32(f, "llama.feed_forward_length", &u) && u == ff, "%s ff", name);
    CHECKF(gguf_get_u32(f, "llama.attention.head_count", &u) && u == heads, "%s heads", name);
    CHECKF(gguf_get_u32(f, "llama.attention.head_count_kv", &u) && u == kv_heads, "%s kv heads", name);
    CHECKF(gguf_get_u32(f, "llama.context_length", &u) && u == ctx, "%s ctx", name);
    CHECKF(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps) && eps == 1e-5f, "%s eps", name);
    CHECKF(gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &u) && u == 1, "%s bos", name);
    CHECKF(gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &u) && u == 2, "%s eos", name);
    const gguf_kv *tok = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
    CHECKF(tok && tok->arr_n == 512, "%s 512 tokens", name);
    CHECKF(gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32) &&
           gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32)->arr_n == 512, "%s scores", name);
    CHECKF(f->n_tensors == n_tensors, "%s n_tensors %" PRIu64, name, f->n_tensors);
    const gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
    CHECKF(t && t->type == GGML_TYPE_F32 && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 512 &&
           t->nbytes == 64 * 512 * 4, "%s token_embd.weight [64, 512] f32", name);
    char tn[64];
    snprintf(tn, sizeof tn, "blk.%u.ffn_gate.weight", blocks - 1);
    t = gguf_find_tensor(f, tn);
    CHECKF(t && t->ne[0] == 64 && t->ne[1] == ff, "%s %s", name, tn);
    snprintf(tn, sizeof tn, "blk.%u.ffn_gate.weight", blocks);
    CHECKF(gguf_find_tensor(f, tn) == NULL, "%s has no %s", name, tn);
}

static void test_real_models(void)
{
    const char *dir = getenv("SPECD_MODELS");
    char buf_dir[1024];
    if (!dir) {
        const char *src = getenv("SPECD_SRC");
        snprintf(buf_dir, sizeof buf_dir, "%s/../shared/models", src ? src : ".");
        dir = buf_dir;
    }
    char probe[1200];
    snprintf(probe, sizeof probe, "%s/stories260K.gguf", dir);
    if (access(probe, R_OK) != 0) {
        fprintf(stderr, "note: %s not readable; real-model checks skipped\n", probe);
        return;
    }
    gguf_file *f = open_model(dir, "stories260K.gguf");
    if (f) {
        check_llama(f, "stories260K", 5, 172, 8, 4, 2048, 48);
        const gguf_kv *tok = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
        CHECK(tok && gguf_str_eq(tok->arr_str[0], "<unk>") && gguf_str_eq(tok->arr_str[1], "<s>") &&
              gguf_str_eq(tok->arr_str[2], "</s>") && gguf_str_eq(tok->arr_str[3], "<0x00>"));
        const gguf_tensor *e = gguf_find_tensor(f, "token_embd.weight"), *o = gguf_find_tensor(f, "output.weight");
        CHECK(e && o && o->nbytes == e->nbytes && memcmp(o->data, e->data, e->nbytes) == 0); /* tied, per README */

        /* copy_kv + tensors reproduce every value */
        char path[512], err[512];
        tmp_path(path, sizeof path, "stories-copy.gguf");
        gguf_writer *w = gguf_writer_create();
        gguf_writer_copy_kv(w, f, NULL);
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            const gguf_tensor *t = &f->tensors[i];
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
            CHECK(gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data));
        }
        CHECKF(gguf_writer_write(w, path, err, sizeof err) == 0, "%s", err);
        gguf_writer_destroy(w);
        gguf_file *g = gguf_open(path, NULL, err, sizeof err);
        CHECKF(g != NULL, "reopen copy: %s", err);
        if (g) {
            check_llama(g, "stories260K copy", 5, 172, 8, 4, 2048, 48);
            CHECK(g->n_kv == f->n_kv && g->data_offset == f->data_offset && g->size == f->size);
            /* same metadata, same tensor layout: the files are byte-identical */
            CHECK(g->size == f->size && memcmp(g->base, f->base, f->size) == 0);
            gguf_close(g);
        }

        /* every truncation of the header region and a sample of the data is rejected */
        int accepted = 0, bad_msgs = 0;
        for (size_t n = 0; n < f->size; n += (n < f->data_offset + 64 ? 1 : 4093)) {
            err[0] = 0;
            if (open_copy(f->base, n, err, sizeof err)) accepted++;
            else if (!err[0]) bad_msgs++;
        }
        CHECKF(accepted == 0 && bad_msgs == 0, "stories260K truncations: %d accepted, %d silent", accepted, bad_msgs);
        gguf_close(f);
    }
    f = open_model(dir, "llama2xs-281K.gguf");
    if (f) check_llama(f, "llama2xs-281K", 5, 192, 8, 4, 256, 48);
    gguf_close(f);
    f = open_model(dir, "aidreams260K.gguf");
    if (f) check_llama(f, "aidreams260K", 4, 172, 4, 4, 128, 39);
    gguf_close(f);
    f = open_model(dir, "tokenizer-vectors/ggml-vocab-llama-spm.gguf");
    if (f) {
        const gguf_kv *tok = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
        bool add_bos = false;
        CHECK(tok && tok->arr_n == 32000 && f->n_tensors == 0);
        CHECK(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &add_bos) && add_bos);
        CHECK(f->data_offset > f->size); /* tokenizer-only file ends without data padding */
        gguf_close(f);
    }
    f = open_model(dir, "tokenizer-vectors/ggml-vocab-gpt-2.gguf");
    if (f) {
        const gguf_kv *m = gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_TYPE_STRING);
        CHECK(m && m->arr_n == 50000);
        CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING)->arr_n == 50257);
        gguf_close(f);
    }
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(g_tmpdir, sizeof g_tmpdir, "%s/test_gguf.XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(g_tmpdir)) SKIP("cannot create a temp dir under %s", tmp ? tmp : "/tmp");
    make_tensors();
    test_type_facts();
    test_round_trip();
    test_nested();
    test_corrupt();
    test_open_errors();
    test_real_models();
    for (size_t i = 0; i < N_T; i++) free(g_t[i].data);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", g_tmpdir);
    TEST_DONE();
}
