#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The task queue's writes waiting for Redis replicas (issue 10, docs/cluster.md "Replicas"): a
# primary redis-server and a replica of it (`--replicaof`), a node with `store: {replicas: 1}`.
# Over the wire: with the replica up, TASK.ADD answers the id and the task is already on the
# replica (read there with redis-cli); with the replica SIGSTOPped, TASK.ADD and TASK.ACK answer
# -NOTREPLICATED within the replicas timeout (the write is on the primary: never a plain
# success), TASK.GET and THROTTLE still answer, and INFO store counts the under-replicated
# replies; after SIGCONT the writes succeed again; a node with replicas 0 does not wait; a killed
# replica is refused the same way; a call resent after NOSCRIPT gets a WAIT of its own. Bad
# settings are refused at start. On a Redis Cluster (one master and its replica) the same: the
# WAIT goes to the master of the queue's slot. Every wait is a deadline,
# never a sleep; every process is stopped by its PID.
#
# Usage: bash tests/server/redis_replicas.sh PATH-TO-SLUICE SOURCE-DIR
set -u
set -f

sluice=${1:?usage: redis_replicas.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"

need_tools redis_replicas.sh redis-cli redis-server

start_redis primary
start_redis replica --replicaof 127.0.0.1 "$rport_primary"
P1=$rport_primary
bg=()
R1=$rport_replica
db=3
url=redis://127.0.0.1:$P1/$db
# The replicas timeout (ms) of node W, and its store timeout (ms), above it. With the replica up,
# a WAIT must be confirmed within WT: 2 s, so a replica slowed down by a busy machine still
# confirms in time (300 ms was not always enough under load); the store timeout leaves room for
# a call sent behind a WAIT in flight (up to 2 WT) with margin.
WT=2000
ST=10000

# The replica's link to the primary is up and the primary counts it.
linked() {
  redis-cli -p "$R1" INFO replication | tr -d '\r' | grep -q '^master_link_status:up$' &&
    redis-cli -p "$P1" INFO replication | tr -d '\r' | grep -q '^connected_slaves:1$'
}
wait_until "the replica is linked" 20 linked

cat >"$tmp/sluice.yaml" <<EOF
store: {url: "$url", replicas: 1, replicas_timeout: ${WT}ms, timeout: ${ST}ms}
limits:
  lim: {rate: 1000/1s, burst: 100}
types:
  job: {}
EOF
cat >"$tmp/plain.yaml" <<'EOF'
limits:
  lim: {rate: 1000/1s, burst: 100}
types:
  job: {}
EOF

# on_replica ARGS...: a command to the replica, in the store's database.
on_replica() { redis-cli -p "$R1" -n "$db" "$@" 2>&1 | tr '\n' ' ' | sed 's/ *$//'; }
is_id() { case $2 in '' | *[!0-9]*) bad "$1: not an id: [$2]" ;; *) ok ;; esac; }
# timed_on PORT ARGS...: ARGS as one RESP command to the node on PORT over a connection opened
# beforehand, timed with the shell's own clock ($EPOCHREALTIME): no process is started between
# the send and the reply, so a busy machine's slow fork and exec (redis-cli, date) do not count
# as the node's waiting. Sets dt (ms) and out: the reply's first scalar (what `on ... | head -1`
# shows), or an error's text without its "-".
timed_on() {
  local port=$1 cmd a t0 t1 line
  shift
  printf -v cmd '*%d\r\n' $#
  for a; do printf -v cmd '%s$%d\r\n%s\r\n' "$cmd" "${#a}" "$a"; done
  exec 4<>"/dev/tcp/127.0.0.1/$port"
  t0=$EPOCHREALTIME
  printf '%s' "$cmd" >&4
  IFS= read -r -t 30 line <&4
  t1=$EPOCHREALTIME
  line=${line%$'\r'}
  while [ "${line:0:1}" = '*' ] && [ "$line" != '*0' ] && IFS= read -r -t 30 line <&4; do
    line=${line%$'\r'}
  done
  case $line in
  '*0') out= ;;
  '$'*) IFS= read -r -t 30 out <&4 && out=${out%$'\r'} ;;
  *) out=${line:1} ;;
  esac
  exec 4<&- 4>&-
  t0=${t0//[.,]/}
  t1=${t1//[.,]/}
  dt=$(((10#$t1 - 10#$t0) / 1000))
}

# ---- Settings -------------------------------------------------------------------------------

out=$("$sluice" serve --port 0 --no-admin --store "$url" --store-replicas x 2>&1)
contains "--store-replicas x refused" "--store-replicas" "$out"
out=$("$sluice" serve --port 0 --no-admin --store "$url" --store-replicas 1 \
  --store-timeout 500 --store-replicas-timeout 500 2>&1)
contains "a replicas timeout not below the store timeout refused" \
  "the replicas timeout (500 ms) must be at least 1 ms and less than the store timeout (500 ms)" "$out"
"$sluice" serve --help | grep -q -- '--store-replicas N' && ok || bad "--help names --store-replicas"

start_node W # replicas 1 from the file
node_conf=$tmp/plain.yaml start_node Z --store "$url"
start_node F --store-replicas 0 # the command line wins over the file
W=$port_W
Z=$port_Z
check "INFO store_replicas (file)" 1 "$(store_field "$W" store_replicas)"
check "INFO store_replicas_timeout_ms" "$WT" "$(store_field "$W" store_replicas_timeout_ms)"
check "INFO store_replicas (default 0)" 0 "$(store_field "$Z" store_replicas)"
check "INFO store_replicas (flag over file)" 0 "$(store_field "$port_F" store_replicas)"

# ---- 1. The replica up: answered once it has the task -----------------------------------------

id=$(on "$W" TASK.ADD job '{"n":1}')
is_id "TASK.ADD with the replica up" "$id"
# No wait here: WAIT confirmed the replica had it before the id was answered.
check "the task is on the replica when ADD answers" 1 "$(on_replica HEXISTS 'sluice:{all}:task' "$id")"
check "one WAIT sent" 1 "$(store_field "$W" store_replica_waits)"
got=$(redis-cli -p "$W" TASK.GET job | head -1)
check "GET delivers it" "$id" "$got"
check "ACK with the replica up" OK "$(on "$W" TASK.ACK "$id" ATTEMPT 1)"
check "the ACK is on the replica" 1 "$(on_replica ZSCORE 'sluice:{all}:done' "$id" | grep -c .)"
check "no under-replicated reply yet" 0 "$(store_field "$W" store_under_replicated)"
# A call resent after NOSCRIPT (the script flushed) runs behind its WAIT: it gets one more.
# The node's periodic calls (the series loop, the shared counters' flush, the definitions poll;
# none of them sends a WAIT) may meet the NOSCRIPT first and reload the script before the ADD
# reaches Redis: that ADD is not resent and has one WAIT. So MONITOR on the primary tells which
# happened (a resent call's EVALSHA is there twice), and the ADD is tried again, with a fresh
# SCRIPT FLUSH, until it is the call resent: a resent call then has its two WAITs, the second
# after its second EVALSHA.
# mon_has FILE TEXT: the MONITOR log FILE has a line with TEXT.
mon_has() { grep -qF -- "$2" "$1"; }
resent=0
for try in $(seq 1 10); do
  mon=$tmp/monitor.$try
  redis-cli -p "$P1" MONITOR >"$mon" 2>&1 &
  monpid=$!
  pids+=("$monpid")
  wait_until "MONITOR $try is on" 20 mon_has "$mon" OK || break
  waits=$(store_field "$W" store_replica_waits)
  redis-cli -p "$P1" SCRIPT FLUSH >/dev/null
  id=$(on "$W" TASK.ADD job "{\"n\":\"resent-$try\"}")
  is_id "TASK.ADD after SCRIPT FLUSH ($try)" "$id"
  check "on the replica too ($try)" 1 "$(on_replica HEXISTS 'sluice:{all}:task' "$id")"
  got=$(store_field "$W" store_replica_waits)
  # MONITOR lists commands in the order Redis ran them: once the mark is there, so is the ADD.
  redis-cli -p "$P1" ECHO "mark-$try" >/dev/null
  wait_until "MONITOR $try shows the mark" 20 mon_has "$mon" "mark-$try"
  { kill "$monpid" && wait "$monpid"; } 2>/dev/null
  # The ADD's EVALSHAs, and whether a WAIT came after the last of them.
  sends=$(grep -c "\"EVALSHA\".*resent-$try" "$mon")
  wait_after=$(awk -v m="resent-$try" 'index($0, "\"EVALSHA\"") && index($0, m) { w = 0 }
    index($0, "\"WAIT\"") { w = 1 } END { print w + 0 }' "$mon")
  case $sends in
  1) check "an ADD not resent has one WAIT ($try)" $((waits + 1)) "$got" ;;
  2)
    check "two WAITs for the resent call" $((waits + 2)) "$got"
    check "a WAIT after the resent EVALSHA" 1 "$wait_after"
    resent=1
    ;;
  *) bad "the ADD after SCRIPT FLUSH ($try) was sent $sends times: $(cat "$mon")" ;;
  esac
  check "CANCEL it ($try)" 1 "$(on "$W" TASK.CANCEL "$id")"
  [ "$resent" = 1 ] && break
done
[ "$resent" = 1 ] && ok || bad "no TASK.ADD was the call resent after SCRIPT FLUSH in $try tries"
# THROTTLE and claims do not wait.
waits=$(store_field "$W" store_replica_waits)
on "$W" THROTTLE lim a >/dev/null
check "a GET that finds nothing" "" "$(on "$W" TASK.GET job)"
check "THROTTLE and GET sent no WAIT" "$waits" "$(store_field "$W" store_replica_waits)"

# ---- 2. The replica stopped: -NOTREPLICATED within the timeout ---------------------------------

kill -STOP "$rpid_replica"
timed_on "$W" TASK.ADD job '{"n":2}'
contains "ADD with the replica stopped" "NOTREPLICATED TASK.ADD of task" "$out"
contains "it says the primary has it" "reached the primary but only 0 of 1 replicas confirmed it within $WT ms" "$out"
within "answered within the timeout (ms)" "$((WT - 20))" "$((WT + 1200))" "$dt"
id2=$(echo "$out" | awk '{ print $5 }')
is_id "the refused ADD names its task" "$id2"
check "the task is on the primary" 1 "$(redis-cli -p "$P1" -n "$db" HEXISTS 'sluice:{all}:task' "$id2")"
check "counted" 1 "$(store_field "$W" store_under_replicated)"
# A claim does not wait: it delivers the task at once.
timed_on "$W" TASK.GET job
check "GET with the replica stopped" "$id2" "$out"
within "GET did not wait (ms)" 0 "$((WT - 50))" "$dt"
contains "ACK with the replica stopped" "NOTREPLICATED TASK.ACK of task $id2 reached the primary" \
  "$(on "$W" TASK.ACK "$id2" ATTEMPT 1)"
check "counted twice" 2 "$(store_field "$W" store_under_replicated)"
timed_on "$W" THROTTLE lim a
lacks "THROTTLE with the replica stopped" "ERR" "$out"
within "THROTTLE did not wait (ms)" 0 "$((WT - 50))" "$dt"
# A decision sent while a WAIT waits shares the connection: answered after it, within the
# replicas timeout (the cost docs/cluster.md states), never an error.
(on "$W" TASK.ADD job '{"n":9}' >"$tmp/bg.out") &
bgpid=$!
sleep 0.05 # lets the ADD's WAIT reach Redis first: the bound below holds either way
timed_on "$W" THROTTLE lim b
wait "$bgpid"
lacks "THROTTLE behind a waiting WAIT" "ERR" "$out"
within "THROTTLE behind a waiting WAIT (ms)" 0 "$((WT + 700))" "$dt"
contains "the background ADD" "NOTREPLICATED" "$(cat "$tmp/bg.out")"
# Many producers at once: the WAITs of their turns do not queue up behind each other (one in
# flight; the calls sent meanwhile share the next), so no call outlives the store timeout: every
# ADD answers NOTREPLICATED, none STOREDOWN, and the connection is never dropped.
waits=$(store_field "$W" store_replica_waits)
for i in $(seq 1 20); do
  redis-cli -p "$W" -r 5 TASK.ADD job '{}' >"$tmp/many.$i" 2>&1 &
  bg+=($!)
done
wait "${bg[@]}"
many=$(for i in $(seq 1 20); do cat "$tmp/many.$i"; done)
check "20 x 5 concurrent ADDs answer NOTREPLICATED" 100 "$(echo "$many" | grep -c NOTREPLICATED)"
check "no STOREDOWN" 0 "$(echo "$many" | grep -c STOREDOWN)"
check "no store timeout" 0 "$(store_field "$W" store_timeouts)"
echo "# 100 ADDs from 20 clients shared $(($(store_field "$W" store_replica_waits) - waits)) WAITs"
# replicas 0: no WAIT, a plain id at once.
timed_on "$Z" TASK.ADD job '{"n":3}'
id3=$out
is_id "ADD on a node with replicas 0" "$id3"
within "replicas 0 does not wait (ms)" 0 "$((WT - 50))" "$dt"
check "replicas 0 sent no WAIT" 0 "$(store_field "$Z" store_replica_waits)"
check "the node stays up" up "$(store_field "$W" store_state)"

# ---- 3. SIGCONT: the writes succeed again ---------------------------------------------------

kill -CONT "$rpid_replica"
# add_ok PORT: a TASK.ADD on the node on PORT answers an id (set in added), for wait_until.
add_ok() {
  local r
  r=$(on "$1" TASK.ADD job '{"n":4}')
  case $r in '' | *[!0-9]*) return 1 ;; esac
  added=$r
}
wait_until "ADD succeeds once the replica is back" 20 add_ok "$W"
id4=$added
check "and the task is on the replica" 1 "$(on_replica HEXISTS 'sluice:{all}:task' "$id4")"
check "the earlier refused task reached the replica too" 1 \
  "$(on_replica HEXISTS 'sluice:{all}:task' "$id2")"
check "CANCEL with the replica up" 1 "$(on "$W" TASK.CANCEL "$id4")"

# ---- 4. The replica killed: refused the same way ----------------------------------------------

{ kill -KILL "$rpid_replica" && wait "$rpid_replica"; } 2>/dev/null
timed_on "$W" TASK.ADD job '{"n":5}'
contains "ADD with the replica gone" "NOTREPLICATED TASK.ADD of task" "$out"
within "answered within the timeout (ms)" "$((WT - 20))" "$((WT + 1200))" "$dt"

for n in W Z F; do
  pv=pid_$n
  kill -TERM "${!pv}"
  wait "${!pv}"
  check "node $n exits 0 on SIGTERM" 0 "$?"
done

# ---- 5. On a Redis Cluster: the WAIT goes to the queue slot's master ---------------------------

# One master serving every slot and a replica of it (CLUSTER MEET, then CLUSTER REPLICATE).
start_cluster cm
start_cluster_master cr
CM=$rport_cm
CR=$rport_cr
redis-cli -p "$CR" CLUSTER MEET 127.0.0.1 "$CM" >/dev/null
cm_id=$(redis-cli -p "$CM" CLUSTER MYID)
knows_master() { redis-cli -p "$CR" CLUSTER NODES 2>/dev/null | grep -q "^$cm_id "; }
wait_until "the replica node knows the master" 20 knows_master
check "CLUSTER REPLICATE" OK "$(redis-cli -p "$CR" CLUSTER REPLICATE "$cm_id")"
cluster_linked() {
  redis-cli -p "$CR" INFO replication | tr -d '\r' | grep -q '^master_link_status:up$' &&
    redis-cli -p "$CM" INFO replication | tr -d '\r' | grep -q '^connected_slaves:1$'
}
wait_until "the Cluster replica is linked" 20 cluster_linked
curl_=redis-cluster://127.0.0.1:$CM
node_conf=$tmp/plain.yaml start_node CW --store "$curl_" --store-replicas 1 \
  --store-replicas-timeout "$WT" --store-timeout "$ST"
CW=$port_CW
check "Cluster: INFO store_replicas" 1 "$(store_field "$CW" store_replicas)"
# on_cluster_replica ARGS...: a read on the replica (READONLY lets it answer for its master's
# slots instead of redirecting).
on_cluster_replica() { printf 'READONLY\n%s\n' "$*" | redis-cli -p "$CR" 2>&1 | tail -1; }
cid=$(on "$CW" TASK.ADD job '{"n":"c1"}')
is_id "Cluster: TASK.ADD with the replica up" "$cid"
check "Cluster: the task is on the replica when ADD answers" 1 \
  "$(on_cluster_replica HEXISTS 'sluice:{all}:task' "$cid")"
within "Cluster: a WAIT was sent" 1 100 "$(store_field "$CW" store_replica_waits)"
check "Cluster: GET delivers it" "$cid" "$(redis-cli -p "$CW" TASK.GET job | head -1)"
check "Cluster: ACK with the replica up" OK "$(on "$CW" TASK.ACK "$cid" ATTEMPT 1)"
kill -STOP "$rpid_cr"
timed_on "$CW" TASK.ADD job '{"n":"c2"}'
contains "Cluster: ADD with the replica stopped" "NOTREPLICATED TASK.ADD of task" "$out"
within "Cluster: answered within the timeout (ms)" "$((WT - 20))" "$((WT + 1200))" "$dt"
check "Cluster: counted under-replicated" 1 "$(store_field "$CW" store_under_replicated)"
check "Cluster: THROTTLE still answers" 1 "$(redis-cli -p "$CW" THROTTLE lim k | head -1)"
kill -CONT "$rpid_cr"
wait_until "Cluster: ADD succeeds once the replica is back" 20 add_ok "$CW"
cid3=$added
check "Cluster: and the task is on the replica" 1 \
  "$(on_cluster_replica HEXISTS 'sluice:{all}:task' "$cid3")"
kill -TERM "$pid_CW"
wait "$pid_CW"
check "Cluster node exits 0 on SIGTERM" 0 "$?"
finish
