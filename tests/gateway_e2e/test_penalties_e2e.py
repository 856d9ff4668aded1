# test_penalties_e2e.py — penalties and logit_bias over the wire (issue 40 item 2):
# greedy answers with penalties are the same with speculation off and on (the
# default, adaptive, and the draft model at gamma 4); the penalties change the
# answer; repeat_penalty (llama.cpp's name) equals repetition_penalty (vLLM's);
# a +100 logit_bias forces its token, in OpenAI's object form and llama.cpp's
# pair form, on HTTP and the WebSocket; bad values are 400s naming the field.
import asyncio
import json

from specd_e2e import Server, check, main, recv_json, ws_connect

PEN = {"presence_penalty": 0.6, "frequency_penalty": 0.4, "repetition_penalty": 1.3, "repeat_last_n": 32}


def comp(srv, prompt, extra, status=200):
    body = {"prompt": prompt, "max_tokens": 40, "temperature": 0}
    body.update(extra)
    st, _, raw = srv.http("POST", "/v1/completions", body)
    check(st == status, "completion answered %d (want %d): %r" % (st, status, raw[:300]))
    return json.loads(raw)["choices"][0]["text"] if st == 200 else json.loads(raw)["error"]


async def ws_text(srv, extra):
    async with ws_connect(srv) as ws:
        msg = {"type": "generate", "id": "p", "prompt": "The cat", "max_tokens": 12, "temperature": 0}
        msg.update(extra)
        await ws.send(json.dumps(msg))
        text = ""
        while True:
            m = await recv_json(ws, 60)
            if m["type"] == "tokens":
                text += m["text"]
            elif m["type"] in ("done", "error"):
                return text if m["type"] == "done" else m


def run():
    with Server() as srv:
        changed = 0
        for prompt in ["Once upon a time", "The little dog", "Lily and Ben went"]:
            plain = comp(srv, prompt, dict(PEN, speculation={"mode": "off"}))
            for spec in [{}, {"gamma": 4}, {"method": "ngram"}]:
                t = comp(srv, prompt, dict(PEN, speculation=spec))
                check(t == plain, "%r %r: speculative %r != plain %r" % (prompt, spec, t, plain))
            alias = comp(srv, prompt, {k if k != "repetition_penalty" else "repeat_penalty": v for k, v in PEN.items()})
            check(alias == plain, "%r: repeat_penalty answer differs from repetition_penalty's" % prompt)
            changed += comp(srv, prompt, {}) != plain
        check(changed > 0, "the penalties changed no answer")
        # a +100 bias on the token of " the" forces it (object and pair forms)
        st, _, raw = srv.http("POST", "/tokenize", {"content": " the"})
        tok = json.loads(raw)["tokens"][-1] if st == 200 else 1
        forced = comp(srv, "Once", {"logit_bias": {str(tok): 100}, "max_tokens": 4})
        pairs = comp(srv, "Once", {"logit_bias": [[tok, 100]], "max_tokens": 4})
        check(forced == pairs and forced.count("the") >= 3, "logit_bias +100 on %d gave %r / %r" % (tok, forced, pairs))
        ws = asyncio.run(ws_text(srv, {"logit_bias": {str(tok): 100}, "max_tokens": 4}))
        check(ws == forced, "WebSocket logit_bias gave %r, HTTP %r" % (ws, forced))
        ws2 = asyncio.run(ws_text(srv, dict(PEN)))
        check(isinstance(ws2, str) and ws2, "WebSocket penalties: %r" % (ws2,))
        e = comp(srv, "a", {"logit_bias": {"99999999": 1}}, 400)
        check("vocabulary" in e["message"], "an out-of-vocabulary id: %r" % e)
        e = comp(srv, "a", {"frequency_penalty": 3}, 400)
        check(e["param"] == "frequency_penalty", "frequency_penalty 3: %r" % e)
        print("penalties: speculative == plain greedy on 3 prompts x 3 settings, alias equal, changed %d/3; "
              "logit_bias forces its token on HTTP (both forms) and WebSocket; bad values refused" % changed)


main(run)
