#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Adaptive (AIMD) rates on a shared store (issue 10, docs/cluster.md "Adaptive rates"): on one
# Redis and on a 3-master Redis Cluster, two nodes started with the same file share each key's
# effective rate. A 429 reported on one node (LIMIT.BACKOFF, TASK.FAIL ... RETRY_AFTER) lowers
# the key's rate for both, LIMIT.RATE on either answers the lowered rate and why, THROTTLE on
# either paces the key at it, other keys keep theirs, and a key regains its rate with time in
# the store's clock. LIMIT.SET and LIMIT.KEY take adaptive specs; with the store stopped,
# LIMIT.RATE of an adaptive key answers -STOREDOWN. One random sequence of THROTTLE (a type's
# chain, UNITS, PEEK), LIMIT.BACKOFF, LIMIT.RATE, LIMIT.RESET and adaptive LIMIT.KEY overrides
# answers alike (times aside) on one node, on Redis and on the Cluster, for two seeds.
# PostgreSQL refuses adaptive rates at start and in LIMIT.SET, saying so. The arithmetic itself is the differential test's
# (tests/server/redis_limits.sh); these checks are the commands' wiring across nodes.
#
# Usage: bash tests/server/shared_adaptive.sh PATH-TO-SLUICE SOURCE-DIR
set -u

sluice=${1:?usage: shared_adaptive.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"
need_tools shared_adaptive.sh redis-server redis-cli

cat >"$tmp/sluice.yaml" <<'YAML'
limits:
  llm:
    rate: 20/1s
    burst: 1
    key: explicit
    adaptive: {decrease: 0.5, recover: 10%/1h, floor: 5/1s}
  quick:
    rate: 10/1s
    key: explicit
    adaptive: {decrease: 0.5, recover: 100%/1s}
  plain: {rate: 10/1s, key: explicit}
types:
  call: {limits: [llm]}
YAML

# rate_field PORT LIMIT KEY FIELD: one field of LIMIT.RATE's reply.
rate_field() {
  redis-cli -p "$1" LIMIT.RATE "$2" "$3" 2>&1 |
    awk -v f="$4" 'NR == 1 && /^[A-Z]+ / { print; exit } NR % 2 == 1 { k = $0 } NR % 2 == 0 && k == f { print; exit }'
}
rate_of() { rate_field "$1" "$2" "$3" rate; }
rate_is() { [ "$(rate_of "$1" "$2" "$3")" = "$4" ]; }

# suite LABEL URL: the checks on one store (fresh: nothing shared yet).
suite() {
  local label=$1 url=$2 a b out id
  start_node "${label}a" --store "$url"
  start_node "${label}b" --store "$url"
  a=port_${label}a b=port_${label}b
  a=${!a} b=${!b}
  check "$label: a key never backed off" "20/1s" "$(rate_of "$b" llm acme)"
  check "$label: says so" "configured (adaptive, at its configured rate)" \
    "$(rate_field "$b" llm acme why)"
  on "$a" LIMIT.BACKOFF llm acme 0 >/dev/null
  check "$label: a backoff on a halves the rate seen on b" "10/1s" "$(rate_of "$b" llm acme)"
  contains "$label: and b says why" "lowered from 20/1s by its upstream's 429s" \
    "$(rate_field "$b" llm acme why)"
  check "$label: the configured rate beside it" "20/1s" "$(rate_field "$b" llm acme configured)"
  check "$label: another key keeps its rate" "20/1s" "$(rate_of "$a" llm other)"
  on "$b" LIMIT.BACKOFF llm acme 0 >/dev/null
  check "$label: halved again by b, seen on a" "5/1s" "$(rate_of "$a" llm acme)"
  on "$a" LIMIT.BACKOFF llm acme 0 >/dev/null
  check "$label: never below the floor" "5/1s" "$(rate_of "$b" llm acme)"
  # Paced at the lowered rate on both nodes: one unit at the backoff's time (now), the next one
  # interval of 5/1s (200 ms) later, not 50 ms (20/1s).
  check "$label: the unit left at the backoff's time" 1 "$(redis-cli -p "$a" THROTTLE llm acme | head -1)"
  out=$(on "$b" THROTTLE llm acme)
  check "$label: the next one denied on the other node" 0 "$(word "$out" 1)"
  within "$label: for about one interval of 5/1s (200 ms), not of 20/1s" 60 200 "$(word "$out" 4)"
  # A task's 429 lowers its key's rate too, for every node.
  id=$(on "$a" TASK.ADD call '{}' KEY bob)
  check "$label: a task of bob's delivered on b" "$id" "$(redis-cli -p "$b" TASK.GET call | head -1)"
  check "$label: TASK.FAIL RETRY_AFTER on b: queued again" queued "$(on "$b" TASK.FAIL "$id" RETRY_AFTER 10)"
  check "$label: bob's rate lowered, seen on a" "10/1s" "$(rate_of "$a" llm bob)"
  # A key regains its rate in the store's clock (100% every second: back within about 1 s).
  on "$a" LIMIT.BACKOFF quick q 0 >/dev/null
  out=$(rate_of "$b" quick q)
  [ "$out" = 10/1s ] || check "$label: quick q lowered (or already back)" "5/1s" "$out"
  wait_until "$label: quick q back at 10/1s on b" 10 rate_is "$b" quick q 10/1s
  # Live changes take adaptive specs, and a key override's own rate is shared.
  check "$label: LIMIT.SET of an adaptive rate" OK \
    "$(on "$a" LIMIT.SET live rate=10/1s,key=explicit,decrease=0.5,floor=1/1s)"
  wait_until "$label: b has the new limit" 10 rate_is "$b" live k 10/1s
  on "$b" LIMIT.BACKOFF live k 0 >/dev/null
  check "$label: lowered through b, seen on a" "5/1s" "$(rate_of "$a" live k)"
  check "$label: LIMIT.KEY with an adaptive rate" OK \
    "$(on "$a" LIMIT.KEY plain vip rate=40/1s,decrease=0.5)"
  wait_until "$label: b has the override" 10 rate_is "$b" plain vip 40/1s
  on "$a" LIMIT.BACKOFF plain vip 0 >/dev/null
  check "$label: the override's key lowered, seen on b" "20/1s" "$(rate_of "$b" plain vip)"
  check "$label: a limit that is not adaptive answers as on one node" "configured (not adaptive)" \
    "$(rate_field "$b" plain k why)"
  contains "$label: an unknown limit" "NOLIMIT" "$(on "$b" LIMIT.RATE nope k)"
  stop "${label}a"
  stop "${label}b"
}

start_redis r
suite redis "redis://127.0.0.1:$rport_r/0"
# With Redis stopped a node cannot read a key's rate: -STOREDOWN, whatever the failure mode.
start_node down --store "redis://127.0.0.1:$rport_r/0" --store-timeout 300
kill -STOP "$rpid_r"
contains "LIMIT.RATE with Redis stopped" "STOREDOWN" "$(on "$port_down" LIMIT.RATE llm acme)"
kill -CONT "$rpid_r"
stop down

start_cluster m1 m2 m3
suite cluster "redis-cluster://127.0.0.1:$rport_m1,127.0.0.1:$rport_m2"

# ---- parity: the same random sequence on one node, on Redis and on the Cluster ----
# Budgets per day and recovery steps per day, so that nothing refills or recovers while it
# runs: every reply but its times must be the single node's.
cat >"$tmp/parity.yaml" <<'YAML'
limits:
  a1:
    rate: 40/1d
    burst: 3
    key: explicit
    adaptive: {decrease: 0.5, recover: 10%/1d, floor: 4/1d}
  a2:
    rate: 1000/1d
    burst: 5
    key: explicit
    adaptive: {decrease: 0.75, recover: 5%/1d}
types:
  both: {limits: [a1, a2]}
YAML

# gen SEED: one command a line, its words tab-separated.
gen() {
  local i r k lim u
  RANDOM=$1
  for i in $(seq 1 160); do
    r=$((RANDOM % 12))
    k=k$((RANDOM % 3))
    lim=a$((RANDOM % 2 + 1))
    u=$((RANDOM % 2 + 1))
    case $r in
      0 | 1 | 2) printf 'THROTTLE\t%s\t%s\n' "$lim" "$k" ;;
      3) printf 'THROTTLE\t%s\t%s\tUNITS\t%s\n' "$lim" "$k" "$u" ;;
      4) printf 'THROTTLE\t%s\t%s\tPEEK\n' "$lim" "$k" ;;
      5) printf 'THROTTLE\tboth\t%s\n' "$k" ;;
      6 | 7) printf 'LIMIT.BACKOFF\t%s\t%s\t0\n' "$lim" "$k" ;;
      8 | 9) printf 'LIMIT.RATE\t%s\t%s\n' "$lim" "$k" ;;
      10) [ $((RANDOM % 3)) = 0 ] && printf 'LIMIT.RESET\t%s\t%s\n' "$lim" "$k" ;;
      11)
        printf 'LIMIT.KEY\t%s\t%s\trate=%s/1d,burst=2,decrease=0.5\n' "$lim" "$k" "$((u * 8))"
        printf 'QUIET\tLIMIT.RESET\t%s\t%s\n' "$lim" "$k" # (a changed limit: shared_parity.sh)
        ;;
    esac
  done
}

# play SEQ OUT PORT: runs SEQ on the node on PORT, each reply cut to what does not depend on
# time (THROTTLE: allowed, limit, remaining; LIMIT.BACKOFF: that it is a wait; LIMIT.RATE: the
# rate, the configured one and why, less how long ago), one line per command, in OUT.
play() {
  local seq=$1 out=$2 p=$3 reply
  : >"$out"
  while IFS=$'\t' read -r -a f; do
    case ${f[0]} in
      THROTTLE) reply=$(redis-cli -p "$p" "${f[@]}" | head -3 | tr '\n' ' ') ;;
      LIMIT.BACKOFF)
        reply=$(redis-cli -p "$p" "${f[@]}")
        [[ $reply =~ ^[0-9]+$ ]] && reply="a wait"
        ;;
      LIMIT.RATE) reply=$(redis-cli -p "$p" "${f[@]}" | tr '\n' ' ' | sed 's/the last [0-9]* ms ago/the last - ms ago/') ;;
      QUIET)
        redis-cli -p "$p" "${f[@]:1}" >/dev/null
        continue
        ;;
      *) reply=$(redis-cli -p "$p" "${f[@]}" | tr '\n' ' ') ;;
    esac
    printf '%s => %s\n' "${f[*]}" "$reply" >>"$out"
  done <"$seq"
}

node_conf=$tmp/parity.yaml start_node one --data "$tmp/one" --durability none
node_conf=$tmp/parity.yaml start_node red --store "redis://127.0.0.1:$rport_r/1"
node_conf=$tmp/parity.yaml start_node clu --store "redis-cluster://127.0.0.1:$rport_m1"
for seed in 5 77; do
  gen "$seed" >"$tmp/seq.$seed"
  parity_seed "$seed" "adaptive replies" red clu
  lowered=$(grep -c 'lowered from' "$tmp/one.$seed")
  denied=$(grep -c '=> 0 ' "$tmp/one.$seed")
  if [ "$lowered" -lt 5 ] || [ "$denied" -lt 5 ]; then
    bad "parity seed $seed: the sequence should lower rates and be denied ($lowered, $denied)"
  else
    ok
  fi
  for p in "$port_one" "$port_red" "$port_clu"; do
    for l in a1 a2; do redis-cli -p "$p" LIMIT.RESET "$l" >/dev/null; done
  done
done

# PostgreSQL's functions know no AIMD rate: refused, with the reason, at start and live.
if pg_bindir >/dev/null; then
  start_postgres p
  pgurl="postgresql://sluice@127.0.0.1:$pgport_p/postgres"
  out=$("$sluice" serve --port 0 --no-admin --config "$tmp/sluice.yaml" --store "$pgurl" 2>&1)
  check "postgresql: an adaptive limit refused at start" 1 "$?"
  contains "postgresql: says why" "adaptive rate limits are not available with the PostgreSQL store" "$out"
  printf 'limits:\n  plain: {rate: 10/1s, key: explicit}\n' >"$tmp/plain.yaml"
  node_conf=$tmp/plain.yaml start_node pg --store "$pgurl"
  contains "postgresql: LIMIT.SET of an adaptive rate refused" "not available with the PostgreSQL store" \
    "$(on "$port_pg" LIMIT.SET live rate=10/1s,decrease=0.5)"
  contains "postgresql: LIMIT.KEY too" "not available with the PostgreSQL store" \
    "$(on "$port_pg" LIMIT.KEY plain vip rate=40/1s,decrease=0.5)"
  stop pg
else
  echo "postgresql checks skipped: PostgreSQL's server binaries are not installed"
fi
finish
