#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The kill -9 torture of `sluice serve --durability always`: producers add tasks with unique task
# keys (ID) over several connections, pipelined, while a worker takes and acks tasks, and the
# server is killed with SIGKILL at a random moment, then restarted on the same data directory.
# The clients are sluice_torture (tests/tools/torture.c, built next to the sluice binary), which
# logs what was sent and what was acknowledged, and checks the server against the logs.
#
# After every restart:
#   - every acknowledged task (TASK.ADD answered with an id) is present, exactly once, under the
#     id it was given; no task key is on two tasks;
#   - no phantom: every task in the server has a task key some producer sent;
#   - every task whose TASK.ACK was answered +OK is done;
#   - `sluice data check` passes on the directory the killed server left.
# At the end, a worker drains everything: every task is done (each completed at least once).
#
# Rounds: SLUICE_TORTURE_ROUNDS (default 5; each round is about 1-2 s); the mode:
# SLUICE_TORTURE_DURABILITY (default always). Traffic goes to 127.0.0.1 only.
#
# Usage: bash tests/server/torture.sh PATH-TO-SLUICE SOURCE-DIR
# Prints one line per failed check and "N passed, N failed"; exits non-zero on any failure.
set -u

sluice=${1:?usage: torture.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"
helper="$(dirname "$sluice")/sluice_torture"
rounds=${SLUICE_TORTURE_ROUNDS:-5}
durability=${SLUICE_TORTURE_DURABILITY:-always} # batch passes too: kill -9 spares the page cache
producers=3 # processes, each with 4 connections pipelining 8 commands
pid=
clients=()

cleanup() {
  local p
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  for p in "${clients[@]}"; do
    kill -KILL "$p" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT


if [ ! -x "$helper" ]; then
  echo "torture: $helper is not built"
  exit 1
fi

cat >"$tmp/sluice.yaml" <<'EOF'
engine:
  strict_types: true
  max_finished: 1000000
types:
  t:
    lease: 1s
EOF

data="$tmp/data"
start() { crash_start --durability "$durability"; }

# acked_in_round R: the producers of round R logged an acknowledged TASK.ADD (they flush their
# logs after every batch).
acked_in_round() { cat "$tmp"/prod-"$1"-*.log 2>/dev/null | grep -q '^A '; }

t_start=$(date +%s%3N)
for r in $(seq 1 "$rounds"); do
  start
  crash_verify "round $r: after restart" 0
  clients=()
  for i in $(seq 1 $producers); do
    "$helper" produce "$P" "r$r-p$i" 1000000 4 8 "$tmp/prod-$r-$i.log" >>"$tmp/clients.log" 2>&1 &
    clients+=($!)
  done
  "$helper" work "$P" "$tmp/work.log" >>"$tmp/clients.log" 2>&1 &
  clients+=($!)
  # The kill must come while tasks flow, or the round tests nothing: wait for the first
  # acknowledged adds of this round (however long the clients take to start on a busy machine),
  # then a random moment between 0.2 and 1.4 s more.
  wait_until "round $r: tasks acknowledged before the kill" 60 acked_in_round "$r"
  ms=$((200 + RANDOM % 1200))
  sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null
  pid=
  wait "${clients[@]}"
  clients=()
  crash_data_check "round $r"
done

# The end: restart, check, let a worker finish everything, check that all is done.
start
crash_verify "final restart" 0
"$helper" work "$P" "$tmp/work.log" drain >>"$tmp/clients.log" 2>&1
crash_verify "after draining: every task done" 1
kill -TERM "$pid"
wait "$pid"
if [ $? -eq 0 ]; then ok; else bad "the last server did not stop cleanly"; fi
pid=
crash_data_check "final"
t_end=$(date +%s%3N)

echo "# $rounds rounds in $(((t_end - t_start) / 1000)).$(printf '%03d' $(((t_end - t_start) % 1000))) s;" \
  "$(grep -c '^A ' $(ls "$tmp"/prod-*.log) /dev/null | awk -F: '{ s += $2 } END { print s }')" \
  "tasks acknowledged, $(grep -c '^D ' "$tmp/work.log") acks"
finish
