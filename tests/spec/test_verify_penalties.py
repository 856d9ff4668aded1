# test_verify_penalties.py — `specd verify` with penalties and logit bias on
# (issue 40 item 2): the chi-square of plain vs speculative samples passes for
# rejection and coupled verification, and fails overwhelmingly for
# --broken-penalties (verify rows blind to the drafts before them), so the
# harness can see the history bug the lossless rule must avoid.
import os
import subprocess
import sys

SPECD = os.environ.get("SPECD", "")
MODELS = os.environ.get("SPECD_MODELS", "")


def run(extra):
    m = os.path.join(MODELS, "stories260K.gguf")
    d = os.path.join(MODELS, "llama2xs-281K.gguf")
    args = [SPECD, "verify", "-m", m, "--draft", d, "--samples", "3000", "--positions", "6", "--temp", "1",
            "--repeat-penalty", "1.5", "--frequency-penalty", "0.5", "--presence-penalty", "0.3",
            "--repeat-last-n", "4", "--logit-bias", "13=-3,29=2", "-p", "Once upon", "--gamma", "4"] + extra
    cp = subprocess.run(args, capture_output=True, text=True, timeout=300)
    verdict = [l for l in cp.stdout.splitlines() if l.startswith("verdict:")]
    return cp.returncode, verdict[0] if verdict else cp.stdout[-500:] + cp.stderr[-500:]


def main():
    if not SPECD or not os.access(SPECD, os.X_OK) or not os.path.exists(os.path.join(MODELS, "stories260K.gguf")):
        print("SKIP: specd or the shared models missing")
        return 77
    fails = 0
    for label, extra, want in [("rejection", [], 0), ("coupled", ["--verify", "coupled"], 0),
                               ("broken", ["--broken-penalties"], 1)]:
        rc, verdict = run(extra)
        ok = rc == want and (("PASS" in verdict) if want == 0 else ("FAIL" in verdict))
        print("%-9s exit %d (want %d): %s" % (label, rc, want, verdict))
        fails += not ok
    rc, _ = run(["--tree", "4/2/2"])
    print("penalties with --tree: exit %d (want 2: refused)" % rc)
    fails += rc != 2
    return 1 if fails else 0


sys.exit(main())
