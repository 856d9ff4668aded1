/* vectors.h — reads llama.cpp's tokenizer test vectors: `.inp` holds strings
 * separated by "\n__ggml_vocab_test__\n" (so a string may itself end with or
 * be newlines), `.out` one line of space-separated ids per string. Shared by
 * the SPM and BPE vector tests; include after tests/testutil.h. */
#ifndef SPECD_TEST_VECTORS_H
#define SPECD_TEST_VECTORS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A whole file, NUL-terminated, into a malloc'd buffer (*len bytes); NULL
 * when it cannot be opened. */
static char *vec_read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) buf = realloc(buf, (cap *= 2) + 1);
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

typedef struct {
    char *inp;            /* start of .inp (for error offsets) */
    char *cur, *inp_end;  /* next string in .inp */
    char *line, *outs_end; /* next line of .out (lines are NUL-terminated in place) */
    int index;            /* pairs returned so far */
} vec_iter;

static void vec_init(vec_iter *it, char *inp, size_t inp_len, char *outs, size_t out_len) {
    *it = (vec_iter){inp, inp, inp + inp_len, outs, outs + out_len, 0};
}

/* The next (string, expected ids) pair: returns 1 with *s, *slen and
 * want[0..*nw), 0 when .inp is exhausted, -1 (after a failed CHECK) when the
 * files are malformed. */
static int vec_next(vec_iter *it, const char **s, size_t *slen, int32_t *want, int cap, int *nw) {
    static const char sep[] = "\n__ggml_vocab_test__\n";
    if (it->cur >= it->inp_end) return 0;
    char *s_end = strstr(it->cur, sep);
    CHECKF(s_end != NULL, "unterminated string at offset %td of .inp", it->cur - it->inp);
    if (!s_end) return -1;
    CHECKF(it->line < it->outs_end, ".out has fewer lines than .inp has strings (%d)", it->index + 1);
    if (it->line >= it->outs_end) return -1;
    char *nl = memchr(it->line, '\n', (size_t)(it->outs_end - it->line));
    if (!nl) nl = it->outs_end;
    *nl = '\0';
    *nw = 0;
    for (char *p = it->line, *q; *nw < cap; p = q) {
        long v = strtol(p, &q, 10);
        if (q == p) break;
        want[(*nw)++] = (int32_t)v;
    }
    it->line = nl + 1;
    *s = it->cur;
    *slen = (size_t)(s_end - it->cur);
    it->cur = s_end + sizeof sep - 1;
    it->index++;
    return 1;
}

/* After the last pair: .out must not have more lines than .inp has strings. */
static void vec_finish(const vec_iter *it) {
    CHECKF(it->line >= it->outs_end, ".out has more lines than .inp has strings (%d)", it->index);
}

/* Whether got equals want; prints both on a mismatch. */
static bool vec_same(int index, size_t slen, const int32_t *want, int nw, const int32_t *got, int n) {
    bool same = n == nw && memcmp(got, want, (size_t)n * sizeof *got) == 0;
    if (!same) {
        fprintf(stderr, "string %d (%zu bytes) mismatch:\n  want:", index, slen);
        for (int i = 0; i < nw; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n  got: ");
        for (int i = 0; i < n; i++) fprintf(stderr, " %d", got[i]);
        fputc('\n', stderr);
    }
    return same;
}

#endif
