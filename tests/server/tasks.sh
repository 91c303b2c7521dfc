#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# End-to-end tests of the TASK.* commands: the real `sluice serve` on an ephemeral port with a
# configuration of limits and task types, driven by redis-cli. Every command and every error
# code; a rate-limited type hands out its burst and parks the rest (TASK.EXPLAIN names the limit
# and a position); a blocked TASK.GET returns when the slot comes; a concurrency limit holds the
# second task until the first is acked; cancel, task-key replacement, retry and dead letters,
# lease expiry, the actual cost settled on a quota, a limit with overflow reject; RESP3 maps.
# Timing checks are loose: the machine may be busy. Traffic goes to 127.0.0.1 only.
#
# Usage: bash tests/server/tasks.sh PATH-TO-SLUICE SOURCE-DIR
# Prints one line per failed check and "N passed, N failed"; exits non-zero on any failure.
set -u
set -f # replies such as *0 are words, never file patterns

sluice=${1:?usage: tasks.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"


# raw BYTES: sends BYTES (printf %b escapes) to the main server on a fresh connection and prints
# what comes back until the server closes it (after a QUIT; 30 s at most, a deadline).
raw() {
  exec 3<>"/dev/tcp/127.0.0.1/$P" || return
  printf '%b' "$1" >&3 2>/dev/null
  timeout 30 cat <&3 | tr -d '\r'
  exec 3<&- 3>&-
}


# cli ARGS...: one redis-cli command to the main server, its output lines joined by spaces.
# field CMD ID NAME: the value of NAME in the map that `CMD ID` (TASK.INFO, TASK.EXPLAIN)
# replies (redis-cli prints a RESP2 map as key and value lines; nil as an empty line).
# word REPLY N: the Nth word (from 1). A task of TASK.GET is 5 words:
#   id type payload attempt lease_until_ms

cat >"$tmp/sluice.yaml" <<'EOF'
engine:
  strict_types: true
limits:
  api:                 # one slot every 5 s: the parked checks below run inside the first one
    rate: 2/10s        # however slow redis-cli starts on a busy machine
    burst: 2
    key: explicit
  slots:
    concurrency: 1
  budget:
    quota: 100/total
  breaker:
    rate: 1/1h
    overflow: reject
  daily:
    rate: 10/1d
types:
  rl:
    limits: [api]
  one:
    limits: [slots]
  q:
    limits: [budget]
  rej:
    limits: [breaker]
  day:
    limits: [daily]
  plain:
    retry: {max_attempts: 3, backoff: fixed, base: 0s}
  short:
    lease: 5s          # the checks on the second delivery run inside its lease
EOF
start main --config "$tmp/sluice.yaml" --max-key-len 16 --max-payload-len 64
P=$port_main
t_start=$(now_ms) # before any task: every submitted_ms is after it

# ---- A rate-limited type: the burst is handed out, the rest parks -----------------------------

for i in 1 2 3 4 5; do
  check "TASK.ADD rl $i" "$i" "$(cli TASK.ADD rl "{\"n\":$i}" KEY k1)"
done
# The burst and every check that needs the next slot (5 s later) not to have come, in one write:
# the server runs them in one turn, at one time, so the slot cannot come in between however slow
# the machine is (a slot queues a parked task).
t_burst=$(now_ms)
raw 'TASK.GET rl COUNT 5\r\nTASK.INFO 5\r\nTASK.EXPLAIN 5\r\nTASK.EXPLAIN 1\r\nTASK.GET rl\r\nTASK.GET rl TIMEOUT 0\r\nTASK.CANCEL 5\r\nTASK.INFO 5\r\nTASK.CANCEL 5\r\nQUIT\r\n' |
  resp_flat >"$tmp/flat"
t_burst_end=$(now_ms)
check "all ten replies came" "OK" "$(rget 10)"
out=$(rget 1)
check "TASK.GET COUNT 5 gets the burst of 2" "1 rl {\"n\":1} 1 2 rl {\"n\":2} 1" \
  "$(echo "$out" | awk '{ print $1, $2, $3, $4, $6, $7, $8, $9 }')"
lease=$(word "$out" 5)
# The server's clock and date's may differ by a little (the server reads the wall clock once at
# start, then counts with the monotonic one): 1 s each side. Bounds taken around the command,
# not after it, so that a slow client moves nothing.
within "lease_until_ms is 30 s after the delivery" $((t_burst + 29000)) $((t_burst_end + 31000)) "$lease"
check "parked task state" "parked" "$(rfield 2 state)"
check "TASK.EXPLAIN state" "parked" "$(rfield 3 state)"
check "TASK.EXPLAIN names the limit" "api" "$(rfield 3 limit)"
check "TASK.EXPLAIN names the key" "k1" "$(rfield 3 key)"
check "TASK.EXPLAIN position" "2" "$(rfield 3 position)"
check "TASK.EXPLAIN queue_length" "3" "$(rfield 3 queue_length)"
est=$(rfield 3 estimated_start_ms)
within "TASK.EXPLAIN estimated start, about 15 s after the burst" $((t_burst + 5000)) $((t_burst_end + 20000)) "$est"
contains "TASK.EXPLAIN text" "Parked on limit \"api\" key \"k1\" with 2 task(s) ahead" \
  "$(rfield 3 text)"
check "TASK.EXPLAIN of a running task: no limit" "running " "$(rfield 4 state) $(rfield 4 limit)"
check "TASK.GET with nothing grantable, no TIMEOUT: empty" "" "$(rget 5)"
check "TASK.GET TIMEOUT 0: empty" "" "$(rget 6)"
check "TASK.CANCEL a parked task" "1" "$(rget 7)"
check "cancelled" "cancelled" "$(rfield 8 state)"
check "TASK.CANCEL again: already finished" "0" "$(rget 9)"
# The next slot comes 5 s after the burst: a blocked TASK.GET returns then, not at its TIMEOUT
# (a minute: far from the slot, so that only a GET that waited for it comes near).
t0=$(now_ms)
out=$(cli TASK.GET rl TIMEOUT 60000)
t1=$(now_ms)
check "blocked TASK.GET gets task 3" "3 rl" "$(echo "$out" | cut -d' ' -f1-2)"
within "blocked TASK.GET returned when the slot came" 0 50000 $((t1 - t0))
# TIMEOUT passes with nothing for this type.
t0=$(now_ms)
check "TASK.GET TIMEOUT with nothing: empty" "" "$(cli TASK.GET plain TIMEOUT 300)"
t1=$(now_ms)
within "TASK.GET waited its TIMEOUT" 250 30000 $((t1 - t0))

# ---- Ack, touch, info --------------------------------------------------------------------------

check "TASK.ACK" "OK" "$(cli TASK.ACK 1)"
check "done" "done" "$(field TASK.INFO 1 state)"
contains "TASK.ACK twice: NOLEASE" "NOLEASE task 1 is done, not running" "$(cli TASK.ACK 1)"
touched=$(cli TASK.TOUCH 2)
within "TASK.TOUCH returns the new lease end" "$lease" $(($(now_ms) + 31000)) "$touched"
check "TASK.INFO lease_until_ms after TOUCH" "$touched" "$(field TASK.INFO 2 lease_until_ms)"
check "TASK.INFO type payload attempt units priority" "rl {\"n\":2} 1 1 0" \
  "$(field TASK.INFO 2 type) $(field TASK.INFO 2 payload) $(field TASK.INFO 2 attempt) $(field TASK.INFO 2 units) $(field TASK.INFO 2 priority)"
sub=$(field TASK.INFO 2 submitted_ms)
within "TASK.INFO submitted_ms" $((t_start - 1000)) $(($(now_ms) + 1000)) "$sub"
check "TASK.INFO no failure on a running task" "||" \
  "$(field TASK.INFO 2 fail_reason)|$(field TASK.INFO 2 limit)|$(field TASK.INFO 2 retry_after_ms)"
contains "TASK.CANCEL a running task: INUSE" "INUSE task 2 is running" "$(cli TASK.CANCEL 2)"
check "TASK.ACK the others" "OK OK" "$(cli TASK.ACK 2) $(cli TASK.ACK 3)"

# ---- Task keys: replacement, and EXISTS while running ------------------------------------------

id=$(cli TASK.ADD plain '{"v":1}' ID job1)
check "ID replaces a queued task's payload, same id" "$id" "$(cli TASK.ADD plain '{"v":2}' ID job1)"
check "replaced payload" '{"v":2}' "$(field TASK.INFO "$id" payload)"
check "TASK.INFO task_key" "job1" "$(field TASK.INFO "$id" task_key)"
out=$(cli TASK.GET plain)
check "the replaced task is delivered once" "$id plain {\"v\":2} 1" "$(echo "$out" | cut -d' ' -f1-4)"
check "EXISTS while the task key runs" "EXISTS running_id=$id the task key is held by running task $id" \
  "$(cli TASK.ADD plain '{"v":3}' ID job1 | cut -d';' -f1)"

# ---- Fail: retry then dead ---------------------------------------------------------------------

check "TASK.FAIL RETRY" "queued" "$(cli TASK.FAIL "$id" RETRY REASON 'flaky upstream')"
out=$(cli TASK.GET plain TIMEOUT 30000)
check "retried task delivered again, attempt 2" "$id plain {\"v\":2} 2" "$(echo "$out" | cut -d' ' -f1-4)"
check "TASK.FAIL DEAD" "failed" "$(cli TASK.FAIL "$id" DEAD REASON 'bad input')"
check "dead: failed, reason dead, the worker's message" "failed dead bad input" \
  "$(field TASK.INFO "$id" state) $(field TASK.INFO "$id" fail_reason) $(field TASK.INFO "$id" fail_message)"
# max_attempts 3: the third failure fails it for good.
id2=$(cli TASK.ADD plain '{}')
for a in 1 2; do
  cli TASK.GET plain TIMEOUT 30000 >/dev/null
  check "FAIL attempt $a retries" "queued" "$(cli TASK.FAIL "$id2")"
done
check "attempt 3 delivered" "3" "$(word "$(cli TASK.GET plain TIMEOUT 30000)" 4)"
check "FAIL attempt 3: failed" "failed" "$(cli TASK.FAIL "$id2")"
check "fail_reason attempts" "attempts" "$(field TASK.INFO "$id2" fail_reason)"
# RETRY_AFTER: the upstream's 429 holds the retry back and uses up no attempt (plain allows 3).
id3=$(cli TASK.ADD plain '{}')
for a in 1 2 3; do
  cli TASK.GET plain TIMEOUT 30000 >/dev/null
  before=$(date +%s%3N)
  check "FAIL RETRY_AFTER $a retries" "queued" "$(cli TASK.FAIL "$id3" RETRY_AFTER 300 REASON 429)"
  nb=$(field TASK.INFO "$id3" not_before_ms)
  check "not before its Retry-After ($a)" "yes" "$([ "$nb" -ge $((before + 300 - 20)) ] && echo yes)"
done
check "after three 429s it is delivered a fourth time" "4" "$(word "$(cli TASK.GET plain TIMEOUT 30000)" 4)"
contains "RETRY_AFTER with DEAD" "WRONGARGS RETRY_AFTER retries the task" \
  "$(cli TASK.FAIL "$id3" DEAD RETRY_AFTER 10)"
contains "RETRY_AFTER negative" "WRONGARGS" "$(cli TASK.FAIL "$id3" RETRY_AFTER -1)"
check "ACK after the 429s" "OK" "$(cli TASK.ACK "$id3")"

# ---- A concurrency limit: the second waits for the first's ack ---------------------------------

a=$(cli TASK.ADD one '{"w":1}')
b=$(cli TASK.ADD one '{"w":2}')
out=$(cli TASK.GET one COUNT 2)
check "concurrency 1: one task of two" "$a" "$(echo "$out" | awk '{ print $1, NF }' | sed 's/ 5$//')"
check "a second TASK.GET gets nothing" "" "$(cli TASK.GET one)"
check "the other is parked on slots" "parked slots" \
  "$(field TASK.EXPLAIN "$b" state) $(field TASK.EXPLAIN "$b" limit)"
redis-cli -p "$P" TASK.GET one TIMEOUT 120000 >"$tmp/blocked" 2>&1 &
waiter=$!
wait_until "the worker blocks" 20 blocked_is 1
check "still waiting before the ack" "" "$(cat "$tmp/blocked")"
check "ack the first" "OK" "$(cli TASK.ACK "$a")"
wait "$waiter"
check "the blocked worker gets the second after the ack" "$b" "$(head -1 "$tmp/blocked")"
check "ack the second" "OK" "$(cli TASK.ACK "$b")"

# ---- The actual cost settles a quota ------------------------------------------------------------

check "quota untouched" "99" "$(cli THROTTLE budget x PEEK | cut -d' ' -f3)"
qid=$(cli TASK.ADD q '{}' UNITS 5)
cli TASK.GET q >/dev/null
check "5 units charged at start" "94" "$(cli THROTTLE budget x PEEK | cut -d' ' -f3)"
check "TASK.ACK COST 1" "OK" "$(cli TASK.ACK "$qid" COST 1)"
check "settled at the actual cost" "98" "$(cli THROTTLE budget x PEEK | cut -d' ' -f3)"

# ---- A huge actual cost denies the key: units * T past int64 saturates, it never wraps ----------

did=$(cli TASK.ADD day '{}')
check "10/1d: the first task runs" "$did" "$(word "$(cli TASK.GET day)" 1)"
check "TASK.ACK COST 860000 (860000 * 8640 s passes int64)" "OK" "$(cli TASK.ACK "$did" COST 860000)"
check "the 10/1d key is denied after it" "0" "$(cli THROTTLE daily x PEEK | cut -d' ' -f1)"
cli TASK.ADD day '{}' >/dev/null
check "and the next task of the type does not run" "" "$(cli TASK.GET day)"

# ---- overflow reject: the denial's fields in TASK.INFO ------------------------------------------

r1=$(cli TASK.ADD rej '{}')
r2=$(cli TASK.ADD rej '{}')
check "reject: the first runs" "$r1" "$(word "$(cli TASK.GET rej COUNT 2)" 1)"
check "reject: the second fails" "failed ratelimited" \
  "$(field TASK.INFO "$r2" state) $(field TASK.INFO "$r2" fail_reason)"
check "denial fields" "breaker rate  1 3600000" \
  "$(field TASK.INFO "$r2" limit) $(field TASK.INFO "$r2" kind) $(field TASK.INFO "$r2" tier) $(field TASK.INFO "$r2" limit_value) $(field TASK.INFO "$r2" window_ms)"
within "denial retry_after_ms" 3000000 3600000 "$(field TASK.INFO "$r2" retry_after_ms)"
contains "TASK.EXPLAIN of the failure" "limit \"breaker\" (rate) refused" "$(field TASK.EXPLAIN "$r2" text)"
cli TASK.ACK "$r1" >/dev/null

# ---- DELAY, PRIORITY, lease expiry --------------------------------------------------------------

# TASK.ADD and TASK.GET in one write: the server runs both in one turn, well inside the delay
# however slow the machine is.
out=$(echo $(raw '*5\r\n$8\r\nTASK.ADD\r\n$5\r\nplain\r\n$7\r\n{"d":1}\r\n$5\r\nDELAY\r\n$3\r\n400\r\nTASK.GET plain\r\nQUIT\r\n'))
d=$(word "$out" 1 | tr -d :)
check "not grantable before its delay" "*0" "$(word "$out" 2)"
check "delayed task is queued" "queued" "$(field TASK.INFO "$d" state)"
t0=$(now_ms)
check "delivered after the delay" "$d" "$(word "$(cli TASK.GET plain TIMEOUT 60000)" 1)"
within "after about 400 ms, not at the TIMEOUT (1 min)" 0 50000 $(($(now_ms) - t0))
cli TASK.ACK "$d" >/dev/null
lo=$(cli TASK.ADD plain '{"p":"low"}')
hi=$(cli TASK.ADD plain '{"p":"high"}' PRIORITY 5)
check "TASK.INFO priority" "5" "$(field TASK.INFO "$hi" priority)"
out=$(cli TASK.GET plain COUNT 2)
check "higher priority first" "$hi $lo" "$(word "$out" 1) $(word "$out" 6)"
cli TASK.ACK "$hi" >/dev/null
cli TASK.ACK "$lo" >/dev/null
s1=$(cli TASK.ADD short '{}')
check "short lease delivered" "$s1" "$(word "$(cli TASK.GET short)" 1)"
# The first worker comes back late: naming its attempt, it cannot touch, fail or ack the second
# worker's delivery; the second worker, naming attempt 2, can. All of it must happen inside the
# second lease (5 s): sent in one write behind the blocked TASK.GET, the calls run in the turn
# that redelivers the task, at one time, however slow the machine is.
raw "TASK.GET short TIMEOUT 60000\r\nTASK.TOUCH $s1 ATTEMPT 1\r\nTASK.FAIL $s1 DEAD ATTEMPT 1\r\nTASK.ACK $s1 ATTEMPT 1\r\nTASK.INFO $s1\r\nTASK.ACK $s1 ATTEMPT 0\r\nTASK.ACK $s1 ATTEMPT\r\nTASK.TOUCH $s1 ATTEMPT 2\r\nTASK.ACK $s1 COST 1 ATTEMPT 2\r\nQUIT\r\n" |
  resp_flat >"$tmp/flat"
check "all ten replies came" "OK" "$(rget 10)"
out=$(rget 1)
check "lease expired: redelivered, attempt 2" "$s1 2" "$(word "$out" 1) $(word "$out" 4)"
contains "stale TOUCH refused" "NOLEASE task $s1 attempt 1 is not running" "$(rget 2)"
contains "stale FAIL refused" "NOLEASE" "$(rget 3)"
contains "stale ACK refused" "NOLEASE" "$(rget 4)"
check "still running after the stale calls" "running" "$(rfield 5 state)"
contains "ATTEMPT 0 is out of range" "WRONGARGS" "$(rget 6)"
contains "ACK without ATTEMPT's value" "WRONGARGS" "$(rget 7)"
within "current TOUCH accepted" 1000000000000 9999999999999 "$(rget 8)"
check "current ACK accepted" "OK" "$(rget 9)"

# ---- Several types, RESP3 ----------------------------------------------------------------------

m=$(cli TASK.ADD one '{}')
out=$(cli TASK.GET plain short one COUNT 3)
check "TASK.GET several types" "$m one" "$(echo "$out" | cut -d' ' -f1-2)"
cli TASK.ACK "$m" >/dev/null
m=$(cli TASK.ADD plain '{"x":1}')
out=$(raw 'HELLO 3\r\nTASK.GET plain\r\nTASK.INFO '"$m"'\r\nTASK.GET plain\r\nQUIT\r\n')
contains "RESP3: an array of maps" "*1 %5 \$2 id :$m \$4 type \$5 plain \$7 payload \$7 {\"x\":1} \$7 attempt :1 \$14 lease_until_ms :" "$(echo $out)"
contains "RESP3: TASK.INFO a map with nulls" "%22 \$2 id :$m \$5 state \$7 running" "$(echo $out)"
contains "RESP3: null task_key" "\$8 task_key _ " "$(echo $out)"
contains "RESP3: empty TASK.GET" "*0 +OK" "$(echo $out)"
cli TASK.ACK "$m" >/dev/null

# ---- Errors -------------------------------------------------------------------------------------

contains "TASK.ADD arity" "WRONGARGS wrong number of arguments for 'task.add' command" "$(cli TASK.ADD rl)"
contains "TASK.ADD syntax" "WRONGARGS syntax error: TASK.ADD type payload" "$(cli TASK.ADD plain '{}' BOGUS 1)"
contains "TASK.ADD option without value" "WRONGARGS syntax error" "$(cli TASK.ADD plain '{}' KEY)"
contains "TASK.ADD UNITS 0" "WRONGARGS UNITS must be an integer from 1 to 1000000000" \
  "$(cli TASK.ADD plain '{}' UNITS 0)"
contains "TASK.ADD PRIORITY" "WRONGARGS PRIORITY must be an integer" "$(cli TASK.ADD plain '{}' PRIORITY x)"
contains "TASK.ADD DELAY" "WRONGARGS DELAY must be an integer from 0" "$(cli TASK.ADD plain '{}' DELAY -1)"
contains "TASK.ADD long KEY" "WRONGARGS KEY of 17 bytes: it must be 1 to 16 bytes" \
  "$(cli TASK.ADD rl '{}' KEY 12345678901234567)"
contains "TASK.ADD long ID" "WRONGARGS ID of 17 bytes" "$(cli TASK.ADD plain '{}' ID 12345678901234567)"
contains "TASK.ADD long payload" "WRONGARGS payload of 65 bytes is longer than the maximum of 64" \
  "$(cli TASK.ADD plain "\"$(head -c 63 /dev/zero | tr '\0' a)\"")"
contains "TASK.ADD bad JSON" "WRONGARGS payload is not valid JSON" "$(cli TASK.ADD plain '{')"
contains "TASK.ADD missing explicit key" "WRONGARGS limit \"api\" needs an explicit key" \
  "$(cli TASK.ADD rl '{}')"
contains "TASK.ADD unknown type (strict)" "NOLIMIT" "$(cli TASK.ADD nosuch '{}')"
contains "TASK.ADD empty type" "WRONGARGS a task type name is 1 to 255 bytes" "$(cli TASK.ADD '' '{}')"
contains "TASK.GET arity" "WRONGARGS wrong number of arguments for 'task.get' command" "$(cli TASK.GET)"
contains "TASK.GET COUNT 0" "WRONGARGS COUNT must be an integer from 1 to 1000" "$(cli TASK.GET plain COUNT 0)"
contains "TASK.GET COUNT 1001" "WRONGARGS COUNT must be an integer from 1 to 1000" \
  "$(cli TASK.GET plain COUNT 1001)"
contains "TASK.GET TIMEOUT -1" "WRONGARGS TIMEOUT must be an integer from 0" "$(cli TASK.GET plain TIMEOUT -1)"
contains "TASK.GET option without value" "WRONGARGS syntax error: TASK.GET type [type ...] [COUNT n] [TIMEOUT ms]" \
  "$(cli TASK.GET plain COUNT)"
contains "TASK.GET type after options" "WRONGARGS syntax error" "$(cli TASK.GET plain COUNT 1 other)"
contains "TASK.GET empty type" "WRONGARGS a task type name" "$(cli TASK.GET plain '')"
contains "TASK.ACK arity" "WRONGARGS wrong number of arguments for 'task.ack' command" "$(cli TASK.ACK)"
contains "TASK.ACK syntax" "WRONGARGS syntax error: TASK.ACK id [COST n]" "$(cli TASK.ACK 1 COST)"
contains "TASK.ACK bad COST" "WRONGARGS COST must be an integer from 0" "$(cli TASK.ACK 1 COST -1)"
contains "TASK.ACK bad id" "WRONGARGS a task id is a positive decimal integer" "$(cli TASK.ACK abc)"
contains "TASK.ACK id 0" "WRONGARGS a task id" "$(cli TASK.ACK 0)"
contains "TASK.ACK unknown" "NOTASK no task 999999" "$(cli TASK.ACK 999999)"
q1=$(cli TASK.ADD plain '{}')
contains "TASK.ACK a queued task: NOLEASE" "NOLEASE task $q1 is queued, not running" "$(cli TASK.ACK "$q1")"
contains "TASK.FAIL arity" "WRONGARGS wrong number of arguments for 'task.fail' command" "$(cli TASK.FAIL)"
contains "TASK.FAIL syntax" "WRONGARGS syntax error: TASK.FAIL id [RETRY|DEAD] [RETRY_AFTER ms] [REASON text]" \
  "$(cli TASK.FAIL "$q1" LATER)"
contains "TASK.FAIL unknown" "NOTASK" "$(cli TASK.FAIL 999999)"
contains "TASK.FAIL a queued task" "NOLEASE" "$(cli TASK.FAIL "$q1" DEAD)"
contains "TASK.TOUCH a queued task" "NOLEASE" "$(cli TASK.TOUCH "$q1")"
contains "TASK.TOUCH unknown" "NOTASK" "$(cli TASK.TOUCH 999999)"
contains "TASK.TOUCH arity" "WRONGARGS syntax error: TASK.TOUCH id [ATTEMPT n]" \
  "$(cli TASK.TOUCH 1 2)"
contains "TASK.CANCEL unknown" "NOTASK" "$(cli TASK.CANCEL 999999)"
contains "TASK.CANCEL bad id" "WRONGARGS a task id" "$(cli TASK.CANCEL -3)"
check "TASK.CANCEL a queued task" "1" "$(cli TASK.CANCEL "$q1")"
contains "TASK.INFO unknown" "NOTASK" "$(cli TASK.INFO 999999)"
contains "TASK.INFO bad id" "WRONGARGS" "$(cli TASK.INFO x)"
contains "TASK.EXPLAIN unknown" "NOTASK" "$(cli TASK.EXPLAIN 999999)"
contains "TASK.EXPLAIN arity" "WRONGARGS wrong number of arguments for 'task.explain' command" \
  "$(cli TASK.EXPLAIN)"
check "COMMAND INFO task.get" "task.get -2 write blocking 0 0 0" "$(cli COMMAND INFO task.get)"

stop main
check "SIGTERM exits 0" "0" "$stop_rc"

# ---- Caps: BUSY (backpressure); a stopping server answers blocked workers ---------------------

printf 'engine:\n  max_tasks: 2\ntypes:\n  t:\n' >"$tmp/small.yaml"
# A drain deadline of 10 min: a stop that left the blocked worker to it would show in the time.
start small --config "$tmp/small.yaml" --shutdown-timeout 600000
P=$port_small
cli TASK.ADD t '{}' >/dev/null
cli TASK.ADD t '{}' >/dev/null
contains "BUSY past max_tasks" "BUSY too many tasks (max_tasks 2)" "$(cli TASK.ADD t '{}')"
cli TASK.GET t COUNT 2 >/dev/null
redis-cli -p "$P" TASK.GET t TIMEOUT 300000 >"$tmp/stopped" 2>&1 &
waiter=$!
wait_until "the worker blocks" 15 blocked_is 1
t0=$(now_ms)
stop small
wait "$waiter"
check "stopping: a blocked worker gets the empty reply" "" "$(cat "$tmp/stopped")"
within "stopping at once, not at the worker's TIMEOUT or the drain deadline" 0 120000 $(($(now_ms) - t0))
check "small: SIGTERM exits 0" "0" "$stop_rc"

finish
