#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Storage faults under `sluice serve --enable-debug-commands` (the store opened through the
# fault-injection VFS, driven by DEBUG FAULT), end to end with redis-cli:
#
# - a failed fsync (DEBUG FAULT SYNC 1): the TASK.ADD whose commit it failed is answered
#   -IOERR fsync failed: ...; the next TASK.ADD succeeds; the server keeps serving throughout;
# - a failed write (DEBUG FAULT WRITE 1): -IOERR too;
# - a full disk (DEBUG FAULT FULL on): -IOERR disk full, THROTTLE and reads still answered, INFO
#   persistence says last_commit_ok:0 and why; FULL off: commits succeed again;
# - what a -IOERR means afterwards, and what is asserted: the server never reports success for
#   a change that may not be on disk, but it keeps the change in memory and writes it with the
#   next commit (no fsync is retried: a new transaction writes it again). So a task answered
#   -IOERR is present after a restart, and a client that retried it with the same ID got the
#   same task back (dedup): each such task key is on exactly one task, under the id the retry
#   returned;
# - group commit: commands of many clients in one loop turn share one commit;
# - durability batch: commits are synced by the timer;
# - DEBUG is refused without --enable-debug-commands.
# Traffic goes to 127.0.0.1 only.
#
# Usage: bash tests/server/faults.sh PATH-TO-SLUICE SOURCE-DIR
# Prints one line per failed check and "N passed, N failed"; exits non-zero on any failure.
set -u
set -f

sluice=${1:?usage: faults.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"
conf="$tmp/sluice.yaml"
pid=

cleanup() {
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

is_int() { case $2 in '' | *[!0-9]*) bad "$1: [$2] is not an id" ;; *) ok ;; esac; }

data="$tmp/data"
# raw BYTES: sends BYTES (printf %b escapes) on a fresh connection, prints what comes back until
# the server closes it (after a QUIT) or 30 seconds pass (a deadline, not a pace).
raw() {
  exec 3<>"/dev/tcp/127.0.0.1/$P" || return
  printf '%b' "$1" >&3 2>/dev/null
  timeout 30 cat <&3 | tr -d '\r'
  exec 3<&- 3>&-
}
# holders KEY MAXID: the ids 1..MAXID whose task key is KEY, space separated.
holders() {
  local i out=""
  for i in $(seq 1 "$2"); do
    [ "$(field TASK.INFO "$i" task_key)" == "$1" ] && out="$out $i"
  done
  echo "${out# }"
}

cat >"$tmp/sluice.yaml" <<'EOF'
limits:
  api:
    rate: 100/1s
    key: explicit
types:
  t: {}
EOF

start_single --enable-debug-commands
first=$(cli TASK.ADD t '{"n":0}' ID k0)
is_int "a TASK.ADD before any fault" "$first"

# ---- A failed fsync -----------------------------------------------------------------------------

check "DEBUG FAULT SYNC 1" "OK" "$(cli DEBUG FAULT SYNC 1)"
out=$(cli TASK.ADD t '{"n":1}' ID k1)
contains "the TASK.ADD whose fsync failed: -IOERR" "IOERR fsync failed" "$out"
check "still serving: PING" "PONG" "$(cli PING)"
k2=$(cli TASK.ADD t '{"n":2}' ID k2)
is_int "the next TASK.ADD succeeds" "$k2"
# The client retries the failed one with the same ID: the server kept it (and has written it by
# now), so the retry returns that task instead of making a second one.
k1=$(cli TASK.ADD t '{"n":1}' ID k1)
is_int "the retry of k1 is answered with an id" "$k1"
check "the retry is the task the failed add made (ids in order)" "$((first + 1)) $((first + 2))" \
  "$k1 $k2"
check "INFO: one failed commit" "1" "$(info failed_commits)"
check "INFO: one -IOERR reply" "1" "$(info ioerr_replies)"
check "INFO: the last commit succeeded" "1" "$(info last_commit_ok)"

# ---- A failed write -----------------------------------------------------------------------------

check "DEBUG FAULT WRITE 1" "OK" "$(cli DEBUG FAULT WRITE 1)"
out=$(cli TASK.ADD t '{"n":3}' ID k3)
contains "the TASK.ADD whose write failed: -IOERR" "IOERR" "$out"
k3=$(cli TASK.ADD t '{"n":3}' ID k3)
is_int "its retry succeeds" "$k3"

# ---- A full disk ---------------------------------------------------------------------------------

check "DEBUG FAULT FULL on" "OK" "$(cli DEBUG FAULT FULL on)"
check "disk full: TASK.ADD gets -IOERR disk full" "IOERR disk full" "$(cli TASK.ADD t '{"n":4}' ID k4)"
check "disk full: its retry too" "IOERR disk full" "$(cli TASK.ADD t '{"n":4}' ID k4)"
check "disk full: THROTTLE still answered" "1" "$(cli THROTTLE api u1 | awk '{ print $1 }')"
check "disk full: reads answered" "k2" "$(field TASK.INFO "$k2" task_key)"
check "disk full: INFO last_commit_ok" "0" "$(info last_commit_ok)"
check "disk full: INFO last_error" "disk full" "$(info last_error)"
within "disk full: INFO dirty_tasks (the failed add waits)" 1 10 "$(info dirty_tasks)"
# A pipeline mixing held and plain replies: only the held ones become -IOERR, in order.
out=$(raw 'PING\r\nTASK.ADD t {} ID p1\r\nECHO a\r\nTASK.ADD t {} ID p2\r\nECHO b\r\nQUIT\r\n')
check "disk full: a pipeline keeps its order, held replies fail" \
  "+PONG -IOERR disk full \$1 a -IOERR disk full \$1 b +OK" "$(echo $out)"
check "DEBUG FAULT FULL off" "OK" "$(cli DEBUG FAULT FULL off)"
k4=$(cli TASK.ADD t '{"n":4}' ID k4)
is_int "space is back: the retry of k4 succeeds" "$k4"
check "space is back: INFO last_commit_ok" "1" "$(info last_commit_ok)"
check "space is back: nothing left dirty" "0" "$(info dirty_tasks)"
k5=$(cli TASK.ADD t '{"n":5}' ID k5)
is_int "and new tasks are accepted" "$k5"
check "DEBUG FAULT CLEAR" "OK" "$(cli DEBUG FAULT CLEAR)"

# ---- Group commit: one commit for many clients ------------------------------------------------

# resp ARGS...: ARGS as one RESP command (multibulk), for a raw connection.
resp() {
  printf '*%d\r\n' $#
  for a in "$@"; do printf '$%d\r\n%s\r\n' ${#a} "$a"; done
}
before=$(info commits)
# The 21 connections are open first; then, in one go, the first puts the loop to sleep and the
# other 20 send a TASK.ADD each. They wait in the socket buffers while the loop sleeps and run
# together after it, however slowly this script (no process started in between) runs.
fds=()
for i in $(seq 0 20); do
  exec {fd}<>"/dev/tcp/127.0.0.1/$P"
  fds+=("$fd")
done
resp DEBUG SLEEP 1000 >&"${fds[0]}"
for i in $(seq 1 20); do resp TASK.ADD t "{\"g\":$i}" >&"${fds[$i]}"; done
for i in $(seq 0 20); do
  IFS= read -r -t 30 line <&"${fds[$i]}"
  echo "${line%$'\r'}" | sed 's/^://' >"$tmp/g$i"
  fd=${fds[$i]}
  exec {fd}>&-
done
check "group commit: the sleeper" "+OK" "$(cat "$tmp/g0")"
after=$(info commits)
ids=$(for i in $(seq 1 20); do cat "$tmp/g$i"; done | sort -u | grep -c '^[0-9][0-9]*$')
check "group commit: 20 clients answered with ids" 20 "$ids"
echo "# group commit: $((after - before)) commits"
within "group commit: far fewer commits than clients" 1 6 $((after - before))

# ---- After a restart: every task present once ---------------------------------------------------

stop_single
start_single --enable-debug-commands
for k in k0 k1 k2 k3 k4 k5; do
  check "after a restart: $k is on exactly one task" "1" "$(holders "$k" "$k5" | wc -w)"
done
check "after a restart: k1 is the id its retry returned" "$k1" "$(holders k1 "$k5")"
check "after a restart: k4 (added while the disk was full) is present" "$k4" "$(holders k4 "$k5")"
stop_single

# ---- Durability batch ----------------------------------------------------------------------------

start_single --durability batch --batch-ms 50 --enable-debug-commands
is_int "batch: TASK.ADD" "$(cli TASK.ADD t '{"b":1}')"
# The sync timer (50 ms) fires however late: wait for it instead of guessing how long it takes.
synced() { [ "$(info syncs)" -ge 1 ] 2>/dev/null; }
wait_until "batch: the sync timer syncs" 30 synced
within "batch: the sync timer synced" 1 1000 "$(info syncs)"
check "batch: INFO durability" "batch" "$(info durability)"
check "batch: DEBUG FAULT FULL on" "OK" "$(cli DEBUG FAULT FULL on)"
check "batch: a write error is still reported" "IOERR disk full" "$(cli TASK.ADD t '{"b":2}')"
check "batch: DEBUG FAULT FULL off" "OK" "$(cli DEBUG FAULT FULL off)"
stop_single

# ---- DEBUG needs the flag ------------------------------------------------------------------------

start_single
contains "DEBUG without --enable-debug-commands" "ERR DEBUG is disabled" "$(cli DEBUG FAULT CLEAR)"
stop_single

check "data check" 0 "$("$sluice" data check "$data" >/dev/null 2>&1; echo $?)"

finish
