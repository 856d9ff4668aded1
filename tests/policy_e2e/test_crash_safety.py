# test_crash_safety.py — kill -9 `specd serve` while 64 concurrent streams keep
# its telemetry writer busy: the database must open, pass PRAGMA
# integrity_check and hold the rows committed before the kill; the server
# must restart on the same database (ready line, a request works), and after a
# clean SIGTERM the new session and its steps are recorded intact.
import asyncio
import os
import sqlite3
import threading
import time

from pe2e import check, gen_msg, main, make_config, run_batch, Server, story_prompts, tmpdir, with_server, \
    write_file, ws_connect

N_SOCK, PER_SOCK, MAX_TOKENS = 8, 8, 200
MIN_WRITTEN = 15000  # step rows committed before the kill: the writer is mid-stream, not idle


async def heavy(srv, reqs, stop):
    """Sockets resend their requests until the server dies under them."""
    async def sock(k):
        mine = reqs[k * PER_SOCK:(k + 1) * PER_SOCK]
        try:
            async with ws_connect(srv) as ws:
                while not stop.is_set():
                    await run_batch(ws, mine, timeout=60)
        except Exception:
            if not stop.is_set():
                raise

    await asyncio.gather(*[sock(k) for k in range(N_SOCK)])


def integrity(db):
    """Opens the database as any SQLite client would (WAL recovery included)
    and returns (integrity_check rows, sessions, steps)."""
    c = sqlite3.connect(db, timeout=10)
    try:
        ic = c.execute("PRAGMA integrity_check").fetchall()
        n_sess = c.execute("SELECT COUNT(*) FROM speculation_sessions").fetchone()[0]
        n_steps = c.execute("SELECT COUNT(*) FROM speculation_steps").fetchone()[0]
        mode = c.execute("PRAGMA journal_mode").fetchone()[0]
        # the writer counts a session's end (an UPDATE) and a policy table's head as rows too
        n_ended = c.execute("SELECT COUNT(*) FROM speculation_sessions WHERE status != 'active'").fetchone()[0]
        n_policy = c.execute("SELECT COUNT(*) FROM gamma_policy").fetchone()[0] + 1
    finally:
        c.close()
    return ic, n_sess, n_steps, mode, n_sess + n_steps + n_ended + n_policy


def run():
    d = tmpdir("specd-pe2e-crash-")
    text, db = make_config(d, sample_rate="1.0")
    cfg = os.path.join(d, "config.yaml")
    write_file(cfg, text)
    srv = Server(d, cfg).start()
    prompts = story_prompts(N_SOCK * PER_SOCK)
    reqs = [("c%d" % i, gen_msg("c%d" % i, prompts[i], MAX_TOKENS, 0.7 if i % 2 else 0, seed=i,
                                content_type=("chat", "code")[i % 2])) for i in range(N_SOCK * PER_SOCK)]

    def body():
        stop = threading.Event()
        seen = {}

        def killer():
            deadline = time.monotonic() + 30
            try:
                while time.monotonic() < deadline:
                    st = srv.stats()
                    seen.update(st)
                    if st["telemetry"]["written"] >= MIN_WRITTEN and st["running"] >= 8:
                        break
                    time.sleep(0.02)
            finally:
                stop.set()
                srv.kill()  # SIGKILL: no flush, no shutdown path
        t = threading.Thread(target=killer)
        t.start()
        asyncio.run(heavy(srv, reqs, stop))
        t.join()
        check(seen.get("telemetry", {}).get("written", 0) >= MIN_WRITTEN,
              "the writer had committed only %r rows before the kill" % seen.get("telemetry"))
        check(seen.get("running", 0) >= 8, "only %r requests were running at the kill" % seen.get("running"))
        check(srv.proc.returncode == -9, "server exit status %r, expected killed by SIGKILL" % srv.proc.returncode)
        ic, n_sess, n_steps, mode, n_rows = integrity(db)
        check(ic == [("ok",)], "PRAGMA integrity_check after kill -9: %r" % ic[:10])
        check(mode == "wal", "journal_mode %r, expected wal" % mode)
        written = seen["telemetry"]["written"]
        check(n_rows >= written, "%d rows (%d sessions, %d steps, session ends, policy) survived, but %d rows "
              "were committed before the kill" % (n_rows, n_sess, n_steps, written))
        print("kill -9 with %d requests running: %d sessions, %d steps survive (%d rows committed before), "
              "integrity ok" % (seen["running"], n_sess, n_steps, written))

        c = sqlite3.connect(db)
        left = [r[0] for r in c.execute("SELECT session_id FROM speculation_sessions WHERE status = 'active'")]
        c.close()
        check(len(left) >= 8, "only %d sessions were left 'active' by the kill" % len(left))

        # the server restarts on the same database, and marks what the killed run left active as failed
        srv.start()
        c = sqlite3.connect(db)
        n_active = c.execute("SELECT COUNT(*) FROM speculation_sessions WHERE status = 'active'").fetchone()[0]
        rows = c.execute("SELECT status, ended_at, created_at FROM speculation_sessions WHERE session_id IN (%s)"
                         % ",".join("?" * len(left)), left).fetchall()
        c.close()
        check(n_active == 0, "%d sessions still 'active' after the restart" % n_active)
        check(len(rows) == len(left) and all(r[0] == "failed" and r[1] is not None and r[1] >= r[2] for r in rows),
              "the killed run's sessions after the restart: %r" % rows[:5])
        check("%d sessions left 'active' by an earlier run" % len(left) in srv.stderr_tail(100000),
              "the restart did not log the recovered sessions: %r" % srv.stderr_tail(500))

        async def one():
            async with ws_connect(srv) as ws:
                return (await run_batch(ws, [("after", gen_msg("after", "Once upon a time", 30, 0))]))["after"]
        s = asyncio.run(one())
        s.check_ok()
        check(len(s.tokens) == 30, "the request after the restart got %d tokens" % len(s.tokens))
        rc = srv.stop()
        check(rc == 0, "restarted server exited %r after SIGTERM" % rc)
        ic, n_sess2, n_steps2, _, _ = integrity(db)
        check(ic == [("ok",)], "PRAGMA integrity_check after the restart: %r" % ic[:10])
        c = sqlite3.connect(db)
        row = c.execute("SELECT status, total_target_passes, generated_tokens FROM speculation_sessions "
                        "WHERE session_id = ?", (s.start["session"],)).fetchone()
        n_own = c.execute("SELECT COUNT(*) FROM speculation_steps WHERE session_id = ?",
                          (s.start["session"],)).fetchone()[0]
        c.close()
        check(row is not None and row[0] == "completed" and row[2] == 30,
              "the session after the restart is recorded as %r" % (row,))
        check(n_own == row[1] and n_sess2 == n_sess + 1 and n_steps2 == n_steps + n_own,
              "after the restart: %d step rows for %d target passes; sessions %d -> %d, steps %d -> %d"
              % (n_own, row[1], n_sess, n_sess2, n_steps, n_steps2))

    with_server(srv, body)


if __name__ == "__main__":
    main(run)
