#!/bin/bash
# tests/gpu/run.sh — every GPU check and benchmark of specd in one call, for a
# lent GPU machine (README "GPU"). Needs gpu-bin/ from tests/gpu/prepare.sh.
# Logs go to $OUT (default ./gpu-out); a short table is printed last.
#   stages (default all, in this order):
#   tests    test_cuda (every op vs the CPU on fresh random inputs, poisoned
#            outputs; whole-model logits; greedy speculation == plain; a failing
#            draft; seeded reruns; graph replay == eager) and test_medusa_cuda
#   e2e      every proposer through `specd generate` on the GPU (spec_e2e.py),
#            the server with every proposer alone and mixed in one batch
#            (tests/gateway_e2e/test_all_proposers.py), bench --concurrency 1,8,32
#   bench8b  a random Llama-3-8B-shape BF16 model: decode tok/s against the
#            measured copy bandwidth, verify(5) / decode(1), batch 1/8/32
#   spec8b   stories260K widened to the 8B shape (same function): speculative vs
#            plain with llama2xs-281K, with stories260K itself (a perfect draft,
#            gamma 8), n-gram and trees; a draft that does not fit (a 16 GB draft
#            beside a ballast) falls back to plain decoding
# GPU_DRY=1 runs the same script on the CPU with small shapes (a check of the
# script itself before device time is spent). DEADLINE (s, default 520): later
# stages are skipped once it has passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
LOG=$OUT/logs   # packed into $OUT/logs.tgz at the end: the device tool returns at most 8 files
mkdir -p "$LOG"
STAGES=${*:-tests e2e bench8b spec8b}
DEADLINE=${DEADLINE:-520}
T0=$(date +%s)
declare -A ROW
ORDER=()
row() { ROW[$1]=$2; ORDER+=("$1"); }
stage() { echo; echo "=== $1 ($(( $(date +%s) - T0 )) s)"; }
late() { [ $(( $(date +%s) - T0 )) -gt "$DEADLINE" ] && { echo "skipped: past the ${DEADLINE} s deadline"; row "$1" "skipped (deadline)"; }; }

[ -x gpu-bin/specd ] || { echo "gpu-bin/ missing: run tests/gpu/prepare.sh on the build machine first"; exit 1; }
[ -d gpu-bin/bin ] || xz -dc gpu-bin/pack.tar.xz | tar xf - -C gpu-bin || { echo "cannot unpack gpu-bin/pack.tar.xz"; exit 1; }
G=$PWD/gpu-bin
export SPECD_MODELS=$G/models
SPECD=$G/specd
if [ "${GPU_DRY:-0}" = 1 ]; then
  BACKEND=cpu; export TEST_CUDA_DRY=1
  SHAPE8="--layers 2 --dim 512 --heads 8 --kv-heads 2 --ff 1024 --vocab 4000 --ctx 1024"
  WIDE8="--dim 512 --heads 16 --kv-heads 8 --head-dim 32 --ff 1024 --layers 6"
  SCRATCH=${SCRATCH:-/tmp/specd-gpu-dry}
else
  BACKEND=cuda
  SHAPE8="--layers 32 --dim 4096 --heads 32 --kv-heads 8 --ff 14336 --vocab 128256 --ctx 4096 --rope-scaling llama3"
  # widening keeps the source's 2 heads per kv head: 16 kv heads of 128
  WIDE8="--dim 4096 --heads 32 --kv-heads 16 --head-dim 128 --ff 14336 --layers 32"
  SCRATCH=${SCRATCH:-/dev/shm/specd-gpu}
fi
mkdir -p "$SCRATCH"
# CUDA libraries for specd only (the wrapper puts them after gpu-bin/lib): the
# toolkit's, else the Python wheels' (cuBLAS, NCCL)
L=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib $(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib 2>/dev/null); do
  [ -d "$d" ] && L="$L${L:+:}$d"
done
export SPECD_GPU_LIBS=$L
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv,noheader 2>&1 | tee "$LOG/gpu.txt"
LD_LIBRARY_PATH="$G/lib:$L" ldd "$G/bin/specd" | grep "not found" && echo "WARNING: unresolved libraries"

if [[ " $STAGES " == *" tests "* ]]; then
  stage tests
  LD_LIBRARY_PATH="$G/lib:$L" timeout 300 "$G/bin/test_cuda" >"$LOG/test_cuda.log" 2>&1
  rc=$?
  grep -E "CHECK failed" "$LOG/test_cuda.log" | head -20
  grep -E "^(GPU|matmul|element|kv_write|kv_seq|  |whole|greedy|failing|seeded|CUDA graphs|SUMMARY|[0-9]+ checks)" "$LOG/test_cuda.log"
  row test_cuda "rc=$rc: $(tail -1 "$LOG/test_cuda.log") $(grep -m3 "CHECK failed" "$LOG/test_cuda.log" | tr '\n' ' ')"
  LD_LIBRARY_PATH="$G/lib:$L" timeout 90 "$G/bin/test_medusa_cuda" >"$LOG/test_medusa_cuda.log" 2>&1
  rc=$?
  tail -4 "$LOG/test_medusa_cuda.log"
  row test_medusa_cuda "rc=$rc: $(tail -1 "$LOG/test_medusa_cuda.log")"
fi

if [[ " $STAGES " == *" e2e "* ]] && ! late e2e; then
  stage "e2e: every proposer through specd generate and specd serve on the GPU"
  timeout 200 python3 tests/gpu/spec_e2e.py "$SPECD" "$BACKEND" "$SPECD_MODELS" "$SPECD_MODELS/medusa-260K.gguf" 2>&1 | tee "$LOG/spec_e2e.log"
  row spec_e2e "rc=${PIPESTATUS[0]}: $(tail -1 "$LOG/spec_e2e.log")"
  if [ "$BACKEND" = cuda ]; then
    PYTHONPATH=$G/py SPECD=$SPECD timeout 240 python3 tests/gateway_e2e/test_all_proposers.py >"$LOG/all_proposers.log" 2>&1
    rc=$?
  else
    PYTHONPATH=$G/py SPECD=$SPECD timeout 240 /usr/bin/python3 tests/gateway_e2e/test_all_proposers.py >"$LOG/all_proposers.log" 2>&1
    rc=$?
  fi
  tail -5 "$LOG/all_proposers.log"
  row all_proposers "rc=$rc (server: every proposer alone and mixed in one batch): $(tail -1 "$LOG/all_proposers.log")"
  timeout 120 "$SPECD" bench --concurrency 1,8,32 --backend "$BACKEND" -m "$SPECD_MODELS/stories260K.gguf" \
    --draft "$SPECD_MODELS/llama2xs-281K.gguf" -n 64 >"$LOG/bench_conc_small.log" 2>&1
  echo "rc=$?"; cat "$LOG/bench_conc_small.log"
  row conc_small "$(awk '$2 == "on" {c = $1} /on\/off tokens\/s ratio/ {printf "c%s on/off %s; ", c, $NF}' "$LOG/bench_conc_small.log")"
fi

if [[ " $STAGES " == *" bench8b "* ]] && ! late bench8b; then
  stage "bench8b: mkmodel random Llama-3-8B shape, BF16"
  M8="$SCRATCH/llama3-8b-shape-bf16.gguf"
  t=$(date +%s)
  timeout 240 "$SPECD" mkmodel -o "$M8" $SHAPE8 --type bf16 2>&1 | tail -1
  echo "mkmodel: $(( $(date +%s) - t )) s"
  timeout 200 "$SPECD" bench --backend "$BACKEND" -m "$M8" -r ${BENCH_REPS:-3} >"$LOG/bench8b.log" 2>&1
  echo "rc=$?"; cat "$LOG/bench8b.log"
  row decode "$(grep -E "^decode \(prompt" "$LOG/bench8b.log" | head -1)"
  row hbm "$(grep -E "^decode step" "$LOG/bench8b.log" | head -1)"
  row verify "$(grep -E "^verify call" "$LOG/bench8b.log" | head -1)"
  if ! late batch8b; then
    timeout 150 "$SPECD" bench --concurrency 1,8,32 --backend "$BACKEND" -m "$M8" -n 32 >"$LOG/bench8b_conc.log" 2>&1
    echo "rc=$?"; cat "$LOG/bench8b_conc.log"
    row batch8b "$(grep -E "^ *(1|8|32) +off" "$LOG/bench8b_conc.log" | awk '{printf "c%s %s tok/s; ", $1, $3}')"
  fi
  rm -f "$M8"
fi

if [[ " $STAGES " == *" spec8b "* ]] && ! late spec8b; then
  stage "spec8b: stories260K widened to the Llama-3-8B shape, BF16"
  W8="$SCRATCH/stories-widened-8b-bf16.gguf"
  t=$(date +%s)
  timeout 240 "$SPECD" mkmodel -o "$W8" --widen "$SPECD_MODELS/stories260K.gguf" $WIDE8 --type bf16 2>&1 | tail -1
  echo "mkmodel --widen: $(( $(date +%s) - t )) s"
  P="Once upon a time, there was a little boy named Tim. He"
  i=0
  SPEC8B_N=${SPEC8B_N:-5}
  for cfg in "llama2xs gamma 4|--draft $SPECD_MODELS/llama2xs-281K.gguf --gamma 4" \
             "llama2xs adaptive|--draft $SPECD_MODELS/llama2xs-281K.gguf --adaptive" \
             "stories260K itself gamma 8|--draft $SPECD_MODELS/stories260K.gguf --gamma 8" \
             "llama2xs tree auto|--draft $SPECD_MODELS/llama2xs-281K.gguf --tree auto" \
             "n-gram|--method ngram --gamma 4"; do
    late "spec8b $i" && break
    [ "$i" -ge "$SPEC8B_N" ] && break
    name=${cfg%%|*}; args=${cfg#*|}; i=$((i + 1))
    timeout 120 "$SPECD" generate --backend "$BACKEND" -m "$W8" $args -p "$P" -n 200 --temp 0 \
      --compare-plain --repeat 3 >"$LOG/spec8b_$i.log" 2>&1
    echo "rc=$? ($name)"; tail -6 "$LOG/spec8b_$i.log"
    row "spec8b $name" "$(grep -oE "speedup over plain decoding: .*" "$LOG/spec8b_$i.log" | head -1) $(grep -oE "^(plain|speculative): .*decode [0-9.]+ tok/s" "$LOG/spec8b_$i.log" | sed -E 's/prompt tokens [0-9]+, generated [0-9]+ \([a-z]+\), prefill [0-9.]+ tok\/s, //' | tr '\n' ' ')"
  done
  # the brief's "draft model OOM on GPU": the 16 GB widened model as the draft of
  # stories260K while a ballast leaves 8 GiB free: the draft is dropped with a
  # warning and decoding goes on plainly, with plain's tokens
  if [ "$BACKEND" = cuda ] && ! late oom; then
    python3 -c "
import torch, time, sys
f, t = torch.cuda.mem_get_info()
x = torch.empty(f - 8 * 2**30, dtype=torch.uint8, device='cuda')
print('ballast %.1f GiB, free %.1f GiB' % (x.numel() / 2**30, torch.cuda.mem_get_info()[0] / 2**30), flush=True)
open('$SCRATCH/ballast', 'w').write('1')
time.sleep(90)
" >"$LOG/ballast.log" 2>&1 &
    BP=$!
    for _ in $(seq 60); do [ -f "$SCRATCH/ballast" ] && break; sleep 0.5; done
    cat "$LOG/ballast.log"
    timeout 60 "$SPECD" generate --backend cuda -m "$SPECD_MODELS/stories260K.gguf" --draft "$W8" -p "$P" -n 48 \
      --temp 0 --json >"$LOG/oom.json" 2>"$LOG/oom.err"
    rc=$?
    timeout 60 "$SPECD" generate --backend cuda -m "$SPECD_MODELS/stories260K.gguf" -p "$P" -n 48 --temp 0 --json \
      >"$LOG/oom_plain.json" 2>/dev/null
    kill $BP 2>/dev/null; wait $BP 2>/dev/null; rm -f "$SCRATCH/ballast"
    cat "$LOG/oom.err" | tail -3
    same=$(python3 -c "
import json
a = json.load(open('$LOG/oom.json')); b = json.load(open('$LOG/oom_plain.json'))
print('tokens equal plain' if a['tokens'] == b['tokens'] and a['tokens'] else 'tokens DIFFER')" 2>&1 | tail -1)
    row draft_oom "rc=$rc; $(grep -c "does not fit in memory" "$LOG/oom.err") warning(s); $same"
  fi
  rm -f "$W8"
fi

echo
echo "=== summary ($(( $(date +%s) - T0 )) s)"
for k in "${ORDER[@]}"; do printf '%-26s %s\n' "$k" "${ROW[$k]}"; done | tee "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOG"
# a rehearsal leaves gpu-bin as prepare.sh made it (packed: it must fit the device tool's 64 MiB)
[ "${GPU_DRY:-0}" = 1 ] && [ -f gpu-bin/pack.tar.xz ] && rm -rf gpu-bin/bin gpu-bin/lib
