#!/bin/bash
# tests/gpu/run.sh — every GPU check and benchmark of specd in one call, for a
# lent GPU machine (see README "GPU"). Uses gpu-bin/ from tests/gpu/prepare.sh
# (prebuilt sm_90 binaries), or builds with meson here when it is missing.
# Logs go to $OUT (default ./gpu-out); a short table is printed last.
#   stages: tests (CUDA ops/models/speculation/graphs vs CPU), bench8b (random
#   Llama-3-8B-shape BF16 model: decode, verify/decode, per-op times),
#   spec8b (widened stories260K at Llama-3-8B shape, drafted by llama2xs-281K).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
STAGES=${*:-tests bench8b spec8b}
# models: ../shared/models beside the checkout, else the copy prepare.sh put in gpu-bin/
MODELS=${SPECD_MODELS:-../shared/models}
[ -f "$MODELS/stories260K.gguf" ] || MODELS=$PWD/gpu-bin/models
SCRATCH=${SCRATCH:-/dev/shm/specd-gpu}
mkdir -p "$SCRATCH"
T0=$(date +%s)
declare -A ROW

if [ -x gpu-bin/specd ]; then
  BIN=gpu-bin
else
  echo "gpu-bin/ missing: building with meson" >&2
  meson setup build-cuda --buildtype=release -Dcuda=enabled >"$OUT/build.log" 2>&1 && ninja -C build-cuda >>"$OUT/build.log" 2>&1
  mkdir -p gpu-bin && cp build-cuda/cli/specd build-cuda/tests/gpu/test_cuda gpu-bin/ 2>/dev/null
  BIN=gpu-bin
fi
# CUDA libraries: the toolkit's, else the Python wheels' (cuBLAS, NCCL)
LIBS="$PWD/$BIN/lib"
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && LIBS="$LIBS:$d"; done
for d in $(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib 2>/dev/null); do LIBS="$LIBS:$d"; done
export LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SPECD_MODELS="$MODELS"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
ldd "$BIN/specd" | grep "not found" && echo "WARNING: unresolved libraries" >&2

stage() { echo; echo "=== $1 ($(( $(date +%s) - T0 )) s)"; }

if [[ " $STAGES " == *" tests "* ]]; then
  stage tests
  timeout 300 "$BIN/test_cuda" >"$OUT/test_cuda.log" 2>&1
  rc=$?
  grep -vE "^\s*$" "$OUT/test_cuda.log" | grep -E "CHECK failed" | head -20
  grep -E "^(GPU|matmul|element|kv_write|  |greedy|seeded|CUDA graphs|SUMMARY|[0-9]+ checks)" "$OUT/test_cuda.log"
  ROW[tests]="test_cuda rc=$rc: $(tail -1 "$OUT/test_cuda.log")"
fi

if [[ " $STAGES " == *" bench8b "* ]]; then
  stage "bench8b: mkmodel random Llama-3-8B shape, BF16"
  M8="$SCRATCH/llama3-8b-shape-bf16.gguf"
  [ -f "$M8" ] || timeout 240 "$BIN/specd" mkmodel -o "$M8" --layers 32 --dim 4096 --heads 32 --kv-heads 8 \
      --ff 14336 --vocab 128256 --ctx 8192 --type bf16 --rope-scaling llama3 2>&1 | tail -1
  timeout 240 "$BIN/specd" bench --backend cuda -m "$M8" -r 3 >"$OUT/bench8b.log" 2>&1
  echo "rc=$?"; cat "$OUT/bench8b.log"
  ROW[decode]=$(grep -E "^decode \(prompt" "$OUT/bench8b.log")
  ROW[hbm]=$(grep -E "^decode step" "$OUT/bench8b.log")
  ROW[verify]=$(grep -E "^verify call" "$OUT/bench8b.log")
  rm -f "$M8"
fi

if [[ " $STAGES " == *" spec8b "* ]]; then
  stage "spec8b: widened stories260K at Llama-3-8B shape (16 kv heads: widening keeps the source's 2 heads per kv head), BF16"
  W8="$SCRATCH/stories-widened-8b-bf16.gguf"
  [ -f "$W8" ] || timeout 300 "$BIN/specd" mkmodel -o "$W8" --widen "$MODELS/stories260K.gguf" --dim 4096 --heads 32 \
      --kv-heads 16 --head-dim 128 --ff 14336 --layers 32 --type bf16 2>&1 | tail -1
  P="Once upon a time, there was a little boy named Tim. He"
  for mode in "--gamma 4" "--adaptive"; do
    timeout 180 "$BIN/specd" generate --backend cuda -m "$W8" --draft "$MODELS/llama2xs-281K.gguf" -p "$P" -n 200 \
        --temp 0 $mode --compare-plain >"$OUT/spec8b${mode// /}.log" 2>&1
    echo "rc=$? ($mode)"; tail -12 "$OUT/spec8b${mode// /}.log"
    ROW["spec ${mode}"]=$(grep -oE "(plain|speculative): .*decode [0-9.]+ tok/s|speedup over plain decoding: [0-9.]+x measured" "$OUT/spec8b${mode// /}.log" | sed -E 's/prompt tokens [0-9]+, generated [0-9]+ \([a-z]+\), prefill [0-9.]+ tok\/s, //' | tr '\n' ' ')
  done
  rm -f "$W8"
fi

echo
echo "=== summary ($(( $(date +%s) - T0 )) s)"
for k in "${!ROW[@]}"; do printf '%-18s %s\n' "$k" "${ROW[$k]}"; done
