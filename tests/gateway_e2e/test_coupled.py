# test_coupled.py — speculation.verify over the wire (issue 21): a seeded
# sampled request with "verify": "coupled" gives the same text with
# speculation off, the draft model at gamma 2, 3 and 8, adaptive gamma and the
# n-gram proposer, on the OpenAI endpoint and on the WebSocket; "rejection"
# at the same seed gives different text for some prompt (the comparison is
# not vacuous); a bad value is refused with 400 / out_of_range naming the field.
import asyncio
import json

from specd_e2e import Server, check, main, recv_json, ws_connect

PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben", "One day, a bird"]
SETTINGS = [{"mode": "off"}, {"gamma": 2}, {"gamma": 3}, {"gamma": 8}, {"adaptive": True}, {"method": "ngram"}]


def completion(srv, prompt, seed, spec):
    st, _, body = srv.http("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 40, "temperature": 0.9,
                                                       "top_p": 0.95, "seed": seed, "speculation": spec})
    check(st == 200, "completion answered %d: %r" % (st, body[:300]))
    return json.loads(body)["choices"][0]["text"]


async def ws_text(srv, prompt, seed, spec):
    async with ws_connect(srv) as ws:
        await ws.send(json.dumps({"type": "generate", "id": "c", "prompt": prompt, "max_tokens": 40,
                                  "temperature": 0.9, "top_p": 0.95, "seed": seed, "speculation": spec}))
        text = ""
        while True:
            m = await recv_json(ws, 30)
            if m["type"] == "tokens":
                text += m["text"]
            elif m["type"] == "done":
                return text
            elif m["type"] == "error":
                raise AssertionError(m)


def run():
    with Server() as srv:
        rejection_differs = 0
        for i, prompt in enumerate(PROMPTS):
            seed = 11 + i
            texts = [completion(srv, prompt, seed, dict(s, verify="coupled")) for s in SETTINGS]
            check(all(t == texts[0] for t in texts), "prompt %r: coupled texts differ across settings: %r"
                  % (prompt, texts))
            ws = [asyncio.run(ws_text(srv, prompt, seed, dict(s, verify="coupled"))) for s in SETTINGS[:3]]
            check(all(t == texts[0] for t in ws), "prompt %r: WebSocket coupled text differs: %r vs %r"
                  % (prompt, ws, texts[0]))
            rejection_differs += completion(srv, prompt, seed, {"gamma": 3, "verify": "rejection"}) != texts[0]
        check(rejection_differs > 0, "rejection verification gave the coupled text for every prompt")
        st, _, body = srv.http("POST", "/v1/completions", {"prompt": "Hi", "speculation": {"verify": "maybe"}})
        check(st == 400 and b"speculation.verify" in body, "a bad verify value answered %d %r" % (st, body[:200]))
        print("coupled: %d prompts x %d settings equal (OpenAI and WebSocket); rejection differed on %d"
              % (len(PROMPTS), len(SETTINGS), rejection_differs))


main(run)
