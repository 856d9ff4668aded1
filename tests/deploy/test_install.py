#!/usr/bin/python3
"""test_install.py — specd runs from anywhere (issue 40 item 4).

1. `meson install --destdir` lays out bin/specd, share/specd/web (the pages
   and uPlot under vendor/uplot), share/specd/config.yaml and the systemd unit
   with this prefix's paths filled in.
2. The installed binary and the build tree's binary, started with cwd=/ and
   no config file anywhere they look, serve / (the monitor), /chat.html and
   the chart library the monitor loads (/vendor/uplot/uPlot.iife.min.js), and
   their start-up lines say that no config file was found and where the
   pages come from.
3. The config lookup order: -c, then $SPECD_CONFIG, then ./config.yaml; the
   start-up line names the file and the rule; a missing -c / $SPECD_CONFIG
   file is refused (exit 2) naming it.
4. A request without max_tokens runs to the end of the context (--ctx 64),
   or stops at server.max_tokens_default when the config sets one."""
import json
import os, re, signal, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import installed  # noqa: E402

SRC = os.environ.get("SPECD_SRC", os.path.join(os.path.dirname(__file__), "../.."))
SPECD = os.environ.get("SPECD")
MODELS = os.environ.get("SPECD_MODELS", "")
TARGET = os.path.join(MODELS, "stories260K.gguf")
if not SPECD or not os.path.exists(TARGET):
    print("SKIP: SPECD / models missing")
    sys.exit(77)
READY_RE = re.compile(r"serving on http://127\.0\.0\.1:([0-9]+)/")
failures = []


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg, flush=True)
    if not cond:
        failures.append(msg)


def env_without_config():
    env = dict(os.environ)
    env.pop("SPECD_CONFIG", None)
    return env


def serve(binary, cwd, args=(), env=None, timeout=60):
    """Starts `binary serve` on a free port; returns (proc, port, stderr path) once ready, or
    (proc, None, stderr path) when it exited first."""
    err = tempfile.NamedTemporaryFile(prefix="specd-install-err-", delete=False).name
    out = err + ".out"
    p = subprocess.Popen([binary, "serve", "-m", TARGET, "--host", "127.0.0.1", "--port", "0", "-t", "1"] + list(args),
                         cwd=cwd, env=env or env_without_config(), stdout=open(out, "w"), stderr=open(err, "w"),
                         stdin=subprocess.DEVNULL)
    t0 = time.time()
    while time.time() - t0 < timeout:
        m = READY_RE.search(open(out).read())
        if m:
            return p, int(m.group(1)), err
        if p.poll() is not None:
            return p, None, err
        time.sleep(0.05)
    p.kill()
    return p, None, err


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()


def get(port, path):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


# ---- 1. the layout ------------------------------------------------------------------
t = installed.install_tree()
for rel in ("index.html", "chat.html", "monitor.js", "chat.js", "common.js", "style.css",
            "vendor/uplot/uPlot.iife.min.js", "vendor/uplot/uPlot.min.css", "vendor/uplot/LICENSE"):
    check(os.path.isfile(os.path.join(t["web"], rel)), "installed share/specd/web/" + rel)
unit = open(t["unit"]).read()
check("@" + "BINDIR@" not in unit and "ExecStart=%s/bin/specd serve" % t["prefix"] in unit,
      "the installed unit starts %s/bin/specd" % t["prefix"])
check("--web-root" not in unit and " -c " not in unit, "the unit needs no --web-root and no -c (the binary finds both)")
check(open(t["config"]).read() == open(os.path.join(SRC, "config.yaml")).read(), "share/specd/config.yaml is the shipped one")
index = open(os.path.join(SRC, "web", "index.html"), "rb").read()
uplot = open(os.path.join(SRC, "web", "vendor", "uplot", "uPlot.iife.min.js"), "rb").read()
check(b"/vendor/uplot/uPlot.iife.min.js" in index, "the monitor page loads /vendor/uplot/uPlot.iife.min.js")

# ---- 2. from / with no config ---------------------------------------------------------
# telemetry's default path is relative (specd-telemetry.db in the working directory)
if not os.access("/", os.W_OK):
    print("SKIP part 2: / is not writable here (telemetry writes specd-telemetry.db into the working directory)")
else:
    made = [f for f in ("/specd-telemetry.db", "/specd-telemetry.db-wal", "/specd-telemetry.db-shm",
                        "/specd-telemetry.db.lock") if not os.path.exists(f)]
    for name, binary, web in (("installed", t["specd"], t["web"]), ("build tree", SPECD, os.path.join(SRC, "web"))):
        p, port, err = serve(binary, "/")
        log = open(err).read()
        check(port is not None, "%s specd serve starts from / with no config %s" % (name, "" if port else log[-800:]))
        if port is None:
            continue
        try:
            sys_path = re.search(r"no (\S+/specd/config\.yaml)\)", log)
            if sys_path and os.path.exists(sys_path.group(1)):
                print("note: %s exists on this host" % sys_path.group(1))
            check("no config file" in log and "built-in defaults" in log,
                  "%s: the start-up line says no config file was found: %r" % (name, log.splitlines()[:1]))
            check("web pages from %s" % os.path.realpath(web) in log,
                  "%s: the start-up line names the pages' folder %s" % (name, os.path.realpath(web)))
            st, body = get(port, "/")
            check(st == 200 and body == index, "%s: GET / serves the monitor page (%s)" % (name, st))
            st, body = get(port, "/chat.html")
            check(st == 200 and b"specd chat" in body, "%s: GET /chat.html (%s)" % (name, st))
            st, body = get(port, "/vendor/uplot/uPlot.iife.min.js")
            check(st == 200 and body == uplot, "%s: GET /vendor/uplot/uPlot.iife.min.js serves uPlot (%s, %d bytes)"
                  % (name, st, len(body)))
            st, body = get(port, "/vendor/uplot/uPlot.min.css")
            check(st == 200 and b".uplot" in body, "%s: GET /vendor/uplot/uPlot.min.css (%s)" % (name, st))
            st, _ = get(port, "/vendor/uplot/../../config.yaml")
            check(st in (403, 404), "%s: nothing outside the pages is served (%s)" % (name, st))
        finally:
            stop(p)
    for f in made:
        if os.path.exists(f):
            os.remove(f)

# ---- 3. the lookup order ---------------------------------------------------------------
tmp = tempfile.mkdtemp(prefix="specd-install-cfg-")
cfg = "telemetry:\n  enabled: false\nmodels:\n  alias: %s\n"
for n in ("cwd", "env", "flag"):
    open(os.path.join(tmp, n + ".yaml"), "w").write(cfg % n + ("server:\n  max_tokens_default: 3\n" if n == "flag" else ""))
os.rename(os.path.join(tmp, "cwd.yaml"), os.path.join(tmp, "config.yaml"))
env_cfg = dict(env_without_config(), SPECD_CONFIG=os.path.join(tmp, "env.yaml"))
cases = [
    ("./config.yaml", (), None, "config config.yaml (from the working directory)"),
    ("$SPECD_CONFIG over ./config.yaml", (), env_cfg, "config %s (from $SPECD_CONFIG)" % os.path.join(tmp, "env.yaml")),
    ("-c over $SPECD_CONFIG", ("-c", os.path.join(tmp, "flag.yaml")), env_cfg,
     "config %s (from -c)" % os.path.join(tmp, "flag.yaml")),
]
def complete(port):
    """A completion without max_tokens: (prompt tokens, completion tokens, finish reason)."""
    rq = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, method="POST",
                                data=json.dumps({"prompt": "Once upon a time", "temperature": 0}).encode(),
                                headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(rq, timeout=60) as r:
        d = json.loads(r.read())
    return d["usage"]["prompt_tokens"], d["usage"]["completion_tokens"], d["choices"][0]["finish_reason"]


for name, args, env, want in cases:
    p, port, err = serve(t["specd"], tmp, list(args) + ["--ctx", "64"], env)
    log = open(err).read()
    check(port is not None and want in log, "%s: start-up line %r %s" % (name, want, "" if want in log else log[-600:]))
    if port is not None:
        # the file really was read: the alias it names is a model name the server answers to
        st, body = get(port, "/v1/models")
        alias = {"./config.yaml": b"cwd", "$SPECD_CONFIG over ./config.yaml": b"env", "-c over $SPECD_CONFIG": b"flag"}
        check(st == 200 and alias[name] in body, "%s: /v1/models lists the alias from that file" % name)
        np_, nc, fin = complete(port)
        if name.startswith("-c"):
            check(nc == 3 and fin == "length", "no max_tokens, server.max_tokens_default 3: %d tokens (%s)" % (nc, fin))
        elif name.startswith("./"):
            check(np_ + nc >= 64 and fin == "length", "no max_tokens: to the end of the 64-token context (%d + %d, %s)"
                  % (np_, nc, fin))
        stop(p)
for name, args, env in (("-c missing", ("-c", "/nonexistent/specd.yaml"), None),
                        ("$SPECD_CONFIG missing", (), dict(env_without_config(), SPECD_CONFIG="/nonexistent/env.yaml"))):
    p, port, err = serve(t["specd"], tmp, args, env)
    if port is not None:
        stop(p)
    log = open(err).read()
    check(port is None and p.returncode == 2 and "/nonexistent/" in log, "%s: refused, naming the file (rc %s: %s)"
          % (name, p.returncode, log.strip()[-200:]))

installed.cleanup()
print("%d failures" % len(failures))
sys.exit(1 if failures else 0)
