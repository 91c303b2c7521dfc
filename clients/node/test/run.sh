#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Node.js client's tests (node:test) against a real `sluice serve`.
#
# Usage: bash clients/node/test/run.sh PATH-TO-SLUICE SOURCE-DIR [node --test options...]
#
# Installs the pinned node modules when missing (npm ci, from package-lock.json), starts
# `sluice serve` on a free loopback port (--port 0 --port-file) in a temp dir with
# test/sluice-test.yaml, runs the tests, and stops the server by its PID. The server's log is
# printed when a test fails. Exits non-zero on any failure.
set -euo pipefail

sluice=${1:?usage: run.sh PATH-TO-SLUICE SOURCE-DIR}
srcdir=${2:?usage: run.sh PATH-TO-SLUICE SOURCE-DIR}
shift 2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pkg=$(dirname "$here")

sluice=$(cd "$(dirname "$sluice")" && pwd)/$(basename "$sluice")
srcdir=$(cd "$srcdir" && pwd)

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "client tests: node and npm are needed (node >= 20)" >&2
  exit 1
fi
if [ ! -d "$pkg/node_modules/ioredis" ]; then
  echo "client tests: npm ci" >&2
  (cd "$pkg" && npm ci --no-audit --no-fund --loglevel=error)
fi

tmp=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

"$sluice" serve --port 0 --port-file "$tmp/port" --no-admin --data "$tmp/data" \
  --config "$here/sluice-test.yaml" --log-level warn 2>"$tmp/server.log" &
pid=$!
for _ in $(seq 100); do
  [ -s "$tmp/port" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$tmp/server.log" >&2; exit 1; }
  sleep 0.1
done
[ -s "$tmp/port" ] || { echo "client tests: the server did not start" >&2; cat "$tmp/server.log" >&2; exit 1; }

export SLUICE_BIN=$sluice
export SLUICE_SOURCE_DIR=$srcdir
export SLUICE_PORT=$(cat "$tmp/port")
export SLUICE_PID=$pid
export SLUICE_TEST_TMP=$tmp
cd "$pkg"
rc=0
node --test --test-concurrency=1 --test-reporter=spec "$@" test/*.test.js || rc=$?
if [ "$rc" -ne 0 ]; then
  echo "---- server log" >&2
  cat "$tmp/server.log" >&2
fi
exit "$rc"
