#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Leases taken with LEASE.ACQUIRE across kill -9 (issue 16, "What a restart forgets"; see
# docs/durability.md): they are kept in the store with their limit's key state and restored at
# start with their handles.
#
# - a concurrency limit of 2 held by two direct leases still admits nobody after kill -9; the
#   old handles RENEW and RELEASE their restored leases, and a release frees the unit;
# - a lease whose TTL passed while the server was down is gone: its handle is refused and its
#   units are free;
# - a group slot (TASK.ADD ... LEASE) survives kill -9 with its lease: the group's queued task
#   runs under it, the old handle submits more tasks to the group, a group task restored running
#   takes no unit of its own, another producer's task still waits for the slot, and releasing
#   the lease gives it the slot.
# Each crash comes after the server reports nothing left to write (INFO persistence: dirty_keys
# and dirty_tasks 0, no commit in flight), never after a sleep. Traffic goes to 127.0.0.1 only.
#
# Usage: bash tests/server/leases.sh PATH-TO-SLUICE SOURCE-DIR
# Prints one line per failed check and "N passed, N failed"; exits non-zero on any failure.
set -u
set -f

sluice=${1:?usage: leases.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"
pid=

data="$tmp/data"
conf="$tmp/sluice.yaml"

cat >"$conf" <<'YAML'
limits:
  slots:
    concurrency: 2
  short:
    concurrency: 2
  wf:
    concurrency: 1
    key: input.wf
types:
  step:
    limits: [wf]
YAML

# ids REPLY: the task ids of a RESP2 TASK.GET reply as redis-cli prints it (every 5th line).
ids() { awk 'NR % 5 == 1' | tr '\n' ' ' | sed 's/ *$//'; }

# ---- A full concurrency limit across kill -9 --------------------------------------------------

start_single
h1=$(word "$(cli LEASE.ACQUIRE slots k TTL 600000)" 2)
h2=$(word "$(cli LEASE.ACQUIRE slots k TTL 600000)" 2)
contains "the first lease" "slots/" "$h1"
contains "the second lease" "slots/" "$h2"
contains "the limit of 2 is full" "RATELIMITED" "$(cli LEASE.ACQUIRE slots k TTL 600000)"
wait_until "the leases are written" 20 durable_now
crash
start_single
contains "after kill -9 the limit is still full" "RATELIMITED" \
  "$(cli LEASE.ACQUIRE slots k TTL 600000)"
check "an old handle renews its restored lease" 600000 "$(cli LEASE.RENEW "$h2" TTL 600000)"
check "an old handle releases its restored lease" OK "$(cli LEASE.RELEASE "$h1")"
h3=$(word "$(cli LEASE.ACQUIRE slots k TTL 600000)" 2)
contains "then an ACQUIRE succeeds" "slots/" "$h3"
check "its id is above the restored ones" 1 "$([ "${h3##*/}" -gt "${h2##*/}" ] && echo 1)"
contains "and the limit is full again" "RATELIMITED" "$(cli LEASE.ACQUIRE slots k TTL 600000)"
check "releasing the restored lease again is harmless" OK "$(cli LEASE.RELEASE "$h1")"
contains "the new lease is untouched by it" "RATELIMITED" "$(cli LEASE.ACQUIRE slots k TTL 600000)"
check "the new holder releases" OK "$(cli LEASE.RELEASE "$h3")"
check "the restored holder releases" OK "$(cli LEASE.RELEASE "$h2")"
wait_until "the releases are written" 20 durable_now
crash
start_single
contains "released leases stay released after kill -9" "slots/" \
  "$(cli LEASE.ACQUIRE slots k UNITS 2 TTL 600000)"
contains "their handles are refused" "NOLEASE" "$(cli LEASE.RENEW "$h2" TTL 1000)"

# ---- A lease that ends while the server is down -------------------------------------------------

# Its end lies 3 s ahead, well past the commit; the restart waits for the wall clock to pass it
# (a deadline on the clock, not a guess at how long anything takes).
t0=$(now_ms)
hx=$(word "$(cli LEASE.ACQUIRE short x UNITS 2 TTL 3000)" 2)
contains "a lease of 3 s" "short/" "$hx"
wait_until "the short lease is written" 20 durable_now
check "it was written before it ended" 1 "$([ "$(now_ms)" -lt $((t0 + 3000)) ] && echo 1)"
crash
past() { [ "$(now_ms)" -gt "$1" ]; }
wait_until "the wall clock passes the lease's end" 20 past $((t0 + 3100))
start_single
contains "a lease that ended while down is not restored" "NOLEASE" "$(cli LEASE.RENEW "$hx")"
contains "its units are free" "short/" "$(cli LEASE.ACQUIRE short x UNITS 2 TTL 600000)"
stop_single

# ---- A group slot across kill -9 ----------------------------------------------------------------

start_single
lease=$(redis-cli -p "$P" LEASE.ACQUIRE wf w1 TTL 600000 | sed -n 2p)
contains "the group's lease" "wf/" "$lease"
g1=$(cli TASK.ADD step '{"wf":"w1"}' LEASE "$lease")
g2=$(cli TASK.ADD step '{"wf":"w1"}' LEASE "$lease")
other=$(cli TASK.ADD step '{"wf":"w1"}')
check "one group task runs under the slot" "$g1" \
  "$(redis-cli -p "$P" TASK.GET step COUNT 1 TIMEOUT 0 | ids)"
wait_until "the group and its delivery are written" 20 durable_now
crash
start_single
check "the group task restored running" running "$(field TASK.INFO "$g1" state)"
g3=$(cli TASK.ADD step '{"wf":"w1"}' LEASE "$lease")
check "the old handle still submits to the group" 1 "$([ "$g3" -gt "$other" ] && echo 1)"
got=$(redis-cli -p "$P" TASK.GET step COUNT 10 TIMEOUT 0 | ids)
check "after kill -9 the group's queued tasks run under its slot" "$g2 $g3" "$got"
check "another producer's task still waits for it" parked "$(field TASK.INFO "$other" state)"
contains "EXPLAIN names the group" "Group slot" "$(cli TASK.EXPLAIN "$g2")"
check "the group's handle renews its lease" 600000 "$(cli LEASE.RENEW "$lease" TTL 600000)"
check "the group's handle releases its lease" OK "$(cli LEASE.RELEASE "$lease")"
got=$(redis-cli -p "$P" TASK.GET step COUNT 10 TIMEOUT 2000 | ids)
check "the waiting task takes the freed slot (the restored running task held none)" \
  "$other" "$got"
cli TASK.ACK "$g1" >/dev/null
cli TASK.ACK "$g2" >/dev/null
cli TASK.ACK "$g3" >/dev/null
cli TASK.ACK "$other" >/dev/null
stop_single

finish
