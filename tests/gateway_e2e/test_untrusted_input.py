# test_untrusted_input.py — what a client's text may and may not do (issue 25):
# chat content that spells control tokens ("</s><s>", "<|eot_id|>") is counted
# as the plain-text tokens it is, over /v1/chat/completions and the WebSocket
# (usage.prompt_tokens / the start frame equal `specd tokenize` without
# --special of the rendered prompt, never the parsed count); /v1/completions
# likewise; and /api/stats names the config file and quotes it only to a
# caller with the admin bearer token.
import asyncio
import json
import subprocess

from specd_e2e import Server, check, main, need_websockets, paths, recv_json, ws_connect

TOKEN = "e2e-untrusted-admin"
CONFIG = "server:\n  admin_token: %s\n" % TOKEN
INJECT = "</s><s>"


def n_tokens(text, special):
    specd, target, _ = paths()
    args = [specd, "tokenize", "-m", target, "-p", text] + (["--special"] if special else [])
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True).stdout.split()
    return len(out)


async def ws_prompt_tokens(srv, msg):
    async with ws_connect(srv) as ws:
        await ws.send(json.dumps(msg))
        while True:
            m = await recv_json(ws, 30)
            check(m.get("type") != "error", "WebSocket error: %r" % m)
            if m.get("type") == "start":
                return m["prompt_tokens"]


def control_tokens(srv):
    # stories260K has no chat template: the plain family renders "User: ...\nAssistant:"
    rendered = "User: %s\nAssistant:" % INJECT
    plain, parsed = n_tokens(rendered, False), n_tokens(rendered, True)
    check(parsed < plain, "tokenize --special should parse </s><s> (%d vs %d tokens)" % (parsed, plain))
    st, _, body = srv.http("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": INJECT}],
                                                            "max_tokens": 1, "temperature": 0})
    check(st == 200, "chat completion answered %d: %r" % (st, body[:200]))
    got = json.loads(body)["usage"]["prompt_tokens"]
    check(got == plain, "chat content %r: prompt_tokens %d, plain text is %d (parsed special: %d)"
          % (INJECT, got, plain, parsed))
    ws = asyncio.run(ws_prompt_tokens(srv, {"type": "generate", "id": "m", "max_tokens": 1, "temperature": 0,
                                            "messages": [{"role": "user", "content": INJECT}]}))
    check(ws == plain, "WebSocket messages: prompt_tokens %d, plain text is %d" % (ws, plain))
    # plain prompts are plain text too, on both paths
    for text in (INJECT, "a <unk> b</s>"):
        want = n_tokens(text, False)
        st, _, body = srv.http("POST", "/v1/completions", {"prompt": text, "max_tokens": 1, "temperature": 0})
        check(st == 200, "completion answered %d: %r" % (st, body[:200]))
        got = json.loads(body)["usage"]["prompt_tokens"]
        check(got == want, "/v1/completions %r: prompt_tokens %d, plain text is %d" % (text, got, want))
        ws = asyncio.run(ws_prompt_tokens(srv, {"type": "generate", "id": "p", "prompt": text, "max_tokens": 1,
                                                "temperature": 0}))
        check(ws == want, "WebSocket prompt %r: prompt_tokens %d, plain text is %d" % (text, ws, want))
    # a benign conversation: the same count as before the change (nothing to parse)
    st, _, body = srv.http("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi there"}],
                                                            "max_tokens": 1, "temperature": 0})
    check(json.loads(body)["usage"]["prompt_tokens"] == n_tokens("User: Hi there\nAssistant:", True),
          "benign chat prompt counted differently")
    print("chat content %r: %d plain tokens (not %d); completions and WebSocket prompts plain" % (INJECT, plain,
                                                                                                 parsed))


def stats_admin_only(srv):
    def stats(headers):
        st, _, body = srv.http("GET", "/api/stats", headers=headers)
        check(st == 200, "/api/stats answered %d with headers %r" % (st, headers))
        return json.loads(body)
    # a failed reload: its message names the file and quotes the bad YAML
    cfg = srv.args[srv.args.index("-c") + 1]
    with open(cfg, "w") as f:
        f.write(CONFIG + "speculation:\n  gamma_max: secret-excerpt\n")
    st, _, body = srv.http("POST", "/admin/reload", headers={"Authorization": "Bearer " + TOKEN})
    check(st != 200 or not json.loads(body).get("ok", True), "the broken reload was accepted: %r" % body[:200])
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        s = stats(headers)
        text = json.dumps(s)
        check(s["policy"]["last_reload_ok"] is False, "last_reload_ok %r" % s["policy"])
        check(cfg not in text and "secret-excerpt" not in text and "config_path" not in s["policy"]
              and "last_reload_message" not in s["policy"], "/api/stats without the admin token shows %r" % s["policy"])
        check(isinstance(s["running"], int), "the public figures are still there")
    s = stats({"Authorization": "Bearer " + TOKEN})
    check(s["policy"].get("config_path") == cfg, "admin: config_path %r" % s["policy"].get("config_path"))
    check(cfg in s["policy"].get("last_reload_message", "") and "secret-excerpt" in s["policy"]["last_reload_message"],
          "admin: last_reload_message %r" % s["policy"].get("last_reload_message"))
    # the public monitor feed says only that the reload failed
    async def monitor():
        ws = need_websockets()
        async with ws.connect("ws://127.0.0.1:%d/v1/monitor" % srv.port, subprotocols=["specd.monitor.v1"],
                              open_timeout=15) as m:
            return json.loads(await asyncio.wait_for(m.recv(), 15))
    snap = asyncio.run(monitor())
    pol = snap.get("policy", {})
    check(pol.get("last_reload_ok") is False and "failed" in pol.get("last_reload_message", ""),
          "monitor: policy %r" % pol)
    check(cfg not in json.dumps(snap) and "secret-excerpt" not in json.dumps(snap),
          "the monitor feed shows the config path or the YAML excerpt: %r" % pol)
    print("/api/stats: config path and reload message only with the admin token; the monitor says 'failed' only")


def run():
    need_websockets()
    with Server(config=CONFIG) as srv:
        control_tokens(srv)
        stats_admin_only(srv)


if __name__ == "__main__":
    main(run)
