# test_hardening3.py — issue 44 (hardening, round 3), the gateway's items,
# each against a real `specd serve`, through raw sockets where the shape is
# one a library client would never send:
#  4. cross-site: a text/plain POST from a foreign Origin to the completion
#     and admin endpoints is 403, without an Origin 415; a CORS preflight is
#     204 with the Allow headers for a listed origin, 403 for another.
#  5. a second server on a live server's telemetry database refuses to start
#     ("in use by another running specd") and the first one's running
#     sessions stay 'active' (not marked 'failed').
#  6. a negative or 2^63 Content-Length is 400/413 at once (not a 30 s wait),
#     duplicate Content-Length headers 400, a Content-Length over
#     server.max_message_bytes 413 before any body is sent; a request line
#     with another HTTP major version 505, with none 400.
#  7. a config holding only "server:" is refused at start (file:line: reason)
#     and on SIGHUP and /admin/reload, which keep the old config (the admin
#     token still works).
#  8. a POST with Content-Length: 0 is answered 400 (the ASan/UBSan build
#     checks that no null pointer reaches memcpy on the way).
#  9. an h2c upgrade (GET and POST) is answered in HTTP/1.1, never 101.
# 10. a prompt longer than the context is 400 context_length_exceeded; on
#     SIGTERM, streams cut at the end of server.grace_ms end with the
#     shutting_down code: a WebSocket error frame, an SSE error event, a 503.
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import time

import specd_e2e
from specd_e2e import Fail, Server, check, gen_msg, main, need_websockets, paths, raw_exchange, recv_json, ws_connect

ADMIN = "adm-0123456789"
PROMPT = "Once upon a time"
SLOW = 5.0  # "at once": far under lws's 10 s (headers) and 30 s (body) timeouts


def status_of(resp):
    line = resp.split(b"\r\n", 1)[0]
    parts = line.split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def body_of(resp):
    return resp.partition(b"\r\n\r\n")[2]


def timed_exchange(port, data, timeout=12):
    t = time.monotonic()
    resp = raw_exchange(port, data, timeout=timeout)
    return resp, time.monotonic() - t


def one_response(port, data, timeout=8):
    """Sends raw bytes and reads one whole HTTP/1.x response (its headers and a
    Content-Length body), or what came until the server closed or `timeout` s
    of silence: a request whose connection stays open (an h2c upgrade says
    Connection: Upgrade, not close) ends at its response, not at lws's
    keep-alive timeout."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(data)
    buf = b""
    while True:
        head, sep, body = buf.partition(b"\r\n\r\n")
        if sep and not head.startswith(b"HTTP/1.1 101"):
            m = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
            if m and len(body) >= int(m.group(1)):
                break
        try:
            d = s.recv(65536)
        except socket.timeout:
            break
        if not d:
            break
        buf += d
    s.close()
    return buf


def post_head(path="/v1/completions", extra=b""):
    return (b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\n"
            % path.encode()) + extra


# ---- 4 ------------------------------------------------------------------------------

def cross_site(srv):
    body = json.dumps({"prompt": "x", "max_tokens": 2}).encode()
    auth = {"Authorization": "Bearer " + ADMIN}
    for path in ("/v1/completions", "/v1/chat/completions", "/admin/reload"):
        st, _, b = srv.http("POST", path, body, headers=dict(auth, **{"Content-Type": "text/plain",
                                                                        "Origin": "https://evil.example"}))
        check(st == 403 and json.loads(b)["error"]["code"] == "origin_not_allowed",
              "4: %s text/plain from a foreign Origin: %d %r" % (path, st, b[:200]))
    for path in ("/v1/completions", "/v1/chat/completions"):
        st, _, b = srv.http("POST", path, body, headers={"Content-Type": "text/plain"})
        check(st == 415, "4: %s text/plain without an Origin: %d %r" % (path, st, b[:200]))
    st, _, _ = srv.http("POST", "/v1/completions", body, headers={"Origin": "https://app.example"})
    check(st == 200, "4: a listed origin's JSON POST: %d" % st)
    pre = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "content-type"}
    st, hd, _ = srv.http("OPTIONS", "/v1/completions", headers=pre)
    check(st == 204 and hd.get("access-control-allow-origin") == "https://app.example"
          and "POST" in hd.get("access-control-allow-methods", "")
          and "content-type" in hd.get("access-control-allow-headers", "").lower(),
          "4: preflight from a listed origin: %d %r" % (st, hd))
    st, hd, _ = srv.http("OPTIONS", "/v1/completions", headers=dict(pre, Origin="https://evil.example"))
    check(st == 403 and "access-control-allow-origin" not in hd, "4: preflight from a foreign origin: %d %r" % (st, hd))
    print("4: foreign text/plain POSTs 403 (completions, chat, admin), 415 without an Origin; preflight 204/403")


# ---- 5 ------------------------------------------------------------------------------

async def long_ws(srv, n_tokens):
    """Opens a WebSocket and starts one long request; returns (ws, session id) once it runs."""
    ws = await ws_connect(srv)
    await ws.send(gen_msg("long", PROMPT, n_tokens, speculation={"mode": "off"}))
    while True:
        m = await recv_json(ws, 30)
        if m.get("type") == "start":
            return ws, m["session"]
        check(m.get("type") != "error", "long request refused: %r" % m)


async def cancel_and_close(ws, rid):
    """Cancels request rid, reads its stream to its end, and closes ws.
    python-websockets stops reading its socket while max_queue (32) messages
    wait unread, so a close() right after a cancel, with the stream's frames
    still ahead of the server's close reply, waits out the close timeouts
    (30 s, then code 1006): read them first. Best effort (this runs in a
    finally): a stream that does not end within 30 s is closed anyway."""
    try:
        await ws.send(json.dumps({"type": "cancel", "id": rid}))
        while True:
            m = await recv_json(ws, 30)
            if m.get("id") == rid and m.get("type") in ("done", "error"):
                break
    except (Fail, need_websockets().ConnectionClosed):
        pass
    finally:
        await ws.close()


def telemetry_lock(srv, db):
    async def go():
        ws, session = await long_ws(srv, 1900)
        try:
            specd, target, draft = paths()
            d = tempfile.mkdtemp(prefix="specd-h3-second-")
            cfg = os.path.join(d, "config.yaml")
            with open(cfg, "w") as f:
                f.write("telemetry:\n  path: %s\n" % db)
            t = time.monotonic()
            r = subprocess.run([specd, "serve", "-c", cfg, "-m", target, "--host", "127.0.0.1", "--port", "0",
                                "-t", "1"], cwd=d, capture_output=True, timeout=60)
            shutil.rmtree(d, ignore_errors=True)
            err = r.stderr.decode(errors="replace")
            check(r.returncode != 0, "5: a second server on a live database started (rc %d)" % r.returncode)
            check("in use by another running specd (pid %d)" % srv.proc.pid in err and db in err,
                  "5: the refusal does not say who holds the database: %r" % err[-400:])
            check(time.monotonic() - t < 30, "5: the refusal took %.1f s" % (time.monotonic() - t))
            # nothing the second one did touched the first one's live session
            con = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=10)
            row = con.execute("SELECT status FROM speculation_sessions WHERE session_id = ?", (session,)).fetchone()
            failed = con.execute("SELECT count(*) FROM speculation_sessions WHERE status = 'failed'").fetchone()[0]
            con.close()
            check(row is None or row[0] != "failed", "5: the live session is %r after the refused start" % (row,))
            check(failed == 0, "5: %d sessions marked failed by the refused start" % failed)
            print("5: second server on %s refused: %s" % (os.path.basename(db), err.strip().splitlines()[-1][:160]))
        finally:
            await cancel_and_close(ws, "long")
    asyncio.run(go())


# ---- 6 and 8 ------------------------------------------------------------------------

def framing(srv):
    body = b'{"prompt": "Hi", "max_tokens": 2}'
    cases = [
        ("negative", b"Content-Length: -1\r\n\r\n", 400, "invalid_content_length"),
        ("2^63", b"Content-Length: 9223372036854775808\r\n\r\n", 413, "message_too_large"),
        ("2^64+", b"Content-Length: 99999999999999999999999\r\n\r\n", 413, "message_too_large"),
        ("not a number", b"Content-Length: 12abc\r\n\r\n", 400, "invalid_content_length"),
        ("signed", b"Content-Length: +%d\r\n\r\n" % len(body) + body, 400, "invalid_content_length"),
        ("duplicate equal", b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (len(body), len(body)) + body,
         400, "invalid_content_length"),
        ("duplicate different", b"Content-Length: %d\r\nContent-Length: 5\r\n\r\n" % len(body) + body,
         400, "invalid_content_length"),
        ("over max_message_bytes, body sent", b"Content-Length: %d\r\n\r\n" % (2 << 20) + b"x" * (2 << 20),
         413, "message_too_large"),
        ("zero (8)", b"Content-Length: 0\r\n\r\n", 400, "invalid_json"),
    ]
    for what, tail, want, code in cases:
        resp, dt = timed_exchange(srv.port, post_head() + tail)
        check(status_of(resp) == want, "6: Content-Length %s: expected %d, got %r" % (what, want, resp[:160]))
        check(code.encode() in body_of(resp), "6: Content-Length %s: no %s in %r" % (what, code, resp[:300]))
        check(dt < SLOW, "6: Content-Length %s answered after %.1f s" % (what, dt))
    # over max_message_bytes, headers only: the 413 comes at once, before any body
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=SLOW)
    t = time.monotonic()
    s.sendall(post_head() + b"Content-Length: %d\r\n\r\n" % (2 << 20))
    head = read_until(s, b"}}", time.monotonic() + SLOW)
    s.close()
    check(status_of(head) == 413 and b"message_too_large" in head and time.monotonic() - t < SLOW,
          "6: Content-Length over max_message_bytes, no body sent: %r after %.1f s" % (head[:160], time.monotonic() - t))
    # the request line's version: HTTP/1.x served, another 505, none 400
    for line, want in ((b"GET /healthz HTTP/9.9", 505), (b"GET /healthz HTTP/2.0", 505), (b"GET /healthz", 400),
                       (b"GET /healthz HTTPS/1.1", 400), (b"GET /healthz HTTP/1.0", 200), (b"GET /healthz HTTP/1.1", 200)):
        resp, dt = timed_exchange(srv.port, line + b"\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        check(status_of(resp) == want and dt < SLOW, "6: %r: expected %d at once, got %r after %.1f s"
              % (line, want, resp[:100], dt))
    # a good one still works on the same server
    resp, _ = timed_exchange(srv.port, post_head(extra=b"Content-Length: %d\r\n\r\n" % len(body)) + body)
    check(status_of(resp) == 200, "6: a well-framed POST: %r" % resp[:200])
    # the server is still fine
    st, _, _ = srv.http("GET", "/healthz")
    check(st == 200, "6: /healthz after the framing cases: %d" % st)
    print("6/8: bad, huge, duplicate and oversize Content-Length answered at once (400/413); HTTP/9.9 505, "
          "no version 400; Content-Length 0 -> 400")


# ---- 9 ------------------------------------------------------------------------------

def h2c(srv):
    up = b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"
    resp = one_response(srv.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + up + b"\r\n")
    check(resp.startswith(b"HTTP/1.1 200") and b'"ok"' in resp, "9: GET with an h2c upgrade: %r" % resp[:200])
    check(b" 101 " not in resp.split(b"\r\n", 1)[0], "9: switched protocols: %r" % resp[:100])
    body = b'{"prompt": "Hi", "max_tokens": 3}'
    resp = one_response(srv.port, b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body) + up + b"\r\n" + body)
    check(resp.startswith(b"HTTP/1.1 200"), "9: POST with an h2c upgrade: %r" % resp[:200])
    try:
        obj = json.loads(body_of(resp).split(b"\r\n\r\n")[0])
        check(obj.get("object") == "text_completion", "9: POST with an h2c upgrade answered %r" % obj)
    except ValueError:
        raise Fail("9: POST with an h2c upgrade: body %r" % body_of(resp)[:200])
    # HTTP/2 with prior knowledge (the connection preface): refused at once, not left hanging
    resp, dt = timed_exchange(srv.port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", timeout=8)
    check(resp.startswith(b"HTTP/1.") and status_of(resp) not in (None, 101) and dt < SLOW,
          "9: an HTTP/2 preface: %r after %.1f s" % (resp[:100], dt))
    print("9: h2c upgrades answered in HTTP/1.1 (GET and POST), no 101; an HTTP/2 preface refused (%d)"
          % status_of(resp))


def h2_over_tls(tdir):
    """HTTP/2 over TLS (ALPN h2, what curl and browsers pick for https://) is
    lws's own and works: the request-line checks must not refuse its streams."""
    if not shutil.which("curl") or not shutil.which("openssl"):
        print("9: SKIP HTTP/2 over TLS (no curl or openssl)")
        return
    cert, key = os.path.join(tdir, "c.pem"), os.path.join(tdir, "k.pem")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "2", "-subj", "/CN=127.0.0.1"], capture_output=True, timeout=60)
    check(r.returncode == 0, "openssl: %r" % r.stderr[-300:])
    plain_re = specd_e2e.READY_RE
    specd_e2e.READY_RE = re.compile(r"serving on https://([0-9.]+):([0-9]+)/ \(WebSocket wss://")
    try:
        with Server(extra=["--tls-cert", cert, "--tls-key", key]) as srv:
            url = "https://127.0.0.1:%d" % srv.port
            for args in ([url + "/healthz"], ["-H", "Content-Type: application/json", "--data-binary",
                                              '{"prompt": "Hi", "max_tokens": 3}', url + "/v1/completions"]):
                r = subprocess.run(["curl", "-sk", "--http2", "-i", "--max-time", "20"] + args, capture_output=True,
                                   timeout=40)
                out = r.stdout.decode(errors="replace")
                check(r.returncode == 0 and out.startswith("HTTP/2 200"), "9: HTTP/2 over TLS %s: rc %d %r"
                      % (args[-1], r.returncode, out[:200]))
    finally:
        specd_e2e.READY_RE = plain_re
    print("9: HTTP/2 over TLS (ALPN h2) served: GET and POST 200")


# ---- 10 (context) -------------------------------------------------------------------

def context_full(srv):
    long_prompt = PROMPT + " " + "and then the cat ran home " * 500
    for path, body in (("/v1/completions", {"prompt": long_prompt, "max_tokens": 4}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": long_prompt}],
                                                 "max_tokens": 4})):
        st, _, b = srv.http("POST", path, body)
        err = json.loads(b).get("error", {})
        check(st == 400 and err.get("code") == "context_length_exceeded" and err.get("type") == "invalid_request_error",
              "10: %s with a prompt over the context: %d %r" % (path, st, b[:300]))
    print("10: a prompt over the context -> 400 context_length_exceeded (%s)" % err.get("message", "")[:100])


# ---- 7 ------------------------------------------------------------------------------

def config_empty_section_at_start():
    specd, target, draft = paths()
    d = tempfile.mkdtemp(prefix="specd-h3-cfg-")
    cfg = os.path.join(d, "config.yaml")
    with open(cfg, "w") as f:
        f.write("server:\n")
    r = subprocess.run([specd, "serve", "-c", cfg, "-m", target, "--host", "127.0.0.1", "--port", "0", "-t", "1"],
                       cwd=d, capture_output=True, timeout=60)
    shutil.rmtree(d, ignore_errors=True)
    err = r.stderr.decode(errors="replace")
    check(r.returncode != 0, "7: a config of only 'server:' was accepted at start")
    check("%s:1:1: section 'server' is empty" % cfg in err, "7: the refusal at start: %r" % err[-400:])
    print("7: 'server:' alone refused at start: %s" % err.strip().splitlines()[-1][:140])


def config_empty_section_on_reload(srv, cfg_text):
    cfg = os.path.join(srv.dir, "config.yaml")
    auth = {"Authorization": "Bearer " + ADMIN}
    with open(cfg, "w") as f:
        f.write("server:\n")
    st, _, b = srv.http("POST", "/admin/reload", b"", headers=auth)
    msg = json.loads(b).get("message", "")
    check(st == 422 and "section 'server' is empty" in msg and "config.yaml:1:1" in msg,
          "7: /admin/reload of 'server:' alone: %d %r" % (st, b[:300]))
    srv.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "reload (SIGHUP) failed" not in srv.stderr_tail() or "is empty" not in srv.stderr_tail().split("(SIGHUP)")[-1]:
        check(time.monotonic() < deadline, "7: SIGHUP with 'server:' alone: no refusal logged: %r"
              % srv.stderr_tail()[-400:])
        time.sleep(0.05)
    # the old config stays: the admin token still opens the admin endpoint
    with open(cfg, "w") as f:
        f.write(cfg_text)
    st, _, b = srv.http("POST", "/admin/reload", b"", headers=auth)
    check(st == 200 and json.loads(b).get("ok") is True, "7: the admin token after refused reloads: %d %r" % (st, b))
    print("7: 'server:' alone refused by /admin/reload (422) and SIGHUP; the old config (admin token) stayed")


# ---- 10 (drain) ---------------------------------------------------------------------

def read_until(s, marker, deadline):
    buf = b""
    while marker not in buf and time.monotonic() < deadline:
        try:
            d = s.recv(65536)
        except socket.timeout:
            continue
        if not d:
            break
        buf += d
    return buf


def drain_cut(srv):
    """SIGTERM with a 100 ms grace while a WebSocket stream, an SSE stream and
    a plain request run: each ends with shutting_down."""
    need_websockets()

    async def go():
        body = json.dumps({"prompt": PROMPT, "max_tokens": 1900, "stream": True,
                           "speculation": {"mode": "off"}}).encode()
        sse = socket.create_connection(("127.0.0.1", srv.port), timeout=1)
        sse.sendall(post_head(extra=b"Content-Length: %d\r\n\r\n" % len(body)) + body)
        first = read_until(sse, b"data: ", time.monotonic() + 30)
        check(first.startswith(b"HTTP/1.1 200") and b"data: " in first, "10: SSE stream did not start: %r" % first[:200])
        check(b"[DONE]" not in first, "10: the SSE stream was not streamed (all of it came at once): %r" % first[-200:])
        plain_body = json.dumps({"prompt": PROMPT, "max_tokens": 1900, "speculation": {"mode": "off"}}).encode()
        plain = socket.create_connection(("127.0.0.1", srv.port), timeout=1)
        plain.sendall(post_head(extra=b"Content-Length: %d\r\n\r\n" % len(plain_body)) + plain_body)
        ws, _ = await long_ws(srv, 1900)
        m = await recv_json(ws, 30)
        check(m.get("type") == "tokens", "10: the WebSocket stream did not run: %r" % m)
        srv.proc.send_signal(signal.SIGTERM)
        final = None
        deadline = time.monotonic() + 20
        while final is None:
            m = await recv_json(ws, max(0.1, deadline - time.monotonic()))
            if m.get("type") in ("done", "error"):
                final = m
        check(final.get("type") == "error" and final.get("code") == "shutting_down" and final.get("id") == "long"
              and "grace" in final.get("message", ""), "10: the cut WebSocket stream ended with %r" % final)
        rest = first + read_until(sse, b"[DONE]", time.monotonic() + 20)
        events = [ln[6:] for ln in rest.partition(b"\r\n\r\n")[2].split(b"\n") if ln.startswith(b"data: ")]
        errs = [json.loads(e)["error"] for e in events if e.startswith(b"{") and b'"error"' in e]
        check(errs and errs[-1].get("code") == "shutting_down" and events[-1] == b"[DONE]",
              "10: the cut SSE stream ended with %r" % events[-3:])
        fins = [c.get("finish_reason") for e in events if e.startswith(b"{") and b'"choices"' in e
                for c in json.loads(e)["choices"]]
        check("cancelled" not in fins, "10: the cut SSE stream says finish_reason cancelled: %r" % fins[-3:])
        presp = read_until(plain, b"}}", time.monotonic() + 20)
        check(status_of(presp) == 503 and b"shutting_down" in presp, "10: the cut plain request: %r" % presp[:300])
        sse.close()
        plain.close()
        print("10: cut at the grace deadline: WS error %s (%s), SSE error %s, plain %d"
              % (final["code"], final["message"][:60], errs[-1]["code"], status_of(presp)))
    asyncio.run(go())
    rc = srv.proc.wait(timeout=20)
    check(rc == 0, "10: exit code after the drain: %r" % rc)


def run():
    config_empty_section_at_start()
    tdir = tempfile.mkdtemp(prefix="specd-h3-tel-")
    db = os.path.join(tdir, "shared-telemetry.db")
    cfg_text = ("server:\n  admin_token: %s\n  allowed_origins: https://app.example\n  grace_ms: 100\n"
                "telemetry:\n  path: %s\n" % (ADMIN, db))
    try:
        h2_over_tls(tdir)
        with Server(config=cfg_text, stop_timeout=30) as srv:
            cross_site(srv)
            framing(srv)
            h2c(srv)
            context_full(srv)
            telemetry_lock(srv, db)
            config_empty_section_on_reload(srv, cfg_text)
            drain_cut(srv)
    finally:
        shutil.rmtree(tdir, ignore_errors=True)


if __name__ == "__main__":
    main(run)
