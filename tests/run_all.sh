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
TSAN=${SPECD_TSAN_BUILD:-build-tsan}
ASAN=${SPECD_ASAN_BUILD:-build-asan}
ARM=${SPECD_ARM_BUILD:-build-arm}
JOBS=${SPECD_TEST_JOBS:-2}
phase() { echo "== $(( $(date +%s) - t_start )) s: $*"; }

# The ThreadSanitizer, AddressSanitizer and aarch64 builds (below, what each is
# for) run in the background from the start, one after the other, at idle CPU
# priority (SCHED_IDLE, else nice 19): they take only the CPU that the main
# build and the main tests leave unused (a test waiting on a server, a step
# that runs alone), and all of it once nothing else runs. Each build's output
# goes to ci-build.log in its folder and its exit status to ci-build.rc; the
# step that needs a build waits for its ci-build.rc and prints the log.
bg_builds() {
  chrt --idle -p 0 $BASHPID >/dev/null 2>&1 || renice -n 19 -p $BASHPID >/dev/null 2>&1
  if [ "${SPECD_TSAN:-1}" != 0 ]; then
    rm -f "$TSAN/ci-build.rc"
    mkdir -p "$TSAN"
    {
      # CUDA off here: the main build already compiles and links it
      { [ -f "$TSAN/build.ninja" ] || meson setup "$TSAN" -Db_sanitize=thread -Dcuda=disabled \
          --buildtype=debugoptimized; } &&
        ninja -C "$TSAN" -j "$JOBS" $(cd tests/engine && ls test_engine_*.c | sed 's|^|tests/engine/|; s|\.c$||')
      echo $? > "$TSAN/ci-build.rc.tmp"
    } > "$TSAN/ci-build.log" 2>&1
    mv "$TSAN/ci-build.rc.tmp" "$TSAN/ci-build.rc"
  fi
  if [ "${SPECD_ASAN:-1}" != 0 ]; then
    rm -f "$ASAN/ci-build.rc"
    mkdir -p "$ASAN"
    {
      { [ -f "$ASAN/build.ninja" ] || meson setup "$ASAN" -Db_sanitize=address,undefined -Db_lundef=false \
          -Dcuda=disabled --buildtype=debugoptimized; } &&
        ninja -C "$ASAN" -j "$JOBS" cli/specd tests/engine/test_engine_prefix tests/spec/test_spec_prefix_reset
      echo $? > "$ASAN/ci-build.rc.tmp"
    } > "$ASAN/ci-build.log" 2>&1
    mv "$ASAN/ci-build.rc.tmp" "$ASAN/ci-build.rc"
  fi
  if [ "${SPECD_ARM:-1}" != 0 ]; then
    rm -f "$ARM/ci-build.rc"
    mkdir -p "$ARM"
    {
      { [ -f "$ARM/build.ninja" ] || meson setup "$ARM" --cross-file cross/aarch64-linux-gnu.ini \
          -Dkernels_only=true -Dcuda=disabled; } &&
        ninja -C "$ARM" -j "$JOBS"
      echo $? > "$ARM/ci-build.rc.tmp"
    } > "$ARM/ci-build.log" 2>&1
    mv "$ARM/ci-build.rc.tmp" "$ARM/ci-build.rc"
  fi
}
# wait_build DIR: waits for DIR's background build, prints its log; 0 when it built
wait_build() {
  while [ ! -f "$1/ci-build.rc" ] && kill -0 "$bg_pid" 2>/dev/null; do sleep 1; done
  cat "$1/ci-build.log" 2>/dev/null
  [ "$(cat "$1/ci-build.rc" 2>/dev/null)" = 0 ]
}
for d in "$TSAN" "$ASAN" "$ARM"; do rm -f "$d/ci-build.rc" "$d/ci-build.rc.tmp"; done
kill_tree() { local c; for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do kill_tree "$c"; done; kill "$1" 2>/dev/null; }
bg_builds &
bg_pid=$!
trap 'kill_tree $bg_pid' EXIT

phase "main build ($BUILD)"
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" --buildtype=release >/dev/null || { echo "0 passed, 1 failed"; exit 1; }
fi
ninja -C "$BUILD" || { echo "0 passed, 1 failed"; exit 1; }
phase "main tests ($JOBS processes)"
meson test -C "$BUILD" --num-processes "$JOBS" --print-errorlogs "$@"
rc=$?
# ThreadSanitizer: the engine suite (engine thread + API under concurrent
# readers) in its own build dir; only its test binaries are built. Any TSan
# report fails the test (exit 66). SPECD_TSAN=0 skips this step.
tsan_log=""
if [ "${SPECD_TSAN:-1}" != 0 ]; then
  phase "TSan build ($TSAN)"
  tsan_log="$TSAN/meson-logs/testlog.json"
  rm -f "$tsan_log"
  if wait_build "$TSAN"; then
    phase "TSan tests"
    TSAN_OPTIONS="exitcode=66 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
      meson test -C "$TSAN" --no-rebuild --suite engine --num-processes "$JOBS" \
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
asan_log=""
if [ "${SPECD_ASAN:-1}" != 0 ]; then
  phase "ASan build ($ASAN)"
  asan_log="$ASAN/meson-logs/testlog.json"
  rm -f "$asan_log"
  if wait_build "$ASAN"; then
    phase "ASan tests"
    UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1 ${UBSAN_OPTIONS:-}" \
      meson test -C "$ASAN" --no-rebuild --num-processes "$JOBS" --timeout-multiplier 3 \
      --print-errorlogs bad_input hardening hardening3 guards untrusted_input ws_stream choices engine_prefix spec_prefix_reset all_proposers grammar_limits
  fi
  [ -f "$asan_log" ] || asan_log="BUILD-FAILED"
fi
# aarch64: the kernels and their tests cross-built with Debian's gcc
# (cross/aarch64-linux-gnu.ini, -Dkernels_only=true) and run under qemu-user
# (about 2 minutes). SPECD_ARM=0 skips this step.
arm_log=""
if [ "${SPECD_ARM:-1}" != 0 ]; then
  phase "aarch64 build ($ARM)"
  arm_log="$ARM/meson-logs/testlog.json"
  rm -f "$arm_log"
  if wait_build "$ARM" >/dev/null; then
    phase "aarch64 tests (qemu-user)"
    meson test -C "$ARM" --no-rebuild --num-processes "$JOBS" --timeout-multiplier 5 --print-errorlogs
  else
    tail -n 40 "$ARM/ci-build.log"
  fi
  [ -f "$arm_log" ] || arm_log="BUILD-FAILED"
fi
wait $bg_pid 2>/dev/null
phase "done"
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
