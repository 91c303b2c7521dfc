#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# fairness: keys on the Redis store (docs/cluster.md, "Fair share between keys"), over the wire:
#
# - the same sequence on three: one random sequence of TASK.ADD (four tenants, UNITS 1-3, some
#   PRIORITY 1, some tasks of a FIFO type, a few that a second, 2/1h limit parks) and TASK.GET
#   (one or both types, COUNT 1-3), the same on a single node (the engine's fair queue,
#   src/engine/ready.c), on two nodes sharing one redis-server (the script's fair flows,
#   src/store/redis/tasks.lua; each command on the other node from the one before) and on a node
#   on a one-master Redis Cluster: every node hands out the same tasks in the same order,
#   parked ones included (a task taken and parked costs its tenant no turn), for three seeds;
# - seed 004's case across nodes: 200 tasks of one user added on node A, then one of another
#   user on node B: the small user's task is among the first two that B hands out, where a FIFO
#   type (the control) hands it out 201st;
# - TASK.EXPLAIN of a queued task of a fair type on a shared node says its tenant's turn;
# - a recurring series of a fair type: its occurrences are taken and handed out;
# - PostgreSQL still refuses fairness: keys, and says so (checked with `sluice serve` and an
#   unreachable database: the refusal comes before any connection).
# Traffic goes to 127.0.0.1 only.
#
# Usage: bash tests/server/redis_fair.sh PATH-TO-SLUICE SOURCE-DIR
set -u
set -f

sluice=${1:?usage: redis_fair.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"

need_tools redis_fair.sh redis-cli redis-server

cat >"$tmp/sluice.yaml" <<'EOF'
limits:
  per_user: {rate: 1000000/1s, burst: 1000000, key: input.user}
  pair: {rate: 2/1h, burst: 2, key: input.g, missing_key: skip, units: 1}
types:
  job: {limits: [per_user, pair], fairness: keys, lease: 10m}
  plain: {lease: 10m}
  burst: {limits: [per_user], fairness: keys, lease: 10m}
  burst_fifo: {limits: [per_user], lease: 10m}
EOF

# gen SEED: one sequence, a command a line, fields tab-separated: "ADD type payload units prio"
# or "GET count types...".
gen() {
  local n=0 round c k u units prio g ty
  RANDOM=$1
  for round in $(seq 1 45); do
    c=$((RANDOM % 4)) # not inside $(...): a subshell draws from a generator of its own
    for k in $(seq 1 "$c"); do
      n=$((n + 1))
      u=$((RANDOM % 4))
      units=$((RANDOM % 3 + 1))
      prio=0
      [ $((RANDOM % 7)) = 0 ] && prio=1
      g=
      [ $((RANDOM % 10)) = 0 ] && g=',"g":"x"'
      ty=job
      [ $((RANDOM % 6)) = 0 ] && ty=plain
      printf 'ADD\t%s\t{"user":"u%s","n":%s%s}\t%s\t%s\n' "$ty" "$u" "$n" "$g" "$units" "$prio"
    done
    if [ "$round" = 15 ]; then # a backlog: one tenant adds twenty at once
      for k in $(seq 1 20); do
        n=$((n + 1))
        printf 'ADD\tjob\t{"user":"u0","n":%s}\t1\t0\n' "$n"
      done
    fi
    case $((RANDOM % 3)) in
      0) printf 'GET\t%s\tjob\n' $((RANDOM % 3 + 1)) ;;
      1) printf 'GET\t%s\tjob\tplain\n' $((RANDOM % 3 + 1)) ;;
    esac
  done
  for k in 1 2 3 4 5 6; do printf 'GET\t50\tjob\tplain\n'; done
}

# play SEQFILE OUT PORT...: runs the sequence, each command on the next of the ports in turn,
# and writes the payloads TASK.GET handed out to OUT, in order. Counts failed commands in
# $play_errors.
play() {
  local seq=$1 out=$2 i=0 op a b c d p
  shift 2
  local ports=("$@")
  play_errors=0
  : >"$out"
  while IFS=$'\t' read -r -a f; do
    p=${ports[$((i % ${#ports[@]}))]}
    i=$((i + 1))
    if [ "${f[0]}" = ADD ]; then
      a=$(redis-cli -p "$p" TASK.ADD "${f[1]}" "${f[2]}" UNITS "${f[3]}" PRIORITY "${f[4]}")
      [[ $a =~ ^[0-9]+$ ]] || { play_errors=$((play_errors + 1)); echo "ADD: $a" >>"$out.err"; }
    else
      redis-cli -p "$p" TASK.GET "${f[@]:2}" COUNT "${f[1]}" | awk 'NR % 5 == 3' >>"$out"
    fi
  done <"$seq"
}

start_redis r
start_cluster c
start_node single --data "$tmp/single" --durability none
start_node a --store "redis://127.0.0.1:$rport_r"
start_node b --store "redis://127.0.0.1:$rport_r"
start_node k --store "redis-cluster://127.0.0.1:$rport_c"

# ---- The same order on every store -------------------------------------------------------------

# Each seed goes on from the state the one before left on every node alike (tasks running and
# parked, the flows' turns); the pair limit's budget of two lasts the hour.
budget=2
for seed in 7 1004 31337; do
  gen "$seed" >"$tmp/seq.$seed"
  adds=$(grep -c '^ADD' "$tmp/seq.$seed")
  g=$(grep -c $'^ADD\tjob\t.*"g":"x"' "$tmp/seq.$seed") # plain has no limit: never parks
  parked=$((g > budget ? g - budget : 0))
  budget=$((budget > g ? budget - g : 0))
  play "$tmp/seq.$seed" "$tmp/single.$seed" "$port_single"
  check "seed $seed: every ADD taken by the single node" 0 "$play_errors"
  check "seed $seed: the single node hands out all but the parked" "$adds" \
    "$(($(wc -l <"$tmp/single.$seed") + parked))"
  play "$tmp/seq.$seed" "$tmp/redis.$seed" "$port_a" "$port_b"
  check "seed $seed: every ADD taken on Redis" 0 "$play_errors"
  if cmp -s "$tmp/single.$seed" "$tmp/redis.$seed"; then
    ok
  else
    bad "seed $seed: two nodes on Redis hand out another order than the single node: $(diff "$tmp/single.$seed" "$tmp/redis.$seed" | head -6 | tr '\n' ' ')"
  fi
  play "$tmp/seq.$seed" "$tmp/cluster.$seed" "$port_k"
  check "seed $seed: every ADD taken on the Cluster" 0 "$play_errors"
  if cmp -s "$tmp/single.$seed" "$tmp/cluster.$seed"; then
    ok
  else
    bad "seed $seed: a node on Redis Cluster hands out another order than the single node: $(diff "$tmp/single.$seed" "$tmp/cluster.$seed" | head -6 | tr '\n' ' ')"
  fi
done

# ---- Seed 004 across two nodes -----------------------------------------------------------------

for ty in burst burst_fifo; do
  added=$(for i in $(seq 1 200); do printf '%s\n' "TASK.ADD $ty '{\"user\":\"big\"}'"; done |
    redis-cli -p "$port_a" | grep -c '^[0-9][0-9]*$')
  check "$ty: node A takes big's 200 tasks" 200 "$added"
  small=$(redis-cli -p "$port_b" TASK.ADD "$ty" '{"user":"small"}')
  first=$(redis-cli -p "$port_b" TASK.GET "$ty" COUNT 2 | awk 'NR % 5 == 1' | tr '\n' ' ')
  if [ "$ty" = burst ]; then
    contains "fair: B hands out small's task among the first two" "$small" "$first"
  else
    case " $first " in
      *" $small "*) bad "FIFO (the control): small's task came among the first two: $first" ;;
      *) ok ;;
    esac
  fi
done

# TASK.EXPLAIN of a queued task of a fair type names its turn, as the single node does: the
# burst type holds big's 199 left (small's is out).
big=$(redis-cli -p "$port_a" TASK.ADD burst '{"user":"big"}')
out=$(redis-cli -p "$port_b" TASK.EXPLAIN "$big")
contains "EXPLAIN on B names the fair turn" 'type "burst" shares workers fairly between the keys of limit "per_user": key "big" has 200 task(s) ready, and 1 key(s) take turns.' "$out"

# ---- A series of a fair type ---------------------------------------------------------------------

# Its occurrences go through the script's ADD with their tenant (redis_recur.c copies the ADD's
# arguments, the fair ones included) and are handed out as any task of their flow.
check "RECUR.ADD of a fair type" OK "$(redis-cli -p "$port_a" RECUR.ADD tick burst '{"user":"clock"}' EVERY 100 MAX 2)"
got=
deadline=$((SECONDS + 30))
while [ "$(printf '%s\n' "$got" | grep -c clock)" -lt 2 ] && [ $SECONDS -lt $deadline ]; do
  got+=$(redis-cli -p "$port_b" TASK.GET burst COUNT 50 TIMEOUT 500 | awk 'NR % 5 == 3')$'\n'
done
check "both occurrences delivered on B" 2 "$(printf '%s\n' "$got" | grep -c '"user":"clock"')"
check "the series ran twice" 2 "$(redis-cli -p "$port_a" RECUR.INFO tick | sed -n 2p)"

# ---- PostgreSQL refuses it ---------------------------------------------------------------------

out=$(timeout 20 "$sluice" serve --port 0 --bind 127.0.0.1 --no-admin --config "$tmp/sluice.yaml" \
  --store "postgresql://sluice@127.0.0.1:1/none" 2>&1)
check "sluice serve refuses fairness: keys on PostgreSQL" 1 "$?"
contains "and says why" "fairness: keys is not available with the PostgreSQL store yet" "$out"

finish
