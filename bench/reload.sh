#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Reload benchmark: the longest PING round trip another client sees while CONFIG RELOAD applies a
# file of LIMITS limits (bench/reload.c), for each MODE: the same file, every limit changed, every
# limit renamed. The server runs memory only on a loopback port and is stopped by PID.
#
# Usage: bench/reload.sh [PATH-TO-SLUICE] [PATH-TO-BENCH_RELOAD]
#        (defaults: build/sluice, build/bench_reload)
# Environment: LIMITS (200000), RELOADS (4 per mode), MODES ("same changed renamed"), IDLE (seconds
#              of pinging without a reload first, for comparison: 3), DURABLE (1: the server
#              keeps its store in a temporary directory, as `sluice serve` does by default; else
#              memory only).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
sluice=${1:-$here/../build/sluice}
bench=${2:-$here/../build/bench_reload}
limits=${LIMITS:-200000}
reloads=${RELOADS:-4}
idle=${IDLE:-3}
modes=${MODES:-same changed renamed}
tmp=$(mktemp -d)
pid=""

cleanup() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

for mode in $modes; do
  "$bench" --write "$tmp/big.yaml" --limits "$limits"
  rm -f "$tmp/port"
  store=(--durability none)
  [ "${DURABLE:-0}" = 1 ] && store=(--data "$tmp/data.$mode")
  "$sluice" serve --port 0 --bind 127.0.0.1 --port-file "$tmp/port" --log-level warn \
    "${store[@]}" --no-admin --config "$tmp/big.yaml" 2>"$tmp/sluice.log" &
  pid=$!
  for _ in $(seq 1 1200); do
    [ -s "$tmp/port" ] && break
    sleep 0.05
  done
  echo "mode=$mode"
  "$bench" --port "$(cat "$tmp/port")" --config "$tmp/big.yaml" --limits "$limits" \
    --reloads "$reloads" --mode "$mode" --idle "$idle"
  kill -TERM "$pid"
  wait "$pid" || true
  pid=""
done
