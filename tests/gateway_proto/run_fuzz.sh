#!/usr/bin/env bash
# run_fuzz.sh SECONDS — builds tests/gateway_proto/fuzz_protocol.c with clang's
# libFuzzer + ASan + UBSan (protocol.c, json_schema.c and the engine files it needs compiled
# in directly, jansson linked) and fuzzes the /v1/stream parser for SECONDS.
# Exit: 0 no finding, 1 finding (crash input left in $FUZZ_ARTIFACTS or the temp dir), 77 skipped.
set -u
. "$(dirname "$0")/../libfuzzer.sh"
if ! jansson=$(pkg-config --cflags --libs jansson 2>/dev/null); then
  echo "SKIP: jansson not found by pkg-config"; exit 77
fi
fuzz_setup "$(dirname "$0")" proto
# shellcheck disable=SC2086
fuzz_build fuzz_protocol -D_GNU_SOURCE -Wno-unused-parameter "$src/gateway/fields.c" "$src/gateway/penalty_fields.c" "$src/gateway/protocol.c" "$src/gateway/json_schema.c" "$src/gateway/json_range.c" "$src/gateway/json_regex.c" "$src/engine/spec/spec_method.c" "$src/engine/engine_names.c" "$src/engine/grammar/grammar_parse.c" "$src/engine/grammar/grammar_vocab.c" "$src/engine/grammar/grammar_match.c" "$src/engine/grammar/grammar_mask.c" \
  "$src/engine/tokenizer/tokenizer.c" "$src/engine/tokenizer/tok_load.c" "$src/engine/tokenizer/tok_spm.c" "$src/engine/tokenizer/tok_bpe.c" "$src/engine/tokenizer/tok_pretok.c" "$src/engine/tokenizer/tok_decode.c" \
  "$src/engine/tokenizer/unicode_tables.c" "$src/engine/gguf/gguf_read.c" "$src/kernels/ggml_type.c" "$src/policy/suggest.c" "$src/engine/sample/sampler.c" \
  "$src/engine/sample/rng.c" "$here/fuzz_protocol.c" $jansson -lm
fuzz_run fuzz_protocol "${1:-30}" 8192 protocol.dict "the /v1/stream parser"
