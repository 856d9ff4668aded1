# test_shutdown.py — SIGTERM while requests run: /healthz answers 200 before;
# during the drain new work is refused (healthz 503, a new WebSocket 503 before its upgrade, generate → shutting_down)
# while the running requests finish in full within the grace period and the
# server exits 0. With a short grace period the unfinished requests are
# cut — each gets an `error` with code shutting_down (not a `done` that reads
# like a client's cancel) — and the server exits 0.
import asyncio
import json
import signal
import time

from specd_e2e import Server, Stream, check, check_done, gen_msg, main, need_websockets, raw_exchange, recv_json, ws_connect

N_LONG = 4
LONG = 800


async def drain_scenario(srv, grace_ms, expect_cancel):
    st, _, body = srv.http("GET", "/healthz")
    check(st == 200 and json.loads(body).get("status") == "ok", "/healthz before: %d %r" % (st, body))
    async with ws_connect(srv, close_timeout=2) as ws:
        ids = ["L%d" % i for i in range(N_LONG)]
        for rid in ids:
            await ws.send(gen_msg(rid, "Once upon a time", LONG, speculation={"mode": "off"}))
        streams = {rid: Stream(rid) for rid in ids}
        # every request running (a message the server has not read when the
        # signal lands is new work, and is refused as such)
        while not all(s.events for s in streams.values()):
            m = await recv_json(ws, 30)
            streams[m["id"]].add(m)
        t_sig = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        in_drain_checked = False
        refused = None
        while not all(s.finished for s in streams.values()):
            if not in_drain_checked:
                in_drain_checked = True
                await asyncio.sleep(0.05)  # let the loop see the signal
                st, _, body = srv.http("GET", "/healthz")
                check(st == 503, "/healthz while draining: %d %r" % (st, body))
                # a new WebSocket is refused before its upgrade (a proxy retries it elsewhere)
                resp = raw_exchange(srv.port, ("GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
                                               "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                               "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: specd.v1\r\n\r\n"
                                               % srv.port).encode(), timeout=5)
                check(resp.split(b"\r\n", 1)[0].endswith(b"503 Service Unavailable") and b"shutting_down" in resp,
                      "a WebSocket upgrade while draining got %r" % resp[:200])
                await ws.send(gen_msg("late", "Once upon a time", 8))
            m = await recv_json(ws, 30)
            if m.get("id") == "late":
                refused = m
                continue
            check(m.get("id") in streams, "unexpected message while draining: %r" % m)
            streams[m["id"]].add(m)
        t_done = time.monotonic() - t_sig
        if refused is None:  # the refusal may come after the last done
            refused = await recv_json(ws, 10)
        check(refused.get("type") == "error" and refused.get("code") == "shutting_down",
              "a generate during the drain: %r" % refused)
    reasons = {}
    for rid, s in streams.items():
        if s.error is not None:  # cut at the end of the grace period: an error naming it
            check(expect_cancel and s.error.get("code") == "shutting_down" and "grace" in s.error.get("message", ""),
                  "%s: ended with %r" % (rid, s.error))
            reasons["shutting_down"] = reasons.get("shutting_down", 0) + 1
            continue
        check(s.done is not None, "%s: no done before the server stopped" % rid)
        check_done(s)
        reasons[s.done["finish_reason"]] = reasons.get(s.done["finish_reason"], 0) + 1
        if not expect_cancel:
            check(s.done["finish_reason"] == "length" and len(s.tokens) == LONG,
                  "%s: finished %r after %d tokens within a %d ms grace" % (rid, s.done["finish_reason"],
                                                                            len(s.tokens), grace_ms))
    if expect_cancel:
        check(reasons.get("shutting_down", 0) > 0, "grace %d ms, yet nothing was cut: %r" % (grace_ms, reasons))
        check(set(reasons) <= {"shutting_down", "length"}, "endings %r (a cut stream is an error shutting_down, "
              "not a done cancelled)" % reasons)
    return t_done, reasons


def one(grace_ms, expect_cancel):
    cfg = "server:\n  grace_ms: %d\n" % grace_ms
    with Server(config=cfg, stop_timeout=grace_ms / 1000 + 10) as srv:
        t_done, reasons = asyncio.run(drain_scenario(srv, grace_ms, expect_cancel))
        t0 = time.monotonic()
        try:
            rc = srv.proc.wait(timeout=grace_ms / 1000 + 10)
        except Exception:
            rc = None
        check(rc == 0, "after SIGTERM the server exited with %r (expected 0)" % rc)
        print("grace %d ms: %d requests ended %r %.2f s after SIGTERM; exit 0 %.2f s later"
              % (grace_ms, N_LONG, reasons, t_done, time.monotonic() - t0))
        check("SIGTERM" in srv.stderr_tail(), "the server did not log the SIGTERM drain")
        # Server.__exit__ then sees it already stopped and checks the same exit code


def run():
    need_websockets()
    one(20000, False)
    one(200, True)


if __name__ == "__main__":
    main(run)
