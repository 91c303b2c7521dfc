#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The task queue on one PostgreSQL (docs/cluster.md): durable TASK.ADD, then TASK.GET + TASK.ACK,
# through three `sluice serve --store postgresql://...` nodes (bench_taskload, clients spread
# over the nodes, every job checked to come back exactly once), against the plain job queue on
# PostgreSQL that job libraries use: one transaction per job to add it (INSERT) and one to take
# and finish it (`DELETE ... WHERE id = (SELECT id ... FOR UPDATE SKIP LOCKED LIMIT 1)
# RETURNING`), driven by pgbench with the same clients. Side by side on one throwaway PostgreSQL
# with the same durability for both (fsync on; synchronous_commit SYNC, default on), RUNS runs
# interleaved, medians. A job's cost is its add plus its take-and-finish, so each design is
# reported as jobs per second through both phases: 1 / (1 / put rate + 1 / consume rate).
#
# Usage: bash bench/pg_tasks.sh [BUILD-DIR]   (default: build; needs sluice and bench_taskload)
# Environment: RUNS (3), CLIENTS (50), JOBS (jobs per client per run, 100), PIPELINE (1), SYNC (on),
#              CONNS (--store-connections of each node; unset: the default, and a build older
#              than the option works; several values, e.g. CONNS="1 4": one set of three nodes
#              per value, each measured in every run, side by side).
set -u

src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
sluice=$build/sluice
load=$build/bench_taskload
runs=${RUNS:-3}
clients=${CLIENTS:-50}
jobs=${JOBS:-100}
depth=${PIPELINE:-1}
sync=${SYNC:-on}
. "$src/tests/server/lib.bash"
for b in "$sluice" "$load"; do
  [ -x "$b" ] || {
    echo "bench/pg_tasks.sh: $b is not built (cmake -DSLUICE_TESTS=ON, cmake --build)" >&2
    exit 1
  }
done

read -ra sets <<<"${CONNS:-default}"
maxconn=$((clients + 20))
for c in "${sets[@]}"; do maxconn=$((maxconn + 6 * ${c/default/4})); done
bench_postgres -c max_connections=$maxconn
cat >"$tmp/sluice.yaml" <<'EOF'
types:
  bench: {lease: 60s}
EOF
url="postgresql://sluice@127.0.0.1:$pgport_bench/postgres"
for c in "${sets[@]}"; do
  for n in 1 2 3; do
    opt=()
    [ "$c" = default ] || opt=(--store-connections "$c")
    start_node "s${c}_$n" --store "$url" --store-timeout 30000 --log-level warn "${opt[@]}"
  done
done
"$bin/psql" "$conn" -q -c "CREATE TABLE naive_jobs (id bigserial PRIMARY KEY, payload text NOT NULL)"
cat >"$tmp/put.sql" <<'SQL'
INSERT INTO naive_jobs (payload) VALUES ('{"c":1,"s":1,"p":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}');
SQL
cat >"$tmp/take.sql" <<'SQL'
DELETE FROM naive_jobs WHERE id = (SELECT id FROM naive_jobs ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1)
 RETURNING id, payload;
SQL

# rate SCRIPT: transactions per second of CLIENTS pgbench clients, JOBS each.
rate() {
  "$bin/pgbench" "$conn" -n -c "$clients" -j 2 -t "$jobs" -f "$1" 2>&1 |
    awk '/^tps/ { printf "%.0f\n", $3 }'
}
both() { awk -v p="$1" -v c="$2" 'BEGIN { printf "%.0f\n", 1 / (1 / p + 1 / c) }'; }
naive() {
  local p c
  p=$(rate "$tmp/put.sql")
  c=$(rate "$tmp/take.sql")
  both "$p" "$c"
}
# nodes SET: jobs per second through the three nodes of SET (a value of CONNS).
nodes() {
  local out p c p1="port_s$1_1" p2="port_s$1_2" p3="port_s$1_3"
  out=$("$load" --proto resp --port "${!p1},${!p2},${!p3}" -c "$clients" -n "$jobs" \
    -P "$depth" --type bench 2>&1) || {
    echo "bench_taskload failed: $out" >&2
    echo 0
    return
  }
  p=$(echo "$out" | awk '/phase=put/ { for (i = 1; i <= NF; i++) if ($i ~ /^ops_per_sec=/) print substr($i, 13) }')
  c=$(echo "$out" | awk '/phase=consume/ { for (i = 1; i <= NF; i++) if ($i ~ /^ops_per_sec=/) print substr($i, 13) }')
  both "$p" "$c"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "sluice $("$sluice" --version | cut -d' ' -f2), PostgreSQL $("$bin/postgres" --version | awk '{ print $3 }')," \
  "$(nproc) CPUs; $clients clients x $jobs jobs, -P $depth, synchronous_commit=$sync, $runs runs, medians"
: >"$tmp/naive"
for c in "${sets[@]}"; do : >"$tmp/nodes_$c"; done
for run in $(seq 1 "$runs"); do
  naive >>"$tmp/naive"
  for c in "${sets[@]}"; do nodes "$c" >>"$tmp/nodes_$c"; done
  printf '.' >&2
done
printf '\n' >&2
m0=$(median <"$tmp/naive")
printf '%-60s %10s %8s\n' design jobs/s ratio
printf '%-60s %10.0f %8s\n' "naive: INSERT; DELETE ... SKIP LOCKED (a txn per step)" "$m0" 1.00
for c in "${sets[@]}"; do
  m1=$(median <"$tmp/nodes_$c")
  label="sluice: 3 nodes, --store postgresql, ADD; GET+ACK"
  [ "$c" = default ] || label="$label, $c conn"
  printf '%-60s %10.0f %8.2f\n' "$label" "$m1" "$(awk -v a="$m1" -v b="$m0" 'BEGIN { print a / b }')"
done
echo "(goal: >= 3)"
finish >/dev/null
