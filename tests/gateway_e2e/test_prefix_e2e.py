# test_prefix_e2e.py — prefix KV reuse over the wire (issue 20): a second
# request that starts with the same long prompt reuses its blocks
# (specd:prefix_cache_reused_tokens_total grows) and answers the same greedy
# text; "prefix_cache": false on the OpenAI endpoint and the WebSocket neither
# reuses nor leaves blocks behind (the counter stays put, same text); the
# monitor feed carries the hit ratio; a non-boolean value is refused.
import asyncio
import json

from specd_e2e import Server, check, main, metric_value, recv_json, ws_connect

PROMPT = "Once upon a time there was a little girl named Lily. She loved to play outside in the park with her dog. " * 3


def reused(srv):
    return metric_value(srv.metrics(), "specd:prefix_cache_reused_tokens_total", {"model": "target"}) or 0


def complete(srv, **kw):
    body = {"prompt": PROMPT, "max_tokens": 16, "temperature": 0}
    body.update(kw)
    st, _, b = srv.http("POST", "/v1/completions", body)
    check(st == 200, "completion answered %d %r" % (st, b[:200]))
    return json.loads(b)["choices"][0]["text"]


async def ws_complete(srv, cache):
    async with ws_connect(srv) as ws:
        await ws.send(json.dumps({"type": "generate", "id": "p", "prompt": PROMPT, "max_tokens": 16, "temperature": 0,
                                  "prefix_cache": cache}))
        text = ""
        while True:
            m = await recv_json(ws, 30)
            if m["type"] == "tokens":
                text += m["text"]
            elif m["type"] in ("done", "error"):
                check(m["type"] == "done", "WebSocket request failed: %r" % m)
                return text


async def monitor_snapshot(srv):
    import websockets
    async with websockets.connect("ws://127.0.0.1:%d/v1/monitor" % srv.port, subprotocols=["specd.monitor.v1"],
                                  open_timeout=15) as m:
        return json.loads(await asyncio.wait_for(m.recv(), 15))


def run():
    with Server() as srv:
        r0 = reused(srv)
        t_off1 = complete(srv, prefix_cache=False)
        t_off2 = complete(srv, prefix_cache=False)
        w_off = asyncio.run(ws_complete(srv, False))
        r1 = reused(srv)
        check(r1 == r0, "prefix_cache false reused %d tokens" % (r1 - r0))
        t_on1 = complete(srv)
        t_on2 = complete(srv)
        r2 = reused(srv)
        check(r2 > r1, "a repeated prompt reused nothing (%d -> %d)" % (r1, r2))
        check(t_off1 == t_off2 == w_off == t_on1 == t_on2, "greedy text changed with the cache: %r" %
              [t_off1, t_off2, w_off, t_on1, t_on2])
        snap = asyncio.run(monitor_snapshot(srv))
        pc = snap.get("prefix_cache", {})
        check(isinstance(pc.get("hit_ratio"), (int, float)) and pc["hit_ratio"] > 0,
              "monitor feed prefix_cache: %r" % pc)
        st, _, b = srv.http("POST", "/v1/completions", {"prompt": "Hi", "prefix_cache": "no"})
        check(st == 400 and b"prefix_cache" in b, "a non-boolean prefix_cache answered %d %r" % (st, b[:200]))
        print("prefix reuse: off reused 0, on reused %d tokens, same greedy text; monitor hit ratio %.2f"
              % (r2 - r1, pc["hit_ratio"]))


main(run)
