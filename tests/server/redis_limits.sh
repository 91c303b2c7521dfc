#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The differential test of the Redis limits script (src/store/redis/limits.lua) against the C
# core: sluice_limits_diff (tests/tools/limits_diff.c, built next to the sluice binary) drives
# random batches through both, on a throwaway redis-server, and compares every answer. At least
# SLUICE_DIFF_OPS (default 10000) link decisions per limit kind, for each of three seeds
# (SLUICE_DIFF_SEEDS, default "1 2 3"; a failure prints its seed so it replays).
#
# Usage: bash tests/server/redis_limits.sh PATH-TO-SLUICE SOURCE-DIR
set -u

sluice=${1:?usage: redis_limits.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"
helper="$(dirname "$sluice")/sluice_limits_diff"
[ -x "$helper" ] || {
  bad "$helper is not built"
  finish
  exit 1
}
start_redis diff
for seed in ${SLUICE_DIFF_SEEDS:-1 2 3}; do
  if out=$("$helper" "$rport_diff" "$seed" "${SLUICE_DIFF_OPS:-10000}" 2>&1); then
    ok
  else
    bad "seed $seed: $out"
  fi
  echo "$out" | tail -1
done
finish
