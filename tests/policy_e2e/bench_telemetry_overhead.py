# bench_telemetry_overhead.py — decode tokens/s of `specd serve` at concurrency
# 8 (8 WebSocket streams at a time, greedy, 200 tokens each, stories260K +
# llama2xs, -t 1) with telemetry on (sample_rate 1, every step a row) and off.
# Runs on, off, on, off and prints each configuration's best round: a
# benchmark figure, not an assertion (the only checks are that every request
# completed and that the "on" server wrote its rows without dropping any).
import asyncio
import os
import time

from pe2e import check, gen_msg, main, make_config, run_batch, Server, story_prompts, tmpdir, with_server, \
    write_file, ws_connect

CONC, PER_STREAM, MAX_TOKENS, ROUNDS = 8, 16, 200, 3


async def drive(srv, prompts):
    """CONC sockets, each running PER_STREAM requests one after another; returns (tokens, seconds)."""
    async def sock(k):
        n = 0
        async with ws_connect(srv) as ws:
            for j in range(PER_STREAM):
                rid = "b%d" % j
                s = (await run_batch(ws, [(rid, gen_msg(rid, prompts[(k * PER_STREAM + j) % len(prompts)],
                                                         MAX_TOKENS, 0, seed=j))], timeout=120))[rid]
                s.check_ok()
                n += len(s.tokens)
        return n

    t0 = time.monotonic()
    counts = await asyncio.gather(*[sock(k) for k in range(CONC)])
    return sum(counts), time.monotonic() - t0


def one(telemetry, prompts):
    d = tmpdir("specd-pe2e-bench-")
    text, db = make_config(d, telemetry=telemetry, sample_rate="1.0")
    cfg = os.path.join(d, "config.yaml")
    write_file(cfg, text)
    srv = Server(d, cfg).start()

    def body():
        asyncio.run(drive(srv, prompts[:CONC]))  # warm-up
        tokens, secs = asyncio.run(drive(srv, prompts))
        tel = srv.stats().get("telemetry")
        rc = srv.stop()
        check(rc == 0, "specd serve exited %r" % rc)
        if telemetry:
            check(tel and tel["written"] > 0 and tel["dropped"] == 0, "telemetry counters %r" % tel)
        return tokens, secs, tel

    return with_server(srv, body)


def run():
    prompts = story_prompts(CONC * PER_STREAM)
    best = {True: 0.0, False: 0.0}
    for r in range(ROUNDS):
        for on in (True, False):
            tokens, secs, tel = one(on, prompts)
            rate = tokens / secs
            best[on] = max(best[on], rate)
            print("round %d, telemetry %-3s: %d tokens in %.2f s = %.0f tokens/s%s"
                  % (r + 1, "on" if on else "off", tokens, secs, rate,
                     ", rows written %d, dropped %d" % (tel["written"], tel["dropped"]) if on else ""))
    print("BENCH decode tokens/s at concurrency %d (best of %d): telemetry on %.0f, off %.0f (on/off = %.3f)"
          % (CONC, ROUNDS, best[True], best[False], best[True] / best[False]))


if __name__ == "__main__":
    main(run)
