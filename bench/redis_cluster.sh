#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Hot shards on Redis Cluster (docs/cluster.md, "On Redis Cluster"): THROTTLE through three
# `sluice serve --store redis-cluster://...` nodes on a 3-master Cluster, keys random over 1M
# (spread over every master) against one hot key (one master does all the work), and the same
# spread keys through three nodes on one standalone Redis for reference. Same limit (1000/s,
# burst 1000), 50 clients split over the three nodes, pipelines of 16, one run each: a rough
# figure of what a hot key costs, not a precise one.
#
# Usage: bench/redis_cluster.sh [PATH-TO-SLUICE]      (default: build/sluice)
# Environment: N (requests per run, 600000), CLIENTS (50).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
sluice=${1:-$here/../build/sluice}
n=${N:-600000}
clients=${CLIENTS:-50}
tmp=$(mktemp -d)
bench=bench/redis_cluster.sh
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
bench_need redis-server redis-benchmark redis-cli
bench_need_sluice "$sluice"

# A port whose cluster bus port (+10000) is free too.
master_port() {
  local p
  for _ in $(seq 1 100); do
    p=$((20000 + RANDOM % 10000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null &&
      ! (exec 3<>"/dev/tcp/127.0.0.1/$((p + 10000))") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  exit 1
}

masters=()
for m in 1 2 3; do
  p=$(master_port)
  mkdir -p "$tmp/m$m"
  redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    --loglevel warning --dir "$tmp/m$m" --cluster-enabled yes --cluster-config-file nodes.conf \
    --cluster-node-timeout 2000 >"$tmp/m$m.log" 2>&1 &
  pids+=($!)
  masters+=("$p")
done
for p in "${masters[@]}"; do
  for _ in $(seq 1 200); do redis-cli -p "$p" PING >/dev/null 2>&1 && break; sleep 0.05; done
done
redis-cli --cluster create "127.0.0.1:${masters[0]}" "127.0.0.1:${masters[1]}" \
  "127.0.0.1:${masters[2]}" --cluster-replicas 0 --cluster-yes >/dev/null
for _ in $(seq 1 200); do
  ok=1
  for p in "${masters[@]}"; do
    redis-cli -p "$p" CLUSTER INFO | grep -q 'cluster_state:ok' || ok=0
  done
  [ $ok = 1 ] && break
  sleep 0.1
done
bench_start_redis

cat >"$tmp/sluice.yaml" <<'EOF'
limits:
  bench: {rate: 1000/1s, burst: 1000, key: explicit, max_keys: 4000000}
EOF
# nodes NAME URL: three nodes on URL; their ports in nports.
nodes() {
  local name=$1 url=$2 i
  nports=()
  for i in 1 2 3; do
    "$sluice" serve --port 0 --bind 127.0.0.1 --port-file "$tmp/$name$i.port" --log-level warn \
      --no-admin --config "$tmp/sluice.yaml" --store "$url" 2>"$tmp/$name$i.log" &
    pids+=($!)
  done
  for i in 1 2 3; do
    for _ in $(seq 1 200); do [ -s "$tmp/$name$i.port" ] && break; sleep 0.05; done
    nports+=("$(cat "$tmp/$name$i.port")")
  done
}

# group: one redis-benchmark per node at once with $cmd; prints requests/s over the wall time.
group() {
  local k=${#nports[@]} i=0 t0 t1 bpids=()
  t0=$(date +%s%N)
  for port in "${nports[@]}"; do
    # shellcheck disable=SC2086 # the command is split into its words on purpose
    redis-benchmark -h 127.0.0.1 -p "$port" -c $(((clients + k - 1 - i) / k)) -n $((n / k)) \
      -P 16 -r 1000000 -q $cmd >/dev/null 2>&1 &
    bpids+=($!)
    i=$((i + 1))
  done
  wait "${bpids[@]}"
  t1=$(date +%s%N)
  awk -v n="$n" -v k="$k" -v t0="$t0" -v t1="$t1" \
    'BEGIN { printf "%.0f", int(n / k) * k / ((t1 - t0) / 1e9) }'
}

nodes c "redis-cluster://127.0.0.1:${masters[0]}"
cmd="THROTTLE bench key:__rand_int__"
spread=$(group)
cmd="THROTTLE bench hot"
hot=$(group)
calls=$(redis-cli -p "${nports[0]}" INFO store | tr -d '\r' | awk -F: '$1 == "store_batches" { print $2 }')
reqs=$(redis-cli -p "${nports[0]}" INFO store | tr -d '\r' | awk -F: '$1 == "store_requests" { print $2 }')
nodes s "redis://127.0.0.1:$rport"
cmd="THROTTLE bench key:__rand_int__"
single=$(group)
echo "# bench/redis_cluster.sh: THROTTLE, 3 nodes, $clients clients, -P 16, $n requests a run"
echo "| store | keys | decisions/s |"
echo "|---|---|---|"
echo "| Redis Cluster, 3 masters | random over 1M | $spread |"
echo "| Redis Cluster, 3 masters | one hot key | $hot |"
echo "| one standalone Redis | random over 1M | $single |"
echo "# cluster node 1: $reqs decisions in $calls script calls"
