#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Recurring series shared on Redis (issue 10, docs/cluster.md, src/server/rrecur.h): three
# `sluice serve --store redis://...` on one redis-server. RECUR.ADD on A is seen by RECUR.INFO on
# B; its occurrences are ordinary tasks of the shared queue, taken with TASK.GET on another node;
# with three nodes racing every point, each point adds exactly one task (a capped series adds
# exactly MAX tasks, counted in the queue; an unbounded one keeps runs + skipped equal to the
# points elapsed in store time, read from its own next); END stops a series; RECUR.DEL on C stops
# it everywhere and cancels its occurrences not started; a node killed with SIGKILL does not stop
# a series (the others fire it); points missed while every node was down are skipped and counted,
# the latest firing once when a node comes back; argument errors keep their words; a store that is
# down answers -STOREDOWN. Every wait is a deadline, never a sleep (the one pause makes downtime).
# The same script runs on PostgreSQL (tests/server/pg_recur.sh sets SLUICE_TEST_STORE=postgresql:
# three nodes on one PostgreSQL, src/store/pg/003_pgrecur.sql): the same replies, the same counts.
#
# Usage: bash tests/server/redis_recur.sh PATH-TO-SLUICE SOURCE-DIR
set -u
set -f

sluice=${1:?usage: redis_recur.sh PATH-TO-SLUICE SOURCE-DIR}
src=${2:?usage: redis_recur.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"

need_tools redis_recur.sh redis-cli redis-server
store=${SLUICE_TEST_STORE:-redis}
[ "$store" = postgresql ] && need_postgres

cat >"$tmp/sluice.yaml" <<'EOF'
limits:
  lim: {rate: 20/1s, burst: 5}
  per: {rate: 1/1h, key: explicit}
types:
  keyed: {limits: [per]}
  job: {}
  tick: {}
  capped: {}
  ended: {}
  killed: {}
  down: {}
  limited: {limits: [lim]}
EOF

if [ "$store" = postgresql ]; then
  start_postgres a
  url="postgresql://sluice@127.0.0.1:$pgport_a/postgres"
  psql=$(pg_bindir)/psql
  [ -x "$psql" ] || psql=psql
  sql() { "$psql" "$pgconn_a" -Atc "$1"; }
else
  start_redis a
  url=redis://127.0.0.1:$rport_a/3
fi
# The store stopped (SIGSTOP) and let go again.
store_freeze() { if [ "$store" = postgresql ]; then freeze_postgres a; else kill -STOP "$rpid_a"; fi; }
store_thaw() { if [ "$store" = postgresql ]; then thaw_postgres a; else kill -CONT "$rpid_a"; fi; }
for n in A B C; do
  start_node $n --store "$url" --store-timeout 20000
done
A=$port_A
B=$port_B
C=$port_C

# rinfo PORT NAME FIELD: one field of RECUR.INFO (runs, skipped, next_ms).
rinfo() {
  redis-cli -p "$1" RECUR.INFO "$2" | awk -v f="$3" 'NR % 2 == 1 { k = $0 } NR % 2 == 0 && k == f { print; exit }'
}
# The store's clock in ms (the store time every decision uses: Redis's TIME, PostgreSQL's
# clock_timestamp()).
store_ms() {
  local t
  if [ "$store" = postgresql ]; then
    sql 'SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint'
    return
  fi
  t=($(redis-cli -p "$rport_a" TIME))
  echo $((t[0] * 1000 + 10#${t[1]} / 1000))
}
# Series kept in the store.
stored_series() {
  if [ "$store" = postgresql ]; then
    sql 'SELECT count(*) FROM sluice_recur'
  else
    redis-cli -p "$rport_a" -n 3 HLEN 'sluice:{all}:recur'
  fi
}
runs_at_least() { [ "$(rinfo "$1" "$2" runs)" -ge "$3" ] 2>/dev/null; }
is_over() { [ "$(rinfo "$1" "$2" next_ms)" = -1 ]; }
# take PORT TYPE: takes every ready task of TYPE on the node, prints their ids (one a line).
take() {
  local out
  while :; do
    out=$(redis-cli -p "$1" TASK.GET "$2" COUNT 500)
    [ -z "$out" ] && break
    echo "$out" | awk 'NR % 5 == 1'
  done
}
# points_ok PORT NAME START_MS EVERY_MS: runs + skipped == the points before next (exactly once:
# every point up to next either added its one task or was counted skipped).
points_ok() {
  local r s n
  r=$(rinfo "$1" "$2" runs)
  s=$(rinfo "$1" "$2" skipped)
  n=$(rinfo "$1" "$2" next_ms)
  [ $(((n - $3) / $4)) -eq $((r + s)) ] && [ $(((n - $3) % $4)) -eq 0 ]
}

# ---- 1. Argument errors keep their words; nothing reaches Redis ------------------------------

contains "EVERY 0" "WRONGARGS EVERY" "$(on "$A" RECUR.ADD s job '{}' EVERY 0)"
contains "bad cron" "WRONGARGS cron" "$(on "$A" RECUR.ADD s job '{}' CRON 'bad')"
contains "both schedules" "WRONGARGS give exactly one of an interval" \
  "$(on "$A" RECUR.ADD s job '{}' EVERY 100 CRON '* * * * *')"
contains "neither schedule" "WRONGARGS give exactly one of an interval" "$(on "$A" RECUR.ADD s job '{}' MAX 3)"
contains "unknown option" "WRONGARGS syntax error: RECUR.ADD" "$(on "$A" RECUR.ADD s job '{}' EVERY 100 FOO 1)"
contains "end before start" "WRONGARGS the series ends before it starts" \
  "$(on "$A" RECUR.ADD s job '{}' EVERY 100 START 2000000 END 1000000)"
contains "end before now (store time)" "WRONGARGS the series ends before it starts" \
  "$(on "$A" RECUR.ADD s job '{}' EVERY 100 END 1000)"
contains "wrong arity" "WRONGARGS wrong number of arguments" "$(on "$A" RECUR.ADD s job '{}')"
check "INFO of no series" "NOTASK no recurring series of that name" "$(on "$B" RECUR.INFO nope)"
check "DEL of no series" 0 "$(on "$C" RECUR.DEL nope)"
check "nothing stored" 0 "$(stored_series)"

# ---- 2. Added on A, seen on B, fired for everyone; taken on C --------------------------------

check "RECUR.ADD on A" OK "$(on "$A" RECUR.ADD tick tick '{"n":7}' EVERY 200)"
contains "RECUR.INFO on B" "runs" "$(on "$B" RECUR.INFO tick)"
wait_until "the series fires" 10 runs_at_least "$C" tick 1
got=$(redis-cli -p "$C" TASK.GET tick TIMEOUT 5000)
check "an occurrence taken on C" "tick {\"n\":7} 1" "$(echo "$got" | sed -n '2,3p;4p' | tr '\n' ' ' | sed 's/ $//')"
id=$(echo "$got" | head -1)
check "ACK of the occurrence on A" OK "$(on "$A" TASK.ACK "$id")"

# A series faster than its limits lets occurrences through: the single node's warning, from the
# node that took it (lim: 20/1s, one per 50 ms).
check "fast series" OK "$(on "$B" RECUR.ADD fast limited '{}' EVERY 10 START 9000000000000)"
warned() { grep -q "recurring series fast (type limited) is scheduled every" "$tmp/B.log"; }
wait_until "RECURRING_TOO_FAST logged by B" 5 warned
check "RECUR.DEL fast" 1 "$(on "$A" RECUR.DEL fast)"

# ---- 3. Exactly one task per point, three nodes racing; MAX ----------------------------------

check "capped series" OK "$(on "$B" RECUR.ADD capped capped '{}' EVERY 100 MAX 15)"
wait_until "the capped series is over" 20 is_over "$A" capped
check "runs == MAX" 15 "$(rinfo "$C" capped runs)"
take "$A" capped >"$tmp/capped"
check "exactly MAX tasks in the queue" 15 "$(wc -l <"$tmp/capped")"
check "each task once" 15 "$(sort -u "$tmp/capped" | wc -l)"
fired=0
for p in $A $B $C; do
  f=$(store_field "$p" store_recur_fired)
  fired=$((fired + ${f:-0}))
done
# The first occurrence of `tick` above, and every capped one, were fired by some node.
within "occurrences fired by the three nodes together" 16 10000 "$fired"

# An unbounded series on a grid that starts in store time: every point up to next is counted
# once, whoever fired it.
start=$(($(store_ms) + 300))
check "grid series" OK "$(on "$C" RECUR.ADD grid job '{}' EVERY 100 START "$start")"
wait_until "the grid series runs" 20 runs_at_least "$B" grid 10
wait_until "runs + skipped == the points elapsed (store time)" 10 points_ok "$A" grid "$start" 100
stale=0
for p in $A $B $C; do
  f=$(store_field "$p" store_recur_stale)
  stale=$((stale + ${f:-0}))
done
echo "# FIREs that lost the race to another node: $stale"
check "RECUR.DEL grid" 1 "$(on "$B" RECUR.DEL grid)"
take "$A" job >/dev/null

# ---- 3b. An occurrence's chain is resolved with the series' KEY: it charges THROTTLE's budget --

check "keyed series" OK "$(on "$A" RECUR.ADD kk keyed '{}' EVERY 100 MAX 3 KEY alice)"
wait_until "the keyed series is over" 20 is_over "$B" kk
got=$(redis-cli -p "$C" TASK.GET keyed COUNT 10 | awk 'NR % 5 == 1' | wc -l)
check "one occurrence let through by alice's 1/h" 1 "$got"
check "alice's budget is spent for THROTTLE too" 0 "$(redis-cli -p "$B" THROTTLE per alice | head -1)"
check "bob's is not" 1 "$(redis-cli -p "$B" THROTTLE per bob | head -1)"

# ---- 4. END ----------------------------------------------------------------------------------

end=$(($(store_ms) + 1000))
check "series with an END" OK "$(on "$A" RECUR.ADD ended ended '{}' EVERY 100 END "$end")"
wait_until "over after its end" 20 is_over "$B" ended
r=$(rinfo "$C" ended runs)
s=$(rinfo "$C" ended skipped)
within "points before the end" 7 11 $((r + s))
take "$B" ended >"$tmp/ended"
check "one task per run" "$r" "$(wc -l <"$tmp/ended")"
check "nothing after the end" "" "$(on "$C" TASK.GET ended TIMEOUT 500)"

# ---- 5. RECUR.DEL on C stops it everywhere, cancelling what did not start ---------------------

wait_until "tick keeps firing" 10 runs_at_least "$A" tick 3
check "RECUR.DEL on C" 1 "$(on "$C" RECUR.DEL tick)"
check "gone on A" "NOTASK no recurring series of that name" "$(on "$A" RECUR.INFO tick)"
check "gone on B" "NOTASK no recurring series of that name" "$(on "$B" RECUR.INFO tick)"
check "its queued occurrences cancelled" "" "$(on "$B" TASK.GET tick)"
check "no more occurrences" "" "$(on "$A" TASK.GET tick TIMEOUT 700)"
check "DEL again" 0 "$(on "$A" RECUR.DEL tick)"

# ---- 6. A node killed with SIGKILL does not stop a series ------------------------------------

check "series for the kill" OK "$(on "$A" RECUR.ADD killed killed '{}' EVERY 100)"
wait_until "it fires" 10 runs_at_least "$B" killed 2
kill -KILL "$pid_A"
wait "$pid_A" 2>/dev/null
r=$(rinfo "$B" killed runs)
wait_until "the others fire it" 10 runs_at_least "$C" killed $((r + 5))
check "RECUR.DEL" 1 "$(on "$B" RECUR.DEL killed)"

# ---- 7. Every node down: the missed points are skipped, the latest fires once ---------------

start=$(($(store_ms) + 200))
check "series for the downtime" OK "$(on "$B" RECUR.ADD down down '{}' EVERY 100 START "$start")"
wait_until "it fires" 10 runs_at_least "$C" down 2
kill -KILL "$pid_B" "$pid_C"
wait "$pid_B" "$pid_C" 2>/dev/null
sleep 1 # downtime: points pass with no node up
start_node A --store "$url" --store-timeout 20000
A=$port_A
after_down() { [ "$(rinfo "$A" down skipped)" -ge 5 ]; }
wait_until "the missed points counted skipped" 10 after_down
wait_until "runs + skipped == points elapsed after the downtime" 10 points_ok "$A" down "$start" 100
check "RECUR.DEL" 1 "$(on "$A" RECUR.DEL down)"

# ---- 8. Store down -----------------------------------------------------------------------------

store_freeze
start_node D --store "$url" --store-timeout 300
contains "RECUR.ADD with the store down" "STOREDOWN" "$(on "$port_D" RECUR.ADD s job '{}' EVERY 100)"
store_thaw

finish
