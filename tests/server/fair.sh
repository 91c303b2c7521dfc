#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A type's dispatch options across a restart of `sluice serve`, end to end with redis-cli:
#
# - fairness: keys: 300 tasks of user "big" then one of "small" are queued; after a graceful
#   restart the tasks go back into their users' turns, and small's task is among the first two
#   delivered (under FIFO it would be the 301st);
# - charge_redelivery: a running task whose lease ends while the server is down is delivered
#   again (attempt 2) and pays its rate limit again (seed 001), so the hourly budget of 2 is
#   spent and the next task waits; restart.sh checks the default (redeemed, not charged);
# - `sluice check` restates both settings.
# Traffic goes to 127.0.0.1 only.
#
# Usage: bash tests/server/fair.sh PATH-TO-SLUICE SOURCE-DIR
# Prints one line per failed check and "N passed, N failed"; exits non-zero on any failure.
set -u
set -f

sluice=${1:?usage: fair.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"
pid=

data="$tmp/data"
conf="$tmp/sluice.yaml"
# committed: waits until every task change is written (TASK.GET and TASK.ADD replies do not wait
# for the disk in every case; the key timer's commit follows within 100 ms).
committed() {
  for _ in $(seq 1 250); do
    [ "$(info dirty_tasks)" = 0 ] && return 0
    sleep 0.02
  done
  return 1
}

cat >"$conf" <<'YAML'
limits:
  per_user: {rate: 100000/1s, key: input.user}
  hourly: {rate: 2/1h, burst: 2}
types:
  job:
    limits: [per_user]
    fairness: keys
  redo:
    limits: [hourly]
    lease: 1s
    charge_redelivery: true
YAML

out=$("$sluice" check "$conf")
contains "check: job's fairness" "type job: limits per_user; priority 0, lease 30s, retry 3 attempts exponential 1s..5m; fairness keys of per_user" "$out"
contains "check: redo's accounting" "; redeliveries pay the limits again" "$out"

start_single

# ---- Fair turns survive a restart ----------------------------------------------------------------

for i in $(seq 1 300); do printf '%s\n' "TASK.ADD job '{\"user\":\"big\"}'"; done | redis-cli -p "$P" >/dev/null
small=$(cli TASK.ADD job '{"user":"small"}')
check "300 big tasks before small's" 301 "$small"
committed
check "the tasks are committed" 0 "$(info dirty_tasks)"
stop_single
start_single
out=$(redis-cli -p "$P" TASK.GET job COUNT 2 | awk 'NR % 5 == 1')
contains "after a restart small's task is among the first two" "$small" "$out"

# ---- charge_redelivery: a redelivery after a restart pays again ----------------------------------

id=$(cli TASK.ADD redo '{}')
out=$(cli TASK.GET redo)
check "delivered: attempt 1" "$id redo 1" "$(echo "$out" | awk '{ print $1, $2, $4 }')"
committed
check "the delivery is committed" 0 "$(info dirty_tasks)"
stop_single
sleep 1.3 # the lease (1 s) ends while the server is down
start_single
out=$(cli TASK.GET redo)
check "redelivered with attempt 2, charged" "$id redo 2" "$(echo "$out" | awk '{ print $1, $2, $4 }')"
check "TASK.ACK" "OK" "$(cli TASK.ACK "$id")"
other=$(cli TASK.ADD redo '{}')
check "the budget of 2 went to the two executions: the next task waits" "" "$(cli TASK.GET redo)"
check "parked" "parked" "$(field TASK.INFO "$other" state)"
stop_single

finish
