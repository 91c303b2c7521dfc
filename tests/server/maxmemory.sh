#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The memory budget (issue 12 item 3) against the real `sluice serve` with --maxmemory 32mb: at
# once, a flood of new keys, of LIMIT.SET limits, of CL.THROTTLE parameter sets, of tasks with
# payloads, and several slow readers that pipeline large ECHOs and never read. The server must
# answer -OOM to what adds state, keep answering PING, INFO, reads, acks and deletes, close the
# slow readers, and its peak RSS (VmHWM in /proc/PID/status) must stay within the budget plus the
# documented fixed overhead (docs/configuration.md, "Memory budget"). Nothing here waits on a
# clock: each flood is a fixed number of commands, each check runs after its flood ended.
#
# Usage: bash tests/server/maxmemory.sh PATH-TO-SLUICE SOURCE-DIR
set -u
set -f

sluice=${1:?usage: maxmemory.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"

budget=$((32 << 20))
overhead=$((96 << 20)) # docs/configuration.md, "Memory budget": RSS over the budget

cat >"$tmp/sluice.yaml" <<'EOF2'
maxmemory: 32mb
limits:
  api:
    rate: 1/1h
    key: explicit
    max_keys: 10000000
  open:
    rate: 1/1h
    key: explicit
    keys_overflow: allow
  slots:
    concurrency: 10
    key: explicit
  per_user:
    rate: 1000/1s
    key: input.user
types:
  job:
    limits: [per_user]
    lease: 1h
EOF2
# The command line's --maxmemory beats the file's maxmemory:.
start flag --config "$tmp/sluice.yaml" --durability none --maxmemory 16mb --no-admin
P=$port_flag
contains "--maxmemory beats the file" "maxmemory:$((16 << 20))" "$(cli INFO memory)"
stop flag

start main --config "$tmp/sluice.yaml" --durability none --max-cell-limits 20000 \
  --admin-port 0 --admin-port-file "$tmp/main.admin"
P=$port_main
A=$(cat "$tmp/main.admin" 2>/dev/null)
pid=$pid_main

contains "INFO memory shows the file's budget" "maxmemory:$budget" "$(cli INFO memory)"
contains "INFO memory counts" "used_memory_counted:1" "$(cli INFO memory)"
check "before the floods, a task is added" 1 "$(cli TASK.ADD job '{"user":"a"}' | grep -c '^[0-9]')"
first_task=$(cli TASK.GET job TIMEOUT 0 | awk '{ print $1 }')
check "THROTTLE a key before the floods" 1 "$(word "$(cli THROTTLE api early)" 1)"

# ---- Floods, all at once ------------------------------------------------------------------------

payload=$(printf '{"user":"u%%d","pad":"%s"}' "$(head -c 1000 /dev/zero | tr '\0' x)")
awk 'BEGIN { for (i = 0; i < 1500000; i++) printf "THROTTLE api k%d\r\n", i }' |
  redis-cli -p "$P" --pipe >"$tmp/keys.out" 2>&1 &
f1=$!
awk 'BEGIN { for (i = 0; i < 60000; i++) printf "LIMIT.SET l%d rate=1/1s\r\n", i }' |
  redis-cli -p "$P" --pipe >"$tmp/limits.out" 2>&1 &
f2=$!
# One request costs an hour of each triple (count 1 per 3600 s): none is idle, none forgotten.
awk 'BEGIN { for (i = 1; i <= 20000; i++) printf "CL.THROTTLE c %d 1 3600\r\n", i }' |
  redis-cli -p "$P" --pipe >"$tmp/cells.out" 2>&1 &
f3=$!
awk -v p="$payload" 'BEGIN { for (i = 0; i < 40000; i++) { s = sprintf(p, i % 50); printf "*3\r\n$8\r\nTASK.ADD\r\n$3\r\njob\r\n$%d\r\n%s\r\n", length(s), s } }' |
  redis-cli -p "$P" --pipe >"$tmp/tasks.out" 2>&1 &
f4=$!

# Slow readers: each pipelines 48 ECHOs of 512 KiB (24 MiB of replies) and reads nothing. The
# server reads everything they send, so these writes end; the replies pile up in the server.
big=$(head -c 524288 /dev/zero | tr '\0' y)
# (The command's final \r\n: $(...) strips a trailing newline, so printf adds it back below.)
echo_cmd=$(printf '*2\r\n$4\r\nECHO\r\n$524288\r\n%s\r\n' "$big")
slow=()
for r in 1 2 3 4 5 6; do
  exec {fd}<>"/dev/tcp/127.0.0.1/$P"
  slow+=("$fd")
  for _ in $(seq 1 48); do
    printf '%s\n' "$echo_cmd" >&"$fd" 2>/dev/null || break
  done
done
wait "$f1" "$f2" "$f3" "$f4"

# ---- The server is up, answered -OOM, and stayed within its budget ------------------------------

check "PING after the floods" "PONG" "$(cli PING)"
info=$(cli INFO memory | tr -d '\r')
contains "INFO memory after the floods" "maxmemory:$budget" "$info"
refused=$(echo "$info" | tr ' ' '\n' | awk -F: '$1 == "oom_refused" { print $2 }')
within "commands were refused with -OOM" 1 100000000 "$refused"
# The slow readers' input may still be on its way through the server: a deadline, not a pace.
slow_closed() { [ "$(cli INFO memory | tr -d '\r' | tr ' ' '\n' | awk -F: '$1 == "oom_client_closes" { print $2 }')" -ge 1 ]; }
wait_until "slow readers were closed" 60 slow_closed
# Floods were refused with -OOM (which ones depends on how the machine interleaves them; those that
# ended before the budget was full, or were closed as readers too slow, were not).
refused_floods=0
for f in keys limits cells tasks; do
  grep -q "^OOM command not allowed when used memory > 'maxmemory'" "$tmp/$f.out" &&
    refused_floods=$((refused_floods + 1))
done
within "floods refused with -OOM" 1 4 "$refused_floods"

# The slow readers go; what they held is freed, and a second flood of keys fills the budget again.
for fd in "${slow[@]}"; do
  exec {fd}>&-
done
awk 'BEGIN { for (i = 0; i < 1500000; i++) printf "THROTTLE api m%d\r\n", i }' |
  redis-cli -p "$P" --pipe >"$tmp/keys2.out" 2>&1
contains "second keys flood: -OOM" "OOM" "$(grep -m1 OOM "$tmp/keys2.out")"
# A key table stops short of the budget (it counts the array it would grow to), and the floods'
# replies, which pushed the process over it too, are gone with their clients: tasks fill what is
# left, in batches whose replies are small, until one is refused (at most 60 batches of 2 MiB).
for batch in $(seq 1 60); do
  awk -v p="$payload" 'BEGIN { for (i = 0; i < 2000; i++) { s = sprintf(p, i % 50); printf "*3\r\n$8\r\nTASK.ADD\r\n$3\r\njob\r\n$%d\r\n%s\r\n", length(s), s } }' |
    redis-cli -p "$P" --pipe >"$tmp/tasks2.out" 2>&1
  grep -q OOM "$tmp/tasks2.out" && break
done
contains "tasks fill the budget: -OOM" "OOM" "$(grep -m1 OOM "$tmp/tasks2.out")"
# That batch's own buffers took the process over; one task at a time takes the state itself over
# (about 130 tasks of 1 KiB at most: the buffers of a batch are smaller than that).
for _ in $(seq 1 2000); do
  case $(cli TASK.ADD job "$(printf "$payload" 1)") in
  OOM*) break ;;
  esac
done

# The state is over the budget now, if only by a task. The file's budget is lowered by 8 MiB and
# reloaded, so that nothing freed meanwhile (a buffer, an event) can bring the process back under.
budget=$((24 << 20))
sed -i 's/^maxmemory: 32mb/maxmemory: 24mb/' "$tmp/sluice.yaml"
contains "CONFIG RELOAD applies the file's new budget" "OK" "$(cli CONFIG RELOAD)"
contains "INFO memory shows it" "maxmemory:$budget" "$(cli INFO memory)"

# What adds state is refused now, with the code word and the figures (one connection, whose own
# buffers exist before it asks: the state alone is over the budget, by as little as one task).
printf '%s\n' 'THROTTLE api brand-new' 'CL.THROTTLE c 99999 1 3600' 'LIMIT.SET newlimit rate=1/1s' \
  "TASK.ADD job '{\"user\":\"z\"}'" 'LEASE.ACQUIRE slots brand-new' | redis-cli -p "$P" >"$tmp/refused.out" 2>&1
check "THROTTLE on a new key, CL.THROTTLE with a new triple, LIMIT.SET, TASK.ADD, LEASE.ACQUIRE" 5 \
  "$(grep -c '^OOM command not allowed' "$tmp/refused.out")"
contains "the reply names the budget" "of $budget)" "$(cat "$tmp/refused.out")"
# ... except where a limit was told to let unknown keys through untracked.
check "keys_overflow: allow lets a new key through" 1 "$(word "$(cli THROTTLE open brand-new)" 1)"

# Reads, existing keys, acks and deletes keep working.
check "THROTTLE on a key tracked before" 0 "$(word "$(cli THROTTLE api early)" 1)"
contains "LIMIT.GET" "rate=1/1h" "$(cli LIMIT.GET api)"
check "TASK.ACK" "OK" "$(cli TASK.ACK "$first_task")"
contains "INFO everything" "# Engine" "$(cli INFO)"
contains "/metrics shows the budget" "sluice_memory_budget_bytes $budget" "$(curl -s "http://127.0.0.1:$A/metrics")"
contains "/metrics shows its use" "sluice_memory_used_bytes " "$(curl -s "http://127.0.0.1:$A/metrics")"

hwm_kb=$(awk '$1 == "VmHWM:" { print $2 }' "/proc/$pid/status")
# A sanitizer's shadow memory and quarantine are not the server's: the bound holds for a normal
# build only.
if grep -q __asan_init "$sluice"; then
  echo "peak RSS not checked: $sluice is built with AddressSanitizer"
else
  within "peak RSS within the budget + overhead" 1 $((((32 << 20) + overhead) >> 10)) "$hwm_kb"
fi
echo "peak RSS ${hwm_kb} kB for a budget of $((32 << 10)) kB"

# Deletes work, and a larger budget from the file accepts new state again at once.
check "LIMIT.DEL api" 1 "$(cli LIMIT.DEL api)"
sed -i 's/^maxmemory: 24mb/maxmemory: 256mb/' "$tmp/sluice.yaml"
contains "CONFIG RELOAD raises the budget" "OK" "$(cli CONFIG RELOAD)"
check "LIMIT.SET after it" "OK" "$(cli LIMIT.SET again rate=1/1s)"
check "THROTTLE on the new limit" 1 "$(word "$(cli THROTTLE again x)" 1)"
kill -0 "$pid" 2>/dev/null
check "the server is still running" 0 "$?"
finish
