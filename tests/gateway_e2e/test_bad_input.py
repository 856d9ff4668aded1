# test_bad_input.py — every bad input gets its stable error code and the socket
# and server keep serving: WebSocket protocol errors (invalid JSON, not an
# object, unknown type, missing / wrong-typed / out-of-range fields, duplicate
# active id, unknown id on cancel, a prompt longer than the context, oversize
# message, binary frame), HTTP errors (malformed JSON body → 400 in the OpenAI
# error shape, oversize body → 413, unknown endpoint → 404), no path traversal
# out of the web root, and clients killed mid-stream free their KV at once.
import asyncio
import base64
import json
import os
import shutil
import socket
import struct
import tempfile
import time

from specd_e2e import Fail, Server, Stream, check, check_done, collect, gen_msg, main, need_websockets, recv_json, \
    run_one, ws_connect

MAX_MSG = 12000        # server.max_message_bytes in the config below
MAX_TOKENS = 1500      # server.max_tokens_limit
CONFIG = "server:\n  max_message_bytes: %d\n  max_tokens_limit: %d\n" % (MAX_MSG, MAX_TOKENS)
LONG_PROMPT = "Once upon a time " * 600   # ~2,400 tokens (> the 2,048 context), 10,200 bytes (< MAX_MSG)
SECRET = "specd-e2e-secret-7f3a91"

G = {"type": "generate", "id": "x", "prompt": "Hi"}


def g(**kw):
    m = dict(G)
    m.update(kw)
    return json.dumps({k: v for k, v in m.items() if v is not ...})


# (what, frame, expected code, expected id or None when the frame has no usable id)
WS_CASES = [
    ("invalid JSON", "{bad", "invalid_json", None),
    ("truncated JSON", '{"type":"generate","id":"x"', "invalid_json", None),
    ("array", "[1,2]", "not_object", None),
    ("string", '"generate"', "not_object", None),
    ("unknown type", '{"type":"zzz","id":"x"}', "unknown_type", "x"),
    ("no prompt", '{"type":"generate","id":"x"}', "missing_field", "x"),
    ("no id", '{"type":"generate","prompt":"Hi"}', "missing_field", None),
    ("no type", '{"id":"x","prompt":"Hi"}', "missing_field", "x"),
    ("prompt not a string", g(prompt=5), "wrong_type", "x"),
    ("max_tokens a string", g(max_tokens="3"), "wrong_type", "x"),
    ("temperature a string", g(temperature="hot"), "wrong_type", "x"),
    ("speculation a string", g(speculation="fast"), "wrong_type", "x"),
    ("stop a number", g(stop=5), "wrong_type", "x"),
    ("messages not a list", g(prompt=..., messages="hi"), "wrong_type", "x"),
    ("id an object", g(id={}), "wrong_type", None),
    ("gamma above the policy bound", g(speculation={"gamma": 99}), "out_of_range", "x"),
    ("gamma below the policy bound", g(speculation={"gamma": 1}), "out_of_range", "x"),
    ("negative temperature", g(temperature=-0.5), "out_of_range", "x"),
    ("max_tokens over the limit", g(max_tokens=MAX_TOKENS + 1), "out_of_range", "x"),
    ("max_tokens zero", g(max_tokens=0), "out_of_range", "x"),
    ("top_p above 1", g(top_p=1.5), "out_of_range", "x"),
    ("unknown cancel id", '{"type":"cancel","id":"nope"}', "unknown_id", "nope"),
    ("oversize message", g(prompt="x" * (MAX_MSG + 100)), "message_too_large", None),
]


async def expect_error(ws, what, code, rid):
    m = await recv_json(ws, 10)
    check(m.get("type") == "error", "%s: expected an error, got %r" % (what, m))
    check(m.get("code") == code, "%s: code %r, expected %r (%r)" % (what, m.get("code"), code, m.get("message")))
    check(isinstance(m.get("message"), str) and m["message"], "%s: error without a message" % what)
    if rid is None:
        check("id" not in m, "%s: error carries an id %r it cannot know" % (what, m.get("id")))
    else:
        check(m.get("id") == rid, "%s: error id %r, expected %r" % (what, m.get("id"), rid))
    return m


async def ping(ws, tag):
    await ws.send(json.dumps({"type": "ping", "id": tag}))
    m = await recv_json(ws, 10)
    check(m == {"type": "pong", "id": tag}, "after %s: expected pong %r, got %r" % (tag, tag, m))


async def ws_errors(srv, ref):
    async with ws_connect(srv) as ws:
        for what, frame, code, rid in WS_CASES:
            await ws.send(frame)
            await expect_error(ws, what, code, rid)
            await ping(ws, what)
        print("ws: %d protocol errors answered with the right code" % len(WS_CASES))

        # binary frame
        await ws.send(b"\x00\x01binary")
        await expect_error(ws, "binary frame", "binary_frame", None)
        await ping(ws, "binary")

        # duplicate active id: a long request, then the same id again while it runs
        await ws.send(gen_msg("dup", "Once upon a time", MAX_TOKENS, speculation={"mode": "off"}))
        await ws.send(gen_msg("dup", "Once upon a time", 8))
        s = Stream("dup")
        while True:
            m = await recv_json(ws, 10)
            if m.get("type") == "error":
                break
            s.add(m)
        check(m.get("code") == "duplicate_id" and m.get("id") == "dup", "duplicate id: %r" % m)
        check(not s.finished, "the first 'dup' ended before the duplicate was refused")
        await ws.send(json.dumps({"type": "cancel", "id": "dup"}))
        await collect(ws, {"dup": s}, 30)
        check(s.done is not None and s.done["finish_reason"] == "cancelled", "dup after cancel: %r"
              % (s.done or s.error))
        await ping(ws, "dup")

        # a prompt longer than the context: answered at once with an error
        # tagged with the request's id, and nothing else for that id
        await ws.send(gen_msg("toolong", LONG_PROMPT, 4))
        m = await recv_json(ws, 30)
        check(m.get("type") == "error" and m.get("id") == "toolong", "prompt over the context: %r" % m)
        check(m.get("code") == "prompt_too_long", "prompt over the context: code %r" % m)
        print("ws: prompt over the context -> error %s: %s" % (m["code"], m["message"]))
        await ping(ws, "toolong")

        # a prompt that fits but whose max_tokens runs past the context edge ends
        # (done or error, with its id) instead of hanging
        s = await run_one(ws, "edge", "Once upon a time " * 500, 100)
        fin = s.done or s.error
        print("ws: prompt %d tokens + max_tokens 100 over a 2048 context -> %s %s"
              % (s.start["prompt_tokens"] if s.start else -1, fin["type"],
                 fin.get("finish_reason") or fin.get("code")))
        await ping(ws, "edge")

        # the socket still serves a normal request, identical to a fresh one
        s = await run_one(ws, "after", "Once upon a time", 24)
        check_done(s, 24)
        check(s.tokens == ref.tokens, "after the errors the output changed: %r vs %r" % (s.tokens, ref.tokens))


async def reference(srv):
    async with ws_connect(srv) as ws:
        s = await run_one(ws, "ref", "Once upon a time", 24)
        check_done(s, 24)
        return s


# ---- clients that vanish mid-stream -------------------------------------------------

async def killed_websockets_client(srv, kv0):
    """python3-websockets client: starts a long stream, reads one tokens
    event, then aborts the TCP connection without a close handshake."""
    ws = await ws_connect(srv)
    await ws.send(gen_msg("k", "Once upon a time", MAX_TOKENS, speculation={"mode": "off"}))
    while True:
        m = await recv_json(ws, 10)
        if m["type"] == "tokens":
            break
    kv_mid = srv.kv_free()
    ws.transport.abort()
    return kv_mid


def raw_ws_handshake(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(("GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: specd.v1\r\n\r\n"
               % (port, key)).encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(4096)
        check(d, "server closed during the raw handshake")
        buf += d
    check(buf.startswith(b"HTTP/1.1 101"), "raw handshake answered %r" % buf[:80])
    return s, buf.split(b"\r\n\r\n", 1)[1]


def raw_ws_text(text):
    """A masked client text frame."""
    p = text.encode()
    mask = os.urandom(4)
    n = len(p)
    hdr = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n))
    return hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(p))


def killed_raw_client(srv):
    """A raw TCP client: handshake, one generate, wait for token traffic, then
    close with SO_LINGER 0 (a reset, as when the client process dies)."""
    s, rest = raw_ws_handshake(srv.port)
    s.sendall(raw_ws_text(gen_msg("raw", "Once upon a time", MAX_TOKENS, speculation={"mode": "off"})))
    buf = rest
    while b'"type":"tokens"' not in buf:
        d = s.recv(65536)
        check(d, "server closed the raw client's stream")
        buf += d
    kv_mid = srv.kv_free()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    return kv_mid


# ---- HTTP --------------------------------------------------------------------------------

def raw_get(port, path):
    """GET with the path sent verbatim (no client-side normalisation); (status, body)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n" % (path, port)).encode())
    buf = b""
    while True:
        try:
            d = s.recv(65536)
        except socket.timeout:
            break
        if not d:
            break
        buf += d
    s.close()
    if not buf:
        return 0, b""  # the server dropped the request: nothing served
    head, _, body = buf.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def check_oa_error(st, body, status, code, what):
    check(st == status, "%s: HTTP %d, expected %d (%r)" % (what, st, status, body[:200]))
    try:
        e = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        raise Fail("%s: body is not the OpenAI error shape: %r" % (what, body[:200]))
    for k in ("message", "type", "param", "code"):
        check(k in e, "%s: error object lacks %r: %r" % (what, k, e))
    check(isinstance(e["message"], str) and e["message"], "%s: empty message" % what)
    if code:
        check(e["code"] == code, "%s: code %r, expected %r" % (what, e["code"], code))


def http_checks(srv, web):
    st, hd, body = srv.http("POST", "/v1/completions", b"{bad json")
    check_oa_error(st, body, 400, "invalid_json", "malformed completions body")
    st, hd, body = srv.http("POST", "/v1/chat/completions", b'{"messages": 5}')
    check_oa_error(st, body, 400, "wrong_type", "chat messages not a list")
    st, hd, body = srv.http("POST", "/v1/chat/completions", b"[]")
    check_oa_error(st, body, 400, None, "chat body an array")  # code: wrong_type today (the WebSocket says not_object)
    st, hd, body = srv.http("POST", "/v1/completions", {"prompt": "Hi", "temperature": -1})
    check_oa_error(st, body, 400, "out_of_range", "negative temperature")
    st, hd, body = srv.http("POST", "/v1/completions", json.dumps({"prompt": "x" * (MAX_MSG + 10)}).encode())
    check_oa_error(st, body, 413, "message_too_large", "oversize body")
    for path in ("/v1/nope", "/v1/models/extra", "/v1/"):  # POSTs to unknown endpoints: test_guards.py
        st, hd, body = srv.http("GET", path)
        check_oa_error(st, body, 404, None, "GET %s" % path)
    st, hd, body = srv.http("GET", "/no-such-page.html")
    check(st == 404, "missing static file answered %d" % st)

    st, hd, body = srv.http("GET", "/")
    check(st == 200 and body == open(os.path.join(web, "index.html"), "rb").read(), "/ answered %d %r"
          % (st, body[:100]))
    check(hd.get("content-type", "").startswith("text/html"), "/ content-type %r" % hd.get("content-type"))
    st, hd, body = srv.http("GET", "/app.css")
    check(st == 200 and hd.get("content-type", "").startswith("text/css"), "/app.css: %d %r"
          % (st, hd.get("content-type")))

    # traversal: the secret sits next to the web root; a symlink inside points at it
    attempts = ["/../secret.txt", "/%2e%2e/secret.txt", "/%2E%2E/secret.txt", "/..%2fsecret.txt",
                "/%2e%2e%2fsecret.txt", "/sub/../../secret.txt", "/sub/%2e%2e/%2e%2e/secret.txt",
                "/..\\secret.txt", "/%5c..%5csecret.txt", "//../secret.txt", "/./../secret.txt",
                "/../../../../../../etc/passwd", "/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd", "/link.txt",
                "/sub/../link.txt", "/%2fetc%2fpasswd", "/.%2e/secret.txt"]
    for path in attempts:
        st, body = raw_get(srv.port, path)
        check(SECRET.encode() not in body and b"root:" not in body,
              "path traversal: GET %s served a file outside the web root (HTTP %d)" % (path, st))
        check(st != 200, "path traversal: GET %s answered 200" % path)
    print("http: %d traversal attempts refused" % len(attempts))
    st, body = raw_get(srv.port, "/sub/page.txt")
    check(st == 200 and body == b"inside\n", "a nested file inside the web root: %d %r" % (st, body[:50]))


def run():
    need_websockets()
    tmp = tempfile.mkdtemp(prefix="specd-e2e-web-")
    web = os.path.join(tmp, "web")
    os.makedirs(os.path.join(web, "sub"))
    with open(os.path.join(web, "index.html"), "w") as f:
        f.write("<!doctype html><title>specd e2e</title><p>hello</p>\n")
    with open(os.path.join(web, "app.css"), "w") as f:
        f.write("body{color:#000}\n")
    with open(os.path.join(web, "sub", "page.txt"), "w") as f:
        f.write("inside\n")
    with open(os.path.join(tmp, "secret.txt"), "w") as f:
        f.write(SECRET + "\n")
    os.symlink(os.path.join(tmp, "secret.txt"), os.path.join(web, "link.txt"))
    try:
        with Server(config=CONFIG, web_root=web) as srv:
            kv0 = srv.kv_free()
            ref = asyncio.run(reference(srv))
            asyncio.run(ws_errors(srv, ref))
            check(srv.wait_kv_free(kv0) == kv0, "KV not back to %d after the protocol errors" % kv0)

            http_checks(srv, web)

            for name, kill in (("websockets abort", lambda: asyncio.run(killed_websockets_client(srv, kv0))),
                               ("raw socket reset", lambda: killed_raw_client(srv))):
                kv_mid = kill()
                check(kv_mid < kv0, "%s: the stream held no KV while running (%d free of %d)"
                      % (name, kv_mid, kv0))
                t0 = time.monotonic()
                kv1 = srv.wait_kv_free(kv0, timeout=2.0)
                check(kv1 == kv0, "%s: kv_blocks_free %d two seconds after the client died, %d before"
                      % (name, kv1, kv0))
                print("killed client (%s): KV %d -> %d free again after %.0f ms"
                      % (name, kv_mid, kv1, (time.monotonic() - t0) * 1e3))

            # and the server still serves a normal request
            s = asyncio.run(reference(srv))
            check(s.tokens == ref.tokens, "output changed after the killed clients")
            st, _, _ = srv.http("GET", "/healthz")
            check(st == 200, "/healthz %d at the end" % st)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(run)
