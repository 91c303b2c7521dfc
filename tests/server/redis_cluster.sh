#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Several nodes on a Redis Cluster (issue 10, docs/cluster.md "Redis Cluster"): a 3-master
# cluster on free loopback ports (redis-cli --cluster create, node timeout 2 s, full coverage not
# required so that one master down leaves the others serving), and three `sluice serve --store
# redis-cluster://...` sharing THROTTLE, CL.THROTTLE and LEASE.* budgets. The checker
# (tests/tools/cluster_check.py --redis-cluster) drives all three nodes from many pipelining
# clients, moves the slot of a hot key to another master mid-run (ASK, then MOVED), then reads the
# audit lists from every master and replays every grant (zero violations, chains all-or-nothing,
# grants in Redis == grants told). Then: keys spread over the three masters; one master SIGSTOPped
# (its keys answer -STOREDOWN, the others keep deciding) and SIGCONTed (recovers); a task added
# on one node and taken on another, the limits its type names kept in the queue's slot; a
# chain mixing a global and a per-key limit decided in that slot; a CONFIG RELOAD that would
# move a limit into it refused. Every wait is a deadline, never a sleep.
#
# Usage: bash tests/server/redis_cluster.sh PATH-TO-SLUICE SOURCE-DIR
set -u
set -f

sluice=${1:?usage: redis_cluster.sh PATH-TO-SLUICE SOURCE-DIR}
src=${2:?usage: redis_cluster.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"

py=/usr/bin/python3
checker=$src/tests/tools/cluster_check.py
need_tools redis_cluster.sh redis-server redis-cli
if ! $py -c 'import redis' 2>/dev/null; then
  bad "python3-redis is not installed (scripts/deps.sh installs it)"
  finish
  exit 1
fi

# start_master NAME: one cluster-enabled redis-server (lib.bash's start_cluster_master); sets
# cport_NAME and cpid_NAME.
start_master() {
  local -n rp="rport_$1" rd="rpid_$1"
  start_cluster_master "$1" --cluster-require-full-coverage no
  printf -v "cport_$1" '%s' "$rp"
  printf -v "cpid_$1" '%s' "$rd"
}

# The master port that owns KEY's state (its hash tag is the key itself).
owner_of() {
  local slot
  slot=$(redis-cli -p "$cport_m1" CLUSTER KEYSLOT "$1")
  $py -c "
import redis, sys
for s, e, m, *_ in redis.Redis(port=$cport_m1).execute_command('CLUSTER', 'SLOTS'):
    if s <= $slot <= e:
        print(m[1]); break"
}
store_up() { [ "$(store_field "$1" store_state)" = up ]; }
# decides PORT KEY: a THROTTLE of a generous limit on KEY answers a decision (not an error).
decides() { [ "$(redis-cli -p "$1" THROTTLE api "$2" 2>&1 | head -1)" = 1 ]; }
cluster_sum() {
  local f=$1 n total=0
  for n in $port_n1 $port_n2 $port_n3; do total=$((total + $(store_field "$n" "$f"))); done
  echo "$total"
}

# ---- 0. The cluster ----------------------------------------------------------------------------

start_master m1
start_master m2
start_master m3
masters="$cport_m1,$cport_m2,$cport_m3"
out=$(redis-cli --cluster create "127.0.0.1:$cport_m1" "127.0.0.1:$cport_m2" "127.0.0.1:$cport_m3" \
  --cluster-replicas 0 --cluster-yes 2>&1)
check "redis-cli --cluster create" 0 "$?"
wait_until "cluster_state:ok on the three masters" 30 cluster_ok "$cport_m1" "$cport_m2" "$cport_m3"
url="redis-cluster://127.0.0.1:$cport_m1,127.0.0.1:$cport_m2"

$py "$checker" --print-config --cluster >"$tmp/sluice.yaml"
$py "$checker" --print-config >"$tmp/standalone.yaml"

# ---- 1. Refused at start: a database other than 0 --------------------------------------------------

out=$("$sluice" serve --port 0 --store "redis-cluster://127.0.0.1:$cport_m1/2" 2>&1)
check "redis-cluster URL with a database: usage error" 2 "$?"
contains "it says why" "a Redis Cluster has only database 0" "$out"

# ---- 2. Three nodes, one budget ----------------------------------------------------------------

for n in n1 n2 n3; do
  start_node $n --store "$url" --store-timeout 20000 --store-audit
done
for n in $port_n1 $port_n2 $port_n3; do
  wait_until "node on $n is up" 20 store_up "$n"
done
contains "INFO store names the kind" "store:redis-cluster" "$(on "$port_n1" INFO store)"
check "INFO store: three masters" 3 "$(store_field "$port_n1" store_cluster_masters)"
check "INFO store: every slot mapped" 16384 "$(store_field "$port_n1" store_cluster_slots_known)"

got=""
for p in $port_n1 $port_n2 $port_n3 $port_n1 $port_n2 $port_n3; do
  got="$got $(redis-cli -p "$p" CL.THROTTLE shared 4 1 3600 | head -1)"
done
check "burst of 5 shared by three nodes" " 0 0 0 0 0 1" "$got"
check "THROTTLE on one node" 1 "$(redis-cli -p "$port_n1" THROTTLE slow x | head -1)"
check "denied on another, naming the limit" "0 slow" \
  "$(redis-cli -p "$port_n2" THROTTLE slow x | sed -n '1p;6p' | tr '\n' ' ' | sed 's/ $//')"
check "a chain of two per-key limits" 1 "$(redis-cli -p "$port_n3" THROTTLE job x | head -1)"
# Leases: a handle from one node renews and releases on another.
h1=$(redis-cli -p "$port_n1" LEASE.ACQUIRE slots job1 | sed -n 2p)
contains "lease" "slots/" "$h1"
contains "second lease, other node" "slots/" "$(redis-cli -p "$port_n2" LEASE.ACQUIRE slots job1 | sed -n 2p)"
contains "third refused on a third node" "RATELIMITED limit=slots kind=concurrency key=job1" \
  "$(on "$port_n3" LEASE.ACQUIRE slots job1)"
check "renewed on another node" 5000 "$(redis-cli -p "$port_n3" LEASE.RENEW "$h1" TTL 5000)"
check "released on another node" OK "$(redis-cli -p "$port_n2" LEASE.RELEASE "$h1")"
# The task queue, in the slot of {all} with the limits job names (redis_cluster_tasks.sh runs
# the whole task suite on a Cluster): added on one node, taken on another, acknowledged on a
# third.
tid=$(on "$port_n1" TASK.ADD job '{}' KEY tq)
check "a task added on n1 is taken on n2" "$tid job" "$(redis-cli -p "$port_n2" TASK.GET job | head -2 | tr '\n' ' ' | sed 's/ $//')"
# Its links' states are keys of {all} (the queue's master), read from the task's record.
links=$(redis-cli -p "$(owner_of '{all}')" HGET 'sluice:{all}:links' "$tid")
for l in perkey pair; do
  contains "limit $l of type job keeps its state in the queue's slot" "sluice:{all}:${#l}:$l:tq" "$links"
done
check "and acknowledged on n3" OK "$(on "$port_n3" TASK.ACK "$tid")"
# A global link alone is fine (its tag is its name): one limit, one slot.
check "a global limit alone" 1 "$(redis-cli -p "$port_n1" THROTTLE global "" | head -1)"
# Keys longer than a limit's max_key_len are tagged by their digest: two limits with different
# max_key_len can put one request's links in two slots, refused per request. (Not in this
# config: every limit has the default max_key_len, so a long key keeps one tag.)
long=$(printf 'L%.0s' $(seq 1 300))
check "a long key: one tag for the chain" 1 "$(redis-cli -p "$port_n2" THROTTLE job "$long" | head -1)"

# The checker: every node, many clients, pipelines of 16, a hot slot moved mid-run.
for m in $cport_m1 $cport_m2 $cport_m3; do redis-cli -p "$m" FLUSHALL >/dev/null; done
out=$($py "$checker" --nodes "$port_n1,$port_n2,$port_n3" --redis-cluster "$masters" \
  --target 100000 --max-seconds 60 --clients-per-node 6 --pipeline 16 --seed 11 --keys 12 \
  --migrate k0 --tolerate-storedown 2>&1)
rc=$?
echo "# checker, Redis Cluster, 3 nodes x 6 clients, -P 16, slot of k0 moved: $out"
check "checker: zero violations" 0 "$rc"
contains "checker moved a slot" "migrated=slot" "$out"
within "MOVED followed" 1 1000000000 "$(cluster_sum store_cluster_moved)"
for m in $cport_m1 $cport_m2 $cport_m3; do
  within "master $m holds state" 1 1000000000 "$(redis-cli -p "$m" DBSIZE)"
done
batches=$(store_field "$port_n1" store_batches)
requests=$(store_field "$port_n1" store_requests)
echo "# node 1: $requests decisions in $batches script calls (one per master per turn)"
within "batched: fewer calls than decisions" 1 "$((requests - 1))" "$batches"
# One call per master per turn: the 12 keys share masters, so calls span slots; when k0's slot
# moved, a call naming it was refused whole (nothing written) and resent slot by slot, and the
# checker above found no decision lost or made twice.
echo "# calls across slots: $(cluster_sum store_cluster_cross_calls), split: $(cluster_sum store_cluster_splits) into $(cluster_sum store_cluster_split_parts) parts"
within "calls across slots of one master" 1 1000000000 "$(cluster_sum store_cluster_cross_calls)"
within "a call across slots split when k0's slot moved" 1 1000000000 "$(cluster_sum store_cluster_splits)"
within "into one call per slot" 2 1000000000 "$(cluster_sum store_cluster_split_parts)"

# ---- 3. A slot caught mid-migration: ASK, then MOVED --------------------------------------------

start_node closed --store "$url" --store-timeout 400
wait_until "closed node up" 20 store_up "$port_closed"
# The state of `slow` (1 an hour) on k9 lives an hour: once k9's keys have moved to the new master
# and the slot is still MIGRATING/IMPORTING, the old master answers ASK and the new one decides
# (every key of the call exists there).
check "k9: a first grant of slow" 1 "$(redis-cli -p "$port_closed" THROTTLE slow k9 | head -1)"
slot=$(redis-cli -p "$cport_m1" CLUSTER KEYSLOT k9)
from=$(owner_of k9)
for m in $cport_m1 $cport_m2 $cport_m3; do [ "$m" != "$from" ] && { to=$m; break; }; done
from_id=$(redis-cli -p "$from" CLUSTER MYID)
to_id=$(redis-cli -p "$to" CLUSTER MYID)
redis-cli -p "$to" CLUSTER SETSLOT "$slot" IMPORTING "$from_id" >/dev/null
redis-cli -p "$from" CLUSTER SETSLOT "$slot" MIGRATING "$to_id" >/dev/null
keys=$(redis-cli -p "$from" CLUSTER GETKEYSINSLOT "$slot" 1000 | tr '\n' ' ')
check "k9's keys migrated" OK "$(redis-cli -p "$from" MIGRATE 127.0.0.1 "$to" "" 0 5000 KEYS $keys)"
asks0=$(store_field "$port_closed" store_cluster_asks)
check "k9 decided mid-migration (ASK): denied, the hour's grant is still there" 0 \
  "$(redis-cli -p "$port_closed" THROTTLE slow k9 | head -1)"
within "ASK followed" $((asks0 + 1)) 1000000 "$(store_field "$port_closed" store_cluster_asks)"
# A call naming a key that exists on neither master (a CL.THROTTLE triple never used) meets
# TRYAGAIN while the slot is split: it is resent until the migration ends (here within node n1's
# 20 s timeout), then follows MOVED.
redis-cli -p "$port_n1" CL.THROTTLE k9 7 7 7 >"$tmp/tryagain.out" 2>&1 &
bg=$!
tryagain_seen() {
  [ "$(store_field "$port_n1" store_cluster_tryagains)" -ge 1 ] || ! kill -0 "$bg" 2>/dev/null
}
wait_until "TRYAGAIN resent while the slot migrates" 20 tryagain_seen
# (Counted when the call met TRYAGAIN; a call that found every key on the new master is decided
# by ASK alone, also right: the decision below is what must hold.)
echo "# TRYAGAIN resends on node 1: $(store_field "$port_n1" store_cluster_tryagains)"
for m in $to $from $cport_m1 $cport_m2 $cport_m3; do
  redis-cli -p "$m" CLUSTER SETSLOT "$slot" NODE "$to_id" >/dev/null
done
wait "$bg"
check "the call that met TRYAGAIN is decided once the slot has moved" 0 "$(head -1 "$tmp/tryagain.out")"
moved0=$(store_field "$port_closed" store_cluster_moved)
check "k9 decides after the move (MOVED)" 1 "$(redis-cli -p "$port_closed" THROTTLE api k9 | head -1)"
within "MOVED followed" $((moved0 + 1)) 1000000 "$(store_field "$port_closed" store_cluster_moved)"
check "k9 now decided by its new master" "$to" "$(owner_of k9)"

# ---- 4. One master stopped ---------------------------------------------------------------------

# Two keys on different masters: one whose master we stop, one elsewhere.
victim=$(owner_of k1)
for k in k2 k3 k4 k5 k6 k7 k8 k9 k10 k11; do
  [ "$(owner_of "$k")" != "$victim" ] && { other=$k; break; }
done
vpid=""
for m in m1 m2 m3; do
  eval "[ \"\$cport_$m\" = \"$victim\" ] && vpid=\$cpid_$m"
done
check "both keys decide before" "1 1" \
  "$(redis-cli -p "$port_closed" THROTTLE api k1 | head -1) $(redis-cli -p "$port_closed" THROTTLE api "$other" | head -1)"
kill -STOP "$vpid"
t0=$(now_ms)
r=$(on "$port_closed" THROTTLE api k1)
t1=$(now_ms)
contains "closed: STOREDOWN for a key of the stopped master" "STOREDOWN" "$r"
within "closed: answered within seconds" 0 10000 "$((t1 - t0))"
contains "the error names the master" "127.0.0.1:$victim" "$r"
check "a key of another master keeps deciding" 1 "$(redis-cli -p "$port_closed" THROTTLE api "$other" | head -1)"
check "PING meanwhile" PONG "$(on "$port_closed" PING)"
kill -CONT "$vpid"
wait_until "the key of the stopped master decides again after SIGCONT" 30 decides "$port_closed" k1
check "and the other still does" 1 "$(redis-cli -p "$port_closed" THROTTLE api "$other" | head -1)"
stop closed
check "closed node stops with 0" 0 "$stop_rc"

# ---- 5. A request whose links land in two slots: CROSSSLOT ----------------------------------

# Two keyed limits whose missing_key is global: an empty key makes each a global bucket tagged
# by its own name ("a" and "b" hash to slots 15495 and 3300), known only per request.
printf 'limits:\n  a: {rate: 5/1s, key: explicit, missing_key: global}\n  b: {rate: 5/1s, key: explicit, missing_key: global}\ntypes:\n  t: {limits: [a, b]}\n' >"$tmp/cross.yaml"
node_conf=$tmp/cross.yaml start_node cross --store "$url"
wait_until "cross node up" 20 store_up "$port_cross"
check "with a key: one slot, decided" 1 "$(redis-cli -p "$port_cross" THROTTLE t u1 | head -1)"
# Both are limits of type t: their states live in the queue's slot whatever the key.
check "an empty key: still one slot (the queue's), decided" 1 "$(redis-cli -p "$port_cross" THROTTLE t "" | head -1)"
check "a global link alone still decides" 1 "$(redis-cli -p "$port_cross" THROTTLE a "" | head -1)"
stop cross

# ---- 6. CONFIG RELOAD refuses a file that moves a limit in or out of the queue's slot ---------

# standalone.yaml's job chains [perkey, global]: global would join the queue's slot (and pair
# leave it), so the nodes still on the old file would decide it elsewhere.
cp "$tmp/standalone.yaml" "$tmp/sluice.yaml"
contains "CONFIG RELOAD: a limit moving into the queue's slot refused" \
  'limit "global" would move into the task queue'"'"'s Redis Cluster slot' \
  "$(on "$port_n1" CONFIG RELOAD)"
check "the old chain still decides" 1 "$(redis-cli -p "$port_n1" THROTTLE job y | head -1)"

for n in n1 n2 n3; do stop $n; check "node $n stops with 0" 0 "$stop_rc"; done
finish
