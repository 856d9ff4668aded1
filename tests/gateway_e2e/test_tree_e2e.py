# test_tree_e2e.py — tree speculation over the wire (issue 17): a server with
# speculation.tree: auto answers greedy requests with the text plain decoding
# gives, whether the request takes the engine's auto shape, a fixed tree of
# its own bounds or the chain path, on the WebSocket and the OpenAI endpoint,
# several at once; /metrics counts the tree steps and the nodes verified; the
# monitor feed reports the mode; JSON mode with trees answers what the chain
# does; bounds above the server's, bad types and trees with logprobs are
# refused with the field named. A server with trees off refuses a request
# that asks for them, naming the setting.
import asyncio
import json

from specd_e2e import Server, check, main, metric_value, recv_json, ws_connect

PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went to the park", "One day, a big bird",
           "Tom had a red ball. He", "Sue liked to sing"]

TREE_ON = "speculation:\n  tree: auto\n  tree_budget: 16\n  tree_depth: 5\n  tree_topk: 3\n"


def complete(srv, prompt, spec):
    body = {"prompt": prompt, "max_tokens": 24, "temperature": 0, "speculation": spec}
    st, _, b = srv.http("POST", "/v1/completions", body)
    check(st == 200, "completion answered %d %r" % (st, b[:300]))
    return json.loads(b)["choices"][0]["text"]


async def ws_generate(srv, jobs):
    """jobs: [(id, prompt, speculation)], all sent at once on one socket."""
    async with ws_connect(srv) as ws:
        for jid, prompt, spec in jobs:
            await ws.send(json.dumps({"type": "generate", "id": jid, "prompt": prompt, "max_tokens": 24,
                                      "temperature": 0, "speculation": spec}))
        text, done = {j[0]: "" for j in jobs}, set()
        while len(done) < len(jobs):
            m = await recv_json(ws, 60)
            if m["type"] == "tokens":
                text[m["id"]] += m["text"]
            elif m["type"] in ("done", "error"):
                check(m["type"] == "done", "WebSocket request failed: %r" % m)
                done.add(m["id"])
        return text


async def ws_error(srv, spec):
    async with ws_connect(srv) as ws:
        await ws.send(json.dumps({"type": "generate", "id": "e", "prompt": "x", "max_tokens": 4, "speculation": spec}))
        while True:
            m = await recv_json(ws, 30)
            if m["type"] == "error":
                return m
            check(m["type"] not in ("done",), "request with %r was not refused: %r" % (spec, m))


async def monitor_snapshot(srv):
    import websockets
    async with websockets.connect("ws://127.0.0.1:%d/v1/monitor" % srv.port, subprotocols=["specd.monitor.v1"],
                                  open_timeout=15) as m:
        return json.loads(await asyncio.wait_for(m.recv(), 15))


def run():
    with Server(config=TREE_ON) as srv:
        plain = {p: complete(srv, p, {"mode": "off"}) for p in PROMPTS}
        shapes = [{"tree": "auto"}, {"tree": "fixed", "tree_budget": 8, "tree_depth": 4, "tree_topk": 2},
                  {"tree": "off"}, {"tree": "fixed", "method": "ngram"}, {}]
        for k, spec in enumerate(shapes):
            for p in PROMPTS[:3]:
                got = complete(srv, p, spec)
                check(got == plain[p], "OpenAI %r on %r: %r != plain %r" % (spec, p, got, plain[p]))
        jobs = [("j%d" % i, p, shapes[i % len(shapes)]) for i, p in enumerate(PROMPTS * 2)]
        got = asyncio.run(ws_generate(srv, jobs))
        for jid, p, spec in jobs:
            check(got[jid] == plain[p], "WebSocket %s %r on %r: %r != plain %r" % (jid, spec, p, got[jid], plain[p]))
        text = srv.metrics()
        trees = metric_value(text, "specd:spec_tree_decisions_total", {"path": "tree"}) or 0
        nodes = metric_value(text, "specd:spec_tree_nodes_total", {}) or 0
        check(trees > 0 and nodes > trees, "metrics: %s tree steps, %s nodes" % (trees, nodes))
        snap = asyncio.run(monitor_snapshot(srv))
        check(snap["tree"]["mode"] == "auto" and snap["tree"]["tree_steps"] > 0, "monitor tree: %r" % snap.get("tree"))
        # the backend as the engine describes it (not the CPU's SIMD whatever runs the ops)
        mdl = snap["model"]
        check(mdl["backend"] in ("cpu", "cuda") and mdl["backend_desc"].startswith(mdl["backend"] + " ")
              and ("threads" in mdl["backend_desc"]) == (mdl["backend"] == "cpu"), "monitor model: %r" % mdl)
        # refusals, with the field
        st, _, b = srv.http("POST", "/v1/completions", {"prompt": "x", "speculation": {"tree_budget": 17}})
        e = json.loads(b)["error"]
        check(st == 400 and e["param"] == "speculation.tree_budget" and "[1, 16]" in e["message"], "%d %r" % (st, e))
        m = asyncio.run(ws_error(srv, {"tree": "sideways"}))
        check(m["code"] == "out_of_range" and "speculation.tree" in m["message"], "%r" % m)
        # JSON mode with trees: every node masked, the answer parses and equals the chain's
        outs = []
        for spec in ({"tree": "fixed"}, {"tree": "off"}):
            st, _, b = srv.http("POST", "/v1/completions", {"prompt": "A list:", "max_tokens": 48, "temperature": 0,
                                                            "speculation": spec,
                                                            "response_format": {"type": "json_object"}})
            check(st == 200, "tree + json mode: %d %r" % (st, b[:300]))
            outs.append(json.loads(b)["choices"][0])
        check(outs[0]["text"] == outs[1]["text"], "JSON mode: trees %r != chain %r" % (outs[0]["text"], outs[1]["text"]))
        if outs[0]["finish_reason"] == "stop":
            json.loads(outs[0]["text"])
        st, _, b = srv.http("POST", "/v1/completions", {"prompt": "x", "logprobs": 2, "speculation": {"tree": "auto"}})
        check(st == 400 and "logprobs" in json.loads(b)["error"]["message"], "tree + logprobs: %d %r" % (st, b[:300]))
        print("tree e2e: %d prompts x %d shapes equal plain; %d tree steps, %d nodes" % (len(PROMPTS), len(shapes),
                                                                                         trees, nodes))
    with Server() as srv:
        st, _, b = srv.http("POST", "/v1/completions", {"prompt": "x", "speculation": {"tree": "auto"}})
        check(st == 400 and "speculation.tree" in json.loads(b)["error"]["message"], "trees off: %d %r" % (st, b[:300]))


if __name__ == "__main__":
    main(run)
