# libfuzzer.sh — what the run_fuzz.sh scripts of tests/gguf, tests/policy and
# tests/gateway_proto share (sourced, not run): find clang, check that its
# libFuzzer + ASan + UBSan runtime links, build a target, seed the corpus from
# the area's committed corpus/, fuzz for a bounded time and report.
# Exit codes of the scripts: 0 no finding, 1 finding or build failure (the
# crash input stays in $FUZZ_ARTIFACTS or the temp dir), 77 skipped.

# fuzz_setup AREA_DIR NAME: sets here, src, cc, flags, work (temp dir removed
# at exit unless a finding keeps it) and work/corpus; exits 77 without clang or
# its fuzzer runtime.
fuzz_setup() {
  here=$(cd "$1" && pwd)
  src=${SPECD_SRC:-$(cd "$here/../.." && pwd)}
  cc=${FUZZ_CC:-}
  if [ -z "$cc" ]; then
    for c in clang clang-14 clang-15 clang-16; do
      if command -v "$c" >/dev/null 2>&1; then cc=$c; break; fi
    done
  fi
  if [ -z "$cc" ]; then echo "SKIP: no clang found"; exit 77; fi
  work=$(mktemp -d "${TMPDIR:-/tmp}/specd-fuzz-$2.XXXXXX")
  keep=0
  trap 'if [ "$keep" = 0 ]; then rm -rf "$work"; fi' EXIT
  flags="-std=c17 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all"
  # Probe: is the libFuzzer runtime there at all? (A missing runtime is a skip, not a failure.)
  printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n){(void)d;(void)n;return 0;}\n' > "$work/probe.c"
  if ! $cc $flags "$work/probe.c" -o "$work/probe" >/dev/null 2>&1; then
    echo "SKIP: $cc cannot link -fsanitize=fuzzer,address,undefined (install libclang-rt-14-dev)"
    exit 77
  fi
  mkdir -p "$work/corpus"
  cp "$here"/corpus/* "$work/corpus/" 2>/dev/null || true
}

# fuzz_build TARGET ARGS...: compiles ARGS (sources, extra flags, libraries)
# into $work/TARGET with the fuzzer flags; a target that does not build fails.
# Each source's object is kept in a cache shared by the fuzz tests
# ($FUZZ_OBJ_CACHE, else a folder in the temp dir), named by a hash of the
# compiler, the flags and the preprocessed source: the grammar, protocol and
# WebSocket targets compile mostly the same 20 files, once instead of three
# times (about 25 s of CPU each on a CI core).
fuzz_build() {
  local target=$1
  shift
  local cache=${FUZZ_OBJ_CACHE:-${TMPDIR:-/tmp}/specd-fuzz-objects-$(id -u)}
  mkdir -p "$cache"
  local a cflags=() srcs=() link=() objs=()
  for a in "$@"; do
    case $a in
      *.c) srcs+=("$a") ;;
      -D*|-W*|-I*) cflags+=("$a") ;;
      *) link+=("$a") ;;  # libraries and their flags (pkg-config output)
    esac
  done
  for a in "${srcs[@]}"; do
    local key o
    key=$( { echo "$cc $flags ${cflags[*]} $a"; $cc $flags -I"$src" "${cflags[@]}" -E "$a" 2>/dev/null; } |
           sha256sum | cut -c1-24)
    o="$cache/$(basename "$a" .c)-$key.o"
    if [ ! -f "$o" ]; then
      if ! $cc $flags -Wall -Wextra -I"$src" "${cflags[@]}" -c "$a" -o "$o.$$"; then
        rm -f "$o.$$"
        echo "FAIL: fuzz target does not build ($a)"
        exit 1
      fi
      mv -f "$o.$$" "$o"  # atomic: a test beside this one reads whole objects only
    fi
    objs+=("$o")
  done
  if ! $cc $flags "${objs[@]}" "${link[@]}" -o "$work/$target"; then
    echo "FAIL: fuzz target does not link"
    exit 1
  fi
}

# fuzz_run TARGET SECONDS MAX_LEN DICT WHAT: fuzzes and exits with the verdict
# (FUZZ_TIMEOUT: seconds one input may take, 10; FUZZ_RSS_MB: memory, 2048).
fuzz_run() {
  local target=$1 secs=$2 max_len=$3 dict=$4 what=$5
  art=${FUZZ_ARTIFACTS:-$work/artifacts}
  mkdir -p "$art"
  echo "fuzzing $what for ${secs}s ($cc; corpus $(ls "$work/corpus" | wc -l) files)"
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "$work/$target" -max_total_time="$secs" -rss_limit_mb="${FUZZ_RSS_MB:-2048}" -max_len="$max_len" -timeout="${FUZZ_TIMEOUT:-10}" \
    -print_final_stats=1 -artifact_prefix="$art/" -dict="$here/$dict" \
    "$work/corpus" > "$work/log" 2>&1
  local rc=$?
  tail -n 25 "$work/log"
  if [ $rc -ne 0 ]; then
    keep=1
    echo "FAIL: fuzzer finding (rc $rc); artifacts in $art, log in $work/log"
    exit 1
  fi
  echo "no findings"
  exit 0
}
