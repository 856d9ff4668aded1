#!/usr/bin/env python3
"""tests/gpu/spec_e2e.py — every landed proposer through `specd generate` on one
backend (the GPU on a lent machine; run.sh's dry run uses the CPU), end to end:

  * greedy: each proposer's tokens equal plain decoding's, token for token, on
    every prompt (plain runs in the same process: --compare-plain), and the
    proposer named in the by-method counters did verify steps;
  * seeded sampling: the same seed gives the same tokens on a rerun, and with
    coupled verification (Gumbel-max, shared noise) equals plain sampling.

usage: spec_e2e.py SPECD BACKEND MODELS_DIR [MEDUSA_HEADS.gguf]
Prints one line per configuration and 'spec_e2e: N passed, M failed'; exits 1
on any failure. Python standard library only (the GPU image has no extras)."""
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

PROMPTS = [
    "Once upon a time, there was a little girl named Lily. She",
    "The cat sat on the mat. The cat sat on the mat. The dog",
    "Tom and Sue went to the park. They saw a big tree and",
]


def run(specd, args, env=None):
    r = subprocess.run([specd, "generate"] + args + ["--json", "--quiet"], capture_output=True, text=True,
                       timeout=300, env=env)
    if r.returncode != 0:
        return None, "exit %d: %s" % (r.returncode, r.stderr.strip()[-600:])
    try:
        return json.loads(r.stdout.strip().splitlines()[-1]), None
    except (ValueError, IndexError):
        return None, "not JSON: %r" % r.stdout[-300:]


def find(j, key):
    """The first value of key anywhere in the JSON object j, or None."""
    if isinstance(j, dict):
        if key in j:
            return j[key]
        for v in j.values():
            r = find(v, key)
            if r is not None:
                return r
    return None


def main():
    specd, backend, models = sys.argv[1:4]
    heads = sys.argv[4] if len(sys.argv) > 4 else None
    target = os.path.join(models, "stories260K.gguf")
    draft = os.path.join(models, "llama2xs-281K.gguf")
    base = ["--backend", backend, "-m", target, "-n", "48"]
    # (label, extra args, the by_method slot that must have verified, or None)
    configs = [
        ("draft chain gamma 4", ["--draft", draft, "--method", "draft", "--gamma", "4"], "draft"),
        ("draft chain adaptive", ["--draft", draft, "--method", "draft", "--adaptive"], "draft"),
        ("draft chain gamma 8", ["--draft", draft, "--method", "draft", "--gamma", "8"], "draft"),
        ("n-gram chain", ["--method", "ngram", "--gamma", "4"], "ngram"),
        ("auto (draft + n-gram)", ["--draft", draft, "--method", "auto"], None),
        ("draft tree 16/5/3", ["--draft", draft, "--method", "draft", "--tree", "16/5/3"], "draft"),
        ("draft tree auto", ["--draft", draft, "--method", "draft", "--tree", "auto"], "draft"),
        ("n-gram tree 8/4/2", ["--method", "ngram", "--tree", "8/4/2"], "ngram"),
    ]
    if heads:
        # a fixed shape: the heads propose every step (no cost-curve budget choice)
        configs.append(("medusa 16/5/3", ["--medusa", heads, "--tree", "16/5/3"], "medusa"))
    passed = failed = 0

    def result(ok, label, detail):
        nonlocal passed, failed
        passed += ok
        failed += not ok
        print("%-4s %-34s %s" % ("ok" if ok else "FAIL", label, detail), flush=True)

    # every run is its own process (model load, device set-up): run them side by side
    pool = ThreadPoolExecutor(max_workers=int(os.environ.get("SPEC_E2E_JOBS", "6")))
    greedy = {(label, p): pool.submit(run, specd, base + extra + ["-p", p, "--temp", "0", "--compare-plain"])
              for label, extra, _ in configs for p in PROMPTS}
    for label, extra, slot in configs:
        same, runs, verified, errs = 0, 0, 0, []
        for p in PROMPTS:
            j, err = greedy[(label, p)].result()
            runs += 1
            if err:
                errs.append(err)
                continue
            plain = find(j, "plain")
            plain = plain.get("tokens") if isinstance(plain, dict) else None
            if plain is not None and j["tokens"] == plain and len(plain) > 0:
                same += 1
            else:
                errs.append("prompt %r: %s vs plain %s" % (p[:20], j["tokens"][:12], (plain or [])[:12]))
            bm = find(j, "by_method") or {}
            if slot is None:
                verified += sum(v.get("verify_steps", 0) for v in bm.values()) > 0
            else:
                verified += bm.get(slot, {}).get("verify_steps", 0) > 0
        ok = same == runs and verified > 0
        result(ok, "greedy " + label, "%d/%d equal plain, %d with verify steps %s" % (same, runs, verified,
                                                                                        "; ".join(errs)[:400]))

    # seeded sampling: reruns equal; coupled verification equals plain sampling
    seeded = [("draft gamma 4", ["--draft", draft, "--gamma", "4"]),
              ("draft tree 16/5/3", ["--draft", draft, "--tree", "16/5/3"]),
              ("n-gram", ["--method", "ngram", "--gamma", "4"])]
    futs = {}
    for label, extra in seeded:
        for i, p in enumerate(PROMPTS[:2]):
            args = base + extra + ["-p", p, "--temp", "0.8", "--seed", str(11 + i)]
            futs[(label, i)] = [pool.submit(run, specd, args), pool.submit(run, specd, args),
                                pool.submit(run, specd, args + ["--verify", "coupled", "--compare-plain"])]
    for label, extra in seeded:
        rep = coup = 0
        errs = []
        for i in range(2):
            (a, e1), (b, e2), (c, e3) = [f.result() for f in futs[(label, i)]]
            if e1 or e2 or e3:
                errs.append(e1 or e2 or e3)
                continue
            rep += a["tokens"] == b["tokens"] and len(a["tokens"]) > 0
            plain = find(c, "plain")
            coup += isinstance(plain, dict) and c["tokens"] == plain.get("tokens")
        result(rep == 2, "seeded reruns " + label, "%d/2 identical %s" % (rep, "; ".join(errs)[:300]))
        result(coup == 2, "coupled == plain sampling " + label, "%d/2 identical" % coup)
    pool.shutdown()

    print("spec_e2e: %d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
