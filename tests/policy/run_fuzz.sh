#!/usr/bin/env bash
# run_fuzz.sh SECONDS — builds tests/policy/fuzz_config.c with clang's libFuzzer +
# ASan + UBSan (linking libyaml) and fuzzes the config loader for SECONDS
# seconds, starting from the committed corpus plus the shipped config.yaml.
# Exit: 0 no finding, 1 finding (crash input left in $FUZZ_ARTIFACTS or the temp dir), 77 skipped.
set -u
secs=${1:-60}
here=$(cd "$(dirname "$0")" && pwd)
src=${SPECD_SRC:-$(cd "$here/../.." && pwd)}
cc=${FUZZ_CC:-}
if [ -z "$cc" ]; then
  for c in clang clang-14 clang-15 clang-16; do
    if command -v "$c" >/dev/null 2>&1; then cc=$c; break; fi
  done
fi
if [ -z "$cc" ]; then echo "SKIP: no clang found"; exit 77; fi

work=$(mktemp -d "${TMPDIR:-/tmp}/specd-fuzz-config.XXXXXX")
keep=0
cleanup() { if [ "$keep" = 0 ]; then rm -rf "$work"; fi; }
trap cleanup EXIT

flags="-std=c17 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all"
# Probe: is the libFuzzer runtime there at all? (A missing runtime is a skip, not a failure.)
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n){(void)d;(void)n;return 0;}\n' > "$work/probe.c"
if ! $cc $flags "$work/probe.c" -o "$work/probe" >/dev/null 2>&1; then
  echo "SKIP: $cc cannot link -fsanitize=fuzzer,address,undefined (install libclang-rt-14-dev)"
  exit 77
fi
yaml_libs=$(pkg-config --libs yaml-0.1 2>/dev/null || echo -lyaml)
if ! $cc $flags -D_GNU_SOURCE -Wall -Wextra -I"$src" "$src/policy/config.c" "$here/fuzz_config.c" -o "$work/fuzz_config" \
    $yaml_libs -lpthread -lm; then
  echo "FAIL: fuzz target does not build"
  exit 1
fi

mkdir -p "$work/corpus"
cp "$here"/corpus/* "$work/corpus/" 2>/dev/null || true
cp "$src/config.yaml" "$work/corpus/shipped.yaml" 2>/dev/null || true

art=${FUZZ_ARTIFACTS:-$work/artifacts}
mkdir -p "$art"
echo "fuzzing the config loader for ${secs}s ($cc; corpus $(ls "$work/corpus" | wc -l) files)"
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
"$work/fuzz_config" -max_total_time="$secs" -rss_limit_mb=2048 -max_len=8192 -timeout=10 \
  -print_final_stats=1 -artifact_prefix="$art/" -dict="$here/config.dict" \
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
