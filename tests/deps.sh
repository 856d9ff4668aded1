#!/usr/bin/env bash
# deps.sh — what the tests need on Debian 12, on top of what building and
# serving need (deploy/deps.sh, run first): clang + its sanitizer runtime (the
# fuzz and sanitizer builds), python3 with numpy/scipy/websockets/jsonschema/
# regex (reference and statistical tests; regex for the pre-tokenizer
# reference tests/tokenizer/pretok_ref.py), nodejs + npm + chromium (the
# browser tests; `npm ci` then fetches playwright-core, the openai client, zod
# and ws), nginx + prometheus (promtool) + curl (tests/deploy), openssl (test
# certificates for TLS), gcc-aarch64-linux-gnu + qemu-user (the aarch64 kernel
# tests). nginx and prometheus are installed without starting
# their services (a policy-rc.d refuses service starts during this apt run),
# so nothing starts listening on ports 80 and 9090. Uses sudo when not root.
set -euo pipefail
bash "$(dirname "$0")/../deploy/deps.sh"
pkgs=(clang libclang-rt-14-dev
      python3 python3-numpy python3-scipy python3-websockets python3-jsonschema python3-regex python3-jinja2
      nodejs npm chromium
      curl nginx prometheus openssl
      gcc-aarch64-linux-gnu qemu-user)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm: NodeSource's nodejs bundles it (and conflicts with Debian's npm package)
if command -v npm >/dev/null; then
  missing=("${missing[@]/npm}")
fi
read -r -a missing <<< "${missing[*]}"
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "deps (tests): installing ${missing[*]}"
  rc_d=/usr/sbin/policy-rc.d
  if [ ! -e "$rc_d" ]; then
    printf '#!/bin/sh\n# tests/deps.sh: no service starts while it installs test tools\nexit 101\n' | $SUDO tee "$rc_d" >/dev/null
    $SUDO chmod 755 "$rc_d"
    trap '$SUDO rm -f "$rc_d"' EXIT
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
