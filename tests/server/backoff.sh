#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Backoff over the wire: a worker whose upstream answered 429 with Retry-After holds the key back
# for every caller (issue 14, item 2):
#
# - LIMIT.BACKOFF limit key ms: THROTTLE on that key is denied until then (another key is not),
#   the reply says how long the key now waits, a shorter backoff changes nothing, and INFO
#   counts it (backoffs=N); window, sliding, quota and concurrency limits are refused, as are a
#   negative or too long ms and an unknown limit;
# - TASK.FAIL id RETRY_AFTER ms holds the keys of the task's rate links back too: another task
#   on the same key is not delivered (TASK.EXPLAIN starts it then), a task on another key is;
# - the held key survives a restart with its whole lead (much longer than the limit's burst).
# Backoffs are 10 minutes, so no slot comes back during the test however slow the machine.
# Traffic goes to 127.0.0.1 only.
#
# Usage: bash tests/server/backoff.sh PATH-TO-SLUICE SOURCE-DIR
# Prints one line per failed check and "N passed, N failed"; exits non-zero on any failure.
set -u
set -f

sluice=${1:?usage: backoff.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"
pid=

cleanup() {
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}

if ! command -v redis-cli >/dev/null; then
  echo "backoff.sh: redis-cli is missing (scripts/deps.sh installs it)"
  echo "0 passed, 1 failed"
  exit 1
fi

data="$tmp/data"
conf="$tmp/sluice.yaml"
cat >"$conf" <<EOF
limits:
  api: {rate: 10/1s, key: input.user}
  direct: {rate: 10/1s, key: explicit}
  win: {window: 10/1s, key: explicit}
  slots: {concurrency: 2, key: explicit}
types:
  call: {limits: [api]}
EOF
M=600000 # ten minutes, in ms

start_single

# ---- LIMIT.BACKOFF ----
check "THROTTLE before" "1" "$(word "$(cli THROTTLE direct k)" 1)"
within "LIMIT.BACKOFF answers the wait" $((M - 1000)) $M "$(cli LIMIT.BACKOFF direct k $M)"
out=$(cli THROTTLE direct k)
check "THROTTLE on the held key is denied" "0" "$(word "$out" 1)"
within "its retry_after is the backoff" $((M - 2000)) $M "$(word "$out" 4)"
check "another key is not held" "1" "$(word "$(cli THROTTLE direct j)" 1)"
within "a shorter backoff keeps the longer wait" $((M - 2000)) $M "$(cli LIMIT.BACKOFF direct k 1000)"
contains "INFO counts backoffs" "limit_direct:kind=rate" "$(cli INFO limits)"
contains "INFO counts backoffs" ",backoffs=2" "$(cli INFO limits | grep limit_direct)"
contains "a window limit is refused" "WRONGARGS" "$(cli LIMIT.BACKOFF win k 1000)"
contains "it says why" "only a rate limit" "$(cli LIMIT.BACKOFF win k 1000)"
contains "a concurrency limit is refused" "WRONGARGS" "$(cli LIMIT.BACKOFF slots k 1000)"
contains "negative ms" "WRONGARGS" "$(cli LIMIT.BACKOFF direct k -1)"
contains "more than 30 days" "WRONGARGS" "$(cli LIMIT.BACKOFF direct k 2592000001)"
contains "unknown limit" "NOLIMIT" "$(cli LIMIT.BACKOFF nope k 1000)"
contains "syntax" "WRONGARGS" "$(cli LIMIT.BACKOFF direct k 1000 EXTRA)"

# ---- TASK.FAIL ... RETRY_AFTER ----
a=$(cli TASK.ADD call '{"user":"ann"}')
got=$(cli TASK.GET call)
check "the first task is delivered" "$a" "$(word "$got" 1)"
check "TASK.FAIL RETRY_AFTER" "queued" "$(cli TASK.FAIL "$a" RETRY_AFTER $M REASON 429)"
b=$(cli TASK.ADD call '{"user":"ann"}')
c=$(cli TASK.ADD call '{"user":"bob"}')
got=$(cli TASK.GET call COUNT 5)
check "only the task on another key is delivered" "$c" "$(word "$got" 1)"
check "and no other" "5" "$(echo "$got" | wc -w)"
t0=$(now_ms)
start=$(field TASK.EXPLAIN "$b" estimated_start_ms)
if [ -n "$start" ]; then
  within "the task on the held key starts after the backoff" $((t0 + M - 5000)) $((t0 + M + 1000)) "$start"
else
  bad "TASK.EXPLAIN $b has no estimated_start_ms: $(cli TASK.EXPLAIN "$b")"
fi
out=$(cli THROTTLE api ann)
check "a direct caller of the task's key is held too" "0" "$(word "$out" 1)"
within "for the RETRY_AFTER" $((M - 5000)) $M "$(word "$out" 4)"

# ---- a restart keeps the held keys ----
stop_single
start_single
out=$(cli THROTTLE direct k)
check "after a restart the key is still held" "0" "$(word "$out" 1)"
within "for the rest of the backoff" $((M - 60000)) $M "$(word "$out" 4)"
out=$(cli THROTTLE api ann)
check "and the task's key" "0" "$(word "$out" 1)"
within "for the rest of its backoff" $((M - 60000)) $M "$(word "$out" 4)"
stop_single

finish
