#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The task queue shared on Redis (issue 10, docs/cluster.md): three `sluice serve --store
# redis://...` on one redis-server share one queue. The same script runs on PostgreSQL
# (tests/server/pg_tasks.sh sets SLUICE_TEST_STORE=postgresql: three nodes on one PostgreSQL,
# wakes by LISTEN/NOTIFY). Over the wire: TASK.ADD on A, TASK.GET on B,
# TASK.ACK on C, with the single node's replies and error words; a TASK.GET blocked on B woken by
# a TASK.ADD on A (through the wake channel: B counts the wake); kill -9 of a node holding a
# delivery: the task comes back on another node with ATTEMPT n+1 once its lease lapses in store
# time, and the dead delivery's late ACK is refused (NOLEASE); then many clients adding and
# consuming on all nodes at once (tests/tools/redis_tasks_check.py): every task acknowledged
# exactly once, none lost, and a rate-limited type's grants (the store time of each read from its
# delivery's lease) within the single-node bound; and a node SIGKILLed while its worker holds
# deliveries, the others consuming: every task still acknowledged exactly once, the held ones
# with a higher attempt. Also: a concurrency slot released by an ACK on one node wakes a GET
# blocked on another, priority and DELAY and ID across nodes; group slots (TASK.ADD ... LEASE with
# a lease taken on another node); the caps (engine: max_tasks, max_parked) across two more nodes
# on a queue of their own. Also: a store that is down answers TASK.ADD -STOREDOWN (nothing is
# acknowledged that Redis did not take), and what stays refused says so. Also the HTTP decision
# API (docs/http.md) on the shared store: two nodes charge one budget over HTTP, a task added
# over HTTP on A is explained on B and taken over RESP on B, the store away answers 503
# STOREDOWN; on Redis also: concurrent requests each answered their own, and a request waiting
# for the frozen store when its node stops is answered 503 SHUTDOWN. Every wait is a
# deadline, never a sleep.
#
# Usage: bash tests/server/redis_tasks.sh PATH-TO-SLUICE SOURCE-DIR
set -u
set -f

sluice=${1:?usage: redis_tasks.sh PATH-TO-SLUICE SOURCE-DIR}
src=${2:?usage: redis_tasks.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"

need_tools redis_tasks.sh redis-cli redis-server
store=${SLUICE_TEST_STORE:-redis}
[ "$store" = postgresql ] && need_postgres
py=/usr/bin/python3
checker=$src/tests/tools/redis_tasks_check.py
if ! $py -c 'import redis' 2>/dev/null; then
  bad "python3-redis is not installed (scripts/deps.sh installs it)"
  finish
  exit 1
fi

cat >"$tmp/sluice.yaml" <<'EOF'
limits:
  lim: {rate: 20/1s, burst: 5}
  per_user: {rate: 1/1h, key: input.user}
  slot: {concurrency: 1}
  watch: {rate: 1/1h, key: input.user, mode: shadow}
types:
  job: {}
  watched: {limits: [watch]}
  short: {lease: 2s}
  limited: {limits: [lim]}
  keyed: {limits: [per_user]}
  pipe: {}
  prio: {}
  conc: {limits: [slot]}
EOF


subscribed() { [ "$(store_field "$1" store_task_subscriber)" = up ]; }

if [ "$store" = postgresql ]; then
  start_postgres a
  url="postgresql://sluice@127.0.0.1:$pgport_a/postgres"
elif [ "$store" = redis-cluster ]; then
  # Three masters; the queue (and every limit a type names) lives on the one serving {all}'s
  # slot, the "store" that the faults below stop (as a standalone Redis's there).
  start_cluster a m2 m3
  qport=$(cluster_owner "$rport_a" '{all}')
  for m in a m2 m3; do
    v=rport_$m
    if [ "${!v}" = "$qport" ]; then
      qname=$m
      v=rpid_$m
      qpid=${!v}
    else
      # The first seed (where the wake subscriber connects first) is another master, killed
      # at the end (section 6).
      [ -z "${seed1:-}" ] && { seed1=${!v}; v=rpid_$m; seed1pid=${!v}; }
    fi
  done
  url=redis-cluster://127.0.0.1:$seed1,127.0.0.1:$qport
  echo "# the queue's master: $qname on $qport; the first seed: $seed1"
else
  start_redis a
  url=redis://127.0.0.1:$rport_a/5
fi
# The store stopped (SIGSTOP) and let go again; killed and started again.
store_freeze() {
  case $store in
    postgresql) freeze_postgres a ;;
    redis-cluster) kill -STOP "$qpid" ;;
    *) kill -STOP "$rpid_a" ;;
  esac
}
store_thaw() {
  case $store in
    postgresql) thaw_postgres a ;;
    redis-cluster) kill -CONT "$qpid" ;;
    *) kill -CONT "$rpid_a" ;;
  esac
}
store_restart() {
  if [ "$store" = postgresql ]; then
    restart_postgres a
    return
  fi
  if [ "$store" = redis-cluster ]; then
    # Empty, as below, but with its nodes.conf: it comes back as the same master of its slots.
    kill -KILL "$qpid"
    wait "$qpid" 2>/dev/null
    redis-server --port "$qport" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp/$qname.redis" \
      --daemonize no --logfile "$tmp/$qname.redis/log2" --cluster-enabled yes \
      --cluster-config-file "$tmp/$qname.redis/nodes.conf" --cluster-node-timeout 2000 \
      --cluster-require-full-coverage no &
    qpid=$!
    pids+=("$qpid")
    wait_until "the queue's master back on its port" 30 redis_is "$qport" "$qpid"
    wait_until "the queue's master back in the cluster" 30 cluster_ok "$rport_a" "$rport_m2" "$rport_m3"
    return
  fi
  # Empty: it kept nothing.
  kill -KILL "$rpid_a"
  wait "$rpid_a" 2>/dev/null
  redis-server --port "$rport_a" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp/a.redis" \
    --daemonize no --logfile "$tmp/a.redis/log2" &
  rpid_a=$!
  pids+=("$rpid_a")
  wait_until "Redis back on its port" 30 redis_is "$rport_a" "$rpid_a"
}
# redis_is PORT PID: the redis-server answering on PORT is process PID (for wait_until). Between
# the kill and the restart the port is free, and a process outside this test may take it; the
# nodes would then talk to it, and the checks after would fail for no reason they could name.
redis_is() { redis-cli -p "$1" INFO server 2>/dev/null | tr -d '\r' | grep -qx "process_id:$2"; }
for n in A B C; do
  # A and B also serve the HTTP API (section 1b).
  case $n in C) admin=() ;; *) admin=(--admin-port 0 --admin-port-file "$tmp/$n.admin") ;; esac
  start_node $n --store "$url" --store-timeout 20000 "${admin[@]}"
done
A=$port_A
B=$port_B
C=$port_C
for p in $A $B $C; do
  check "node on $p is up" up "$(store_field "$p" store_state)"
  wait_until "node on $p subscribed to the wake channel" 10 subscribed "$p"
done

# ---- 1. ADD on A, GET on B, ACK on C ----------------------------------------------------------

id=$(on "$A" TASK.ADD job '{"n":1}')
case $id in '' | *[!0-9]*) bad "TASK.ADD answers an id: [$id]" ;; *) ok ;; esac
got=$(redis-cli -p "$B" TASK.GET job)
check "GET on B delivers A's task" "$id job {\"n\":1} 1" "$(echo "$got" | head -4 | tr '\n' ' ' | sed 's/ $//')"
check "nothing more" "" "$(on "$B" TASK.GET job)"
check "INFO on C: running" running "$(redis-cli -p "$C" TASK.INFO "$id" | sed -n '4p')"
check "TOUCH on A" 1 "$(on "$A" TASK.TOUCH "$id" ATTEMPT 1 | grep -c '^[0-9]\{13\}$')"
contains "ACK of another attempt refused" "NOLEASE task $id attempt 2 is not running: it was never delivered" \
  "$(on "$C" TASK.ACK "$id" ATTEMPT 2)"
check "ACK on C" OK "$(on "$C" TASK.ACK "$id" ATTEMPT 1)"
contains "a second ACK refused" "NOLEASE task $id is done, not running" "$(on "$A" TASK.ACK "$id")"
check "INFO on B: done" done "$(redis-cli -p "$B" TASK.INFO "$id" | sed -n '4p')"
uid=$(on "$A" TASK.ADD job '{"n":2}' UNITS 3)
check "INFO shows the task's UNITS" 3 "$(redis-cli -p "$C" TASK.INFO "$uid" | awk 'prev == "units" { print; exit } { prev = $0 }')"
check "CANCEL the UNITS task" 1 "$(on "$B" TASK.CANCEL "$uid")"
contains "an unknown id" "NOTASK no task 999999" "$(on "$B" TASK.ACK 999999)"
# Argument errors keep the single node's words and never reach Redis.
contains "bad COUNT" "WRONGARGS" "$(on "$A" TASK.GET job COUNT 0)"
contains "bad id" "WRONGARGS" "$(on "$A" TASK.ACK nope)"
contains "bad payload for a keyed type" "payload is not valid JSON" "$(on "$A" TASK.ADD keyed 'nope')"
contains "a missing key" "WRONGARGS" "$(on "$A" TASK.ADD keyed '{}')"
# FAIL RETRY on one node, delivered again (attempt 2) on another; FAIL DEAD ends it.
id=$(on "$A" TASK.ADD job '{"n":2}')
redis-cli -p "$B" TASK.GET job >/dev/null
check "FAIL RETRY_AFTER 0 on B" queued "$(on "$B" TASK.FAIL "$id" RETRY_AFTER 0 REASON flaky)"
got=$(redis-cli -p "$C" TASK.GET job TIMEOUT 5000 | sed -n '1p;4p' | tr '\n' ' ' | sed 's/ $//')
check "retried on C with attempt 2" "$id 2" "$got"
check "FAIL DEAD" failed "$(on "$A" TASK.FAIL "$id" DEAD ATTEMPT 2)"
# CANCEL of a queued task; of a finished one (0).
id=$(on "$A" TASK.ADD job '{"n":3}' DELAY 60000)
check "CANCEL a delayed task on B" 1 "$(on "$B" TASK.CANCEL "$id")"
check "CANCEL it again" 0 "$(on "$C" TASK.CANCEL "$id")"
# A pipeline mixing task and limit commands keeps its order.
printf 'PING\r\nTASK.ADD pipe {}\r\nTHROTTLE lim x\r\nECHO x\r\nTASK.GET pipe\r\nPING\r\nQUIT\r\n' >"$tmp/pipe"
out=$(timeout 30 redis-cli -p "$A" <"$tmp/pipe" 2>&1 | tr '\n' ' ')
case $out in
PONG\ [0-9]*\ 1\ 5\ 4\ 0\ 50\ \ x\ [0-9]*\ pipe\ {}\ 1\ [0-9]*\ PONG\ ) ok ;;
*) bad "pipelined task and limit replies in command order: [$out]" ;;
esac
# TASK.EXPLAIN on any node: the task read from the store with where it waits (the link it
# parked on, the tasks ahead of it in that key's wait queue, the queue's wake), its chain
# resolved as TASK.ADD does and peeked in the store's clock: the single node's fields.
e1=$(on "$A" TASK.ADD keyed '{"user":"ex"}')
e2=$(on "$A" TASK.ADD keyed '{"user":"ex"}')
check "A takes the first keyed task, the second parks" "$e1" "$(redis-cli -p "$A" TASK.GET keyed COUNT 2 | head -1)"
check "INFO: the second is parked" parked "$(redis-cli -p "$C" TASK.INFO "$e2" | sed -n '4p')"
e3=$(on "$B" TASK.ADD keyed '{"user":"ex"}')
check "a third is not granted to B" "" "$(redis-cli -p "$B" TASK.GET keyed)"
check "INFO: it parked behind the second" parked "$(redis-cli -p "$C" TASK.INFO "$e3" | sed -n '4p')"
t0=$(now_ms)
for p in $B $C $A; do
  check "EXPLAIN on $p: parked" parked "$(P=$p field TASK.EXPLAIN "$e2" state)"
  check "EXPLAIN on $p: the limit it waits on" per_user "$(P=$p field TASK.EXPLAIN "$e2" limit)"
  check "EXPLAIN on $p: its key" ex "$(P=$p field TASK.EXPLAIN "$e2" key)"
  check "EXPLAIN on $p: first in its key's queue of two" "0 2" \
    "$(P=$p field TASK.EXPLAIN "$e2" position) $(P=$p field TASK.EXPLAIN "$e2" queue_length)"
  check "EXPLAIN on $p: the third is behind it" "1 2" \
    "$(P=$p field TASK.EXPLAIN "$e3" position) $(P=$p field TASK.EXPLAIN "$e3" queue_length)"
  within "EXPLAIN on $p: the key wakes within the hour (ms)" $((t0 - 60000)) $((t0 + 3700000)) \
    "$(P=$p field TASK.EXPLAIN "$e2" wake_ms)"
  within "EXPLAIN on $p: starts in about an hour (ms)" $((t0 + 3500000)) $((t0 + 3700000)) \
    "$(P=$p field TASK.EXPLAIN "$e2" estimated_start_ms)"
  contains "EXPLAIN on $p: the text" "Parked on limit \"per_user\" key \"ex\" with 0 task(s) ahead of 2; the key wakes in " \
    "$(P=$p field TASK.EXPLAIN "$e2" text)"
  contains "EXPLAIN on $p: and the peek" "its chain, peeked in the store's clock, grants it in about 3" \
    "$(P=$p field TASK.EXPLAIN "$e2" text)"
done
check "the third task cancelled" 1 "$(redis-cli -p "$C" TASK.CANCEL "$e3")"
check "EXPLAIN: the queue is one shorter" "0 1" \
  "$(P=$B field TASK.EXPLAIN "$e2" position) $(P=$B field TASK.EXPLAIN "$e2" queue_length)"
# A shadow limit in a task's chain (mode: shadow): its would-be denials let the tasks through
# uncharged, as on a single node; the one task that found room was charged. Switched to enforce
# on A (the key's state kept), the key is spent by that one charge only: its next unit is an hour
# away, not three.
s1=$(on "$A" TASK.ADD watched '{"user":"sh"}')
s2=$(on "$B" TASK.ADD watched '{"user":"sh"}')
s3=$(on "$C" TASK.ADD watched '{"user":"sh"}')
is_id() { case $2 in '' | *[!0-9]*) bad "$1: not an id: [$2]" ;; *) ok ;; esac; }
is_id "TASK.ADD with a shadow limit in the chain" "$s1"
check "all three delivered: the shadow limit holds none back" 3 \
  "$(redis-cli -p "$B" TASK.GET watched COUNT 3 | grep -cE "^($s1|$s2|$s3)\$")"
for id in "$s1" "$s2" "$s3"; do on "$A" TASK.ACK "$id" >/dev/null; done
check "LIMIT.SET watch mode=enforce" OK "$(on "$A" LIMIT.SET watch mode=enforce)"
got=$(redis-cli -p "$A" THROTTLE watch sh)
check "the key was charged once: denied now" 0 "$(head -1 <<<"$got")"
within "its next unit an hour away (one charge), not three (ms)" 3000000 3700000 \
  "$(sed -n 4p <<<"$got")"
check "another key has room" 1 "$(redis-cli -p "$A" THROTTLE watch other | head -1)"
check "LIMIT.SET watch back to shadow" OK "$(on "$A" LIMIT.SET watch mode=shadow)"
contains "EXPLAIN of the running one" "Running (attempt 1); its lease ends in" "$(P=$B field TASK.EXPLAIN "$e1" text)"
check "the peek charged nothing: the key is still spent" 0 "$(redis-cli -p "$B" THROTTLE per_user ex PEEK | head -1)"
r1=$(on "$A" TASK.ADD job '{"n":"ready"}')
check "EXPLAIN of a ready task on B: queued" queued "$(P=$B field TASK.EXPLAIN "$r1" state)"
check "EXPLAIN of a ready task: no limit" "" "$(P=$B field TASK.EXPLAIN "$r1" limit)"
contains "EXPLAIN of a ready task: the text" "Queued and due: the next worker polling type \"job\" takes it through the gate" \
  "$(P=$C field TASK.EXPLAIN "$r1" text)"
within "EXPLAIN of a ready task: starts now (ms)" $((t0 - 60000)) $(($(now_ms) + 60000)) \
  "$(P=$C field TASK.EXPLAIN "$r1" estimated_start_ms)"
check "CANCEL the ready task" 1 "$(on "$C" TASK.CANCEL "$r1")"
check "EXPLAIN of a cancelled task" "Cancelled before it ran." "$(P=$A field TASK.EXPLAIN "$r1" text)"
contains "EXPLAIN of an unknown id: the single node's words" \
  "NOTASK no task 999999 (it never existed, or finished long ago and was forgotten)" "$(on "$B" TASK.EXPLAIN 999999)"
contains "EXPLAIN of a bad id" "WRONGARGS" "$(on "$B" TASK.EXPLAIN nope)"
printf 'PING\r\nTASK.EXPLAIN %s\r\nECHO x\r\nTASK.EXPLAIN 999999\r\nPING\r\nQUIT\r\n' "$e2" >"$tmp/pipe"
out=$(timeout 30 redis-cli -p "$B" <"$tmp/pipe" 2>&1 | tr '\n' ' ')
case $out in
PONG\ state\ parked\ limit\ per_user\ *\ x\ NOTASK\ *\ PONG\ ) ok ;;
*) bad "pipelined EXPLAIN replies in command order: [$out]" ;;
esac
# A client that half-closes after sending still gets its answer, as it would on one node.
halfclose() {
  $py - "$1" "$2" <<'PYEOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
s.sendall(b"TASK.EXPLAIN " + sys.argv[2].encode() + b"\r\n")
s.shutdown(socket.SHUT_WR)
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
sys.stdout.write(data.decode(errors="replace"))
PYEOF
}
contains "EXPLAIN answers a client that half-closed" "Parked on limit" "$(halfclose "$C" "$e2")"
check "ACK the running one" OK "$(on "$C" TASK.ACK "$e1")"
check "CANCEL the parked one" 1 "$(on "$A" TASK.CANCEL "$e2")"
# Group slots: tasks added with a lease taken on any node run under it (the shared lease)
# instead of taking the concurrency limit's unit; once it is released they ask their own.
# (A short TTL: a LEASE.RELEASE on a shared store does not wake the tasks parked on its key
# before the time their queue was armed for, the lease's end. Long enough that the three ADDs and
# the GET below fit in it on a busy machine.)
gh=$(redis-cli -p "$A" LEASE.ACQUIRE slot '' TTL 4000 | sed -n '2p')
contains "group: LEASE.ACQUIRE on A" "slot/" "$gh"
g1=$(on "$B" TASK.ADD conc '{"g":1}' LEASE "$gh")
g2=$(on "$C" TASK.ADD conc '{"g":2}' LEASE "$gh")
g3=$(on "$A" TASK.ADD conc '{"g":3}')
check "group: both grouped tasks run at once under the lease, on a limit of 1 the lease holds" \
  "$g1 $g2" "$(redis-cli -p "$A" TASK.GET conc COUNT 3 | sed -n '1p;6p' | tr '\n' ' ' | sed 's/ $//')"
check "group: the task without the lease waits for the unit" parked "$(P=$B field TASK.INFO "$g3" state)"
check "group: ACK" OK "$(on "$B" TASK.ACK "$g1")"
check "group: ACK" OK "$(on "$C" TASK.ACK "$g2")"
check "group: LEASE.RELEASE on C" OK "$(on "$C" LEASE.RELEASE "$gh")"
check "group: the slot comes back to the task without the lease (by the lease's end)" "$g3" \
  "$(redis-cli -p "$B" TASK.GET conc TIMEOUT 10000 | head -1)"
check "group: ACK it" OK "$(on "$B" TASK.ACK "$g3")"
contains "group: a released lease (the single node's words)" \
  "NOLEASE the lease on limit \"slot\" is gone (it expired or was released)" \
  "$(on "$B" TASK.ADD conc '{}' LEASE "$gh")"
contains "group: a type without the lease's limit" \
  "WRONGARGS the task's type has no limit \"slot\" for its lease to stand in for" \
  "$(on "$A" TASK.ADD job '{}' LEASE "$gh")"
contains "group: a handle of no lease" "NOLEASE no such lease" "$(on "$A" TASK.ADD conc '{}' LEASE nope/1/00)"
contains "group: a shadow pass" "WRONGARGS that lease is a shadow limit's pass" \
  "$(on "$A" TASK.ADD conc '{}' LEASE slot/0/)"
# Recurring series are shared on both stores (tests/server/redis_recur.sh, pg_recur.sh): a series
# whose first point lies far ahead, added and removed, so that it never adds a task here.
check "RECUR.ADD shared" OK "$(on "$A" RECUR.ADD r job '{}' EVERY 1000 START 9000000000000)"
check "RECUR.DEL on another node" 1 "$(on "$B" RECUR.DEL r)"

# ---- 1b. The HTTP decision API on the shared store ---------------------------------------------

# post PORT PATH BODY: POSTs BODY into $tmp/body, prints the status. body_has NAME TEXT: the body
# holds TEXT (the server's JSON is compact, its members in a fixed order).
post() {
  curl -s -o "$tmp/body" -w '%{http_code}' --max-time 30 --data-binary "$3" "http://127.0.0.1:$1$2"
}
body_has() { contains "$1" "$2" "$(cat "$tmp/body")"; }
HA=$(cat "$tmp/A.admin")
HB=$(cat "$tmp/B.admin")
check "HTTP: A grants per_user h1" 200 "$(post "$HA" /v1/throttle '{"limit":"per_user","key":"h1"}')"
body_has "HTTP: A's answer" '"allowed":true,"peek":false,"name":"per_user","key":"h1","limit":1,"remaining":0'
check "HTTP: B denies it: one budget" 429 "$(post "$HB" /v1/throttle '{"limit":"per_user","key":"h1"}')"
body_has "HTTP: the 429 body" '"limit_type":"rate","limit_name":"per_user","key":"h1"'
check "HTTP: RESP on A sees the grant" 0 "$(redis-cli -p "$A" THROTTLE per_user h1 | head -1)"
check "HTTP: 404 unknown limit" 404 "$(post "$HB" /v1/throttle '{"limit":"nope","key":"x"}')"
body_has "HTTP: NOLIMIT" '"code":"NOLIMIT"'
check "HTTP: submit on A: 201" 201 "$(post "$HA" /v1/tasks '{"type":"job","payload":{"n":"http"}}')"
hid=$(sed 's/.*"id":\([0-9]*\).*/\1/' "$tmp/body")
check "HTTP: explain on B: queued" 200 \
  "$(curl -s -o "$tmp/body" -w '%{http_code}' "http://127.0.0.1:$HB/v1/tasks/$hid/explain")"
body_has "HTTP: explain body" '"state":"queued"'
check "HTTP: RESP TASK.GET on B takes it" "$hid job {\"n\":\"http\"}" \
  "$(redis-cli -p "$B" TASK.GET job | head -3 | tr '\n' ' ' | sed 's/ $//')"
check "HTTP: explain on A: running" 200 \
  "$(curl -s -o "$tmp/body" -w '%{http_code}' "http://127.0.0.1:$HA/v1/tasks/$hid/explain")"
body_has "HTTP: running" '"state":"running"'
check "HTTP: ACK on A" OK "$(on "$A" TASK.ACK "$hid")"
if [ "$store" != postgresql ]; then
  # Requests answered by one store call: each answer is its own request's.
  curls=()
  for i in $(seq 1 12); do
    curl -s --max-time 30 --data-binary "{\"limit\":\"per_user\",\"key\":\"c$i\",\"units\":$((i % 2 + 1))}" \
      "http://127.0.0.1:$HA/v1/throttle" >"$tmp/par.$i" &
    curls+=($!)
  done
  wait "${curls[@]}"
  wrong=0
  for i in $(seq 1 12); do
    # 1 unit of 1 granted; 2 units of 1 never.
    if [ $((i % 2)) = 0 ]; then want="\"key\":\"c$i\",\"limit\":1,\"remaining\":0"; else want="\"key\":\"c$i\""; fi
    grep -qF "$want" "$tmp/par.$i" || wrong=$((wrong + 1))
    [ $((i % 2)) = 1 ] && ! grep -q '"retry_after_ms":-1' "$tmp/par.$i" && wrong=$((wrong + 1))
  done
  check "HTTP: 12 concurrent requests, each answered its own" 0 "$wrong"
fi

# ---- 1c. The caps (engine: max_tasks, max_parked) across two nodes -----------------------------

# Two more nodes on an empty queue of their own (Redis database 6, PostgreSQL database "caps"),
# with the same small caps: the single node's rules and BUSY words, whichever node adds.
cat >"$tmp/caps.yaml" <<'EOF2'
engine: {max_tasks: 4, max_parked: 1}
limits:
  cslot: {concurrency: 1}
types:
  c1: {limits: [cslot]}
  free: {}
EOF2
if [ "$store" = postgresql ]; then
  "$(pg_bindir)/psql" "$pgconn_a" -qc 'CREATE DATABASE caps'
  curl="postgresql://sluice@127.0.0.1:$pgport_a/caps"
elif [ "$store" = redis-cluster ]; then
  start_cluster caps # one master: a Cluster has one database
  curl=redis-cluster://127.0.0.1:$rport_caps
else
  curl=redis://127.0.0.1:$rport_a/6
fi
for n in E F; do
  node_conf=$tmp/caps.yaml start_node $n --store "$curl" --store-timeout 20000
done
E=$port_E
F=$port_F
a1=$(on "$E" TASK.ADD c1 '{}')
check "caps: E delivers the first c1, holding the slot" "$a1" "$(redis-cli -p "$E" TASK.GET c1 | head -1)"
a2=$(on "$F" TASK.ADD c1 '{}')
case $a2 in '' | *[!0-9]*) bad "caps: a task that would wait, the lot empty, is accepted: [$a2]" ;; *) ok ;; esac
check "caps: its claim on F parks it" "" "$(on "$F" TASK.GET c1)"
check "caps: parked" parked "$(P=$E field TASK.INFO "$a2" state)"
check "caps: a task that would wait while the lot is full (max_parked 1)" \
  "BUSY too many parked tasks (max_parked 1): this task would wait for budget" "$(on "$E" TASK.ADD c1 '{}')"
a3=$(on "$F" TASK.ADD c1 '{}' DELAY 1)
case $a3 in '' | *[!0-9]*) bad "caps: a delayed task is accepted however full the lot: [$a3]" ;; *) ok ;; esac
on "$E" TASK.GET c1 TIMEOUT 300 >/dev/null
check "caps: at its gate it must park behind a2 while the lot is full: failed" failed \
  "$(P=$F field TASK.INFO "$a3" state)"
check "caps: ... as ratelimited" ratelimited "$(P=$F field TASK.INFO "$a3" fail_reason)"
j1=$(on "$F" TASK.ADD free '{}')
j2=$(on "$E" TASK.ADD free '{}')
check "caps: a task that would not wait is accepted with the lot full" 2 \
  "$(printf '%s\n' "$j1" "$j2" | grep -c '^[0-9][0-9]*$')"
check "caps: the fifth unfinished task (max_tasks 4) on F" "BUSY too many tasks (max_tasks 4)" \
  "$(on "$F" TASK.ADD free '{}')"
check "caps: ... and on E" "BUSY too many tasks (max_tasks 4)" "$(on "$E" TASK.ADD free '{}')"
check "caps: ACK on F frees one" OK "$(on "$F" TASK.ACK "$a1")"
j3=$(on "$E" TASK.ADD free '{}')
case $j3 in '' | *[!0-9]*) bad "caps: room again after the ACK: [$j3]" ;; *) ok ;; esac
check "caps: full again" "BUSY too many tasks (max_tasks 4)" "$(on "$F" TASK.ADD free '{}')"

# ---- 2. A blocked GET on B woken by an ADD on A ------------------------------------------------

wakes=$(store_field "$B" store_task_wakes)
start=$(now_ms)
redis-cli -p "$B" TASK.GET job TIMEOUT 20000 >"$tmp/blocked" 2>&1 &
bpid=$!
P=$B wait_until "the GET on B blocks" 10 blocked_is 1
id=$(on "$A" TASK.ADD job '{"n":5}')
wait "$bpid"
took=$(($(now_ms) - start))
check "the blocked GET gets A's task" "$id" "$(head -1 "$tmp/blocked")"
within "it did not wait for its timeout (ms)" 0 15000 "$took"
within "B heard the wake" $((wakes + 1)) 1000000 "$(store_field "$B" store_task_wakes)"
redis-cli -p "$B" TASK.ACK "$id" >/dev/null
# A parked task's slot comes on another node: a concurrency slot held by B's delivery, released
# by an ACK on A, wakes the GET blocked on C.
c1=$(on "$A" TASK.ADD conc '{"n":1}')
c2=$(on "$A" TASK.ADD conc '{"n":2}')
check "B takes the first, holding the slot" "$c1" "$(redis-cli -p "$B" TASK.GET conc COUNT 2 | head -1)"
redis-cli -p "$C" TASK.GET conc TIMEOUT 20000 >"$tmp/blocked" 2>&1 &
bpid=$!
P=$C wait_until "the GET on C blocks" 10 blocked_is 1
check "ACK on A releases the slot" OK "$(on "$A" TASK.ACK "$c1")"
wait "$bpid"
check "C's GET woken with the parked task" "$c2" "$(head -1 "$tmp/blocked")"
redis-cli -p "$C" TASK.ACK "$c2" >/dev/null
# Priority first, then arrival; DELAY holds a task back; ID replaces a queued task's payload.
p1=$(on "$A" TASK.ADD prio '"low"')
p2=$(on "$B" TASK.ADD prio '"high"' PRIORITY 5)
check "the higher priority first, across nodes" "$p2 $p1" \
  "$(redis-cli -p "$C" TASK.GET prio COUNT 2 | sed -n '1p;6p' | tr '\n' ' ' | sed 's/ $//')"
# (2 s: the GET that must find nothing follows the ADD at once, even on a busy machine.)
d1=$(on "$A" TASK.ADD prio '"later"' DELAY 2000)
check "a delayed task is not handed out before its time" "" "$(on "$B" TASK.GET prio)"
check "and is after it" "$d1" "$(redis-cli -p "$B" TASK.GET prio TIMEOUT 10000 | head -1)"
k1=$(on "$A" TASK.ADD job '"first"' ID same-key DELAY 60000)
check "ID: a queued task's payload replaced, same id" "$k1" "$(on "$B" TASK.ADD job '"second"' ID same-key DELAY 60000)"
check "CANCEL it" 1 "$(on "$C" TASK.CANCEL "$k1")"
# A blocked GET that times out answers the empty array.
check "a GET timing out" "" "$(on "$C" TASK.GET job TIMEOUT 300)"

# ---- 3. kill -9 of a node holding a delivery ---------------------------------------------------

id=$(on "$A" TASK.ADD short '{"n":6}')
got=$(redis-cli -p "$C" TASK.GET short | sed -n '1p;4p' | tr '\n' ' ' | sed 's/ $//')
check "C holds the task, attempt 1" "$id 1" "$got"
kill -KILL "$pid_C"
wait "$pid_C" 2>/dev/null
# Its lease (2 s) lapses in store time; another node delivers it again.
got=$(redis-cli -p "$A" TASK.GET short TIMEOUT 15000 | sed -n '1p;4p' | tr '\n' ' ' | sed 's/ $//')
check "redelivered on A with attempt 2" "$id 2" "$got"
contains "the dead delivery's late ACK refused" \
  "NOLEASE task $id attempt 1 is not running (the task is running at attempt 2)" \
  "$(on "$B" TASK.ACK "$id" ATTEMPT 1)"
check "the live delivery's ACK" OK "$(on "$B" TASK.ACK "$id" ATTEMPT 2)"
start_node C --store "$url" --store-timeout 20000
C=$port_C
wait_until "the new C subscribed" 10 subscribed "$C"

# ---- 4. Many clients on every node at once; then one of them killed holding deliveries ---------

out=$($py "$checker" --nodes "$A,$B,$C" --tasks 3000 \
  --limited limited --rate 20 --period-ms 1000 --burst 5 --lease-ms 30000 --limited-count 45 \
  --kill-pid "$pid_C" --kill-port "$C" --short short --short-count 60 --max-seconds 40 2>&1)
rc=$?
echo "# $out"
check "every task acknowledged exactly once, the limit's bound kept: $out" 0 "$rc"

# ---- 5. The store away -------------------------------------------------------------------------

store_freeze
start_node D --store "$url" --store-timeout 300 --admin-port 0 --admin-port-file "$tmp/D.admin"
contains "TASK.ADD while the store does not answer" "STOREDOWN" "$(on "$port_D" TASK.ADD job '{}')"
check "PING still answers" PONG "$(on "$port_D" PING)"
HD=$(cat "$tmp/D.admin")
check "HTTP: a throttle while the store does not answer: 503" 503 \
  "$(post "$HD" /v1/throttle '{"limit":"per_user","key":"down"}')"
body_has "HTTP: STOREDOWN" '"code":"STOREDOWN"'
check "HTTP: a submit: 503" 503 "$(post "$HD" /v1/tasks '{"type":"job"}')"
body_has "HTTP: the submit's STOREDOWN" '"code":"STOREDOWN"'
if [ "$store" != postgresql ]; then
  # B (store timeout 20 s) stops while a request waits for the frozen store: answered 503
  # SHUTDOWN at once, and B exits cleanly (MHD holds no suspended connection when it stops).
  throttles() {
    curl -s "127.0.0.1:$1/metrics" | awk '$1 == "sluice_commands_total{command=\"throttle\"}" { print $2 }'
  }
  throttles_past() { [ "$(throttles "$1")" -gt "$2" ] 2>/dev/null; }
  n0=$(throttles "$HB")
  curl -s -o "$tmp/late" -w '%{http_code}' --max-time 30 --data-binary '{"limit":"per_user","key":"late"}' \
    "http://127.0.0.1:$HB/v1/throttle" >"$tmp/late.status" &
  late=$!
  wait_until "HTTP: B's request waits for the store" 10 throttles_past "$HB" "$n0"
  kill -TERM "$pid_B"
  wait "$late"
  check "HTTP: the waiting request: 503" 503 "$(cat "$tmp/late.status")"
  contains "HTTP: SHUTDOWN" '"code":"SHUTDOWN"' "$(cat "$tmp/late")"
fi
store_thaw
if [ "$store" != postgresql ]; then
  # (B's last counters' flush waited for the store.)
  wait "$pid_B"
  check "HTTP: B stopped with a request waiting: exit 0" 0 "$?"
  start_node B --store "$url" --store-timeout 20000
  B=$port_B
fi
wait_until "D back up" 15 bash -c "[ \"\$(redis-cli -p $port_D INFO store | tr -d '\r' | awk -F: '\$1 == \"store_state\" { print \$2 }')\" = up ]"
id=$(on "$port_D" TASK.ADD job '{"n":7}')
case $id in '' | *[!0-9]*) bad "TASK.ADD after the store came back: [$id]" ;; *) ok ;; esac
check "and it is delivered" "$id" "$(redis-cli -p "$B" TASK.GET job TIMEOUT 5000 | head -1)"

# The store killed and started again on its port: the connections of every node come back by
# themselves, and a GET blocked on B is woken by an ADD on A again.
store_restart
for p in $A $B; do
  wait_until "node on $p subscribed again" 15 subscribed "$p"
  wait_until "node on $p up again" 15 bash -c "[ \"\$(redis-cli -p $p INFO store | tr -d '\r' | awk -F: '\$1 == \"store_state\" { print \$2 }')\" = up ]"
done
# woken_on_b LABEL: a TASK.GET blocked on B is answered with the task an ADD on A then adds.
woken_on_b() {
  local bpid id
  redis-cli -p "$B" TASK.GET job TIMEOUT 20000 >"$tmp/blocked" 2>&1 &
  bpid=$!
  P=$B wait_until "$1: the GET on B blocks" 10 blocked_is 1
  id=$(on "$A" TASK.ADD job '{"n":8}')
  wait "$bpid"
  check "$1: woken" "$id" "$(head -1 "$tmp/blocked")"
}
woken_on_b "after the store came back"

# ---- 6. Redis Cluster: the wake subscriber's seed lost ------------------------------------------

if [ "$store" = redis-cluster ]; then
  # The first seed is a master other than the queue's: killed, the subscriber moves to the next
  # seed (a PUBLISH on any master reaches every node), and a blocked GET is woken by the
  # message again, not by the once-a-second look.
  kill -KILL "$seed1pid"
  wait "$seed1pid" 2>/dev/null
  for p in $A $B; do
    wait_until "node on $p subscribed through the next seed" 20 subscribed "$p"
  done
  contains "the node says where its subscriber went" "the wake subscriber moves to 127.0.0.1:$qport" \
    "$(cat "$tmp/B.log")"
  w0=$(store_field "$B" store_task_wakes)
  woken_on_b "with the first seed gone"
  within "B heard the wake through the next seed" 1 1000000 "$(($(store_field "$B" store_task_wakes) - w0))"
fi

finish
