/* cmd_tokenize.c — `specd tokenize` (stdin text -> token ids, or with
 * --splits the pre-tokenizer's pieces) and `specd detokenize` (stdin ids ->
 * text), thin shells over engine/tokenizer. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cmd.h"
#include "cli/util.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "gateway/openai_response.h"

static void tokenize_usage(FILE *f) {
    fprintf(f,
        "usage: specd tokenize -m MODEL.gguf [--no-bos] [--ids | --pieces] [--special] [-p TEXT]\n"
        "       specd tokenize --splits (-m MODEL.gguf | --pre NAME) [-0] [-p TEXT]\n"
        "  Tokenizes all of stdin (or TEXT) with MODEL's tokenizer.\n"
        "  --ids       print the ids on one line, space-separated (default)\n"
        "  --pieces    print one 'ID<TAB>PIECE' line per token; PIECE is the vocabulary\n"
        "              string (\"\\u2581\" for spaces), with bytes < 0x20 and '\\' escaped as \\xNN\n"
        "  --no-bos    do not add BOS (nor EOS when the model adds one)\n"
        "  --special   parse special tokens written in the text (e.g. \"</s>\")\n"
        "  --splits    print the pre-tokenizer's pieces instead of tokens, as one JSON line\n"
        "              {\"pre\":NAME,\"ends\":[byte offset where each piece ends],\"pieces\":[text]}\n"
        "              (no special tokens are matched; in \"pieces\" bytes that are not valid\n"
        "              UTF-8 show as U+FFFD, \"ends\" is exact); SPM models give one piece\n"
        "  --pre NAME  with --splits: the pre-tokenizer a tokenizer.ggml.pre value NAME\n"
        "              selects (gpt-2, llama-bpe, qwen2, falcon, ...), no model needed\n"
        "  -0, --null  with --splits: the input is several texts, each ended by a NUL byte\n"
        "              (the last one may lack it), like xargs -0; one JSON line per text\n");
}

static void detokenize_usage(FILE *f) {
    fprintf(f,
        "usage: specd detokenize -m MODEL.gguf [--special] [--continuation]\n"
        "  Reads whitespace-separated token ids from stdin and prints their text.\n"
        "  --special       render control tokens (e.g. \"<s>\") instead of dropping them\n"
        "  --continuation  the ids continue a sequence: keep a leading space\n");
}

/* Opens MODEL and builds its tokenizer; prints the reason and returns NULL on error. */
static tokenizer *load_tokenizer(const char *cmd, const char *path) {
    char err[512];
    gguf_file *g = gguf_open(path, NULL, err, sizeof err);
    if (!g) {
        fprintf(stderr, "specd %s: %s\n", cmd, err);
        return NULL;
    }
    tokenizer *t = tok_create(g, err, sizeof err);
    gguf_close(g);
    if (!t) fprintf(stderr, "specd %s: %s: %s\n", cmd, path, err);
    return t;
}

/* Prints the ids (or with pieces one 'ID<TAB>PIECE' line per token) of text[0..len). */
static int print_tokens(const tokenizer *t, const char *text, size_t len, bool bos, bool special, bool pieces) {
    int n = tok_encode(t, text, len, bos, special, NULL, 0);
    if (n < 0) n = -n;
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!ids) {
        fprintf(stderr, "specd tokenize: out of memory\n");
        return 1;
    }
    int got = tok_encode(t, text, len, bos, special, ids, n);
    if (got != n) {
        fprintf(stderr, "%s:%d: tok_encode gave %d then %d tokens\n", __FILE__, __LINE__, n, got);
        abort();
    }

    for (int i = 0; i < n; i++) {
        if (!pieces) {
            printf(i ? " %d" : "%d", ids[i]);
            continue;
        }
        size_t pl;
        const char *p = tok_token_str(t, ids[i], &pl);
        printf("%d\t", ids[i]);
        for (size_t k = 0; k < pl; k++) {
            unsigned char c = (unsigned char)p[k];
            if (c < 0x20 || c == '\\') printf("\\x%02X", c);
            else putchar(c);
        }
        putchar('\n');
    }
    if (!pieces) putchar('\n');

    free(ids);
    return 0;
}

/* --splits: prints {"pre":...,"ends":[...],"pieces":[...]} for text[0..len). */
static int print_splits(tok_pre pre, const char *text, size_t len) {
    int n = tok_split_pre(pre, text, len, NULL, 0);
    if (n < 0) n = -n;
    size_t *ends = malloc(((size_t)n + 1) * sizeof *ends);
    char *clean = malloc(3 * len + 1);
    if (!ends || !clean) {
        fprintf(stderr, "specd tokenize: out of memory\n");
        free(ends);
        free(clean);
        return 1;
    }
    int got = tok_split_pre(pre, text, len, ends, n);
    if (got != n) {
        fprintf(stderr, "%s:%d: tok_split_pre gave %d then %d pieces\n", __FILE__, __LINE__, n, got);
        abort();
    }
    printf("{\"pre\":\"%s\",\"ends\":[", tok_pre_name(pre));
    for (int i = 0; i < n; i++) printf(i ? ",%zu" : "%zu", ends[i]);
    fputs("],\"pieces\":[", stdout);
    for (int i = 0; i < n; i++) {
        size_t from = i ? ends[i - 1] : 0;
        if (i) putchar(',');
        json_write_str(stdout, clean, oa_utf8_sanitize(clean, text + from, ends[i] - from));
    }
    fputs("]}\n", stdout);
    free(clean);
    free(ends);
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text_arg = NULL, *pre_name = NULL;
    bool bos = true, pieces = false, special = false, splits = false, nul = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) text_arg = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--no-bos")) bos = false;
        else if (!strcmp(a, "--ids")) pieces = false;
        else if (!strcmp(a, "--pieces")) pieces = true;
        else if (!strcmp(a, "--special")) special = true;
        else if (!strcmp(a, "--splits")) splits = true;
        else if (!strcmp(a, "--pre")) pre_name = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-0") || !strcmp(a, "--null")) nul = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { tokenize_usage(stdout); return 0; }
        else
            return cli_unknown_option("tokenize", a, tokenize_usage);
    }
    if (nul && !splits) {
        fprintf(stderr, "specd tokenize: -0 goes with --splits\n");
        tokenize_usage(stderr);
        return 2;
    }
    tok_pre pre = TOK_PRE_NONE;
    if (pre_name) {
        if (!splits || model) {
            fprintf(stderr, "specd tokenize: --pre goes with --splits and without -m\n");
            tokenize_usage(stderr);
            return 2;
        }
        pre = tok_pre_parse(pre_name, strlen(pre_name));
        if (pre == TOK_PRE_NONE) {
            char names[512];
            tok_pre_list(names, sizeof names);
            fprintf(stderr, "specd tokenize: unknown pre-tokenizer '%s' (supported: %s)\n", pre_name, names);
            return 2;
        }
    } else if (!model) {
        fprintf(stderr, "specd tokenize: -m MODEL.gguf is required%s\n", splits ? " (or --pre NAME)" : "");
        tokenize_usage(stderr);
        return 2;
    }
    tokenizer *t = NULL;
    if (model) {
        t = load_tokenizer("tokenize", model);
        if (!t) return 1;
        pre = tok_get_pre(t);
    }

    size_t len;
    char *text;
    if (text_arg) {
        len = strlen(text_arg);
        text = malloc(len + 1);
        if (text) memcpy(text, text_arg, len + 1);
    } else {
        text = read_all_stdin(&len);
    }
    if (!text) {
        fprintf(stderr, "specd tokenize: cannot read the input\n");
        tok_destroy(t);
        return 1;
    }
    if (len > ((size_t)1 << 30)) {
        fprintf(stderr, "specd tokenize: input of %zu bytes is too large (limit 1 GiB)\n", len);
        free(text);
        tok_destroy(t);
        return 1;
    }
    int rc = 0;
    if (!splits) rc = print_tokens(t, text, len, bos, special, pieces);
    else if (!nul) rc = print_splits(pre, text, len);
    else
        for (size_t at = 0; at < len && rc == 0;) {
            const char *z = memchr(text + at, '\0', len - at);
            size_t tl = z ? (size_t)(z - (text + at)) : len - at;
            rc = print_splits(pre, text + at, tl);
            at += tl + 1;
        }
    free(text);
    tok_destroy(t);
    if (rc == 0 && fflush(stdout) != 0) {
        fprintf(stderr, "specd tokenize: cannot write output: %s\n", strerror(errno));
        return 1;
    }
    return rc;
}

int cmd_detokenize(int argc, char **argv) {
    const char *model = NULL;
    unsigned flags = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--special")) flags |= TOK_DECODE_SPECIAL;
        else if (!strcmp(a, "--continuation")) flags |= TOK_DECODE_CONTINUATION;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { detokenize_usage(stdout); return 0; }
        else
            return cli_unknown_option("detokenize", a, detokenize_usage);
    }
    if (!model) {
        fprintf(stderr, "specd detokenize: -m MODEL.gguf is required\n");
        detokenize_usage(stderr);
        return 2;
    }
    tokenizer *t = load_tokenizer("detokenize", model);
    if (!t) return 1;

    size_t len;
    char *in = read_all_stdin(&len);
    if (!in) {
        fprintf(stderr, "specd detokenize: cannot read the input\n");
        tok_destroy(t);
        return 1;
    }
    /* ids: whitespace-separated decimal integers, each a valid token id */
    size_t cap = 64;
    int n = 0, rc = 1;
    int32_t *ids = malloc(cap * sizeof *ids);
    char *text = NULL;
    if (!ids) goto oom;
    for (char *p = in;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\v' || *p == '\f') p++;
        if (*p == '\0') break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        size_t wl = strcspn(p, " \t\n\r\v\f");
        if (end == p || (size_t)(end - p) != wl || errno) {
            fprintf(stderr, "specd detokenize: '%.*s' is not a token id\n", (int)(wl > 40 ? 40 : wl), p);
            goto out;
        }
        if (v < 0 || v >= tok_n_vocab(t)) {
            fprintf(stderr, "specd detokenize: token id %ld out of range (vocabulary has %d tokens)\n",
                    v, (int)tok_n_vocab(t));
            goto out;
        }
        if ((size_t)n == cap) {
            int32_t *grown = realloc(ids, 2 * cap * sizeof *ids);
            if (!grown) goto oom;
            ids = grown;
            cap *= 2;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    if (len != strlen(in)) {
        fprintf(stderr, "specd detokenize: the input contains a NUL byte\n");
        goto out;
    }
    int tl = tok_decode(t, ids, n, NULL, 0, flags);
    if (tl < 0) tl = -tl;
    text = malloc((size_t)tl + 1);
    if (!text) goto oom;
    if (tok_decode(t, ids, n, text, (size_t)tl, flags) != tl) {
        fprintf(stderr, "%s:%d: tok_decode length changed\n", __FILE__, __LINE__);
        abort();
    }
    fwrite(text, 1, (size_t)tl, stdout);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "specd detokenize: cannot write output: %s\n", strerror(errno));
        goto out;
    }
    rc = 0;
    goto out;
oom:
    fprintf(stderr, "specd detokenize: out of memory\n");
out:
    free(text);
    free(ids);
    free(in);
    tok_destroy(t);
    return rc;
}
