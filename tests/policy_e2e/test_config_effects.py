# test_config_effects.py — config keys change behaviour, end to end through
# `specd serve -c` and `specd generate -c` (the effect is asserted, not the
# parse): speculation.mode: off leaves every request unspeculated;
# speculation.method draft / ngram decides which proposer makes the verify
# steps (the done frame's speculation.by_method), as do a request's
# speculation.method and a policy rule's method; engine.max_batch: 1 makes a
# step over several running requests take one target call per request
# (specd:verify_calls_total against specd:engine_steps_total); `generate -c`
# takes its model and its speculation settings from the file.
import asyncio
import json
import os
import re
import subprocess

from pe2e import check, env_paths, gen_msg, main, make_config, run_batch, Server, set_key, set_rules, tmpdir, \
    with_server, write_file, ws_connect

# prompts that repeat a passage of themselves: the n-gram proposer has
# something to look up; the other half are plain story starts
PROMPTS = ["Tom and Sue. Tom and Sue. Tom and Sue. Tom and",
           "Lily saw a big red ball. Lily saw a big red ball. Lily saw a big",
           "Once upon a time", "The cat sat on the mat. The cat sat on the mat. The cat",
           "Ben and his mom went", "One day, a little bird"]


def metric(text, name):
    m = re.search(r"^%s (\d+)$" % re.escape(name), text, re.M)
    check(m, "metric %s missing" % name)
    return int(m.group(1))


def serve_run(d, text, reqs, tag):
    cfg = os.path.join(d, "config-%s.yaml" % tag)
    write_file(cfg, text)
    srv = Server(d, cfg).start()

    def body():
        async def go():
            async with ws_connect(srv) as ws:
                return await run_batch(ws, reqs, timeout=120)
        streams = asyncio.run(go())
        for s in streams.values():
            s.check_ok()
        st, m = srv.http("GET", "/metrics")
        check(st == 200, "/metrics answered %d" % st)
        srv.stop()
        return streams, m.decode()
    return with_server(srv, body)


def by(s, method):
    return s.done["speculation"]["by_method"][method]["verify_steps"]


def reqs_for(tag, **kw):
    return [("%s%d" % (tag, i), gen_msg("%s%d" % (tag, i), p, 40, 0, **kw)) for i, p in enumerate(PROMPTS)]


def run():
    d = tmpdir("specd-pe2e-effects-")
    base, _ = make_config(d, telemetry=False)
    # no low-acceptance fallback and no "plain is faster at this batch" skips
    # (alpha_threshold 0): these checks are about who proposes, not whether it pays
    base = set_key(base, "speculation", "fallback_alpha", "0.0")
    base = set_rules(base, '    - model: "*"\n      content_type: "*"\n      alpha_threshold: 0.0\n')

    # defaults (mode auto, method auto): both proposers speculate
    s, _ = serve_run(d, base, reqs_for("a"), "auto")
    total = sum(x.done["speculation"]["verify_steps"] for x in s.values())
    check(total > 0 and sum(by(x, "ngram") for x in s.values()) > 0 and sum(by(x, "draft") for x in s.values()) > 0,
          "method auto: expected verify steps from both proposers")
    print("mode auto, method auto: %d verify steps (ngram %d, draft %d)"
          % (total, sum(by(x, "ngram") for x in s.values()), sum(by(x, "draft") for x in s.values())))

    # speculation.mode: off — no request speculates, whatever it asks for
    text = set_key(base, "speculation", "mode", "off")
    reqs = reqs_for("o") + [("o-ng", gen_msg("o-ng", PROMPTS[0], 40, 0, speculation={"method": "ngram"}))]
    s, _ = serve_run(d, text, reqs, "off")
    check(all(x.done["speculation"]["verify_steps"] == 0 for x in s.values()),
          "mode off: some request still made verify steps")
    print("mode off: 0 verify steps in %d requests" % len(s))

    # speculation.method: ngram / draft — only that proposer; a request's own method wins
    for method, other in (("ngram", "draft"), ("draft", "ngram")):
        text = set_key(base, "speculation", "method", method)
        reqs = reqs_for("m" + method) + [("own", gen_msg("own", PROMPTS[0], 40, 0, speculation={"method": other}))]
        s, _ = serve_run(d, text, reqs, method)
        own = s.pop("own")
        check(all(by(x, other) == 0 for x in s.values()) and sum(by(x, method) for x in s.values()) > 0,
              "method %s: verify steps came from %s" % (method, other))
        check(by(own, method) == 0 and by(own, other) > 0,
              "request speculation.method %s on a %s server: %r" % (other, method, own.done["speculation"]))
        print("method %s: %d verify steps, all %s; a request asking %s got %d from %s"
              % (method, sum(by(x, method) for x in s.values()), method, other, by(own, other), other))

    # a policy rule's method: code requests are not speculated, chat ones are
    rules = ('    - model: "*"\n      content_type: code\n      method: off\n      alpha_threshold: 0.0\n'
             '    - model: "*"\n      content_type: chat\n      method: ngram\n      alpha_threshold: 0.0\n')
    text = set_rules(base, rules)
    reqs = [("c%d" % i, gen_msg("c%d" % i, p, 40, 0, content_type="code")) for i, p in enumerate(PROMPTS[:3])]
    reqs += [("h%d" % i, gen_msg("h%d" % i, p, 40, 0, content_type="chat")) for i, p in enumerate(PROMPTS[:3])]
    s, _ = serve_run(d, text, reqs, "rules")
    check(all(s["c%d" % i].done["speculation"]["verify_steps"] == 0 for i in range(3)), "rule method off ignored")
    check(sum(by(s["h%d" % i], "ngram") for i in range(3)) > 0 and all(by(s["h%d" % i], "draft") == 0
                                                                     for i in range(3)), "rule method ngram ignored")
    print("policy rules: code (method off) 0 verify steps, chat (method ngram) only n-gram verify steps")

    # engine.max_batch: 1 — every running request gets its own target call
    for mb in ("0", "1"):
        text = set_key(base, "engine", "max_batch", mb)
        s, m = serve_run(d, text, reqs_for("b" + mb), "mb" + mb)
        steps, calls = metric(m, "specd:engine_steps_total"), metric(m, "specd:verify_calls_total")
        if mb == "0":
            check(calls == steps, "max_batch 0: %d calls for %d steps" % (calls, steps))
        else:
            check(calls > steps * 1.5, "max_batch 1: %d calls for %d steps over %d requests" % (calls, steps, len(s)))
        print("engine.max_batch %s: %d steps, %d target calls" % (mb, steps, calls))

    # generate -c: model and speculation settings from the file
    specd, _, target, _ = env_paths()
    for mode, method in (("off", "auto"), ("auto", "ngram")):
        text = set_key(set_key(base, "speculation", "mode", mode), "speculation", "method", method)
        cfg = os.path.join(d, "gen-%s.yaml" % mode)
        write_file(cfg, text)
        p = subprocess.run([specd, "generate", "-c", cfg, "-p", PROMPTS[0], "-n", "40", "--temp", "0", "--json",
                            "--quiet", "-t", "1"], capture_output=True, text=True, timeout=120, cwd=d)
        check(p.returncode == 0, "generate -c %s: exit %d: %s" % (cfg, p.returncode, p.stderr[-500:]))
        j = json.loads(p.stdout)
        check(j["model"] == target, "generate -c took model %r, the file says %r" % (j["model"], target))
        sp = j["speculation"]
        if mode == "off":
            check(sp["verify_steps"] == 0 and j["method"] == "off", "generate -c with mode off speculated: %r" % sp)
        else:
            check(j["method"] == "ngram" and j["by_method"]["draft"]["verify_steps"] == 0 and
                  j["by_method"]["ngram"]["verify_steps"] > 0, "generate -c with method ngram: %r" % j["by_method"])
        print("generate -c (mode %s, method %s): method %s, %d verify steps" % (mode, method, j["method"],
                                                                              sp["verify_steps"]))
    # a broken file is refused by the same validation serve uses
    bad = os.path.join(d, "bad.yaml")
    write_file(bad, set_key(base, "speculation", "method", "lookup"))
    p = subprocess.run([specd, "generate", "-c", bad, "-p", "x", "-n", "2"], capture_output=True, text=True,
                       timeout=60, cwd=d)
    check(p.returncode == 2 and "speculation.method" in p.stderr, "generate -c on a bad method: %r" % p.stderr)
    print("generate -c refuses speculation.method: lookup like serve does")


if __name__ == "__main__":
    main(run)
