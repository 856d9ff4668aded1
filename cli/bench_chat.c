/* bench_chat.c — `specd bench --multi-turn C`: the chat workload of prefix KV
 * reuse (issue 20). C conversations x T turns; every turn renders the whole
 * conversation so far (earlier user messages and the model's answers) plus a
 * new user message of 40..80 corpus tokens through the model's chat template,
 * as the chat page and /v1/chat/completions do, and generates up to N tokens
 * greedily. The same workload runs with the prefix cache used and opted out
 * (engine_request.no_prefix_cache: nothing reused, nothing left behind) in
 * alternating order over R rounds, each round on fresh corpus text, in one
 * engine. Prints per turn index TTFT p50/p99 (every round's samples pooled,
 * and the range of the per-round p50s), the prompt tokens and those the
 * target prefilled, the hit rate per pool, tokens/s and the on/off ratios per
 * round. Greedy: the answers must be equal with the cache on and off, and
 * that is checked and reported. A benchmark: it asserts nothing about speed. */
#include "cli/cmd.h"
#include "cli/datadir.h"
#include "cli/util.h"
#include "engine/engine.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

int bench_chat(int argc, char **argv);

#define BC_MAX_CONV 64
#define BC_MAX_TURNS 16
#define BC_MAX_ROUNDS 16
#define BC_MSG_MAX 4096   /* bytes of one message */

/* ---- user messages from a corpus --------------------------------------------- */

typedef struct {
    char *text;       /* the whole corpus, newlines turned into spaces */
    size_t len;
} bc_corpus;

static int bc_corpus_load(bc_corpus *c, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    c->text = n > 0 ? malloc((size_t)n + 1) : NULL;
    c->len = c->text ? fread(c->text, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!c->text || c->len < 1000) return -1;
    for (size_t i = 0; i < c->len; i++)
        if (c->text[i] == '\n' || c->text[i] == '\r' || c->text[i] == '\t') c->text[i] = ' ';
    c->text[c->len] = '\0';
    return 0;
}

/* A message of at least n_tokens tokens (without BOS): whole words of the
 * corpus from a word start at or after `at` (wrapping). */
static void bc_message(const bc_corpus *c, const engine *e, size_t at, int n_tokens, char *out, size_t cap) {
    size_t p = at % c->len;
    while (p < c->len && c->text[p] != ' ') p++; /* the next word start */
    while (p < c->len && c->text[p] == ' ') p++;
    if (p >= c->len) p = 0;
    size_t o = 0;
    int32_t ids[1024];
    while (o + 64 < cap) {
        size_t q = p;
        while (q < c->len && c->text[q] == ' ') q++;
        while (q < c->len && c->text[q] != ' ') q++;
        if (q == p) { /* the end: wrap */
            p = 0;
            continue;
        }
        size_t wl = q - p;
        if (o + wl + 1 >= cap) break;
        memcpy(out + o, c->text + p, wl);
        o += wl;
        out[o] = '\0';
        p = q;
        size_t s = 0;
        while (s < o && out[s] == ' ') s++;
        int k = engine_tokenize(e, out + s, o - s, false, false, ids, 1024);
        if (k < 0 || k >= n_tokens) break;
    }
    size_t s = 0;
    while (s < o && out[s] == ' ') s++;
    memmove(out, out + s, o - s + 1);
}

/* ---- one pass of the workload -------------------------------------------------- */

typedef struct {
    int conv, turns, n_tokens, user_min, user_max;
    bool concurrent, spec;
    const char *system;
    chat_template_kind tmpl;
    char bos_text[32];
} bc_opts;

typedef struct {
    double ttft[BC_MAX_TURNS][BC_MAX_CONV];  /* ms */
    uint64_t prompt[BC_MAX_TURNS], prefilled[BC_MAX_TURNS]; /* target tokens per turn index */
    uint64_t offered[2], reused[2];          /* per pool, [0] target [1] draft */
    uint64_t generated, drafted, accepted;  /* output tokens; draft tokens proposed and accepted */
    double wall_ms;
    uint64_t answer_hash[BC_MAX_TURNS][BC_MAX_CONV];
    int errors;
} bc_pass;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

typedef struct {
    chat_msg msgs[2 * BC_MAX_TURNS + 1];
    char *store[2 * BC_MAX_TURNS + 1];      /* owned message texts */
    int n;
} bc_conv;

/* Runs every conversation's T turns; round seeds the corpus positions so a
 * round's two passes send the same user messages. */
static int bc_run(engine *e, const bc_opts *o, const bc_corpus *corp, int round, bool cache, cli_waker *w,
                  bc_pass *res) {
    memset(res, 0, sizeof(*res));
    static bc_conv cv[BC_MAX_CONV];
    char err[512];
    int rc = 0;
    for (int k = 0; k < o->conv; k++) {
        cv[k].n = 0;
        if (o->system) cv[k].msgs[cv[k].n] = (chat_msg){"system", o->system}, cv[k].store[cv[k].n++] = NULL;
    }
    double t0 = now_ms();
    for (int t = 0; t < o->turns && rc == 0; t++) {
        /* the turn of each conversation: a batch of all (concurrent) or one at a time */
        for (int k0 = 0; k0 < o->conv && rc == 0; k0 += o->concurrent ? o->conv : 1) {
            int k1 = o->concurrent ? o->conv : k0 + 1;
            uint64_t ids[BC_MAX_CONV] = {0};
            bool done[BC_MAX_CONV] = {false};
            static char answer[BC_MAX_CONV][BC_MSG_MAX];
            size_t alen[BC_MAX_CONV] = {0};
            for (int k = k0; k < k1; k++) {
                bc_conv *c = &cv[k];
                int span = o->user_max - o->user_min + 1;
                int n_user = o->user_min + (int)((unsigned)(k * 7 + t * 13 + round * 5) % (unsigned)span);
                char *msg = malloc(BC_MSG_MAX);
                if (!msg) return -1;
                size_t at = (size_t)(round * 1000003u + (unsigned)k * 104729u + (unsigned)t * 7919u) * 13u;
                bc_message(corp, e, at, n_user, msg, BC_MSG_MAX);
                c->store[c->n] = msg;
                c->msgs[c->n++] = (chat_msg){"user", msg};
                /* the whole conversation through the template, as the gateway renders it */
                int need = chat_render(o->tmpl, c->msgs, c->n, true, o->bos_text, NULL, 0);
                char *text = need >= 0 ? malloc((size_t)need + 1) : NULL;
                tok_span spans[4 * BC_MAX_TURNS + 4];
                int n_spans = 0;
                if (!text || chat_render_spans(o->tmpl, c->msgs, c->n, true, o->bos_text, text, (size_t)need + 1,
                                               spans, (int)(sizeof spans / sizeof spans[0]), &n_spans) < 0) {
                    free(text);
                    fprintf(stderr, "specd bench: cannot render the chat template\n");
                    return -1;
                }
                engine_request r = {0};
                r.prompt_text = text;
                r.special_spans = spans;
                r.n_special_spans = n_spans;
                r.sc = sampler_config_default();
                r.sc.temperature = 0.0f;
                r.seed = 1;
                r.max_tokens = o->n_tokens;
                r.mode = o->spec ? SPEC_MODE_AUTO : SPEC_MODE_OFF;
                r.no_prefix_cache = !cache;
                r.content_type = "chat";
                r.notify = cli_waker_notify;
                r.user = w;
                engine_submit(e, &r, &ids[k], err, sizeof(err));
                free(text);
                if (!ids[k]) {
                    fprintf(stderr, "specd bench: submit: %s\n", err);
                    return -1;
                }
            }
            int left = k1 - k0;
            uint64_t seen = 0;
            while (left > 0) {
                for (int k = k0; k < k1; k++) {
                    engine_event ev;
                    while (!done[k] && engine_poll(e, ids[k], &ev) == 1) {
                        if (ev.type == ENGINE_EV_TOKENS && alen[k] + (size_t)ev.text_len < BC_MSG_MAX) {
                            memcpy(answer[k] + alen[k], ev.text, (size_t)ev.text_len);
                            alen[k] += (size_t)ev.text_len;
                        } else if (ev.type == ENGINE_EV_STARTED) {
                            res->prompt[t] += (uint64_t)ev.prompt_tokens;
                        } else if (ev.type == ENGINE_EV_FINISHED || ev.type == ENGINE_EV_ERROR) {
                            done[k] = true;
                            left--;
                            if (ev.type == ENGINE_EV_ERROR) {
                                fprintf(stderr, "specd bench: conversation %d turn %d: %s\n", k, t + 1, ev.message);
                                res->errors++;
                                rc = -1;
                            }
                            res->ttft[t][k] = ev.ttft_ms;
                            res->prefilled[t] += ev.st.prefill_tokens;
                            res->offered[0] += ev.st.prefix_offered, res->reused[0] += ev.st.prefix_reused;
                            res->offered[1] += ev.st.prefix_draft_offered;
                            res->reused[1] += ev.st.prefix_draft_reused;
                            res->generated += (uint64_t)ev.completion_tokens;
                            res->drafted += ev.st.drafted, res->accepted += ev.st.accepted;
                        }
                    }
                }
                if (left > 0) cli_waker_wait(w, &seen, 20);
            }
            /* the answers join their conversations */
            for (int k = k0; k < k1; k++) {
                bc_conv *c = &cv[k];
                answer[k][alen[k]] = '\0';
                res->answer_hash[t][k] = fnv(0xcbf29ce484222325ull, answer[k], alen[k]);
                char *a = strdup(answer[k]);
                if (!a) return -1;
                c->store[c->n] = a;
                c->msgs[c->n++] = (chat_msg){"assistant", a};
            }
        }
    }
    res->wall_ms = now_ms() - t0;
    for (int k = 0; k < o->conv; k++)
        for (int i = 0; i < cv[k].n; i++) free(cv[k].store[i]);
    return rc;
}

/* ---- report -------------------------------------------------------------------- */

static double bc_pct(const double *v, int n, double p) {
    double *s = malloc(sizeof(double) * (size_t)n);
    if (!s) return 0;
    memcpy(s, v, sizeof(double) * (size_t)n);
    sort_doubles(s, n);
    int k = (int)(p * (n - 1) + 0.5);
    double r = s[k < n ? k : n - 1];
    free(s);
    return r;
}

static double bc_load1(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

static void bc_usage(FILE *f) {
    fprintf(f,
            "usage: specd bench --multi-turn C -m TARGET.gguf [--draft DRAFT.gguf] [--turns T (6)] [-n TOKENS (64)]\n"
            "                   [--user-tokens MIN,MAX (40,80)] [--rounds R (2)] [--concurrent] [--no-spec]\n"
            "                   [--system TEXT] [--prompts CORPUS] [-t THREADS (2)] [--kv-blocks N] [--json]\n"
            "  C chat conversations x T turns through the model's chat template, each turn resending the\n"
            "  history plus a new user message; the prefix cache used and opted out in alternating order,\n"
            "  R rounds. --concurrent: each turn of all conversations at once (default: one after another);\n"
            "  --kv-blocks: blocks per model pool (default: room for every conversation's history)\n"
            "  --prompts CORPUS: the user messages' text (default: the prompts.txt installed with specd, or\n"
            "  $SPECD_MODELS/corpora/tinystories_valid_30K.txt when $SPECD_MODELS is set)\n");
}

int bench_chat(int argc, char **argv) {
    const char *target = NULL, *draft = NULL, *corpus_path = NULL;
    bc_opts o = {.conv = 8, .turns = 6, .n_tokens = 64, .user_min = 40, .user_max = 80, .spec = true};
    int rounds = 2, threads = 2, kv_blocks = 0;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--multi-turn")) o.conv = (int)arg_long(argc, argv, &i, 1, BC_MAX_CONV);
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) target = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--draft")) draft = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--turns")) o.turns = (int)arg_long(argc, argv, &i, 1, BC_MAX_TURNS);
        else if (!strcmp(a, "-n")) o.n_tokens = (int)arg_long(argc, argv, &i, 1, 512);
        else if (!strcmp(a, "--user-tokens")) {
            const char *v = arg_str(argc, argv, &i);
            if (sscanf(v, "%d,%d", &o.user_min, &o.user_max) != 2 || o.user_min < 1 || o.user_max < o.user_min ||
                o.user_max > 512) {
                fprintf(stderr, "specd bench: bad value for --user-tokens: %s (MIN,MAX, 1 <= MIN <= MAX <= 512)\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--rounds")) rounds = (int)arg_long(argc, argv, &i, 1, BC_MAX_ROUNDS);
        else if (!strcmp(a, "--concurrent")) o.concurrent = true;
        else if (!strcmp(a, "--no-spec")) o.spec = false;
        else if (!strcmp(a, "--system")) o.system = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--prompts")) corpus_path = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) threads = (int)arg_long(argc, argv, &i, 0, 1024);
        else if (!strcmp(a, "--kv-blocks")) kv_blocks = (int)arg_long(argc, argv, &i, 1, 1 << 24);
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bc_usage(stdout);
            return 0;
        } else
            return cli_unknown_option("bench", a, bc_usage);
    }
    if (!target) {
        bc_usage(stderr);
        return 2;
    }
    char defpath[1024];
    if (!corpus_path) {
        /* the test suite's corpus when $SPECD_MODELS names the shared models, else the prompts installed with specd */
        const char *dir = getenv("SPECD_MODELS");
        if (dir && *dir) snprintf(defpath, sizeof(defpath), "%s/corpora/tinystories_valid_30K.txt", dir);
        if ((!dir || !*dir || access(defpath, R_OK) != 0) && cli_data_file("prompts.txt", defpath, sizeof(defpath)) != 0) {
            fprintf(stderr, "specd bench: no corpus (looked in %s): give one with --prompts FILE\n", defpath);
            return 2;
        }
        corpus_path = defpath;
    }
    bc_corpus corp = {0};
    if (bc_corpus_load(&corp, corpus_path) != 0) {
        fprintf(stderr, "specd bench: cannot read the corpus %s\n", corpus_path);
        free(corp.text);
        return 1;
    }
    engine_config cfg = engine_config_default();
    cfg.target_path = target;
    cfg.draft_path = draft;
    cfg.threads = threads;
    cfg.max_running = o.concurrent ? o.conv : 1;
    /* the last turn's history: every user message, every answer, the template's markup */
    cfg.max_ctx = o.turns * (o.user_max + o.n_tokens + 48) + (o.system ? 256 : 0) + 64;
    /* room for every conversation's history at once, as a server whose pool
     * holds its users' chats (engine.kv_blocks); --kv-blocks to shrink it */
    cfg.kv_blocks = kv_blocks > 0 ? kv_blocks : (o.conv + 1) * ((cfg.max_ctx + GAMMA_MAX + 2) / 16 + 2);
    cfg.prefix_cache = true; /* the off passes opt out per request */
    char err[1024];
    engine_status est;
    engine *e = engine_create(&cfg, &est, err, sizeof(err));
    if (!e) {
        cli_load_failed("bench", est, err, "lower --kv-blocks or --multi-turn, or use a smaller model");
        free(corp.text);
        return 1;
    }
    engine_info info;
    engine_get_info(e, &info);
    o.tmpl = (chat_template_kind)info.chat_template;
    memcpy(o.bos_text, info.bos_text, sizeof(o.bos_text));
    engine_stats st;
    engine_get_stats(e, &st);
    cli_waker w = {.gen = 0};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);

    double load0 = bc_load1();
    /* warm-up: one short conversation, opted out */
    bc_opts wo = o;
    wo.conv = 1, wo.turns = 1, wo.n_tokens = 8;
    static bc_pass warm, pass[BC_MAX_ROUNDS][2]; /* [round][0 off, 1 on] */
    int rc = bc_run(e, &wo, &corp, BC_MAX_ROUNDS + 1, false, &w, &warm) ? 1 : 0;
    bool same = true;
    for (int r = 0; r < rounds && rc == 0; r++)
        for (int j = 0; j < 2 && rc == 0; j++) {
            int on = (r % 2 == 0) ? j : 1 - j; /* off first in even rounds, on first in odd ones */
            if (bc_run(e, &o, &corp, r, on == 1, &w, &pass[r][on]) != 0) rc = 1;
        }
    double load1 = bc_load1();
    if (rc == 0)
        for (int r = 0; r < rounds; r++)
            for (int t = 0; t < o.turns; t++)
                for (int k = 0; k < o.conv; k++) same &= pass[r][0].answer_hash[t][k] == pass[r][1].answer_hash[t][k];

    /* pooled per-turn samples and per-round figures */
    int C = o.conv, R = rounds, T = o.turns;
    double *pool = malloc(sizeof(double) * (size_t)(C * R));
    double p50[2][BC_MAX_TURNS], p99[2][BC_MAX_TURNS], lo[2][BC_MAX_TURNS], hi[2][BC_MAX_TURNS];
    uint64_t prompt[BC_MAX_TURNS] = {0}, pre[2][BC_MAX_TURNS] = {{0}}, pre_all[2] = {0}, prompt_all = 0;
    uint64_t off_all[2] = {0}, reu_all[2] = {0}, drafted[2] = {0}, accepted[2] = {0};
    double tps[2][BC_MAX_ROUNDS];
    for (int m = 0; m < 2 && pool && rc == 0; m++) {
        for (int t = 0; t < T; t++) {
            lo[m][t] = 1e300, hi[m][t] = 0;
            for (int r = 0; r < R; r++) {
                memcpy(pool + r * C, pass[r][m].ttft[t], sizeof(double) * (size_t)C);
                double rp = bc_pct(pass[r][m].ttft[t], C, 0.5);
                lo[m][t] = rp < lo[m][t] ? rp : lo[m][t];
                hi[m][t] = rp > hi[m][t] ? rp : hi[m][t];
                pre[m][t] += pass[r][m].prefilled[t];
                if (m == 1) prompt[t] += pass[r][m].prompt[t];
            }
            p50[m][t] = bc_pct(pool, C * R, 0.5);
            p99[m][t] = bc_pct(pool, C * R, 0.99);
            pre_all[m] += pre[m][t];
            if (m == 1) prompt_all += prompt[t];
        }
        for (int r = 0; r < R; r++) {
            tps[m][r] = pass[r][m].wall_ms > 0 ? pass[r][m].generated / (pass[r][m].wall_ms / 1e3) : 0;
            drafted[m] += pass[r][m].drafted, accepted[m] += pass[r][m].accepted;
            if (m == 1)
                for (int q = 0; q < 2; q++) off_all[q] += pass[r][m].offered[q], reu_all[q] += pass[r][m].reused[q];
        }
    }
    double ratio[BC_MAX_ROUNDS];
    for (int r = 0; r < R; r++) ratio[r] = tps[0][r] > 0 ? tps[1][r] / tps[0][r] : 0;
    double ratio_sorted[BC_MAX_ROUNDS];
    memcpy(ratio_sorted, ratio, sizeof(double) * (size_t)R);
    double ratio_med = rc == 0 ? sort_median(ratio_sorted, R) : 0;
    double hit_t = off_all[0] ? (double)reu_all[0] / (double)off_all[0] : 0;
    double hit_d = off_all[1] ? (double)reu_all[1] / (double)off_all[1] : 0;

    if (rc == 0 && pool && json) {
        printf("{\"conversations\":%d,\"turns\":%d,\"rounds\":%d,\"tokens\":%d,\"concurrent\":%s,\"speculation\":%s,"
               "\"template\":\"%s\",\"load_before\":%.2f,\"load_after\":%.2f,\"outputs_identical\":%s,\"per_turn\":[",
               C, T, R, o.n_tokens, o.concurrent ? "true" : "false", o.spec ? "true" : "false",
               chat_template_name(o.tmpl), load0, load1, same ? "true" : "false");
        for (int t = 0; t < T; t++)
            printf("%s{\"turn\":%d,\"prompt_tokens\":%llu,\"prefilled_off\":%llu,\"prefilled_on\":%llu,"
                   "\"ttft_p50_off\":%.3f,\"ttft_p50_on\":%.3f,\"ttft_p99_off\":%.3f,\"ttft_p99_on\":%.3f,"
                   "\"round_p50_off\":[%.3f,%.3f],\"round_p50_on\":[%.3f,%.3f]}",
                   t ? "," : "", t + 1, (unsigned long long)prompt[t], (unsigned long long)pre[0][t],
                   (unsigned long long)pre[1][t], p50[0][t], p50[1][t], p99[0][t], p99[1][t], lo[0][t], hi[0][t],
                   lo[1][t], hi[1][t]);
        printf("],\"prompt_tokens\":%llu,\"prefilled_off\":%llu,\"prefilled_on\":%llu,\"hit_rate_target\":%.4f,"
               "\"hit_rate_draft\":%.4f,\"tok_s_off\":[",
               (unsigned long long)prompt_all, (unsigned long long)pre_all[0], (unsigned long long)pre_all[1], hit_t,
               hit_d);
        for (int r = 0; r < R; r++) printf("%s%.2f", r ? "," : "", tps[0][r]);
        printf("],\"tok_s_on\":[");
        for (int r = 0; r < R; r++) printf("%s%.2f", r ? "," : "", tps[1][r]);
        printf("],\"tok_s_ratio_median\":%.4f,\"drafted_off\":%llu,\"drafted_on\":%llu,\"accepted_off\":%llu,"
               "\"accepted_on\":%llu}\n",
               ratio_med, (unsigned long long)drafted[0], (unsigned long long)drafted[1],
               (unsigned long long)accepted[0], (unsigned long long)accepted[1]);
    } else if (rc == 0 && pool) {
        printf("target %s (%s)%s%s; chat template %s; %d threads\n", target, st.target_id, draft ? ", draft " : "",
               draft ? draft : "", chat_template_name(o.tmpl), threads);
        printf("%d conversations x %d turns, user messages of %d..%d tokens, %d generated a turn (greedy, speculation %s),"
               " %s; %d rounds alternating cache off/on; load average %.2f -> %.2f\n\n",
               C, T, o.user_min, o.user_max, o.n_tokens, o.spec ? "auto" : "off",
               o.concurrent ? "each turn of all conversations at once" : "one conversation's turn after another", R,
               load0, load1);
        printf("turn  prompt tok  prefilled off     on   TTFT ms p50 off      on    p99 off      on   round p50s off / on\n");
        for (int t = 0; t < T; t++)
            printf("%4d  %10llu  %13llu %6llu  %15.2f %7.2f %10.2f %7.2f   %.1f-%.1f / %.1f-%.1f\n", t + 1,
                   (unsigned long long)prompt[t], (unsigned long long)pre[0][t], (unsigned long long)pre[1][t],
                   p50[0][t], p50[1][t], p99[0][t], p99[1][t], lo[0][t], hi[0][t], lo[1][t], hi[1][t]);
        printf("\nprompt tokens %llu; target prefilled: off %llu, on %llu (%.2fx less); hit rate target %.1f%%, "
               "draft %.1f%%\n",
               (unsigned long long)prompt_all, (unsigned long long)pre_all[0], (unsigned long long)pre_all[1],
               pre_all[1] ? (double)pre_all[0] / (double)pre_all[1] : 0.0, 100 * hit_t, 100 * hit_d);
        printf("tokens/s per round off / on:");
        for (int r = 0; r < R; r++) printf(" %.1f/%.1f", tps[0][r], tps[1][r]);
        printf("; on/off median %.3f (rounds:", ratio_med);
        for (int r = 0; r < R; r++) printf(" %.3f", ratio[r]);
        printf(")\ndraft tokens proposed / accepted: off %llu / %llu, on %llu / %llu\n", (unsigned long long)drafted[0],
               (unsigned long long)accepted[0], (unsigned long long)drafted[1], (unsigned long long)accepted[1]);
        printf("answers with the cache on equal those with it off: %s\n", same ? "yes" : "NO");
        printf("(TTFT samples of all rounds pooled per turn; prompt and prefilled tokens summed over rounds)\n");
    }
    if (rc == 0 && !same) rc = 1; /* greedy answers must not depend on the cache */
    free(pool);
    engine_destroy(e);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    free(corp.text);
    return rc;
}
