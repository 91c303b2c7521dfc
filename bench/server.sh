#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Server benchmark: sluice's THROTTLE and CL.THROTTLE against Redis INCR (the cheapest useful
# Redis command) and against Redis running a GCRA Lua script with EVALSHA (bench/gcra.lua: how
# rate limiting is usually done on Redis), with the same redis-benchmark flags for all:
# 50 clients, pipelines of 1 and 16, keys random over 1M (-r 1000000, key:__rand_int__),
# RUNS runs each (interleaved, so background noise hits every target alike); prints the median
# requests per second and the ratios. Both servers run on loopback ports and are stopped by PID.
#
# Usage: bench/server.sh [PATH-TO-SLUICE]      (default: build/sluice)
# Environment: RUNS (5), N1 (requests per run at -P 1, 200000), N16 (at -P 16, 2000000),
#              CLIENTS (50).
# Needs redis-server and redis-benchmark (Debian: redis-server, redis-tools).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
sluice=${1:-$here/../build/sluice}
runs=${RUNS:-5}
n1=${N1:-200000}
n16=${N16:-2000000}
clients=${CLIENTS:-50}
tmp=$(mktemp -d)
bench=bench/server.sh
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
bench_need redis-server redis-benchmark redis-cli
bench_need_sluice "$sluice"

bench_start_redis
# Memory only, like the Redis it is compared with (--save '' --appendonly no).
"$sluice" serve --port 0 --bind 127.0.0.1 --port-file "$tmp/sluice.port" --log-level warn \
  --durability none --no-admin \
  2>"$tmp/sluice.log" &
pids+=($!)
for _ in $(seq 1 200); do
  [ -s "$tmp/sluice.port" ] && break
  sleep 0.05
done
sport=$(cat "$tmp/sluice.port")

sha=$(redis-cli -p "$rport" SCRIPT LOAD "$(cat "$here/gcra.lua")")
redis-cli -p "$sport" LIMIT.SET bench rate=1000/1s,burst=1000,key=explicit,max_keys=4000000 \
  >/dev/null

# The four targets: name, port, command (1000 per second per key, burst 1000 everywhere).
names=("redis INCR" "redis+lua GCRA" "sluice THROTTLE" "sluice CL.THROTTLE")
ports=("$rport" "$rport" "$sport" "$sport")
cmds=("INCR key:__rand_int__"
  "EVALSHA $sha 1 key:__rand_int__ 1000 1000 1000 1"
  "THROTTLE bench key:__rand_int__"
  "CL.THROTTLE key:__rand_int__ 999 1000 1")

# measure PORT PIPELINE N COMMAND...: requests per second of one redis-benchmark run.
measure() {
  local port=$1 pipeline=$2 n=$3
  shift 3
  redis-benchmark -h 127.0.0.1 -p "$port" -c "$clients" -n "$n" -P "$pipeline" -r 1000000 \
    --csv "$@" 2>/dev/null | tail -1 | cut -d, -f2 | tr -d '"'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "sluice $("$sluice" --version | cut -d' ' -f2), $(redis-server --version | cut -d' ' -f1-3)," \
  "$(nproc) CPUs; -c $clients -r 1000000, $runs runs, medians of requests/s"
for pipeline in 1 16; do
  n=$n1
  [ "$pipeline" = 16 ] && n=$n16
  for i in "${!names[@]}"; do : >"$tmp/r.$pipeline.$i"; done
  for run in $(seq 1 "$runs"); do
    for i in "${!names[@]}"; do
      # shellcheck disable=SC2086 # the command is split into its words on purpose
      measure "${ports[$i]}" "$pipeline" "$n" ${cmds[$i]} >>"$tmp/r.$pipeline.$i"
    done
    printf '.' >&2
  done
  printf '\n' >&2
  for i in "${!names[@]}"; do
    median <"$tmp/r.$pipeline.$i" >"$tmp/m.$pipeline.$i"
  done
done

printf '%-20s %14s %14s\n' "" "-P 1" "-P 16"
for i in "${!names[@]}"; do
  printf '%-20s %14.0f %14.0f\n' "${names[$i]}" "$(cat "$tmp/m.1.$i")" "$(cat "$tmp/m.16.$i")"
done
ratio() { awk -v a="$(cat "$tmp/m.$1.$2")" -v b="$(cat "$tmp/m.$1.$3")" 'BEGIN { printf "%.2f", a / b }'; }
echo
printf '%-36s %8s %8s\n' "ratio" "-P 1" "-P 16"
printf '%-36s %8s %8s   (goal >= 5)\n' "sluice THROTTLE / redis+lua GCRA" "$(ratio 1 2 1)" "$(ratio 16 2 1)"
printf '%-36s %8s %8s   (goal >= 0.8)\n' "sluice THROTTLE / redis INCR" "$(ratio 1 2 0)" "$(ratio 16 2 0)"
printf '%-36s %8s %8s\n' "sluice CL.THROTTLE / redis+lua GCRA" "$(ratio 1 3 1)" "$(ratio 16 3 1)"
printf '%-36s %8s %8s\n' "sluice CL.THROTTLE / redis INCR" "$(ratio 1 3 0)" "$(ratio 16 3 0)"
