#!/usr/bin/env bash
# run_all.sh — installs dependencies, builds specd and runs every test (unit,
# reference, statistical, sanitizer, bounded fuzzing). Ends with one line
# "N passed, N failed[, N skipped]" and exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
bash tests/deps.sh || { echo "0 passed, 1 failed"; exit 1; }
BUILD=${SPECD_TEST_BUILD:-build-test}
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" --buildtype=release >/dev/null || { echo "0 passed, 1 failed"; exit 1; }
fi
ninja -C "$BUILD" || { echo "0 passed, 1 failed"; exit 1; }
meson test -C "$BUILD" --num-processes "${SPECD_TEST_JOBS:-2}" --print-errorlogs "$@"
rc=$?
/usr/bin/python3 - "$BUILD/meson-logs/testlog.json" <<'PY'
import json, sys
p = f = s = 0
for line in open(sys.argv[1]):
    r = json.loads(line)["result"]
    if r in ("OK", "EXPECTEDFAIL"): p += 1
    elif r == "SKIP": s += 1
    else: f += 1
print(f"{p} passed, {f} failed" + (f", {s} skipped" if s else ""))
sys.exit(1 if f else 0)
PY
py=$?
[ $rc -eq 0 ] && [ $py -eq 0 ]
