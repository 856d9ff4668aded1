/* stop.h — stop-string matching over streamed text. Text arrives in pieces
 * (one detokenized token at a time, so a stop string may straddle token
 * boundaries); the matcher passes through every byte that can no longer
 * begin a stop string and holds back the rest until it either completes a
 * stop string (the output then ends just before it) or cannot any more.
 * Byte-exact: no normalisation, no UTF-8 awareness (a held-back piece is
 * released whole, so it never splits what the caller fed).
 *
 * One matcher per request; not thread-safe (the engine thread owns it). */
#ifndef SPECD_ENGINE_STOP_H
#define SPECD_ENGINE_STOP_H

#include <stdbool.h>

#define STOP_MAX 4   /* stop strings per matcher */
#define STOP_LEN 64  /* bytes per stop string, with its NUL */

typedef struct {
    char stop[STOP_MAX][STOP_LEN];
    int n_stop;
    char hold[STOP_LEN * 2];     /* text held back: may be the start of a stop string */
    int hold_len;
} stop_matcher;

/* An empty matcher (no stop strings: everything passes through at once). */
void stop_init(stop_matcher *m);
/* Adds stop string s. Returns 0, or -1 when s is empty, longer than
 * STOP_LEN - 1 bytes or the matcher already holds STOP_MAX strings. */
int stop_add(stop_matcher *m, const char *s);
/* Feeds n bytes of s. Appends to out (at *out_len, never past out_cap;
 * bytes beyond it are dropped) everything that can no longer be part of a
 * stop string. Returns true when a stop string completed: out then ends just
 * before it, nothing is held, and the rest of s is ignored. */
bool stop_feed(stop_matcher *m, const char *s, int n, char *out, int *out_len, int out_cap);
/* Moves whatever is held back to out (the stream ended without a stop). */
void stop_flush(stop_matcher *m, char *out, int *out_len, int out_cap);

#endif
