# test_learn_e2e.py — the serving surface of learning from traffic (issue 37)
# on a real `specd serve --learn --learn-dir DIR` (stories260K + llama2xs):
#   (a) POST /admin/learn refuses without the admin token (401; 403 on a
#       server with none) and changes nothing; with it pause, resume and
#       status work, a bad body is 400, an impossible op 409, a big body 413;
#       while paused a finished request is not recorded;
#   (b) "learn": false on the OpenAI endpoints and the WebSocket, and a policy
#       rule's learn: false, keep requests out of the ring (ring.pushed stays,
#       opted_out grows), other requests enter it; a wrongly typed learn is a
#       clear wrong_type error and the server keeps serving;
#   (c) the ring's spill file survives kill -9: a 1 MiB ring (so the oldest
#       are dropped, from the file too) under two streams of requests; once
#       the trainer has spilled some of them the server is killed mid-traffic,
#       a new one on the same file starts with that window loaded, and SQLite's
#       integrity check says ok;
#   (d) /metrics has the specd:learn_* families (and a server without
#       learning has none), agreeing with /api/stats.
import asyncio
import contextlib
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from specd_e2e import (COMP, CHAT, Fail, Server, check, main, oa_body, recv_json,  # noqa: E402
                       run_one, ws_connect, need_websockets, metric_value)

TOKEN = "learn-admin-secret"
AUTH = {"Authorization": "Bearer " + TOKEN}


def config(spill):
    return ("server:\n  admin_token: \"%s\"\n"
            "speculation:\n  learn_min_positions: 16\n  learn_steps: 5\n  learn_ring_mb: 1\n  learn_spill: %s\n"
            "policy:\n  rules:\n    - model: \"*\"\n      content_type: private\n      learn: false\n" % (TOKEN, spill))


def learn_stats(srv):
    st, _, b = srv.http("GET", "/api/stats")
    check(st == 200, "/api/stats answered %d" % st)
    s = json.loads(b)
    check(isinstance(s.get("learn"), dict), "/api/stats has no learn object: %r" % list(s))
    return s["learn"]


def admin(srv, body, headers=AUTH):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    st, _, b = srv.http("POST", "/admin/learn", data, headers=dict(headers, **{"Content-Type": "application/json"}))
    try:
        return st, json.loads(b)
    except ValueError:
        raise Fail("/admin/learn %r answered %d with non-JSON %r" % (body, st, b[:200]))


def wait_counted(srv, before, n, timeout=10):
    """Waits until n more finished requests were counted (recorded or opted out); returns the stats."""
    deadline = time.monotonic() + timeout
    while True:
        ls = learn_stats(srv)
        done = ls["ring"]["pushed"] + ls["opted_out"] - before["ring"]["pushed"] - before["opted_out"]
        if done >= n or time.monotonic() > deadline:
            return ls
        time.sleep(0.05)


def complete(srv, path=COMP, **fields):
    st, _, b = srv.http("POST", path, oa_body(path, max_tokens=24, temperature=0, **fields))
    check(st == 200, "%s %r answered %d: %r" % (path, fields, st, b[:300]))


@contextlib.contextmanager
def killable(srv):
    """Like `with srv`, for a server the test may kill -9 (then no SIGTERM exit code is checked)."""
    srv.__enter__()
    try:
        yield srv
    except BaseException:
        if srv.alive():
            srv.kill()
        sys.stderr.write("server stderr (tail):\n%s\n" % srv.stderr_tail())
        srv._cleanup()
        raise
    if srv.alive():
        srv.__exit__(None, None, None)
    else:
        srv._cleanup()


def spilled(spill):
    """(rows, newest sample id) of the spill file's samples table (read-only; the server may be writing)."""
    try:
        c = sqlite3.connect("file:%s?mode=ro" % spill, uri=True, timeout=5)
        try:
            n, newest = c.execute("SELECT count(*), max(id) FROM samples").fetchone()
            return n, newest or 0
        finally:
            c.close()
    except sqlite3.Error:
        return 0, 0


def integrity(spill, ro):
    c = sqlite3.connect(("file:%s?mode=ro" % spill) if ro else spill, uri=ro, timeout=5)
    try:
        return c.execute("PRAGMA integrity_check").fetchall()
    finally:
        c.close()


def part_admin(srv):
    before = learn_stats(srv)
    check(before["enabled"] and not before["paused"], "learning not on at start: %r" % before)
    check("head_path" not in before, "/api/stats shows head_path without the admin token")
    for hdrs in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        st, b = admin(srv, {"op": "pause"}, hdrs)
        check(st == 401, "/admin/learn with %r answered %d: %r" % (hdrs, st, b))
    check(not learn_stats(srv)["paused"], "a refused pause paused learning")

    st, b = admin(srv, {"op": "status"})
    check(st == 200 and b.get("ok") is True and b["learn"]["enabled"] and "head_path" in b["learn"],
          "status answered %d %r" % (st, b))
    st, b = admin(srv, {"op": "pause"})
    check(st == 200 and b["ok"] and b["learn"]["paused"] and b["learn"]["state"] == "paused",
          "pause answered %d %r" % (st, b))
    check(learn_stats(srv)["paused"], "/api/stats does not show the pause")
    # paused: a finished request is neither recorded nor counted as opted out
    p0 = learn_stats(srv)
    complete(srv)
    time.sleep(0.5)
    p1 = learn_stats(srv)
    check(p1["ring"]["pushed"] == p0["ring"]["pushed"] and p1["opted_out"] == p0["opted_out"],
          "a request finished while paused was recorded: %r -> %r" % (p0["ring"], p1["ring"]))
    st, b = admin(srv, {"op": "resume"})
    check(st == 200 and b["ok"] and not b["learn"]["paused"], "resume answered %d %r" % (st, b))
    check(not learn_stats(srv)["paused"], "/api/stats still paused after resume")
    r0 = learn_stats(srv)
    complete(srv)
    r1 = wait_counted(srv, r0, 1)
    check(r1["ring"]["pushed"] == r0["ring"]["pushed"] + 1, "a request after resume was not recorded: %r" % r1["ring"])

    for body, code in (({"op": "fly"}, "out_of_range"), ({"op": 1}, "wrong_type"), ({}, "missing_field"),
                       (b"not json", "invalid_json"), (b"[1]", "not_object"), ({"op": "pause", "x": 1}, "unknown_field"),
                       ({"op": "pause", "path": "/tmp/x"}, "unknown_field"), ({"op": "save"}, "missing_field"),
                       ({"op": "save", "path": 7}, "wrong_type"), (b"", "invalid_json")):
        st, b = admin(srv, body)
        check(st == 400 and b.get("ok") is False and b.get("code") == code and b.get("message"),
              "/admin/learn %r answered %d %r (want 400 %s)" % (body, st, b, code))
    st, b = admin(srv, {"op": "rollback"})
    check(st == 409 and b.get("ok") is False and "roll back" in b.get("message", ""),
          "rollback with nothing to roll back to answered %d %r" % (st, b))
    st, _, b = srv.http("POST", "/admin/learn", json.dumps({"op": "status", "path": "a" * 5000}).encode(),
                        headers=dict(AUTH, **{"Content-Type": "application/json"}))
    check(st == 413, "a 5 KB /admin/learn body answered %d %r" % (st, b[:200]))
    check(not learn_stats(srv)["paused"] and srv.alive(), "the refused bodies changed learning")
    print("admin: 401 without the token, pause/resume/status, 400/409/413 refusals")


async def ws_part(srv):
    async with ws_connect(srv) as ws:
        s = await run_one(ws, "o1", "Once upon a time", 24, learn=False)
        check(s.done is not None, "WebSocket learn:false request: %r" % s.error)
        s = await run_one(ws, "o2", "Once upon a time", 24, content_type="private")
        check(s.done is not None, "WebSocket content_type private request: %r" % s.error)
        await ws.send(json.dumps({"type": "generate", "id": "bad", "prompt": "x", "learn": 0}))
        m = await recv_json(ws)
        check(m.get("type") == "error" and m.get("code") == "wrong_type" and "'learn'" in m.get("message", ""),
              "WebSocket learn: 0 answered %r" % m)
        s = await run_one(ws, "in1", "The little dog", 24)
        check(s.done is not None, "WebSocket request after the refused one: %r" % s.error)


def part_opt_out(srv):
    b0 = learn_stats(srv)
    complete(srv, COMP, learn=False)
    complete(srv, CHAT, learn=False)
    b1 = wait_counted(srv, b0, 2)
    check(b1["ring"]["pushed"] == b0["ring"]["pushed"] and b1["opted_out"] == b0["opted_out"] + 2,
          "OpenAI learn:false requests entered the ring: pushed %d -> %d, opted_out %d -> %d"
          % (b0["ring"]["pushed"], b1["ring"]["pushed"], b0["opted_out"], b1["opted_out"]))
    asyncio.run(ws_part(srv))  # 2 opted out (learn:false, the private rule), then 1 recorded
    b2 = wait_counted(srv, b1, 3)
    check(b2["opted_out"] == b1["opted_out"] + 2 and b2["ring"]["pushed"] == b1["ring"]["pushed"] + 1,
          "WebSocket: opted_out %d -> %d (want +2), pushed %d -> %d (want +1)"
          % (b1["opted_out"], b2["opted_out"], b1["ring"]["pushed"], b2["ring"]["pushed"]))
    for path in (COMP, CHAT):
        st, _, b = srv.http("POST", path, oa_body(path, max_tokens=4, learn="no"))
        e = json.loads(b).get("error", {}) if st == 400 else {}
        check(st == 400 and e.get("code") == "wrong_type" and e.get("param") == "learn",
              "%s learn:\"no\" answered %d %r" % (path, st, b[:300]))
    complete(srv, COMP, learn=True)
    complete(srv, CHAT)
    b3 = wait_counted(srv, b2, 2)
    check(b3["ring"]["pushed"] == b2["ring"]["pushed"] + 2 and b3["opted_out"] == b2["opted_out"],
          "learn:true / absent requests: pushed %d -> %d (want +2)" % (b2["ring"]["pushed"], b3["ring"]["pushed"]))
    check(b3["ring"]["samples"] > 0 and b3["ring"]["positions"] > 0 and 0 < b3["ring"]["bytes"] <= b3["ring"]["cap"],
          "ring figures %r" % b3["ring"])
    print("opt-out: %d recorded, %d opted out (OpenAI, WebSocket, policy rule); wrong types refused"
          % (b3["ring"]["pushed"], b3["opted_out"]))


LEARN_COUNTERS = ["specd:learn_swaps_total", "specd:learn_rejected_total", "specd:learn_rollbacks_total",
                  "specd:learn_train_positions_total", "specd:learn_ring_pushed_total",
                  "specd:learn_ring_dropped_total", "specd:learn_opted_out_total"]
LEARN_GAUGES = ["specd:learn_head_version", "specd:learn_ring_bytes", "specd:learn_ring_positions",
                "specd:learn_train_positions_per_second", "specd:learn_train_cpu_share", "specd:learn_live_accept"]


def part_metrics(srv):
    fams = srv.metrics()
    ls = learn_stats(srv)
    for name in LEARN_COUNTERS + LEARN_GAUGES:
        check(name in fams, "/metrics has no %s" % name)
        want = "counter" if name in LEARN_COUNTERS else "gauge"
        check(fams[name]["type"] == want, "%s is a %s, want %s" % (name, fams[name]["type"], want))
    check(metric_value(fams, "specd:learn_ring_pushed_total") == ls["ring"]["pushed"],
          "/metrics ring pushed %r, /api/stats %r" % (metric_value(fams, "specd:learn_ring_pushed_total"),
                                                      ls["ring"]["pushed"]))
    check(metric_value(fams, "specd:learn_opted_out_total") == ls["opted_out"], "/metrics opted_out disagrees")
    print("metrics: %d learn families" % len(LEARN_COUNTERS + LEARN_GAUGES))


def part_monitor(srv):
    ws = need_websockets()

    async def one():
        async with ws.connect("ws://127.0.0.1:%d/v1/monitor" % srv.port, subprotocols=["specd.monitor.v1"],
                              open_timeout=15) as m:
            return json.loads(await asyncio.wait_for(m.recv(), 10))
    snap = asyncio.run(one())
    lr = snap.get("learn")
    check(isinstance(lr, dict) and lr.get("enabled") is True and "head_version" in lr and "ring" in lr
          and "train_pos_per_s" in lr and "train_cpu_share" in lr and "head_path" not in lr,
          "monitor snapshot learn: %r" % lr)


def traffic(srv, n, stop):
    """Up to n requests one after another until stop is set (errors end it: the server may be killed under them)."""
    for i in range(n):
        if stop.is_set():
            return
        try:
            srv.http("POST", COMP, oa_body(COMP, prompt="Once upon a time %d" % i, max_tokens=48, temperature=0.8,
                                           seed=i), timeout=10)
        except Exception:
            return


def run():
    tmp = tempfile.mkdtemp(prefix="specd-learn-e2e-")
    try:
        spill = os.path.join(tmp, "ring.db")
        extra = ["--learn", "--learn-dir", os.path.join(tmp, "heads")]
        # without an admin token the endpoint is disabled; without --learn no learn families
        with Server() as plain:
            st, b = admin(plain, {"op": "status"})
            check(st == 403, "/admin/learn on a server without an admin token answered %d %r" % (st, b))
            check(learn_stats(plain)["enabled"] is False, "learning on without --learn")
            check(not any(k.startswith("specd:learn_") for k in plain.metrics()), "learn families without --learn")
        srv = Server(config=config(spill), extra=extra)
        with killable(srv):
            part_admin(srv)
            part_opt_out(srv)
            part_metrics(srv)
            part_monitor(srv)
            pushed = learn_stats(srv)["ring"]["pushed"]
            # (c) the trainer spills about once a second: wait until the file holds the ring
            deadline = time.monotonic() + 20
            while spilled(spill)[1] < pushed and time.monotonic() < deadline:
                time.sleep(0.2)
            on_disk0, newest0 = spilled(spill)
            check(newest0 >= pushed > 0 and on_disk0 > 0,
                  "the spill file holds samples up to %d of %d after 20 s" % (newest0, pushed))
            # then traffic; once the trainer has spilled some of it, kill -9 at once, requests still in flight
            stop = threading.Event()
            ths = [threading.Thread(target=traffic, args=(srv, 10000, stop)) for _ in range(2)]
            for th in ths:
                th.start()
            deadline = time.monotonic() + 40
            while spilled(spill)[1] <= newest0 and time.monotonic() < deadline:
                time.sleep(0.05)
            on_disk, newest = spilled(spill)
            busy = all(th.is_alive() for th in ths)
            srv.kill()  # SIGKILL
            stop.set()
            for th in ths:
                th.join(15)
            check(newest > newest0, "no spill during 40 s of traffic (newest sample on disk: %d)" % newest)
            check(busy, "the traffic ended before the kill")
        check(integrity(spill, ro=True) == [("ok",)], "the spill file after kill -9: %r" % integrity(spill, True))
        with Server(config=config(spill), extra=extra) as again:
            ls = learn_stats(again)
            check(ls["enabled"] and ls["ring"]["samples"] >= on_disk > 0 and ls["ring"]["positions"] > 0
                  and ls["ring"]["bytes"] <= ls["ring"]["cap"] == 1 << 20,
                  "after kill -9 the restarted server's ring: %r (the file had %d samples before)"
                  % (ls["ring"], on_disk))
            complete(again)  # and it serves and records
            ls2 = wait_counted(again, ls, 1)
            check(ls2["ring"]["pushed"] == 1, "the restarted server did not record: %r" % ls2["ring"])
        check(integrity(spill, ro=False) == [("ok",)], "the spill file after the restart: %r" % integrity(spill, False))
        print("crash safety: %d then %d samples spilled, kill -9 mid-traffic, restart loaded %d, integrity ok"
              % (on_disk0, on_disk, ls["ring"]["samples"]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(run)
