#!/usr/bin/env python3
"""test_default_pair.py — the pair specd uses when no model is configured
(cli/data/default-pair/: a llama specd trained on the Shakespeare corpus and a
draft distilled from it, issue 38 item 4):

  * the committed files are the ones reproduce.sh recorded (SHA256SUMS);
  * `specd generate` with no model and no config, from a directory of its own,
    uses them and says so, and writes words (mostly letters and spaces, not
    random bytes);
  * greedy speculative decoding with the draft, with n-gram lookup and with the
    auto method equals plain decoding token for token on every prompt, and the
    draft's verify steps are counted (its drafts do get accepted);
  * `specd serve` with no model starts on the pair and answers a completion.

usage: test_default_pair.py (SPECD and the source root from the environment:
SPECD, SPECD_SRC)."""
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SPECD = os.environ.get("SPECD") or os.path.join(os.path.dirname(__file__), "../../build/cli/specd")
SRC = os.environ.get("SPECD_SRC") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "../..")
PAIR = os.path.join(SRC, "cli", "data", "default-pair")
PROMPTS = ["ROMEO:", "First Citizen:\nBefore we proceed any further, hear me speak.", "KING RICHARD III:\nNow is the",
           "To be, or not to be", "JULIET:\nO Romeo, Romeo!", "The king", "MENENIUS:\nWhat work's, my countrymen,",
           "Good morrow"]
failures = 0


def check(ok, what):
    global failures
    if not ok:
        failures += 1
        print("FAIL: " + what, flush=True)


def generate(args, cwd):
    r = subprocess.run([SPECD, "generate"] + args + ["--json", "--quiet"], capture_output=True, text=True,
                       timeout=300, cwd=cwd)
    if r.returncode != 0:
        return None, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def main():
    if not os.access(SPECD, os.X_OK):
        print("SKIP: SPECD is not set to the specd binary")
        sys.exit(77)
    # the files are the recorded ones
    sums = {}
    with open(os.path.join(PAIR, "SHA256SUMS")) as f:
        for line in f:
            h, name = line.split()
            sums[name] = h
    check(set(sums) == {"target.gguf", "draft.gguf"}, "SHA256SUMS names %r" % sorted(sums))
    for name, h in sums.items():
        with open(os.path.join(PAIR, name), "rb") as f:
            got = hashlib.sha256(f.read()).hexdigest()
        check(got == h, "%s: sha256 %s, SHA256SUMS says %s" % (name, got, h))

    with tempfile.TemporaryDirectory() as cwd:  # no config.yaml here: the defaults
        j, err = generate(["-p", PROMPTS[0], "-n", "64", "--temp", "0.8", "--seed", "3"], cwd)
        check(j is not None, "generate with no model failed: %s" % err[-600:])
        if j is None:
            return
        check("built-in pair" in err and "default-pair" in err, "generate did not say it uses the built-in pair:\n"
              + err[-600:])
        text = j["text"]
        letters = sum(c.isalpha() or c in " \n,.;:'!?-" for c in text)
        words = re.findall(r"[A-Za-z]{2,}", text)
        check(len(text) > 80 and letters / len(text) > 0.95 and len(words) >= 10,
              "the built-in pair's text does not look like words: %r" % text)
        print("sample (T=0.8): %r" % text[:160])
        # greedy speculation == plain, every proposer
        for label, extra, slot in [("draft chain", ["--method", "draft", "--gamma", "4"], "draft"),
                                   ("draft adaptive", ["--method", "draft", "--adaptive"], "draft"),
                                   ("n-gram", ["--method", "ngram"], None),
                                   ("auto", ["--method", "auto"], None),
                                   ("draft tree", ["--method", "draft", "--tree", "16/5/3"], "draft")]:
            same = verified = 0
            for p in PROMPTS:
                j, err = generate(["-p", p, "-n", "48", "--temp", "0", "--compare-plain"] + extra, cwd)
                if j is None:
                    check(False, "%s on %r failed: %s" % (label, p, err[-300:]))
                    continue
                same += j["tokens"] == j["plain"]["tokens"] and len(j["tokens"]) > 0
                if slot:
                    verified += j["by_method"][slot]["accepted"] > 0
            check(same == len(PROMPTS), "greedy %s: %d of %d prompts equal plain" % (label, same, len(PROMPTS)))
            if slot:
                check(verified >= len(PROMPTS) // 2, "greedy %s: drafts accepted on only %d of %d prompts"
                      % (label, verified, len(PROMPTS)))
            print("greedy %s: %d/%d equal plain" % (label, same, len(PROMPTS)))
        # serve with no model: starts on the pair and answers
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        srv = subprocess.Popen([SPECD, "serve", "--port", str(port)], cwd=cwd, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
        try:
            body, deadline = None, time.monotonic() + 60
            while time.monotonic() < deadline and body is None:
                try:
                    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, method="POST",
                                                 data=json.dumps({"prompt": "ROMEO:", "max_tokens": 24,
                                                                  "temperature": 0}).encode(),
                                                 headers={"Content-Type": "application/json"})
                    body = json.loads(urllib.request.urlopen(req, timeout=30).read())
                except (OSError, ValueError):
                    time.sleep(0.2)
            check(body is not None and body["choices"][0]["text"], "serve with no model did not answer")
        finally:
            srv.terminate()
            try:
                _, err = srv.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                srv.kill()
                _, err = srv.communicate()
        check("built-in pair" in err, "serve did not say it uses the built-in pair")
    print("%s" % ("PASS" if not failures else "FAIL: %d" % failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
