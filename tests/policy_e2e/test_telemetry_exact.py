# test_telemetry_exact.py — a known workload through `specd serve` (sample_rate
# 1): 48 requests on 4 sockets at once — greedy and sampled, adaptive, fixed γ
# and speculation off, chat / code / structured / classified — then SIGTERM
# (telemetry flushes on shutdown). The database must agree exactly with what
# the server reported: one session row per request with its session uuid;
# per session, step rows = target passes = the done frame's verify + plain
# steps, and the sums of n_accepted / n_rejected / gamma_used equal the
# session's totals and the done frame's accepted / drafted; over all, the step
# count, SUM(n_accepted) and SUM(gamma_used) equal /api/stats' verify
# steps, accepted and drafted taken before shutdown, and Σ done.accepted.
import asyncio
import os
import time

from pe2e import check, db_open, gen_msg, main, make_config, run_batch, Server, story_prompts, tmpdir, \
    with_server, write_file, ws_connect

N_SOCK, PER_SOCK = 4, 12


def request(i, prompt):
    rid = "t%d" % i
    n = 24 + (i * 7) % 30
    kind = i % 6
    if kind == 0:
        kw = {"content_type": "chat"}
    elif kind == 1:
        kw = {"content_type": "code", "speculation": {"mode": "off"}}
    elif kind == 2:
        kw = {"content_type": "structured", "speculation": {"gamma": 4, "adaptive": False}}
    elif kind == 3:
        kw = {}  # classified by the server
    elif kind == 4:
        return rid, gen_msg(rid, prompt, n, 0.8, seed=500 + i, content_type="chat")
    else:
        return rid, gen_msg(rid, prompt, n, 1.0, seed=900 + i, top_k=40, speculation={"gamma": 6})
    return rid, gen_msg(rid, prompt, n, 0, seed=i, **kw)


async def workload(srv):
    prompts = story_prompts(N_SOCK * PER_SOCK)
    reqs = [request(i, prompts[i]) for i in range(N_SOCK * PER_SOCK)]

    async def sock(k):
        async with ws_connect(srv) as ws:
            return await run_batch(ws, reqs[k * PER_SOCK:(k + 1) * PER_SOCK], timeout=120)

    out = {}
    for r in await asyncio.gather(*[sock(k) for k in range(N_SOCK)]):
        out.update(r)
    return out


def run():
    d = tmpdir("specd-pe2e-tel-")
    text, db = make_config(d, sample_rate="1.0")
    cfg = os.path.join(d, "config.yaml")
    write_file(cfg, text)
    srv = Server(d, cfg).start()

    def body():
        streams = asyncio.run(workload(srv))
        for s in streams.values():
            s.check_ok()
        # every request finished: the engine's counters are final
        deadline = time.monotonic() + 10
        while True:
            st = srv.stats()
            if st["requests_done"] == len(streams) and st["running"] == 0 and st["waiting"] == 0:
                break
            check(time.monotonic() < deadline, "stats never settled: %r" % st)
            time.sleep(0.05)
        check(st["telemetry"]["dropped"] == 0, "telemetry dropped rows: %r" % st["telemetry"])
        rc = srv.stop()
        check(rc == 0, "specd serve exited %r after SIGTERM" % rc)

        c = db_open(db)
        sess = {r[0]: r[1:] for r in c.execute(
            "SELECT session_id, total_target_passes, total_accepted, total_rejected, generated_tokens, status, "
            "content_type FROM speculation_sessions")}
        per = {r[0]: r[1:] for r in c.execute(
            "SELECT session_id, COUNT(*), SUM(n_accepted), SUM(n_rejected), SUM(gamma_used), "
            "SUM(gamma_used > 0), COUNT(DISTINCT step_num), MIN(step_num), MAX(step_num) "
            "FROM speculation_steps GROUP BY session_id")}
        n_steps, sum_acc, sum_rej, sum_gamma = c.execute(
            "SELECT COUNT(*), SUM(n_accepted), SUM(n_rejected), SUM(gamma_used) FROM speculation_steps").fetchone()
        bad_rows = c.execute("SELECT COUNT(*) FROM speculation_steps WHERE n_rejected != gamma_used - n_accepted "
                             "OR n_accepted < 0 OR n_accepted > gamma_used").fetchone()[0]
        c.close()

        check(len(sess) == len(streams), "%d session rows for %d requests" % (len(sess), len(streams)))
        check(bad_rows == 0, "%d step rows where n_rejected != gamma_used - n_accepted" % bad_rows)
        sum_done_acc = sum_done_drafted = sum_done_passes = 0
        for rid, s in sorted(streams.items()):
            uuid = s.start["session"]
            check(uuid in sess, "%s: session %s is not in speculation_sessions" % (rid, uuid))
            passes, acc, rej, gen, status, ctype = sess[uuid]
            sp = s.done["speculation"]
            check(status == "completed", "%s: session status %r" % (rid, status))
            check(gen == s.done["usage"]["completion_tokens"], "%s: generated_tokens %r, done says %r"
                  % (rid, gen, s.done["usage"]["completion_tokens"]))
            check(passes == sp["verify_steps"] + sp["plain_steps"], "%s: total_target_passes %r, done: %r + %r"
                  % (rid, passes, sp["verify_steps"], sp["plain_steps"]))
            check(acc == sp["accepted"] and rej == sp["drafted"] - sp["accepted"],
                  "%s: session accepted/rejected %r/%r, done accepted %r drafted %r"
                  % (rid, acc, rej, sp["accepted"], sp["drafted"]))
            check(uuid in per, "%s: no step rows" % rid)
            cnt, s_acc, s_rej, s_g, n_verify, n_distinct, lo, hi = per[uuid]
            check(cnt == passes and (n_distinct, lo, hi) == (cnt, 1, cnt),
                  "%s: %d step rows (steps %r..%r, %d distinct) for %d target passes"
                  % (rid, cnt, lo, hi, n_distinct, passes))
            check((s_acc, s_rej, s_g, n_verify) == (acc, rej, sp["drafted"], sp["verify_steps"]),
                  "%s: step rows sum to accepted %r rejected %r drafted %r verify steps %r; the session/done say "
                  "%r %r %r %r" % (rid, s_acc, s_rej, s_g, n_verify, acc, rej, sp["drafted"], sp["verify_steps"]))
            sum_done_acc += sp["accepted"]
            sum_done_drafted += sp["drafted"]
            sum_done_passes += sp["verify_steps"] + sp["plain_steps"]
        check(n_steps == sum(v[0] for v in sess.values()) == sum_done_passes,
              "speculation_steps has %d rows; sessions' target passes sum to %d, done frames' to %d"
              % (n_steps, sum(v[0] for v in sess.values()), sum_done_passes))
        check(sum_acc == st["accepted"] == sum_done_acc,
              "SUM(n_accepted) %r, /api/stats accepted %r, done frames %r" % (sum_acc, st["accepted"], sum_done_acc))
        check(sum_gamma == st["drafted"] == sum_done_drafted and sum_rej == st["drafted"] - st["accepted"],
              "SUM(gamma_used) %r, SUM(n_rejected) %r; /api/stats drafted %r accepted %r; done frames drafted %r"
              % (sum_gamma, sum_rej, st["drafted"], st["accepted"], sum_done_drafted))
        n_verify_all = sum(v[4] for v in per.values())
        check(n_verify_all == st["verify_steps"], "%d verify step rows, /api/stats verify_steps %r"
              % (n_verify_all, st["verify_steps"]))
        check(sum_acc > 0 and n_steps > sum(v[4] for v in per.values()) > 0,
              "the workload should have verify steps with acceptances and plain steps: %r" % ((n_steps, sum_acc),))
        print("%d requests: %d step rows, %d accepted, %d rejected, %d verify steps — equal in the database, "
              "/api/stats and the done frames" % (len(streams), n_steps, sum_acc, sum_rej, n_verify_all))

    with_server(srv, body)


if __name__ == "__main__":
    main(run)
