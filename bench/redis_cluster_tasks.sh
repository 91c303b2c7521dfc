#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The task queue on Redis Cluster against the same queue on one standalone Redis
# (docs/cluster.md, "On Redis Cluster"): three `sluice serve --store redis-cluster://...` nodes on
# a 3-master Cluster and three `--store redis://...` nodes on one redis-server, the same
# bench_taskload (CLIENTS connections spread over the three nodes of a set, JOBS jobs each: put
# them all, then reserve and ack them all; it checks that every job comes back exactly once),
# at pipeline depths 1 and 16. RUNS runs, the two sets interleaved in each, medians of jobs/s.
# On a Cluster the queue lives in one slot, so one master does the queue's work: expect about
# the standalone's figures, not three times them.
#
# Usage: bench/redis_cluster_tasks.sh [BUILD-DIR]      (default: build; needs sluice and
#        bench_taskload there)
# Environment: CLIENTS (30), JOBS (100 per client), RUNS (3), DEPTHS ("1 16").
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
clients=${CLIENTS:-30}
jobs=${JOBS:-100}
runs=${RUNS:-3}
depths=${DEPTHS:-1 16}
tmp=$(mktemp -d)
bench=bench/redis_cluster_tasks.sh
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
bench_need redis-server redis-cli
bench_need_sluice "$build/sluice"
[ -x "$build/bench_taskload" ] || {
  echo "$bench: no bench_taskload in $build (run make build)" >&2
  exit 1
}
bench_start_cluster
bench_start_redis

printf 'types:\n  bench: {}\n' >"$tmp/sluice.yaml"
# nodes NAME URL: three nodes on URL; their ports, comma-separated, in ports_NAME.
nodes() {
  local name=$1 url=$2 i list=""
  for i in 1 2 3; do
    "$build/sluice" serve --port 0 --bind 127.0.0.1 --port-file "$tmp/$name$i.port" \
      --log-level warn --no-admin --config "$tmp/sluice.yaml" --store "$url" \
      2>"$tmp/$name$i.log" &
    pids+=($!)
  done
  for i in 1 2 3; do
    for _ in $(seq 1 200); do [ -s "$tmp/$name$i.port" ] && break; sleep 0.05; done
    list="$list${list:+,}$(cat "$tmp/$name$i.port")"
  done
  printf -v "ports_$name" '%s' "$list"
}
nodes cluster "redis-cluster://127.0.0.1:${masters[0]},127.0.0.1:${masters[1]}"
nodes redis "redis://127.0.0.1:$rport"

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

for run in $(seq 1 "$runs"); do
  for depth in $depths; do
    for set in redis cluster; do
      ports_var="ports_$set"
      out=$("$build/bench_taskload" --proto resp --port "${!ports_var}" -c "$clients" -n "$jobs" \
        -P "$depth" --type bench)
      if grep -q 'errors=[1-9]\|duplicates=[1-9]\|missing=[1-9]' <<<"$out"; then
        echo "$bench: $set -P $depth: $out" >&2
        exit 1
      fi
      awk -v s="$set" -v d="$depth" '{ for (i = 1; i <= NF; i++) { split($i, kv, "=");
        f[kv[1]] = kv[2] } print s, d, f["phase"], f["ops_per_sec"] }' <<<"$out" >>"$tmp/results"
    done
  done
done

echo "# $bench: $clients clients over 3 nodes, $jobs jobs each, $runs runs, medians (jobs/s)"
printf '| store | -P | put | reserve+ack | put vs one Redis | reserve+ack vs one Redis |\n|---|---|---|---|---|---|\n'
for depth in $depths; do
  for set in redis cluster; do
    put=$(awk -v s="$set" -v d="$depth" '$1 == s && $2 == d && $3 == "put" { print $4 }' "$tmp/results" | median)
    con=$(awk -v s="$set" -v d="$depth" '$1 == s && $2 == d && $3 == "consume" { print $4 }' "$tmp/results" | median)
    if [ "$set" = redis ]; then
      rput=$put rcon=$con
    fi
    awk -v s="$set" -v d="$depth" -v p="$put" -v c="$con" -v rp="$rput" -v rc="$rcon" \
      'BEGIN { printf "| %s | %s | %.0f | %.0f | %.2fx | %.2fx |\n", (s == "redis" ? "one Redis" : "Redis Cluster, 3 masters"), d, p, c, p / rp, c / rc }'
  done
done
