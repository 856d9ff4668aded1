# test_guards.py — the gateway's gatekeeping seen from raw clients: WebSocket
# upgrades only on /v1/stream with specd.v1 from an allowed origin (a
# cross-site Origin, another path, no or another subprotocol are refused), one
# response per HTTP request even when a POST to an unknown endpoint carries a
# body, and keep-alive connections that stay in step across transactions.
import asyncio
import http.client
import json

from specd_e2e import Fail, Server, check, main, metric_value, need_websockets, raw_exchange, recv_json, ws_connect


async def ping(ws, tag):
    await ws.send(json.dumps({"type": "ping", "id": tag}))
    m = await recv_json(ws, 10)
    check(m == {"type": "pong", "id": tag}, "expected pong %r, got %r" % (tag, m))


def http_keepalive(srv):
    """Several transactions on one persistent connection, each answered once
    and in order — including a POST with a body to an unknown endpoint."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    hdr = {"Content-Type": "application/json"}
    for i in range(2):
        steps = [("GET", "/healthz", None, 200), ("POST", "/v1/completions", json.dumps(
            {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}), 200),
            ("POST", "/v1/completions", "{bad", 400), ("POST", "/v1/nope", '{"a": 1}', 404),
            ("GET", "/metrics", None, 200)]
        for method, path, body, want in steps:
            c.request(method, path, body=body, headers=hdr if body else {})
            r = c.getresponse()
            data = r.read()
            check(r.status == want, "keep-alive round %d: %s %s answered %d, expected %d: %r"
                  % (i, method, path, r.status, want, data[:120]))
            check(b"HTTP/1.1" not in data, "keep-alive: %s %s: a second response inside the body: %r"
                  % (method, path, data[:200]))
    c.close()


def post_unknown_endpoint_answered_once(srv):
    """A POST with its body in the same packet to an endpoint that does not
    exist gets exactly one response (404): its body is not then handled as a
    completion (a second response for an invalid body, a hidden generation
    for a valid one)."""
    req0 = metric_value(srv.metrics(), "specd:requests_total")
    for body in (b"{}", b'{"prompt": "Hi", "max_tokens": 4}'):
        for path in ("/v2/completions", "/healthz", "/"):
            buf = raw_exchange(srv.port, b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                               b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (path.encode(), len(body), body))
            check(buf.startswith(b"HTTP/1.1 404"), "POST %s: %r" % (path, buf[:120]))
            check(buf.count(b"HTTP/1.1 ") == 1, "POST %s with body %s answered twice (a 404, then the body handled "
                  "as a completion): %r" % (path, body, buf[:400]))
    big = b'{"prompt": "' + b"x" * (2 << 20) + b'"}'  # over the 1 MiB body limit as well: 413 at its headers
    buf = raw_exchange(srv.port, b"POST /v2/nope HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(big), big))
    check(buf.startswith(b"HTTP/1.1 413") and buf.count(b"HTTP/1.1 ") == 1,
          "POST /v2/nope with an oversize body: %r" % buf[:400])
    req1 = metric_value(srv.metrics(), "specd:requests_total")
    check(req1 == req0, "POSTs to unknown endpoints started %d generations" % (req1 - req0))


async def upgrades(srv):
    """WebSocket upgrades are served only on /v1/stream, with the specd.v1
    subprotocol, from the same host or with no Origin (non-browser clients);
    a cross-site Origin, another path or no subprotocol is refused."""
    ws = need_websockets()
    async with ws_connect(srv, origin="http://127.0.0.1:%d" % srv.port) as c:
        await ping(c, "same-origin")
    refused = [("Origin http://evil.example", srv.ws_url, ["specd.v1"], "http://evil.example"),
               ("path /elsewhere", srv.ws_url.replace("/v1/stream", "/elsewhere"), ["specd.v1"], None),
               ("path /", srv.ws_url.replace("/v1/stream", "/"), ["specd.v1"], None),
               ("no subprotocol", srv.ws_url, None, None),
               ("subprotocol other.v1", srv.ws_url, ["other.v1"], None)]
    for what, url, sub, origin in refused:
        try:
            async with ws.connect(url, subprotocols=sub, origin=origin, open_timeout=10) as c:
                raise Fail("a WebSocket upgrade with %s was accepted (subprotocol %r)" % (what, c.subprotocol))
        except ws.exceptions.InvalidHandshake:
            pass
    print("ws: %d kinds of unwanted upgrades refused" % len(refused))


def run():
    need_websockets()
    with Server() as srv:
        asyncio.run(upgrades(srv))
        http_keepalive(srv)
        post_unknown_endpoint_answered_once(srv)
        st, _, _ = srv.http("GET", "/healthz")
        check(st == 200, "/healthz %d at the end" % st)


if __name__ == "__main__":
    main(run)
