# test_grammar_limits.py — hostile grammars and schemas (issue 44, items 1-3
# and the grammar parts of 10): nothing expensive runs on the event loop or the
# engine thread, every limit is a config key named in the refusal, the
# compiled-grammar cache stays under its byte cap, and an answer is never
# reported complete when it is not.
#
#  1. While the largest accepted grammar (a 32,000-rule chain, ~870 KB) and a
#     20,000-value enum compile, /healthz answers within 500 ms every time (a
#     compile on the loop would hold it for seconds: the chain takes 2.4 s; a
#     loaded 2-core host under ASan measured 201 ms at worst) and a
#     plain request on another connection finishes in well under the compile.
#  2. A 50,000-value enum and a grammar over grammar.max_rules / compile_ms are
#     refused with 400 invalid_grammar naming the key; the server keeps serving.
#  3. 20 distinct large schemas: /metrics grammar_cache_bytes stays under
#     grammar.cache_mb and the RSS grows by less than the cap + 10 %.
#  4. A schema whose shortest document needs more than max_tokens: refused
#     (400 saying what it needs) when even the longest tokens cannot fit it;
#     else the answer ends "length" with a valid prefix, never the unknown
#     token and never "stop".
#  5. grammar "" is refused; a too-deep schema's error keeps its reason; a
#     grammar too large to expand says so (not "recursive"); a constrained
#     stream whose grammar is refused gets a 400, not a 200 stream; the
#     WebSocket gets an error frame with code invalid_grammar.
import asyncio
import json
import random
import threading
import time

from specd_e2e import CHAT, COMP, Server, check, main, metric_value, recv_json, ws_connect

CFG = ("grammar:\n  max_rules: 65536\n  max_enum: 20000\n  compile_ms: 20000\n  cache_mb: 48\n")


def chain_grammar(n):
    lines = ["root ::= r0"]
    lines += ['r%d ::= "a" r%d | "b"' % (i, i + 1) for i in range(n - 1)]
    lines.append('r%d ::= "z"' % (n - 1))
    return "\n".join(lines) + "\n"


def enum_schema(n, seed):
    rnd = random.Random(seed)
    vals = set()
    while len(vals) < n:
        vals.add("".join(rnd.choice("abcdefghijklmnop") for _ in range(rnd.randint(5, 12))))
    return {"type": "object", "properties": {"k": {"type": "string", "enum": sorted(vals)}}, "required": ["k"]}


def schema_body(schema, max_tokens=24, prompt="Once upon a time", **kw):
    b = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
         "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}}}
    b.update(kw)
    return b


def err_of(st, b):
    try:
        return json.loads(b)["error"]
    except Exception:
        raise AssertionError("status %d, body %r is not an OpenAI error" % (st, b[:300]))


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def watch_health(srv, stop, out):
    """Polls /healthz every 50 ms until stop is set; appends each latency (s)."""
    while not stop.is_set():
        t = time.monotonic()
        st, _, _ = srv.http("GET", "/healthz", timeout=30)
        out.append((time.monotonic() - t, st))
        time.sleep(0.05)


def responsiveness(srv):
    stop, lat = threading.Event(), []
    th = threading.Thread(target=watch_health, args=(srv, stop, lat))
    th.start()
    t0 = time.monotonic()
    results = {}

    def post(name, body):
        t = time.monotonic()
        st, _, b = srv.http("POST", COMP, body, timeout=300)
        results[name] = (st, b, time.monotonic() - t)

    big = [threading.Thread(target=post, args=("chain", {"prompt": "x", "max_tokens": 8, "grammar": chain_grammar(32000)})),
           threading.Thread(target=post, args=("enum", schema_body(enum_schema(20000, 1), max_tokens=32)))]
    for t in big:
        t.start()
    time.sleep(0.3)
    post("plain", {"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0})
    for t in big:
        t.join()
    stop.set()
    th.join()
    worst = max(x[0] for x in lat)
    check(all(x[1] == 200 for x in lat), "healthz statuses %r" % sorted(set(x[1] for x in lat)))
    check(len(lat) >= 3 and worst < 0.5, "/healthz worst latency %.3f s over %d polls during the compiles" % (worst, len(lat)))
    for k in ("chain", "enum", "plain"):
        check(results[k][0] == 200, "%s answered %d %r" % (k, results[k][0], results[k][1][:300]))
    enum_text = json.loads(results["enum"][1])["choices"][0]["text"]
    val = json.loads(enum_text)
    check(val["k"] in enum_schema(20000, 1)["properties"]["k"]["enum"], "enum output %r" % enum_text)
    print("healthz worst %.1f ms over %d polls; chain %.2f s, enum %.2f s, plain %.2f s (total %.2f s)"
          % (worst * 1e3, len(lat), results["chain"][2], results["enum"][2], results["plain"][2], time.monotonic() - t0))
    m = srv.metrics()
    print("slowest compile %.3f s" % (metric_value(m, "specd:grammar_compile_seconds_max", {}) or 0))


def limits(srv):
    st, _, b = srv.http("POST", COMP, schema_body(enum_schema(50000, 2)))
    e = err_of(st, b)
    check(st == 400 and e["code"] == "invalid_grammar" and "grammar.max_enum" in e["message"], "50k enum: %d %r" % (st, e))
    # 8 bounded repetitions of 9,000: 72,000 helper rules from 100 bytes of text
    st, _, b = srv.http("POST", COMP, {"prompt": "x", "max_tokens": 4, "grammar": "root ::= " + " ".join(['"%s"{0,9000}' % c for c in "abcdefgh"]) + "\n"})
    e = err_of(st, b)
    check(st == 400 and e["code"] == "invalid_grammar" and "grammar.max_rules" in e["message"], "72k rules: %d %r" % (st, e))
    # too large to expand: 110 repetitions of 10,000 are over max_elements, said as such
    st, _, b = srv.http("POST", COMP, {"prompt": "x", "max_tokens": 4, "grammar": "root ::= " + " ".join(['"ab"{10000}'] * 110) + "\n"})
    e = err_of(st, b)
    check(st == 400 and "too large" in e["message"] and "recurs" not in e["message"], "expansion: %d %r" % (st, e))
    st, _, b = srv.http("POST", COMP, {"prompt": "x", "max_tokens": 4, "grammar": ""})
    e = err_of(st, b)
    check(st == 400 and e["code"] == "invalid_grammar" and "empty" in e["message"], "empty grammar: %d %r" % (st, e))
    deep = {"type": "string"}
    for _ in range(80):
        deep = {"type": "object", "properties": {"field_with_a_long_name": deep}}
    st, _, b = srv.http("POST", COMP, schema_body(deep))
    e = err_of(st, b)
    check(st == 400 and "nested deeper than" in e["message"], "deep schema error lost its reason: %r" % e)
    # a constrained stream refused before its first event: a 400, not a 200 event stream
    st, hd, b = srv.http("POST", COMP, {"prompt": "x", "max_tokens": 4, "stream": True, "grammar": "root ::= undefined_rule\n"})
    e = err_of(st, b)
    check(st == 400 and e["code"] == "invalid_grammar" and "undefined" in e["message"], "stream bad grammar: %d %r" % (st, b[:200]))
    # the WebSocket says the same in an error frame
    async def ws():
        async with ws_connect(srv) as w:
            await w.send(json.dumps({"type": "generate", "id": "g", "prompt": "x", "max_tokens": 4,
                                     "grammar": "root ::= \"a\" root2\n"}))
            while True:
                m = await recv_json(w, 30)
                if m["type"] in ("error", "done"):
                    return m
    m = asyncio.run(ws())
    check(m["type"] == "error" and m.get("code") == "invalid_grammar", "WebSocket bad grammar: %r" % m)
    st, _, b = srv.http("POST", COMP, {"prompt": "Once upon a time", "max_tokens": 8})
    check(st == 200, "server after the refusals: %d" % st)


def cache_cap(srv):
    m0 = rss_kb(srv.proc.pid)
    for i in range(20):
        st, _, b = srv.http("POST", COMP, schema_body(enum_schema(20000, 100 + i), max_tokens=20), timeout=300)
        check(st == 200, "schema %d answered %d %r" % (i, st, b[:200]))
    m = srv.metrics()
    cb = metric_value(m, "specd:grammar_cache_bytes", {}) or 0
    ev = metric_value(m, "specd:grammar_evictions_total", {}) or 0
    m1 = rss_kb(srv.proc.pid)
    cap = 48 << 20
    print("20 schemas: cache %.1f MiB (cap 48), %d evictions, RSS %.1f -> %.1f MiB" % (cb / 2**20, ev, m0 / 1024, m1 / 1024))
    check(cb <= cap, "grammar_cache_bytes %d over the cap %d" % (cb, cap))
    check(ev > 0, "20 large schemas evicted nothing")
    with open(srv.specd, "rb") as f:
        asan = b"__asan_init" in f.read()
    if asan:  # ASan's allocator quarantines freed memory: the RSS says nothing there
        print("ASan build: the RSS bound is not checked")
    else:
        check((m1 - m0) * 1024 <= 1.1 * cap, "RSS grew by %.1f MiB (cap 48 MiB + 10%%)" % ((m1 - m0) / 1024))


def budget(srv):
    two = {"type": "object", "properties": {"first_name_of_person": {"type": "string"},
                                            "second_name_of_person": {"type": "string"}},
           "required": ["first_name_of_person", "second_name_of_person"]}
    # 2 tokens cannot hold ~60 bytes even in the vocabulary's longest tokens: refused, saying what it needs
    st, _, b = srv.http("POST", COMP, schema_body(two, max_tokens=2))
    e = err_of(st, b)
    check(st == 400 and "needs at least" in e["message"] and "max_tokens" in e["message"], "budget refusal: %d %r" % (st, e))
    # 16 tokens may or may not: the answer is honest about it
    import regex
    pat = regex.compile(r'\{\s*"first_name_of_person"\s*:\s*"([^"\\]|\\.)*"\s*,\s*"second_name_of_person"\s*:\s*"([^"\\]|\\.)*"\s*\}\s*')
    for path in (COMP, CHAT):
        body = schema_body(two, max_tokens=16)
        if path == CHAT:
            body.pop("prompt")
            body["messages"] = [{"role": "user", "content": "Name two people."}]
        st, _, b = srv.http("POST", path, body)
        check(st == 200, "%s 16 tokens: %d %r" % (path, st, b[:300]))
        ch = json.loads(b)["choices"][0]
        text = ch["text"] if path == COMP else ch["message"]["content"]
        check("\u2585" not in text and "\ufffd" not in text, "%s: %r holds the unknown token" % (path, text))
        full = pat.fullmatch(text) is not None
        check(pat.fullmatch(text, partial=True) is not None, "%s: %r is not a prefix of a valid document" % (path, text))
        check(ch["finish_reason"] == ("stop" if full else "length"), "%s: %r ended %r" % (path, text, ch["finish_reason"]))
        print("%s max_tokens 16: finish %s, %r" % (path, ch["finish_reason"], text))


def run():
    with Server(config=CFG) as srv:
        responsiveness(srv)
        limits(srv)
        budget(srv)
        cache_cap(srv)
        check(srv.alive(), "server died")
    with Server(config="grammar:\n  compile_ms: 10\n") as srv:
        st, _, b = srv.http("POST", COMP, {"prompt": "x", "max_tokens": 4, "grammar": chain_grammar(32000)}, timeout=120)
        e = err_of(st, b)
        check(st == 400 and "grammar.compile_ms" in e["message"], "compile deadline: %d %r" % (st, e))


if __name__ == "__main__":
    main(run)
