/* util.h — small helpers shared by the CLI subcommands: argument parsing with
 * clear errors, wall-clock time, sorting and medians of measurements, JSON
 * string output, the engine-notify waker, load-failure reports. */
#ifndef SPECD_CLI_UTIL_H
#define SPECD_CLI_UTIL_H

#include "engine/engine.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

double now_ms(void); /* kernels/clock.h's monotonic clock */

/* Wakes a CLI thread that polls the engine: engine_request.notify =
 * cli_waker_notify, .user = the waker (any thread calls it); the polling thread
 * waits for a notify it has not seen yet. Initialise mu and cv (statically or
 * with pthread_*_init) and gen = 0. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t gen;              /* notifies so far */
} cli_waker;

void cli_waker_notify(void *user);
/* Returns once a notify newer than *seen has come (timeout_ms < 0: however
 * long that takes) or after timeout_ms; sets *seen to the notifies so far. */
void cli_waker_wait(cli_waker *w, uint64_t *seen, int timeout_ms);

/* Sorts v ascending and returns its median (n >= 1). */
double sort_median(double *v, int n);
/* Sorts v ascending. */
void sort_doubles(double *v, int n);

/* Parse helpers: on a bad value they print "specd CMD: bad value for FLAG: VAL"
 * and exit(2). `i` is advanced past the value. */
const char *arg_str(int argc, char **argv, int *i);
long arg_long(int argc, char **argv, int *i, long lo, long hi);
double arg_double(int argc, char **argv, int *i, double lo, double hi);
uint64_t arg_u64(int argc, char **argv, int *i);
/* --backend VALUE: auto | cpu | cuda, as a backend_kind. */
int arg_backend(int argc, char **argv, int *i);
/* --kv-type f32|f16: the KV cache's element type as engine_config.kv_type
 * holds it, 0 or 1 (kernels/backend.h's KV_F32 / KV_F16; cli/ may not include
 * that header, tests/check_layers.py). */
int arg_kv_type(int argc, char **argv, int *i);

/* The last branch of a `specd CMD` option parser: arg is nothing it knows.
 * Prints "specd CMD: unknown option 'ARG' (did you mean '--xyz'?)" on stderr
 * (an argument not starting with '-': "unexpected argument"), then where the
 * options are listed, and returns 2 for the caller to return. The candidates
 * are the options the usage text names (every word in it that starts with
 * '-'), so --help and the suggestion never disagree; usage(f) writes that text
 * (it is captured, not shown). The suggestion is cli_suggest_option's. */
int cli_unknown_option(const char *cmd, const char *arg, void (*usage)(FILE *));
/* The option named in text closest to arg, or NULL: compared without their
 * leading dashes, case-folded; an edit distance (a swap of neighbours counts one) of at most 0 (arg of up to 2
 * characters), 1 (up to 5) or 2, else one a prefix of the other (the shorter
 * at least 3 characters). Writes it into out (len bytes). */
const char *cli_suggest_option(const char *arg, const char *text, char *out, size_t len);

/* The name among names[0..n) closest to word by the same rule (NULL when
 * none is close): "did you mean 'serve'?" for a mistyped subcommand. */
const char *cli_suggest_word(const char *word, const char *const *names, int n);

/* Writes s (len bytes) as a JSON string literal, escaping as needed. */
void json_write_str(FILE *f, const char *s, size_t len);

/* Reads all of stdin into a malloc'd NUL-terminated buffer (caller frees). */
char *read_all_stdin(size_t *len);
/* Reads the whole file at path the same way; NULL when it cannot be opened or read. */
char *read_file(const char *path, size_t *len);

/* A failed load (engine_create, spec_pair_load, model_load, ...) of `specd CMD`
 * on stderr: "specd CMD: err", and when st says memory ran out
 * (ENGINE_ERR_OOM) a second line with what to lower (oom_hint, one of the
 * CLI_OOM_HINT_* below). The decision is the status's, never the message's. */
/* Ctrl-C for the training commands: cli_catch_sigint makes SIGINT set
 * cli_interrupted (which a trainer polls through its `stop` pointer) and
 * keeps the old action in *old; cli_restore_sigint puts it back, and does
 * nothing for an *old still at CLI_SIGINT_NONE (never caught). */
#define CLI_SIGINT_NONE {.sa_handler = SIG_ERR}
extern volatile sig_atomic_t cli_interrupted;
void cli_catch_sigint(struct sigaction *old);
void cli_restore_sigint(const struct sigaction *old);

void cli_load_failed(const char *cmd, engine_status st, const char *err, const char *oom_hint);
#define CLI_OOM_HINT_CONFIG                                                                                          \
    "lower engine.kv_blocks, engine.max_running or engine.max_ctx (config.yaml), drop the draft, or use a smaller " \
    "or more quantized model"
#define CLI_OOM_HINT_MODEL "use a smaller or more quantized model, or free memory on the device"

#endif
