#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# kill -9 while commits are in flight on the commit thread (src/server/durable.c): the store's
# fsyncs are slowed down (DEBUG FAULT SLOWSYNC, through the fault-injection VFS of
# --enable-debug-commands), so the commit thread is nearly always inside one while the loop goes
# on serving pipelined producers and a worker; then the server is killed with SIGKILL and
# restarted on the same data directory. The clients are sluice_torture (tests/tools/torture.c),
# which logs what was sent and what was acknowledged and checks the server against the logs.
#
# After every restart:
#   - every acknowledged task (TASK.ADD answered with an id) is present, exactly once, under the
#     id it was given; no phantom task, no task key on two tasks;
#   - every task whose TASK.ACK was answered +OK is done;
#   - `sluice data check` passes.
# And the kills did land with commits in flight: INFO, read just before a kill, showed replies
# held for a commit (held_replies > 0) in most rounds.
# Then a client with one reply in a failing commit in flight and one held for the next commit gets
# -IOERR, then its id. At the end a worker drains everything: every task is done.
#
# Rounds: SLUICE_CRASH_ROUNDS (default 6); the slow fsync: SLUICE_CRASH_SYNC_MS (default 40).
# Traffic goes to 127.0.0.1 only.
#
# Usage: bash tests/server/crash_inflight.sh PATH-TO-SLUICE SOURCE-DIR
# Prints one line per failed check and "N passed, N failed"; exits non-zero on any failure.
set -u

sluice=${1:?usage: crash_inflight.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"
helper="$(dirname "$sluice")/sluice_torture"
rounds=${SLUICE_CRASH_ROUNDS:-6}
sync_ms=${SLUICE_CRASH_SYNC_MS:-40}
producers=3 # processes, each with 4 connections pipelining 8 commands
pid=
clients=()

cleanup_crash() {
  local p
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  for p in "${clients[@]}"; do
    kill -KILL "$p" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup_crash EXIT

if [ ! -x "$helper" ]; then
  echo "crash_inflight: $helper is not built"
  exit 1
fi

cat >"$tmp/sluice.yaml" <<'YAML'
engine:
  strict_types: true
  max_finished: 1000000
types:
  t:
    lease: 1s
YAML

data="$tmp/data"
start() { crash_start --durability always --enable-debug-commands; }
info_field() { # FIELD: from INFO persistence of the server on $P
  redis-cli -p "$P" --no-raw INFO persistence 2>/dev/null | tr -d '\r' | sed -n "s/^$1://p"
}

inflight=0
for r in $(seq 1 "$rounds"); do
  start
  crash_verify "round $r: after restart" 0
  check "round $r: slow fsync armed" OK "$(redis-cli -p "$P" DEBUG FAULT SLOWSYNC "$sync_ms")"
  clients=()
  for i in $(seq 1 $producers); do
    "$helper" produce "$P" "r$r-p$i" 1000000 4 8 "$tmp/prod-$r-$i.log" >>"$tmp/clients.log" 2>&1 &
    clients+=($!)
  done
  "$helper" work "$P" "$tmp/work.log" >>"$tmp/clients.log" 2>&1 &
  clients+=($!)
  # A random moment between 0.3 and 1.5 s into the load; on a busy machine the clients may
  # not have sent anything by then, so from there the kill waits (30 s at most) until INFO shows
  # replies held for a commit, polling: the kill's moment stays random, the state it lands in
  # is the one this test is about, and the check below still reads it from that last INFO.
  ms=$((300 + RANDOM % 1200))
  sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
  held=$(info_field held_replies)
  until_ms=$(($(now_ms) + 30000))
  while [ "${held:-0}" -eq 0 ] && [ "$(now_ms)" -lt "$until_ms" ]; do
    sleep 0.02
    held=$(info_field held_replies)
  done
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null
  pid=
  [ "${held:-0}" -gt 0 ] && inflight=$((inflight + 1))
  echo "# round $r: killed at $ms ms with ${held:-?} replies held"
  wait "${clients[@]}"
  clients=()
  crash_data_check "round $r"
done
# Under a slow fsync the commit thread is nearly always busy; a kill between two commits is
# possible, every kill landing there is not.
if [ "$inflight" -ge $(((rounds + 1) / 2)) ]; then
  ok
else
  bad "only $inflight of $rounds kills landed with replies held for a commit"
fi

# ---- A failed commit in flight, and a reply of the same client held for the next one ---------
# The client's first TASK.ADD rides on a commit whose (slow) fsync fails; its second, sent while
# that commit is in flight, waits for the next commit, which succeeds. The first reply becomes
# -IOERR, the second is the id: the rewrite of the first must not garble the second.
start
crash_verify "before the failed commit" 0
# The fsyncs are slow enough (3 s) that the second ADD is sent while the first one's commit is
# still in its fsync however long the poll below takes on a busy machine.
redis-cli -p "$P" DEBUG FAULT SLOWSYNC 3000 >/dev/null
redis-cli -p "$P" DEBUG FAULT SYNC 1 >/dev/null
resp_add() { # KEY: a TASK.ADD of type t with task key KEY, in RESP
  printf '*5\r\n$8\r\nTASK.ADD\r\n$1\r\nt\r\n$2\r\n{}\r\n$2\r\nID\r\n$%d\r\n%s\r\n' "${#1}" "$1"
}
exec 3<>"/dev/tcp/127.0.0.1/$P"
resp_add inflight-1 >&3
# first_in_flight: the first ADD's commit is on the commit thread (in its slow fsync), its
# reply held. Polled, never a fixed sleep: a sleep can end before the commit starts.
first_in_flight() {
  [ "$(info_field commit_in_flight)" = 1 ] && [ "$(info_field held_replies)" -ge 1 ] 2>/dev/null
}
wait_until "the first ADD's commit is in flight" 30 first_in_flight
resp_add inflight-2 >&3
r1= r2=
IFS= read -r -t 60 r1 <&3
IFS= read -r -t 60 r2 <&3
exec 3<&-
r1=${r1%$'\r'}
r2=${r2%$'\r'}
contains "the add whose commit failed gets -IOERR" "-IOERR" "$r1"
case $r2 in
:[0-9]*) ok ;;
*) bad "the add held for the next commit gets its id: got [$r2]" ;;
esac
# What this client sent and was told, in sluice_torture's log format, for the checks below.
printf 'S inflight-1\nE inflight-1\nS inflight-2\n' >"$tmp/prod-inflight.log"
[ -n "${r2#:}" ] && printf 'A inflight-2 %s\n' "${r2#:}" >>"$tmp/prod-inflight.log"
redis-cli -p "$P" DEBUG FAULT CLEAR >/dev/null
check "the failure is counted" 1 "$(info_field failed_commits)"
kill -TERM "$pid"
wait "$pid"
pid=

start
crash_verify "final restart" 0
"$helper" work "$P" "$tmp/work.log" drain >>"$tmp/clients.log" 2>&1
crash_verify "after draining: every task done" 1
kill -TERM "$pid"
wait "$pid"
if [ $? -eq 0 ]; then ok; else bad "the last server did not stop cleanly"; fi
pid=
crash_data_check "final"
echo "# $(grep -c '^A ' $(ls "$tmp"/prod-*.log) /dev/null | awk -F: '{ s += $2 } END { print s }')" \
  "tasks acknowledged, $(grep -c '^D ' "$tmp/work.log") acks, $inflight of $rounds kills with commits in flight"
finish
