# test_reload_under_load.py — policy reloads while 50 seeded greedy streams run
# (10 sockets × 5 requests, content_type chat, over and over until the reloads
# are done): 20 valid policy changes alternating the chat rule between γ 2..3
# and 5..6 and 20 invalid ones, through every path: the file rewritten in place
# or replaced by rename (inotify), and POST /admin/reload or SIGHUP after a
# rewrite (so those make two reloads each: theirs and the file change's —
# 30 valid reloads in all, each one counted and matched to its cause).
# Checks: no stream fails and every stream's text and token ids equal that
# request run alone before any reload (greedy output does not depend on γ);
# the policy version rises by exactly the number of successful reloads, each
# logged with its cause; failed ones leave it unchanged and report the error
# as file:line:col in /api/stats, the log and the /admin/reload answer; the
# telemetry's gamma_used follows the bounds in force when each step ran
# (≤ 3 under 2..3 — running sequences included —, up to 5..6 under 5..6);
# gamma_policy mirrors the final rules.
import asyncio
import os
import re
import signal
import threading
import time

from pe2e import TOKEN, check, db_open, gen_msg, main, make_config, run_batch, Server, set_rules, \
    story_prompts, tmpdir, with_server, write_file, ws_connect

N_SOCK, PER_SOCK, MAX_TOKENS = 10, 5, 40
A, B = (2, 3), (5, 6)        # the two chat bounds the valid reloads alternate between
HOLD_S = 0.3                 # time each valid policy stays in force (the streams keep running)
MARGIN_MS = 100              # steps this soon after a reload may still be in flight under the old bounds

FIXED_RULES = '''    - model: "*"
      content_type: code
      gamma_min: 3
      gamma_max: 10
      gamma_default: 6
      alpha_threshold: 0.4
    - model: "*"
      content_type: structured
      gamma_min: 3
      gamma_max: 12
      gamma_default: 6
      alpha_threshold: 0.4
'''


def chat_rule(b, broken=None):
    """The chat rule (index 2) with bounds b, or broken in one of several ways.
    Returns (yaml, marker, message): the error must point at the line and
    column where `marker` starts, with `message` after "file:line:col: "."""
    g_min, g_max = "%d" % b[0], "%d" % b[1]
    k_max = "gamma_max"
    extra = ""
    marker, msg = None, None
    if broken == "min>max":
        g_min, g_max = "6", "3"
        marker, msg = "gamma_min: 6", "policy.rules[2]: gamma_min 6 > gamma_max 3"
    elif broken == "unknown key":
        k_max = "gama_max"
        marker, msg = "gama_max", "unknown key 'policy.rules[2].gama_max'; did you mean 'gamma_max'?"
    elif broken == "wrong type":
        g_max = "six"
        marker, msg = "gamma_max: six", "policy.rules[2].gamma_max: expected an integer, got 'six'"
    elif broken == "duplicate":
        extra = '    - content_type: chat\n      gamma_min: 4\n'
        marker, msg = "content_type: chat\n      gamma_min: 4", \
            "policy.rules[3]: duplicate rule for model '*' content_type 'chat' (first at line "
    y = ('    - model: "*"\n      content_type: chat\n      gamma_min: %s\n      %s: %s\n'
         '      gamma_default: %s\n      alpha_threshold: 0.0\n%s' % (g_min, k_max, g_max, g_min, extra))
    return FIXED_RULES + y, marker, msg


def config_text(base, b, broken=None):
    rules, marker, msg = chat_rule(b, broken)
    text = set_rules(base, rules)
    if marker is None:
        return text, None
    i = text.index(marker)
    if marker.startswith("gamma_min: 6") or marker.startswith("gamma_max: six"):
        i += marker.index(": ") + 2  # value errors point at the value
    line = text.count("\n", 0, i) + 1
    col = i - (text.rfind("\n", 0, i) + 1) + 1
    return text, (line, col, msg)


RELOAD_LOG = re.compile(r"^specd: (?:reloaded (\S+) \(version (\d+), ([^)]*)\)|reload \(([^)]*)\) failed, keeping "
                        r"version (\d+): (.*))$", re.M)


class Driver:
    """Runs the 40 reloads (in its own thread) and records what it saw."""

    def __init__(self, srv, cfg_path, base):
        self.srv, self.cfg, self.base = srv, cfg_path, base
        self.version = srv.stats()["policy"]["version"]
        self.n_log = 0
        self.windows = []      # (bounds, from_ms, to_ms): steps in here ran under these bounds
        self.final = A
        self.valid_reloads = 0
        self.error = None
        self.done = threading.Event()

    def log_lines(self):
        with open(self.srv.err_path, errors="replace") as f:
            return RELOAD_LOG.findall(f.read())

    def wait_log(self, want, timeout=10.0):
        """Waits until the log holds `want` reload lines; returns the new ones."""
        deadline = time.monotonic() + timeout
        while True:
            lines = self.log_lines()
            check(len(lines) <= want, "%d reload log lines, expected %d: %r" % (len(lines), want, lines[self.n_log:]))
            if len(lines) == want:
                new = lines[self.n_log:]
                self.n_log = want
                return new
            check(time.monotonic() < deadline, "only %d of %d reloads happened within %.0f s (log: %r)"
                  % (len(lines), want, timeout, lines[self.n_log:]))
            time.sleep(0.01)

    def write(self, text, how):
        if how == "rename":  # what editors and deploy tools do: the watched name appears by rename
            tmp = self.cfg + ".tmp"
            write_file(tmp, text)
            os.replace(tmp, self.cfg)
        else:
            write_file(self.cfg, text)

    def action(self, k, valid, how, b, broken):
        text, err = config_text(self.base, b, broken)
        self.write(text, "rename" if how == "rename" else "inplace")
        n_expect = 1  # the file change (inotify)
        post = None
        if how == "post":
            post = self.srv.admin_reload()
            n_expect = 2
        elif how == "sighup":
            self.srv.proc.send_signal(signal.SIGHUP)
            n_expect = 2
        new = self.wait_log(self.n_log + n_expect)
        whys = sorted((w[2] or w[3]) for w in new)
        want_whys = sorted(["file changed"] + {"post": ["POST /admin/reload"], "sighup": ["SIGHUP"]}.get(how, []))
        check(whys == want_whys, "action %d (%s): reload causes %r, expected %r" % (k, how, whys, want_whys))
        st = self.srv.stats()["policy"]
        if valid:
            for w in new:
                check(w[0] == self.cfg and w[1], "action %d (%s): a valid reload failed: %r" % (k, how, w))
                self.version += 1
                check(int(w[1]) == self.version, "action %d: logged version %s, expected %d" % (k, w[1], self.version))
            self.valid_reloads += n_expect
            check(st["version"] == self.version, "action %d (%s): /api/stats version %r, expected %d"
                  % (k, how, st["version"], self.version))
            check(st["last_reload_ok"] is True, "action %d: last_reload_ok %r after a valid reload" % (k, st))
            if post is not None:
                check(post[0] == 200 and post[1].get("ok") is True, "action %d: /admin/reload answered %r" % (k, post))
                check(post[1].get("version") in (self.version - 1, self.version),
                      "action %d: /admin/reload version %r (now %d)" % (k, post[1].get("version"), self.version))
            self.final = b
        else:
            line, col, msg = err
            want = "%s:%d:%d: %s" % (self.cfg, line, col, msg)
            for w in new:
                check(not w[1], "action %d (%s): an invalid policy was accepted: %r" % (k, how, w))
                check(int(w[4]) == self.version, "action %d: 'keeping version %s', expected %d"
                      % (k, w[4], self.version))
                check(w[5].startswith(want), "action %d: logged error %r, expected it to start with %r"
                      % (k, w[5], want))
            check(st["version"] == self.version, "action %d (%s, invalid): version moved to %r from %d"
                  % (k, how, st["version"], self.version))
            check(st["last_reload_ok"] is False, "action %d: last_reload_ok %r after an invalid reload" % (k, st))
            check(want in st["last_reload_message"], "action %d: last_reload_message %r lacks %r"
                  % (k, st["last_reload_message"], want))
            if post is not None:
                check(post[0] == 422 and post[1].get("ok") is False,
                      "action %d: /admin/reload answered %r" % (k, post))
                check(post[1].get("version") == self.version and want in post[1].get("message", ""),
                      "action %d: /admin/reload answer %r, expected version %d and %r"
                      % (k, post[1], self.version, want))

    def run(self):
        try:
            hows = ["inplace", "post", "rename", "sighup"]
            brokens = ["min>max", "unknown key", "wrong type", "duplicate"]
            for k in range(40):
                valid = k % 2 == 0
                t0 = time.time()
                b = B if (k // 2) % 2 == 0 else A  # valid actions: B, A, B, A, ...
                if valid and self.windows:
                    prev = self.windows[-1]
                    self.windows[-1] = (prev[0], prev[1], t0 * 1000)
                if valid:
                    self.action(k, True, hows[(k // 2) % 4], b, None)
                    self.windows.append((b, time.time() * 1000 + MARGIN_MS, None))
                    time.sleep(HOLD_S)
                else:
                    self.action(k, False, hows[(k // 2 + 1) % 4], self.final, brokens[(k // 2) % 4])
            prev = self.windows[-1]
            self.windows[-1] = (prev[0], prev[1], time.time() * 1000)
        except BaseException as e:  # reported by the main thread
            self.error = e
        finally:
            self.done.set()


def requests():
    prompts = story_prompts(N_SOCK * PER_SOCK)
    return [("s%d" % i, gen_msg("s%d" % i, prompts[i], MAX_TOKENS, 0, seed=1000 + i, content_type="chat"))
            for i in range(N_SOCK * PER_SOCK)]


async def alone(srv, reqs):
    out = {}
    async with ws_connect(srv) as ws:
        for rid, msg in reqs:
            s = (await run_batch(ws, [(rid, msg)]))[rid]
            s.check_ok()
            out[rid] = s
    return out


async def under_load(srv, reqs, driver):
    """The 10 sockets resend their 5 requests until the driver has finished."""
    rounds = []

    async def sock(k):
        mine = reqs[k * PER_SOCK:(k + 1) * PER_SOCK]
        async with ws_connect(srv) as ws:
            while not driver.done.is_set():
                rounds.append(await run_batch(ws, mine, timeout=60))

    thread = threading.Thread(target=driver.run)
    thread.start()
    try:
        await asyncio.gather(*[sock(k) for k in range(N_SOCK)])
    finally:
        driver.done.wait()
        thread.join()
    return rounds


def check_telemetry(db, driver, sessions):
    c = db_open(db)
    steps = c.execute("SELECT s.session_id, s.gamma_used, s.recorded_at FROM speculation_steps s").fetchall()
    check(steps, "no step rows in the telemetry")
    ours = [r for r in steps if r[0] in sessions]
    check(len(ours) == len(steps), "%d step rows belong to no session the clients saw" % (len(steps) - len(ours)))
    a_max, b_hits, b_windows_hit, over = 0, 0, 0, []
    for bounds, t0, t1 in driver.windows:
        g = [r[1] for r in steps if t0 <= r[2] <= t1]
        check(g, "no step was recorded while the rule %r was in force (%.0f..%.0f ms)" % (bounds, t0, t1))
        over += [(bounds, x) for x in g if x > bounds[1]]
        if bounds == A:
            a_max = max(a_max, max(g))
        else:
            hits = sum(1 for x in g if x >= B[0])
            b_hits += hits
            b_windows_hit += hits > 0
    check(not over, "steps drafted more than the rule in force allowed: %r" % over[:10])
    n_b = sum(1 for w in driver.windows if w[0] == B)
    check(b_windows_hit >= n_b // 2, "gamma_used >= %d (only possible under %r) in %d of %d such windows"
          % (B[0], B, b_windows_hit, n_b))
    # the final rules, as gamma_policy mirrors them
    rows = sorted((r[0], r[1] or "", r[2], r[3], r[4], round(r[5], 6), r[6]) for r in c.execute(
        "SELECT model_id, content_type, gamma_min, gamma_max, gamma_default, alpha_threshold, version "
        "FROM gamma_policy"))
    v = driver.version
    fb = driver.final
    want_rules = sorted([("*", "code", 3, 10, 6, 0.4, v), ("*", "structured", 3, 12, 6, 0.4, v),
                         ("*", "chat", fb[0], fb[1], fb[0], 0.0, v), ("*", "", 2, 8, 4, 0.4, v)])
    check(rows == want_rules, "gamma_policy %r, expected the final rules %r" % (rows, want_rules))
    c.close()
    return a_max, b_hits, len(steps)


def run():
    d = tmpdir("specd-pe2e-reload-")
    base, db = make_config(d)
    cfg = os.path.join(d, "config.yaml")
    write_file(cfg, config_text(base, A)[0])
    srv = Server(d, cfg, env={"SPECD_ADMIN_TOKEN": TOKEN}).start()

    def body():
        reqs = requests()
        ref = asyncio.run(alone(srv, reqs))
        v0 = srv.stats()["policy"]["version"]
        driver = Driver(srv, cfg, base)
        t0 = time.monotonic()
        rounds = asyncio.run(under_load(srv, reqs, driver))
        dt = time.monotonic() - t0
        if driver.error:
            raise driver.error
        n = 0
        sessions = set(s.start["session"] for s in ref.values())
        for r in rounds:
            for rid, s in r.items():
                s.check_ok()
                n += 1
                sessions.add(s.start["session"])
                check(s.tokens == ref[rid].tokens, "stream %s under reloads: %r, alone: %r"
                      % (rid, s.text, ref[rid].text))
        check(n >= 2 * N_SOCK * PER_SOCK, "only %d streams ran during the reloads" % n)
        st = srv.stats()
        check(st["policy"]["version"] - v0 == driver.valid_reloads,
              "version went %d -> %d over %d valid reloads" % (v0, st["policy"]["version"], driver.valid_reloads))
        rc = srv.stop()
        check(rc == 0, "specd serve exited %r after SIGTERM" % rc)
        a_max, b_hits, n_steps = check_telemetry(db, driver, sessions)
        print("%d streams (all equal to their run alone) over %.1f s; %d valid reloads (%d actions), 20 invalid "
              "actions; %d step rows; max gamma_used under %r: %d; steps with gamma_used >= %d under %r: %d"
              % (n, dt, driver.valid_reloads, 20, n_steps, A, a_max, B[0], B, b_hits))

    with_server(srv, body)


if __name__ == "__main__":
    main(run)
