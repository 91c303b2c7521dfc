#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The task ops of the store script (src/store/redis/tasks.lua) against a real redis-server:
# sluice_tasks_redis (tests/tools/tasks_redis.c, built next to the sluice binary) drives add,
# claim, ack, fail, touch, cancel and info through store/redis_tasks.c at injected store times
# (lapses, redelivery with ATTEMPT n+1 and its fence, parking and waking in priority order,
# all-or-nothing chains sharing THROTTLE's budget, RETRY_AFTER, the claim's bound).
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
finish
