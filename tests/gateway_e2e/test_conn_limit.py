# test_conn_limit.py — server.max_requests_per_connection on both protocols,
# with the real pair, through urllib, a raw socket and python3-websockets
# (server.max_requests_per_connection: 2, server.max_choices: 4).
# HTTP/1.1 serves one request of a connection at a time (pipelined GETs are
# answered in order; a request pipelined behind a POST closes the connection
# and cancels the POST), so on HTTP the concurrent requests of a connection
# are the choices of its request: n = 2 is served, n = 3 (allowed by
# max_choices) is refused before anything runs with 429 too_many_requests,
# param n, on both endpoints, streaming or not, and the metrics count it;
# requests in turn on one keep-alive connection are never refused. On the
# WebSocket the third request in flight on one socket gets the same code and
# message start, and the two before it finish.
import asyncio
import http.client
import json
import socket

from specd_e2e import (CHAT, COMP, Fail, Server, check, gen_msg, main, metric_value, need_websockets, oa_body, recv_json,
                       ws_connect)

LIMIT = 2
CONFIG = "server:\n  max_requests_per_connection: %d\n  max_choices: 4\n" % LIMIT
MSG = "too many concurrent requests on this connection"


def body(path, n, **kw):
    return oa_body(path, **{"max_tokens": 8, "temperature": 0, "n": n, **kw})


def errors(srv, code):
    """specd:errors_total{code=...}, 0 before the first."""
    try:
        return metric_value(srv.metrics(), "specd:errors_total", {"code": code})
    except Fail:
        return 0


def refusals(srv):
    return errors(srv, "too_many_requests")


def pipelined_closes(srv):
    return errors(srv, "pipelined_request")


def check_http(srv):
    before = refusals(srv)
    refused = 0
    for path in (COMP, CHAT):
        st, _, raw = srv.http("POST", path, body(path, LIMIT), timeout=60)
        r = json.loads(raw)
        check(st == 200 and len(r["choices"]) == LIMIT, "%s n=%d: %d %r" % (path, LIMIT, st, r))
        for stream in (False, True):
            st, hd, raw = srv.http("POST", path, body(path, LIMIT + 1, stream=stream), timeout=60)
            check(st == 429, "%s n=%d stream=%s: status %d, expected 429: %r" % (path, LIMIT + 1, stream, st, raw))
            check(hd.get("content-type", "").startswith("application/json"), "429 is not JSON: %r" % hd)
            e = json.loads(raw)["error"]
            check(e["code"] == "too_many_requests" and e["param"] == "n" and e["message"].startswith(MSG),
                  "%s n=%d: error %r" % (path, LIMIT + 1, e))
            check(("max_requests_per_connection is %d" % LIMIT) in e["message"], "message names no limit: %r" % e)
            refused += 1
    after = refusals(srv)
    check(after - before == refused, "errors_total{code=too_many_requests} rose by %s, expected %d"
          % (after - before, refused))


def check_keepalive(srv):
    """Requests in turn on one connection: each is alone in flight, none refused."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    try:
        for i in range(2 * LIMIT + 1):
            conn.request("POST", COMP, json.dumps(body(COMP, LIMIT)), {"Content-Type": "application/json"})
            r = conn.getresponse()
            raw = r.read()
            check(r.status == 200, "keep-alive request %d: %d %r" % (i, r.status, raw[:200]))
            check(r.getheader("connection", "").lower() != "close", "the server closed the keep-alive connection")
    finally:
        conn.close()


def read_until_closed(sock):
    buf = b""
    try:
        while True:
            d = sock.recv(65536)
            if not d:
                return buf, True
            buf += d
    except ConnectionResetError:
        return buf, True
    except socket.timeout:
        return buf, False


def check_pipelined(srv):
    """GETs pipelined on one socket are answered in order; a request
    pipelined behind a POST (RFC 9112 9.3.2: clients should not) closes the
    connection, cancels the POST's choices, and the server serves on."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 3)
        buf = b""
        while buf.count(b"HTTP/1.1 200") < 3:
            d = s.recv(65536)
            check(d, "pipelined GETs: closed after %r" % buf)
            buf += d
    finally:
        s.close()
    free0 = srv.kv_free()
    one = json.dumps(body(COMP, LIMIT, max_tokens=200)).encode()
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(one), one))
    before = pipelined_closes(srv)
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    try:
        s.sendall(req * 2)
        buf, closed = read_until_closed(s)
    finally:
        s.close()
    check(closed and b"HTTP/1.1 200" not in buf, "pipelined POSTs: closed %s after %r" % (closed, buf[:200]))
    check(pipelined_closes(srv) == before + 1, "errors_total{code=pipelined_request} did not count it")
    left = srv.wait_kv_free(free0, timeout=10)
    check(left == free0, "KV blocks free %s after the cancelled choices, %s before" % (left, free0))
    st, _, raw = srv.http("POST", COMP, body(COMP, LIMIT), timeout=60)
    check(st == 200, "after the pipelined POSTs: %d %r" % (st, raw[:200]))


async def check_ws(srv):
    async with ws_connect(srv) as ws:
        for i in range(LIMIT + 1):
            await ws.send(gen_msg("r%d" % i, "Once upon a time", 64))
        done, refused = set(), None
        while len(done) < LIMIT or refused is None:
            m = await recv_json(ws, 60)
            if m.get("type") == "error":
                check(m["id"] == "r%d" % LIMIT and refused is None, "unexpected error %r" % m)
                refused = m
            elif m.get("type") == "done":
                done.add(m["id"])
        check(done == {"r%d" % i for i in range(LIMIT)}, "finished: %r" % done)
        check(refused["code"] == "too_many_requests" and refused["message"].startswith(MSG), "error %r" % refused)


def run():
    need_websockets()
    with Server(config=CONFIG) as srv:
        check_http(srv)
        check_keepalive(srv)
        check_pipelined(srv)
        asyncio.run(check_ws(srv))
        st, _, _ = srv.http("GET", "/healthz")
        check(st == 200, "healthz after the checks: %d" % st)


if __name__ == "__main__":
    main(run)
