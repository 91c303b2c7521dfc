#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The task commands answer alike on every store, over the wire: one random sequence of TASK.ADD
# (types with and without limits, KEY, UNITS, PRIORITY, ID task keys, bad payloads and unknown
# keys), TASK.GET (one or two types, COUNT), TASK.ACK (with COST, with a right or a stale
# ATTEMPT), TASK.FAIL DEAD, TASK.CANCEL and TASK.INFO's state, the same on a single node (the
# embedded engine), on a node on Redis, one on Redis Cluster and one on PostgreSQL: every reply
# (ids, delivered payloads and attempts, OKs, error words; lease ends and times left out) and
# every task's state at the end equal on the four, for two seeds. Limits are per day and leases an hour, so
# that nothing refills or lapses while the sequence runs: no reply depends on the clock.
# Traffic goes to 127.0.0.1 only.
#
# Usage: bash tests/server/shared_task_parity.sh PATH-TO-SLUICE SOURCE-DIR
set -u
set -f

sluice=${1:?usage: shared_task_parity.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"

need_tools shared_task_parity.sh redis-cli redis-server
need_postgres

cat >"$tmp/sluice.yaml" <<'EOF'
limits:
  per_user: {rate: 4/1d, burst: 4, key: input.user}
  spend:
    quota: {budget: 12, period: day}
    key: explicit
    units: task
  pool: {concurrency: 3, ttl: 1h}
types:
  free: {lease: 1h}
  metered: {limits: [per_user, spend], lease: 1h}
  pooled: {limits: [pool], lease: 1h}
EOF

# gen SEED: one command a line, its words tab-separated; "@N" stands for the Nth task id this
# node handed out (the ids are the same on every node as long as the replies are).
gen() {
  local i r u ty
  local types=(free metered pooled)
  RANDOM=$1
  for i in $(seq 1 200); do
    r=$((RANDOM % 16))
    u=$((RANDOM % 3))
    ty=${types[$((RANDOM % 3))]}
    case $r in
      0 | 1 | 2 | 3) printf 'TASK.ADD\t%s\t{"user":"u%s"}\tKEY\tk%s\tUNITS\t%s\n' "$ty" "$u" "$u" "$((u + 1))" ;;
      4) printf 'TASK.ADD\t%s\t{"user":"u%s"}\tKEY\tk%s\tPRIORITY\t%s\n' "$ty" "$u" "$u" "$((RANDOM % 3))" ;;
      5) printf 'TASK.ADD\t%s\t{"user":"u%s","v":%s}\tKEY\tk1\tID\tdedup%s\n' "$ty" "$u" "$i" "$u" ;;
      6) printf 'TASK.ADD\tmetered\t{"nouser":1}\tKEY\tk1\n' ;;
      7) printf 'TASK.ADD\tfree\tnot-json\n' ;;
      8 | 9 | 10) printf 'TASK.GET\t%s\tCOUNT\t%s\n' "$ty" "$((u + 1))" ;;
      11) printf 'TASK.GET\tfree\tmetered\tpooled\tCOUNT\t2\n' ;;
      12) printf 'TASK.ACK\t@%s\tCOST\t%s\n' "$((RANDOM % 12 + 1))" "$u" ;;
      13) printf 'TASK.ACK\t@%s\tATTEMPT\t%s\n' "$((RANDOM % 12 + 1))" "$((u % 2 + 1))" ;;
      14) printf 'TASK.FAIL\t@%s\tDEAD\tREASON\tbroken\n' "$((RANDOM % 12 + 1))" ;;
      15) printf 'TASK.CANCEL\t@%s\n' "$((RANDOM % 12 + 1))" ;;
    esac
  done
}

# play SEQ OUT PORT: runs SEQ on the node on PORT, one line per command in OUT (a delivery as
# "id type payload attempt", its lease end left out), then every task's state.
play() {
  local seq=$1 out=$2 p=$3 reply id
  local ids=() added=()
  : >"$out"
  while IFS=$'\t' read -r -a f; do
    for i in "${!f[@]}"; do
      if [[ ${f[$i]} =~ ^@([0-9]+)$ ]]; then
        id=${ids[$((BASH_REMATCH[1] - 1))]:-999999}
        f[$i]=$id
      fi
    done
    case ${f[0]} in
      TASK.GET)
        reply=$(redis-cli -p "$p" "${f[@]}" | awk 'NR % 5 != 0' | tr '\n' ' ')
        # The ids handed out, in order, for @N.
        while read -r id; do ids+=("$id"); done < <(awk '{ for (i = 1; i <= NF; i += 4) print $i }' <<<"$reply")
        ;;
      TASK.ADD)
        reply=$(redis-cli -p "$p" "${f[@]}" | tr '\n' ' ')
        [[ $reply =~ ^([0-9]+)\ $ ]] && added+=("${BASH_REMATCH[1]}")
        ;;
      *) reply=$(redis-cli -p "$p" "${f[@]}" | tr '\n' ' ') ;;
    esac
    printf '%s => %s\n' "${f[*]}" "$reply" >>"$out"
  done <"$seq"
  for id in "${added[@]}"; do
    printf 'task %s: %s\n' "$id" "$(redis-cli -p "$p" TASK.INFO "$id" | awk 'p { print; exit } $0 == "state" { p = 1 }')" >>"$out"
  done
}

start_parity_nodes
for seed in 5 77; do
  gen "$seed" >"$tmp/seq.$seed"
  parity_seed "$seed" "task replies"
  n=$(grep -c '^TASK.GET.* => [0-9]' "$tmp/one.$seed")
  if [ "$n" -lt 10 ]; then
    bad "seed $seed: the sequence should deliver tasks (only $n GETs did on one node)"
  else
    ok
  fi
done

finish
