#!/usr/bin/env python3
"""bench_methods.py — the proposers' speed table (a benchmark, not a test):
on the --widen F16 and Q8_0 targets (dim 768, ff 2048, 12 layers, head dim 64,
made here with `specd mkmodel`), 2 threads, greedy, 200 tokens, two prompt
sets — free story prompts from the corpus, and prompts that hold a paragraph
and then begin it again — each method (draft, ngram, auto) against plain:
`specd generate --method M --compare-plain --repeat R --json` runs R
plain/speculative pairs back to back in one process (alternated), and the
table gives tokens per target pass and the median decode-speed ratio with its
range over the pairs. The draft is llama2xs-281K (the target's tokenizer).

Usage: bench_methods.py [ROUNDS]  (env SPECD, SPECD_MODELS; meson test --benchmark bench_methods)."""
import json
import os
import statistics
import subprocess
import sys
import tempfile

SPECD, MODELS = os.environ.get("SPECD"), os.environ.get("SPECD_MODELS")


def main():
    if not SPECD or not MODELS:
        print("SKIP: SPECD / SPECD_MODELS not set")
        return 77
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with open(os.path.join(MODELS, "corpora", "tinystories_valid_30K.txt")) as f:
        paras = [p.strip() for p in f.read().split("\n") if len(p.split()) > 60]
    sets = {"free": [" ".join(p.split()[:8]) for p in paras[:3]],
            "repeat": [" ".join(p.split()[:60]) + " " + " ".join(p.split()[:6]) for p in paras[3:6]]}
    draft = os.path.join(MODELS, "llama2xs-281K.gguf")
    with tempfile.TemporaryDirectory() as d:
        f32 = os.path.join(d, "w-f32.gguf")
        subprocess.run([SPECD, "mkmodel", "--widen", os.path.join(MODELS, "stories260K.gguf"), "--dim", "768",
                        "--ff", "2048", "--layers", "12", "--head-dim", "64", "-o", f32], check=True,
                       capture_output=True)
        for q in ("q8_0", "f16"):
            tgt = os.path.join(d, "w-%s.gguf" % q)
            subprocess.run([SPECD, "mkmodel", "--quantize", q, f32, "-o", tgt], check=True, capture_output=True)
            for name, prompts in sets.items():
                for method in ("draft", "ngram", "auto"):
                    med, lo, hi, tpp = [], [], [], []
                    for p in prompts:
                        args = [SPECD, "generate", "-m", tgt, "-p", p, "-n", "200", "--temp", "0", "-t", "2",
                                "--method", method, "--compare-plain", "--repeat", str(rounds), "--json", "--quiet"]
                        if method != "ngram":
                            args += ["--draft", draft]
                        r = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=d)
                        if r.returncode != 0:
                            print("FAILED: %s" % r.stderr[-400:])
                            return 1
                        j = json.loads(r.stdout)
                        med.append(j["speedup"]), lo.append(j["speedup_min"]), hi.append(j["speedup_max"])
                        tpp.append(j["speculation"]["tokens_per_pass"])
                    print("%-5s %-6s %-6s tokens/pass %.2f  decode vs plain: median %.3f  range [%.3f, %.3f]  "
                          "(per prompt %s)" % (q, name, method, statistics.mean(tpp), statistics.median(med), min(lo),
                                               max(hi), " ".join("%.3f" % x for x in med)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
