# pe2e.py — shared helpers for the policy/telemetry end-to-end tests: builds a
# config.yaml from the SHIPPED one (models, telemetry path and rules edited in
# place), runs `specd serve -c` on it, and talks to it only through
# independent clients (python3-websockets, urllib, the sqlite3 module).
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

# the protocol-level pieces are the gateway suite's (one Stream checker, one
# frame reader, one failure type for both suites)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gateway_e2e"))
from specd_e2e import READY_RE, Fail, check, recv_json, skip  # noqa: E402
from specd_e2e import gen_msg  # noqa: E402,F401 (re-exported to the tests)
from specd_e2e import Stream as _Stream  # noqa: E402

TOKEN = "pe2e-admin-token"
PROMPTS = ["Once upon a time", "The cat sat", "Tom had a red ball.", "One day, a little bird", "Lily wanted to",
           "The sun was hot and", "Ben and his mom went", "Sue found a box", "The dog ran to the", "Mia liked to"]


_tmpdirs = []


def tmpdir(prefix):
    """A fresh temporary directory; removed when the test passes, kept (and named) when it fails."""
    d = tempfile.mkdtemp(prefix=prefix)
    _tmpdirs.append(d)
    return d


def main(fn):
    """Runs fn() and turns a Fail into exit 1 with the message, success into 0."""
    t0 = time.monotonic()
    try:
        fn()
    except Fail as e:
        print("FAIL: %s" % e)
        if _tmpdirs:
            print("kept for inspection: " + " ".join(_tmpdirs))
        sys.exit(1)
    for d in _tmpdirs:
        shutil.rmtree(d, ignore_errors=True)
    print("PASS (%.1f s)" % (time.monotonic() - t0))
    sys.exit(0)


def env_paths():
    """(specd, shipped config.yaml, target gguf, draft gguf); skips when any is missing."""
    specd, models, src = os.environ.get("SPECD"), os.environ.get("SPECD_MODELS"), os.environ.get("SPECD_SRC")
    if not specd or not os.access(specd, os.X_OK):
        skip("SPECD is not set to the specd binary")
    if not models or not src:
        skip("SPECD_MODELS / SPECD_SRC are not set")
    shipped = os.path.join(src, "config.yaml")
    target = os.path.join(models, "stories260K.gguf")
    draft = os.path.join(models, "llama2xs-281K.gguf")
    for p in (shipped, target, draft):
        if not os.path.exists(p):
            skip("missing: " + p)
    if importlib.util.find_spec("websockets") is None:
        skip("python3-websockets is not installed")
    return specd, shipped, target, draft


# ---- config.yaml, edited from the shipped file --------------------------------------------

def set_key(text, section, key, value):
    """Replaces `key`'s value inside top-level `section` of a YAML text, keeping
    the line's comment; fails when the key is not in the section."""
    lines = text.split("\n")
    in_sec = False
    for i, ln in enumerate(lines):
        if re.match(r"^[A-Za-z_]+:", ln):
            in_sec = ln.startswith(section + ":")
            continue
        m = re.match(r"^(  %s:\s*)(\"[^\"]*\"|[^#\s]*)(\s*#.*)?$" % re.escape(key), ln)
        if in_sec and m:
            lines[i] = m.group(1) + value + (m.group(3) or "")
            return "\n".join(lines)
    raise Fail("the shipped config.yaml has no %s.%s" % (section, key))


def set_rules(text, rules_yaml):
    """Replaces the policy.rules list (up to the next top-level section) with rules_yaml."""
    m = re.search(r"^  rules:\n(.*?)(?=^[A-Za-z_]+:)", text, re.M | re.S)
    check(m is not None, "the shipped config.yaml has no policy.rules block")
    return text[: m.start()] + "  rules:\n" + rules_yaml + "\n" + text[m.end():]


def chat_rule(gmin, gmax, gdef=None):
    """One rule for content_type chat (no fallback, so every step speculates)."""
    return ('    - model: "*"\n      content_type: chat\n      gamma_min: %d\n      gamma_max: %d\n'
            '      gamma_default: %d\n      alpha_threshold: 0.0\n' % (gmin, gmax, gdef if gdef else gmin))


def make_config(tdir, telemetry=True, sample_rate="1.0", rules=None, queue_size=None):
    """The shipped config.yaml with the real model pair, telemetry in tdir and
    optionally other chat rules; returns (text, db path)."""
    _, shipped, target, draft = env_paths()
    with open(shipped) as f:
        text = f.read()
    db = os.path.join(tdir, "telemetry.db")
    text = set_key(text, "models", "target", json.dumps(target))
    text = set_key(text, "models", "draft", json.dumps(draft))
    text = set_key(text, "telemetry", "enabled", "true" if telemetry else "false")
    text = set_key(text, "telemetry", "path", json.dumps(db))
    text = set_key(text, "telemetry", "sample_rate", sample_rate)
    text = set_key(text, "server", "web_root", '""')
    if queue_size:
        text = set_key(text, "telemetry", "queue_size", str(queue_size))
    if rules is not None:
        text = set_rules(text, rules)
    return text, db


def write_file(path, text):
    with open(path, "w") as f:
        f.write(text)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


# ---- the server -----------------------------------------------------------------------

class Server:
    """`specd serve -c CONFIG` as a child process in directory tdir (stdout and
    stderr go to files there). start() waits for the ready line."""

    def __init__(self, tdir, config_path, port=0, env=None, threads=1, extra=()):
        self.specd = env_paths()[0]
        self.tdir = tdir
        self.args = [self.specd, "serve", "-c", config_path, "-t", str(threads)]
        if port is not None:
            self.args += ["--port", str(port)]
        self.args += list(extra)
        self.env = dict(os.environ)
        self.env.update(env or {})
        self.proc = None
        self.n = 0

    def start(self, timeout=60):
        self.n += 1
        self.out_path = os.path.join(self.tdir, "stdout%d.txt" % self.n)
        self.err_path = os.path.join(self.tdir, "stderr%d.txt" % self.n)
        with open(self.out_path, "w") as o, open(self.err_path, "w") as e:
            self.proc = subprocess.Popen(self.args, cwd=self.tdir, stdout=o, stderr=e, stdin=subprocess.DEVNULL,
                                         env=self.env)
        deadline = time.monotonic() + timeout
        while True:
            with open(self.out_path) as f:
                m = READY_RE.search(f.read())
            if m:
                self.port = int(m.group(2))
                break
            if self.proc.poll() is not None:
                raise Fail("specd serve exited with %d before its ready line; stderr:\n%s"
                           % (self.proc.returncode, self.stderr_tail()))
            if time.monotonic() > deadline:
                self.kill()
                raise Fail("no ready line within %d s; stderr:\n%s" % (timeout, self.stderr_tail()))
            time.sleep(0.02)
        self.base = "http://127.0.0.1:%d" % self.port
        self.ws_url = "ws://127.0.0.1:%d/v1/stream" % self.port
        return self

    def stop(self, timeout=30):
        """SIGTERM; returns the exit code (fails when it does not exit in time)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise Fail("specd serve did not exit within %d s of SIGTERM; stderr:\n%s"
                           % (timeout, self.stderr_tail()))
        return self.proc.returncode

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def alive(self):
        return self.proc.poll() is None

    def stderr_tail(self, n=3000):
        try:
            with open(self.err_path, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def http(self, method, path, headers=None, timeout=30):
        """(status, body bytes); HTTP errors are answers too."""
        data = b"" if method == "POST" else None
        rq = urllib.request.Request(self.base + path, data=data, method=method, headers=dict(headers or {}))
        try:
            with urllib.request.urlopen(rq, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def stats(self, token=TOKEN):
        """/api/stats as the admin sees it (with the reload message); token=None: as anyone sees it."""
        st, body = self.http("GET", "/api/stats", headers={"Authorization": "Bearer " + token} if token else None)
        check(st == 200, "/api/stats answered %d: %r" % (st, body[:200]))
        try:
            return json.loads(body)
        except ValueError:
            raise Fail("/api/stats is not JSON: %r" % body[:300])

    def admin_reload(self, token=TOKEN):
        """POST /admin/reload; (status, parsed JSON body)."""
        st, body = self.http("POST", "/admin/reload", headers={"Authorization": "Bearer " + token})
        try:
            return st, json.loads(body)
        except ValueError:
            raise Fail("/admin/reload answered %d with non-JSON %r" % (st, body[:300]))


def with_server(srv, fn):
    """Runs fn(); on any exception kills the server and prints its stderr tail."""
    try:
        return fn()
    except BaseException:
        srv.kill()
        sys.stderr.write("server stderr (tail):\n%s\n" % srv.stderr_tail())
        raise


# ---- WebSocket client (specd.v1) ------------------------------------------------------------

def ws_connect(srv):
    import websockets
    return websockets.connect(srv.ws_url, subprotocols=["specd.v1"], max_size=None, open_timeout=15,
                              ping_interval=None)


class Stream(_Stream):
    """The gateway suite's ordered-frame checker, plus send/finish times."""

    def __init__(self, rid):
        super().__init__(rid)
        self.t_send = time.time()
        self.t_end = None

    def add(self, m):
        super().add(m)
        if self.finished and self.t_end is None:
            self.t_end = time.time()

    def check_ok(self):
        check(self.error is None, "stream %r failed: %r" % (self.id, self.error))
        check(self.done is not None, "stream %r has no done" % self.id)
        check(self.done["usage"]["completion_tokens"] == len(self.tokens),
              "stream %r: usage.completion_tokens %r but %d tokens streamed"
              % (self.id, self.done["usage"]["completion_tokens"], len(self.tokens)))


async def run_batch(ws, reqs, timeout=120):
    """Sends every (id, message JSON) in reqs on ws at once and reads until all
    have finished; returns {id: Stream}."""
    streams = {}
    for rid, msg in reqs:
        streams[rid] = Stream(rid)
        await ws.send(msg)
    deadline = time.monotonic() + timeout
    while not all(s.finished for s in streams.values()):
        left = deadline - time.monotonic()
        check(left > 0, "streams not finished within %d s" % timeout)
        m = await recv_json(ws, left)
        check(m.get("id") in streams, "frame for an id never sent: %r" % m)
        streams[m["id"]].add(m)
    return streams


def db_open(path):
    """A read-only connection to the telemetry database."""
    check(os.path.exists(path), "telemetry database %s does not exist" % path)
    return sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=10)


def story_prompts(n):
    """n distinct short prompts (3..7 words) cut from TinyStories sentences, the models' own domain."""
    path = os.path.join(os.environ["SPECD_MODELS"], "corpora", "tinystories_valid_30K.txt")
    out, seen = [], set()
    with open(path, errors="replace") as f:
        text = f.read(200000)
    for sent in re.split(r"(?<=[.!?])\s+", text):
        words = sent.split()
        if len(words) < 8 or not all(w.isascii() for w in words):
            continue
        p = " ".join(words[: 3 + len(out) % 5])
        if p.lower() not in seen:
            seen.add(p.lower())
            out.append(p)
        if len(out) == n:
            return out
    raise Fail("the corpus gave only %d prompts" % len(out))
