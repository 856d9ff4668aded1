# test_config_cli.py — config errors through the real CLI: `specd serve -c
# FILE` on broken copies of the shipped config.yaml exits 2 before binding
# anything and prints "specd serve: FILE:LINE:COL: message" (unknown keys with
# a did-you-mean, wrong types, γ bounds, duplicate rules, missing model files,
# YAML syntax); the environment overrides SPECD_PORT (the ready line names
# it), SPECD_MODEL (a missing file is named with the variable) and
# SPECD_ADMIN_TOKEN (it is the bearer token /admin/reload wants).
import os
import subprocess
import tempfile

from pe2e import check, env_paths, free_port, main, make_config, Server, set_key, tmpdir, with_server, \
    write_file


def position(text, marker, value=False):
    """(line, col), 1-based, where marker starts in text (at its value after ': ' when value)."""
    i = text.index(marker)
    if value:
        i += marker.index(": ") + 2
    return text.count("\n", 0, i) + 1, i - (text.rfind("\n", 0, i) + 1) + 1


def broken_files(base):
    """(name, text, line, col, message) for each broken copy of the shipped file."""
    out = []
    t = base.replace("  port: 8080", "  prot: 8080", 1)
    out.append(("unknown_key", t) + position(t, "prot: 8080") +
               ("unknown key 'server.prot'; did you mean 'port'?",))
    t = base.replace("\nspeculation:", "\nspeculaton:", 1)
    out.append(("unknown_section", t) + position(t, "speculaton:") +
               ("unknown section 'speculaton'; did you mean 'speculation'?",))
    t = set_key(base, "server", "port", "eighty")
    out.append(("wrong_type_int", t) + position(t, "port: eighty", True) +
               ("server.port: expected an integer, got 'eighty'",))
    t = set_key(base, "speculation", "adaptive", "maybe")
    out.append(("wrong_type_bool", t) + position(t, "adaptive: maybe", True) +
               ("speculation.adaptive: expected true or false, got 'maybe'",))
    t = base.replace("      gamma_min: 2\n      gamma_max: 6\n", "      gamma_min: 7\n      gamma_max: 6\n", 1)
    check(t != base, "the shipped chat rule is not gamma_min 2 / gamma_max 6 any more; update this test")
    out.append(("gamma_min_gt_max", t) + position(t, "gamma_min: 7", True) +
               ("policy.rules[2]: gamma_min 7 > gamma_max 6",))
    t = base.replace("      content_type: structured", "      content_type: code", 1)
    second = 'model: "*"\n      content_type: code\n      gamma_min: 3\n      gamma_max: 12'  # the rule's mapping
    out.append(("duplicate_rule", t) + position(t, second) +
               ("policy.rules[1]: duplicate rule for model '*' content_type 'code' (first at line ",))
    t = set_key(base, "models", "draft", '"/nonexistent/draft.gguf"')
    out.append(("missing_model", t) + position(t, '"/nonexistent/draft.gguf"') +
               ("models.draft: cannot read model file '/nonexistent/draft.gguf'",))
    t = set_key(base, "server", "allowed_origins", "[a, b")
    # libyaml notices the unclosed list at the next token: the following key
    out.append(("yaml_syntax", t) + position(t, "allowed_hosts:") + ("did not find expected ',' or ']'",))
    return out


def run_serve(args, env=None, timeout=30):
    specd = env_paths()[0]
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([specd, "serve"] + args, capture_output=True, text=True, timeout=timeout, env=e,
                          stdin=subprocess.DEVNULL, cwd=tempfile.gettempdir())


def run():
    d = tmpdir("specd-pe2e-cfg-")
    base, _ = make_config(d)
    for name, text, line, col, msg in broken_files(base):
        path = os.path.join(d, name + ".yaml")
        write_file(path, text)
        r = run_serve(["-c", path, "--port", "0"])
        want = "specd serve: %s:%d:%d: %s" % (path, line, col, msg)
        check(r.returncode == 2, "%s: exit %d, expected 2; stderr: %r" % (name, r.returncode, r.stderr))
        check(r.stderr.startswith(want), "%s: stderr %r, expected it to start with %r" % (name, r.stderr, want))
        check("serving on" not in r.stdout, "%s: the server started anyway" % name)

    # a file without settings (an editor mid-write) is refused, not taken as all defaults
    for name, text in (("empty", ""), ("blank", "\n   \n"), ("comments", "# server:\n#   port: 1\n")):
        path = os.path.join(d, name + ".yaml")
        write_file(path, text)
        r = run_serve(["-c", path, "--port", "0"])
        check(r.returncode == 2 and "holds no settings" in r.stderr and "write {}" in r.stderr,
              "%s config: exit %d, stderr %r" % (name, r.returncode, r.stderr))
    path = os.path.join(d, "braces.yaml")
    write_file(path, "{}\n")
    srv = Server(d, path, port=0).start()
    with_server(srv, lambda: check(srv.stop() == 0, "'{}' config: bad exit"))

    ok = os.path.join(d, "config.yaml")
    write_file(ok, base)
    # a bad override is an error that names the variable
    r = run_serve(["-c", ok], env={"SPECD_PORT": "http"})
    check(r.returncode == 2 and "SPECD_PORT (environment, for server.port): expected an integer, got 'http'"
          in r.stderr, "SPECD_PORT=http: exit %d, stderr %r" % (r.returncode, r.stderr))
    r = run_serve(["-c", ok, "--port", "0"], env={"SPECD_MODEL": "/nonexistent/target.gguf"})
    check(r.returncode == 2 and "SPECD_MODEL" in r.stderr and "/nonexistent/target.gguf" in r.stderr,
          "SPECD_MODEL=/nonexistent/target.gguf: exit %d, stderr %r" % (r.returncode, r.stderr))

    # SPECD_PORT replaces server.port (8080 in the file); the admin token comes from the environment
    port = free_port()
    srv = Server(d, ok, port=None, env={"SPECD_PORT": str(port), "SPECD_ADMIN_TOKEN": "tok-from-env"}).start()

    def body():
        check(srv.port == port, "SPECD_PORT=%d but the server is on port %d" % (port, srv.port))
        st, j = srv.admin_reload("wrong-token")
        check(st == 401, "/admin/reload with a wrong token answered %d %r" % (st, j))
        st, j = srv.admin_reload("tok-from-env")
        check(st == 200 and j.get("ok") is True and j.get("version") == 2, "/admin/reload answered %d %r" % (st, j))
        # an emptied file on reload keeps the old policy (version 2) and says why
        write_file(ok, "")
        st, j = srv.admin_reload("tok-from-env")
        check(st == 422 and j.get("ok") is False and "holds no settings" in j.get("message", ""),
              "reload of an empty file answered %d %r" % (st, j))
        s = srv.stats("tok-from-env")
        check(s["policy"]["version"] == 2 and s["policy"]["last_reload_ok"] is False, "after the empty reload: %r"
              % s["policy"])
        write_file(ok, base)
        rc = srv.stop()
        check(rc == 0, "specd serve exited %r after SIGTERM" % rc)

    with_server(srv, body)
    print("%d broken files refused with file:line:col; SPECD_PORT, SPECD_MODEL, SPECD_ADMIN_TOKEN honoured"
          % len(broken_files(base)))


if __name__ == "__main__":
    main(run)
