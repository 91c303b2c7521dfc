#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Hot shards and batching on Redis Cluster (docs/cluster.md, "On Redis Cluster"): THROTTLE
# through three `sluice serve --store redis-cluster://...` nodes on a 3-master Cluster, keys
# random over 1M (spread over every master) against one hot key (one master does all the work),
# and the same spread keys through three nodes on one standalone Redis for reference. Same limit
# (1000/s, burst 1000), 50 clients split over the three nodes, pipelines of 16; RUNS runs
# interleaved, medians. With BASE set to another sluice binary (e.g. one built from an earlier
# commit), its three nodes on the same Cluster run the spread keys too, in the same runs: a side
# by side comparison on the same loaded machine. Redis CPU per decision is the growth of the
# masters' (or the standalone's) used_cpu_sys + used_cpu_user over a run divided by its requests.
#
# Usage: bench/redis_cluster.sh [PATH-TO-SLUICE]      (default: build/sluice)
# Environment: N (requests per run, 600000), CLIENTS (50), RUNS (3), BASE (a second binary).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
sluice=${1:-$here/../build/sluice}
n=${N:-600000}
clients=${CLIENTS:-50}
runs=${RUNS:-3}
base=${BASE:-}
tmp=$(mktemp -d)
bench=bench/redis_cluster.sh
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
bench_need redis-server redis-benchmark redis-cli
bench_need_sluice "$sluice"
[ -z "$base" ] || bench_need_sluice "$base"

bench_start_cluster
bench_start_redis

cat >"$tmp/sluice.yaml" <<'EOF'
limits:
  bench: {rate: 1000/1s, burst: 1000, key: explicit, max_keys: 4000000}
EOF
# nodes NAME URL [BINARY]: three nodes on URL; their ports in ports_NAME.
nodes() {
  local name=$1 url=$2 bin=${3:-$sluice} i
  local -n np="ports_$name"
  np=()
  for i in 1 2 3; do
    "$bin" serve --port 0 --bind 127.0.0.1 --port-file "$tmp/$name$i.port" --log-level warn \
      --no-admin --config "$tmp/sluice.yaml" --store "$url" 2>"$tmp/$name$i.log" &
    pids+=($!)
  done
  for i in 1 2 3; do
    for _ in $(seq 1 200); do [ -s "$tmp/$name$i.port" ] && break; sleep 0.05; done
    np+=("$(cat "$tmp/$name$i.port")")
  done
}

# cpu PORT...: the redis-servers' used_cpu_sys + used_cpu_user, summed.
cpu() {
  local p
  for p in "$@"; do
    redis-cli -p "$p" INFO cpu | tr -d '\r'
  done | awk -F: '$1 == "used_cpu_sys" || $1 == "used_cpu_user" { s += $2 } END { printf "%.6f", s }'
}

# calls PORT: node PORT's "script-calls decisions" so far.
calls() {
  redis-cli -p "$1" INFO store | tr -d '\r' |
    awk -F: '$1 == "store_batches" { b = $2 } $1 == "store_requests" { r = $2 } END { print b, r }'
}

# group NAME REDIS-PORTS: one redis-benchmark per node of NAME at once with $cmd; prints
# "requests/s redis-us-per-request decisions-per-call-of-node-1" over the wall time.
group() {
  local -n gp="ports_$1"
  local k=${#gp[@]} i=0 t0 t1 c0 c1 s0 s1 bpids=()
  s0=$(calls "${gp[0]}")
  c0=$(cpu $2)
  t0=$(date +%s%N)
  for port in "${gp[@]}"; do
    # shellcheck disable=SC2086 # the command is split into its words on purpose
    redis-benchmark -h 127.0.0.1 -p "$port" -c $(((clients + k - 1 - i) / k)) -n $((n / k)) \
      -P 16 -r 1000000 -q $cmd >/dev/null 2>&1 &
    bpids+=($!)
    i=$((i + 1))
  done
  wait "${bpids[@]}"
  t1=$(date +%s%N)
  c1=$(cpu $2)
  s1=$(calls "${gp[0]}")
  awk -v n="$n" -v k="$k" -v t0="$t0" -v t1="$t1" -v c0="$c0" -v c1="$c1" -v s0="$s0" -v s1="$s1" \
    'BEGIN { req = int(n / k) * k; split(s0, a, " "); split(s1, b, " ");
             printf "%.0f %.2f %.1f\n", req / ((t1 - t0) / 1e9), (c1 - c0) * 1e6 / req,
                    (b[2] - a[2]) / (b[1] - a[1] > 0 ? b[1] - a[1] : 1) }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

cluster_url="redis-cluster://127.0.0.1:${masters[0]}"
nodes c "$cluster_url"
[ -z "$base" ] || nodes b "$cluster_url" "$base"
nodes s "redis://127.0.0.1:$rport"
cases=(c:spread c:hot s:spread)
[ -z "$base" ] || cases=(b:spread "${cases[@]}")
for run in $(seq 1 "$runs"); do
  for cs in "${cases[@]}"; do
    name=${cs%%:*}
    keys=${cs#*:}
    cmd="THROTTLE bench key:__rand_int__"
    [ "$keys" = hot ] && cmd="THROTTLE bench hot"
    rp="${masters[*]}"
    [ "$name" = s ] && rp=$rport
    group "$name" "$rp" >>"$tmp/r.$name.$keys"
  done
  printf '.' >&2
done
printf '\n' >&2
row() {
  local name=$1 keys=$2 label=$3 what=$4
  printf '| %s | %s | %.0f | %.2f | %s |\n' "$label" "$what" \
    "$(cut -d' ' -f1 "$tmp/r.$name.$keys" | median)" \
    "$(cut -d' ' -f2 "$tmp/r.$name.$keys" | median)" "$(cut -d' ' -f3 "$tmp/r.$name.$keys" | median)"
}
echo "# bench/redis_cluster.sh: THROTTLE, 3 nodes, $clients clients, -P 16, $n requests a run," \
  "$runs runs, medians; $(redis-server --version | cut -d' ' -f1-3), $(nproc) CPUs"
echo "| store | keys | decisions/s | Redis us/decision | decisions per script call (node 1) |"
echo "|---|---|---|---|---|"
[ -z "$base" ] || row b spread "Redis Cluster, 3 masters, BASE ($("$base" --version | cut -d' ' -f2))" "random over 1M"
row c spread "Redis Cluster, 3 masters" "random over 1M"
row c hot "Redis Cluster, 3 masters" "one hot key"
row s spread "one standalone Redis" "random over 1M"
