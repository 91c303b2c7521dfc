#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Counters summed across nodes (src/server/rcounters.c, docs/cluster.md "Counters"): two
# `sluice serve` on one store, THROTTLE and tasks on both, and INFO counters, /api/stats,
# /api/limits and /metrics on either show the sum (and each node its own) once the nodes have
# flushed; the nodes' shutdown flush; the store frozen (SIGSTOP) while a fail-open node keeps
# counting, then thawed: nothing counted meanwhile is lost, and nothing is counted twice (a flush
# whose answer was lost is sent again under the same number); Redis restarted empty: a node's
# figure does not fall, and grows again from there. Run on Redis (and a one-master Redis
# Cluster: decisions only, there also over HTTP), then on PostgreSQL
# (skipped there only when PostgreSQL's server binaries are not installed). Every wait is a
# deadline, never a sleep.
#
# Usage: bash tests/server/shared_counters.sh PATH-TO-SLUICE SOURCE-DIR
set -u
set -f

sluice=${1:?usage: shared_counters.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"
need_tools shared_counters.sh redis-cli redis-server curl

cat >"$tmp/sluice.yaml" <<'EOF'
limits:
  api: {rate: 1000/1s, burst: 1000, key: explicit}
  tight: {rate: 1/1h, burst: 2, key: explicit}
  free: {rate: 1000/1s, burst: 1000}
types:
  job: {limits: [free]}
EOF

# ctr PORT FIELD: one field of INFO counters of the node on PORT.
ctr() { redis-cli -p "$1" INFO counters | tr -d '\r' | awk -F: -v f="$2" '$1 == f { print $2 }'; }
# ctr_is PORT FIELD VALUE: true when the field has that value.
ctr_is() { [ "$(ctr "$1" "$2")" = "$3" ]; }
# flushed_after PORT N: true once the node confirmed more than N flushes.
flushed_after() { [ "$(ctr "$1" counters_flushes)" -gt "$2" ] 2>/dev/null; }
# api PORT PATH: a document of the admin port.
api() { curl -s "127.0.0.1:$1$2"; }
# jq-free JSON field reads: python3 is there (start_redis uses it).
jget() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval('d' + sys.argv[1]))" "$1"; }
# metric PORT LINE-PREFIX: the value of the sample whose line starts with LINE-PREFIX.
metric() { api "$1" /metrics | awk -v p="$2" 'index($0, p " ") == 1 { print $2 }'; }

# run_store NAME URL: the checks on one store.
run_store() {
  local name=$1 url=$2 a b id1 id2 f0 f1 g0 g1 i
  start_node "${name}a" --store "$url" --store-timeout 400 --store-failure open \
    --admin-port 0 --admin-port-file "$tmp/${name}a.admin"
  start_node "${name}b" --store "$url" --store-timeout 400 \
    --admin-port 0 --admin-port-file "$tmp/${name}b.admin"
  local -n pa="port_${name}a" pb="port_${name}b" pida="pid_${name}a" pidb="pid_${name}b"
  local aa bb
  aa=$(cat "$tmp/${name}a.admin")
  bb=$(cat "$tmp/${name}b.admin")
  a=$pa
  b=$pb

  check "$name: INFO counters says cluster" cluster "$(ctr "$a" counters_scope)"
  # Decisions on both nodes: api 5 + 4 granted; tight's budget of 2 is shared, so 2 granted and
  # 1 + 2 denied.
  for i in 1 2 3 4 5; do on "$a" THROTTLE api x >/dev/null; done
  for i in 1 2 3; do on "$a" THROTTLE tight t >/dev/null; done
  for i in 1 2 3 4; do on "$b" THROTTLE api y >/dev/null; done
  for i in 1 2; do on "$b" THROTTLE tight t >/dev/null; done
  # A peek is not a decision of the limit (its counters), but INFO's throttle_allowed counts it,
  # as a single node's does.
  on "$b" THROTTLE api y PEEK >/dev/null
  # Tasks: 3 + 2 added, 2 delivered, 1 acked, 1 cancelled.
  for i in 1 2 3; do on "$a" TASK.ADD job '{}' >/dev/null; done
  for i in 1 2; do on "$b" TASK.ADD job '{}' >/dev/null; done
  id1=$(redis-cli -p "$b" TASK.GET job | head -1)
  id2=$(redis-cli -p "$a" TASK.GET job | head -1)
  check "$name: ACK on the other node" OK "$(on "$a" TASK.ACK "$id1" ATTEMPT 1)"
  check "$name: a queued task cancelled" 1 "$(on "$b" TASK.CANCEL $((id2 + 1)))"

  # Each node shows the sum once both have flushed since: a deadline, not a pace.
  f0=$(ctr "$a" counters_flushes)
  g0=$(ctr "$b" counters_flushes)
  wait_until "$name: node b flushed" 20 flushed_after "$b" "$g0"
  wait_until "$name: node a flushed after b" 20 flushed_after "$a" "$(ctr "$a" counters_flushes)"
  wait_until "$name: node b read a's flush" 20 flushed_after "$b" "$(ctr "$b" counters_flushes)"
  for p in "$a" "$b"; do
    check "$name: cluster_throttle_allowed on $p" 12 "$(ctr "$p" cluster_throttle_allowed)"
    check "$name: cluster_throttle_denied on $p" 3 "$(ctr "$p" cluster_throttle_denied)"
    check "$name: cluster_tasks_submitted on $p" 5 "$(ctr "$p" cluster_tasks_submitted)"
    check "$name: cluster_tasks_delivered on $p" 2 "$(ctr "$p" cluster_tasks_delivered)"
    check "$name: cluster_tasks_done on $p" 1 "$(ctr "$p" cluster_tasks_done)"
    check "$name: cluster_tasks_cancelled on $p" 1 "$(ctr "$p" cluster_tasks_cancelled)"
    check "$name: limit line on $p" "allowed=9,denied=0,units=9" \
      "$(ctr "$p" counters_limit_api | cut -d, -f1-3)"
    check "$name: tight's line on $p" "allowed=2,denied=3,units=2" \
      "$(ctr "$p" counters_limit_tight | cut -d, -f1-3)"
  done
  # Each node's own figures beside them.
  check "$name: node a's own grants" 7 "$(ctr "$a" node_throttle_allowed)"
  check "$name: node b's own grants" 5 "$(ctr "$b" node_throttle_allowed)"
  check "$name: node b's own denials" 2 "$(ctr "$b" node_throttle_denied)"
  check "$name: node a's own api line" "node_allowed=5,node_denied=0,node_units=5" \
    "$(ctr "$a" counters_limit_api | cut -d, -f4-6)"
  check "$name: node a's own submissions" 3 "$(ctr "$a" node_tasks_submitted)"
  check "$name: delivered per type" "delivered=2,node_delivered=1" "$(ctr "$b" counters_type_job)"
  # The admin port: the dashboard's /api/stats and /api/limits, and /metrics.
  check "$name: /api/stats allowed_total (cluster)" 9 \
    "$(api "$bb" /api/stats | jget "['limits'][0]['allowed_total']")"
  check "$name: /api/stats node_allowed_total" 4 \
    "$(api "$bb" /api/stats | jget "['limits'][0]['node_allowed_total']")"
  check "$name: /api/stats tasks.submitted (cluster)" 5 \
    "$(api "$bb" /api/stats | jget "['tasks']['submitted']")"
  check "$name: /api/stats node_tasks.submitted" 2 \
    "$(api "$bb" /api/stats | jget "['node_tasks']['submitted']")"
  check "$name: /api/stats counters.scope" cluster \
    "$(api "$aa" /api/stats | jget "['counters']['scope']")"
  check "$name: /api/limits denied_total (cluster)" 3 \
    "$(api "$aa" /api/limits | jget "['limits'][2]['denied_total']")"
  check "$name: /metrics limit decisions (cluster)" 3 \
    "$(metric "$aa" 'sluice_limit_decisions_total{limit="tight",kind="rate",decision="denied"}')"
  check "$name: /metrics node limit decisions" 1 \
    "$(metric "$aa" 'sluice_node_limit_decisions_total{limit="tight",kind="rate",decision="denied"}')"
  check "$name: /metrics tasks (cluster)" 1 \
    "$(metric "$bb" 'sluice_cluster_tasks_total{event="completed"}')"
  check "$name: /metrics tasks delivered per type" 2 \
    "$(metric "$bb" 'sluice_type_tasks_delivered_total{type="job"}')"
  check "$name: /metrics decisions (cluster)" 12 \
    "$(metric "$bb" 'sluice_cluster_decisions_total{decision="allowed"}')"

  # The store frozen: node a notices (a call of its own gets no answer by its deadline and the
  # node drops the connection; when that call was a counters' flush, the store may still run it
  # once thawed, and the resent flush, under the same number, must add nothing); node a
  # (fail-open) then grants 6 without the store, counted. Thawed: the 6 arrive once.
  f0=$(ctr "$a" counters_flush_failures)
  $freeze
  wait_until "$name: node a notices the frozen store" 20 store_away "$a" "$f0"
  for i in 1 2 3 4 5 6; do on "$a" THROTTLE api z >/dev/null; done
  check "$name: the outage's grants shown on a at once" 18 "$(ctr "$a" cluster_throttle_allowed)"
  $thaw
  wait_until "$name: node b sees the outage's grants" 30 ctr_is "$b" cluster_throttle_allowed 18
  # Two more rounds of flushes on both: still exactly 18 (nothing applied twice).
  for i in 1 2; do
    wait_until "$name: a flushes again" 20 flushed_after "$a" "$(ctr "$a" counters_flushes)"
    wait_until "$name: b flushes again" 20 flushed_after "$b" "$(ctr "$b" counters_flushes)"
  done
  check "$name: after the outage, on a" 18 "$(ctr "$a" cluster_throttle_allowed)"
  check "$name: after the outage, on b" 18 "$(ctr "$b" cluster_throttle_allowed)"
  check "$name: nothing left unconfirmed on a" 0 "$(ctr "$a" counters_unconfirmed)"
  check "$name: Prometheus counter (cluster) after the outage" 18 \
    "$(metric "$aa" 'sluice_cluster_decisions_total{decision="allowed"}')"

  # The shutdown flush: b counts 3 and stops at once, within its flush interval; a sees them.
  on "$b" THROTTLE api w >/dev/null
  on "$b" THROTTLE api w >/dev/null
  on "$b" THROTTLE api w >/dev/null
  kill -TERM "$pidb"
  wait "$pidb"
  check "$name: b stops cleanly" 0 "$?"
  wait_until "$name: b's last counts, flushed as it stopped, seen on a" 20 \
    ctr_is "$a" cluster_throttle_allowed 21
  lacks "$name: b flushed everything" "were not flushed" "$(cat "$tmp/${name}b.log")"
  kill -TERM "$pida"
  wait "$pida"
}

# store_away PORT N: true once the node counted more than N failed flushes, or its store is
# not up (another call of the node met the frozen store first: then no flush is sent until it
# is back).
store_away() {
  [ "$(ctr "$1" counters_flush_failures)" -gt "$2" ] 2>/dev/null || [ "$(store_field "$1" store_state)" != up ]
}

# ---- Redis -------------------------------------------------------------------------------------
start_redis r
freeze="kill -STOP $rpid_r"
thaw="kill -CONT $rpid_r"
run_store redis "redis://127.0.0.1:$rport_r"
check "Redis holds the totals in one hash" 21 \
  "$(redis-cli -p "$rport_r" HGET 'sluice:{all}:counters' ga:)"

# Redis restarted empty (no persistence): the totals are gone, and a node's figures do not fall
# (the loss is added back on the node that had seen it), then grow again from there.
start_node rr --store "redis://127.0.0.1:$rport_r" --store-timeout 400
on "$port_rr" THROTTLE api v >/dev/null
on "$port_rr" THROTTLE api v >/dev/null
wait_until "restart: the node's counts confirmed" 20 ctr_is "$port_rr" counters_unconfirmed 0
check "restart: the node reads 21 + 2" 23 "$(ctr "$port_rr" cluster_throttle_allowed)"
kill -KILL "$rpid_r"
wait "$rpid_r" 2>/dev/null
redis-server --port "$rport_r" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp/r.redis" \
  --daemonize no --logfile "$tmp/r.redis/log2" &
rpid_r=$!
pids+=("$rpid_r")
f0=$(ctr "$port_rr" counters_flushes)
wait_until "restart: the node flushes to the new Redis" 30 flushed_after "$port_rr" "$f0"
check "restart: the figure did not fall" 23 "$(ctr "$port_rr" cluster_throttle_allowed)"
check "restart: Redis's total starts again" "" \
  "$(redis-cli -p "$rport_r" HGET 'sluice:{all}:counters' ga:)"
on "$port_rr" THROTTLE api v >/dev/null
check "restart: and grows from there" 24 "$(ctr "$port_rr" cluster_throttle_allowed)"
wait_until "restart: the new count confirmed" 20 ctr_is "$port_rr" counters_unconfirmed 0
check "restart: still 24 once confirmed" 24 "$(ctr "$port_rr" cluster_throttle_allowed)"
check "restart: Redis holds the new count" 1 \
  "$(redis-cli -p "$rport_r" HGET 'sluice:{all}:counters' ga:)"

# ---- Redis Cluster (one master holding every slot: the Cluster's routing, by slot) ---------------
# Decisions only (the task queue is not shared on a Cluster yet). The counters' keys share the
# {all} tag: one slot, one master.
start_cluster_master c
redis-cli -p "$rport_c" CLUSTER ADDSLOTSRANGE 0 16383 >/dev/null
wait_until "a one-master Cluster is up" 30 cluster_ok "$rport_c"
start_node ca --store "redis-cluster://127.0.0.1:$rport_c" --store-timeout 2000 \
  --admin-port 0 --admin-port-file "$tmp/ca.admin"
start_node cb --store "redis-cluster://127.0.0.1:$rport_c" --store-timeout 2000
for i in 1 2 3; do on "$port_ca" THROTTLE tight c >/dev/null; done
for i in 1 2; do on "$port_cb" THROTTLE tight c >/dev/null; done
f0=$(ctr "$port_ca" counters_flushes)
wait_until "cluster: node b flushed" 20 flushed_after "$port_cb" "$(ctr "$port_cb" counters_flushes)"
wait_until "cluster: node a flushed after b" 20 flushed_after "$port_ca" "$(ctr "$port_ca" counters_flushes)"
check "cluster: the sum on node a" "allowed=2,denied=3,units=2" \
  "$(ctr "$port_ca" counters_limit_tight | cut -d, -f1-3)"
check "cluster: node a's own" "node_allowed=2,node_denied=1,node_units=2" \
  "$(ctr "$port_ca" counters_limit_tight | cut -d, -f4-6)"
check "cluster: the totals' hash on the master" 2 \
  "$(redis-cli -p "$rport_c" HGET 'sluice:{all}:counters' la:tight)"
# The HTTP API on a Cluster (docs/http.md): a decision is the Cluster's (tight's budget is spent);
# a submit goes to the Cluster's task queue.
check "cluster: HTTP throttle decided by the Cluster" 429 \
  "$(curl -s -o "$tmp/body" -w '%{http_code}' --data-binary '{"limit":"tight","key":"c"}' \
    "127.0.0.1:$(cat "$tmp/ca.admin")/v1/throttle")"
check "cluster: HTTP submit" 201 \
  "$(curl -s -o "$tmp/body" -w '%{http_code}' --data-binary '{"type":"job"}' \
    "127.0.0.1:$(cat "$tmp/ca.admin")/v1/tasks")"
contains "cluster: the submit's id" '"status":"ok","id":' "$(cat "$tmp/body")"

# ---- PostgreSQL --------------------------------------------------------------------------------
if pg_bindir >/dev/null; then
  start_postgres p
  freeze="freeze_postgres p"
  thaw="thaw_postgres p"
  run_store pg "$pgconn_p"
  check "PostgreSQL holds the totals" 21 \
    "$("$(pg_bindir)/psql" "$pgconn_p" -Atc "SELECT n FROM sluice_counters WHERE name = 'ga:'")"
else
  echo "SKIPPED (PostgreSQL part): PostgreSQL server binaries are not installed;" \
    "scripts/deps.sh installs Debian's postgresql"
fi
finish
