/* classify.c — one-pass feature scoring for pol_classify (see classify.h).
 * Scores for "code" and "structured" accumulate from per-word and per-line
 * features; the larger wins if it clears a threshold, else the prompt is chat. */
#include "policy/classify.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Word classes: a word in the prompt adds its weight to one score. */
enum { W_CODE = 1, W_CODE_WEAK, W_CODE_ASK, W_STRUCT_ASK, W_STRUCT_WEAK, W_VERB };

typedef struct {
    const char *w;
    uint8_t cls;
} word_def;

static const word_def words[] = {
    /* tokens that rarely appear outside source code */
    {"def", W_CODE}, {"elif", W_CODE}, {"lambda", W_CODE}, {"#include", W_CODE}, {"#define", W_CODE},
    {"printf", W_CODE}, {"println", W_CODE}, {"fn", W_CODE}, {"impl", W_CODE}, {"func", W_CODE},
    {"void", W_CODE}, {"nullptr", W_CODE}, {"std", W_CODE}, {"console", W_CODE}, {"const", W_CODE},
    {"let", W_CODE_WEAK}, {"var", W_CODE}, {"async", W_CODE}, {"await", W_CODE}, {"namespace", W_CODE},
    {"typedef", W_CODE}, {"struct", W_CODE}, {"public", W_CODE_WEAK}, {"private", W_CODE_WEAK},
    {"static", W_CODE}, {"int", W_CODE}, {"char", W_CODE}, {"bool", W_CODE}, {"endl", W_CODE},
    {"cout", W_CODE}, {"sizeof", W_CODE}, {"malloc", W_CODE}, {"self", W_CODE}, {"usize", W_CODE},
    {"mut", W_CODE}, {"unwrap", W_CODE}, {"println!", W_CODE}, {"foreach", W_CODE}, {"elsif", W_CODE},
    {"fi", W_CODE}, {"esac", W_CODE}, {"echo", W_CODE}, {"__init__", W_CODE}, {"argv", W_CODE},
    {"argc", W_CODE}, {"stdin", W_CODE}, {"stdout", W_CODE}, {"err", W_CODE}, {"nil", W_CODE},
    {"fmt", W_CODE}, {"chan", W_CODE}, {"goroutine", W_CODE}, {"defer", W_CODE}, {"uint32_t", W_CODE},
    {"size_t", W_CODE}, {"string", W_CODE_WEAK}, {"interface", W_CODE_WEAK}, {"extends", W_CODE},
    {"implements", W_CODE}, {"throws", W_CODE}, {"catch", W_CODE_WEAK}, {"except", W_CODE_WEAK},
    {"finally", W_CODE_WEAK}, {"yield", W_CODE_WEAK}, {"null", W_CODE_WEAK}, {"none", W_CODE_WEAK},
    {"true", W_CODE_WEAK}, {"false", W_CODE_WEAK}, {"return", W_CODE_WEAK}, {"import", W_CODE_WEAK},
    {"class", W_CODE_WEAK}, {"else", W_CODE_WEAK}, {"while", W_CODE_WEAK}, {"this", W_CODE_WEAK},
    {"new", W_CODE_WEAK}, {"range", W_CODE_WEAK}, {"len", W_CODE}, {"print", W_CODE_WEAK},
    {"select", W_CODE_WEAK}, {"where", W_CODE_WEAK}, {"join", W_CODE_WEAK}, {"insert", W_CODE_WEAK},
    /* asking for code in prose */
    {"function", W_CODE_ASK}, {"python", W_CODE_ASK}, {"javascript", W_CODE_ASK}, {"typescript", W_CODE_ASK},
    {"java", W_CODE_ASK}, {"rust", W_CODE_ASK}, {"golang", W_CODE_ASK}, {"c++", W_CODE_ASK}, {"c#", W_CODE_ASK},
    {"kotlin", W_CODE_ASK}, {"swift", W_CODE_ASK}, {"ruby", W_CODE_ASK}, {"php", W_CODE_ASK}, {"bash", W_CODE_ASK},
    {"shell", W_CODE_ASK}, {"sql", W_CODE_ASK}, {"regex", W_CODE_ASK}, {"script", W_CODE_ASK},
    {"compile", W_CODE_ASK}, {"compiler", W_CODE_ASK}, {"segfault", W_CODE_ASK}, {"refactor", W_CODE_ASK},
    {"debug", W_CODE_ASK}, {"bug", W_CODE_ASK}, {"code", W_CODE_ASK},
    {"program", W_CODE_ASK}, {"snippet", W_CODE_ASK}, {"method", W_CODE_ASK}, {"unittest", W_CODE_ASK},
    {"html", W_CODE_ASK}, {"css", W_CODE_ASK}, {"query", W_CODE_ASK}, {"recursion", W_CODE_ASK},
    {"recursive", W_CODE_ASK}, {"dockerfile", W_CODE_ASK}, {"makefile", W_CODE_ASK}, {"api", W_CODE_ASK},
    {"variable", W_CODE_ASK}, {"loop", W_CODE_ASK}, {"exception", W_CODE_ASK}, {"traceback", W_CODE_ASK},
    {"stack", W_CODE_ASK}, {"array", W_CODE_ASK}, {"pointer", W_CODE_ASK}, {"cuda", W_CODE_ASK},
    {"kernel", W_CODE_ASK}, {"haskell", W_CODE_ASK}, {"scala", W_CODE_ASK}, {"lua", W_CODE_ASK},
    {"perl", W_CODE_ASK}, {"npm", W_CODE_ASK}, {"pip", W_CODE_ASK}, {"git", W_CODE_ASK},
    /* asking for (or talking in) a data format */
    {"json", W_STRUCT_ASK}, {"yaml", W_STRUCT_ASK}, {"yml", W_STRUCT_ASK}, {"csv", W_STRUCT_ASK},
    {"xml", W_STRUCT_ASK}, {"toml", W_STRUCT_ASK}, {"schema", W_STRUCT_ASK}, {"tsv", W_STRUCT_ASK},
    {"jsonl", W_STRUCT_ASK}, {"ndjson", W_STRUCT_ASK},
    {"fields", W_STRUCT_WEAK}, {"field", W_STRUCT_WEAK}, {"columns", W_STRUCT_WEAK}, {"column", W_STRUCT_WEAK},
    {"table", W_STRUCT_WEAK}, {"keys", W_STRUCT_WEAK}, {"rows", W_STRUCT_WEAK}, {"format", W_STRUCT_WEAK},
    {"object", W_STRUCT_WEAK}, {"spreadsheet", W_STRUCT_WEAK}, {"structured", W_STRUCT_WEAK},
    /* imperative verbs of a request ("write a ...", "output as ...") */
    {"write", W_VERB}, {"implement", W_VERB}, {"show", W_VERB}, {"give", W_VERB}, {"fix", W_VERB},
    {"create", W_VERB}, {"generate", W_VERB}, {"make", W_VERB}, {"output", W_VERB}, {"convert", W_VERB},
    {"turn", W_VERB}, {"respond", W_VERB}, {"produce", W_VERB}, {"emit", W_VERB}, {"build", W_VERB},
};

/* Open-addressing hash of the word list, filled once on first use. */
#define HBITS 9
#define HSIZE (1u << HBITS)
static uint16_t htab[HSIZE]; /* index+1 into words, 0 = empty */

#include <pthread.h>
static pthread_once_t hash_once = PTHREAD_ONCE_INIT;

static uint32_t hash_word(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static void hash_build(void) {
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        uint32_t h = hash_word(words[i].w, strlen(words[i].w)) & (HSIZE - 1);
        while (htab[h]) h = (h + 1) & (HSIZE - 1);
        htab[h] = (uint16_t)(i + 1);
    }
}

static int word_class(const char *w, size_t n) {
    uint32_t h = hash_word(w, n) & (HSIZE - 1);
    while (htab[h]) {
        const word_def *d = &words[htab[h] - 1];
        if (strlen(d->w) == n && !memcmp(d->w, w, n)) return d->cls;
        h = (h + 1) & (HSIZE - 1);
    }
    return 0;
}

/* SQL keywords count only when written in capitals (SELECT ... FROM ...). */
static bool is_sql_word(const char *w, size_t n) {
    static const char *const kw[] = {"select", "from", "where", "insert", "group", "order", "update", "join", "values"};
    for (size_t i = 0; i < sizeof(kw) / sizeof(kw[0]); i++)
        if (strlen(kw[i]) == n && !memcmp(kw[i], w, n)) return true;
    return false;
}

static bool is_word_char(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '#' ||
           c == '+' || c == '!';
}

typedef struct {
    /* per-line state */
    int indent, chars, commas, tabs, pipes, colon_at, eq_at, quotes_colon;
    bool in_indent, starts_dash, starts_lt, starts_pipe, starts_bracket, key_ok, starts_hash, paren;
    char first, last, prev_last;
} line_state;

const char *pol_classify(const char *p, size_t len) {
    if (!p || !len) return "chat";
    pthread_once(&hash_once, hash_build);
    if (len > POL_CLASSIFY_SCAN) len = POL_CLASSIFY_SCAN;

    double code = 0, data = 0;
    int code_kw = 0, code_weak = 0, code_ask = 0, data_ask = 0, data_weak = 0, verbs = 0, uppercase_sql = 0;
    int kv_lines = 0, header_lines = 0, tsv_lines = 0, tsv_prev = -1;
    int lines = 0, code_end = 0, indented_after_open = 0, yaml_lines = 0, dash_lines = 0, table_lines = 0;
    int csv_lines = 0, csv_prev = -1, xml_lines = 0, json_pairs = 0, sentences = 0, fences = 0, comment_lines = 0;
    int sym = 0, op2 = 0, letters = 0, prev_indent = 0;
    char first_nonspace = 0, last_nonspace = 0;
    bool fence_data = false, fence_code = false;
    line_state ls = {0};
    ls.in_indent = true;

    char wbuf[24];
    size_t wn = 0;
    bool wlong = false, w_upper = true;

    for (size_t i = 0; i <= len; i++) {
        unsigned char c = i < len ? (unsigned char)p[i] : '\n';
        /* words */
        if (is_word_char(c)) {
            if (wn < sizeof(wbuf)) wbuf[wn++] = (char)((c >= 'A' && c <= 'Z') ? c + 32 : c);
            else wlong = true;
            if (c >= 'a' && c <= 'z') w_upper = false;
        } else if (wn) {
            while (wn > 1 && (wbuf[wn - 1] == '!' && wbuf[0] != 'p')) wn--;
            if (!wlong) {
                int cls = word_class(wbuf, wn);
                if (cls == W_CODE) code_kw++;
                else if (cls == W_CODE_WEAK) code_weak++;
                else if (cls == W_CODE_ASK) code_ask++;
                else if (cls == W_STRUCT_ASK) data_ask++;
                else if (cls == W_STRUCT_WEAK) data_weak++;
                else if (cls == W_VERB) verbs++;
                if (w_upper && wn >= 4 && is_sql_word(wbuf, wn)) uppercase_sql++;
            }
            wn = 0, wlong = false, w_upper = true;
        }
        if (c >= 'a' && c <= 'z') letters++;
        else if (c >= 'A' && c <= 'Z') letters++;
        /* characters */
        if (c == '{' || c == '}' || c == ';' || c == '(' || c == ')' || c == '[' || c == ']' || c == '=' || c == '<' ||
            c == '>')
            sym++;
        if (i + 1 < len) {
            char d = p[i + 1];
            if ((c == '=' && d == '=') || (c == '!' && d == '=') || (c == '-' && d == '>') || (c == '=' && d == '>') ||
                (c == ':' && d == ':') || (c == '&' && d == '&') || (c == '|' && d == '|') || (c == '+' && d == '+') ||
                (c == '/' && d == '/') || (c == '/' && d == '*') || (c == '+' && d == '='))
                op2++;
            if ((c == '.' || c == '?' || c == '!') && d == ' ' && i + 2 < len && p[i + 2] >= 'A' && p[i + 2] <= 'Z')
                sentences++;
            if (c == '"' && (d == ':' || (d == ' ' && i + 2 < len && p[i + 2] == ':'))) ls.quotes_colon++;
        }
        if (c == '`' && i + 2 < len && p[i + 1] == '`' && p[i + 2] == '`') {
            fences++;
            size_t j = i + 3, k = 0;
            char lang[8];
            while (j < len && k < sizeof(lang) - 1 && p[j] >= 'a' && p[j] <= 'z') lang[k++] = p[j++];
            lang[k] = 0;
            if (k) {
                if (!strcmp(lang, "json") || !strcmp(lang, "yaml") || !strcmp(lang, "yml") || !strcmp(lang, "csv") ||
                    !strcmp(lang, "xml") || !strcmp(lang, "toml"))
                    fence_data = true;
                else
                    fence_code = true;
            }
            i += 2;
            continue;
        }
        if (c != '\n') {
            if (c != ' ' && c != '\t' && c != '\r') {
                if (!first_nonspace) first_nonspace = (char)c;
                last_nonspace = (char)c;
            }
            if (ls.in_indent) {
                if (c == ' ') ls.indent++;
                else if (c == '\t') ls.indent += 4;
                else {
                    ls.in_indent = false;
                    ls.first = (char)c;
                    ls.starts_dash = c == '-' && i + 1 < len && p[i + 1] == ' ';
                    ls.starts_lt = c == '<';
                    ls.starts_pipe = c == '|';
                    ls.starts_bracket = c == '[';
                    ls.starts_hash = c == '#' || (c == '/' && i + 1 < len && p[i + 1] == '/');
                    ls.key_ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '"';
                }
            } else if (ls.key_ok && ls.colon_at == 0 && ls.eq_at == 0) {
                if (c == ':' && (i + 1 >= len || p[i + 1] == ' ' || p[i + 1] == '\n' || p[i + 1] == '\r'))
                    ls.colon_at = ls.chars + 1;
                else if (c == '=' && p[i - 1] == ' ' && i + 1 < len && p[i + 1] == ' ')
                    ls.eq_at = ls.chars + 1;
                else if (c == ' ' && i + 1 < len && p[i + 1] == '=') {
                    /* the space of "key = value" */
                } else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                           c == '-' || c == '"' || c == '.'))
                    ls.key_ok = false;
            }
            if (c == ',') ls.commas++;
            if (c == '\t') ls.tabs++;
            if (c == '(') ls.paren = true;
            if (c == '|') ls.pipes++;
            if (c != ' ' && c != '\t' && c != '\r') ls.last = (char)c;
            ls.chars++;
            continue;
        }
        /* end of line */
        if (ls.chars > 0 && !ls.in_indent) {
            lines++;
            char l = ls.last;
            if (l == ';' || l == '{' || l == '}' || (l == ')' && ls.first != '(') || (l == ':' && ls.indent == 0 && !ls.key_ok))
                code_end++;
            if (ls.indent >= 2 && ls.indent > prev_indent && (ls.prev_last == '{' || ls.prev_last == ':'))
                indented_after_open++;
            if (ls.key_ok && ls.colon_at > 0) yaml_lines++;
            if (ls.starts_dash) dash_lines++;
            if (ls.starts_pipe && ls.pipes >= 2) table_lines++;
            if (ls.starts_lt && l == '>') xml_lines++;
            if (ls.starts_hash) comment_lines++;
            if (ls.commas >= 1 && ls.commas == csv_prev) csv_lines++;
            csv_prev = ls.commas >= 1 ? ls.commas : -1;
            if (ls.tabs >= 1 && ls.tabs == tsv_prev) tsv_lines++;
            tsv_prev = ls.tabs >= 1 ? ls.tabs : -1;
            if (ls.key_ok && ls.eq_at > 0 && !ls.paren && l != ';') kv_lines++;
            if (ls.starts_bracket && l == ']' && ls.indent == 0 && !ls.commas) header_lines++;
            json_pairs += ls.quotes_colon;
            prev_indent = ls.indent;
            ls.prev_last = l;
        }
        char keep = ls.prev_last;
        memset(&ls, 0, sizeof(ls));
        ls.in_indent = true;
        ls.prev_last = keep;
    }

    /* code */
    code += 1.5 * code_kw + 0.4 * code_weak + 1.5 * (code_ask > 3 ? 3 : code_ask) + (code_ask && verbs ? 1.5 : 0);
    code += 1.5 * code_end + 1.0 * indented_after_open + 0.8 * op2 + 2.0 * uppercase_sql;
    if (fence_code) code += 5;
    if (letters > 0) {
        double density = (double)sym / (double)(letters + 1);
        if (density > 0.08) code += density > 0.28 ? 4 : 20 * (density - 0.08);
    }
    /* structured */
    data += 3.0 * (data_ask > 2 ? 2 : data_ask) + 1.0 * (data_weak > 3 ? 3 : data_weak);
    if (verbs && (data_ask || data_weak >= 2)) data += 1.5;
    data += 1.5 * json_pairs + 1.0 * yaml_lines + 0.5 * dash_lines * (yaml_lines > 0) + 1.5 * table_lines +
            1.5 * csv_lines + 1.5 * tsv_lines + 1.5 * xml_lines + 1.0 * kv_lines + 1.5 * header_lines;
    if (fence_data) data += 5;
    if ((first_nonspace == '{' && last_nonspace == '}') || (first_nonspace == '[' && last_nonspace == ']')) data += 4;
    if (first_nonspace == '<' && last_nonspace == '>') data += 3;
    /* a JSON payload has braces and quotes that look like code punctuation */
    if (json_pairs >= 2) code -= 0.6 * json_pairs + 1.5 * code_end;
    /* prose: many sentences and few lines favour chat */
    double prose = 0.6 * sentences;
    (void)comment_lines;
    (void)fences;
    (void)lines;
    const double threshold = 3.0;
    if (code - prose < threshold && data - prose < threshold) return "chat";
    return code >= data ? "code" : "structured";
}
