#!/usr/bin/env bash
# Installs the Debian packages sluice needs to build, run and test, when any is missing.
# Idempotent and silent when everything is already there. Needs root (or sudo) to install.
set -euo pipefail

packages=(
  build-essential cmake pkg-config clang-format
  libyaml-dev libssl-dev libjansson-dev libuv1-dev libcmocka-dev
  libhiredis-dev redis-tools redis-server libxml2-utils libsqlite3-dev libmicrohttpd-dev curl jq
  chromium
  python3-redis
  postgresql libpq-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The browser test runs on Node.js: Debian's, unless a node is already on the PATH.
command -v node >/dev/null 2>&1 || missing+=(nodejs npm)
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
