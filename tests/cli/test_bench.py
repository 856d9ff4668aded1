"""test_bench.py — `specd bench -m MODEL` prints every figure the foundation
issue asks for, finite and in range: prefill and decode tok/s, the roofline
percentage against the peak bandwidth probe and the paired one (each decode
run against a probe run just before it), the 128-token prefill / decode ratio
and the verify(5) / decode(1) call ratio; the JSON form carries the same. Speed
itself is never asserted (benchmarks, not timed tests). A missing model is a
clear error with exit 1.

Env: SPECD (binary). Exit 77 = skipped.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

SPECD = os.environ.get("SPECD")


def run(args, timeout=600):
    return subprocess.run([SPECD] + args, capture_output=True, text=True, timeout=timeout)


def main():
    if not SPECD:
        print("SKIP: SPECD not set")
        return 77
    with tempfile.TemporaryDirectory() as d:
        mp = os.path.join(d, "m.gguf")
        p = run(["mkmodel", "-o", mp, "--layers", "2", "--dim", "128", "--heads", "4", "--ff", "256",
                 "--vocab", "300", "--ctx", "1024", "--type", "q8_0"])
        if p.returncode != 0:
            raise SystemExit(f"FAIL: mkmodel: {p.stderr}")

        p = run(["bench", "-m", mp, "-t", "2", "-r", "3", "--json"])
        if p.returncode != 0:
            raise SystemExit(f"FAIL: bench --json exit {p.returncode}\n{p.stderr}")
        j = json.loads(p.stdout)
        for k in ("read_gbs", "roofline_tok_s", "decode_tok_s", "roofline_pct", "roofline_pct_paired",
                  "prefill128_tok_s", "prefill_decode_ratio", "decode_call_ms", "verify_call_ms",
                  "verify_decode_ratio"):
            v = j.get(k)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise SystemExit(f"FAIL: {k} = {v!r} in {p.stdout}")
        if j["verify_positions"] != 5 or j["weight_type"] != "q8_0":
            raise SystemExit(f"FAIL: verify_positions/weight_type in {p.stdout}")
        # what ran the model is the backend's own description (a CPU here)
        if not j.get("backend", "").startswith("cpu ") or not j.get("simd"):
            raise SystemExit(f"FAIL: backend/simd in {p.stdout}")
        # the percentages are decode tok/s over bandwidth / step bytes
        want = 100.0 * j["decode_tok_s"] / j["roofline_tok_s"]
        if abs(want - j["roofline_pct"]) > 0.1 + 1e-3 * want:
            raise SystemExit(f"FAIL: roofline_pct {j['roofline_pct']} != {want:.1f}")
        r = j["verify_decode_ratio"]  # the ms figures are printed to 3 decimals
        if abs(j["verify_call_ms"] - r * j["decode_call_ms"]) > 0.0006 * (1 + r) + 1e-3 * j["verify_call_ms"]:
            raise SystemExit(f"FAIL: verify_decode_ratio inconsistent: {p.stdout}")

        p = run(["bench", "-m", mp, "-t", "2", "-r", "1"])
        if p.returncode != 0:
            raise SystemExit(f"FAIL: bench exit {p.returncode}\n{p.stderr}")
        for want in ("backend: cpu ", "of roofline", "decode against a bandwidth probe run just before it (3 runs",
                     "prefill 128 / decode:", "verify call (5 positions) / decode call (1 position)",
                     "per-op wall time over 32 decode steps"):
            if want not in p.stdout:
                raise SystemExit(f"FAIL: {want!r} missing from:\n{p.stdout}")

        p = run(["bench", "-m", os.path.join(d, "missing.gguf")], timeout=60)
        if p.returncode == 0 or "missing.gguf" not in p.stderr:
            raise SystemExit(f"FAIL: missing model: exit {p.returncode}, stderr {p.stderr!r}")
    print("ok: bench figures present and consistent (text and JSON); missing model refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
