# test_all_proposers.py — every proposer served end to end (issue 44, item 0):
# `specd serve` with the draft model AND Medusa heads loaded (heads trained here
# by `specd train-medusa`, seconds) answers greedy requests with the text plain
# decoding gives, for each proposer alone (draft chain, n-gram, auto, Medusa,
# draft tree, n-gram tree) and for all of them mixed in one batch, over the
# OpenAI endpoint and the WebSocket; with the policy rule choosing the method
# (the path that crashed: `serve --medusa` died with SIGSEGV on its first
# request because the rule's method dropped the Medusa state an auto request
# still followed); with the prefix cache off; with the F16 KV cache (the
# default) and an F32 one. Runs under the ASan build too.
import asyncio
import json
import os
import tempfile

from specd_e2e import Server, check, main, train_medusa_heads, paths, recv_json, ws_connect

PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went to the park", "One day, a big bird",
           "Tom had a red ball. He", "Sue liked to sing"]

SPECS = {
    "plain": {"mode": "off"},
    "default": {},
    "auto": {"method": "auto"},
    "draft": {"method": "draft"},
    "ngram": {"method": "ngram"},
    "medusa": {"method": "medusa"},
    "draft_tree": {"method": "draft", "tree": "fixed", "tree_budget": 8, "tree_depth": 4, "tree_topk": 2},
    "ngram_tree": {"method": "ngram", "tree": "fixed"},
}

TREES = "speculation:\n  tree: auto\n  tree_budget: 16\n  tree_depth: 5\n  tree_topk: 3\n"


def train_heads(tmp):
    return train_medusa_heads(tmp, 2)


def complete(srv, prompt, spec, n=24):
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0}
    if spec is not None:
        body["speculation"] = spec
    st, _, b = srv.http("POST", "/v1/completions", body, timeout=120)
    check(st == 200, "completion %r answered %d %r" % (spec, st, b[:300]))
    return json.loads(b)["choices"][0]["text"]


def chat(srv, text, spec):
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": 16, "temperature": 0, "speculation": spec}
    st, _, b = srv.http("POST", "/v1/chat/completions", body, timeout=120)
    check(st == 200, "chat %r answered %d %r" % (spec, st, b[:300]))
    return json.loads(b)["choices"][0]["message"]["content"]


async def ws_batch(srv, jobs):
    """jobs: [(id, prompt, speculation)], all sent at once on one socket (one batch)."""
    async with ws_connect(srv) as ws:
        for jid, prompt, spec in jobs:
            await ws.send(json.dumps({"type": "generate", "id": jid, "prompt": prompt, "max_tokens": 24,
                                      "temperature": 0, "speculation": spec}))
        text, done = {j[0]: "" for j in jobs}, set()
        while len(done) < len(jobs):
            m = await recv_json(ws, 120)
            if m["type"] == "tokens":
                text[m["id"]] += m["text"]
            elif m["type"] in ("done", "error"):
                check(m["type"] == "done", "WebSocket request failed: %r" % m)
                done.add(m["id"])
        return text


def serve_and_check(heads, config, label, kv_type="f16"):
    with Server(config=config, extra=["--medusa", heads], max_running=16) as srv:
        check("KV cache %s:" % kv_type in srv.stderr_tail(100000), "%s: the server does not say its KV cache is %s"
              % (label, kv_type))
        # the README's first request against `serve --medusa`: a plain greedy completion with no options
        first = complete(srv, PROMPTS[0], None)
        check(srv.alive(), "%s: server died on its first request" % label)
        plain = {p: complete(srv, p, SPECS["plain"]) for p in PROMPTS}
        check(first == plain[PROMPTS[0]], "%s: first request %r != plain %r" % (label, first, plain[PROMPTS[0]]))
        for name, spec in SPECS.items():
            for p in PROMPTS[:2]:
                got = complete(srv, p, spec)
                check(got == plain[p], "%s HTTP %s on %r: %r != plain %r" % (label, name, p, got, plain[p]))
        cplain = chat(srv, "Tell me a story.", SPECS["plain"])
        for name in ("auto", "medusa", "draft_tree"):
            got = chat(srv, "Tell me a story.", SPECS[name])
            check(got == cplain, "%s chat %s: %r != plain %r" % (label, name, got, cplain))
        # every proposer in one batch, twice over, on one socket
        names = list(SPECS)
        jobs = [("j%d" % i, PROMPTS[i % len(PROMPTS)], SPECS[names[i % len(names)]]) for i in range(2 * len(names))]
        got = asyncio.run(ws_batch(srv, jobs))
        for jid, p, spec in jobs:
            check(got[jid] == plain[p], "%s WebSocket %s %r on %r: %r != plain %r"
                  % (label, jid, spec, p, got[jid], plain[p]))
        check(srv.alive(), "%s: server died" % label)


def run():
    with tempfile.TemporaryDirectory() as tmp:
        heads = train_heads(tmp)
        serve_and_check(heads, TREES, "trees auto")
        # an F32 KV cache (engine.kv_type; F16 is the default): every proposer, trees (their compaction
        # moves the cache's elements), the prefix cache (shared blocks copied on write) and mixed batches
        # against its own plain decoding
        serve_and_check(heads, "engine:\n  kv_type: f32\n" + TREES, "f32 KV cache, trees auto", "f32")
        # the policy rule picks the method (auto, medusa, draft) with the prefix cache off
        for m in ("auto", "medusa", "draft"):
            cfg = ("engine:\n  prefix_cache: false\n" + TREES + "  method: %s\n" % m)
            serve_and_check(heads, cfg, "policy %s" % m)


if __name__ == "__main__":
    main(run)
