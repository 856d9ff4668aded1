"""test_spec_cli.py — speculation through `specd generate`, end to end:
- a draft with another tokenizer (aidreams260K for stories260K: same size,
  different tokens) is refused, exit non-zero, naming the first differing token
  and both strings;
- greedy speculative output (fixed gamma and --adaptive) equals --no-spec
  output token for token, and --compare-plain's own plain run agrees;
- separate draft/target temperatures are refused;
- --compare-plain --repeat N runs N plain/speculative pairs and reports their
  median speedup inside the pairs' range; --repeat without --compare-plain is
  refused.

Env: SPECD (binary), SPECD_MODELS (shared models dir). Exit 77 = skipped.
"""
import json
import os
import subprocess
import sys

SPECD = os.environ.get("SPECD")
MODELS = os.environ.get("SPECD_MODELS")


def fail(msg, out=""):
    sys.stderr.write(out)
    raise SystemExit("FAIL: " + msg)


def gen(args, expect_ok=True):
    p = subprocess.run([SPECD, "generate", *args], capture_output=True, text=True, timeout=120)
    if expect_ok and p.returncode != 0:
        fail(f"specd generate {' '.join(args)}: exit {p.returncode}", p.stdout + p.stderr)
    return p


def main():
    if not SPECD or not MODELS:
        print("SKIP: SPECD / SPECD_MODELS not set")
        return 77
    target = os.path.join(MODELS, "stories260K.gguf")
    draft = os.path.join(MODELS, "llama2xs-281K.gguf")
    other = os.path.join(MODELS, "aidreams260K.gguf")
    for f in (target, draft, other):
        if not os.path.exists(f):
            print(f"SKIP: {f} missing")
            return 77

    # tokenizer identity
    p = gen(["-m", target, "--draft", other, "-p", "Once upon a time", "-n", "8", "--temp", "0"], expect_ok=False)
    if p.returncode == 0:
        fail("a draft with a different tokenizer was accepted", p.stdout + p.stderr)
    for want in ("token 259", "'\u2581t'", "'in'", "aidreams260K.gguf"):
        if want not in p.stderr:
            fail(f"refusal message lacks {want!r}", p.stderr)
    print("refused:", p.stderr.strip().splitlines()[-1])

    # greedy equality through the CLI
    prompts = ["Once upon a time", "The little dog", "Tom and Lily went to the park. They saw"]
    runs = 0
    for prompt in prompts:
        base = ["-m", target, "-p", prompt, "-n", "48", "--temp", "0", "--json", "--quiet"]
        plain = json.loads(gen(base + ["--no-spec"]).stdout)["tokens"]
        if len(plain) != 48:
            fail(f"plain run gave {len(plain)} tokens")
        for mode in (["--gamma", "1"], ["--gamma", "4"], ["--gamma", "8"], ["--adaptive"]):
            out = json.loads(gen(base + ["--draft", draft, *mode, "--compare-plain"]).stdout)
            if out["tokens"] != plain:
                fail(f"{prompt!r} {mode}: speculative tokens differ from plain:\n{out['tokens']}\n{plain}")
            if out["plain"]["tokens"] != plain:
                fail(f"{prompt!r} {mode}: --compare-plain's plain run differs from --no-spec")
            if out["speculation"]["verify_steps"] < 1:
                fail(f"{prompt!r} {mode}: no verify step ran")
            runs += 1
    print(f"greedy: {runs} speculative runs equal plain decoding")

    # one sampling config for draft and target
    for flag in ("--draft-temp", "--target-temp"):
        p = gen(["-m", target, "--draft", draft, flag, "0.5", "-n", "4"], expect_ok=False)
        if p.returncode == 0 or "ONE sampling config" not in p.stderr:
            fail(f"{flag} was not refused", p.stdout + p.stderr)
    print("separate draft/target temperatures refused")

    # repeated pairs
    base = ["-m", target, "--draft", draft, "-p", prompts[0], "-n", "32", "--temp", "0", "--json", "--quiet"]
    out = json.loads(gen(base + ["--gamma", "4", "--compare-plain", "--repeat", "3"]).stdout)
    if out["pairs"] != 3 or not (0 < out["speedup_min"] <= out["speedup"] <= out["speedup_max"]):
        fail(f"--repeat 3: pairs {out['pairs']}, speedup {out['speedup']} in [{out['speedup_min']}, "
             f"{out['speedup_max']}]")
    if out["tokens"] != out["plain"]["tokens"]:
        fail("--repeat 3: speculative tokens differ from plain")
    p = gen(base + ["--gamma", "4", "--repeat", "2"], expect_ok=False)
    if p.returncode != 2 or "--repeat needs --compare-plain" not in p.stderr:
        fail(f"--repeat without --compare-plain: exit {p.returncode}", p.stderr)
    print(f"--repeat 3: median speedup {out['speedup']:.2f} in [{out['speedup_min']:.2f}, {out['speedup_max']:.2f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
