#!/usr/bin/env bash
# run_fuzz.sh SECONDS — builds tests/grammar/fuzz_grammar.c with clang's
# libFuzzer + ASan + UBSan (the grammar files, json_schema.c and the engine
# files they need compiled in directly, jansson linked) and fuzzes a
# request's grammar path (GBNF text, or a JSON Schema made GBNF) for SECONDS,
# with a per-input ceiling of 5 s and 1 GiB: a slow or large input is a
# finding. Prints the executions, the slowest input and the peak RSS.
# Exit: 0 no finding, 1 finding (input left in $FUZZ_ARTIFACTS or the temp dir), 77 skipped.
set -u
. "$(dirname "$0")/../libfuzzer.sh"
if ! jansson=$(pkg-config --cflags --libs jansson 2>/dev/null); then
  echo "SKIP: jansson not found by pkg-config"; exit 77
fi
fuzz_setup "$(dirname "$0")" grammar
# shellcheck disable=SC2086
fuzz_build fuzz_grammar -D_GNU_SOURCE -Wno-unused-parameter "$src/gateway/json_schema.c" "$src/gateway/json_range.c" "$src/gateway/json_regex.c" \
  "$src/engine/grammar/grammar_parse.c" "$src/engine/grammar/grammar_vocab.c" "$src/engine/grammar/grammar_match.c" "$src/engine/grammar/grammar_mask.c" \
  "$src/engine/tokenizer/tokenizer.c" "$src/engine/tokenizer/tok_load.c" "$src/engine/tokenizer/tok_spm.c" "$src/engine/tokenizer/tok_bpe.c" "$src/engine/tokenizer/tok_pretok.c" \
  "$src/engine/tokenizer/tok_decode.c" "$src/engine/tokenizer/unicode_tables.c" "$src/engine/gguf/gguf_read.c" "$src/kernels/ggml_type.c" \
  "$here/fuzz_grammar.c" $jansson -lm
FUZZ_TIMEOUT=5 FUZZ_RSS_MB=1024 fuzz_run fuzz_grammar "${1:-30}" 16384 grammar.dict "the grammar and JSON Schema compilers"
