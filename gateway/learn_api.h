/* learn_api.h — the serving surface of learning from traffic (issue 37): the
 * "learn" object that /api/stats, POST /admin/learn and the monitor feed show
 * (engine_get_learn_stats), and the admin operation's body and answer.
 *
 *   POST /admin/learn  {"op": "pause"|"resume"|"save"|"rollback"|"status", "path": "..." (save only)}
 *     200 {"ok": true, "message": "...", "learn": {...}}
 *     400 {"ok": false, "code": "...", "message": "..."}    a body that is not such an object
 *     409 {"ok": false, "code": "learn_refused", "message": "...", "learn": {...}}
 *                                                         the engine refused (learning off, no head,
 *                                                         nothing to roll back to, the copy failed)
 * The caller has checked the admin token; "status" changes nothing.
 *
 * Socket-free; any thread (the engine calls are any-thread). */
#ifndef SPECD_GATEWAY_LEARN_API_H
#define SPECD_GATEWAY_LEARN_API_H

#include "engine/engine.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* The most bytes of a POST /admin/learn body (a larger one is 413). */
#define GW_LEARN_BODY_MAX 4096
/* The longest "path" of a save. */
#define GW_LEARN_PATH_MAX 1000

/* The learning figures of ls as a JSON object (caller owns it): enabled,
 * paused, state, head_version, has_head, ring {samples, positions, bytes,
 * cap, pushed, dropped}, opted_out, swaps, rejected, rollbacks,
 * train_positions, train_pos_per_s, train_cpu_share, rounds, live_accept,
 * cand_accept, eval_rows, message; with admin also head_path (a file name of
 * the server's). NULL when out of memory. */
json_t *gw_learn_json(const engine_learn_stats *ls, bool admin);

/* Runs one POST /admin/learn body (len bytes, not NUL-terminated) on e and
 * returns the malloc'd JSON answer with *status set (see above); NULL only
 * when out of memory. */
char *gw_learn_admin(engine *e, const char *body, size_t len, int *status);

#endif
