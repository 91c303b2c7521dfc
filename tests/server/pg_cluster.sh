#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Several nodes on one PostgreSQL (issue 11, docs/cluster.md): three `sluice serve --store
# postgresql://...` share THROTTLE, CL.THROTTLE and LEASE.* budgets (their task queue:
# tests/server/pg_tasks.sh). The same checker as on Redis
# (tests/tools/cluster_check.py, reading the audit table the store's function writes) drives all
# three from many pipelining clients at once and replays every grant through the reference
# models: zero violations. Then the faults: kill -9 of a node holding a lease (the lease lapses in
# the database's time), SIGSTOP of PostgreSQL (closed: a typed error within the timeout; open:
# granted and counted), SIGCONT, a restart of PostgreSQL (the nodes reconnect by themselves); and
# start-up: the schema is created once, a newer schema is refused, a bad connection string is an
# error, a password never shows in INFO. Every wait is a deadline, never a sleep.
#
# Skipped (exit 77) only when PostgreSQL's server binaries are not installed.
#
# Usage: bash tests/server/pg_cluster.sh PATH-TO-SLUICE SOURCE-DIR
set -u
set -f

sluice=${1:?usage: pg_cluster.sh PATH-TO-SLUICE SOURCE-DIR}
src=${2:?usage: pg_cluster.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"

py=/usr/bin/python3
checker=$src/tests/tools/cluster_check.py
need_postgres
psql=$(pg_bindir)/psql
[ -x "$psql" ] || psql=psql
if ! $py -c 'import redis' 2>/dev/null; then
  bad "python3-redis is not installed (scripts/deps.sh installs it)"
  finish
  exit 1
fi

throttle_works() { [ "$(redis-cli -p "$1" THROTTLE api probe 2>&1 | head -1)" = 1 ]; }
sql() { "$psql" "$pgconn_a" -Atc "$1" 2>&1; }

# The checker's limits, and a short lease (for the kill -9 test) at the end of limits:.
$py "$checker" --print-config |
  awk '/^types:/ { print "  short: {concurrency: 1, ttl: 1s, key: explicit}" } { print }' \
    >"$tmp/sluice.yaml"

# ---- 1. Three nodes, one budget ---------------------------------------------------------------

start_postgres a
url="postgresql://sluice@127.0.0.1:$pgport_a/postgres"
for n in n1 n2 n3; do
  start_node $n --store "$url" --store-timeout 20000 --store-audit
done
for n in $port_n1 $port_n2 $port_n3; do
  check "node on $n is up" up "$(store_field "$n" store_state)"
done
# The version this build writes (src/store/pg_schema.h).
schema=$(awk '$1 == "#define" && $2 == "PGS_VERSION" { print $3 }' "$src/src/store/pg_schema.h")
check "the schema was created once, at this build's version" "$schema" \
  "$(sql 'SELECT version FROM sluice_schema')"
check "INFO store names postgresql" postgresql "$(store_field "$port_n1" store)"

P=$port_n1
shared_budget_checks "$port_n1" "$port_n2" "$port_n3"
# What is not shared yet is refused with one clear error, nothing kept (the task queue is
# shared: tests/server/pg_tasks.sh).
# Live limit changes and resets are shared now (tests/server/shared_overrides.sh).
contains "LIMIT.RESET of no limit: the single node's words" 'NOLIMIT no limit named "x"' \
  "$(cli LIMIT.RESET x)"
check "LIMIT.SET shared" OK "$(cli LIMIT.SET x rate=1/1s)"
check "LIMIT.RESET of every key shared" OK "$(cli LIMIT.RESET x)"
check "LIMIT.DEL shared" 1 "$(cli LIMIT.DEL x)"
shared_lease_checks "$port_n1" "$port_n2" "$port_n3"
sql 'TRUNCATE sluice_limit_audit, sluice_limit_state' >/dev/null

# The checker: every node, many clients, pipelines of 16; then one request per round trip.
out=$($py "$checker" --nodes "$port_n1,$port_n2,$port_n3" --pg "$pgconn_a" --psql "$psql" \
  --target 80000 --max-seconds 60 --clients-per-node 6 --pipeline 16 --seed 7 2>&1)
rc=$?
echo "# checker, 3 nodes x 6 clients, -P 16: $out"
check "checker: zero violations" 0 "$rc"
sql 'TRUNCATE sluice_limit_audit, sluice_limit_state' >/dev/null
out=$($py "$checker" --nodes "$port_n1,$port_n2,$port_n3" --pg "$pgconn_a" --psql "$psql" \
  --target 30000 --max-seconds 30 --clients-per-node 10 --pipeline 1 --seed 8 2>&1)
rc=$?
echo "# checker, 3 nodes x 10 clients, -P 1: $out"
check "checker unpipelined: zero violations" 0 "$rc"
batches=$(store_field "$port_n1" store_batches)
requests=$(store_field "$port_n1" store_requests)
echo "# node 1: $requests decisions in $batches calls"
within "batched: fewer calls than decisions" 1 "$((requests - 1))" "$batches"

# kill -9 of a node holding a lease: the lease lapses in the database's time, not never.
h=$(redis-cli -p "$port_n1" LEASE.ACQUIRE short w | sed -n 2p)
contains "a lease on the node about to die" "short/" "$h"
kill -KILL "$pid_n1"
wait "$pid_n1" 2>/dev/null
contains "still held after the kill" "RATELIMITED limit=short" "$(P=$port_n2 cli LEASE.ACQUIRE short w)"
wait_until "the dead node's lease lapses, another node takes the slot" 20 \
  sh -c "redis-cli -p $port_n2 LEASE.ACQUIRE short w | grep -q short/"
for n in n2 n3; do stop $n; check "node $n stops with 0" 0 "$stop_rc"; done

# ---- 2. Faults: SIGSTOP, SIGCONT, restart ------------------------------------------------------

start_node closed --store "$url" --store-timeout 300
start_node open --store "$url" --store-timeout 300 --store-failure open
freeze_postgres a
t0=$(now_ms)
r=$(P=$port_closed cli THROTTLE api k1)
t1=$(now_ms)
contains "closed: typed error while PostgreSQL is stopped" "STOREDOWN" "$r"
within "closed: answered within seconds" 0 10000 "$((t1 - t0))"
check "open: granted while PostgreSQL is stopped" 1 "$(redis-cli -p "$port_open" THROTTLE api k1 | head -1)"
wait_until "open node counts its grants" 10 \
  test "$(store_field "$port_open" store_fail_open_grants)" -ge 1
check "PING while PostgreSQL is stopped" PONG "$(P=$port_closed cli PING)"
wait_until "the closed node sees the store down" 10 \
  test "$(store_field "$port_closed" store_state)" != up
thaw_postgres a
wait_until "closed node recovers after SIGCONT" 20 throttle_works "$port_closed"
wait_until "open node recovers after SIGCONT" 20 throttle_works "$port_open"

# A restart of PostgreSQL: nothing committed is lost, the nodes reconnect by themselves.
# The budget is spent through the closed node, which never grants without the store, and checked
# there after the restart: an open node may grant while it still sees the store down.
check "a burst of 2: first grant before the restart" 0 \
  "$(redis-cli -p "$port_closed" CL.THROTTLE survive 1 1 3600 | head -1)"
check "a burst of 2: second grant before the restart" 0 \
  "$(redis-cli -p "$port_closed" CL.THROTTLE survive 1 1 3600 | head -1)"
restart_postgres a
wait_until "closed node reconnects to the restarted PostgreSQL" 30 throttle_works "$port_closed"
wait_until "open node reconnects to the restarted PostgreSQL" 30 throttle_works "$port_open"
within "reconnects counted" 2 100 "$(store_field "$port_closed" store_connects)"
check "the budget spent before the restart is still spent" 1 \
  "$(redis-cli -p "$port_closed" CL.THROTTLE survive 1 1 3600 | head -1)"
stop closed
check "closed node stops with 0" 0 "$stop_rc"
stop open
check "open node stops with 0" 0 "$stop_rc"

# ---- 3. Start-up -------------------------------------------------------------------------------

start_node pw --store "host=127.0.0.1 port=$pgport_a user=sluice dbname=postgres password=hunter2"
info=$(redis-cli -p "$port_pw" INFO store)
contains "INFO shows the connection string" "password=***" "$info"
lacks "INFO never shows the password" "hunter2" "$info"
stop pw
out=$("$sluice" serve --port 0 --no-admin --store "host=127.0.0.1 bogus=1" 2>&1)
check "a connection string libpq refuses: exit 1" 1 "$?"
contains "libpq's words" 'invalid connection option "bogus"' "$out"
out=$("$sluice" serve --port 0 --no-admin --store "$url" --store-replicas 1 2>&1)
check "--store-replicas with PostgreSQL: refused" 1 "$?"
contains "replicas with PostgreSQL says what to do" "synchronous_standby_names" "$out"
sql 'UPDATE sluice_schema SET version = 99' >/dev/null
out=$(timeout 60 "$sluice" serve --port 0 --no-admin --store "$url" 2>&1)
check "a newer schema: the node refuses to start" 1 "$?"
contains "a newer schema says why" "newer than this sluice knows" "$out"
sql "UPDATE sluice_schema SET version = $schema" >/dev/null
# A node whose PostgreSQL is down at start still starts, answers PING, and says STOREDOWN.
stop_postgres a
start_node late --store "$url" --store-timeout 200
check "PING with PostgreSQL down at start" PONG "$(P=$port_late cli PING)"
contains "STOREDOWN with PostgreSQL down at start" "STOREDOWN" "$(P=$port_late cli THROTTLE api k)"
stop late
check "late node stops with 0" 0 "$stop_rc"

finish
