# test_fairness.py — a client that stops reading stalls only itself (issue #25).
# Client A opens a WebSocket with a tiny receive buffer, sends 64 long
# requests (more than max_running) and never reads again, so its output backs
# up into the gateway and the engine pauses its requests. Then a second
# WebSocket and an HTTP streaming completion must each get their first token
# within 1 s; the measured times are printed. Finally A closes, its requests
# are cancelled, and the server stops cleanly. Before the fix (issue #25) the
# victims got no token for as long as A stayed connected.
import asyncio
import base64
import http.client
import json
import os
import socket
import struct
import time

from specd_e2e import Fail, Server, check, gen_msg, main, metric_value, need_websockets, recv_json, ws_connect

MAX_RUNNING = 32
N_STALLED = 64
CTX = 4096          # long requests: each can run for thousands of tokens
LONG = 4000         # max_tokens of the stalled requests (below the context)
BOUND_S = 1.0      # the victim's time to first token must stay below this
PATIENCE_S = 30.0  # how long a victim waits before the test gives up (bounds the run)


class StalledClient:
    """A raw WebSocket client (its own handshake and masked frames) with a
    small SO_RCVBUF set before connect, so the kernel's buffers fill fast
    once it stops reading."""

    def __init__(self, port):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.s.settimeout(15)
        self.s.connect(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall(("GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
                        "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
                        "Sec-WebSocket-Protocol: specd.v1\r\n\r\n" % (port, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.s.recv(1)  # byte by byte: read nothing past the handshake
            check(chunk, "stalled client: connection closed during the handshake")
            head += chunk
        check(head.startswith(b"HTTP/1.1 101"), "stalled client: handshake refused: %r" % head[:200])

    def send_text(self, text):
        data = text.encode()
        mask = os.urandom(4)
        n = len(data)
        hdr = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack("!H", n))
        self.s.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def close(self):
        self.s.close()


async def ws_victim(srv):
    """Seconds from sending a request to its first tokens message on a fresh WebSocket."""
    async with ws_connect(srv) as ws:
        t0 = time.monotonic()
        await ws.send(gen_msg("victim", "Once upon a time", 8))
        while True:
            left = PATIENCE_S - (time.monotonic() - t0)
            if left <= 0:
                return None
            try:
                m = await recv_json(ws, left)
            except Fail:
                return None
            check(m.get("type") != "error", "victim WebSocket request failed: %r" % m)
            if m["type"] == "tokens":
                return time.monotonic() - t0


def http_victim(srv):
    """Seconds from sending a streaming /v1/completions to its first text chunk."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=PATIENCE_S)
    body = json.dumps({"prompt": "The cat sat", "max_tokens": 8, "temperature": 0, "stream": True})
    t0 = time.monotonic()
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        check(resp.status == 200, "victim HTTP request: status %d" % resp.status)
        while True:
            line = resp.readline()
            if not line:
                return None
            if line.startswith(b"data: ") and b'"text"' in line:
                return time.monotonic() - t0
    except socket.timeout:
        return None
    finally:
        conn.close()


def run():
    need_websockets()
    with Server(max_running=MAX_RUNNING, ctx=CTX) as srv:
        a = StalledClient(srv.port)
        for k in range(N_STALLED):
            a.send_text(gen_msg("a%d" % k, "Once upon a time there was", LONG, temperature=0.8, seed=k))
        time.sleep(2.0)  # A's requests are admitted, its buffers fill and the engine pauses them
        m = srv.metrics()
        running = metric_value(m, "specd:num_requests_running")
        waiting = metric_value(m, "specd:num_requests_waiting")
        print("stalled client: %d requests sent; engine: %s running, %s waiting" % (N_STALLED, running, waiting))
        check(running and running + waiting == N_STALLED, "the stalled client's requests are not all in the engine "
              "(%s running, %s waiting): the test would prove nothing" % (running, waiting))
        ws_ttft = asyncio.run(ws_victim(srv))
        http_ttft = http_victim(srv)
        fmt = lambda t: "none within %.0f s" % PATIENCE_S if t is None else "%.3f s" % t
        print("victim time to first token beside a stalled client: WebSocket %s, HTTP %s (bound %.1f s)"
              % (fmt(ws_ttft), fmt(http_ttft), BOUND_S))
        a.close()  # the server cancels A's requests when it goes
        # let the engine finish the cancellations before SIGTERM (a shutdown
        # with requests still in the engine is a separate problem)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            m = srv.metrics()
            if metric_value(m, "specd:num_requests_running") == 0 and \
                    metric_value(m, "specd:num_requests_waiting") == 0:
                break
            time.sleep(0.05)
        check(ws_ttft is not None and ws_ttft < BOUND_S, "victim WebSocket first token: %s" % fmt(ws_ttft))
        check(http_ttft is not None and http_ttft < BOUND_S, "victim HTTP first token: %s" % fmt(http_ttft))


if __name__ == "__main__":
    main(run)
