#!/usr/bin/env bash
# run_fuzz.sh SECONDS — builds tests/gguf/fuzz_gguf.c with clang's libFuzzer +
# ASan + UBSan and fuzzes the GGUF reader for SECONDS seconds, starting from the
# committed corpus plus header prefixes of the real models (when available).
# Exit: 0 no finding, 1 finding (crash input left in $FUZZ_ARTIFACTS or the temp dir), 77 skipped.
set -u
. "$(dirname "$0")/../libfuzzer.sh"
fuzz_setup "$(dirname "$0")" gguf
fuzz_build fuzz_gguf "$src/engine/gguf/gguf_read.c" "$src/kernels/ggml_type.c" "$here/fuzz_gguf.c"
# Seeds from the real models: their header regions (metadata + tensor infos)
# plus a little data, so mutations explore real layouts.
models=${SPECD_MODELS:-$src/../shared/models}
for m in "$models"/*.gguf; do
  [ -f "$m" ] || continue
  head -c 16384 "$m" > "$work/corpus/real-$(basename "$m").head"
done
fuzz_run fuzz_gguf "${1:-60}" 65536 gguf.dict "the GGUF reader"
