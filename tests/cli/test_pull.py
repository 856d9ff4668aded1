#!/usr/bin/python3
"""test_pull.py — `specd pull`, `-hf`, `specd models` against a loopback
stand-in for the hub (hub_server.py): quant choice, explicit files, cache hits
without the network, offline mode, a dropped connection resumed with Range,
a killed download resumed by the next pull, a server that ignores Range, a
corrupted file refused by its SHA-256, a gated repo and HF_TOKEN, a split GGUF
merged and loaded as one, and generation through -hf equal to -m.
Prints the matrix it ran, one line per case."""
import hashlib, json, os, shutil, signal, subprocess, sys, tempfile, time, urllib.request

SPECD = os.environ["SPECD"]
MODELS = os.environ.get("SPECD_MODELS", os.path.join(os.path.dirname(__file__), "../../../shared/models"))
HERE = os.path.dirname(os.path.abspath(__file__))
STORIES = os.path.join(MODELS, "stories260K.gguf")
if not os.path.exists(STORIES):
    print("SKIP: no", STORIES)
    sys.exit(77)

tmp = tempfile.mkdtemp(prefix="specd-pull-")
root = os.path.join(tmp, "hub")
logf = os.path.join(tmp, "requests.log")
results = []


def sha(p):
    return hashlib.sha256(open(p, "rb").read()).hexdigest()


def put(repo, name, src=STORIES, data=None):
    d = os.path.join(root, repo, os.path.dirname(name))
    os.makedirs(d, exist_ok=True)
    dst = os.path.join(root, repo, name)
    if data is not None:
        open(dst, "wb").write(data)
    else:
        shutil.copy(src, dst)
    return dst


# repositories: several quants of one model, a big one for the kill test, a gated one, a split one
for q in ("Q4_K_M", "Q8_0", "F16", "Q4_K_S"):
    put("test-org/stories-GGUF", "stories260K-%s.gguf" % q)
put("test-org/stories-GGUF", "README.md", data=b"# not a model\n")
put("test-org/stories-GGUF", "mmproj-stories-Q8_0.gguf")
put("test-org/stories-GGUF", "sub/dir/stories-extra-BF16.gguf")
big = os.urandom(3 << 20)  # not a GGUF: the pull does not care, the kill test wants size
put("test-org/big-GGUF", "big-Q8_0.gguf", data=big)
put("test-org/gated-GGUF", "gated-Q8_0.gguf")
open(os.path.join(root, "test-org/gated-GGUF/.token"), "w").write("hf_secret123")
split_dir = os.path.join(root, "test-org/split-GGUF")
os.makedirs(split_dir)
r = subprocess.run([SPECD, "gguf-split", "--split", "3", STORIES, os.path.join(split_dir, "stories260K-Q8_0")],
                   capture_output=True, text=True)
assert r.returncode == 0, r.stderr
assert sorted(os.listdir(split_dir)) == ["stories260K-Q8_0-%05d-of-00003.gguf" % k for k in (1, 2, 3)]

server = subprocess.Popen(["/usr/bin/python3", os.path.join(HERE, "hub_server.py"), "--root", root, "--log", logf],
                          stdout=subprocess.PIPE, text=True)
port = int(server.stdout.readline())
endpoint = "http://127.0.0.1:%d" % port
cache = os.path.join(tmp, "cache")
env = dict(os.environ, HF_ENDPOINT=endpoint, SPECD_CACHE=cache)
env.pop("HF_TOKEN", None)
env.pop("HF_HUB_OFFLINE", None)
env.pop("SPECD_OFFLINE", None)
env["HOME"] = tmp  # no stray huggingface token file


def control(**kw):
    req = urllib.request.Request(endpoint + "/_control", data=json.dumps(kw).encode(), method="POST")
    urllib.request.urlopen(req).read()


def requests():
    if not os.path.exists(logf):
        return []
    return [json.loads(l) for l in open(logf)]


def clear_log():
    if os.path.exists(logf):
        os.unlink(logf)


def pull(*a, extra_env=None, check=True):
    e = dict(env, **(extra_env or {}))
    r = subprocess.run([SPECD, "pull", *a], capture_output=True, text=True, env=e, timeout=120)
    if check and r.returncode != 0:
        raise AssertionError("specd pull %s failed (%d): %s" % (a, r.returncode, r.stderr))
    return r


def case(name, ok, detail=""):
    results.append((name, ok, detail))
    print("%-58s %s %s" % (name, "ok" if ok else "FAIL", detail), flush=True)


try:
    repo_file = lambda repo, f: os.path.join(cache, repo, f)
    control(page_size=2)  # every listing comes in pages of 2, linked as the hub links them

    # 1. quant tag picks its file; the bytes and hash are the hub's
    clear_log()
    r = pull("test-org/stories-GGUF:Q8_0")
    p = r.stdout.strip()
    case("quant tag :Q8_0 picks stories260K-Q8_0.gguf", p == repo_file("test-org/stories-GGUF", "stories260K-Q8_0.gguf")
         and sha(p) == sha(STORIES), p)
    case("progress lines when stderr is not a tty", "100%" in r.stderr and "\r" not in r.stderr,
         r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "")

    # 2. no tag: Q4_K_M first (as llama.cpp), never the mmproj file
    p = pull("test-org/stories-GGUF").stdout.strip()
    case("no tag picks Q4_K_M", p.endswith("stories260K-Q4_K_M.gguf"), os.path.basename(p))
    p = pull("test-org/stories-GGUF", extra_env={"HF_HUB_OFFLINE": "1"}).stdout.strip()
    case("no tag offline: the file it resolved to online", p.endswith("stories260K-Q4_K_M.gguf"), os.path.basename(p))
    p = pull("test-org/stories-GGUF:q4_k_s").stdout.strip()
    case("tag match is case-insensitive (q4_k_s)", p.endswith("stories260K-Q4_K_S.gguf"), os.path.basename(p))

    # 3. explicit file in a subfolder
    p = pull("test-org/stories-GGUF/sub/dir/stories-extra-BF16.gguf").stdout.strip()
    case("explicit REPO/path/FILE.gguf", p == repo_file("test-org/stories-GGUF", "sub/dir/stories-extra-BF16.gguf"))

    # 4. a cached reference resolves without the network
    clear_log()
    p2 = pull("test-org/stories-GGUF:Q8_0").stdout.strip()
    case("cached pull makes no request", p2.endswith("stories260K-Q8_0.gguf") and requests() == [],
         "%d requests" % len(requests()))
    r = pull("test-org/stories-GGUF:Q8_0", extra_env={"HF_ENDPOINT": "http://127.0.0.1:9"})
    case("cached pull works with the hub unreachable", r.returncode == 0)

    # 5. offline and not cached
    r = pull("test-org/stories-GGUF:F16", extra_env={"HF_HUB_OFFLINE": "1"}, check=False)
    case("HF_HUB_OFFLINE=1 + not cached: clear error, exit 1", r.returncode == 1 and "offline" in r.stderr,
         r.stderr.strip()[:80])

    # 6. unknown tag / repo / bad reference
    r = pull("test-org/stories-GGUF:Q2_K", check=False)
    case("unknown quant: exit 1, lists the files", r.returncode == 1 and "stories260K-Q8_0.gguf" in r.stderr)
    r = pull("test-org/nope-GGUF", check=False)
    case("unknown repo: exit 1 (404)", r.returncode == 1 and "404" in r.stderr)
    r = pull("not-a-ref", check=False)
    r2 = pull("a/b/../../etc/passwd.gguf", check=False)
    case("malformed references: exit 2", r.returncode == 2 and r2.returncode == 2)

    # 7. the connection drops mid-file: the same pull resumes with Range
    clear_log()
    control(cut={"stories260K-F16.gguf": 400000})
    r = pull("test-org/stories-GGUF:F16")
    p = r.stdout.strip()
    ranges = [q["range"] for q in requests() if q["path"].startswith("/cdn/") and q["range"]]
    case("dropped connection resumes with a Range request", sha(p) == sha(STORIES) and ranges == ["bytes=400000-"],
         "ranges %s" % ranges)

    # 8. killed mid-download: .part stays, the next pull resumes it
    clear_log()
    control(throttle=600000)
    e = dict(env)
    proc = subprocess.Popen([SPECD, "pull", "test-org/big-GGUF:Q8_0"], env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    part = repo_file("test-org/big-GGUF", "big-Q8_0.gguf.part")
    t0 = time.time()
    while time.time() - t0 < 20 and (not os.path.exists(part) or os.path.getsize(part) < (1 << 20)):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    have = os.path.getsize(part)
    control(throttle=0)
    clear_log()
    r = pull("test-org/big-GGUF:Q8_0")
    p = r.stdout.strip()
    ranges = [q["range"] for q in requests() if q["path"].startswith("/cdn/")]
    ok = p.endswith("big-Q8_0.gguf") and sha(p) == hashlib.sha256(big).hexdigest() and not os.path.exists(part)
    case("killed download: the next pull resumes the .part", ok and len(ranges) == 1 and ranges[0] is not None
         and int(ranges[0][6:-1]) >= have - 65536 and int(ranges[0][6:-1]) > 0,
         "killed at %d bytes, resumed %s, 'resuming' in log: %s" % (have, ranges, "resuming" in r.stderr))

    # 9. a server that ignores Range: the partial file is restarted, not appended to
    os.unlink(p)
    control(throttle=800000)
    proc = subprocess.Popen([SPECD, "pull", "test-org/big-GGUF:Q8_0"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    t0 = time.time()
    while time.time() - t0 < 20 and (not os.path.exists(part) or os.path.getsize(part) < (1 << 20)):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    control(throttle=0, no_range=True)
    p = pull("test-org/big-GGUF:Q8_0").stdout.strip()
    control(no_range=False)
    case("server without Range support: restart from 0", sha(p) == hashlib.sha256(big).hexdigest())

    # 10. corrupted bytes: refused by SHA-256, nothing left in the cache
    control(corrupt=["stories260K-Q4_K_S.gguf"])
    shutil.rmtree(os.path.join(cache, "test-org/stories-GGUF"))
    r = pull("test-org/stories-GGUF:Q4_K_S", check=False)
    left = os.listdir(os.path.join(cache, "test-org/stories-GGUF"))
    case("corrupted download refused (SHA-256), no file kept", r.returncode == 1 and "SHA-256 mismatch" in r.stderr
         and left == [], "left: %s" % left)
    control(corrupt=[])
    r = pull("test-org/stories-GGUF:Q4_K_S", check=False)
    case("the same pull succeeds once the bytes are right", r.returncode == 0 and sha(r.stdout.strip()) == sha(STORIES))

    # 11. gated repo: 401 without a token, HF_TOKEN sent as a bearer token
    r = pull("test-org/gated-GGUF", check=False)
    case("gated repo without HF_TOKEN: exit 1, names HF_TOKEN", r.returncode == 1 and "HF_TOKEN" in r.stderr,
         r.stderr.strip()[:90])
    clear_log()
    r = pull("test-org/gated-GGUF", extra_env={"HF_TOKEN": "hf_secret123"})
    auths = {q["auth"] for q in requests() if not q["path"].startswith("/cdn/")}
    case("gated repo with HF_TOKEN", r.returncode == 0 and auths == {"Bearer hf_secret123"})
    hf_home = os.path.join(tmp, "hfhome")
    os.makedirs(hf_home)
    open(os.path.join(hf_home, "token"), "w").write("hf_secret123\n")
    shutil.rmtree(os.path.join(cache, "test-org/gated-GGUF"))
    r = pull("test-org/gated-GGUF", extra_env={"HF_HOME": hf_home})
    case("token file ($HF_HOME/token) used without HF_TOKEN", r.returncode == 0)

    # 12. split GGUF: three parts fetched, merged into one file that loads
    r = pull("test-org/split-GGUF:Q8_0")
    p = r.stdout.strip()
    parts_left = os.listdir(os.path.join(cache, "test-org/split-GGUF/.parts")) if os.path.isdir(
        os.path.join(cache, "test-org/split-GGUF/.parts")) else []
    case("split GGUF: 3 parts fetched and merged", p.endswith("stories260K-Q8_0.gguf") and parts_left == []
         and r.stderr.count("part ") >= 3, os.path.basename(p))
    gen = lambda *a: subprocess.run([SPECD, "generate", *a, "-p", "Once upon a time", "-n", "24", "--temp", "0",
                                     "--quiet", "--json"], capture_output=True, text=True, env=env, timeout=120)
    g_direct = gen("-m", STORIES)
    g_split = gen("-hf", "test-org/split-GGUF:Q8_0")
    td, ts = json.loads(g_direct.stdout)["tokens"], json.loads(g_split.stdout)["tokens"] if g_split.returncode == 0 else None
    case("merged split model generates the same tokens as the original", td == ts, g_split.stderr.strip()[-100:])

    # 13. -hf / --hf-draft on generate (and the cached draft resolves offline)
    g = gen("-hf", "test-org/stories-GGUF:Q8_0", "--hf-draft", "test-org/stories-GGUF:F16")
    out = json.loads(g.stdout) if g.returncode == 0 else {}
    case("generate -hf T --hf-draft D equals generate -m", out.get("tokens") == td and "speculation" in out,
         g.stderr.strip()[-100:])

    # -hf on bench (the engine bench, one stream, a few tokens)
    r = subprocess.run([SPECD, "bench", "--concurrency", "1", "-hf", "test-org/stories-GGUF:Q8_0", "--hf-draft",
                        "test-org/stories-GGUF:F16", "-n", "8", "--prompt-tokens", "4", "-t", "1"],
                       capture_output=True, text=True, env=dict(env, HF_HUB_OFFLINE="1"), timeout=300)
    case("bench -hf / --hf-draft resolve from the cache (offline)", r.returncode == 0 and
         "stories260K-Q8_0.gguf" in r.stderr and "stories260K-F16.gguf" in r.stderr, (r.stderr + r.stdout).strip()[-120:])

    # a progress bar on a terminal (under script(1)'s pty): \r-updated, with rate and ETA
    if shutil.which("script"):
        r = subprocess.run(["script", "-qec", "%s pull test-org/stories-GGUF/sub/dir/stories-extra-BF16.gguf --refresh"
                            % SPECD, "/dev/null"], capture_output=True, env=dict(env, SPECD_CACHE=tmp + "/c2"),
                           timeout=60)
        r.stdout = r.stdout.decode(errors="replace")  # bytes: text mode would turn \r into \n
        case("progress bar on a tty: \\r updates, rate, ETA", r.returncode == 0 and "\r" in r.stdout and "ETA" in r.stdout
             and "[####" in r.stdout and "/s" in r.stdout, repr(r.stdout[-100:]))
    clear_log()
    pull("test-org/stories-GGUF:F16", "--refresh")
    pages = [q for q in requests() if q["path"].startswith("/api/")]
    case("a paged listing (Link: rel=next) is read to the end", len(pages) >= 4, "%d pages" % len(pages))

    # 14. specd models: what the cache holds, read from the GGUF headers
    r = subprocess.run([SPECD, "models", "--json"], capture_output=True, text=True, env=env)
    ms = json.loads(r.stdout)["models"]
    refs = {m["ref"]: m for m in ms}
    m = refs.get("test-org/stories-GGUF/stories260K-Q8_0.gguf", {})
    case("specd models --json lists architecture/quant/tokenizer",
         m.get("architecture") == "llama" and m.get("tokenizer") == "llama" and m.get("vocab") == 512
         and "test-org/split-GGUF/stories260K-Q8_0.gguf" in refs and "error" in refs.get(
             "test-org/big-GGUF/big-Q8_0.gguf", {}), "%d models; Q8_0: %s" % (len(ms), m))
    r = subprocess.run([SPECD, "models"], capture_output=True, text=True, env=env)
    case("specd models table", r.returncode == 0 and "test-org/stories-GGUF/stories260K-Q8_0.gguf" in r.stdout
         and "llama" in r.stdout)
    r = subprocess.run([SPECD, "models"], capture_output=True, text=True, env=dict(env, SPECD_CACHE=tmp + "/empty"))
    case("specd models on an empty cache says how to pull", "specd pull" in r.stdout)
finally:
    server.terminate()
    server.wait()

failed = [n for n, ok, _ in results if not ok]
print("\npull matrix: %d cases, %d passed, %d failed" % (len(results), len(results) - len(failed), len(failed)))
if not failed:
    shutil.rmtree(tmp, ignore_errors=True)
else:
    print("kept", tmp)
sys.exit(1 if failed else 0)
