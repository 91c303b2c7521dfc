#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Group slots over the wire (issue 13 item 12, seed 002's workflow concurrency): a producer's
# one LEASE.ACQUIRE carries a group of TASK.ADD ... LEASE handle tasks, which run under that one
# slot while another producer's task on the key waits; LEASE.RELEASE ends the group and the
# waiting task runs at once; stale, malformed and foreign-key handles are refused at submit; a
# restart after the group's lease ended ends the group: the handle is refused and the group's
# tasks each take their own unit, one at a time on a limit of 1. (A live group survives a
# restart with its lease: tests/server/leases.sh.)
#
# Usage: bash tests/server/group.sh PATH-TO-SLUICE SOURCE-DIR
set -u
set -f

sluice=${1:?usage: group.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"

cat >"$tmp/sluice.yaml" <<'EOF'
limits:
  wf:
    concurrency: 1
    key: input.wf
types:
  step:
    limits: [wf]
EOF
start main --config "$tmp/sluice.yaml" --no-admin
P=$port_main

# ids REPLY: the task ids of a RESP2 TASK.GET reply as redis-cli prints it (every 5th line).
ids() { awk 'NR % 5 == 1' | tr '\n' ' ' | sed 's/ *$//'; }

# ---- One slot for the group; another producer waits -----------------------------------------

lease=$(redis-cli -p "$P" LEASE.ACQUIRE wf w1 TTL 60000 | sed -n 2p)
contains "a lease handle" "wf/" "$lease"
g1=$(cli TASK.ADD step '{"wf":"w1"}' LEASE "$lease")
g2=$(cli TASK.ADD step '{"wf":"w1"}' LEASE "$lease")
g3=$(cli TASK.ADD step '{"wf":"w1"}' LEASE "$lease")
other=$(cli TASK.ADD step '{"wf":"w1"}')
got=$(redis-cli -p "$P" TASK.GET step COUNT 10 TIMEOUT 0 | ids)
check "the group runs under its one slot" "$g1 $g2 $g3" "$got"
check "another producer's task waits" "parked" "$(field TASK.INFO "$other" state)"
cli TASK.ACK "$g1" >/dev/null
cli TASK.ACK "$g2" >/dev/null
cli TASK.ACK "$g3" >/dev/null
check "acks of the group free nothing" "parked" "$(field TASK.INFO "$other" state)"

# ---- Refusals at submit ---------------------------------------------------------------------

contains "a malformed handle" "NOLEASE" "$(cli TASK.ADD step '{"wf":"w1"}' LEASE nonsense)"
contains "an unknown lease id" "NOLEASE" \
  "$(cli TASK.ADD step '{"wf":"w1"}' LEASE "${lease%/*}/999999")"
contains "a lease of another key" "another key" "$(cli TASK.ADD step '{"wf":"w2"}' LEASE "$lease")"
check "LEASE.RENEW keeps the group alive" "60000" "$(cli LEASE.RENEW "$lease" TTL 60000)"

# ---- The end of the group -------------------------------------------------------------------

check "LEASE.RELEASE ends the group" "OK" "$(cli LEASE.RELEASE "$lease")"
got=$(redis-cli -p "$P" TASK.GET step COUNT 10 TIMEOUT 2000 | ids)
check "the waiting task takes the freed slot" "$other" "$got"
contains "a released handle is refused" "NOLEASE" \
  "$(cli TASK.ADD step '{"wf":"w1"}' LEASE "$lease")"
cli TASK.ACK "$other" >/dev/null

# ---- A key with its own limit (LIMIT.KEY): its handle names that key's core -----------------

check "LIMIT.KEY gives vip its own slots" "OK" "$(cli LIMIT.KEY wf vip concurrency=1)"
vlease=$(redis-cli -p "$P" LEASE.ACQUIRE wf vip | sed -n 2p)
contains "an override's handle" "wf/=vip/" "$vlease"
v1=$(cli TASK.ADD step '{"wf":"vip"}' LEASE "$vlease")
v2=$(cli TASK.ADD step '{"wf":"vip"}' LEASE "$vlease")
vother=$(cli TASK.ADD step '{"wf":"vip"}')
got=$(redis-cli -p "$P" TASK.GET step COUNT 10 TIMEOUT 0 | ids)
check "the vip group runs under its slot" "$v1 $v2" "$got"
check "vip's other task waits" "parked" "$(field TASK.INFO "$vother" state)"
contains "EXPLAIN names the group" "Group slot" "$(cli TASK.EXPLAIN "$v1")"
# Replacing vip's limit restarts its leases: the group is over and its handle refused.
check "LIMIT.KEY again" "OK" "$(cli LIMIT.KEY wf vip concurrency=1)"
contains "a handle of a replaced key limit is refused" "NOLEASE" \
  "$(cli TASK.ADD step '{"wf":"vip"}' LEASE "$vlease")"
cli TASK.ACK "$v1" >/dev/null
cli TASK.ACK "$v2" >/dev/null
got=$(redis-cli -p "$P" TASK.GET step COUNT 10 TIMEOUT 2000 | ids)
check "then vip's other task runs" "$vother" "$got"
cli TASK.ACK "$vother" >/dev/null

# ---- A restart after the group's lease ended -----------------------------------------------------

# Leases are kept across restarts: this one is renewed to 1 ms just before the stop, so it has
# ended by the time the server is back (its end is stored; a start takes longer than that).
lease=$(redis-cli -p "$P" LEASE.ACQUIRE wf w1 TTL 600000 | sed -n 2p)
r1=$(cli TASK.ADD step '{"wf":"w1"}' LEASE "$lease")
r2=$(cli TASK.ADD step '{"wf":"w1"}' LEASE "$lease")
check "the lease is renewed to end at once" 1 "$(cli LEASE.RENEW "$lease" TTL 1)"
stop main
check "SIGTERM exits 0" 0 "$stop_rc"
start main --config "$tmp/sluice.yaml" --no-admin
P=$port_main
contains "the group's lease is gone after a restart" "NOLEASE" "$(cli LEASE.RENEW "$lease")"
contains "its handle is refused at submit" "NOLEASE" \
  "$(cli TASK.ADD step '{"wf":"w1"}' LEASE "$lease")"
got=$(redis-cli -p "$P" TASK.GET step COUNT 10 TIMEOUT 0 | ids)
check "restored group tasks each take their own unit" "$r1" "$got"
check "the second waits for it" "parked" "$(field TASK.INFO "$r2" state)"
cli TASK.ACK "$r1" >/dev/null
got=$(redis-cli -p "$P" TASK.GET step COUNT 10 TIMEOUT 2000 | ids)
check "then runs" "$r2" "$got"

finish
