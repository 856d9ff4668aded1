"""test_train_eagle_cli.py — `specd train-eagle` end to end on stories260K:
- a short run on the target's continuations of corpus sentences writes a
  head whose held-out top-1 (first draft) beats the unigram baseline by a
  wide margin, with a progress line (loss, per-step accuracy, positions/s,
  ETA) on stderr;
- the head serves: greedy `generate --eagle` output equals `--no-spec`
  output on held-out prompts (tinystories_sample_cs336.txt), chains and a
  tree, with a real share of its drafts accepted; `--method auto` with the
  head loaded takes it (its steps counted under "eagle") and still equals
  plain;
- a head trained with --shared-output (the target's output head, frozen,
  left out of the file) is smaller, learns, and serves losslessly; its data
  alternates greedy and T = 0.8 continuations (--gen-temp 0,0.8), and a bad
  temperature list is refused;
- Ctrl-C during training still writes a measured head that loads;
- truncated and byte-flipped copies of the head are refused at load with an
  error, never a crash.

Env: SPECD (binary), SPECD_MODELS (shared models dir). Exit 77 = skipped.
"""
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

SPECD = os.environ.get("SPECD")
MODELS = os.environ.get("SPECD_MODELS")


def fail(msg, out=""):
    sys.stderr.write(out)
    raise SystemExit("FAIL: " + msg)


def run(args, expect_ok=True, timeout=300):
    p = subprocess.run([SPECD, *args], capture_output=True, text=True, timeout=timeout)
    if expect_ok and p.returncode != 0:
        fail(f"specd {' '.join(args)}: exit {p.returncode}", p.stdout + p.stderr)
    return p


def summary(out):
    m = re.search(r"^summary (.*)$", out, re.M)
    if not m:
        fail("no summary line", out)
    return {k: float(v) for k, v in (kv.split("=") for kv in m.group(1).split())}


def gen(target, prompt, extra):
    p = run(["generate", "-m", target, "-p", prompt, "-n", "48", "--temp", "0", "--json", "-t", "1", *extra])
    return json.loads(p.stdout)


def main():
    if not SPECD or not MODELS:
        print("SKIP: SPECD / SPECD_MODELS not set")
        return 77
    target = os.path.join(MODELS, "stories260K.gguf")
    corpus = os.path.join(MODELS, "corpora", "tinystories_valid_30K.txt")
    held = os.path.join(MODELS, "corpora", "tinystories_sample_cs336.txt")
    if not all(os.path.exists(p) for p in (target, corpus, held)):
        print("SKIP: stories260K or its corpora missing")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        head = os.path.join(tmp, "head.gguf")
        p = run(["train-eagle", "-m", target, "-o", head, "--corpus", corpus, "--prompts", "600", "--gen-len", "64",
                 "--epochs", "2", "--ttt", "3", "--lr", "3e-3", "-t", "2"])
        s = summary(p.stdout)
        print(p.stdout.strip())
        if not re.search(r"step \d+/\d+ loss [\d.]+ acc [\d.]+/[\d.]+/[\d.]+ \d+ positions/s ETA", p.stderr):
            fail("no progress line with loss, per-step accuracy, positions/s and ETA", p.stderr)
        if not (s["acc0"] > 3 * s["unigram"] and s["acc0"] > 0.3):
            fail(f"held-out first-draft top-1 {s['acc0']:.3f} against unigram {s['unigram']:.3f}")

        # the head serves, losslessly, with real acceptance
        prompts = []
        for line in open(held, encoding="utf-8"):
            words = line.split()
            if len(words) > 12:
                prompts.append(" ".join(words[:8]))
            if len(prompts) == 4:
                break
        drafted = accepted = 0
        for pr in prompts:
            plain = gen(target, pr, ["--no-spec"])
            for extra in (["--eagle", head, "--method", "eagle", "--gamma", "3"],
                          ["--eagle", head, "--method", "eagle", "--tree", "8/4/2"],
                          ["--eagle", head, "--method", "auto"]):
                g = gen(target, pr, extra)
                if g["tokens"] != plain["tokens"]:
                    fail(f"{' '.join(extra[2:])} on {pr!r}: output differs from plain")
                ea = g["by_method"]["eagle"]
                if ea["verify_steps"] == 0:
                    fail(f"{' '.join(extra[2:])} on {pr!r}: no step counted under eagle", json.dumps(g))
                if extra[-1] == "3":
                    drafted += ea["drafted"]
                    accepted += ea["accepted"]
        alpha = accepted / max(drafted, 1)
        print(f"held-out prompts: chains of 3 accepted {accepted}/{drafted} = {alpha:.2f}; trees and auto equal plain")
        if alpha < 0.25:
            fail(f"the trained head's drafts are accepted only {alpha:.2f} of the time on held-out prompts")

        # a head that shares the target's output head: smaller file, still serves losslessly
        head3 = os.path.join(tmp, "head3.gguf")
        p = run(["train-eagle", "-m", target, "-o", head3, "--corpus", corpus, "--prompts", "300", "--gen-len", "48",
                 "--epochs", "2", "--ttt", "2", "--lr", "3e-3", "--shared-output", "-t", "2", "--gen-temp", "0,0.8"])
        s3 = summary(p.stdout)
        if "at temperature 0/0.8 by turns" not in p.stderr:
            fail("--gen-temp 0,0.8: the continuations' temperatures are not reported", p.stderr)
        for bad in ("0,x", "0,9", "0,,1", "1,2,3,4,5,6,7,8,9"):
            b = run(["train-eagle", "-m", target, "-o", head3 + ".bad", "--gen-temp", bad], expect_ok=False)
            if b.returncode == 0 or "--gen-temp" not in b.stderr or os.path.exists(head3 + ".bad"):
                fail(f"--gen-temp {bad}: not refused with a message", b.stderr)
        if s3["acc0"] < 2 * s3["unigram"] or os.path.getsize(head3) >= os.path.getsize(head):
            fail(f"shared output head: top-1 {s3['acc0']:.3f} (unigram {s3['unigram']:.3f}), "
                 f"{os.path.getsize(head3)} bytes against {os.path.getsize(head)}", p.stdout)
        pr = prompts[0]
        if gen(target, pr, ["--eagle", head3, "--method", "eagle"])["tokens"] != gen(target, pr, ["--no-spec"])["tokens"]:
            fail("the shared-output head's greedy output differs from plain")
        print(f"shared output head: top-1 {s3['acc0']:.3f}, {os.path.getsize(head3)} bytes, greedy = plain")

        # Ctrl-C during training: a measured head is still written
        head2 = os.path.join(tmp, "head2.gguf")
        proc = subprocess.Popen([SPECD, "train-eagle", "-m", target, "-o", head2, "--corpus", corpus, "--prompts",
                                 "300", "--gen-len", "48", "--epochs", "1000", "-t", "1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        err = ""
        t0 = time.time()
        while time.time() - t0 < 120:
            line = proc.stderr.readline()
            if not line:
                break
            err += line
            if re.search(r"step \d+/", line):
                proc.send_signal(signal.SIGINT)
                break
        out, rest = proc.communicate(timeout=120)
        if proc.returncode != 0 or "interrupted after" not in out or not os.path.exists(head2):
            fail(f"Ctrl-C: exit {proc.returncode}, no interrupted head", out + err + rest)
        run(["generate", "-m", target, "--eagle", head2, "-p", "Once upon a time", "-n", "8", "--temp", "0"])
        print("Ctrl-C: interrupted run wrote a head that loads")

        # truncated and corrupt copies: refused, never a crash
        data = open(head, "rb").read()
        rnd = random.Random(7)
        cases = [("truncated", data[:n]) for n in (0, 16, 200, len(data) // 3, len(data) - 7)]
        for k in range(6):
            b = bytearray(data)
            for _ in range(8):
                b[rnd.randrange(0, min(len(b), 4096))] ^= 1 << rnd.randrange(8)
            cases.append((f"flipped {k}", bytes(b)))
        refused = 0
        for name, blob in cases:
            path = os.path.join(tmp, "bad.gguf")
            open(path, "wb").write(blob)
            p = run(["generate", "-m", target, "--eagle", path, "-p", "Once", "-n", "4", "--temp", "0"],
                    expect_ok=False, timeout=60)
            if p.returncode < 0:
                fail(f"{name} head: specd died of signal {-p.returncode}", p.stderr)
            if p.returncode != 0:
                if not p.stderr.strip():
                    fail(f"{name} head: refused without a message")
                refused += 1
        print(f"corrupt heads: {refused} of {len(cases)} refused with a message, none crashed")
        if refused < 5:
            fail("the truncated heads were not all refused")
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
