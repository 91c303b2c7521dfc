#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The PostgreSQL limits function (src/store/pg/001_limits.sql) against the one-row-per-bucket
# design (seed 001's: one `UPDATE ... RETURNING` transaction per decision), side by side on one
# throwaway PostgreSQL with durable commits (fsync and synchronous_commit on, the same for both),
# on ONE hot key, driven by pgbench: decisions per second for CLIENTS connections.
#
# This measures the store layer only (no sluice node: `--store postgresql://` does not exist
# yet); the batched design sends BATCH decisions per call, as a node would send one loop turn's.
#
# Usage: bash bench/pg_limits.sh   (env: CLIENTS="1 4", SECS=5, BATCH=1000, SYNC=on)
set -u

src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/tests/server/lib.bash"
clients=${CLIENTS:-1 4}
secs=${SECS:-5}
batch=${BATCH:-1000}
sync=${SYNC:-on}

bench_postgres
"$bin/psql" "$conn" -q -v ON_ERROR_STOP=1 -f "$src/src/store/pg/001_limits.sql" || exit 1
# A GCRA of 10^6 per second (T = 1000 ns), burst 10^6, on one row per bucket.
naive_buckets 1000000000
cat >"$tmp/batched.sql" <<SQL
SELECT count(*) FROM unnest(sluice_limits_call(NULL, '', ARRAY['1 1000000 1000000000 0 0 0 0'],
  array_fill('686f74'::text, ARRAY[$batch]), array_fill('L'::text, ARRAY[$batch]),
  array_fill('686f74'::text, ARRAY[$batch]), array_fill('D 1 0 0 0 1 1'::text, ARRAY[$batch])));
SQL
tps() { "$bin/pgbench" "$conn" -n -c "$1" -j "$1" -T "$secs" -f "$2" 2>&1 | awk '/^tps/ { print $3 }'; }
printf '%-34s %8s %16s\n' design clients decisions/s
for c in $clients; do
  n=$(tps "$c" "$tmp/naive.sql")
  b=$(tps "$c" "$tmp/batched.sql")
  printf '%-34s %8s %16.0f\n' "one UPDATE ... RETURNING per call" "$c" "$n"
  printf '%-34s %8s %16.0f\n' "sluice_limits_call, $batch per call" "$c" "$(awk -v b="$b" -v n="$batch" 'BEGIN { print b * n }')"
done
