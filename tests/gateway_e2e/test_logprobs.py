# test_logprobs.py — `logprobs` / `top_logprobs` end to end through the OpenAI
# endpoints with the real pair (stories260K + llama2xs), in the official
# shapes: chat choices[].logprobs.content[] = {token, logprob, bytes,
# top_logprobs[]}, completions choices[].logprobs = {tokens, token_logprobs,
# top_logprobs[{token: logprob}], text_offset}; streaming chunks carry the
# entries of their own tokens and concatenate to the non-streaming list;
# greedy, the draft changes nothing (speculation off == draft γ 4 == n-gram);
# the tokens' bytes spell the text; bad values answer 400. The WebSocket
# generate message takes the same fields: each tokens frame lists its tokens'
# {token_id, logprob, top_logprobs}, equal to the chat endpoint's numbers.
import asyncio
import json
import math
import subprocess

from specd_e2e import Server, check, main, recv_json, ws_connect

TOL = 2e-3
PROMPT = "Once upon a time, there was a little girl named"


def post(srv, path, body):
    st, _, raw = srv.http("POST", path, body, timeout=60)
    return st, json.loads(raw)


def sse(srv, path, body):
    r = subprocess.run(["curl", "-sS", "-N", "--max-time", "60", "-X", "POST", "-H", "Content-Type: application/json",
                        "--data-binary", json.dumps(body), srv.base + path], capture_output=True, timeout=90)
    check(r.returncode == 0, "curl failed: %s" % r.stderr.decode(errors="replace"))
    out = []
    for ev in r.stdout.decode().split("\n\n"):
        if ev.startswith("data: ") and ev[6:] != "[DONE]":
            out.append(json.loads(ev[6:]))
    return out


def check_entry(e, top, where):
    check(set(e) == {"token", "logprob", "bytes", "top_logprobs"}, "%s: fields %r" % (where, sorted(e)))
    check(isinstance(e["token"], str), "%s: token %r" % (where, e["token"]))
    check(isinstance(e["logprob"], float) and e["logprob"] <= 1e-6, "%s: logprob %r" % (where, e["logprob"]))
    check(isinstance(e["bytes"], list) and all(isinstance(b, int) and 0 <= b < 256 for b in e["bytes"]),
          "%s: bytes %r" % (where, e["bytes"]))
    check(len(e["top_logprobs"]) == top, "%s: %d top_logprobs, asked %d" % (where, len(e["top_logprobs"]), top))
    mass = 0.0
    for k, a in enumerate(e["top_logprobs"]):
        check(set(a) == {"token", "logprob", "bytes"}, "%s: alternative fields %r" % (where, sorted(a)))
        mass += math.exp(a["logprob"])
        if k:
            check(a["logprob"] <= e["top_logprobs"][k - 1]["logprob"], "%s: alternatives not sorted" % where)
    check(mass <= 1 + 1e-4, "%s: alternatives' probabilities sum to %g" % (where, mass))


def chat_body(spec, stream=False, top=3):
    return {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 32, "temperature": 0,
            "logprobs": True, "top_logprobs": top, "stream": stream, "speculation": spec}


SPECS = [{"mode": "off"}, {"mode": "draft", "gamma": 4, "adaptive": False}, {"method": "ngram", "gamma": 4, "adaptive": False}]


def same_lp(a, b, what):
    check([x["token"] for x in a] == [x["token"] for x in b], "%s: other tokens:\n %r\n %r"
          % (what, [x["token"] for x in a], [x["token"] for x in b]))
    for x, y in zip(a, b):
        check(abs(x["logprob"] - y["logprob"]) < TOL, "%s: logprob %r vs %r" % (what, x["logprob"], y["logprob"]))
        for p, q in zip(x["top_logprobs"], y["top_logprobs"]):
            check(abs(p["logprob"] - q["logprob"]) < TOL, "%s: top logprob %r vs %r" % (what, p, q))


async def ws_frames(srv, msg):
    """The tokens frames of one WebSocket request, or its error frame."""
    async with ws_connect(srv) as ws:
        await ws.send(json.dumps(dict(msg, type="generate", id="lp")))
        frames = []
        while True:
            m = await recv_json(ws, 60)
            if m["type"] == "tokens":
                frames.append(m)
            elif m["type"] == "done":
                return frames, None
            elif m["type"] == "error":
                return frames, m


def check_ws(srv, ref):
    """WebSocket logprobs: per frame one entry per token id, the same numbers
    as the chat endpoint's entries (ref) for the same messages."""
    msg = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 32, "temperature": 0,
           "logprobs": True, "top_logprobs": 3, "speculation": {"mode": "draft", "gamma": 4, "adaptive": False}}
    frames, err = asyncio.run(ws_frames(srv, msg))
    check(err is None, "ws logprobs refused: %r" % err)
    entries = []
    for f in frames:
        lp = f.get("logprobs")
        check(isinstance(lp, list) and len(lp) == len(f["token_ids"]), "ws frame logprobs vs token_ids: %r" % f)
        for tid, e in zip(f["token_ids"], lp):
            check(set(e) == {"token_id", "logprob", "top_logprobs"} and e["token_id"] == tid, "ws entry %r" % e)
            check(len(e["top_logprobs"]) == 3 and e["top_logprobs"][0]["token_id"] == tid,
                  "ws greedy token is not its top alternative: %r" % e)
            entries.append(e)
    check(len(entries) >= len(ref) >= 1, "ws: %d entries, chat %d" % (len(entries), len(ref)))
    for i, (a, b) in enumerate(zip(ref, entries)):
        check(abs(a["logprob"] - b["logprob"]) < TOL, "ws token %d: logprob %r vs chat %r" % (i, b["logprob"], a["logprob"]))
        for p, q in zip(a["top_logprobs"], b["top_logprobs"]):
            check(abs(p["logprob"] - q["logprob"]) < TOL, "ws token %d: top logprob %r vs chat %r" % (i, q, p))
    frames, err = asyncio.run(ws_frames(srv, dict(msg, logprobs=False, top_logprobs=0)))
    check(err is None and frames and all("logprobs" not in f for f in frames), "ws: logprobs written unasked: %r %r" % (err, frames[:2]))
    for bad, code in [({"top_logprobs": 21}, "out_of_range"), ({"logprobs": "yes"}, "wrong_type"),
                      ({"logprobs": False, "top_logprobs": 2}, "out_of_range")]:
        frames, err = asyncio.run(ws_frames(srv, dict(msg, **bad)))
        check(err is not None and err.get("code") == code, "ws %r: %r" % (bad, err))


def run():
    with Server() as srv:
        # not asked: null, as before
        st, r = post(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        check(st == 200 and r["choices"][0]["logprobs"] is None, "logprobs not asked: %r" % r["choices"][0])

        # chat, non-streaming, three proposers: the same numbers
        ref = None
        for spec in SPECS:
            body = chat_body(spec)
            st, r = post(srv, "/v1/chat/completions", body)
            check(st == 200, "chat logprobs %r: %d %r" % (spec, st, r))
            ch = r["choices"][0]
            lp = ch["logprobs"]
            check(set(lp) == {"content", "refusal"} and lp["refusal"] is None, "chat logprobs fields %r" % sorted(lp))
            content = lp["content"]
            check(len(content) >= 1, "no logprob entries")
            for i, e in enumerate(content):
                check_entry(e, 3, "chat %r token %d" % (spec, i))
                # greedy: the emitted token is the most probable one
                check(abs(e["logprob"] - e["top_logprobs"][0]["logprob"]) < 1e-5,
                      "greedy token %d is not the top alternative: %r" % (i, e))
            text = bytes(b for e in content for b in e["bytes"]).decode("utf-8", errors="replace")
            check(text.strip() == ch["message"]["content"].strip(), "bytes spell %r, content %r"
                  % (text, ch["message"]["content"]))
            check(len(content) <= r["usage"]["completion_tokens"], "more entries than completion tokens")
            if ref is None:
                ref = content
            else:
                same_lp(ref, content, "speculation %r vs off" % spec)

        check_ws(srv, ref)

        # chat, streaming: the chunks' entries concatenate to the same list
        chunks = sse(srv, "/v1/chat/completions", chat_body(SPECS[1], stream=True))
        streamed = []
        for c in chunks:
            lp = c["choices"][0]["logprobs"] if c.get("choices") else None
            if lp:
                streamed += lp["content"]
        for i, e in enumerate(streamed):
            check_entry(e, 3, "chat stream token %d" % i)
        same_lp(ref, streamed, "streamed vs non-streamed")

        # completions: logprobs = n alternatives
        body = {"prompt": PROMPT, "max_tokens": 24, "temperature": 0, "logprobs": 2,
                "speculation": {"mode": "draft", "gamma": 4, "adaptive": False}}
        st, r = post(srv, "/v1/completions", body)
        check(st == 200, "completions logprobs: %d %r" % (st, r))
        ch = r["choices"][0]
        lp = ch["logprobs"]
        check(set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}, "fields %r" % sorted(lp))
        n = len(lp["tokens"])
        check(n >= 1 and all(len(lp[k]) == n for k in lp), "list lengths %r" % {k: len(v) for k, v in lp.items()})
        for i in range(n):
            check(isinstance(lp["tokens"][i], str), "token %r" % lp["tokens"][i])
            check(lp["token_logprobs"][i] <= 1e-6, "token_logprobs %r" % lp["token_logprobs"][i])
            t = lp["top_logprobs"][i]
            check(isinstance(t, dict) and 1 <= len(t) <= 2, "top_logprobs %r" % t)
            check(abs(max(t.values()) - lp["token_logprobs"][i]) < 1e-5, "greedy token not the best: %r" % t)
            if i:
                check(lp["text_offset"][i] >= lp["text_offset"][i - 1], "text_offset not monotone")
        check("".join(lp["tokens"]).strip() == ch["text"].strip(), "tokens spell %r, text %r"
              % ("".join(lp["tokens"]), ch["text"]))
        plain = dict(body, speculation={"mode": "off"})
        st, r2 = post(srv, "/v1/completions", plain)
        lp2 = r2["choices"][0]["logprobs"]
        check(lp2["tokens"] == lp["tokens"], "completions: speculation changed the tokens")
        for a, b in zip(lp["token_logprobs"], lp2["token_logprobs"]):
            check(abs(a - b) < TOL, "completions: speculation changed a logprob (%r vs %r)" % (a, b))
        chunks = sse(srv, "/v1/completions", dict(body, stream=True))
        toks = []
        for c in chunks:
            if c.get("choices") and c["choices"][0]["logprobs"]:
                toks += c["choices"][0]["logprobs"]["tokens"]
        check(toks == lp["tokens"], "completions stream tokens %r vs %r" % (toks, lp["tokens"]))

        # under a grammar (JSON mode): every entry still well formed, top tokens allowed
        st, r = post(srv, "/v1/chat/completions", dict(chat_body(SPECS[1], top=5),
                                                        response_format={"type": "json_object"}))
        check(st == 200, "json mode logprobs: %d %r" % (st, r))
        for i, e in enumerate(r["choices"][0]["logprobs"]["content"]):
            check_entry(e, len(e["top_logprobs"]), "json token %d" % i)
            check(e["logprob"] > -9999.0, "json token %d: emitted a masked token" % i)

        # bad values: 400 naming the field
        for path, bad, field in [
            ("/v1/chat/completions", {"logprobs": False, "top_logprobs": 2}, "top_logprobs"),
            ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
            ("/v1/chat/completions", {"logprobs": "yes"}, "logprobs"),
            ("/v1/completions", {"logprobs": 21}, "logprobs"),
            ("/v1/completions", {"logprobs": 2, "top_logprobs": 2}, "top_logprobs"),
        ]:
            body = dict(bad, max_tokens=4)
            body.update({"messages": [{"role": "user", "content": "hi"}]} if "chat" in path else {"prompt": "hi"})
            st, r = post(srv, path, body)
            check(st == 400 and r["error"]["param"] == field, "%s %r: %d %r" % (path, bad, st, r))
    print("logprobs: chat and completions shapes, streaming, speculation off/draft/ngram equal, WebSocket, JSON mode, "
          "errors")


if __name__ == "__main__":
    main(run)
