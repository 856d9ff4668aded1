#!/usr/bin/python3
"""test_configs.py — the deploy/ recipes are valid: promtool checks the
Prometheus config and rules and runs the rules' unit tests; every PromQL
expression of the Grafana dashboard parses (checked as recording rules); every
specd metric the rules and dashboard name is one a running specd exports
(scraped from a real `specd serve`); the systemd unit passes systemd-analyze
verify; the nginx site passes nginx -t. Skips what is not installed."""
import json, os, re, shutil, subprocess, sys, tempfile

SRC = os.environ.get("SPECD_SRC", os.path.join(os.path.dirname(__file__), "../.."))
D = os.path.join(SRC, "deploy")
sys.path.insert(0, os.path.join(SRC, "tests", "gateway_e2e"))
import specd_e2e as E  # noqa: E402

skipped = []  # sections whose tool is missing
failures = []


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg, flush=True)
    if not cond:
        failures.append(msg)


def run(*a, **kw):
    return subprocess.run(list(a), capture_output=True, text=True, **kw)


tmp = tempfile.mkdtemp(prefix="specd-deploy-cfg-")
promtool = shutil.which("promtool")
dash = json.load(open(os.path.join(D, "grafana", "specd-dashboard.json")))
exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
check(len(dash["panels"]) >= 8 and all(p["targets"] for p in dash["panels"]), "dashboard: %d panels with queries"
      % len(dash["panels"]))
titles = " ".join(p["title"].lower() for p in dash["panels"])
for want in ("throughput", "acceptance", "position", "first token", "per output token", "kv", "fallback"):
    check(want in titles, "dashboard has a panel for %r" % want)

if promtool:
    r = run(promtool, "check", "config", os.path.join(D, "prometheus", "prometheus.yml"))
    check(r.returncode == 0, "promtool check config prometheus.yml " + (r.stdout + r.stderr).strip()[-200:])
    r = run(promtool, "check", "rules", os.path.join(D, "prometheus", "specd-rules.yml"))
    check(r.returncode == 0, "promtool check rules specd-rules.yml " + (r.stdout + r.stderr).strip()[-200:])
    r = run(promtool, "test", "rules", "specd-rules.test.yml", cwd=os.path.join(D, "prometheus"))
    check(r.returncode == 0, "promtool test rules specd-rules.test.yml " + (r.stdout + r.stderr).strip()[-400:])
    # the dashboard's queries, with the template variable filled in, as recording rules
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": "dashboard:q%d" % i, "expr": e.replace("$instance", ".*")} for i, e in enumerate(exprs)]}]}
    p = os.path.join(tmp, "dash-rules.yml")
    json.dump(rules, open(p, "w"))  # JSON is YAML
    r = run(promtool, "check", "rules", p)
    check(r.returncode == 0, "every dashboard query parses as PromQL " + (r.stdout + r.stderr).strip()[-300:])
    alerts = open(os.path.join(D, "prometheus", "specd-rules.yml")).read()
    for a in ("SpecdInstanceDown", "SpecdAcceptanceLow", "SpecdAcceptanceCollapse", "SpecdFallbackRateHigh",
              "SpecdKVExhausted", "SpecdTTFTp99OverSLO"):
        check("alert: " + a in alerts, "alert rule " + a)
else:
    print("SKIP promtool checks: promtool not installed (tests/deps.sh installs prometheus)")
    skipped.append("promtool")

# every specd:* name used must be exported by a real server
used = set(re.findall(r"specd:[a-z_0-9]+", open(os.path.join(D, "prometheus", "specd-rules.yml")).read()))
used |= {m for e in exprs for m in re.findall(r"specd:[a-z_0-9]+", e)}
with E.Server() as srv:
    st, _, body = srv.http("GET", "/metrics")
    body = body.decode()
    exported = set(re.findall(r"^(specd:[a-z_0-9]+)", body, re.M))
    exported |= set(re.findall(r"^# TYPE (specd:[a-z_0-9]+)", body, re.M))  # families without samples yet
    exported |= {n[: -len(s)] for n in exported for s in ("_bucket", "_sum", "_count") if n.endswith(s)}
    missing = sorted(u for u in used if u not in exported and not any(u == x + s for x in exported
                                                                       for s in ("_bucket", "_sum", "_count")))
    check(not missing, "every metric the rules/dashboard use is exported (%d used)%s" % (
        len(used), ": missing " + ", ".join(missing) if missing else ""))

# the unit as `meson install` writes it (deploy/systemd/specd@.service.in with this prefix's paths)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import installed  # noqa: E402
inst = installed.install_tree()
installed_unit = open(inst["unit"]).read()
sa = shutil.which("systemd-analyze")
if sa:
    unit = installed_unit.replace(inst["prefix"] + "/bin/specd", inst["specd"])
    up = os.path.join(tmp, "specd@8081.service")
    open(up, "w").write(unit)
    r = run(sa, "verify", up)
    out = (r.stdout + r.stderr).strip()
    check(r.returncode == 0 and "specd@8081" not in out, "systemd-analyze verify specd@.service " + out[-300:])
    for k in ("DynamicUser=yes", "ProtectSystem=strict", "NoNewPrivileges=yes", "ReadWritePaths=", "ExecReload=/bin/kill -HUP",
              "KillSignal=SIGTERM", "TimeoutStopSec="):
        check(k in unit, "unit sets " + k)
else:
    print("SKIP systemd-analyze: not installed")
    skipped.append("systemd-analyze")

# per-instance data (issue 44 item 5): each instance runs in its own state
# directory, where the relative default telemetry.path lands
unit = installed_unit
wd = re.findall(r"^WorkingDirectory=(\S+)$", unit, re.M)
sd = " ".join(re.findall(r"^StateDirectory=(.+)$", unit, re.M)).split()
check(len(wd) == 1 and "%i" in wd[0] and any(wd[0].rstrip("/") == "/var/lib/" + d.strip("/") for d in sd),
      "each instance works in its own state directory (WorkingDirectory %r, StateDirectory %r)" % (wd, sd))
tel = re.search(r"^telemetry:\n(?:[ #].*\n|\n)*?  path: *(\S+)", open(os.path.join(SRC, "config.yaml")).read(), re.M)
check(tel and not tel.group(1).strip("\"'").startswith("/"),
      "the shipped config.yaml's telemetry.path is relative (per instance under the unit): %r" % (tel and tel.group(1)))

# the two dependency lists (issue 40 item 5): building and serving need no test tool, and the
# test list builds on the serving one
def pkgs(path):
    text = open(os.path.join(SRC, path)).read()
    m = re.search(r"^pkgs=\((.*?)\)", text, re.S | re.M)
    return set(m.group(1).split()) if m else set(), text


serve_pkgs, _ = pkgs("deploy/deps.sh")
test_pkgs, test_text = pkgs("tests/deps.sh")
tools = {"nginx", "prometheus", "chromium", "clang", "python3-scipy", "python3-numpy", "nodejs", "npm", "openssl"}
check(serve_pkgs and not serve_pkgs & tools, "deploy/deps.sh installs no test tool: %s" % sorted(serve_pkgs & tools))
check({"meson", "ninja-build", "libwebsockets-dev", "libjansson-dev", "libyaml-dev", "libsqlite3-dev",
       "libcurl4-openssl-dev"} <= serve_pkgs, "deploy/deps.sh has what the build needs: %s" % sorted(serve_pkgs))
check("deploy/deps.sh" in test_text and tools - {"npm"} <= test_pkgs, "tests/deps.sh runs deploy/deps.sh, then the test tools")

nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
if nginx:
    site = open(os.path.join(D, "nginx", "specd.conf")).read().replace("listen 80;", "listen 127.0.0.1:18080;")
    site = site.replace("listen [::]:80;", "")
    conf = os.path.join(tmp, "nginx.conf")
    open(os.path.join(tmp, "site.conf"), "w").write(site)
    open(conf, "w").write("pid %s/nginx.pid;\nerror_log %s/error.log;\nevents {}\nhttp {\n access_log off;\n"
                          " client_body_temp_path %s/body;\n proxy_temp_path %s/proxy;\n include %s/site.conf;\n}\n"
                          % ((tmp,) * 5))
    r = run(nginx, "-t", "-p", tmp, "-c", conf)
    check(r.returncode == 0, "nginx -t on deploy/nginx/specd.conf " + r.stderr.strip()[-300:])
else:
    print("SKIP nginx -t: nginx not installed")
    skipped.append("nginx")

shutil.rmtree(tmp, ignore_errors=True)
installed.cleanup()
print("%d failures" % len(failures))
if failures:
    sys.exit(1)
if skipped:  # a section not run is a reported skip, never a silent pass (issue 42)
    print("SKIP: sections not run for want of %s" % ", ".join(skipped))
    sys.exit(77)
sys.exit(0)
