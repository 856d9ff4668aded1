"""test_eagle_cli.py — an EAGLE-3 head through `specd generate --eagle` and
`specd serve --eagle`, end to end, with a random head for stories260K
(`specd mkmodel --arch eagle3`; its drafts are mostly rejected):
- greedy output with the head (fixed gamma 1 and 4, and --adaptive; its
  dynamic trees with --tree 8/4/2 and --tree auto) equals --no-spec output
  token for token, and the speculation report names the head's verify steps
  under "eagle" (a fixed tree shape: every one a tree step);
- a head of another hidden size is refused at load, naming both sizes;
- a server with --eagle answers a request with speculation.method eagle with the
  plain tokens and counts it under by_method.eagle; a server without a head
  refuses that method with 400 and the reason.

Env: SPECD (binary), SPECD_MODELS (shared models dir). Exit 77 = skipped.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gateway_e2e"))
import specd_e2e  # noqa: E402

SPECD = os.environ.get("SPECD")
MODELS = os.environ.get("SPECD_MODELS")


def fail(msg, out=""):
    sys.stderr.write(out)
    raise SystemExit("FAIL: " + msg)


def run(args, expect_ok=True):
    p = subprocess.run([SPECD, *args], capture_output=True, text=True, timeout=120)
    if expect_ok and p.returncode != 0:
        fail(f"specd {' '.join(args)}: exit {p.returncode}", p.stdout + p.stderr)
    return p


def post_json(srv, path, body):
    st, _, raw = srv.http("POST", path, body)
    try:
        return st, json.loads(raw)
    except ValueError:
        return st, {"raw": raw.decode(errors="replace")}


def main():
    if not SPECD or not MODELS:
        print("SKIP: SPECD / SPECD_MODELS not set")
        return 77
    target = os.path.join(MODELS, "stories260K.gguf")
    if not os.path.exists(target):
        print(f"SKIP: {target} missing")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        head, bad = os.path.join(tmp, "head.gguf"), os.path.join(tmp, "head32.gguf")
        for path, dim in ((head, 64), (bad, 32)):
            run(["mkmodel", "-o", path, "--arch", "eagle3", "--dim", str(dim), "--heads", "8", "--kv-heads", "4",
                 "--ff", "172", "--vocab", "512", "--seed", "3"])
        runs = 0
        for prompt in ("Once upon a time", "The little dog", "Tom and Lily went to the park. They saw"):
            base = ["generate", "-m", target, "-p", prompt, "-n", "40", "--temp", "0", "--json", "--quiet"]
            plain = json.loads(run(base + ["--no-spec"]).stdout)["tokens"]
            for mode in (["--gamma", "1"], ["--gamma", "4"], ["--adaptive"], ["--tree", "8/4/2"], ["--tree", "auto"]):
                out = json.loads(run(base + ["--eagle", head, *mode]).stdout)
                if out["tokens"] != plain:
                    fail(f"{prompt!r} {mode}: tokens with the head differ from plain:\n{out['tokens']}\n{plain}")
                if out.get("method") != "eagle" or out["by_method"].get("eagle", {}).get("verify_steps", 0) < 1:
                    fail(f"{prompt!r} {mode}: no eagle verify step reported: {out.get('method')} {out.get('by_method')}")
                sp = out["speculation"]
                if mode[-1] == "8/4/2" and not (sp["tree_steps"] == sp["verify_steps"] > 0 and sp["tree_nodes"] > sp["tree_steps"]):
                    fail(f"{prompt!r} {mode}: the head's steps were not trees: {sp}")
                runs += 1
        print(f"greedy: {runs} runs with the head equal plain decoding")
        p = run(["generate", "-m", target, "--eagle", bad, "-p", "Hi", "-n", "4"], expect_ok=False)
        if p.returncode == 0 or "hidden size 32" not in p.stderr or "64" not in p.stderr:
            fail("a head of another hidden size was not refused with its sizes", p.stdout + p.stderr)
        print("refused:", p.stderr.strip().splitlines()[-1])

        # the server: with the head, and without it
        with specd_e2e.Server(extra=["--eagle", head]) as srv:
            body = {"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0,
                    "speculation": {"method": "eagle"}}
            st, r = post_json(srv, "/v1/completions", body)
            if st != 200:
                fail(f"completion with method eagle: {st} {r}")
            by = r.get("speculation", {}).get("by_method", {})
            if by.get("eagle", {}).get("verify_steps", 0) < 1:
                fail(f"the server's speculation report lacks eagle steps: {r.get('speculation')}")
            body["speculation"] = {"method": "off"}
            st, r2 = post_json(srv, "/v1/completions", body)
            if st != 200 or r2["choices"][0]["text"] != r["choices"][0]["text"]:
                fail("the server's eagle text differs from its plain text")
        with specd_e2e.Server() as srv:
            st, r = post_json(srv, "/v1/completions", {"prompt": "Hi", "max_tokens": 4,
                                                       "speculation": {"method": "eagle"}})
            if st != 400 or "EAGLE-3 head" not in json.dumps(r):
                fail(f"method eagle without a head: {st} {r}")
        print("server: eagle requests served with the plain text and counted; refused without a head")
    return 0


if __name__ == "__main__":
    sys.exit(main())
