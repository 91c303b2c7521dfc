#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What survives a restart of `sluice serve` (docs/durability.md), end to end with redis-cli:
#
# - limiter state: a rate limit of 5/1h with burst 5 whose burst was spent by THROTTLE is still
#   spent after a graceful restart (SIGTERM) and after kill -9 once the key timer (100 ms) ran:
#   the next THROTTLE is denied with retry_after at most one slot (12 min), not a fresh burst
#   (a slot that long, so that no restart, however slow the machine, lasts one). The
#   same with --durability none shows the fresh burst (the documented contrast);
# - the same for the budget spent by deliveries (TASK.GET): parked tasks come back paced by the
#   restored state, not all at once;
# - a running task whose lease expired while the server was down is delivered again (attempt 2)
#   without paying its rate limit again (the limit has no budget left for an hour);
# - LIMIT.SET (a new limit, and one overriding the file's) and LIMIT.DEL (of a file's limit)
#   survive a restart, and so do a key's own limit (LIMIT.KEY, LIMIT.KEYDEL) and its state;
# - a recurring series survives with its counters and keeps producing occurrences;
# - a task whose type is gone from the configuration is kept in the store (logged, counted in
#   INFO, its id not reused) and comes back once the type does;
# - the clock floor: a stored clock reading ahead of the wall clock (as after the wall clock went
#   back while the server was down) makes the server's clock start there.
# Timing checks are loose: the machine may be busy. Traffic goes to 127.0.0.1 only.
#
# Usage: bash tests/server/restart.sh PATH-TO-SLUICE SOURCE-DIR
# Prints one line per failed check and "N passed, N failed"; exits non-zero on any failure.
set -u
set -f

sluice=${1:?usage: restart.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"
pid=

data="$tmp/data"
conf="$tmp/sluice.yaml"

cat >"$tmp/sluice.yaml" <<'EOF'
engine:
  strict_types: true
limits:
  burst5:
    rate: 5/1h
    burst: 5
    key: explicit
  pace:
    rate: 1/1s
    burst: 1
  hourly:
    rate: 1/1h
    burst: 1
  spare:
    rate: 10/1s
types:
  paced:
    limits: [pace]
  leased:
    limits: [hourly]
    lease: 1s
  rec: {}
  gone: {}
EOF
grep -v '^  gone:' "$tmp/sluice.yaml" >"$tmp/without-gone.yaml"

# ---- Limiter state across SIGTERM ---------------------------------------------------------------

start_single
for i in 1 2 3 4 5; do
  check "THROTTLE $i of the burst" 1 "$(word "$(cli THROTTLE burst5 k1)" 1)"
done
check "the 6th is denied" 0 "$(word "$(cli THROTTLE burst5 k1)" 1)"
stop_single
start_single
out=$(cli THROTTLE burst5 k1)
check "after SIGTERM: still denied (no fresh burst)" 0 "$(word "$out" 1)"
within "after SIGTERM: retry_after at most one slot" 1 720000 "$(word "$out" 4)"

# ---- Limiter state across kill -9 ---------------------------------------------------------------

for i in 1 2 3 4; do
  cli THROTTLE burst5 k2 >/dev/null
done
# The 5th THROTTLE and INFO in one write: the server runs both in the same turn, so the commits
# INFO counts are those before it, and the key timer's next commit (every 100 ms) takes it
# along. Wait for that commit, however late it comes on a busy machine, then crash. A commit
# already in flight when the THROTTLE ran does not carry it: wait until a commit has finished
# since, no key is left dirty and no commit is in flight.
exec {fd}<>"/dev/tcp/127.0.0.1/$P"
printf 'THROTTLE burst5 k2\r\nINFO persistence\r\nQUIT\r\n' >&"$fd"
c1=$(timeout 30 cat <&"$fd" | tr -d '\r' | awk -F: '$1 == "commits" { print $2 }')
exec {fd}>&-
committed_since() {
  local out
  out=$(redis-cli -p "$P" INFO persistence | tr -d '\r')
  [ "$(echo "$out" | awk -F: '$1 == "commits" { print $2 }')" -gt "$c1" ] &&
    [ "$(echo "$out" | awk -F: '$1 == "dirty_keys" { print $2 }')" = 0 ] &&
    [ "$(echo "$out" | awk -F: '$1 == "commit_in_flight" { print $2 }')" = 0 ]
}
wait_until "the key timer commits the last THROTTLE" 20 committed_since
crash
start_single
out=$(cli THROTTLE burst5 k2)
check "after kill -9: still denied (no fresh burst)" 0 "$(word "$out" 1)"
within "after kill -9: retry_after at most one slot" 1 720000 "$(word "$out" 4)"
contains "INFO persistence: keys recovered" "recovered_keys:" "$(cli INFO persistence)"
stop_single

# ---- The contrast: --durability none starts every key fresh -------------------------------------

data="$tmp/none" # durability none keeps no files; a directory of its own shows that
start_single --durability none
for i in 1 2 3 4 5; do
  cli THROTTLE burst5 k3 >/dev/null
done
check "none: the 6th is denied" 0 "$(word "$(cli THROTTLE burst5 k3)" 1)"
contains "none: INFO says so" "durability:none" "$(cli INFO persistence)"
stop_single
start_single --durability none
check "none: after a restart the burst is fresh" "1 5 4" \
  "$(cli THROTTLE burst5 k3 | awk '{ print $1, $2, $3 }')"
stop_single
check "none: nothing written" "no" "$([ -e "$tmp/none/sluice.db" ] && echo yes || echo no)"
data="$tmp/data"

# ---- Parked tasks come back paced ---------------------------------------------------------------

start_single
for i in 1 2 3 4; do
  cli TASK.ADD paced "{\"n\":$i}" >/dev/null
done
out=$(cli TASK.GET paced COUNT 10)
check "before: the burst of 1 is delivered" "1" "$(echo "$out" | awk '{ print NF / 5 }')"
stop_single
start_single
t0=$(now_ms)
out=$(cli TASK.GET paced COUNT 10)
n=$(echo "$out" | awk '{ print NF / 5 }')
within "after a restart at most one slot's worth is delivered at once" 0 1 "$n"
got=$n
while [ "$got" -lt 3 ] && [ $(($(now_ms) - t0)) -lt 60000 ]; do
  out=$(cli TASK.GET paced COUNT 10 TIMEOUT 3000)
  got=$((got + $(echo "$out" | awk '{ print NF / 5 }')))
done
t1=$(now_ms)
check "the 3 parked tasks are all delivered" 3 "$got"
within "they come one slot (1 s) apart, not at once" 1500 60000 $((t1 - t0))

# ---- A lease that expired while down: redelivered, not charged again ----------------------------

id=$(cli TASK.ADD leased '{"job":"x"}')
out=$(cli TASK.GET leased)
check "delivered: attempt 1" "$id leased 1" "$(echo "$out" | awk '{ print $1, $2, $4 }')"
# TASK.GET does not wait for its delivery to be written (docs/durability.md): the next commit
# (here the limiter-state timer's, within 100 ms) writes it. Wait for that, then crash.
for _ in $(seq 1 100); do
  [ "$(info dirty_tasks)" = 0 ] && break
  sleep 0.02
done
check "the delivery is committed within the key timer's period" 0 "$(info dirty_tasks)"
crash
sleep 1.3 # the lease (1 s) ends while the server is down
start_single
check "restored running, lease passed: queued again" "queued" "$(field TASK.INFO "$id" state)"
out=$(cli TASK.GET leased)
check "redelivered with attempt 2 (the hourly limit is not asked again)" "$id leased 2" \
  "$(echo "$out" | awk '{ print $1, $2, $4 }')"
check "TASK.ACK" "OK" "$(cli TASK.ACK "$id")"

# ---- LIMIT.SET and LIMIT.DEL survive -----------------------------------------------------------

check "LIMIT.SET a new limit" "OK" "$(cli LIMIT.SET dyn rate=7/1m,key=explicit)"
check "LIMIT.SET over the file's" "OK" "$(cli LIMIT.SET burst5 rate=3/1s,key=explicit)"
check "LIMIT.DEL a file's limit" "1" "$(cli LIMIT.DEL spare)"
crash
start_single
check "the new limit is back" "rate=7/1m,key=explicit" "$(field LIMIT.GET dyn spec)"
check "the override is back, over the file" "rate=3/1s,key=explicit" "$(field LIMIT.GET burst5 spec)"
contains "the removed one stays removed" "NOLIMIT" "$(cli LIMIT.GET spare)"
check "LIMIT.DEL the new one" "1" "$(cli LIMIT.DEL dyn)"
stop_single
start_single
contains "LIMIT.DEL survives too" "NOLIMIT" "$(cli LIMIT.GET dyn)"

# ---- A key's override (LIMIT.KEY) survives, with its key's state -------------------------------

check "LIMIT.KEY" "OK" "$(cli LIMIT.KEY burst5 vip rate=1/1h)"
check "the overridden key gets its own limit" "1" "$(word "$(cli THROTTLE burst5 vip)" 1)"
check "and spends it" "0" "$(word "$(cli THROTTLE burst5 vip)" 1)"
check "another key is unchanged" "1" "$(word "$(cli THROTTLE burst5 other)" 1)"
stop_single
start_single
check "the override is back" "rate=3/1s,key=explicit,override.vip=rate=1/1h" \
  "$(field LIMIT.GET burst5 spec)"
check "its key's state too (still spent)" "0" "$(word "$(cli THROTTLE burst5 vip)" 1)"
check "LIMIT.KEYDEL" "1" "$(cli LIMIT.KEYDEL burst5 vip)"
check "LIMIT.KEYDEL again" "0" "$(cli LIMIT.KEYDEL burst5 vip)"
check "vip is back on the limit's own rate" "1" "$(word "$(cli THROTTLE burst5 vip)" 1)"
crash
start_single
check "the removal survives" "rate=3/1s,key=explicit" "$(field LIMIT.GET burst5 spec)"

# ---- A recurring series survives ---------------------------------------------------------------

check "RECUR.ADD" "OK" "$(cli RECUR.ADD every300 rec '{"r":1}' EVERY 300)"
out=$(cli TASK.GET rec TIMEOUT 30000)
check "an occurrence is delivered" "rec {\"r\":1}" "$(echo "$out" | awk '{ print $2, $3 }')"
cli TASK.ACK "$(word "$out" 1)" >/dev/null
runs=$(field RECUR.INFO every300 runs)
# At most one run per 300 ms since RECUR.ADD: the bounds only say it is a count, not garbage.
within "runs counted" 1 100000 "$runs"
crash
start_single
after=$(field RECUR.INFO every300 runs)
within "the series is back with its runs" "$runs" 100000 "$after"
out=$(cli TASK.GET rec TIMEOUT 30000)
check "and still produces occurrences" "rec" "$(word "$out" 2)"
check "RECUR.DEL" "1" "$(cli RECUR.DEL every300)"
stop_single

# ---- A task whose type is gone stays in the store ------------------------------------------------

start_single
old=$(cli TASK.ADD gone '{"keep":1}')
stop_single
conf="$tmp/without-gone.yaml"
start_single
check "INFO: one unrestorable task" "1" "$(info unrestorable_tasks)"
contains "it is not in the engine" "NOTASK" "$(cli TASK.INFO "$old")"
contains "it is logged" "task $old (type \"gone\", queued) cannot be restored" "$(cat "$tmp/log")"
new=$(cli TASK.ADD rec '{}')
within "its id is not given to a new task" $((old + 1)) $((old + 1000)) "$new"
stop_single
check "data check counts it" 0 "$("$sluice" data check "$data" >/dev/null 2>&1; echo $?)"
conf="$tmp/sluice.yaml"
start_single
check "its type back: the task is back" "queued {\"keep\":1}" \
  "$(field TASK.INFO "$old" state) $(field TASK.INFO "$old" payload)"
stop_single

# ---- The clock floor ---------------------------------------------------------------------------

if command -v sqlite3 >/dev/null; then
  ahead=$(($(now_ms) + 3600000)) # as if the wall clock went back an hour while down
  sqlite3 "$data/sluice.db" "UPDATE meta SET value = $ahead * 1000000 WHERE name = 'clock_ns'"
  start_single
  id=$(cli TASK.ADD rec '{}')
  within "the server clock starts at the stored reading" "$ahead" $((ahead + 600000)) \
    "$(field TASK.INFO "$id" submitted_ms)"
  stop_single
fi

check "data check" 0 "$("$sluice" data check "$data" >/dev/null 2>&1; echo $?)"

finish
