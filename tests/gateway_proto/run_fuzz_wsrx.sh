#!/usr/bin/env bash
# run_fuzz_wsrx.sh SECONDS — builds tests/gateway_proto/fuzz_wsrx.c with clang's
# libFuzzer + ASan + UBSan (wsrx.c, protocol.c and the engine files protocol.c
# needs compiled in directly, jansson linked) and fuzzes the WebSocket receive
# path (frames, fragments, empty payloads, control frames, then gw_parse).
# Exit: 0 no finding, 1 finding (crash input left in $FUZZ_ARTIFACTS or the temp dir), 77 skipped.
set -u
. "$(dirname "$0")/../libfuzzer.sh"
if ! jansson=$(pkg-config --cflags --libs jansson 2>/dev/null); then
  echo "SKIP: jansson not found by pkg-config"; exit 77
fi
fuzz_setup "$(dirname "$0")" wsrx
# the stream seeds: a few hand-written frame sequences (the crash shapes)
printf '\x81\x80\x01\x02\x03\x04' > "$work/corpus/ws-empty-text"
printf '\x01\x80\x01\x02\x03\x04\x80\x80\x01\x02\x03\x04' > "$work/corpus/ws-empty-frag"
printf '\x89\x81\x00\x00\x00\x00x\x81\x80\x00\x00\x00\x00' > "$work/corpus/ws-ping-empty"
printf '\x81\x98\x00\x00\x00\x00{"type":"ping","id":"a"}' > "$work/corpus/ws-ping-msg"
printf '\x88\x81\x00\x00\x00\x00\x03' > "$work/corpus/ws-close-1byte"
# shellcheck disable=SC2086
fuzz_build fuzz_wsrx -D_GNU_SOURCE -Wno-unused-parameter "$src/gateway/wsrx.c" "$src/gateway/fields.c" "$src/gateway/penalty_fields.c" "$src/gateway/protocol.c" "$src/gateway/json_schema.c" "$src/gateway/json_range.c" "$src/gateway/json_regex.c" \
  "$src/engine/spec/spec_method.c" "$src/engine/engine_names.c" "$src/engine/grammar/grammar_parse.c" "$src/engine/grammar/grammar_vocab.c" "$src/engine/grammar/grammar_match.c" "$src/engine/grammar/grammar_mask.c" \
  "$src/engine/tokenizer/tokenizer.c" "$src/engine/tokenizer/tok_load.c" "$src/engine/tokenizer/tok_spm.c" "$src/engine/tokenizer/tok_bpe.c" "$src/engine/tokenizer/tok_pretok.c" "$src/engine/tokenizer/tok_decode.c" \
  "$src/engine/tokenizer/unicode_tables.c" "$src/engine/gguf/gguf_read.c" "$src/kernels/ggml_type.c" \
  "$src/engine/sample/sampler.c" "$src/engine/sample/rng.c" "$src/policy/suggest.c" "$here/fuzz_wsrx.c" $jansson -lm
fuzz_run fuzz_wsrx "${1:-30}" 8192 protocol.dict "the WebSocket receive path"
