#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The HTTP decision API (docs/http.md) from a Node.js client that uses nothing but the platform:
# the global fetch (undici) and node:test, no npm package. Starts `sluice serve` with a password
# on ephemeral ports in a temp dir, runs tests/server/http_fetch.test.mjs against its admin
# port, and stops the server by its PID. The server's log is printed when a test fails.
#
# Usage: bash tests/server/http_fetch.sh PATH-TO-SLUICE SOURCE-DIR
# Exits non-zero on any failure; 0 with a note when node (>= 18, for fetch) is not installed.
set -euo pipefail

sluice=${1:?usage: http_fetch.sh PATH-TO-SLUICE SOURCE-DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if ! command -v node >/dev/null 2>&1 || ! node -e 'process.exit(typeof fetch === "function" ? 0 : 1)'; then
  echo "http_fetch.sh: node with a global fetch (>= 18) is not installed: skipped"
  exit 0
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

cat >"$tmp/sluice.yaml" <<'YAML'
limits:
  api:
    rate: 3/1h
    key: explicit
  tenant:
    rate: 100/1h
    key: input.tenant
types:
  sync:
    limits: [tenant]
YAML

"$sluice" serve --port 0 --port-file "$tmp/port" --admin-port 0 --admin-port-file "$tmp/admin" \
  --data "$tmp/data" --config "$tmp/sluice.yaml" --requirepass fetch-secret --log-level warn \
  2>"$tmp/server.log" &
pid=$!
for _ in $(seq 300); do
  [ -s "$tmp/admin" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$tmp/server.log" >&2; exit 1; }
  sleep 0.02
done
[ -s "$tmp/admin" ] || { echo "the server did not start" >&2; cat "$tmp/server.log" >&2; exit 1; }

export SLUICE_HTTP="http://127.0.0.1:$(cat "$tmp/admin")"
export SLUICE_PASSWORD=fetch-secret
rc=0
node --test --test-concurrency=1 --test-reporter=spec "$here/http_fetch.test.mjs" || rc=$?
if [ "$rc" -ne 0 ]; then
  echo "---- server log" >&2
  cat "$tmp/server.log" >&2
fi
exit "$rc"
