#!/usr/bin/env bash
# deps.sh — installs the Debian 12 packages specd needs to build and test
# (skips apt when everything is already there). Uses sudo when not root.
set -euo pipefail
pkgs=(build-essential meson ninja-build pkg-config clang libclang-rt-14-dev
      libjansson-dev libwebsockets-dev libyaml-dev libsqlite3-dev
      python3 python3-numpy python3-scipy python3-websockets python3-jsonschema python3-regex
      nodejs chromium
      curl libcurl4-openssl-dev nginx prometheus openssl)
# python3-regex: the pre-tokenizer reference (tests/tokenizer/pretok_ref.py). libcurl: `specd pull` / -hf. nginx + prometheus (for promtool) + curl: tests/deploy.
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
# npm for the web tests' `npm ci` (NodeSource's nodejs bundles it; Debian's does not)
if ! command -v npm >/dev/null; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq npm
fi
