#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The dashboard's browser tests: headless Debian chromium driven by playwright-core (node:test).
#
# Usage: bash tests/browser/run.sh PATH-TO-SLUICE SOURCE-DIR [node --test options...]
#
# Installs what is missing first: Debian's chromium (apt-get; no browser download from npm) and
# the pinned node modules (npm ci, from package-lock.json). Screenshots and logs go to
# $SLUICE_TEST_OUT (default: a temp dir, printed); the main screenshot is also copied to
# /tmp/sluice-dashboard.png. Exits non-zero on any failure.
set -euo pipefail

sluice=${1:?usage: run.sh PATH-TO-SLUICE SOURCE-DIR}
srcdir=${2:?usage: run.sh PATH-TO-SLUICE SOURCE-DIR}
shift 2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

sluice=$(cd "$(dirname "$sluice")" && pwd)/$(basename "$sluice")
srcdir=$(cd "$srcdir" && pwd)

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "browser tests: node and npm are needed (node >= 20)" >&2
  exit 1
fi

if [ ! -x /usr/bin/chromium ] && [ -z "${SLUICE_CHROMIUM:-}" ]; then
  echo "browser tests: installing Debian's chromium" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

if [ ! -d "$here/node_modules/playwright-core" ]; then
  echo "browser tests: npm ci" >&2
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
fi

export SLUICE_BIN=$sluice
export SLUICE_SOURCE_DIR=$srcdir
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
cd "$here"
exec node --test --test-concurrency=1 --test-reporter=spec "$@" dashboard.test.js mock.test.js
