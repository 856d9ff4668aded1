# test_metrics.py — GET /metrics parses as Prometheus text (a strict parser of
# our own in specd_e2e.py: HELP/TYPE, `name{labels} value`, cumulative
# histogram buckets ending with +Inf == _count), names the required families,
# and its counters move by exactly what a WebSocket and an HTTP request report.
import asyncio
import json

import re

from specd_e2e import Fail, Server, check, check_done, main, metric_value, need_websockets, parse_prometheus, \
    recv_json, run_one, ws_connect

P = "specd:"
REQUIRED = {
    "spec_decode_num_drafts_total": "counter",
    "spec_decode_num_draft_tokens_total": "counter",
    "spec_decode_num_accepted_tokens_total": "counter",
    "spec_decode_num_accepted_tokens_per_pos_total": "counter",
    "spec_decode_fallbacks_total": "counter",
    "kv_resets_total": "counter",
    "generation_tokens_total": "counter",
    "requests_total": "counter",
    "num_requests_running": "gauge",
    "num_requests_waiting": "gauge",
    "kv_blocks_used": "gauge",
    "kv_blocks_free": "gauge",
    "time_to_first_token_seconds": "histogram",
    "time_per_output_token_seconds": "histogram",
}


def total(fams, family):
    """Sum of a family's plain samples (all label sets)."""
    return sum(v for n, lb, v in fams[P + family]["samples"] if n == P + family)


def hist_count(fams, family):
    return metric_value(fams, P + family + "_count")


async def ws_part(srv):
    async with ws_connect(srv) as ws:
        s = await run_one(ws, "m1", "Once upon a time", 32)
        check_done(s, 32)
        await ws.send("{not json")
        m = await recv_json(ws)
        check(m.get("code") == "invalid_json", "expected invalid_json, got %r" % m)
        return s.done


def parser_controls(text):
    """The parser must reject broken variants of the server's real text, or
    passing it would prove nothing."""
    ttft = P + "time_to_first_token_seconds"
    broken = {
        "+Inf bucket != _count": re.sub(r"(%s_count) (\d+)" % re.escape(ttft), lambda m: "%s %d" % (m.group(1),
                                        int(m.group(2)) + 1), text),
        "non-cumulative buckets": re.sub(r'(%s_bucket\{le="0.001"\}) (\d+)' % re.escape(ttft),
                                         lambda m: "%s %d" % (m.group(1), int(m.group(2)) + 5), text),
        "sample without TYPE": text.replace("# TYPE %srequests_total counter\n" % P, ""),
        "second TYPE": text.replace("# TYPE %srequests_total counter\n" % P,
                                    "# TYPE %srequests_total counter\n# TYPE %srequests_total counter\n" % (P, P)),
        "garbage line": text + "this is not a sample\n",
        "bad label": text + '%srequests_total{code=unquoted} 1\n' % P,
        "negative counter": re.sub(r"\n(%sgeneration_tokens_total) \S+" % P, r"\n\1 -1", text),
        "no +Inf bucket": re.sub(r'%s_bucket\{le="\+Inf"\}[^\n]*\n' % re.escape(ttft), "", text),
    }
    for what, t in broken.items():
        check(t != text, "control %r did not change the text" % what)
        try:
            parse_prometheus(t)
        except Fail:
            continue
        raise Fail("the Prometheus parser accepted a broken text (%s)" % what)


def run():
    need_websockets()
    with Server() as srv:
        st, _, raw = srv.http("GET", "/metrics")
        check(st == 200, "/metrics answered %d" % st)
        parser_controls(raw.decode())
        before = srv.metrics()
        for fam, typ in REQUIRED.items():
            check(P + fam in before, "metrics: family %s%s missing" % (P, fam))
            check(before[P + fam]["type"] == typ, "metrics: %s%s is a %s, expected %s"
                  % (P, fam, before[P + fam]["type"], typ))
            check(before[P + fam]["help"], "metrics: %s%s has no HELP text" % (P, fam))
        for model in ("target", "draft"):
            metric_value(before, P + "kv_blocks_free", {"model": model})
        print("metrics: %d families parse; required ones present" % len(before))

        done_ws = asyncio.run(ws_part(srv))
        st, _, body = srv.http("POST", "/v1/completions", {"prompt": "The cat sat", "max_tokens": 16,
                                                          "temperature": 0})
        check(st == 200, "completion answered %d" % st)
        resp = json.loads(body)
        spec = [done_ws["speculation"], resp["speculation"]]
        n_tokens = done_ws["usage"]["completion_tokens"] + resp["usage"]["completion_tokens"]
        after = srv.metrics()

        def delta(fam):
            return total(after, fam) - total(before, fam)
        check(delta("requests_total") == 2, "requests_total moved by %r, expected 2" % delta("requests_total"))
        check(delta("generation_tokens_total") == n_tokens, "generation_tokens_total moved by %r, expected %d"
              % (delta("generation_tokens_total"), n_tokens))
        check(delta("requests_finished_total") == 2, "requests_finished_total moved by %r"
              % delta("requests_finished_total"))
        drafts = sum(s["verify_steps"] for s in spec)
        drafted = sum(s["drafted"] for s in spec)
        accepted = sum(s["accepted"] for s in spec)
        check(drafts > 0 and drafted > 0, "the requests did not speculate: %r" % spec)
        for fam, want in (("spec_decode_num_drafts_total", drafts), ("spec_decode_num_draft_tokens_total", drafted),
                          ("spec_decode_num_accepted_tokens_total", accepted),
                          ("spec_decode_num_accepted_tokens_per_pos_total", accepted)):
            check(delta(fam) == want, "%s moved by %r, the responses say %d" % (fam, delta(fam), want))
        ok = (metric_value(after, P + "request_success_total", {"finished_reason": "length"}) -
              metric_value(before, P + "request_success_total", {"finished_reason": "length"}))
        check(ok == 2, "request_success_total{finished_reason=length} moved by %r" % ok)
        for h in ("time_to_first_token_seconds", "time_per_output_token_seconds"):
            d = hist_count(after, h) - hist_count(before, h)
            check(d == 2, "%s_count moved by %r, expected 2" % (h, d))
            check(metric_value(after, P + h + "_sum") > metric_value(before, P + h + "_sum"), "%s_sum did not grow" % h)
        err = metric_value(after, P + "errors_total", {"code": "invalid_json"})
        check(err >= 1, "errors_total{code=invalid_json} is %r after an invalid frame" % err)
        for model in ("target", "draft"):
            u0 = metric_value(before, P + "kv_blocks_used", {"model": model})
            f0 = metric_value(before, P + "kv_blocks_free", {"model": model})
            u1 = metric_value(after, P + "kv_blocks_used", {"model": model})
            f1 = metric_value(after, P + "kv_blocks_free", {"model": model})
            check(u0 + f0 == u1 + f1 and f1 == f0, "kv blocks %s: used/free %r/%r then %r/%r" % (model, u0, f0, u1, f1))
        print("metrics: counters moved by requests 2, tokens %d, drafts %d, drafted %d, accepted %d"
              % (n_tokens, drafts, drafted, accepted))


if __name__ == "__main__":
    main(run)
