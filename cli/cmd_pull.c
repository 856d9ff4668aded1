/* cmd_pull.c — `specd pull` (fetch a GGUF from a Hugging Face repository into
 * the cache), `specd models` (what the cache holds, read from each GGUF's
 * header) and `specd gguf-split` (merge / split llama.cpp split files). */
#include "cli/cmd.h"
#include "cli/gguf_split.h"
#include "cli/hub.h"
#include "cli/util.h"
#include "engine/gguf/gguf.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void pull_usage(FILE *f) {
    fprintf(f,
            "usage: specd pull [--offline] [--refresh] [--quiet] REPO[:QUANT] | REPO/FILE.gguf ...\n"
            "  Downloads a GGUF from a Hugging Face model repository into the cache\n"
            "  ($SPECD_CACHE, default ~/.cache/specd) and prints its path. QUANT picks the file by its\n"
            "  quant tag (Q4_K_M, Q8_0, ...; default Q4_K_M, else Q4_0, Q8_0, ...). Split files\n"
            "  (NAME-00001-of-0000N.gguf) are fetched and merged into one. A partial download resumes;\n"
            "  a file whose SHA-256 differs from the hub's is removed and refused.\n"
            "  Environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN (gated/private repos),\n"
            "  HF_HUB_OFFLINE=1 or SPECD_OFFLINE=1 (cache only).\n"
            "  Example: specd pull bartowski/SmolLM2-360M-Instruct-GGUF:Q8_0\n");
}

int cmd_pull(int argc, char **argv) {
    unsigned flags = 0;
    int n_refs = 0, rc = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return pull_usage(stdout), 0;
        if (!strcmp(a, "--offline")) flags |= HUB_OFFLINE;
        else if (!strcmp(a, "--refresh")) flags |= HUB_REFRESH;
        else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) flags |= HUB_QUIET;
        else if (a[0] == '-') return cli_unknown_option("pull", a, pull_usage);
        else n_refs++;
    }
    if (!n_refs) return pull_usage(stderr), 2;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-') continue;
        char path[2048], err[4096];
        hub_status s = hub_resolve(argv[i], flags, path, sizeof(path), err, sizeof(err));
        if (s != HUB_OK) {
            fprintf(stderr, "specd pull: %s\n", err);
            if (hub_exit_code(s) > rc) rc = hub_exit_code(s);
            continue;
        }
        printf("%s\n", path);
        fflush(stdout);
    }
    return rc;
}

/* ---- specd models ------------------------------------------------------------- */

/* llama.cpp's general.file_type numbering. */
static const char *ftype_name(uint32_t t) {
    static const char *names[] = {[0] = "F32",     [1] = "F16",     [2] = "Q4_0",    [3] = "Q4_1",
                                  [7] = "Q8_0",    [8] = "Q5_0",    [9] = "Q5_1",    [10] = "Q2_K",
                                  [11] = "Q3_K_S", [12] = "Q3_K_M", [13] = "Q3_K_L", [14] = "Q4_K_S",
                                  [15] = "Q4_K_M", [16] = "Q5_K_S", [17] = "Q5_K_M", [18] = "Q6_K",
                                  [32] = "BF16"};
    return t < sizeof(names) / sizeof(names[0]) ? names[t] : NULL;
}

typedef struct {
    char arch[64], name[128], quant[32], tokenizer[32];
    double params;
    uint64_t vocab;
    char err[256];
} model_facts;

static void read_facts(const char *path, model_facts *m) {
    memset(m, 0, sizeof(*m));
    gguf_file *f = gguf_open(path, NULL, m->err, sizeof(m->err));
    if (!f) return;
    if (!gguf_get_cstr(f, "general.architecture", m->arch, sizeof(m->arch))) snprintf(m->arch, sizeof(m->arch), "?");
    gguf_get_cstr(f, "general.name", m->name, sizeof(m->name));
    if (!gguf_get_cstr(f, "tokenizer.ggml.model", m->tokenizer, sizeof(m->tokenizer)))
        snprintf(m->tokenizer, sizeof(m->tokenizer), "none");
    const gguf_kv *tok = gguf_find(f, "tokenizer.ggml.tokens");
    m->vocab = tok && tok->type == GGUF_TYPE_ARRAY ? tok->arr_n : 0;
    uint32_t ft;
    const char *q = gguf_get_u32(f, "general.file_type", &ft) ? ftype_name(ft) : NULL;
    /* no file_type: name the type that holds most of the weight bytes */
    uint64_t by_type[GGML_TYPE_COUNT] = {0};
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        double ne = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) ne *= (double)t->ne[d];
        m->params += ne;
        if ((unsigned)t->type < GGML_TYPE_COUNT) by_type[t->type] += t->nbytes;
    }
    if (!q) {
        int best = 0;
        for (int k = 1; k < GGML_TYPE_COUNT; k++)
            if (by_type[k] > by_type[best]) best = k;
        q = ggml_type_name(best) ? ggml_type_name(best) : "?";
    }
    snprintf(m->quant, sizeof(m->quant), "%s", q);
    gguf_close(f);
}

static void fmt_size(char *b, size_t n, double bytes) {
    if (bytes >= 1e9) snprintf(b, n, "%.2f GB", bytes / 1e9);
    else if (bytes >= 1e6) snprintf(b, n, "%.1f MB", bytes / 1e6);
    else snprintf(b, n, "%.0f kB", bytes / 1e3);
}

static void fmt_params(char *b, size_t n, double p) {
    if (p >= 1e9) snprintf(b, n, "%.1fB", p / 1e9);
    else if (p >= 1e6) snprintf(b, n, "%.0fM", p / 1e6);
    else snprintf(b, n, "%.0fK", p / 1e3);
}

typedef struct {
    bool json;
    int count;
    const char *root;
    bool hint_only; /* count, and print "-hf REF" lines to hint (may be NULL), instead of the table */
    FILE *hint;
    int hint_max;
} walk_ctx;

static void show_file(walk_ctx *w, const char *rel, const char *full, off_t size) {
    /* rel = owner/name/path/file.gguf */
    const char *s1 = strchr(rel, '/'), *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
    if (!s2) return;
    char ref[1024];
    snprintf(ref, sizeof(ref), "%s", rel);
    if (w->hint_only) {
        if (w->count++ < w->hint_max && w->hint) fprintf(w->hint, "    -hf %s\n", ref);
        return;
    }
    model_facts m;
    read_facts(full, &m);
    if (w->json) {
        printf("%s{\"ref\":", w->count ? "," : "");
        json_write_str(stdout, ref, strlen(ref));
        printf(",\"path\":");
        json_write_str(stdout, full, strlen(full));
        printf(",\"bytes\":%lld", (long long)size);
        if (m.err[0]) {
            printf(",\"error\":");
            json_write_str(stdout, m.err, strlen(m.err));
        } else {
            printf(",\"architecture\":");
            json_write_str(stdout, m.arch, strlen(m.arch));
            printf(",\"name\":");
            json_write_str(stdout, m.name, strlen(m.name));
            printf(",\"quant\":\"%s\",\"tokenizer\":", m.quant);
            json_write_str(stdout, m.tokenizer, strlen(m.tokenizer));
            printf(",\"vocab\":%llu,\"params\":%.0f", (unsigned long long)m.vocab, m.params);
        }
        printf("}");
    } else {
        char sz[32], pp[32];
        fmt_size(sz, sizeof(sz), (double)size);
        fmt_params(pp, sizeof(pp), m.params);
        if (!w->count) printf("%-64s %10s  %-8s %-8s %6s  %s\n", "MODEL (use with -hf)", "SIZE", "ARCH", "QUANT",
                              "PARAMS", "TOKENIZER");
        if (m.err[0]) printf("%-64s %10s  unreadable: %s\n", ref, sz, m.err);
        else printf("%-64s %10s  %-8s %-8s %6s  %s (%llu tokens)\n", ref, sz, m.arch, m.quant, pp, m.tokenizer,
                    (unsigned long long)m.vocab);
    }
    w->count++;
}

static void walk(walk_ctx *w, const char *rel, int depth) {
    char dir[2048];
    snprintf(dir, sizeof(dir), "%s%s%s", w->root, *rel ? "/" : "", rel);
    DIR *d = opendir(dir);
    if (!d) return;
    /* sorted, so the listing is stable */
    char *names[1024];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < 1024)
        if (de->d_name[0] != '.') names[n++] = strdup(de->d_name);
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *t = names[j];
            names[j] = names[j - 1], names[j - 1] = t;
        }
    for (int i = 0; i < n; i++) {
        char sub[1024], full[3100];
        snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", names[i]);
        snprintf(full, sizeof(full), "%s/%s", w->root, sub);
        struct stat st;
        if (stat(full, &st) == 0) {
            if (S_ISDIR(st.st_mode) && depth < 8) walk(w, sub, depth + 1);
            else if (S_ISREG(st.st_mode) && strlen(sub) > 5 && !strcmp(sub + strlen(sub) - 5, ".gguf"))
                show_file(w, sub, full, st.st_size);
        }
        free(names[i]);
    }
}

static void models_usage(FILE *f) {
    fprintf(f, "usage: specd models [--json]\n  lists the GGUF files in the cache ($SPECD_CACHE, default "
               "~/.cache/specd): reference, size, architecture, quant, parameters, tokenizer\n");
}

int cmd_models(int argc, char **argv) {
    walk_ctx w = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) w.json = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            models_usage(stdout);
            return 0;
        } else
            return cli_unknown_option("models", argv[i], models_usage);
    }
    char cache[1024];
    w.root = hub_cache_dir(cache, sizeof(cache));
    if (w.json) printf("{\"cache\":"), json_write_str(stdout, cache, strlen(cache)), printf(",\"models\":[");
    walk(&w, "", 0);
    if (w.json) printf("]}\n");
    else if (!w.count)
        printf("no models in %s; fetch one with: specd pull OWNER/REPO[:QUANT]\n", cache);
    return 0;
}

/* Prints "    -hf REF" for up to max cached models to f (NULL: count only); returns how many there are. */
int cmd_models_hint(FILE *f, int max) {
    char cache[1024];
    walk_ctx w = {.root = hub_cache_dir(cache, sizeof(cache)), .hint_only = true, .hint = f, .hint_max = max};
    walk(&w, "", 0);
    return w.count;
}

/* ---- specd gguf-split --------------------------------------------------------- */

static void gguf_split_usage(FILE *f) {
    fprintf(f, "usage: specd gguf-split --split N IN.gguf OUT_PREFIX   (writes OUT_PREFIX-0000k-of-0000N.gguf)\n"
               "       specd gguf-split --merge PART-00001-of-0000N.gguf ... OUT.gguf\n"
               "  splits a GGUF into llama.cpp-style parts, or merges such parts into one file\n");
}

int cmd_gguf_split(int argc, char **argv) {
    char err[1024];
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        gguf_split_usage(stdout);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "--split") && strcmp(argv[1], "--merge"))
        return cli_unknown_option("gguf-split", argv[1], gguf_split_usage);
    if (argc >= 4 && !strcmp(argv[1], "--merge")) {
        /* specd gguf-split --merge PART1 ... OUT */
        if (gguf_merge_parts((const char *const *)argv + 2, argc - 3, argv[argc - 1], err, sizeof(err)) != 0) {
            fprintf(stderr, "specd gguf-split: %s\n", err);
            return 1;
        }
        return 0;
    }
    if (argc == 5 && !strcmp(argv[1], "--split")) {
        int n = atoi(argv[2]);
        if (gguf_split_file(argv[3], n, argv[4], err, sizeof(err)) != 0) {
            fprintf(stderr, "specd gguf-split: %s\n", err);
            return 1;
        }
        return 0;
    }
    gguf_split_usage(stderr);
    return 2;
}
