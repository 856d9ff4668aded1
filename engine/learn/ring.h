/* ring.h — the learning ring (issue 37): what `specd serve --learn` keeps of
 * served requests for the background trainer — each finished request's
 * tokens (prompt and output) and the target's tapped features of every
 * position it fed (the residual stream entering three layers, stored F16,
 * `width` = 3 x the target's width per position). Nothing else: no text, no
 * sampler settings, no client identity.
 *
 * Bounded: the samples' bytes never exceed the cap; a push that would drops
 * the oldest samples first (a sample larger than the cap alone is refused and
 * counted). Samples are immutable once pushed and reference-counted, so a
 * reader (the trainer) takes a snapshot under the lock and reads outside it;
 * a dropped sample's memory goes when its last reader releases it.
 *
 * Spill (optional): the ring is mirrored to an SQLite file (WAL, as the
 * telemetry database) by learn_ring_spill, which writes the samples pushed
 * since the last call and deletes the dropped ones in one transaction; a ring
 * created on an existing file loads its samples back (newest kept within the
 * cap). A file written for another target (its identity string differs) is
 * emptied with a message. A process killed at any point leaves the file at
 * its last committed transaction (SQLite's journal). One process per spill
 * file: PATH.lock is flock'ed while the ring is open, and a second ring on
 * the same file is refused.
 *
 * Threading: every function may be called from any thread (one mutex);
 * learn_ring_spill does its I/O outside that lock. */
#ifndef SPECD_LEARN_RING_H
#define SPECD_LEARN_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct learn_sample {
    uint64_t id;                /* 1, 2, ... in push order (kept across a spill reload) */
    double t;                   /* unix seconds of the push */
    int n;                      /* tokens */
    int width;                  /* features per position */
    const int32_t *tok;         /* (n) */
    const uint16_t *feat;       /* (n - 1, width) F16: position p's, for p < n - 1 (the last token was never fed) */
    size_t bytes;               /* what it counts against the cap */
    int refs;                   /* the ring's one plus readers' (atomic) */
    bool spilled;               /* in the spill file (under the ring's lock) */
} learn_sample;

typedef struct {
    int samples;
    int64_t positions;          /* sum of n - 1 */
    size_t bytes, cap;
    uint64_t pushed, dropped, refused; /* since creation: samples pushed, dropped for room, larger than the cap */
    uint64_t loaded;            /* samples read back from the spill file at creation */
    uint64_t spill_errors;
} learn_ring_stats;

typedef struct learn_ring learn_ring;

/* A ring of at most cap bytes for features of `width` per position. With
 * spill_path (NULL: memory only), the file is opened (created) and its
 * samples for target_id loaded. NULL with err when the file cannot be opened
 * or out of memory. */
learn_ring *learn_ring_create(size_t cap, int width, const char *spill_path, const char *target_id, char *err,
                              size_t errlen);
void learn_ring_destroy(learn_ring *r); /* accepts NULL; spills nothing more */
/* Copies one sample in: tokens (n) and features (n - 1, width) F16. Returns
 * 1, 0 when refused (n < 2, larger than the cap), -1 out of memory. */
int learn_ring_push(learn_ring *r, const int32_t *tok, int n, const uint16_t *feat);
/* A new cap; drops oldest samples until the ring fits. */
void learn_ring_set_cap(learn_ring *r, size_t cap);
/* References to every sample, oldest first, in *out (malloc'd; the caller
 * frees it after learn_ring_release). Returns how many, -1 out of memory. */
int learn_ring_snapshot(learn_ring *r, learn_sample ***out);
void learn_ring_release(learn_sample **s, int n);
void learn_ring_get_stats(learn_ring *r, learn_ring_stats *out);
/* Writes new samples to the spill file and deletes dropped ones (one
 * transaction). Returns the samples written, 0 without a spill file, -1 on
 * an I/O error (counted; the next call tries again). */
int learn_ring_spill(learn_ring *r);

#endif
