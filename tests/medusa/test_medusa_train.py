#!/usr/bin/env python3
"""test_medusa_train.py -- `specd train-medusa` on stories260K with TinyStories
text (seeded, seconds): the held-out loss falls, head 1's top-1 accuracy on
held-out text is well above the unigram baseline (the most frequent training
label), heads trained on the target's own greedy continuations (--self-distill)
are far more accurate on them than corpus-trained heads are on the corpus,
heads with the token input (the default) are far more accurate than the same
heads trained without it (--no-token-input) on the same data, FFN heads
(--ffn 128: hidden units of their own) more than ResBlock heads, the heads file loads (specd refuses it for another target via the
loader, tested in C), Ctrl-C still writes a usable file, and bad arguments
fail with a message."""
import os, re, signal, subprocess, sys, tempfile, time

SPECD = os.environ["SPECD"]
MODELS = os.environ.get("SPECD_MODELS", "../shared/models")
TARGET = os.path.join(MODELS, "stories260K.gguf")
CORPUS = os.path.join(MODELS, "corpora", "tinystories_valid_30K.txt")
fails = 0


def check(cond, msg):
    global fails
    if not cond:
        fails += 1
        print("FAIL:", msg, file=sys.stderr)


def summary(out):
    m = re.search(r"summary loss0=(\S+) loss1=(\S+) head1_top1=(\S+) unigram=(\S+) steps=(\d+) interrupted=(\d)", out)
    if not m:
        return None
    return dict(loss0=float(m[1]), loss1=float(m[2]), top1=float(m[3]), unigram=float(m[4]), steps=int(m[5]),
                interrupted=int(m[6]))


if not os.path.exists(TARGET) or not os.path.exists(CORPUS):
    print("SKIP: models not found", file=sys.stderr)
    sys.exit(77)

with tempfile.TemporaryDirectory() as tmp:
    heads = os.path.join(tmp, "heads.gguf")
    cmd = [SPECD, "train-medusa", "-m", TARGET, "-o", heads, "--corpus", CORPUS, "--heads", "3", "--epochs", "6",
           "--lr", "0.01", "--holdout", "0.1", "--seed", "7", "-t", "2", "--quiet"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    print(r.stdout, file=sys.stderr)
    check(r.returncode == 0, "train-medusa failed: " + r.stderr[-2000:])
    s = summary(r.stdout)
    check(s is not None, "no summary line")
    if s:
        check(s["loss1"] < 0.7 * s["loss0"], "held-out loss %.3f -> %.3f did not fall by 30%%" % (s["loss0"], s["loss1"]))
        check(s["top1"] > 1.8 * s["unigram"] and s["top1"] > 0.07,
              "head-1 top-1 %.3f is not well above the unigram baseline %.3f" % (s["top1"], s["unigram"]))
        check(not s["interrupted"], "interrupted")
    check(os.path.getsize(heads) > 10000, "heads file too small")
    # the same seed gives the same file
    heads2 = os.path.join(tmp, "heads2.gguf")
    r2 = subprocess.run(cmd[:5] + [heads2] + cmd[6:], capture_output=True, text=True, timeout=240)
    check(r2.returncode == 0 and open(heads, "rb").read() == open(heads2, "rb").read(),
          "a seeded rerun wrote a different file")

    # self-distillation: the target's greedy continuations are what greedy
    # verification accepts, and far easier to predict than corpus text
    heads_sd = os.path.join(tmp, "heads-sd.gguf")
    r = subprocess.run([SPECD, "train-medusa", "-m", TARGET, "-o", heads_sd, "--corpus", CORPUS, "--self-distill",
                        "--samples", "8", "--tokens", "60000", "--heads", "3", "--epochs", "3", "--lr", "0.01",
                        "--holdout", "0.1", "--seed", "7", "-t", "2", "--quiet"], capture_output=True, text=True,
                       timeout=240)
    print(r.stdout, file=sys.stderr)
    sd = summary(r.stdout)
    check(r.returncode == 0 and sd is not None, "self-distill run failed: " + r.stderr[-2000:])
    if sd and s:
        check(sd["top1"] > 0.3 and sd["top1"] > 2 * s["top1"],
              "self-distilled head-1 top-1 %.3f is not far above the corpus-trained %.3f" % (sd["top1"], s["top1"]))
    check("self-distilled continuations" in r.stderr, "the hidden-state line does not say self-distilled")
    check("token input" in r.stdout, "the heads line does not say token input")
    # the same without the token input: the root token is what a head for +2 lacks
    r = subprocess.run([SPECD, "train-medusa", "-m", TARGET, "-o", heads_sd, "--corpus", CORPUS, "--self-distill",
                        "--samples", "8", "--tokens", "60000", "--heads", "3", "--epochs", "3", "--lr", "0.01",
                        "--holdout", "0.1", "--seed", "7", "-t", "2", "--quiet", "--no-token-input"],
                       capture_output=True, text=True, timeout=240)
    print(r.stdout, file=sys.stderr)
    nt = summary(r.stdout)
    check(r.returncode == 0 and nt is not None, "--no-token-input run failed: " + r.stderr[-2000:])
    check("token input" not in r.stdout, "--no-token-input heads say token input")
    if sd and nt:
        check(sd["top1"] > nt["top1"] + 0.1,
              "token input head-1 top-1 %.3f is not well above %.3f without it" % (sd["top1"], nt["top1"]))

    # FFN heads: 128 hidden units of their own per layer against the
    # ResBlock's 64 (the target's width), same data and seed
    r = subprocess.run([SPECD, "train-medusa", "-m", TARGET, "-o", heads_sd, "--corpus", CORPUS, "--self-distill",
                        "--samples", "8", "--tokens", "60000", "--heads", "3", "--epochs", "3", "--lr", "0.01",
                        "--holdout", "0.1", "--seed", "7", "-t", "2", "--quiet", "--ffn", "128"],
                       capture_output=True, text=True, timeout=240)
    print(r.stdout, file=sys.stderr)
    ff = summary(r.stdout)
    check(r.returncode == 0 and ff is not None, "--ffn run failed: " + r.stderr[-2000:])
    check("FFN layer of 128" in r.stdout, "the heads line does not say FFN")
    if sd and ff:
        check(ff["top1"] > sd["top1"] + 0.05,
              "FFN head-1 top-1 %.3f is not well above the ResBlock heads' %.3f" % (ff["top1"], sd["top1"]))
    r = subprocess.run([SPECD, "train-medusa", "-m", TARGET, "-o", heads_sd, "--corpus", CORPUS, "--ffn", "40"],
                       capture_output=True, text=True)
    check(r.returncode == 2 and "multiple of 32" in r.stderr, "--ffn 40 not refused: " + r.stderr[-500:])

    # --target-prompts: prompts the target samples from BOS, then continues greedily
    heads_tp = os.path.join(tmp, "heads-tp.gguf")
    r = subprocess.run([SPECD, "train-medusa", "-m", TARGET, "-o", heads_tp, "--corpus", CORPUS, "--self-distill",
                        "--samples", "1", "--target-prompts", "300", "--gen-len", "64", "--tokens", "30000",
                        "--heads", "2", "--epochs", "2", "--lr", "0.01", "--seed", "7", "-t", "2", "--quiet"],
                       capture_output=True, text=True, timeout=240)
    print(r.stdout, file=sys.stderr)
    tp = summary(r.stdout)
    check(r.returncode == 0 and tp is not None, "--target-prompts run failed: " + r.stderr[-2000:])
    check("300 prompts written by the target" in r.stderr, "the hidden-state line does not count the target's prompts")
    if tp:
        check(tp["top1"] > 0.3, "--target-prompts head-1 top-1 %.3f" % tp["top1"])
    r = subprocess.run([SPECD, "train-medusa", "-m", TARGET, "-o", heads_tp, "--corpus", CORPUS, "--self-distill",
                        "--target-prompts", "10", "--prompt-len", "4000", "--gen-len", "200"],
                       capture_output=True, text=True)
    check(r.returncode == 1 and "exceed the context" in r.stderr, "oversized --prompt-len not refused: " + r.stderr[-500:])

    # Ctrl-C: a long run interrupted still writes measured heads
    heads3 = os.path.join(tmp, "heads3.gguf")
    p = subprocess.Popen([SPECD, "train-medusa", "-m", TARGET, "-o", heads3, "--corpus", CORPUS, "--epochs", "1000",
                          "--tokens", "3000", "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(5)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    s3 = summary(out)
    check(p.returncode == 0 and s3 is not None and s3["interrupted"] == 1, "Ctrl-C run: rc %s %s" % (p.returncode, err[-500:]))
    check(os.path.exists(heads3), "Ctrl-C run wrote no file")

    # bad arguments
    r = subprocess.run([SPECD, "train-medusa", "-m", TARGET, "-o", heads], capture_output=True, text=True)
    check(r.returncode == 2 and "--corpus" in r.stderr, "missing --corpus not refused")
    r = subprocess.run([SPECD, "train-medusa", "-m", TARGET, "-o", heads, "--corpus", "/nonexistent"],
                       capture_output=True, text=True)
    check(r.returncode == 1 and "cannot read corpus" in r.stderr, "missing corpus file not reported")

print("%s" % ("ok" if not fails else "%d failures" % fails), file=sys.stderr)
sys.exit(1 if fails else 0)
