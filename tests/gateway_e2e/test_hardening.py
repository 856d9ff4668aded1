# test_hardening.py — the gateway against an outside tester's inputs, through
# raw sockets (the shapes a library client would never send):
#  1. WebSocket frames that crashed the server: a zero-length text message as
#     the first message, an empty fragment + empty continuation, a ping then an
#     empty text frame. Each gets an error message; the socket and the server
#     keep serving.
#  2. The listening socket is exactly the configured address: 127.0.0.1 binds
#     an IPv4 socket on 127.0.0.1 (not a dual-stack [::]); localhost binds its
#     IPv4 address and answers.
#  4. max_connections is exact: the next connection gets 503 + Retry-After
#     before its WebSocket upgrade, /healthz still answers, a freed slot is
#     usable again; an idle WebSocket is closed after idle_timeout_s, one with
#     a running request is not.
#  5. A POST with no Content-Length, or with Transfer-Encoding: chunked, is
#     answered 411 at once.
#  7. A 1-byte close payload or a close code no peer may send fails the
#     connection (no echo); the DNS-rebinding pair Host = Origin = evil.example
#     is refused on a loopback server (HTTP and WebSocket), loopback names and
#     server.allowed_hosts entries are served; 12 kB of headers are served.
import base64
import json
import os
import socket
import struct
import time

from specd_e2e import Fail, Server, check, main, raw_exchange

CASE_TIMEOUT = 10


# ---- a raw RFC 6455 client ---------------------------------------------------------

def ws_open(port, host=None, origin=None, timeout=CASE_TIMEOUT):
    """Opens a TCP connection and sends the upgrade; returns (socket, status line, rest of the bytes)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    key = base64.b64encode(os.urandom(16)).decode()
    hdr = ("GET /v1/stream HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: specd.v1\r\n"
           % (host or "127.0.0.1:%d" % port, key))
    if origin:
        hdr += "Origin: %s\r\n" % origin
    s.sendall((hdr + "\r\n").encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        try:
            d = s.recv(4096)
        except socket.timeout:
            break
        if not d:
            break
        buf += d
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    return s, lines[0] if lines else "", rest


def frame(op, payload=b"", fin=True, mask=True):
    b0 = (0x80 if fin else 0) | op
    n = len(payload)
    m = 0x80 if mask else 0
    if n < 126:
        hdr = bytes([b0, m | n])
    elif n < 65536:
        hdr = bytes([b0, m | 126]) + struct.pack(">H", n)
    else:
        hdr = bytes([b0, m | 127]) + struct.pack(">Q", n)
    if not mask:
        return hdr + payload
    k = os.urandom(4)
    return hdr + k + bytes(c ^ k[i % 4] for i, c in enumerate(payload))


class FrameReader:
    """Reads server frames (unmasked) from a socket."""

    def __init__(self, s, rest=b""):
        self.s, self.buf = s, rest

    def _need(self, n, deadline):
        while len(self.buf) < n:
            self.s.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                d = self.s.recv(65536)
            except socket.timeout:
                return False
            if not d:
                return False
            self.buf += d
        return True

    def next(self, timeout=CASE_TIMEOUT):
        """(opcode, payload) or None when the connection closed or nothing came."""
        deadline = time.monotonic() + timeout
        if not self._need(2, deadline):
            return None
        n = self.buf[1] & 0x7f
        off = 2
        if n == 126:
            if not self._need(4, deadline):
                return None
            n, off = struct.unpack(">H", self.buf[2:4])[0], 4
        elif n == 127:
            if not self._need(10, deadline):
                return None
            n, off = struct.unpack(">Q", self.buf[2:10])[0], 10
        if not self._need(off + n, deadline):
            return None
        op, payload = self.buf[0] & 0x0f, self.buf[off:off + n]
        self.buf = self.buf[off + n:]
        return op, payload

    def next_json(self, timeout=CASE_TIMEOUT):
        while True:
            f = self.next(timeout)
            if f is None:
                return None
            if f[0] == 1:
                return json.loads(f[1])

    def closed(self, timeout=3):
        """True when the server closes the TCP connection within timeout (frames before it are skipped)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.s.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                d = self.s.recv(65536)
            except socket.timeout:
                return False
            except ConnectionResetError:
                return True
            if not d:
                return True
            self.buf += d
        return False


def ping_works(s, r, tag):
    s.sendall(frame(1, json.dumps({"type": "ping", "id": tag}).encode()))
    m = r.next_json()
    return m is not None and m.get("type") == "pong" and m.get("id") == tag


# ---- the socket table ---------------------------------------------------------------

def listeners(port):
    """Local addresses listening on port, from /proc/net/tcp and tcp6: ['127.0.0.1', '::1', '::', ...]."""
    out = []
    for path, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            lines = open(path).read().splitlines()[1:]
        except OSError:
            continue
        for ln in lines:
            f = ln.split()
            addr, p = f[1].split(":")
            if int(p, 16) != port or f[3] != "0A":  # 0A = LISTEN
                continue
            raw = bytes.fromhex(addr)
            if v6:
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                out.append(socket.inet_ntop(socket.AF_INET6, raw))
            else:
                out.append(socket.inet_ntop(socket.AF_INET, raw[::-1]))
    return out


def http_status(resp):
    line = resp.split(b"\r\n", 1)[0].decode(errors="replace")
    parts = line.split(" ")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def run():
    # -------- 1, 7 (frames), 5, 7 (Host), 7 (headers) on one default server
    with Server(config="server:\n  idle_timeout_s: 2\n") as srv:
        port = srv.port
        cases = [
            ("empty first message", frame(1, b"")),
            ("empty fragment + empty continuation", frame(1, b"", fin=False) + frame(0, b"")),
            ("ping, then an empty text frame", frame(9, b"x") + frame(1, b"")),
            ("empty fragment + text continuation", frame(1, b"", fin=False) + frame(0, b"{bad")),
        ]
        for what, data in cases:
            s, status, rest = ws_open(port)
            check("101" in status, "%s: upgrade answered %r" % (what, status))
            s.sendall(data)
            r = FrameReader(s, rest)
            m = r.next_json()
            check(m is not None and m.get("type") == "error" and m.get("code") == "invalid_json",
                  "%s: expected an invalid_json error, got %r" % (what, m))
            check(ping_works(s, r, "after"), "%s: the socket stopped serving" % what)
            s.close()
            check(srv.alive(), "%s: the server died" % what)
        print("1: empty frames answered, socket and server alive")

        # a malformed close fails the connection without an echo
        for what, payload in (("1-byte close payload", b"\x03"), ("close code 1005", b"\x03\xed"),
                              ("close reason not UTF-8", b"\x03\xe8\xff")):
            s, status, rest = ws_open(port)
            s.sendall(frame(8, payload))
            r = FrameReader(s, rest)
            f = r.next(timeout=3)
            # failing the connection: closed with no echo, or with 1002 (protocol error) first
            check(f is None or (f[0] == 8 and f[1][:2] == b"\x03\xea"),
                  "%s: the server answered %r instead of failing the connection" % (what, f))
            check(r.closed(), "%s: the connection stayed open" % what)
            s.close()
        s, status, rest = ws_open(port)
        s.sendall(frame(8, b"\x03\xe8bye"))
        f = FrameReader(s, rest).next(timeout=3)
        check(f is not None and f[0] == 8, "a valid close was not echoed: %r" % (f,))
        s.close()
        print("7: malformed close payloads fail the connection, a valid one is echoed")

        # 5: POST without a length / chunked: 411 at once
        for what, req in (
                ("no Content-Length", b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
                ("chunked", b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
                            b"Content-Type: application/json\r\n\r\n7\r\n{\"a\":1}\r\n0\r\n\r\n")):
            t0 = time.monotonic()
            resp = raw_exchange(port, req, timeout=8)
            dt = time.monotonic() - t0
            check(http_status(resp) == 411, "POST with %s: expected 411, got %r" % (what, resp[:120]))
            check(b"length_required" in resp, "POST with %s: no error code in %r" % (what, resp[:300]))
            check(dt < 5, "POST with %s: answered after %.1f s" % (what, dt))
        print("5: POST without Content-Length and chunked POST answered 411 at once")

        # 7: DNS rebinding: Host = Origin = evil.example is refused on a loopback bind
        resp = raw_exchange(port, b"GET /v1/models HTTP/1.1\r\nHost: evil.example\r\n\r\n")
        check(http_status(resp) == 403 and b"host_not_allowed" in resp,
              "HTTP with Host: evil.example answered %r" % resp[:200])
        s, status, rest = ws_open(port, host="evil.example", origin="http://evil.example")
        check("403" in status, "WebSocket with Host = Origin = evil.example answered %r" % status)
        s.close()
        for host in ("localhost:%d" % port, "127.0.0.1:%d" % port, "[::1]:%d" % port, "127.1.2.3"):
            resp = raw_exchange(port, ("GET /v1/models HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host)
                                .encode())
            check(http_status(resp) == 200, "Host: %s answered %r" % (host, resp[:120]))
        s, status, rest = ws_open(port, host="localhost:%d" % port, origin="http://localhost:%d" % port)
        check("101" in status, "WebSocket from localhost answered %r" % status)
        s.close()
        print("7: Host evil.example refused (HTTP 403, WebSocket 403); loopback names served")

        # 7: large headers: up to 16 kB are served (lws's default buffer was
        # 4 kB); past it lws 4.1 drops the connection (no hook answers 431)
        resp = raw_exchange(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: " + b"a" * 12000 + b"\r\n"
                            b"Connection: close\r\n\r\n")
        check(http_status(resp) == 200, "12 kB of headers answered %r" % resp[:120])
        check(srv.alive(), "server died on 12 kB of headers")
        resp = raw_exchange(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: " + b"a" * 40000 + b"\r\n\r\n")
        check(srv.alive(), "server died on 40 kB of headers")
        print("7: 12 kB of headers served; 40 kB dropped, server alive")

        # 4 (idle): an idle WebSocket is closed after idle_timeout_s (2); a
        # chatty one is not
        idle, st1, r1 = ws_open(port)
        chatty, st2, r2 = ws_open(port)
        ri, rc = FrameReader(idle, r1), FrameReader(chatty, r2)
        t0 = time.monotonic()
        for k in range(5):
            time.sleep(0.8)
            check(ping_works(chatty, rc, "c%d" % k), "a chatty WebSocket stopped answering")
        f = ri.next(timeout=2)
        check(f is not None and f[0] == 8 and f[1][:2] == b"\x03\xe9",
              "the idle WebSocket got %r instead of a 1001 close after %.1f s" % (f, time.monotonic() - t0))
        check(ri.closed(), "the idle WebSocket was not closed")
        for s in (idle, chatty):
            s.close()
        print("4: idle WebSocket closed (1001) after 2 s; a chatty one kept")
        check(srv.alive(), "server died")

    # -------- 2: the bind address
    with Server() as srv:
        ls = listeners(srv.port)
        check(ls == ["127.0.0.1"], "server.host 127.0.0.1 listens on %r (want exactly ['127.0.0.1'])" % ls)
        print("2: --host 127.0.0.1 listens on %s:%d only" % (ls[0], srv.port))
    with Server(extra=["--host", "localhost"]) as srv:
        ls = listeners(srv.port)
        check(ls == ["127.0.0.1"], "--host localhost listens on %r (want ['127.0.0.1'])" % ls)
        st, _, _ = srv.http("GET", "/healthz")
        check(st == 200, "--host localhost: /healthz answered %d" % st)
        print("2: --host localhost listens on 127.0.0.1:%d and answers" % srv.port)

    # -------- 4: the connection limit is exact
    limit = 6
    with Server(config="server:\n  max_connections: %d\n  allowed_hosts: \"specd.test\"\n" % limit) as srv:
        port = srv.port
        open_ = []
        for i in range(limit):
            s, status, rest = ws_open(port)
            check("101" in status, "connection %d of %d refused: %r" % (i + 1, limit, status))
            open_.append((s, FrameReader(s, rest)))
        for i in range(3):
            t0 = time.monotonic()
            s, status, rest = ws_open(port)
            check("503" in status, "connection %d over the limit answered %r" % (i + 1, status))
            check(time.monotonic() - t0 < 5, "the refusal took %.1f s" % (time.monotonic() - t0))
            s.close()
        resp = raw_exchange(port, b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        check(http_status(resp) == 503 and b"too_many_connections" in resp and b"retry-after" in resp.lower(),
              "HTTP over the limit answered %r" % resp[:300])
        resp = raw_exchange(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        check(http_status(resp) == 200, "/healthz at the limit answered %r" % resp[:120])
        for s, r in open_:
            check(ping_works(s, r, "p"), "an accepted WebSocket stopped serving at the limit")
        open_[0][0].close()
        time.sleep(0.5)
        s, status, rest = ws_open(port)
        check("101" in status, "a freed connection slot was not reusable: %r" % status)
        s.close()
        # server.allowed_hosts: a listed name is served on the loopback bind
        resp = raw_exchange(port, b"GET /healthz HTTP/1.1\r\nHost: specd.test\r\nConnection: close\r\n\r\n")
        check(http_status(resp) == 200, "Host listed in allowed_hosts answered %r" % resp[:120])
        for s, _ in open_[1:]:
            s.close()
        print("4: %d connections accepted, the next 3 refused with 503 before the upgrade, /healthz served, "
              "a freed slot reused" % limit)


main(run)
