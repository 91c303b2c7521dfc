#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Python client's tests (clients/python/tests/test_client.py, unittest) against a real
# `sluice serve`: started here on a free loopback port (--port 0 --port-file) in a temp data
# directory with sluice-test.yaml, stopped by its PID on exit. Runs with Debian's
# /usr/bin/python3 and python3-redis (installed when missing, as root), as CI does.
#
# Usage: bash clients/python/tests/run.sh PATH-TO-SLUICE SOURCE-DIR
set -u

sluice=${1:?usage: run.sh PATH-TO-SLUICE SOURCE-DIR}
src=${2:?usage: run.sh PATH-TO-SLUICE SOURCE-DIR}
py=/usr/bin/python3
here=$(cd "$src" && pwd)/clients/python
sluice=$(cd "$(dirname "$sluice")" && pwd)/$(basename "$sluice")

if ! "$py" -c 'import redis' 2>/dev/null; then
  if [ "$(id -u)" -eq 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-redis >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-redis >/dev/null; }
  fi
  "$py" -c 'import redis' || { echo "run.sh: python3-redis is missing (scripts/deps.sh)"; exit 1; }
fi

tmp=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

"$sluice" serve --port 0 --port-file "$tmp/port" --no-admin --data "$tmp/data" \
  --durability none --config "$here/tests/sluice-test.yaml" --log-level warn \
  2>"$tmp/server.log" &
pid=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
if ! [ -s "$tmp/port" ]; then
  echo "run.sh: the server did not start"; cat "$tmp/server.log"; exit 1
fi

SLUICE_PORT=$(cat "$tmp/port") SLUICE_TMP=$tmp SLUICE_BIN=$sluice PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH} \
  "$py" -m unittest discover -s "$here/tests" -p 'test_*.py' -v
rc=$?
if ! kill -0 "$pid" 2>/dev/null; then
  echo "run.sh: the server died"; cat "$tmp/server.log"; rc=1
fi
exit $rc
