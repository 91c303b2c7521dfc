#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The task ops of the store script (src/store/redis/tasks.lua) against a real redis-server:
# sluice_tasks_redis (tests/tools/tasks_redis.c, built next to the sluice binary) drives add,
# claim, ack, fail, touch, cancel and info through store/redis_tasks.c at injected store times
# (lapses, redelivery with ATTEMPT n+1 and its fence, parking and waking in priority order,
# all-or-nothing chains sharing THROTTLE's budget, RETRY_AFTER, the claim's bound), then the
# differential run against the single-node engine: the same random operations at the same times,
# every answer and every task's state compared, for each seed of SLUICE_TASKQ_SEEDS (default
# "1 2 3"; SLUICE_TASKQ_STEPS steps each, default 1000; a failure prints its seed and step), and
# for each of SLUICE_TASKQ_CAP_SEEDS (default "100", SLUICE_TASKQ_CAP_STEPS steps, default 500)
# with small max_tasks and max_parked on both sides (BUSY refusals, RATELIMITED failures).
#
# Usage: bash tests/server/redis_taskq.sh PATH-TO-SLUICE SOURCE-DIR
set -u

sluice=${1:?usage: redis_taskq.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"
helper="$(dirname "$sluice")/sluice_tasks_redis"
[ -x "$helper" ] || {
  bad "$helper is not built"
  finish
  exit 1
}
start_redis taskq
if out=$("$helper" "$rport_taskq" 2>&1); then
  ok
else
  bad "$out"
fi
echo "$out"
for seed in ${SLUICE_TASKQ_SEEDS:-1 2 3}; do
  if out=$("$helper" "$rport_taskq" "$seed" "${SLUICE_TASKQ_STEPS:-1000}" 2>&1); then
    ok
  else
    bad "seed $seed: $out"
  fi
  echo "$out" | tail -2 | head -1
done
# Seeds from 100 on: the same with small max_tasks and max_parked on both sides.
for seed in ${SLUICE_TASKQ_CAP_SEEDS:-100}; do
  if out=$("$helper" "$rport_taskq" "$seed" "${SLUICE_TASKQ_CAP_STEPS:-500}" 2>&1); then
    ok
  else
    bad "seed $seed: $out"
  fi
  echo "$out" | tail -2 | head -1
done
finish
