# specd_e2e.py — shared helpers for the gateway's end-to-end tests: runs a real
# `specd serve` (stories260K + llama2xs) on 127.0.0.1, and talks to it only
# through independent clients (python3-websockets, urllib, curl), never through
# the server's own code.
import asyncio
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

SKIP = 77


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def skip(msg):
    print("SKIP: " + msg)
    sys.exit(SKIP)


def main(fn):
    """Runs fn() and turns a Fail into exit 1 with the message, success into 0."""
    t0 = time.monotonic()
    try:
        fn()
    except Fail as e:
        print("FAIL: %s" % e)
        sys.exit(1)
    print("PASS (%.1f s)" % (time.monotonic() - t0))
    sys.exit(0)


def paths():
    """(specd binary, target gguf, draft gguf); skips when any is missing."""
    specd = os.environ.get("SPECD")
    models = os.environ.get("SPECD_MODELS")
    if not specd or not os.access(specd, os.X_OK):
        skip("SPECD is not set to the specd binary")
    if not models:
        skip("SPECD_MODELS is not set")
    target = os.path.join(models, "stories260K.gguf")
    draft = os.path.join(models, "llama2xs-281K.gguf")
    for p in (target, draft):
        if not os.path.exists(p):
            skip("model file missing: " + p)
    return specd, target, draft


def train_medusa_heads(tmp, epochs):
    """Medusa heads (3, seed 3) for stories260K, trained by `specd train-medusa`
    on the TinyStories corpus into tmp/heads.gguf; returns the path."""
    specd, target, _ = paths()
    corpus = os.path.join(os.environ.get("SPECD_MODELS", "../shared/models"), "corpora", "tinystories_valid_30K.txt")
    heads = os.path.join(tmp, "heads.gguf")
    r = subprocess.run([specd, "train-medusa", "-m", target, "-o", heads, "--corpus", corpus, "--heads", "3",
                        "--epochs", str(epochs), "--seed", "3", "-t", "1", "--quiet"], capture_output=True, text=True,
                       timeout=300)
    check(r.returncode == 0, "train-medusa failed: %s" % r.stderr[-2000:])
    return heads


def need_websockets():
    try:
        import websockets  # noqa: F401
    except ImportError:
        skip("python3-websockets is not installed")
    return sys.modules["websockets"]


READY_RE = re.compile(r"serving on http://([0-9.]+):([0-9]+)/ \(WebSocket ws://[0-9.]+:[0-9]+/v1/stream\)")


class Server:
    """A `specd serve --port 0` child process. Use as a context manager: on a
    clean exit it is stopped with SIGTERM and must exit 0 within stop_timeout;
    when the body raised, it is killed. The server runs in a private temporary
    directory (so no stray config.yaml or web/ of the caller's is picked up)."""

    def __init__(self, max_running=None, ctx=None, config=None, web_root=None, extra=(), start_timeout=120,
                 stop_timeout=30):
        self.specd, self.target, self.draft = paths()
        self.dir = tempfile.mkdtemp(prefix="specd-e2e-")
        args = [self.specd, "serve", "-m", self.target, "--draft", self.draft, "--host", "127.0.0.1",
                "--port", "0", "-t", "1"]
        if max_running:
            args += ["--max-running", str(max_running)]
        if ctx:
            args += ["--ctx", str(ctx)]
        if config is not None:
            cpath = os.path.join(self.dir, "config.yaml")
            with open(cpath, "w") as f:
                f.write(config)
            args += ["-c", cpath]
        if web_root:
            args += ["--web-root", web_root]
        args += list(extra)
        self.args = args
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.proc = None
        self.port = None

    def __enter__(self):
        self.out_path = os.path.join(self.dir, "stdout.txt")
        self.err_path = os.path.join(self.dir, "stderr.txt")
        self._out = open(self.out_path, "w")
        self._err = open(self.err_path, "w")
        self.t_start = time.monotonic()
        self.proc = subprocess.Popen(self.args, cwd=self.dir, stdout=self._out, stderr=self._err,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.start_timeout
        while True:
            with open(self.out_path) as f:
                m = READY_RE.search(f.read())
            if m:
                check(m.group(1) == "127.0.0.1", "server bound %s, expected 127.0.0.1" % m.group(1))
                self.port = int(m.group(2))
                check(self.port > 0, "ready line names port 0")
                break
            if self.proc.poll() is not None:
                self._cleanup()
                raise Fail("specd serve exited with %d before its ready line; stderr:\n%s"
                           % (self.proc.returncode, self.stderr_tail()))
            if time.monotonic() > deadline:
                self.kill()
                raise Fail("specd serve printed no ready line within %d s; stderr:\n%s"
                           % (self.start_timeout, self.stderr_tail()))
            time.sleep(0.02)
        self.base = "http://127.0.0.1:%d" % self.port
        self.ws_url = "ws://127.0.0.1:%d/v1/stream" % self.port
        return self

    def __exit__(self, et, ev, tb):
        if et is not None:
            if self.proc.poll() is None:
                self.kill()
            sys.stderr.write("server stderr (tail):\n%s\n" % self.stderr_tail())
            self._cleanup()
            return False
        rc = self.stop()
        self._cleanup()
        check(rc == 0, "specd serve exited with %s after SIGTERM (expected 0)" % rc)
        return False

    def stop(self):
        """SIGTERM, then waits; returns the exit code (None when it had to be killed)."""
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=self.stop_timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            sys.stderr.write("server stderr (tail):\n%s\n" % self.stderr_tail())
            return None

    def kill(self):
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

    def _cleanup(self):
        for f in (self._out, self._err):
            f.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---- HTTP -------------------------------------------------------------------

    def http(self, method, path, body=None, headers=None, timeout=30):
        """(status, headers dict with lower-case names, body bytes); HTTP errors are answers too."""
        data = None
        hdrs = dict(headers or {})
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        rq = urllib.request.Request(self.base + path, data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(rq, timeout=timeout) as r:
                return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        except urllib.error.HTTPError as e:
            return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()

    def metrics(self):
        st, hd, body = self.http("GET", "/metrics")
        check(st == 200, "/metrics answered %d" % st)
        check(hd.get("content-type", "").startswith("text/plain"), "/metrics content-type %r" % hd.get("content-type"))
        return parse_prometheus(body.decode())

    def kv_free(self):
        return metric_value(self.metrics(), "specd:kv_blocks_free", {"model": "target"})

    def wait_kv_free(self, want, timeout=5.0):
        """Polls /metrics until the target pool has `want` free blocks; returns the last value seen."""
        deadline = time.monotonic() + timeout
        while True:
            v = self.kv_free()
            if v == want or time.monotonic() > deadline:
                return v
            time.sleep(0.05)


# ---- OpenAI request bodies ------------------------------------------------------------

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"


def oa_body(path, chat_text="Tell me a story about a cat.", prompt="Once upon a time", **fields):
    """A request body for the OpenAI endpoint `path` (CHAT: one user message
    chat_text; COMP: the prompt) with the other fields given."""
    b = {"messages": [{"role": "user", "content": chat_text}]} if path == CHAT else {"prompt": prompt}
    b.update(fields)
    return b


# ---- raw sockets (no client-side normalisation or protocol help) ----------------------

def raw_exchange(port, data, timeout=5):
    """Sends raw bytes to the server, reads until it closes (or `timeout` s of silence)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(data)
    buf = b""
    while True:
        try:
            d = s.recv(65536)
        except socket.timeout:
            break
        if not d:
            break
        buf += d
    s.close()
    return buf


# ---- the CLI as the reference ---------------------------------------------------------

def cli_generate(prompt, n):
    """`specd generate ... --temp 0 --json` for the same pair; returns its JSON object."""
    specd, target, draft = paths()
    d = tempfile.mkdtemp(prefix="specd-e2e-gen-")
    try:
        r = subprocess.run([specd, "generate", "-m", target, "--draft", draft, "-p", prompt, "-n", str(n),
                            "--temp", "0", "--json", "-t", "1"], cwd=d, capture_output=True, timeout=120)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    check(r.returncode == 0, "specd generate failed (%d): %s" % (r.returncode, r.stderr.decode(errors="replace")))
    try:
        return json.loads(r.stdout)
    except ValueError as e:
        raise Fail("specd generate --json printed no JSON object (%s): %r" % (e, r.stdout[:300]))


# ---- WebSocket client -------------------------------------------------------------------

def ws_connect(srv, **kw):
    ws = need_websockets()
    return ws.connect(srv.ws_url, subprotocols=["specd.v1"], max_size=None, open_timeout=15, **kw)


async def recv_json(ws, timeout=30):
    try:
        raw = await asyncio.wait_for(ws.recv(), timeout)
    except asyncio.TimeoutError:
        raise Fail("no message from the server within %d s" % timeout)
    check(isinstance(raw, str), "server sent a binary frame: %r" % (raw[:80],))
    try:
        m = json.loads(raw)
    except ValueError:
        raise Fail("server sent a text frame that is not JSON: %r" % raw[:200])
    check(isinstance(m, dict) and isinstance(m.get("type"), str), "server frame without a type: %r" % raw[:200])
    return m


class Stream:
    """Everything one request received, checked for order as it arrives:
    start first, then tokens, then exactly one done (or error), nothing after."""

    def __init__(self, rid):
        self.id = rid
        self.start = None
        self.tokens = []     # token ids, concatenated
        self.text = ""
        self.events = []     # the tokens events
        self.done = None
        self.error = None

    def add(self, m):
        check(self.done is None and self.error is None,
              "id %r: %s message after its final message: %r" % (self.id, m["type"], m))
        t = m["type"]
        if t == "start":
            check(self.start is None, "id %r: second start" % self.id)
            check(not self.events, "id %r: start after tokens" % self.id)
            self.start = m
        elif t == "tokens":
            check(self.start is not None, "id %r: tokens before start" % self.id)
            check(isinstance(m.get("token_ids"), list) and m["token_ids"], "id %r: tokens without ids: %r"
                  % (self.id, m))
            check(isinstance(m.get("text"), str), "id %r: tokens without text" % self.id)
            self.events.append(m)
            self.tokens += m["token_ids"]
            self.text += m["text"]
        elif t == "done":
            self.done = m
        elif t == "error":
            self.error = m
        else:
            raise Fail("id %r: unexpected message type %r" % (self.id, t))

    @property
    def finished(self):
        return self.done is not None or self.error is not None


async def collect(ws, streams, timeout=60):
    """Reads messages into streams (id -> Stream) until every one of them has
    finished. Any message for an unknown id, or without one, fails."""
    deadline = time.monotonic() + timeout
    while not all(s.finished for s in streams.values()):
        left = deadline - time.monotonic()
        check(left > 0, "streams not finished within %d s: %s" %
              (timeout, [k for k, s in streams.items() if not s.finished][:10]))
        m = await recv_json(ws, left)
        check("id" in m, "message without an id while streaming: %r" % m)
        check(m["id"] in streams, "message for an id never sent: %r" % m)
        streams[m["id"]].add(m)


def gen_msg(rid, prompt, max_tokens, temperature=0, **kw):
    m = {"type": "generate", "id": rid, "prompt": prompt, "max_tokens": max_tokens, "temperature": temperature}
    m.update(kw)
    return json.dumps(m)


async def run_one(ws, rid, prompt, max_tokens, temperature=0, timeout=60, **kw):
    """Sends one generate and reads its stream to the end (no other traffic on ws)."""
    await ws.send(gen_msg(rid, prompt, max_tokens, temperature, **kw))
    s = {rid: Stream(rid)}
    await collect(ws, s, timeout)
    return s[rid]


def check_done(s, max_tokens=None):
    """A stream finished with done, and its token count matches usage."""
    check(s.error is None, "id %r ended with an error: %r" % (s.id, s.error))
    check(s.done is not None, "id %r has no done" % s.id)
    u = s.done.get("usage", {})
    check(u.get("completion_tokens") == len(s.tokens), "id %r: usage.completion_tokens %r but %d token ids streamed"
          % (s.id, u.get("completion_tokens"), len(s.tokens)))
    check(u.get("prompt_tokens") == s.start.get("prompt_tokens"), "id %r: prompt_tokens differ start/done" % s.id)
    if max_tokens is not None and s.done.get("finish_reason") == "length":
        check(len(s.tokens) == max_tokens, "id %r: finish length after %d of %d tokens" % (s.id, len(s.tokens),
                                                                                             max_tokens))


# ---- Prometheus text format ------------------------------------------------------------------

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE_RE = re.compile(r"^(" + _NAME + r")(\{(.*)\})?[ \t]+(\S+)([ \t]+-?[0-9]+)?$")
_LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\[\\"n])*)"\s*(,|$)')


def _parse_value(s, line):
    if s in ("+Inf", "Inf"):
        return math.inf
    if s == "-Inf":
        return -math.inf
    if s == "NaN":
        return math.nan
    try:
        return float(s)
    except ValueError:
        raise Fail("metrics: bad value %r in line %r" % (s, line))


def _parse_labels(s, line):
    out = {}
    pos = 0
    while pos < len(s):
        m = _LABEL_RE.match(s, pos)
        check(m is not None and m.end() > pos, "metrics: bad labels in line %r" % line)
        check(m.group(1) not in out, "metrics: label %s repeated in %r" % (m.group(1), line))
        out[m.group(1)] = m.group(2).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
        pos = m.end()
    return out


def parse_prometheus(text):
    """Parses the Prometheus text exposition format (0.0.4) strictly enough to
    catch a broken exporter: HELP/TYPE comments precede their family's samples
    and appear once each, every sample belongs to a declared family (histograms:
    _bucket/_sum/_count), names and labels are well formed, and each histogram
    series has cumulative buckets in increasing `le` order ending with +Inf
    whose count equals _count. Returns {family: {"type", "help", "samples":
    [(name, labels, value)]}}."""
    fams = {}
    order = []
    check(text.endswith("\n"), "metrics: text does not end with a newline")
    for line in text.split("\n")[:-1]:
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                check(re.fullmatch(_NAME, name) is not None, "metrics: bad family name in %r" % line)
                f = fams.setdefault(name, {"type": None, "help": None, "samples": []})
                if name not in order:
                    order.append(name)
                check(not f["samples"], "metrics: %s for %s after its samples" % (parts[1], name))
                if parts[1] == "HELP":
                    check(f["help"] is None, "metrics: second HELP for %s" % name)
                    f["help"] = parts[3] if len(parts) > 3 else ""
                else:
                    check(f["type"] is None, "metrics: second TYPE for %s" % name)
                    check(len(parts) == 4 and parts[3] in ("counter", "gauge", "histogram", "summary", "untyped"),
                          "metrics: bad TYPE line %r" % line)
                    f["type"] = parts[3]
            continue
        m = _SAMPLE_RE.match(line)
        check(m is not None, "metrics: unparsable line %r" % line)
        name, labels, value = m.group(1), _parse_labels(m.group(3) or "", line), _parse_value(m.group(4), line)
        fam = None
        if name in fams and fams[name]["type"] not in ("histogram", "summary"):
            fam = name
        else:
            for suf in ("_bucket", "_sum", "_count"):
                if name.endswith(suf) and fams.get(name[: -len(suf)], {}).get("type") in ("histogram", "summary"):
                    fam = name[: -len(suf)]
        check(fam is not None, "metrics: sample %s has no TYPE declared before it" % name)
        check(order[-1] == fam, "metrics: samples of %s are not grouped after its TYPE line" % fam)
        f = fams[fam]
        check(not any(s[0] == name and s[1] == labels for s in f["samples"]),
              "metrics: duplicate sample %s%r" % (name, labels))
        if f["type"] == "counter":
            check(value >= 0 and not math.isnan(value), "metrics: counter %s is %r" % (name, value))
        f["samples"].append((name, labels, value))
    for fam, f in fams.items():
        check(f["type"] is not None, "metrics: family %s has HELP but no TYPE" % fam)
        if f["type"] == "histogram":
            _check_histogram(fam, f["samples"])
    return fams


def _check_histogram(fam, samples):
    series = {}
    for name, labels, value in samples:
        key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        s = series.setdefault(key, {"buckets": [], "sum": None, "count": None})
        if name == fam + "_bucket":
            check("le" in labels, "metrics: %s bucket without le" % fam)
            s["buckets"].append((_parse_value(labels["le"], name), value))
        elif name == fam + "_sum":
            s["sum"] = value
        else:
            s["count"] = value
    check(series, "metrics: histogram %s has no samples" % fam)
    for key, s in series.items():
        b = s["buckets"]
        check(b, "metrics: histogram %s%r has no buckets" % (fam, key))
        check(s["sum"] is not None and s["count"] is not None, "metrics: histogram %s lacks _sum or _count" % fam)
        for (le0, c0), (le1, c1) in zip(b, b[1:]):
            check(le1 > le0, "metrics: %s buckets not in increasing le order (%r then %r)" % (fam, le0, le1))
            check(c1 >= c0, "metrics: %s buckets not cumulative (le=%r: %r, le=%r: %r)" % (fam, le0, c0, le1, c1))
        check(b[-1][0] == math.inf, "metrics: %s last bucket is le=%r, not +Inf" % (fam, b[-1][0]))
        check(b[-1][1] == s["count"], "metrics: %s +Inf bucket %r != _count %r" % (fam, b[-1][1], s["count"]))
        check(s["count"] == int(s["count"]) and s["count"] >= 0, "metrics: %s _count %r" % (fam, s["count"]))
        check(s["sum"] >= 0 or s["count"] == 0, "metrics: %s _sum %r" % (fam, s["sum"]))


def metric_value(fams, name, labels=None):
    """The value of the sample `name` with exactly these labels; fails when absent."""
    labels = labels or {}
    for f in fams.values():
        for n, lb, v in f["samples"]:
            if n == name and lb == labels:
                return v
    raise Fail("metrics: no sample %s%r" % (name, labels))
