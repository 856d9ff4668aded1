#!/usr/bin/env bash
# run_fuzz.sh SECONDS — builds tests/gateway_proto/fuzz_protocol.c with clang's
# libFuzzer + ASan + UBSan (protocol.c and the engine files it needs compiled
# in directly, jansson linked) and fuzzes the /v1/stream parser for SECONDS.
# Exit: 0 no finding, 1 finding (crash input left in $FUZZ_ARTIFACTS or the temp dir), 77 skipped.
set -u
secs=${1:-30}
here=$(cd "$(dirname "$0")" && pwd)
src=${SPECD_SRC:-$(cd "$here/../.." && pwd)}
cc=${FUZZ_CC:-}
if [ -z "$cc" ]; then
  for c in clang clang-14 clang-15 clang-16; do
    if command -v "$c" >/dev/null 2>&1; then cc=$c; break; fi
  done
fi
if [ -z "$cc" ]; then echo "SKIP: no clang found"; exit 77; fi
if ! jansson=$(pkg-config --cflags --libs jansson 2>/dev/null); then
  echo "SKIP: jansson not found by pkg-config"; exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/specd-fuzz-proto.XXXXXX")
keep=0
cleanup() { if [ "$keep" = 0 ]; then rm -rf "$work"; fi; }
trap cleanup EXIT

flags="-std=c17 -D_GNU_SOURCE -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all"
# Probe: is the libFuzzer runtime there at all? (A missing runtime is a skip, not a failure.)
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n){(void)d;(void)n;return 0;}\n' > "$work/probe.c"
if ! $cc $flags "$work/probe.c" -o "$work/probe" >/dev/null 2>&1; then
  echo "SKIP: $cc cannot link -fsanitize=fuzzer,address,undefined (install libclang-rt-14-dev)"
  exit 77
fi
# shellcheck disable=SC2086
if ! $cc $flags -Wall -Wextra -Wno-unused-parameter -I"$src" "$src/gateway/protocol.c" "$src/engine/sampler.c" \
    "$src/engine/rng.c" "$here/fuzz_protocol.c" -o "$work/fuzz_protocol" $jansson -lm; then
  echo "FAIL: fuzz target does not build"
  exit 1
fi

mkdir -p "$work/corpus"
cp "$here"/corpus/* "$work/corpus/" 2>/dev/null || true

art=${FUZZ_ARTIFACTS:-$work/artifacts}
mkdir -p "$art"
echo "fuzzing the /v1/stream parser for ${secs}s ($cc; corpus $(ls "$work/corpus" | wc -l) files)"
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
"$work/fuzz_protocol" -max_total_time="$secs" -rss_limit_mb=2048 -max_len=8192 -timeout=10 \
  -print_final_stats=1 -artifact_prefix="$art/" -dict="$here/protocol.dict" \
  "$work/corpus" > "$work/log" 2>&1
rc=$?
tail -n 25 "$work/log"
if [ $rc -ne 0 ]; then
  keep=1
  echo "FAIL: fuzzer finding (rc $rc); artifacts in $art, log in $work/log"
  exit 1
fi
echo "no findings"
exit 0
