#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Several nodes on one Redis (docs/cluster.md): THROTTLE through three `sluice serve --store
# redis://...` nodes sharing one redis-server, against the naive design where every decision is
# its own EVALSHA of a GCRA script (bench/gcra.lua, as bench/server.sh runs it). Same limit
# (1000/s, burst 1000, keys random over 1M), same total of 50 clients (split over the three nodes
# for sluice), pipelines of 1 and 16, RUNS runs interleaved, medians. Throughput is requests over
# the wall time of the whole group (the three redis-benchmarks of sluice run at once); Redis CPU
# per decision is the growth of redis-server's used_cpu_sys + used_cpu_user over a run divided by
# its requests, the cost the shared Redis pays (the node's batching divides it).
#
# Usage: bench/cluster.sh [PATH-TO-SLUICE]      (default: build/sluice)
# Environment: RUNS (3), N1 (requests per run at -P 1, 150000), N16 (at -P 16, 1500000),
#              CLIENTS (50).
# Needs redis-server and redis-benchmark (Debian: redis-server, redis-tools).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
sluice=${1:-$here/../build/sluice}
runs=${RUNS:-3}
n1=${N1:-150000}
n16=${N16:-1500000}
clients=${CLIENTS:-50}
tmp=$(mktemp -d)
bench=bench/cluster.sh
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
bench_need redis-server redis-benchmark redis-cli
bench_need_sluice "$sluice"

bench_start_redis
cat >"$tmp/sluice.yaml" <<'EOF'
limits:
  bench: {rate: 1000/1s, burst: 1000, key: explicit, max_keys: 4000000}
EOF
nports=()
for n in 1 2 3; do
  "$sluice" serve --port 0 --bind 127.0.0.1 --port-file "$tmp/n$n.port" --log-level warn \
    --no-admin --config "$tmp/sluice.yaml" --store "redis://127.0.0.1:$rport" \
    2>"$tmp/n$n.log" &
  pids+=($!)
done
for n in 1 2 3; do
  for _ in $(seq 1 200); do
    [ -s "$tmp/n$n.port" ] && break
    sleep 0.05
  done
  nports+=("$(cat "$tmp/n$n.port")")
done
sha=$(redis-cli -p "$rport" SCRIPT LOAD "$(cat "$here/gcra.lua")")

redis_cpu() {
  redis-cli -p "$rport" INFO cpu | tr -d '\r' |
    awk -F: '$1 == "used_cpu_sys" || $1 == "used_cpu_user" { s += $2 } END { printf "%.6f", s }'
}

# group PIPELINE N PORT...: runs one redis-benchmark per port at once, CLIENTS and N split
# between them, with the command in $cmd; prints "requests/s redis-cpu-us-per-request".
group() {
  local pipeline=$1 n=$2 k i c0 c1 t0 t1
  shift 2
  k=$#
  c0=$(redis_cpu)
  t0=$(date +%s%N)
  i=0
  for port in "$@"; do
    # shellcheck disable=SC2086 # the command is split into its words on purpose
    redis-benchmark -h 127.0.0.1 -p "$port" -c $(((clients + k - 1 - i) / k)) -n $((n / k)) \
      -P "$pipeline" -r 1000000 -q $cmd >/dev/null 2>&1 &
    i=$((i + 1))
  done
  wait $(jobs -p | grep -v -x -F "$(printf '%s\n' "${pids[@]}")") 2>/dev/null || true
  t1=$(date +%s%N)
  c1=$(redis_cpu)
  awk -v n="$n" -v k="$k" -v t0="$t0" -v t1="$t1" -v c0="$c0" -v c1="$c1" \
    'BEGIN { req = int(n / k) * k; printf "%.0f %.2f\n", req / ((t1 - t0) / 1e9), (c1 - c0) * 1e6 / req }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "sluice $("$sluice" --version | cut -d' ' -f2), $(redis-server --version | cut -d' ' -f1-3)," \
  "$(nproc) CPUs; $clients clients in all, -r 1000000, $runs runs, medians"
names=("naive: EVALSHA gcra.lua per decision" "sluice: 3 nodes, --store redis")
for pipeline in 1 16; do
  n=$n1
  [ "$pipeline" = 16 ] && n=$n16
  : >"$tmp/r.$pipeline.0"
  : >"$tmp/r.$pipeline.1"
  for run in $(seq 1 "$runs"); do
    cmd="EVALSHA $sha 1 key:__rand_int__ 1000 1000 1000 1"
    group "$pipeline" "$n" "$rport" >>"$tmp/r.$pipeline.0"
    cmd="THROTTLE bench key:__rand_int__"
    group "$pipeline" "$n" "${nports[@]}" >>"$tmp/r.$pipeline.1"
    printf '.' >&2
  done
  printf '\n' >&2
  for i in 0 1; do
    cut -d' ' -f1 "$tmp/r.$pipeline.$i" | median >"$tmp/m.$pipeline.$i"
    cut -d' ' -f2 "$tmp/r.$pipeline.$i" | median >"$tmp/c.$pipeline.$i"
  done
done
calls=$(redis-cli -p "${nports[0]}" INFO store | tr -d '\r' | awk -F: '$1 == "store_batches" { b = $2 } $1 == "store_requests" { r = $2 } END { if (b) printf "%.1f", r / b }')

printf '%-40s %12s %12s %14s %14s\n' "" "req/s -P 1" "req/s -P 16" "redis us -P 1" "redis us -P 16"
for i in 0 1; do
  printf '%-40s %12.0f %12.0f %14.2f %14.2f\n' "${names[$i]}" "$(cat "$tmp/m.1.$i")" \
    "$(cat "$tmp/m.16.$i")" "$(cat "$tmp/c.1.$i")" "$(cat "$tmp/c.16.$i")"
done
ratio() { awk -v a="$(cat "$tmp/$1")" -v b="$(cat "$tmp/$2")" 'BEGIN { printf "%.2f", a / b }'; }
echo
printf '%-40s %8s %8s\n' "" "-P 1" "-P 16"
printf '%-40s %8s %8s   (goal >= 2)\n' "throughput: sluice 3 nodes / naive" \
  "$(ratio m.1.1 m.1.0)" "$(ratio m.16.1 m.16.0)"
printf '%-40s %8s %8s   (goal well below 1)\n' "Redis CPU per decision: sluice / naive" \
  "$(ratio c.1.1 c.1.0)" "$(ratio c.16.1 c.16.0)"
echo "decisions per script call (node 1, whole run): $calls"
