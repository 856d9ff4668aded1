#!/usr/bin/python3
"""test_cli_help.py — the CLI's manners (issue 40 item 6): every subcommand's
--help prints its usage on stdout and exits 0; an unknown option exits 2 with
"did you mean '--x'?" for typos (swapped letters, a missing letter, one dash,
a longer spelling) and no guess for something far off; `generate` prints its
statistics on a line of their own; `specd telemetry` reads the database the
server writes (its config's telemetry.path, default specd-telemetry.db);
`specd bench --concurrency` runs with no prompt file given and no
$SPECD_MODELS (the prompts installed with specd)."""
import os, re, subprocess, sys, tempfile

SPECD = os.environ.get("SPECD")
MODELS = os.environ.get("SPECD_MODELS", "")
STORIES = os.path.join(MODELS, "stories260K.gguf")
if not SPECD:
    print("SKIP: SPECD not set")
    sys.exit(77)
failures = []


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg, flush=True)
    if not cond:
        failures.append(msg)


def run(args, cwd=None, env=None, timeout=120):
    return subprocess.run([SPECD] + args, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


# bench --kernels lives in cli/bench_kernels.c, which keeps its own usage (exit 2 on --help)
for cmd in (["serve"], ["generate"], ["verify"], ["bench"], ["bench", "--concurrency", "1"],
            ["bench", "--multi-turn", "2"], ["mkmodel"], ["tokenize"], ["detokenize"], ["telemetry"], ["pull"],
            ["models"], ["gguf-split"], ["train-medusa"], ["eval"], ["distill-draft"], ["train"], ["train-tokenizer"]):
    for h in ("--help", "-h"):
        p = run(cmd + [h])
        check(p.returncode == 0 and "usage" in p.stdout.lower(), "specd %s %s: exit %d, usage on stdout"
              % (" ".join(cmd), h, p.returncode))
p = run(["--help"])
check(p.returncode == 0 and "commands:" in p.stdout, "specd --help: exit 0")
for typo, want in (("serv", "serve"), ("genrate", "generate"), ("telemetyr", "telemetry")):
    p = run([typo])
    check(p.returncode == 2 and "did you mean '%s'?" % want in p.stderr, "specd %s: suggests %s" % (typo, want))
p = run(["xyzzy"])
check(p.returncode == 2 and "did you mean" not in p.stderr, "specd xyzzy: no guess")

typos = [
    (["serve", "--prot", "1"], "--port"),            # swapped letters
    (["serve", "--webroot", "x"], "--web-root"),     # a missing dash inside
    (["generate", "--temperature", "1"], "--temp"),  # a longer spelling
    (["generate", "-temp", "1"], "--temp"),          # one dash
    (["generate", "--drft", "x"], "--draft"),        # a missing letter
    (["verify", "--samlpes", "3"], "--samples"),
    (["bench", "--thread", "2"], "--threads"),
    (["bench", "--concurrency", "1", "--promts", "x"], "--prompts"),
    (["gguf-split", "--splt"], "--split"),
    (["pull", "--ofline", "x"], "--offline"),
    (["models", "--jsn"], "--json"),
    (["tokenize", "--peices"], "--pieces"),
    (["telemetry", "--dbb", "x"], "--db"),
    (["train-medusa", "--corpse", "x"], "--corpus"),
    (["eval", "--tokns", "1"], "--tokens"),
    (["train", "--corpsu", "x"], "--corpus"),
    (["distill-draft", "--setps", "3"], "--steps"),
]
for args, want in typos:
    p = run(args)
    check(p.returncode == 2 and "did you mean '%s'?" % want in p.stderr,
          "specd %s: exit %d, suggests %s (%s)" % (" ".join(args), p.returncode, want, p.stderr.strip().splitlines()[:1]))
for args in (["serve", "--xyzzy"], ["generate", "-q"], ["generate", "stray"]):
    p = run(args)
    check(p.returncode == 2 and "did you mean" not in p.stderr and "--help" in p.stderr,
          "specd %s: exit 2, no guess, points to --help (%s)" % (" ".join(args), p.stderr.strip().splitlines()[:1]))

if os.path.exists(STORIES):
    # the statistics start a line of their own after the text, also with both streams in one pipe
    p = subprocess.run([SPECD, "generate", "-m", STORIES, "-p", "Once", "-n", "12", "--temp", "0"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    lines = p.stdout.splitlines()
    stat = [i for i, l in enumerate(lines) if re.search(r"(plain|speculative): prompt tokens", l)]
    check(p.returncode == 0 and stat and lines[stat[0]].startswith(("plain:", "speculative:")) and stat[0] >= 1,
          "generate: statistics on their own line after the text: %r" % lines[:3])

    # specd bench --concurrency without --prompts and without $SPECD_MODELS: the installed prompts
    env = dict(os.environ)
    env.pop("SPECD_MODELS", None)
    p = run(["bench", "--concurrency", "1", "-m", STORIES, "-n", "4", "-t", "1"], env=env, timeout=300)
    check(p.returncode == 0 and "prompts.txt" in p.stdout + p.stderr,
          "bench --concurrency with no prompt file: runs on the prompts installed with specd (exit %d) %s"
          % (p.returncode, (p.stdout + p.stderr)[-300:] if p.returncode else ""))
else:
    print("SKIP generate/bench checks: %s missing" % STORIES)

# specd telemetry reads what serve writes: the config's telemetry.path, else specd-telemetry.db
tmp = tempfile.mkdtemp(prefix="specd-cli-help-")
env = dict(os.environ)
env.pop("SPECD_CONFIG", None)
p = run(["telemetry", "summary"], cwd=tmp, env=env)
check(p.returncode == 1 and "specd-telemetry.db" in p.stderr, "telemetry with no config looks for specd-telemetry.db: %s"
      % p.stderr.strip())
open(os.path.join(tmp, "config.yaml"), "w").write("telemetry:\n  path: elsewhere.db\n")
p = run(["telemetry", "summary"], cwd=tmp, env=env)
check(p.returncode == 1 and "elsewhere.db" in p.stderr, "telemetry reads the config's telemetry.path: %s" % p.stderr.strip())
if os.path.exists(STORIES):
    # a real database the server wrote, found with no --db
    import shutil
    db = os.path.join(tmp, "elsewhere.db")
    srv = subprocess.Popen([SPECD, "serve", "-m", STORIES, "--port", "0", "-t", "1"], cwd=tmp, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = srv.stdout.readline()
    srv.terminate()
    srv.wait(30)
    p = run(["telemetry", "sessions"], cwd=tmp, env=env)
    check(os.path.exists(db) and p.returncode == 0, "telemetry finds the database serve wrote (%s): exit %d %s"
          % (line.strip()[:60], p.returncode, p.stderr.strip()))
    shutil.rmtree(tmp, ignore_errors=True)

print("%d failures" % len(failures))
sys.exit(1 if failures else 0)
