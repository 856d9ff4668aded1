#!/usr/bin/env python3
"""test_train_tokenizer.py — `specd train-tokenizer` (issue 38 item 3): a
byte-level BPE vocabulary trained on the Shakespeare corpus loads as a
gpt2/gpt-2 tokenizer, decode(encode(s)) == s on the whole corpus and on
random UTF-8 (every plane, controls, combining marks), it compresses the
corpus (fewer tokens than bytes by a set margin), training is deterministic
(same file twice), and `specd train --vocab` trains a model on its own
vocabulary whose file carries that tokenizer."""
import hashlib
import os
import random
import re
import subprocess
import sys
import tempfile

SPECD = os.environ.get("SPECD", "build/cli/specd")
MODELS = os.environ.get("SPECD_MODELS", "../shared/models")
CORPUS = os.path.join(MODELS, "corpora", "tinyshakespeare_input.txt")
fails = 0


def check(cond, msg):
    global fails
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        fails += 1


def run(args, inp=None):
    return subprocess.run([SPECD] + args, input=inp, capture_output=True, timeout=240)


def roundtrip(tok, data):
    p = run(["tokenize", "-m", tok, "--no-bos"], data)
    if p.returncode:
        return None, 0
    q = run(["detokenize", "-m", tok], p.stdout)
    return q.stdout, len(p.stdout.split())


def main():
    if not os.path.exists(CORPUS):
        print("skip: no corpus")
        return 77
    tmp = tempfile.mkdtemp(prefix="specd-bpe-")
    tok, tok2 = os.path.join(tmp, "tok.gguf"), os.path.join(tmp, "tok2.gguf")
    p = run(["train-tokenizer", "-o", tok, "--corpus", CORPUS, "--vocab", "768"])
    check(p.returncode == 0, "train-tokenizer runs: " + p.stdout.decode().strip())
    run(["train-tokenizer", "-o", tok2, "--corpus", CORPUS, "--vocab", "768"])
    h = lambda f: hashlib.sha256(open(f, "rb").read()).hexdigest()
    check(h(tok) == h(tok2), "the same corpus gives the same file")
    text = open(CORPUS, "rb").read()
    out, n = roundtrip(tok, text)
    check(out == text, "decode(encode(corpus)) == corpus (%d bytes, %d tokens)" % (len(text), n))
    check(0 < n < 0.5 * len(text), "compression: %.3f tokens per byte (< 0.5)" % (n / max(1, len(text))))
    rng = random.Random(7)
    planes = [(0x20, 0x7e), (0xa0, 0x2ff), (0x300, 0x36f), (0x400, 0x4ff), (0x4e00, 0x9fff), (0x1f300, 0x1faff),
              (0x1, 0x1f), (0x10000, 0x10ffff)]
    bad = 0
    for i in range(60):
        s = "".join(chr(rng.randint(*planes[rng.randrange(len(planes))])) for _ in range(rng.randint(1, 40)))
        s = "".join(c for c in s if not 0xd800 <= ord(c) <= 0xdfff)
        b = s.encode("utf-8")
        o, _ = roundtrip(tok, b)
        if o != b:
            bad += 1
            if bad < 3:
                print("  mismatch:", repr(s))
    check(bad == 0, "decode(encode(s)) == s for 60 random UTF-8 strings (%d mismatches)" % bad)
    # a model on its own vocabulary
    model = os.path.join(tmp, "m.gguf")
    small = os.path.join(tmp, "small.txt")
    open(small, "wb").write(text[:60000])
    p = run(["train", "-o", model, "--corpus", small, "--vocab", "300", "--dim", "32", "--layers", "1",
             "--ctx", "32", "--steps", "20", "--quiet"])
    check(p.returncode == 0 and os.path.exists(model + ".tokenizer.gguf"), "train --vocab trains a model")
    m = re.search(r"held-out perplexity ([0-9.]+) -> ([0-9.]+)", p.stdout.decode())
    check(m is not None and float(m.group(2)) < float(m.group(1)), "held-out perplexity falls: %s"
          % (m.group(0) if m else p.stdout.decode() + p.stderr.decode()))
    g = run(["generate", "-m", model, "-n", "8", "--temp", "0", "-t", "1", "--quiet"])
    check(g.returncode == 0, "the model loads in specd generate")
    a = run(["tokenize", "-m", model, "--no-bos", "-p", "Before we proceed"]).stdout
    b = run(["tokenize", "-m", model + ".tokenizer.gguf", "--no-bos", "-p", "Before we proceed"]).stdout
    check(a == b and a.strip() != b"", "the model file carries the trained tokenizer")
    pb = run(["train-tokenizer", "-o", tok, "--corpus", CORPUS, "--vocab", "100"])
    check(pb.returncode == 2 and b"bad value for --vocab" in pb.stderr, "a vocabulary under 258 is refused")
    print("FAILED" if fails else "all ok")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
