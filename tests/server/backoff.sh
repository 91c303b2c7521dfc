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
# - the held key survives a restart with its whole lead (much longer than the limit's burst);
# - an adaptive rate (YAML `adaptive:` and the LIMIT.SET spec, validated with file:line errors by
#   `sluice check`): each backoff halves the key's rate down to its floor, LIMIT.RATE name key
#   shows the rate now and why, the key is paced at that rate, TASK.EXPLAIN of a task parked on
#   it says so, INFO counts the keys below their rate (keys_slowed=N, adaptive limits only),
#   and the lowered rate survives a restart (recovery is an hour away).
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
  adapt: {rate: 20/1s, key: explicit, adaptive: {decrease: 0.5, recover: 10%/1h, floor: 5/1s}}
types:
  call: {limits: [api]}
  acall: {limits: [adapt]}
EOF
M=600000 # ten minutes, in ms

# raw BYTES: sends BYTES (printf %b escapes, inline commands ending in QUIT) on a fresh
# connection and prints what comes back. Commands sent in one write run in one loop turn, at one
# time (lib.bash, resp_flat): checks that must not see the key's clock move between commands
# send them so, however slow the machine.
raw() {
  exec 3<>"/dev/tcp/127.0.0.1/$P" || return
  printf '%b' "$1" >&3 2>/dev/null
  timeout 30 cat <&3 | tr -d '\r'
  exec 3<&- 3>&-
}

start_single

# ---- LIMIT.BACKOFF ----
check "THROTTLE before" "1" "$(word "$(cli THROTTLE direct k)" 1)"
# In one write: the waits below are read at the backoff's own time, not seconds later.
raw "LIMIT.BACKOFF direct k $M\r\nTHROTTLE direct k\r\nTHROTTLE direct j\r\nLIMIT.BACKOFF direct k 1000\r\nQUIT\r\n" |
  resp_flat >"$tmp/flat"
within "LIMIT.BACKOFF answers the wait" $((M - 1000)) $M "$(rget 1)"
out=$(rget 2)
check "THROTTLE on the held key is denied" "0" "$(word "$out" 1)"
within "its retry_after is the backoff" $((M - 2000)) $M "$(word "$out" 4)"
check "another key is not held" "1" "$(word "$(rget 3)" 1)"
within "a shorter backoff keeps the longer wait" $((M - 2000)) $M "$(rget 4)"
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
t_fail=$(now_ms) # before the FAIL: the key is held until at least t_fail + M
check "TASK.FAIL RETRY_AFTER" "queued" "$(cli TASK.FAIL "$a" RETRY_AFTER $M REASON 429)"
b=$(cli TASK.ADD call '{"user":"ann"}')
c=$(cli TASK.ADD call '{"user":"bob"}')
got=$(cli TASK.GET call COUNT 5)
check "only the task on another key is delivered" "$c" "$(word "$got" 1)"
check "and no other" "5" "$(echo "$got" | wc -w)"
t0=$(now_ms)
start=$(field TASK.EXPLAIN "$b" estimated_start_ms)
if [ -n "$start" ]; then
  within "the task on the held key starts after the backoff" $((t_fail + M - 1000)) $((t0 + M + 1000)) "$start"
else
  bad "TASK.EXPLAIN $b has no estimated_start_ms: $(cli TASK.EXPLAIN "$b")"
fi
out=$(cli THROTTLE api ann)
# The wait left is M less what passed since the FAIL (a second more for the clocks' rounding).
since=$(($(now_ms) - t_fail))
check "a direct caller of the task's key is held too" "0" "$(word "$out" 1)"
within "for the RETRY_AFTER" $((M - since - 1000)) $M "$(word "$out" 4)"

# ---- adaptive rates ----
# rate_field LIMIT KEY NAME: one field of LIMIT.RATE's map.
rate_field() { redis-cli -p "$P" LIMIT.RATE "$1" "$2" | awk -v f="$3" 'NR % 2 == 1 { k = $0 } NR % 2 == 0 && k == f { print; exit }'; }
rate_of() { rate_field "$1" "$2" rate; }
why_of() { rate_field "$1" "$2" why; }
contains "the spec shows the policy" "decrease=0.5,recover=10%/1h,floor=5/1s" "$(cli LIMIT.GET adapt)"
check "a key never backed off has the configured rate" "20/1s" "$(rate_of adapt k)"
contains "and says so" "configured (adaptive" "$(why_of adapt k)"
cli LIMIT.BACKOFF adapt k 0 >/dev/null
check "a backoff halves the key's rate" "10/1s" "$(rate_of adapt k)"
contains "and says why" "lowered from 20/1s by its upstream's 429s" "$(why_of adapt k)"
check "another key keeps its rate" "20/1s" "$(rate_of adapt j)"
cli LIMIT.BACKOFF adapt k 0 >/dev/null
check "halved again" "5/1s" "$(rate_of adapt k)"
# One unit is left at the time the backoff asked (now); the next is one interval of 5/1s later.
# The backoff and both THROTTLEs go in one write, so they run at that one time: on a slow
# machine 200 ms could otherwise pass between them and bring the next unit.
raw 'LIMIT.BACKOFF adapt k 0\r\nTHROTTLE adapt k\r\nTHROTTLE adapt k\r\nQUIT\r\n' | resp_flat >"$tmp/flat"
check "never below the floor" "5/1s" "$(rate_of adapt k)"
check "the unit left at the backoff's time" "1" "$(word "$(rget 2)" 1)"
out=$(rget 3)
check "paced at the lowered rate: denied" "0" "$(word "$out" 1)"
within "for about one interval of 5/1s (200 ms)" 1 200 "$(word "$out" 4)"
# (INFO is read only after the timed THROTTLEs above, so that it adds no delay between them.)
contains "INFO counts the keys below their rate" ",keys_slowed=1" "$(redis-cli -p "$P" INFO limits | grep limit_adapt:)"
check "only for adaptive limits" "" "$(redis-cli -p "$P" INFO limits | grep limit_direct: | grep -o keys_slowed)"
contains "a rate limit's key only" "WRONGARGS" "$(cli LIMIT.RATE win k)"
check "LIMIT.RATE says the configured rate" "20/1s" "$(rate_field adapt k configured)"
check "a limit that is not adaptive" "configured (not adaptive)" "$(why_of direct k)"
check "LIMIT.SET takes the policy" "OK" "$(cli LIMIT.SET adapt2 rate=10/1s,key=explicit,decrease=50%,floor=2/1s)"
contains "written back canonically" "decrease=0.5,recover=10%/1m,floor=2/1s" "$(cli LIMIT.GET adapt2)"
contains "a floor above the rate is refused" "above the limit's rate" \
  "$(cli LIMIT.SET adapt3 rate=10/1s,key=explicit,floor=20/1s)"
contains "adaptive is for rates only" "does not apply to a window limit" \
  "$(cli LIMIT.SET adapt3 window=10/1s,key=explicit,decrease=0.5)"
# Tasks on a key whose rate was lowered: the one parked behind says why it is slow.
# The tasks are queued first; the two backoffs, the GET and TASK.EXPLAIN go in one write (one
# time), so the key's next unit, 200 ms after the backoffs, cannot come between them.
first=$(cli TASK.ADD acall '{}' KEY q)
parked=$(cli TASK.ADD acall '{}' KEY q)
raw "LIMIT.BACKOFF adapt q 0\r\nLIMIT.BACKOFF adapt q 0\r\nTASK.GET acall COUNT 5\r\nTASK.EXPLAIN $parked\r\nQUIT\r\n" |
  resp_flat >"$tmp/flat"
check "one task on the key runs" "$first" "$(word "$(rget 3)" 1)"
contains "TASK.EXPLAIN of the task parked on it says why it waits" \
  "Its adaptive rate is 5/1s (configured 20/1s), lowered by its upstream's 429s" \
  "$(rfield 4 text)"
contains "a second key below its rate (q)" ",keys_slowed=2" "$(redis-cli -p "$P" INFO limits | grep limit_adapt:)"

# YAML errors point at the file and line.
printf 'limits:\n  a: {rate: 10/1s, adaptive: {decrease: 1.5}}\n' >"$tmp/bad.yaml"
out=$("$sluice" check "$tmp/bad.yaml" 2>&1)
contains "sluice check: file:line of a bad decrease" "bad.yaml:2:" "$out"
contains "and what is wrong" 'limits.a.adaptive.decrease: bad decrease "1.5"' "$out"
printf 'limits:\n  a: {window: 10/1s, adaptive: {decrease: 0.5}}\n' >"$tmp/bad.yaml"
contains "adaptive on a window" "adaptive applies to rate limits only" "$("$sluice" check "$tmp/bad.yaml" 2>&1)"

# ---- a restart keeps the held keys, and the lowered rates ----
stop_single
start_single
check "after a restart the lowered rate is kept" "5/1s" "$(rate_of adapt k)"
contains "and counted again" ",keys_slowed=2" "$(redis-cli -p "$P" INFO limits | grep limit_adapt:)"
out=$(cli THROTTLE direct k)
check "after a restart the key is still held" "0" "$(word "$out" 1)"
within "for the rest of the backoff" $((M - 60000)) $M "$(word "$out" 4)"
out=$(cli THROTTLE api ann)
check "and the task's key" "0" "$(word "$out" 1)"
within "for the rest of its backoff" $((M - 60000)) $M "$(word "$out" 4)"
stop_single

finish
