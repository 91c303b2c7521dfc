#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A Redis that asks for a password (docs/cluster.md, "Redis with a password"), over the wire:
#
# - requirepass: a node given redis://:PASSWORD@... decides THROTTLE there and shares its task
#   queue (a TASK.GET blocked on a second node is woken through the subscriber, which
#   authenticates too); INFO, the log and `sluice serve`'s own errors never show the password;
# - an ACL user (redis://USER:PASSWORD@..., a password with reserved characters written %XX):
#   the node authenticates as that user;
# - a wrong password: the node starts, stays up and answers -STOREDOWN naming Redis's refusal
#   (WRONGPASS), and comes up by itself once Redis takes that password (CONFIG SET requirepass);
# - a Redis Cluster with a password on every master: a node decides and queues there.
# Traffic goes to 127.0.0.1 only.
#
# Usage: bash tests/server/redis_auth.sh PATH-TO-SLUICE SOURCE-DIR
set -u
set -f

sluice=${1:?usage: redis_auth.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"

need_tools redis_auth.sh redis-cli redis-server

cat >"$tmp/sluice.yaml" <<'EOF'
limits:
  api: {rate: 2/1h, burst: 2, key: explicit}
types:
  job: {}
EOF

up() { [ "$(store_field "$1" store_state)" = up ]; }
subscribed() { [ "$(store_field "$1" store_task_subscriber)" = up ]; }

start_redis r # (start_redis waits for a PING, which a password would refuse: set it after)
check "requirepass" OK "$(redis-cli -p "$rport_r" CONFIG SET requirepass 'open sesame')"
pass=(-p "$rport_r" --no-auth-warning -a 'open sesame')

# ---- requirepass -------------------------------------------------------------------------------

start_node a --store "redis://:open%20sesame@127.0.0.1:$rport_r"
start_node b --store "redis://:open%20sesame@127.0.0.1:$rport_r"
wait_until "node a is up on the password-protected Redis" 30 up "$port_a"
wait_until "node b is up on the password-protected Redis" 30 up "$port_b"
check "THROTTLE on A: allowed, 1 of 2 left" "1 2 1 0" "$(on "$port_a" THROTTLE api x | cut -d' ' -f1-4)"
check "THROTTLE on B charges the same budget" "1 2 0 0" "$(on "$port_b" THROTTLE api x | cut -d' ' -f1-4)"
check "the third is denied" 0 "$(on "$port_a" THROTTLE api x | cut -d' ' -f1)"
check "Redis holds the state" 1 "$(redis-cli "${pass[@]}" --scan --pattern '*api*' | grep -c .)"
redis-cli -p "$port_b" TASK.GET job TIMEOUT 20000 >"$tmp/got" &
getter=$!
wait_until "B's subscriber is up" 30 subscribed "$port_b"
id=$(on "$port_a" TASK.ADD job '{"n":1}')
wait "$getter"
check "a TASK.GET blocked on B wakes for A's TASK.ADD" "$id" "$(head -1 "$tmp/got")"
out=$(redis-cli -p "$port_a" INFO store | tr -d '\r' | grep '^store_url:')
check "INFO shows the URL without its password" "store_url:redis://:***@127.0.0.1:$rport_r" "$out"
if grep -q sesame "$tmp/a.log" "$tmp/b.log"; then bad "a node's log shows the password"; else ok; fi
out=$("$sluice" serve --port 0 --no-admin --config "$tmp/sluice.yaml" --store "redis://:open%20sesame@bad host:1" 2>&1)
contains "a bad URL is refused" "bad host name" "$out"
case $out in *sesame*) bad "the refusal shows the password: $out" ;; *) ok ;; esac

# ---- an ACL user ------------------------------------------------------------------------------

check "ACL SETUSER" OK "$(redis-cli "${pass[@]}" ACL SETUSER app on '>p@ss:w%rd' '~*' '&*' +@all)"
start_node c --store "redis://app:p%40ss%3Aw%25rd@127.0.0.1:$rport_r"
wait_until "node c is up as user app" 30 up "$port_c"
check "THROTTLE on C sees the budget A and B spent" 0 "$(on "$port_c" THROTTLE api x | cut -d' ' -f1)"
case $(redis-cli "${pass[@]}" CLIENT LIST) in
  *user=app*) ok ;;
  *) bad "Redis lists no connection of user app" ;;
esac

# ---- a wrong password --------------------------------------------------------------------------

start_node d --store "redis://:later@127.0.0.1:$rport_r"
wait_until "node d says why it is down" 30 grep -q WRONGPASS "$tmp/d.log"
out=$(on "$port_d" THROTTLE api y)
contains "THROTTLE on d answers STOREDOWN" "STOREDOWN" "$out"
check "d still answers PING" PONG "$(on "$port_d" PING)"
check "CONFIG SET requirepass" OK "$(redis-cli "${pass[@]}" CONFIG SET requirepass later)"
wait_until "node d comes up by itself once Redis takes its password" 30 up "$port_d"
check "THROTTLE on d decides" 1 "$(on "$port_d" THROTTLE api y | cut -d' ' -f1)"

# ---- Redis Cluster -----------------------------------------------------------------------------

start_cluster k
check "requirepass on the Cluster's master" OK "$(redis-cli -p "$rport_k" CONFIG SET requirepass kpass)"
start_node e --store "redis-cluster://:kpass@127.0.0.1:$rport_k"
wait_until "node e is up on the Cluster" 30 up "$port_e"
check "THROTTLE on the Cluster" 1 "$(on "$port_e" THROTTLE api z | cut -d' ' -f1)"
id=$(on "$port_e" TASK.ADD job '{"n":2}')
check "TASK.GET on the Cluster" "$id" "$(redis-cli -p "$port_e" TASK.GET job | head -1)"

finish
