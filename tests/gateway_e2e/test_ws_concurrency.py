# test_ws_concurrency.py — 200 concurrent WebSocket streams (20 sockets × 10
# requests, the same ids reused on every socket, seeded, greedy and sampled
# with a fixed γ): every stream's token ids equal that request's output when
# run alone afterwards — no lost, duplicated or reordered tokens, nothing
# crossing between requests or sockets — and the KV pool is back to its
# initial free count.
import asyncio
import time

from specd_e2e import Server, Stream, check, check_done, gen_msg, main, metric_value, need_websockets, \
    recv_json, run_one, ws_connect

N_SOCKETS = 20
PER_SOCKET = 10
MAX_RUNNING = 32
PROMPTS = ["Once upon a time", "The cat sat", "Tom had a red ball.", "One day, a little bird",
           "Lily wanted to", "The sun was hot and", "Ben and his mom went", "Sue found a box"]


def request(sock, k):
    """The request k of socket sock: (id, prompt, max_tokens, temperature, extra fields)."""
    i = sock * PER_SOCKET + k
    rid = "r%d" % k  # the same ids on every socket: ids are per connection
    prompt = PROMPTS[i % len(PROMPTS)]
    n = 16 + i % 9
    kind = i % 4
    if kind == 0:
        return rid, prompt, n, 0, {}
    if kind == 1:
        return rid, prompt, n, 0, {"speculation": {"mode": "off"}}
    fixed = {"speculation": {"gamma": 4, "adaptive": False}, "seed": 1000 + i}
    if kind == 2:
        return rid, prompt, n, 0.8, fixed
    return rid, prompt, n, 1.0, dict(fixed, top_k=40, top_p=0.95)


async def one_socket(srv, sock, ready, go, live):
    async with ws_connect(srv) as ws:
        ready.append(sock)
        await go.wait()  # every socket is open before any request is sent
        reqs = [request(sock, k) for k in range(PER_SOCKET)]
        for rid, p, n, t, kw in reqs:
            await ws.send(gen_msg(rid, p, n, t, **kw))
        streams = {r[0]: Stream(r[0]) for r in reqs}
        deadline = time.monotonic() + 240
        while not all(s.finished for s in streams.values()):
            check(time.monotonic() < deadline, "socket %d: streams not finished in 240 s" % sock)
            m = await recv_json(ws, 240)
            check(m.get("id") in streams, "socket %d: message for an id it never sent: %r" % (sock, m))
            streams[m["id"]].add(m)
            # requests started and not yet done, over all sockets, as the clients see them
            if m["type"] == "start":
                live[0] += 1
                live[1] = max(live[1], live[0])
            elif m["type"] in ("done", "error"):
                live[0] -= 1
        return sock, streams


async def all_sockets(srv):
    ready, go, live = [], asyncio.Event(), [0, 0]
    tasks = [asyncio.create_task(one_socket(srv, s, ready, go, live)) for s in range(N_SOCKETS)]
    while len(ready) < N_SOCKETS:
        check(not any(t.done() for t in tasks), "a socket failed to open: %r"
              % [t.exception() for t in tasks if t.done()])
        await asyncio.sleep(0.01)
    go.set()
    return await asyncio.gather(*tasks), live[1]


async def alone(srv):
    out = {}
    async with ws_connect(srv) as ws:
        for sock in range(N_SOCKETS):
            for k in range(PER_SOCKET):
                rid, p, n, t, kw = request(sock, k)
                out[(sock, k)] = await run_one(ws, "alone", p, n, t, **kw)
    return out


def run():
    need_websockets()
    with Server(max_running=MAX_RUNNING) as srv:
        kv0 = srv.kv_free()
        check(kv0 > 0, "no free KV blocks at start")
        steps0 = metric_value(srv.metrics(), "specd:engine_steps_total")

        t0 = time.monotonic()
        results, peak = asyncio.run(all_sockets(srv))
        t_conc = time.monotonic() - t0
        n_tok = sum(len(s.tokens) for _, ss in results for s in ss.values())
        print("concurrent: %d streams, %d tokens in %.2f s; at most %d streams in flight at once"
              % (N_SOCKETS * PER_SOCKET, n_tok, t_conc, peak))
        steps1 = metric_value(srv.metrics(), "specd:engine_steps_total")

        t0 = time.monotonic()
        solo = asyncio.run(alone(srv))
        steps2 = metric_value(srv.metrics(), "specd:engine_steps_total")
        print("alone: %d requests in %.2f s; engine steps %d concurrent vs %d alone"
              % (len(solo), time.monotonic() - t0, steps1 - steps0, steps2 - steps1))
        # the streams really shared engine steps (batched), rather than running one after another
        check(steps1 - steps0 < 0.5 * (steps2 - steps1), "the concurrent phase took %d engine steps, the solo runs "
              "%d: the requests were not batched together" % (steps1 - steps0, steps2 - steps1))

        bad = []
        for sock, streams in results:
            for k in range(PER_SOCKET):
                rid, p, n, t, kw = request(sock, k)
                s, a = streams[rid], solo[(sock, k)]
                check_done(s, n)
                check_done(a, n)
                if s.tokens != a.tokens or s.text != a.text:
                    bad.append("socket %d %s (prompt %r, temp %g, %r):\n    concurrent %r\n    alone      %r"
                               % (sock, rid, p, t, kw, s.tokens, a.tokens))
                if t > 0:
                    check(s.done["gamma_used"] is None or s.done["gamma_used"] <= 4.0 + 1e-9,
                          "fixed gamma 4 but gamma_used %r" % s.done["gamma_used"])
        check(not bad, "%d of %d streams differ from their solo run:\n  %s"
              % (len(bad), N_SOCKETS * PER_SOCKET, "\n  ".join(bad[:5])))

        kv1 = srv.wait_kv_free(kv0)
        check(kv1 == kv0, "kv_blocks_free %r after all streams, %r at start" % (kv1, kv0))
        m = srv.metrics()
        check(metric_value(m, "specd:num_requests_running") == 0, "requests still running")
        check(metric_value(m, "specd:num_requests_waiting") == 0, "requests still waiting")


if __name__ == "__main__":
    main(run)
