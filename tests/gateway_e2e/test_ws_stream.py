# test_ws_stream.py — a python3-websockets client on /v1/stream (specd.v1):
# a greedy stream equals `specd generate` for the same prompt and pair, two
# interleaved requests on one socket both complete correctly, and cancel stops
# a running request with nothing after its `done`.
import asyncio
import json

from specd_e2e import Server, Stream, check, check_done, cli_generate, collect, gen_msg, main, need_websockets, \
    recv_json, run_one, ws_connect

# the first request is long (400 tokens) so the interleaving check below does not
# depend on scheduling luck: a short one can finish before the second frame is read
PROMPTS = [("Once upon a time", 400), ("Lily and Ben went to the park. They", 48)]


def same_as_cli(s, ref, what):
    check(s.tokens == ref["tokens"], "%s: token ids differ from specd generate:\n  ws  %r\n  cli %r"
          % (what, s.tokens, ref["tokens"]))
    check(s.text == ref["text"], "%s: text differs from specd generate:\n  ws  %r\n  cli %r" % (what, s.text,
                                                                                             ref["text"]))
    check(s.start["prompt_tokens"] == len(ref["prompt_tokens"]), "%s: prompt_tokens %r, cli %d"
          % (what, s.start["prompt_tokens"], len(ref["prompt_tokens"])))
    check(s.done["finish_reason"] == ref["finish_reason"], "%s: finish_reason %r, cli %r"
          % (what, s.done["finish_reason"], ref["finish_reason"]))


async def scenario(srv, refs):
    async with ws_connect(srv) as ws:
        check(ws.subprotocol == "specd.v1", "negotiated subprotocol %r" % ws.subprotocol)

        # 1. one greedy stream per prompt equals the CLI
        for i, (p, n) in enumerate(PROMPTS):
            s = await run_one(ws, "solo-%d" % i, p, n)
            check_done(s, n)
            check(s.start["id"] == "solo-%d" % i and s.done["id"] == "solo-%d" % i, "id not echoed")
            check(isinstance(s.start.get("session"), str) and len(s.start["session"]) == 36, "start without a uuid")
            for ev in s.events:
                check(0 <= ev["accepted"] <= len(ev["token_ids"]), "accepted %r of %r" % (ev["accepted"],
                                                                                         ev["token_ids"]))
                check(ev["last"] in ("correction", "bonus", "sample"), "tokens.last %r" % ev["last"])
            check(sum(ev["accepted"] for ev in s.events) == s.done["speculation"]["accepted"],
                  "accepted counts in tokens events do not add up to done.speculation.accepted")
            same_as_cli(s, refs[i], "solo stream %r" % p)

        # 2. two interleaved requests on one socket (a string id and an integer id)
        ids = ["inter-a", 17]
        for rid, (p, n) in zip(ids, PROMPTS):
            await ws.send(gen_msg(rid, p, n))
        streams = {rid: Stream(rid) for rid in ids}
        order = []
        deadline = asyncio.get_running_loop().time() + 60
        while not all(s.finished for s in streams.values()):
            check(asyncio.get_running_loop().time() < deadline, "interleaved requests did not finish in 60 s")
            m = await recv_json(ws)
            check(m.get("id") in streams, "message for an unknown id: %r" % m)
            check(type(m["id"]) is type(next(k for k in ids if k == m["id"])), "id type not echoed: %r" % m)
            streams[m["id"]].add(m)
            order.append(m["id"])
        for rid, ref in zip(ids, refs):
            check_done(streams[rid])
            same_as_cli(streams[rid], ref, "interleaved %r" % rid)
        # both were in flight together: the second's start came before the first's done
        first_done = max(i for i, x in enumerate(order) if x == ids[0])
        second_start = order.index(ids[1])
        print("interleaving: %d messages, second start at %d, first done at %d" % (len(order), second_start,
                                                                                   first_done))
        check(second_start < first_done, "the two requests did not overlap: %r" % order)

        # 3. cancel mid-stream
        await ws.send(gen_msg("long", "Once upon a time", 2000, speculation={"mode": "off"}))
        s = Stream("long")
        while not s.events:
            m = await recv_json(ws)
            check(m.get("id") == "long", "unexpected message %r" % m)
            s.add(m)
        await ws.send(json.dumps({"type": "cancel", "id": "long"}))
        await collect(ws, {"long": s}, 30)
        check(s.error is None, "cancel produced an error: %r" % s.error)
        check(s.done["finish_reason"] == "cancelled", "finish_reason %r after cancel" % s.done["finish_reason"])
        check(len(s.tokens) < 2000, "cancelled request still produced all its tokens")
        check(s.done["usage"]["completion_tokens"] == len(s.tokens), "usage after cancel %r vs %d streamed"
              % (s.done["usage"], len(s.tokens)))
        print("cancelled after %d tokens" % len(s.tokens))
        # nothing more for "long": a ping round trip, then a fresh request, see only their own messages
        await ws.send(json.dumps({"type": "ping", "id": "p1"}))
        m = await recv_json(ws)
        check(m == {"type": "pong", "id": "p1"}, "expected the pong, got %r" % m)
        # cancelling it again: it is no longer active
        await ws.send(json.dumps({"type": "cancel", "id": "long"}))
        m = await recv_json(ws)
        check(m.get("type") == "error" and m.get("code") == "unknown_id" and m.get("id") == "long",
              "second cancel: %r" % m)
        # the id may be reused once finished, and the socket still serves
        s2 = await run_one(ws, "long", PROMPTS[0][0], PROMPTS[0][1])
        check_done(s2)
        same_as_cli(s2, refs[0], "reused id after cancel")


def run():
    need_websockets()
    refs = [cli_generate(p, n) for p, n in PROMPTS]
    for r, (p, n) in zip(refs, PROMPTS):
        check(len(r["tokens"]) == n and r["text"], "specd generate gave %r for %r" % (r, p))
    with Server() as srv:
        kv0 = srv.kv_free()
        asyncio.run(scenario(srv, refs))
        kv1 = srv.wait_kv_free(kv0)
        check(kv1 == kv0, "kv_blocks_free %r after the streams, %r before" % (kv1, kv0))


if __name__ == "__main__":
    main(run)
