# test_medusa_reports.py — Medusa is reported as Medusa everywhere (issue 43,
# item 4). Before, its requests were stepped as "n-gram" sequences, its tree
# steps were written to SQLite as method 'plain', and the per-method counters
# (Prometheus, /api/stats, the WebSocket `done` frame, the monitor feed) had no
# slot for it. With heads trained here and a fixed tree shape (so the heads
# propose on every step instead of the cost curve choosing plain steps on a
# tiny CPU model), greedy Medusa requests over HTTP and the WebSocket must:
#   * give plain decoding's text;
#   * name `medusa` with verify steps in the OpenAI response's speculation
#     object, the WebSocket done frame, /api/stats, the Prometheus
#     *_by_method_total families and the monitor feed's proposer shares;
#   * leave SQLite step rows with method 'medusa', shape 'tree', the nodes
#     verified apart from the depth (nodes_verified >= gamma_used, and more on
#     some branched step), and n_accepted + n_rejected == nodes_verified;
#   * appear in `specd telemetry summary`'s by-proposer table.
# Draft-model requests on the same server stay counted as `draft` (no mixing).
import asyncio
import json
import os
import sqlite3
import subprocess
import tempfile

from specd_e2e import Server, check, main, train_medusa_heads, metric_value, paths, recv_json, ws_connect

PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went to the park", "One day, a big bird"]
MEDUSA = {"method": "medusa"}


def train_heads(tmp):
    return train_medusa_heads(tmp, 6)


def complete(srv, prompt, spec):
    body = {"prompt": prompt, "max_tokens": 32, "temperature": 0, "speculation": spec}
    st, _, b = srv.http("POST", "/v1/completions", body, timeout=120)
    check(st == 200, "completion %r answered %d %r" % (spec, st, b[:300]))
    j = json.loads(b)
    return j["choices"][0]["text"], j.get("speculation") or {}


async def ws_medusa(srv, prompts):
    async with ws_connect(srv) as ws:
        for i, p in enumerate(prompts):
            await ws.send(json.dumps({"type": "generate", "id": "m%d" % i, "prompt": p, "max_tokens": 32,
                                      "temperature": 0, "speculation": MEDUSA}))
        text, done = {}, {}
        while len(done) < len(prompts):
            m = await recv_json(ws, 120)
            if m["type"] == "tokens":
                text[m["id"]] = text.get(m["id"], "") + m["text"]
            elif m["type"] in ("done", "error"):
                check(m["type"] == "done", "WebSocket request failed: %r" % m)
                done[m["id"]] = m
        return text, done


async def monitor_medusa_share(srv, while_running):
    """Snapshots of /v1/monitor while while_running() runs in a thread; the
    largest Medusa pass count seen in the feed's proposer shares."""
    import websockets
    best, names = 0, set()
    async with websockets.connect("ws://127.0.0.1:%d/v1/monitor" % srv.port, subprotocols=["specd.monitor.v1"],
                                  open_timeout=15) as m:
        task = asyncio.get_running_loop().run_in_executor(None, while_running)
        while not task.done():
            try:
                s = json.loads(await asyncio.wait_for(m.recv(), 5))
            except asyncio.TimeoutError:
                continue
            for x in (s.get("proposal") or {}).get("by_method") or []:
                names.add(x["method"])
                if x["method"] == "medusa":
                    best = max(best, x.get("passes") or 0)
        await task
        for _ in range(3):  # the window after the last request still holds its passes
            s = json.loads(await asyncio.wait_for(m.recv(), 5))
            for x in (s.get("proposal") or {}).get("by_method") or []:
                names.add(x["method"])
                if x["method"] == "medusa":
                    best = max(best, x.get("passes") or 0)
    return best, names


def run():
    specd, _, _ = paths()
    with tempfile.TemporaryDirectory() as tmp:
        heads = train_heads(tmp)
        db = os.path.join(tmp, "telemetry.db")
        cfg = ("speculation:\n  tree: fixed\n  tree_budget: 16\n  tree_depth: 3\n  tree_topk: 3\n"
               "telemetry:\n  path: %s\n" % db)
        with Server(config=cfg, extra=["--medusa", heads], max_running=8) as srv:
            plain = {p: complete(srv, p, {"mode": "off"})[0] for p in PROMPTS}
            # over HTTP: the text, and the speculation object names the proposer
            for p in PROMPTS:
                text, sp = complete(srv, p, MEDUSA)
                check(text == plain[p], "Medusa on %r: %r != plain %r" % (p, text, plain[p]))
                bm = sp.get("by_method") or {}
                check(set(bm) >= {"draft", "ngram", "medusa"}, "speculation.by_method %r lacks a proposer" % bm)
                check(bm["medusa"]["verify_steps"] > 0 and bm["medusa"]["verify_steps"] == sp["verify_steps"],
                      "Medusa request's verify steps not counted as medusa: %r (total %r)" % (bm, sp.get("verify_steps")))
                check(bm["ngram"]["verify_steps"] == 0, "Medusa steps counted as n-gram: %r" % bm)
            # a draft-model request on the same server is counted as draft
            text, sp = complete(srv, PROMPTS[0], {"method": "draft", "tree": "off"})
            check(text == plain[PROMPTS[0]], "draft request: %r != plain" % text)
            check(sp["by_method"]["draft"]["verify_steps"] > 0 and sp["by_method"]["medusa"]["verify_steps"] == 0,
                  "draft request counted as %r" % sp["by_method"])
            # over the WebSocket, with the monitor feed watching
            got = {}

            def ws_run():
                got["r"] = asyncio.run(ws_medusa(srv, PROMPTS))

            seen, names = asyncio.run(monitor_medusa_share(srv, ws_run))
            text, done = got["r"]
            for i, p in enumerate(PROMPTS):
                check(text["m%d" % i] == plain[p], "WebSocket Medusa on %r: %r != plain" % (p, text["m%d" % i]))
                bm = (done["m%d" % i].get("speculation") or {}).get("by_method") or {}
                check(bm.get("medusa", {}).get("verify_steps", 0) > 0, "done frame's by_method %r: no medusa" % bm)
            check(seen > 0, "the monitor feed never showed Medusa passes (proposers seen: %r)" % sorted(names))
            # /api/stats and /metrics
            st, _, b = srv.http("GET", "/api/stats")
            check(st == 200, "/api/stats answered %d" % st)
            stats = json.loads(b)
            med = stats.get("by_method", {}).get("medusa", {})
            check(med.get("verify_steps", 0) > 0, "/api/stats by_method %r: no medusa" % stats.get("by_method"))
            fams = srv.metrics()
            for fam in ("specd:spec_decode_num_drafts_by_method_total",
                        "specd:spec_decode_num_draft_tokens_by_method_total",
                        "specd:spec_decode_num_accepted_tokens_by_method_total"):
                v = metric_value(fams, fam, {"method": "medusa"})
                check(v > 0, "%s{method=\"medusa\"} is %r" % (fam, v))
            check(metric_value(fams, "specd:spec_decode_num_drafts_by_method_total", {"method": "medusa"})
                  == med["verify_steps"], "Prometheus and /api/stats disagree on Medusa's verify steps")
        # telemetry: written by the stopped server
        con = sqlite3.connect(db)
        rows = con.execute("SELECT count(*), sum(shape = 'tree'), sum(nodes_verified >= gamma_used),"
                           " sum(nodes_verified > gamma_used), sum(n_accepted + n_rejected = nodes_verified)"
                           " FROM speculation_steps WHERE method = 'medusa'").fetchone()
        n, trees, ge, gt, sums = rows
        check(n and n > 0, "no telemetry step row has method 'medusa' (methods: %r)" %
              con.execute("SELECT method, count(*) FROM speculation_steps GROUP BY method").fetchall())
        check(trees == n and ge == n and sums == n,
              "medusa rows: %d, tree %d, nodes>=depth %d, accepted+rejected=nodes %d" % (n, trees, ge, sums))
        check(gt > 0, "no Medusa step verified more nodes than its depth: nodes and depth not apart")
        plain_rows = con.execute("SELECT count(*) FROM speculation_steps WHERE method = 'plain' AND"
                                 " nodes_verified > 0").fetchone()[0]
        check(plain_rows == 0, "%d 'plain' rows verified drafts" % plain_rows)
        con.close()
        r = subprocess.run([specd, "telemetry", "summary", "--db", db], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "telemetry summary failed: %s" % r.stderr[-500:])
        part = r.stdout.split("by proposer", 1)
        check(len(part) == 2 and "medusa" in part[1] and "draft" in part[1],
              "telemetry summary's by-proposer table lacks medusa/draft:\n%s" % r.stdout[-1500:])
        print("medusa reported in the OpenAI and WebSocket objects, /api/stats, /metrics, the monitor feed "
              "(%d passes seen), %d telemetry rows and the summary" % (seen, n))


if __name__ == "__main__":
    main(run)
