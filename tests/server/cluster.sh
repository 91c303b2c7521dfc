#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Several nodes on one Redis (issue 10, docs/cluster.md): three `sluice serve --store redis://...`
# share THROTTLE and CL.THROTTLE budgets. The checker (tests/tools/cluster_check.py) drives all
# three from many pipelining clients at once, then replays every grant Redis audited through a
# reference GCRA (zero violations, the single-node bound across nodes, grants in Redis ==
# grants the clients were told, chains all-or-nothing). Then the store's faults: SIGSTOP of
# redis-server (closed: a typed error within the timeout; open: granted and counted), SIGCONT
# (recovers), SIGKILL and a restart on the same port (reconnects by itself). Also: the commands
# not shared yet are refused with one clear error, PING and INFO keep answering while Redis is
# away, and a bad --store URL is a usage error. Every wait is a deadline, never a sleep.
#
# Usage: bash tests/server/cluster.sh PATH-TO-SLUICE SOURCE-DIR
set -u
set -f

sluice=${1:?usage: cluster.sh PATH-TO-SLUICE SOURCE-DIR}
src=${2:?usage: cluster.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"

py=/usr/bin/python3
checker=$src/tests/tools/cluster_check.py
if ! $py -c 'import redis' 2>/dev/null; then
  bad "python3-redis is not installed (scripts/deps.sh installs it)"
  finish
  exit 1
fi

store_up() { [ "$(store_field "$1" store_state)" = up ]; }
throttle_works() { [ "$(redis-cli -p "$1" THROTTLE api probe 2>&1 | head -1)" = 1 ]; }

$py "$checker" --print-config >"$tmp/sluice.yaml"
# The reference models catch what they must (each rule broken once, and kept once).
out=$($py "$checker" --selftest 2>&1)
check "checker self-test: $out" 0 "$?"

# ---- 1. Three nodes, one budget ---------------------------------------------------------------

start_redis a
url=redis://127.0.0.1:$rport_a/3
# A generous timeout: a busy machine must not turn slow answers into STOREDOWN here.
for n in n1 n2 n3; do
  start_node $n --store "$url" --store-timeout 20000 --store-audit
done
for n in $port_n1 $port_n2 $port_n3; do
  check "node on $n is up" up "$(store_field "$n" store_state)"
done

# One budget, the single node's words, the command order (lib.bash).
P=$port_n1
shared_budget_checks "$port_n1" "$port_n2" "$port_n3"
# Not shared yet: one clear error.
# Recurring series are shared now (tests/server/redis_recur.sh): added and removed, never fired.
contains "RECUR.ADD checks its template as one node does" "needs an explicit key (KEY)" \
  "$(cli RECUR.ADD r job '{}' EVERY 1000 START 9000000000000)"
check "RECUR.ADD shared" OK "$(cli RECUR.ADD r job '{}' EVERY 1000 START 9000000000000 KEY k)"
check "RECUR.DEL" 1 "$(cli RECUR.DEL r)"
# TASK.EXPLAIN is shared now (tests/server/redis_tasks.sh): the single node's words for an
# unknown task; LIMIT.RATE answers (api is not adaptive: its configured rate, as on one node).
contains "TASK.EXPLAIN of an unknown task" "NOTASK no task 1" "$(cli TASK.EXPLAIN 1)"
contains "LIMIT.RATE answers" "configured (not adaptive)" "$(cli LIMIT.RATE api k)"
# Live limit changes are shared now (tests/server/shared_overrides.sh).
check "LIMIT.SET shared" OK "$(cli LIMIT.SET x rate=1/1s)"
check "LIMIT.DEL shared" 1 "$(cli LIMIT.DEL x)"
# LIMIT.RESET of every key and LIMIT.SPEND are shared now (tests/server/shared_overrides.sh).
check "LIMIT.RESET of every key shared" OK "$(cli LIMIT.RESET api)"
shared_lease_checks "$port_n1" "$port_n2" "$port_n3"
redis-cli -p "$rport_a" -n 3 FLUSHDB >/dev/null

# The checker: every node, many clients, pipelines of 16.
out=$($py "$checker" --nodes "$port_n1,$port_n2,$port_n3" --redis "$rport_a" --db 3 --target 90000 \
  --max-seconds 30 --clients-per-node 6 --pipeline 16 --seed 7 2>&1)
rc=$?
echo "# checker, 3 nodes x 6 clients, -P 16: $out"
check "checker: zero violations" 0 "$rc"
# And without pipelining, more clients (one request each per round trip).
redis-cli -p "$rport_a" -n 3 FLUSHDB >/dev/null
out=$($py "$checker" --nodes "$port_n1,$port_n2,$port_n3" --redis "$rport_a" --db 3 --target 20000 \
  --max-seconds 15 --clients-per-node 10 --pipeline 1 --seed 8 2>&1)
rc=$?
echo "# checker, 3 nodes x 10 clients, -P 1: $out"
check "checker unpipelined: zero violations" 0 "$rc"
batches=$(store_field "$port_n1" store_batches)
requests=$(store_field "$port_n1" store_requests)
echo "# node 1: $requests decisions in $batches script calls"
within "batched: fewer calls than decisions" 1 "$((requests - 1))" "$batches"

for n in n1 n2 n3; do stop $n; check "node $n stops with 0" 0 "$stop_rc"; done

# ---- 2. Faults: SIGSTOP, SIGCONT, kill and restart --------------------------------------------

start_node closed --store "$url" --store-timeout 300 --admin-port 0 \
  --admin-port-file "$tmp/closed.admin"
start_node open --store "$url" --store-timeout 300 --store-failure open
metric() { curl -s "http://127.0.0.1:$(cat "$tmp/closed.admin")/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
check "/metrics: store up" 1 "$(metric sluice_store_up)"
contains "INFO store: the URL" "$url" "$(P=$port_closed cli INFO store)"
# The HTTP decision API decides on the shared store (docs/http.md; one budget over HTTP across
# nodes: redis_tasks.sh).
code=$(curl -s -o "$tmp/v1.json" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  -d '{"limit":"api","key":"k"}' "http://127.0.0.1:$(cat "$tmp/closed.admin")/v1/throttle")
check "POST /v1/throttle under a redis store: 200" 200 "$code"
contains "its answer" '"allowed":true,"peek":false,"name":"api","key":"k","limit":5' \
  "$(cat "$tmp/v1.json")"
contains "LIMIT.RATE answers" "configured (not adaptive)" \
  "$(P=$port_closed cli LIMIT.RATE api k)"
contains "LIMIT.SPEND shared: the single node's words" "LIMIT.SPEND reads quotas" \
  "$(P=$port_closed cli LIMIT.SPEND api k)"
# LIMIT.BACKOFF is shared (tests/server/shared_overrides.sh): the key's wait in ms.
check "LIMIT.BACKOFF shared" 1000 "$(P=$port_closed cli LIMIT.BACKOFF api k 1000)"
# The spend query asks the store (tests/server/shared_overrides.sh); of a rate limit, the single
# node's 400.
check "/api/limits/NAME/spend of a rate limit under a redis store: 400" 400 \
  "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$(cat "$tmp/closed.admin")/api/limits/api/spend?key=k")"
kill -STOP "$rpid_a"
t0=$(now_ms)
r=$(P=$port_closed cli THROTTLE api k1)
t1=$(now_ms)
contains "closed: typed error while Redis is stopped" "STOREDOWN" "$r"
# Within the timeout, or at once once the connection is known down (a deadline far above it).
within "closed: answered within seconds" 0 10000 "$((t1 - t0))"
check "open: granted while Redis is stopped" "1" "$(redis-cli -p "$port_open" THROTTLE api k1 | head -1)"
contains "open: CL.THROTTLE granted too" "0 2 0 -1 0" "$(P=$port_open cli CL.THROTTLE k1 1 1 1)"
wait_until "open node counts its grants" 10 \
  test "$(store_field "$port_open" store_fail_open_grants)" -ge 2
check "PING while Redis is stopped" PONG "$(P=$port_closed cli PING)"
wait_until "the closed node sees the store down" 10 \
  test "$(store_field "$port_closed" store_state)" != up
contains "closed: STOREDOWN counted" "STOREDOWN" "$(P=$port_closed cli THROTTLE api k2)"
within "closed node counts -STOREDOWN" 1 1000 "$(store_field "$port_closed" store_unavailable)"
check "/metrics: store down" 0 "$(metric sluice_store_up)"
within "/metrics: -STOREDOWN counted" 1 1000 "$(metric sluice_store_unavailable_total)"
within "/metrics: STOREDOWN error code counted" 1 1000 \
  "$(curl -s "http://127.0.0.1:$(cat "$tmp/closed.admin")/metrics" |
    awk '$1 == "sluice_command_errors_total{code=\"STOREDOWN\"}" { print $2 }')"
kill -CONT "$rpid_a"
wait_until "closed node recovers after SIGCONT" 20 throttle_works "$port_closed"
wait_until "open node recovers after SIGCONT" 20 throttle_works "$port_open"
check "closed node up again" up "$(store_field "$port_closed" store_state)"
check "/metrics: store up again" 1 "$(metric sluice_store_up)"

# Kill Redis, start it again on the same port: the nodes reconnect by themselves.
kill -KILL "$rpid_a"
wait "$rpid_a" 2>/dev/null
wait_until "closed node notices Redis is gone" 10 \
  test "$(store_field "$port_closed" store_state)" != up
contains "STOREDOWN while Redis is dead" "STOREDOWN" "$(P=$port_closed cli THROTTLE api k3)"
redis-server --port "$rport_a" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$tmp/a.redis" --daemonize no --logfile "$tmp/a.redis/log2" &
rpid_a=$!
pids+=("$rpid_a")
wait_until "closed node reconnects to the restarted Redis" 20 throttle_works "$port_closed"
wait_until "open node reconnects to the restarted Redis" 20 throttle_works "$port_open"
within "reconnects counted" 2 100 "$(store_field "$port_closed" store_connects)"
stop closed
check "closed node stops with 0" 0 "$stop_rc"
stop open
check "open node stops with 0" 0 "$stop_rc"

# ---- 3. Start-up -------------------------------------------------------------------------------

out=$("$sluice" serve --port 0 --store 'redis://h:99999' 2>&1)
check "bad --store URL: usage error" 2 "$?"
contains "bad --store URL names the problem" "the port must be a number from 1 to 65535" "$out"
# Redis Cluster is its own test (redis_cluster.sh); a database on a Cluster URL is a usage error.
out=$("$sluice" serve --port 0 --store 'redis-cluster://a:1,b:2/3' 2>&1)
contains "Cluster URL with a database refused" "a Redis Cluster has only database 0" "$out"
out=$("$sluice" serve --port 0 --store "$url" --data "$tmp/d" 2>&1)
check "--store with --data: usage error" 2 "$?"
# A dry run asked for in the file is one on the store too: the script passes the shadow link's
# would-be denials (shared_overrides.sh checks it across nodes).
printf 'limits:\n  dry: {rate: 1/1h, mode: shadow}\n' >"$tmp/shadow.yaml"
node_conf=$tmp/shadow.yaml start_node dry --store "$url"
check "shadow limit with a redis store: first call" 1 "$(P=$port_dry cli THROTTLE dry k | cut -d' ' -f1)"
check "shadow limit with a redis store: a pass" "1 1 0 0" "$(P=$port_dry cli THROTTLE dry k | cut -d' ' -f1-4)"
stop dry
printf 'enabled: false\nlimits:\n  a: {rate: 1/1h}\n' >"$tmp/off.yaml"
node_conf=$tmp/off.yaml start_node off --store "$url"
P=$port_off cli THROTTLE a k >/dev/null
check "enabled: false with a redis store: a pass" 1 "$(P=$port_off cli THROTTLE a k | cut -d' ' -f1)"
stop off
# Adaptive rates are shared too (shared_adaptive.sh checks them across nodes).
printf 'limits:\n  llm: {rate: 10/1s, key: explicit, adaptive: {decrease: 0.5}}\n' >"$tmp/aimd.yaml"
node_conf=$tmp/aimd.yaml start_node aimd --store "$url"
P=$port_aimd cli LIMIT.BACKOFF llm k 0 >/dev/null
check "adaptive limit with a redis store: lowered by a backoff" "5/1s" \
  "$(redis-cli -p "$port_aimd" LIMIT.RATE llm k | sed -n 4p)"
stop aimd
# A node whose Redis is down at start still starts, answers PING, and says STOREDOWN.
kill -KILL "$rpid_a"
wait "$rpid_a" 2>/dev/null
start_node late --store "$url" --store-timeout 200
check "PING with Redis down at start" PONG "$(P=$port_late cli PING)"
contains "STOREDOWN with Redis down at start" "STOREDOWN" "$(P=$port_late cli THROTTLE api k)"
stop late
check "late node stops with 0" 0 "$stop_rc"

finish
