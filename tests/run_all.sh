#!/usr/bin/env bash
# run_all.sh — installs dependencies, builds specd and runs every test (unit,
# reference, statistical, sanitizer, bounded fuzzing), then the engine suite
# again under ThreadSanitizer and the gateway's hostile-input suite against an
# AddressSanitizer build of specd. Ends with one line
# "N passed, N failed[, N skipped]" and exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
t_start=$(date +%s)
bash tests/deps.sh || { echo "0 passed, 1 failed"; exit 1; }
# node packages from the committed lockfile: uPlot (served by specd at
# /vendor/uplot/) and playwright-core (drives Debian's chromium in tests/web)
if [ -f package.json ]; then
  npm ci --no-audit --no-fund --loglevel=error || { echo "0 passed, 1 failed"; exit 1; }
fi
BUILD=${SPECD_TEST_BUILD:-build-test}
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" --buildtype=release >/dev/null || { echo "0 passed, 1 failed"; exit 1; }
fi
ninja -C "$BUILD" || { echo "0 passed, 1 failed"; exit 1; }
meson test -C "$BUILD" --num-processes "${SPECD_TEST_JOBS:-2}" --print-errorlogs "$@"
rc=$?
# ThreadSanitizer: the engine suite (engine thread + API under concurrent
# readers) in its own build dir; only its test binaries are built. Any TSan
# report fails the test (exit 66). SPECD_TSAN=0 skips this step.
TSAN=${SPECD_TSAN_BUILD:-build-tsan}
tsan_log=""
if [ "${SPECD_TSAN:-1}" != 0 ]; then
  tsan_log="$TSAN/meson-logs/testlog.json"
  rm -f "$tsan_log"
  tsan_ok=1
  if [ ! -f "$TSAN/build.ninja" ]; then
    # CUDA off here: the main build already compiles and links it
    meson setup "$TSAN" -Db_sanitize=thread -Dcuda=disabled --buildtype=debugoptimized >/dev/null || tsan_ok=0
  fi
  if [ $tsan_ok = 1 ]; then
    tsan_targets=$(cd tests/engine && ls test_engine_*.c | sed 's|^|tests/engine/|; s|\.c$||')
    ninja -C "$TSAN" $tsan_targets || tsan_ok=0
  fi
  if [ $tsan_ok = 1 ]; then
    TSAN_OPTIONS="exitcode=66 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
      meson test -C "$TSAN" --no-rebuild --suite engine --num-processes "${SPECD_TEST_JOBS:-2}" \
      --timeout-multiplier 3 --print-errorlogs
  fi
  [ -f "$tsan_log" ] || tsan_log="BUILD-FAILED"
fi
# AddressSanitizer + UBSan: specd itself under the gateway's bad-input,
# hardening, guard, untrusted-input and n-choices (several engine requests per
# HTTP request, cancelled together) end-to-end tests, so a NULL write or an
# overflow on a hostile input fails CI; a report, or a leak at exit, makes the
# server's exit code non-zero. Also the prefix-reuse reference counting (issue
# 20): the engine's mixed load with cancels and evictions and the reattach
# after a reset, each checking the pools' accounting, ASan clean (tests/kv's
# allocation hook does not build under ASan; its random load runs in the main
# build).
# Only those binaries are built. SPECD_ASAN=0 skips it.
ASAN=${SPECD_ASAN_BUILD:-build-asan}
asan_log=""
if [ "${SPECD_ASAN:-1}" != 0 ]; then
  asan_log="$ASAN/meson-logs/testlog.json"
  rm -f "$asan_log"
  asan_ok=1
  if [ ! -f "$ASAN/build.ninja" ]; then
    meson setup "$ASAN" -Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled \
      --buildtype=debugoptimized >/dev/null || asan_ok=0
  fi
  [ $asan_ok = 1 ] && { ninja -C "$ASAN" cli/specd tests/engine/test_engine_prefix \
    tests/spec/test_spec_prefix_reset || asan_ok=0; }
  if [ $asan_ok = 1 ]; then
    UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1 ${UBSAN_OPTIONS:-}" \
      meson test -C "$ASAN" --no-rebuild --num-processes "${SPECD_TEST_JOBS:-2}" --timeout-multiplier 3 \
      --print-errorlogs bad_input hardening hardening3 guards untrusted_input ws_stream choices engine_prefix spec_prefix_reset all_proposers grammar_limits
  fi
  [ -f "$asan_log" ] || asan_log="BUILD-FAILED"
fi
# aarch64: the kernels and their tests cross-built with Debian's gcc
# (cross/aarch64-linux-gnu.ini, -Dkernels_only=true) and run under qemu-user
# (about 2 minutes). SPECD_ARM=0 skips this step.
ARM=${SPECD_ARM_BUILD:-build-arm}
arm_log=""
if [ "${SPECD_ARM:-1}" != 0 ]; then
  arm_log="$ARM/meson-logs/testlog.json"
  rm -f "$arm_log"
  { [ -f "$ARM/build.ninja" ] || meson setup "$ARM" --cross-file cross/aarch64-linux-gnu.ini -Dkernels_only=true \
      -Dcuda=disabled >/dev/null; } && ninja -C "$ARM" >/dev/null &&
    meson test -C "$ARM" --no-rebuild --num-processes "${SPECD_TEST_JOBS:-2}" --timeout-multiplier 5 --print-errorlogs
  [ -f "$arm_log" ] || arm_log="BUILD-FAILED"
fi
T_TOTAL=$(( $(date +%s) - t_start )) /usr/bin/python3 - "$BUILD/meson-logs/testlog.json" $tsan_log $asan_log $arm_log <<'PY'
import json, os, sys
p = f = s = 0
times = []
for path in sys.argv[1:]:
    if path == "BUILD-FAILED":  # the TSan build itself failed
        f += 1
        continue
    tag = "" if path == sys.argv[1] else " [" + path.split("/")[0] + "]"
    for line in open(path):
        j = json.loads(line)
        r = j["result"]
        times.append((j.get("duration", 0.0), j["name"] + tag))
        if r in ("OK", "EXPECTEDFAIL"): p += 1
        elif r == "SKIP": s += 1
        else: f += 1
# the ten slowest tests and the whole run's time (issue 42: a CI that fits)
print("slowest tests:")
for d, n in sorted(times, reverse=True)[:10]:
    print(f"  {d:8.1f} s  {n}")
t = int(os.environ.get("T_TOTAL", "0"))
print(f"total: {t // 60} min {t % 60} s (builds and tests)")
print(f"{p} passed, {f} failed" + (f", {s} skipped" if s else ""))
sys.exit(1 if f else 0)
PY
py=$?
[ $rc -eq 0 ] && [ $py -eq 0 ]
