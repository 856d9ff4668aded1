#!/usr/bin/env python3
"""bench_verify_modes.py [ROUNDS] [TARGET.gguf] — rejection vs coupled
verification (issue 21): per mode, acceptance (accepted / drafted), tokens per
target pass and decode speed over plain decoding in the same process
(`specd generate --compare-plain`), on the widened F16 stories260K target with
the llama2xs draft, T=0.8, 2 threads, 200 tokens, three prompts, the two modes
alternated round by round (a shared host's speed drifts within seconds).
Prints medians and ranges; asserts nothing (a benchmark)."""
import json, os, statistics, subprocess, sys, tempfile

SPECD = os.environ.get("SPECD", "build/cli/specd")
MODELS = os.environ.get("SPECD_MODELS", "../shared/models")
PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went to the park"]


def gen(target, draft, prompt, seed, mode):
    r = subprocess.run([SPECD, "generate", "-m", target, "--draft", draft, "-p", prompt, "-n", "200", "--temp", "0.8",
                        "--seed", str(seed), "-t", "2", "--compare-plain", "--json", "--verify", mode],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit("specd generate failed: " + r.stderr[-500:])
    d = json.loads(r.stdout)
    s = d["speculation"]
    return s["accepted"] / max(1, s["drafted"]), s["tokens_per_pass"], d["speedup"]


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    draft = os.path.join(MODELS, "llama2xs-281K.gguf")
    tmp = None
    if len(sys.argv) > 2:
        target = sys.argv[2]
    else:
        tmp = tempfile.mkdtemp(prefix="specd-bvm-")
        f32, target = os.path.join(tmp, "w-f32.gguf"), os.path.join(tmp, "w-f16.gguf")
        subprocess.run([SPECD, "mkmodel", "--widen", os.path.join(MODELS, "stories260K.gguf"), "--dim", "768", "--ff",
                        "2048", "--layers", "12", "--head-dim", "64", "-o", f32], check=True, capture_output=True)
        subprocess.run([SPECD, "mkmodel", "--quantize", "f16", f32, "-o", target], check=True, capture_output=True)
    res = {"rejection": [], "coupled": []}
    for r in range(rounds):
        order = ["rejection", "coupled"] if r % 2 == 0 else ["coupled", "rejection"]
        for i, p in enumerate(PROMPTS):
            for mode in order:
                res[mode].append(gen(target, draft, p, 100 + r * 10 + i, mode))
    print("verification  acceptance  tokens/pass  speedup over plain (median [min-max], %d rounds x %d prompts)"
          % (rounds, len(PROMPTS)))
    for mode, rows in res.items():
        acc, tpp, sp = zip(*rows)
        print("%-12s  %10.3f  %11.2f  %.2f [%.2f-%.2f]" % (mode, statistics.median(acc), statistics.median(tpp),
                                                          statistics.median(sp), min(sp), max(sp)))
    if tmp:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)


main()
