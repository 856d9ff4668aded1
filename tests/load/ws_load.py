#!/usr/bin/env python3
"""ws_load.py — a bounded WebSocket load run against a running `specd serve`.

N clients connect to /v1/stream, each sends one generate request and reads the
stream to `done`. Prints tokens/s delivered, the p50/p99 time from the engine
emitting a token (t_emit_ms in each tokens frame) to the client receiving it,
and failed/dropped connections. Run by hand for benchmark figures:
  /usr/bin/python3 tests/load/ws_load.py --port 8080 --clients 1,100,1000 --max-tokens 32
"""
import argparse, asyncio, json, resource, statistics, time
import websockets

async def client(url, i, max_tokens, lat, counts, sem):
    async with sem:
        pass
    try:
        async with websockets.connect(url, subprotocols=["specd.v1"], open_timeout=60, close_timeout=5,
                                      max_queue=None) as ws:
            await ws.send(json.dumps({"type": "generate", "id": i, "prompt": "Once upon a time",
                                      "max_tokens": max_tokens, "temperature": 0.8, "seed": i}))
            while True:
                m = json.loads(await ws.recv())
                now = time.time() * 1e3
                if m["type"] == "tokens":
                    counts["tokens"] += len(m["token_ids"])
                    lat.append(now - m["t_emit_ms"])
                elif m["type"] == "done":
                    counts["done"] += 1
                    return
                elif m["type"] == "error":
                    counts["errors"] += 1
                    return
    except Exception as e:  # a dropped or refused connection
        counts["failed"] += 1
        counts.setdefault("why", str(e)[:80])

async def run(url, n, max_tokens):
    lat, counts = [], {"tokens": 0, "done": 0, "errors": 0, "failed": 0}
    sem = asyncio.Semaphore(n)
    t0 = time.time()
    await asyncio.gather(*(client(url, i, max_tokens, lat, counts, sem) for i in range(n)))
    dt = time.time() - t0
    lat.sort()
    p = lambda q: lat[min(len(lat) - 1, int(q * (len(lat) - 1)))] if lat else float("nan")
    print(f"{n:6d} clients: {counts['tokens'] / dt:9.1f} tok/s delivered, done {counts['done']}, errors "
          f"{counts['errors']}, failed connections {counts['failed']}, emit->receive p50 {p(0.5):.2f} ms "
          f"p99 {p(0.99):.2f} ms, wall {dt:.1f} s" + (f" ({counts['why']})" if counts["failed"] else ""))

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--clients", default="1,100,1000")
    ap.add_argument("--max-tokens", type=int, default=32)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    for n in [int(x) for x in a.clients.split(",")]:
        asyncio.run(run(f"ws://127.0.0.1:{a.port}/v1/stream", n, a.max_tokens))

main()
