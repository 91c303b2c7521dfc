#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Several nodes on one PostgreSQL (docs/cluster.md): keyed THROTTLE on ONE hot key through three
# `sluice serve --store postgresql://...` nodes, against the one-row-per-bucket design (seed
# 001's: one `UPDATE ... RETURNING` transaction per decision, driven by pgbench), side by side on
# one throwaway PostgreSQL with durable commits (fsync and synchronous_commit on for both, or
# SYNC=off for both). Same GCRA (10^6/s, burst 10^6, so the work is the decision, not a denial),
# same total of CLIENTS clients (split over the three nodes for sluice), RUNS runs interleaved,
# medians of decisions per second.
#
# Usage: bash bench/pg_cluster.sh [PATH-TO-SLUICE]   (default: build/sluice)
# Environment: RUNS (3), SECS (5, each naive run), N1 / N16 (requests per sluice run at -P 1 /
#              -P 16: 20000 / 200000), CLIENTS (50), SYNC (on), CONNS (--store-connections of
#              each node; unset: the default, and a build older than the option works; several
#              values, e.g. CONNS="1 4": one set of three nodes per value, each measured in
#              every run, side by side).
set -u

src=$(cd "$(dirname "$0")/.." && pwd)
sluice=${1:-$src/build/sluice}
runs=${RUNS:-3}
secs=${SECS:-5}
n1=${N1:-20000}
n16=${N16:-200000}
clients=${CLIENTS:-50}
sync=${SYNC:-on}
. "$src/tests/server/lib.bash"
[ -x "$sluice" ] || {
  echo "bench/pg_cluster.sh: $sluice is not built (cmake --build build)" >&2
  exit 1
}

read -ra sets <<<"${CONNS:-default}"
maxconn=$((clients + 20))
for c in "${sets[@]}"; do maxconn=$((maxconn + 6 * ${c/default/4})); done
bench_postgres -c max_connections=$maxconn
cat >"$tmp/sluice.yaml" <<'EOF'
limits:
  hot: {rate: 1000000/1s, burst: 1000000, key: explicit}
EOF
url="postgresql://sluice@127.0.0.1:$pgport_bench/postgres"
for c in "${sets[@]}"; do
  for n in 1 2 3; do
    opt=()
    [ "$c" = default ] || opt=(--store-connections "$c")
    node_conf=$tmp/sluice.yaml start_node "s${c}_$n" --store "$url" --store-timeout 30000 \
      --log-level warn "${opt[@]}"
  done
done
# The naive design: T = 1000 ns, burst 10^6 * T.
naive_buckets 1000000000000000

naive() {
  "$bin/pgbench" "$conn" -n -c "$clients" -j 2 -T "$secs" -f "$tmp/naive.sql" 2>&1 |
    awk '/^tps/ { printf "%.0f\n", $3 }'
}
# nodes SET PIPELINE N: one redis-benchmark per node of SET (a value of CONNS) at once, CLIENTS
# and N split between them; prints decisions per second over the wall time of the group.
nodes() {
  local set=$1 pipeline=$2 n=$3 k=3 i=0 t0 t1 bp=() p1="port_s$1_1" p2="port_s$1_2" p3="port_s$1_3"
  t0=$(date +%s%N)
  for port in "${!p1}" "${!p2}" "${!p3}"; do
    redis-benchmark -h 127.0.0.1 -p "$port" -c $(((clients + k - 1 - i) / k)) -n $((n / k)) \
      -P "$pipeline" -q THROTTLE hot hotkey >/dev/null 2>&1 &
    bp+=($!)
    i=$((i + 1))
  done
  wait "${bp[@]}"
  t1=$(date +%s%N)
  awk -v n="$n" -v t0="$t0" -v t1="$t1" 'BEGIN { printf "%.0f\n", int(n / 3) * 3 / ((t1 - t0) / 1e9) }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "sluice $("$sluice" --version | cut -d' ' -f2), PostgreSQL $("$bin/postgres" --version | awk '{ print $3 }')," \
  "$(nproc) CPUs; $clients clients, one hot key, synchronous_commit=$sync, $runs runs, medians"
: >"$tmp/naive"
for c in "${sets[@]}"; do : >"$tmp/p1_$c" && : >"$tmp/p16_$c"; done
for run in $(seq 1 "$runs"); do
  naive >>"$tmp/naive"
  for c in "${sets[@]}"; do
    nodes "$c" 1 "$n1" >>"$tmp/p1_$c"
    nodes "$c" 16 "$n16" >>"$tmp/p16_$c"
  done
  printf '.' >&2
done
printf '\n' >&2
m0=$(median <"$tmp/naive")
printf '%-60s %14s %8s\n' design decisions/s ratio
printf '%-60s %14.0f %8s\n' "naive: one UPDATE ... RETURNING per decision" "$m0" 1.00
calls=
for c in "${sets[@]}"; do
  m1=$(median <"$tmp/p1_$c")
  m16=$(median <"$tmp/p16_$c")
  label="sluice: 3 nodes, --store postgresql"
  [ "$c" = default ] || label="$label, $c conn"
  printf '%-60s %14.0f %8.2f\n' "$label, -P 1" "$m1" "$(awk -v a="$m1" -v b="$m0" 'BEGIN { print a / b }')"
  printf '%-60s %14.0f %8.2f\n' "$label, -P 16" "$m16" "$(awk -v a="$m16" -v b="$m0" 'BEGIN { print a / b }')"
  p="port_s${c}_1"
  calls="$calls $(redis-cli -p "${!p}" INFO store | tr -d '\r' | awk -F: '$1 == "store_batches" { b = $2 } $1 == "store_requests" { r = $2 } END { if (b) printf "%.1f", r / b }')"
done
echo "(goal: >= 5; decisions per call on each set's node 1, whole run:$calls)"
finish >/dev/null
