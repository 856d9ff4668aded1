# test_sse.py — curl streams POST /v1/chat/completions and /v1/completions with
# "stream": true; the server-sent events parse (`data: {json}` chunks, then
# `data: [DONE]`) and their text concatenates to the non-streaming answer for
# the same request (greedy, and seeded sampling with a fixed γ).
import json
import shutil
import subprocess

from specd_e2e import Fail, Server, check, cli_generate, main, skip

CASES = [
    ("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0}),
    ("/v1/completions", {"prompt": "The little dog", "max_tokens": 32, "temperature": 0.9, "seed": 1234,
                         "speculation": {"gamma": 4, "adaptive": False}}),
    ("/v1/chat/completions", {"messages": [{"role": "system", "content": "You tell short stories."},
                                           {"role": "user", "content": "Tell me about a cat."}],
                              "max_tokens": 40, "temperature": 0}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Once upon a time"}],
                              "max_tokens": 32, "temperature": 0.8, "top_p": 0.9, "seed": 99,
                              "speculation": {"gamma": 4, "adaptive": False}}),
]


def curl_sse(srv, path, body):
    """Runs curl; returns (status, content-type, list of parsed data payloads, raw text)."""
    r = subprocess.run(["curl", "-sS", "-N", "--max-time", "60", "-D", "-", "-X", "POST",
                        "-H", "Content-Type: application/json", "--data-binary", json.dumps(body),
                        srv.base + path], capture_output=True, timeout=90)
    check(r.returncode == 0, "curl failed (%d): %s" % (r.returncode, r.stderr.decode(errors="replace")))
    raw = r.stdout.decode()
    head, sep, events = raw.partition("\r\n\r\n")
    check(sep, "curl output has no header/body separator: %r" % raw[:300])
    lines = head.split("\r\n")
    status = int(lines[0].split()[1])
    ctype = ""
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        if k.strip().lower() == "content-type":
            ctype = v.strip()
    payloads = []
    check(events.endswith("\n\n"), "SSE body does not end with a blank line: %r" % events[-80:])
    for ev in events[:-2].split("\n\n"):
        for ln in ev.split("\n"):
            check(ln.startswith("data: "), "SSE line that is not `data: ...`: %r" % ln)
            payloads.append(ln[len("data: "):])
    return status, ctype, payloads, raw


def run_case(srv, path, body):
    chat = path.endswith("chat/completions")
    st, hd, plain = srv.http("POST", path, body)
    check(st == 200, "%s non-streaming answered %d: %r" % (path, st, plain[:300]))
    check(hd.get("content-type", "").startswith("application/json"), "content-type %r" % hd.get("content-type"))
    resp = json.loads(plain)
    ch = resp["choices"][0]
    want = ch["message"]["content"] if chat else ch["text"]
    check(resp["object"] == ("chat.completion" if chat else "text_completion"), "object %r" % resp["object"])
    check(isinstance(resp.get("speculation"), dict), "no speculation extension in %r" % resp)

    sbody = dict(body, stream=True, stream_options={"include_usage": True})
    status, ctype, payloads, raw = curl_sse(srv, path, sbody)
    check(status == 200, "%s streaming answered %d: %r" % (path, status, raw[:300]))
    check(ctype.startswith("text/event-stream"), "streaming content-type %r" % ctype)
    check(payloads and payloads[-1] == "[DONE]", "stream does not end with data: [DONE]: %r" % payloads[-3:])
    check(payloads.count("[DONE]") == 1, "more than one [DONE]")
    chunks = []
    for p in payloads[:-1]:
        try:
            chunks.append(json.loads(p))
        except ValueError:
            raise Fail("SSE data is not JSON: %r" % p)
    check(len(chunks) >= 3, "only %d chunks: the answer was not streamed in pieces" % len(chunks))
    # as OpenAI: with stream_options.include_usage the last chunk has no choices and the usage
    uc = chunks.pop()
    def counts(u):  # cached_tokens differ: the streamed run reuses the first run's prompt blocks
        return {k: u[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")} if u else None
    check(uc["choices"] == [] and counts(uc.get("usage")) == counts(resp["usage"]),
          "usage chunk %r, plain usage %r" % (uc, resp["usage"]))
    cached = uc["usage"]["prompt_tokens_details"]["cached_tokens"]
    check(0 < cached < resp["usage"]["prompt_tokens"] or resp["usage"]["prompt_tokens"] < 17,
          "the repeated prompt reused %d cached tokens of %d" % (cached, resp["usage"]["prompt_tokens"]))
    check(all("usage" not in c for c in chunks), "usage outside the usage chunk")
    if chat:  # the role once, in the first chunk
        roles = [i for i, c in enumerate(chunks) if "role" in c["choices"][0]["delta"]]
        check(roles == [0] and chunks[0]["choices"][0]["delta"]["role"] == "assistant", "role in chunks %r" % roles)
    text = ""
    ids = set()
    for i, c in enumerate(chunks):
        check("error" not in c, "stream carried an error: %r" % c)
        check(c["object"] == ("chat.completion.chunk" if chat else "text_completion"), "chunk object %r"
              % c["object"])
        ids.add(c["id"])
        cc = c["choices"][0]
        last = i == len(chunks) - 1
        check((cc["finish_reason"] is not None) == last, "finish_reason %r in chunk %d of %d"
              % (cc["finish_reason"], i, len(chunks)))
        text += (cc["delta"].get("content") or "") if chat else cc["text"]
    check(len(ids) == 1, "chunks carry different ids: %r" % ids)
    fin = chunks[-1]
    check(fin["choices"][0]["finish_reason"] == ch["finish_reason"], "finish_reason stream %r, plain %r"
          % (fin["choices"][0]["finish_reason"], ch["finish_reason"]))
    # without include_usage: no usage chunk at all
    status, ctype, plain_payloads, raw = curl_sse(srv, path, dict(body, stream=True))
    check(status == 200 and all("usage" not in json.loads(p) for p in plain_payloads[:-1]),
          "a stream without include_usage carried usage")
    check(isinstance(fin.get("speculation"), dict), "final chunk without speculation")
    check(text == want, "%s: streamed text differs from the non-streaming answer:\n  sse   %r\n  plain %r"
          % (path, text, want))
    print("%s %s: %d chunks, %d tokens, %r" % (path, "greedy" if body["temperature"] == 0 else "sampled",
                                               len(chunks), resp["usage"]["completion_tokens"], text[:40]))
    return want


def run():
    if not shutil.which("curl"):
        skip("curl is not installed")
    with Server() as srv:
        st, _, body = srv.http("GET", "/v1/models")
        check(st == 200, "/v1/models answered %d" % st)
        models = json.loads(body)
        check(models.get("object") == "list" and [m.get("id") for m in models.get("data", [])] == ["stories260K.gguf"],
              "/v1/models: %r" % models)
        for path, body in CASES:
            text = run_case(srv, path, body)
            if path == "/v1/completions" and body["temperature"] == 0:
                ref = cli_generate(body["prompt"], body["max_tokens"])
                check(text == ref["text"], "completion differs from specd generate:\n  http %r\n  cli  %r"
                      % (text, ref["text"]))


if __name__ == "__main__":
    main(run)
