#!/usr/bin/env bash
# deps.sh — the Debian 12 packages specd needs to build and to serve (compiler,
# meson, the four libraries, libcurl for `specd pull` / -hf, CA certificates
# for its downloads), nothing for the tests (tests/deps.sh adds those). Skips
# apt when everything is there; uses sudo when not root.
set -euo pipefail
pkgs=(build-essential meson ninja-build pkg-config
      libjansson-dev libwebsockets-dev libyaml-dev libsqlite3-dev libcurl4-openssl-dev ca-certificates)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
