#!/usr/bin/env bash
# run_fuzz.sh SECONDS — builds tests/policy/fuzz_config.c with clang's libFuzzer +
# ASan + UBSan (linking libyaml) and fuzzes the config loader for SECONDS
# seconds, starting from the committed corpus plus the shipped config.yaml.
# Exit: 0 no finding, 1 finding (crash input left in $FUZZ_ARTIFACTS or the temp dir), 77 skipped.
set -u
. "$(dirname "$0")/../libfuzzer.sh"
fuzz_setup "$(dirname "$0")" config
yaml_libs=$(pkg-config --libs yaml-0.1 2>/dev/null || echo -lyaml)
# shellcheck disable=SC2086
fuzz_build fuzz_config -D_GNU_SOURCE "$src/policy/config.c" "$src/policy/config_load.c" "$src/policy/store.c" "$src/policy/suggest.c" "$here/fuzz_config.c" $yaml_libs -lpthread -lm
cp "$src/config.yaml" "$work/corpus/shipped.yaml" 2>/dev/null || true
fuzz_run fuzz_config "${1:-30}" 8192 config.dict "the config loader"
