#!/usr/bin/env python3
"""test_distill_draft.py — `specd distill-draft` on stories260K (issue 38):
the draft it writes carries the target's tokenizer (same hash; specd pairs it
with the target as --draft and greedy speculation gives plain decoding's
tokens), its held-out greedy acceptance beats the random-init draft of the
same shape by a margin, a run stopped at a checkpoint and resumed writes the
same file as the uninterrupted run, and bad flags get clear errors."""
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

SPECD = os.environ.get("SPECD", "build/cli/specd")
MODELS = os.environ.get("SPECD_MODELS", "../shared/models")
TARGET = os.path.join(MODELS, "stories260K.gguf")
MARGIN = 0.15  # trained greedy acceptance must beat random init by this much

fails = 0


def check(cond, msg):
    global fails
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        fails += 1


def run(args, expect_rc=0):
    p = subprocess.run([SPECD] + args, capture_output=True, text=True, timeout=240)
    if p.returncode != expect_rc:
        print(p.stdout, p.stderr)
    return p


def summary(out):
    m = re.search(r"^summary (.*)$", out, re.M)
    return {k: float(v) for k, v in (kv.split("=") for kv in m.group(1).split())} if m else {}


def main():
    if not os.path.exists(TARGET):
        print("skip: no", TARGET)
        return 77
    tmp = tempfile.mkdtemp(prefix="specd-distill-")
    draft = os.path.join(tmp, "draft.gguf")
    base = ["distill-draft", "-m", TARGET, "--target-prompts", "240", "--prompt-len", "12", "--gen-len", "48",
            "--steps", "120", "--batch", "16", "--seed", "5", "--quiet"]
    p = run(base + ["-o", draft])
    check(p.returncode == 0, "distill-draft runs")
    s = summary(p.stdout)
    print(p.stdout)
    th = re.search(r"tokenizer hash [0-9a-f]+ (==|!=) the target's", p.stdout)
    check(th is not None and th.group(1) == "==", "the draft's tokenizer hash equals the target's")
    check(s.get("acc_greedy", 0) >= s.get("acc0_greedy", 1) + MARGIN,
          "greedy acceptance %.3f beats the random init's %.3f by %.2f" % (s.get("acc_greedy", 0),
                                                                        s.get("acc0_greedy", 1), MARGIN))
    check(s.get("acc_temp", 0) > s.get("acc0_temp", 1), "T=0.8 acceptance %.3f beats random init's %.3f"
          % (s.get("acc_temp", 0), s.get("acc0_temp", 1)))

    # specd pairs it with the target; greedy speculation is lossless
    gen = ["generate", "-m", TARGET, "--temp", "0", "-n", "48", "-t", "1", "--json", "--seed", "3"]
    ps = run(gen + ["--draft", draft, "--method", "draft", "--gamma", "3"])
    pp = run(gen + ["--no-spec"])
    check(ps.returncode == 0 and pp.returncode == 0, "specd generate accepts the draft")
    if ps.returncode == 0 and pp.returncode == 0:
        js, jp = json.loads(ps.stdout.strip().splitlines()[-1]), json.loads(pp.stdout.strip().splitlines()[-1])
        check(js.get("draft") == draft, "the draft was loaded (not dropped)")
        check(js["tokens"] == jp["tokens"], "greedy speculation with the draft == plain decoding")
        check(js["speculation"]["accepted"] > 0, "the target accepted %d of %d drafted tokens"
              % (js["speculation"]["accepted"], js["speculation"]["drafted"]))
    # a random-init draft (0 steps is not allowed; 1 step at a tiny rate) is accepted less
    rnd = os.path.join(tmp, "random.gguf")
    pr = run(base[:-7] + ["--steps", "1", "--lr", "1e-7", "--seed", "5", "--quiet", "-o", rnd])
    check(pr.returncode == 0, "a random-init draft of the same shape")
    if pr.returncode == 0:
        jr = run(gen + ["--draft", rnd, "--method", "draft", "--gamma", "3"])
        if jr.returncode == 0 and ps.returncode == 0:
            ar = json.loads(jr.stdout.strip().splitlines()[-1])["speculation"]
            at = json.loads(ps.stdout.strip().splitlines()[-1])["speculation"]
            check(at["alpha"] > ar["alpha"], "in specd generate, trained alpha %.3f > random-init alpha %.3f"
                  % (at["alpha"], ar["alpha"]))

    # stopped at step 50 and resumed == uninterrupted, byte for byte
    ck = os.path.join(tmp, "run.ckpt")
    d1 = os.path.join(tmp, "resumed.gguf")
    p1 = run(base + ["-o", d1, "--ckpt", ck, "--stop-after", "50"])
    check(p1.returncode == 0 and "interrupted after 50 steps" in p1.stdout, "stopped after 50 steps")
    p2 = run(base + ["-o", d1, "--ckpt", ck, "--resume"])
    check(p2.returncode == 0, "resumed from the checkpoint")
    h = lambda f: hashlib.sha256(open(f, "rb").read()).hexdigest()
    check(os.path.exists(d1) and h(d1) == h(draft), "the resumed run's draft is the uninterrupted run's, byte for byte")
    check(summary(p2.stdout).get("last_loss") == s.get("last_loss"), "same last loss after resume")

    # bad input: clear errors
    pb = run(["distill-draft", "-m", TARGET, "-o", draft, "--type", "q4_0"], expect_rc=2)
    check(pb.returncode == 2 and "--type must be f32 or f16" in pb.stderr, "bad --type refused")
    pb = run(["distill-draft", "-m", TARGET, "-o", draft, "--resume"], expect_rc=2)
    check(pb.returncode == 2 and "--resume needs --ckpt" in pb.stderr, "--resume without --ckpt refused")
    pb = run(["distill-draft", "-m", os.path.join(tmp, "missing.gguf"), "-o", draft], expect_rc=1)
    check(pb.returncode == 1 and "missing.gguf" in pb.stderr, "missing target named")
    print("FAILED" if fails else "all ok")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
