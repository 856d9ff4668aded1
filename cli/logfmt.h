/* logfmt.h — `--log-format json`: every line any part of specd writes to
 * stderr (gateway, engine, libwebsockets) becomes one JSON object
 * {"ts":"2026-01-01T12:00:00.123Z","pid":N,"msg":"..."} for log
 * shippers (journald, Loki, ...). Done with a pipe over fd 2 and a reader
 * thread, so no module's logging call changes. Call once, early, from the
 * main thread; the lines still in flight are written at exit. */
#ifndef SPECD_CLI_LOGFMT_H
#define SPECD_CLI_LOGFMT_H

/* Returns 0, or -1 (errno set) when the pipe or thread cannot be made; stderr
 * is then left as it was. */
int logfmt_json_start(void);

#endif
