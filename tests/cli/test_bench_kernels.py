"""test_bench_kernels.py — `specd bench --kernels` runs every CPU matmul kernel
through the backend and prints one row per weight type and row count with
positive, finite figures (a smoke test of the tool kernel work is measured
with; speed itself is never asserted). Bad arguments get the usage and exit 2.

Env: SPECD (binary). Exit 77 = skipped.
"""
import math
import os
import subprocess
import sys

SPECD = os.environ.get("SPECD")


def main():
    if not SPECD:
        print("SKIP: SPECD not set")
        return 77
    p = subprocess.run([SPECD, "bench", "--kernels", "-r", "1", "-t", "2"], capture_output=True, text=True,
                       timeout=300)
    if p.returncode != 0:
        raise SystemExit(f"FAIL: exit {p.returncode}\n{p.stderr}")
    rows = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) == 5 and f[1].isdigit():
            vals = [float(v) for v in f[2:]]
            if not all(math.isfinite(v) and v > 0 for v in vals):
                raise SystemExit(f"FAIL: non-positive figure in {line!r}")
            rows[(f[0], int(f[1]))] = vals
    want = {(t, m) for t in ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_K", "q5_K", "q6_K") for m in (1, 5, 8)}
    if set(rows) != want:
        raise SystemExit(f"FAIL: rows {sorted(rows)} != {sorted(want)}\n{p.stdout}")
    p = subprocess.run([SPECD, "bench", "--kernels", "--bogus"], capture_output=True, text=True, timeout=60)
    if p.returncode != 2 or "usage: specd bench --kernels" not in p.stderr:
        raise SystemExit(f"FAIL: bad argument: exit {p.returncode}, stderr {p.stderr!r}")
    print(f"ok: {len(rows)} kernel rows, bad argument refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
