#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The node's limit commands answer alike on every store (docs/cluster.md: "the single node's
# arguments, replies and error words"), over the wire. One random sequence of THROTTLE (limits of
# every kind, a tiered limit with TIER, a type's chain, UNITS, PEEK, keys with and without an
# override), LIMIT.SET, LIMIT.GET, LIMIT.KEY and LIMIT.KEYDEL, LIMIT.RESET of one key and of every
# key, CL.THROTTLE, LEASE.ACQUIRE and LEASE.RELEASE, LIMIT.SPEND, LIMIT.BACKOFF, and requests
# refused with an error (no such limit, THROTTLE of a concurrency limit, a tiered one without
# TIER) runs on a single node (the embedded store), on a node on Redis, one on Redis Cluster and
# one on PostgreSQL: every reply's allowed, limit and remaining fields, every OK, count, map and
# error word are equal on the four, for two seeds. Left out: the times (they differ by the
# milliseconds between the runs) and LIMIT.GET's count of the keys a node tracks (a shared store's
# are in the store). A key whose limit changes is reset after the change: its state across the
# change is the documented difference (docs/cluster.md, "State across a change"). Budgets are per
# day, so that nothing refills while the sequence runs and no reply depends on how fast the
# machine is. The command layer is what this checks (cmd_limit.c's shared paths): the store
# scripts' arithmetic has its own differential tests.
# Traffic goes to 127.0.0.1 only.
#
# Usage: bash tests/server/shared_parity.sh PATH-TO-SLUICE SOURCE-DIR
set -u
set -f

sluice=${1:?usage: shared_parity.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"

need_tools shared_parity.sh redis-cli redis-server
need_postgres

cat >"$tmp/sluice.yaml" <<'EOF'
limits:
  rate: {rate: 6/1d, burst: 6, key: explicit}
  window: {window: 5/1d, key: explicit}
  sliding: {sliding: 4/1d, key: explicit}
  quota:
    quota: {budget: 9, period: day}
    key: explicit
  slots: {concurrency: 2, key: explicit, ttl: 1h}
  tiered:
    key: explicit
    tier:
      field: input.n
      tiers:
        - {name: low, max: 1, rate: 3/1d, burst: 3}
        - {name: high, min: 2, rate: 7/1d, burst: 7}
types:
  pair: {limits: [rate, window]}
EOF

# gen SEED: one command a line, its words tab-separated ("-" stands for a lease handle, filled
# in per node from that node's own LEASE.ACQUIRE replies).
gen() {
  local i r k lim u
  local lims=(rate window sliding quota)
  RANDOM=$1
  for i in $(seq 1 260); do
    r=$((RANDOM % 26))
    k=k$((RANDOM % 4))
    lim=${lims[$((RANDOM % 4))]}
    u=$((RANDOM % 3 + 1))
    case $r in
      0 | 1 | 2 | 3 | 4) printf 'THROTTLE\t%s\t%s\n' "$lim" "$k" ;;
      5 | 6) printf 'THROTTLE\t%s\t%s\tUNITS\t%s\n' "$lim" "$k" "$u" ;;
      7) printf 'THROTTLE\t%s\t%s\tPEEK\n' "$lim" "$k" ;;
      8 | 9) printf 'THROTTLE\tpair\t%s\n' "$k" ;;
      10) printf 'THROTTLE\ttiered\t%s\tTIER\t%s\n' "$k" "$((RANDOM % 4))" ;;
      11)
        case $lim in
          rate) printf 'LIMIT.KEY\trate\t%s\trate=%s/1d,burst=%s\n' "$k" "$u" "$u" ;;
          window) printf 'LIMIT.KEY\twindow\t%s\twindow=%s/1d\n' "$k" "$u" ;;
          sliding) printf 'LIMIT.KEY\tsliding\t%s\tsliding=%s/1d\n' "$k" "$u" ;;
          quota) printf 'LIMIT.KEY\tquota\t%s\tquota=%s/day\n' "$k" "$((u + 3))" ;;
        esac
        # A key's state across a change of its limit is the one documented difference (a
        # shared store keeps its spending, a single node starts the key afresh:
        # docs/cluster.md, "State across a change"): the key starts afresh on every node.
        printf 'QUIET\tLIMIT.RESET\t%s\t%s\n' "$lim" "$k"
        ;;
      12)
        printf 'LIMIT.KEYDEL\t%s\t%s\n' "$lim" "$k"
        printf 'QUIET\tLIMIT.RESET\t%s\t%s\n' "$lim" "$k"
        ;;
      13) printf 'LIMIT.RESET\t%s\t%s\n' "$lim" "$k" ;;
      14) [ $((RANDOM % 4)) = 0 ] && printf 'LIMIT.RESET\t%s\n' "$lim" ;;
      15) printf 'CL.THROTTLE\tc%s\t2\t3\t86400\t%s\n' "$((RANDOM % 3))" "$((u - 1))" ;;
      16 | 17) printf 'LEASE.ACQUIRE\tslots\t%s\tUNITS\t%s\n' "$k" "$((u > 2 ? 1 : u))" ;;
      18 | 19) printf 'LEASE.RELEASE\t-\n' ;;
      20) printf 'LIMIT.SPEND\tquota\t%s\n' "$k" ;;
      21) printf 'THROTTLE\tslots\t%s\tPEEK\n' "$k" ;;
      22)
        case $((RANDOM % 4)) in
          0) printf 'THROTTLE\tnope\t%s\n' "$k" ;;
          1) printf 'THROTTLE\tslots\t%s\n' "$k" ;;
          2) printf 'THROTTLE\ttiered\t%s\n' "$k" ;;
          3) printf 'LIMIT.RESET\ttiered\t%s\n' "$k" ;;
        esac
        ;;
      23) printf 'LIMIT.BACKOFF\trate\t%s\t5000\n' "$k" ;;
      24)
        case $lim in
          rate) printf 'LIMIT.SET\trate\trate=%s/1d,burst=%s,key=explicit\n' "$((u + 4))" "$((u + 4))" ;;
          window) printf 'LIMIT.SET\twindow\twindow=%s/1d,key=explicit\n' "$((u + 3))" ;;
          sliding) printf 'LIMIT.SET\tsliding\tsliding=%s/1d,key=explicit\n' "$((u + 2))" ;;
          quota) printf 'LIMIT.SET\tquota\tquota=%s/day,key=explicit\n' "$((u + 7))" ;;
        esac
        printf 'QUIET\tLIMIT.RESET\t%s\n' "$lim" # (a changed limit: see the top)
        ;;
      25) printf 'LIMIT.GET\t%s\n' "$lim" ;;
    esac
  done
}

# play SEQ OUT PORT: runs SEQ on the node on PORT; each reply cut to what does not depend on
# time (THROTTLE: allowed, limit, remaining; CL.THROTTLE: allowed, limit, remaining; a lease's
# handle and ttl left out, its remaining kept), one line per command, in OUT.
play() {
  local seq=$1 out=$2 p=$3 reply h
  local leases=()
  : >"$out"
  while IFS=$'\t' read -r -a f; do
    case ${f[0]} in
      THROTTLE | CL.THROTTLE)
        reply=$(redis-cli -p "$p" "${f[@]}" | head -3 | tr '\n' ' ')
        ;;
      LEASE.ACQUIRE)
        reply=$(redis-cli -p "$p" "${f[@]}" | tr '\n' ' ')
        h=$(awk '{ print $2 }' <<<"$reply")
        case $reply in
          lease*) leases+=("$h") && reply="lease remaining $(awk '{ print $6 }' <<<"$reply")" ;;
          RATELIMITED*) reply=RATELIMITED ;;
        esac
        ;;
      LEASE.RELEASE)
        if [ "${#leases[@]}" -gt 0 ]; then
          reply=$(redis-cli -p "$p" LEASE.RELEASE "${leases[0]}")
          leases=("${leases[@]:1}")
        else
          reply="(no lease to release)"
        fi
        ;;
      LIMIT.SPEND) # spent, budget, remaining (the period's times are the clock's)
        reply=$(redis-cli -p "$p" "${f[@]}" | head -6 | tr '\n' ' ')
        ;;
      LIMIT.BACKOFF) # the wait is the clock's: only that it is one
        reply=$(redis-cli -p "$p" "${f[@]}")
        [[ $reply =~ ^[0-9]+$ ]] && [ "$reply" -ge 4000 ] && reply="waits about 5 s"
        ;;
      LIMIT.GET) # the keys this node's memory tracks: a shared store's are in the store
        reply=$(redis-cli -p "$p" "${f[@]}" | tr '\n' ' ' | sed 's/ keys [0-9]* / keys - /')
        ;;
      QUIET)
        redis-cli -p "$p" "${f[@]:1}" >/dev/null
        continue
        ;;
      *) reply=$(redis-cli -p "$p" "${f[@]}" | tr '\n' ' ') ;;
    esac
    printf '%s => %s\n' "${f[*]}" "$reply" >>"$out"
  done <"$seq"
}

start_parity_nodes
for seed in 11 2024; do
  gen "$seed" >"$tmp/seq.$seed"
  parity_seed "$seed" "limit replies"
  denied=$(grep -c '=> 0 ' "$tmp/one.$seed")
  if [ "$denied" -lt 10 ]; then
    bad "seed $seed: the sequence should reach its limits (only $denied denials on one node)"
  else
    ok
  fi
  # The next seed starts with every key forgotten on every node.
  for p in "$port_one" "$port_red" "$port_clu" "$port_pg"; do
    for l in rate window sliding quota slots tiered; do redis-cli -p "$p" LIMIT.RESET "$l" >/dev/null; done
  done
done

finish
