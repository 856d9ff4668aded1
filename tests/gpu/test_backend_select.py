"""test_backend_select.py — backend selection on a machine WITHOUT a GPU (CI):
asking for CUDA fails at start-up with a clear message and a non-zero exit
(`specd generate`, `specd bench`, and `specd serve` with engine.backend: cuda
in config.yaml); `auto` falls back to the CPU and works. On a machine with a GPU
the failure cases cannot happen, so this test skips there (tests/gpu/run.sh
covers that machine).

Env: SPECD (binary), SPECD_MODELS (shared models dir). Exit 77 = skipped.
"""
import os
import subprocess
import sys
import tempfile

SPECD = os.environ.get("SPECD")
MODELS = os.environ.get("SPECD_MODELS")
REASONS = ("no CUDA GPU is available", "built without CUDA")


def run(args, cwd=None, timeout=60):
    return subprocess.run([SPECD, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def main():
    model = os.path.join(MODELS or "", "stories260K.gguf")
    if not SPECD or not os.path.exists(model):
        print("SKIP: specd or the shared models are missing")
        return 77
    if os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl"):
        print("SKIP: this machine has a GPU; tests/gpu/run.sh covers it")
        return 77
    for args in (["generate", "--backend", "cuda", "-m", model, "-n", "2"],
                 ["bench", "--backend", "cuda", "-m", model]):
        p = run(args)
        msg = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        if p.returncode == 0 or not any(r in msg for r in REASONS):
            raise SystemExit(f"FAIL: specd {' '.join(args[:3])}: exit {p.returncode}, last stderr line {msg!r}")
        print(f"ok: specd {args[0]} --backend cuda refused: {msg}")
    p = run(["generate", "--backend", "auto", "-m", model, "-n", "8", "--temp", "0"])
    if p.returncode != 0 or not p.stdout.strip() or "[backend: cpu " not in p.stderr:
        raise SystemExit(f"FAIL: --backend auto did not fall back to the CPU: exit {p.returncode}\n{p.stderr}")
    print("ok: --backend auto runs on the CPU")
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "config.yaml")
        with open(cfg, "w") as f:
            f.write(f"models:\n  target: {model}\nengine:\n  backend: cuda\nserver:\n  host: 127.0.0.1\n  port: 0\n"
                    f"telemetry:\n  enabled: false\n")
        p = run(["serve", "-c", cfg], cwd=d, timeout=60)
        err = p.stderr.strip()
        if p.returncode == 0 or not any(r in err for r in REASONS):
            raise SystemExit(f"FAIL: serve with engine.backend: cuda: exit {p.returncode}, stderr {err!r}")
        print(f"ok: serve with engine.backend: cuda fails at start-up: {err.splitlines()[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
