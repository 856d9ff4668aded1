"""test_bench_kernels.py — `specd bench --kernels` runs every CPU matmul kernel
through the backend and prints one row per weight type and row count with
positive, finite figures (one layer of weights: a smoke run, 5 s instead of 30) (a smoke test of the tool kernel work is measured
with; speed itself is never asserted). Bad arguments get the usage and exit 2.

Env: SPECD (binary). Exit 77 = skipped.
"""
import math
import os
import subprocess
import sys

SPECD = os.environ.get("SPECD")
TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_K", "q5_K", "q6_K")


def main():
    if not SPECD:
        print("SKIP: SPECD not set")
        return 77
    p = subprocess.run([SPECD, "bench", "--kernels", "-r", "1", "-t", "2", "--layers", "1", "--rows", "1,8,16,64"], capture_output=True, text=True,
                       timeout=300)
    if p.returncode != 0:
        raise SystemExit(f"FAIL: exit {p.returncode}\n{p.stderr}")
    # one row per type x SIMD level: "TYPE LEVEL  v GB/s  p%  v GF/s  p% ..." (M = 1 and each M > 1)
    rows = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) >= 6 and f[0] in TYPES and f[1] in ("generic", "avx2", "avx512", "neon"):
            vals = [float(v) for v, u in zip(f[2::3], f[3::3]) if u in ("GB/s", "GF/s")]
            if len(vals) != 4 or not all(math.isfinite(v) and v > 0 for v in vals):
                raise SystemExit(f"FAIL: figures in {line!r}")
            rows[(f[0], f[1])] = vals
    types = {t for t, _ in rows}
    levels = {l for _, l in rows}
    if types != set(TYPES) or "generic" not in levels or len(rows) != len(types) * len(levels):
        raise SystemExit(f"FAIL: rows {sorted(rows)}: want every type x every level\n{p.stdout}")
    if "measured memory read bandwidth" not in p.stdout or "FMA peak" not in p.stdout:
        raise SystemExit(f"FAIL: no rooflines in\n{p.stdout}")
    p = subprocess.run([SPECD, "bench", "--kernels", "--bogus"], capture_output=True, text=True, timeout=60)
    if p.returncode != 2 or "unknown option '--bogus'" not in p.stderr:
        raise SystemExit(f"FAIL: bad argument: exit {p.returncode}, stderr {p.stderr!r}")
    p = subprocess.run([SPECD, "bench", "--kernels", "--layers", "13"], capture_output=True, text=True, timeout=60)
    if p.returncode != 2 or "--layers" not in p.stderr:
        raise SystemExit(f"FAIL: --layers 13: exit {p.returncode}, stderr {p.stderr!r}")
    p = subprocess.run([SPECD, "bench", "--kernels", "--help"], capture_output=True, text=True, timeout=60)
    if p.returncode != 0 or "usage: specd bench --kernels" not in p.stdout:
        raise SystemExit(f"FAIL: --help: exit {p.returncode}")
    print(f"ok: {len(rows)} kernel rows, bad argument refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
