#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Live limit changes shared by every node (issues 10 and 11, docs/cluster.md "Live limit
# changes"): on one Redis, on a 3-master Redis Cluster and on one PostgreSQL, nodes started with
# the same file and store share LIMIT.SET, LIMIT.DEL, LIMIT.KEY and LIMIT.KEYDEL. For each store:
# a LIMIT.SET on node A is in force on A when A answers and changes node B's decisions within
# the poll (measured, bounded); a per-key override set on B and removed on A; a LIMIT.DEL of a
# limit the file declares; a node started after the changes has them before it listens; a node
# restarted keeps them; CONFIG RELOAD does not drop them; LIMIT.RESET of one key forgets its
# shared state, LIMIT.RESET of every key every key's and lease's at once (on a Cluster, for a
# limit no type names, by a generation the other nodes read at their next poll);
# LIMIT.SPEND reads a quota key from the store; argument errors keep the single node's words;
# shadow mode and `enabled: false` act on every node (shadow_checks). On Redis also:
# a LIMIT.SET while Redis is stopped answers -STOREDOWN and the nodes agree again once it is back.
# Every wait is a deadline, never a sleep.
#
# Usage: bash tests/server/shared_overrides.sh PATH-TO-SLUICE SOURCE-DIR
set -u
set -f

sluice=${1:?usage: shared_overrides.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"
need_tools shared_overrides.sh redis-server redis-cli curl jq

cat >"$tmp/sluice.yaml" <<'YAML'
limits:
  api: {rate: 5/1h, key: explicit}
  other: {rate: 100/1h, key: explicit}
  budget:
    quota: {budget: 100, period: day}
    key: explicit
  slots: {concurrency: 1, key: explicit, ttl: 60s}
types:
  call: {limits: [api]}
YAML

# spec PORT NAME: the spec LIMIT.GET answers for NAME on the node on PORT (or its error).
spec() { redis-cli -p "$1" LIMIT.GET "$2" 2>&1 | awk 'NR == 1 && /^[A-Z]+ / { print; exit } p { print; exit } $0 == "spec" { p = 1 }'; }
spec_is() { [ "$(spec "$1" "$2")" = "$3" ]; }
# limit_of PORT KEY: the limit field of THROTTLE call KEY (peeked, nothing charged).
limit_of() { redis-cli -p "$1" THROTTLE call "$2" PEEK 2>&1 | sed -n 2p; }
limit_is() { [ "$(limit_of "$1" "$2")" = "$3" ]; }
nolimit() { spec "$1" "$2" | grep -q '^NOLIMIT'; }
store_up() { [ "$(store_field "$1" store_state)" = up ]; }

# Shadow mode on a shared store (run by suite with $label, $url, $a, $b, $c; api at 2/1h, k1
# spent): a limit switched to shadow on one node passes its would-be denials on every node,
# still charging the shared budget, and the enforced limit starts from what shadow counted; the
# shared task queue takes a chain with a shadow link; `enabled: false` (CONFIG RELOAD) makes
# CL.THROTTLE pass on every node reloaded, and `enabled: true` enforces the state it counted.
# Then LIMIT.BACKOFF on one node holds a key back for all, and LIMIT.RATE answers everywhere.
# shadow_counted PORT N: the node's INFO counters show at least N would-be denials of api.
shadow_counted() {
  local n
  n=$(redis-cli -p "$1" INFO counters | tr -d '\r' | grep '^counters_limit_api:' | tr ',' '\n' |
    awk -F= '$1 == "shadow_denied" { print $2 }')
  [ -n "$n" ] && [ "$n" -ge "$2" ]
}
shadow_checks() {
  local sd got
  # k1 spent (again: the whole reset above forgot it on one Redis and on PostgreSQL).
  redis-cli -p "$a" THROTTLE call k1 >/dev/null
  redis-cli -p "$a" THROTTLE call k1 >/dev/null
  check "$label: k1 spent before the switch" 0 "$(redis-cli -p "$b" THROTTLE call k1 | head -1)"
  check "$label: LIMIT.SET mode=shadow on a" OK "$(on "$a" LIMIT.SET api mode=shadow)"
  contains "$label: a's spec" "mode=shadow" "$(spec "$a" api)"
  wait_until "$label: b has the shadow mode" 10 spec_is "$b" api "$(spec "$a" api)"
  sd=$(redis-cli -p "$b" INFO stats | tr -d '\r' | awk -F: '$1 == "throttle_shadow_denied" { print $2 }')
  check "$label: b lets the spent key through" "1 2 0 0" \
    "$(redis-cli -p "$b" THROTTLE call k1 | head -4 | tr '\n' ' ' | sed 's/ *$//')"
  check "$label: and counts the would-be denial" "$((sd + 1))" \
    "$(redis-cli -p "$b" INFO stats | tr -d '\r' | awk -F: '$1 == "throttle_shadow_denied" { print $2 }')"
  wait_until "$label: the would-be denial is summed across nodes (a's INFO counters)" 10 \
    shadow_counted "$a" 1
  check "$label: a fresh key is charged in shadow (a)" "1 1" \
    "$(redis-cli -p "$a" THROTTLE api sh1 | head -3 | sed -n '1p;3p' | tr '\n' ' ' | sed 's/ *$//')"
  check "$label: ... and on b, 2 of 2" "1 0" \
    "$(redis-cli -p "$b" THROTTLE api sh1 | head -3 | sed -n '1p;3p' | tr '\n' ' ' | sed 's/ *$//')"
  wait_until "$label: c has the shadow mode" 10 spec_is "$c" api "$(spec "$a" api)"
  check "$label: past it on c, still a pass" 1 "$(redis-cli -p "$c" THROTTLE api sh1 | head -1)"
  check "$label: a peek passes too" 1 "$(redis-cli -p "$a" THROTTLE call k1 PEEK | head -1)"
  # A task whose chain has the shadow link is taken, its would-be denial let through.
  check "$label: TASK.ADD of a chain with a shadow link is taken" 1 \
    "$(on "$b" TASK.ADD call '{}' KEY sh1 | grep -c '^[0-9][0-9]*$')"
  check "$label: mode=enforce on b" OK "$(on "$b" LIMIT.SET api mode=enforce)"
  wait_until "$label: a has it enforced" 10 spec_is "$a" api "rate=2/1h,key=explicit"
  check "$label: the state counted in shadow is enforced" "0 api" \
    "$(redis-cli -p "$a" THROTTLE api sh1 | sed -n '1p;6p' | tr '\n' ' ' | sed 's/ *$//')"
  # The global switch, on both nodes' file.
  check "$label: CL.THROTTLE spends its key on a" 0 "$(redis-cli -p "$a" CL.THROTTLE "cl$label" 0 1 3600 | head -1)"
  check "$label: CL.THROTTLE then denies on b" 1 "$(redis-cli -p "$b" CL.THROTTLE "cl$label" 0 1 3600 | head -1)"
  sed -i '1i enabled: false' "$tmp/sluice.yaml"
  check "$label: reload a with enabled: false" OK "$(on "$a" CONFIG RELOAD)"
  check "$label: reload b with enabled: false" OK "$(on "$b" CONFIG RELOAD)"
  check "$label: CL.THROTTLE passes on a" 0 "$(redis-cli -p "$a" CL.THROTTLE "cl$label" 0 1 3600 | head -1)"
  check "$label: THROTTLE passes on b" 1 "$(redis-cli -p "$b" THROTTLE api sh1 | head -1)"
  sed -i '1d' "$tmp/sluice.yaml"
  check "$label: reload a with enabled: true" OK "$(on "$a" CONFIG RELOAD)"
  check "$label: reload b with enabled: true" OK "$(on "$b" CONFIG RELOAD)"
  check "$label: CL.THROTTLE enforced again on b" 1 "$(redis-cli -p "$b" CL.THROTTLE "cl$label" 0 1 3600 | head -1)"
  # LIMIT.BACKOFF on one node holds the key back on every node, in the store's clock.
  check "$label: LIMIT.BACKOFF on a" 5000 "$(on "$a" LIMIT.BACKOFF api bk 5000)"
  got=$(redis-cli -p "$b" THROTTLE api bk | sed -n '1p;4p' | tr '\n' ' ')
  check "$label: b denies the held key" 0 "${got%% *}"
  within "$label: for the backoff's wait" 4000 5000 "$(echo "$got" | awk '{ print $2 }')"
  within "$label: a shorter backoff keeps the longer wait" 4000 5000 "$(on "$c" LIMIT.BACKOFF api bk 10)"
  contains "$label: LIMIT.BACKOFF's errors: the single node's words" "WRONGARGS" \
    "$(on "$b" LIMIT.BACKOFF api bk -1)"
  check "$label: LIMIT.RATE on b" "key bk rate 2/1h configured 2/1h why configured (not adaptive)" \
    "$(on "$b" LIMIT.RATE api bk)"
}

# suite LABEL URL: the checks on one store (fresh: nothing shared yet).
suite() {
  local label=$1 url=$2 a b c t0 t1 got
  start_node "${label}_a" --store "$url" --store-timeout 5000
  start_node "${label}_b" --store "$url" --store-timeout 5000
  local -n pa="port_${label}_a" pb="port_${label}_b"
  a=$pa
  b=$pb
  wait_until "$label: node a up" 20 store_up "$a"
  wait_until "$label: node b up" 20 store_up "$b"
  check "$label: the file's definition first" "rate=5/1h,key=explicit" "$(spec "$b" api)"
  check "$label: the file's limit" 5 "$(limit_of "$b" fresh)"

  # LIMIT.SET on a: in force on a when a answers, on b within the poll.
  check "$label: LIMIT.SET on a" OK "$(on "$a" LIMIT.SET api rate=2/1h,key=explicit)"
  t0=$(now_ms)
  check "$label: a decides with it as soon as it answered" 2 "$(limit_of "$a" k1)"
  wait_until "$label: b has it" 10 spec_is "$b" api "rate=2/1h,key=explicit"
  t1=$(now_ms)
  echo "# $label: LIMIT.SET on a seen by b after $((t1 - t0)) ms (poll every 100 ms)"
  within "$label: seen by b within a second" 0 1000 "$((t1 - t0))"
  # One budget with the new definition, whichever node decides.
  check "$label: b grants 1 of 2" 1 "$(redis-cli -p "$b" THROTTLE call k1 | head -1)"
  check "$label: a grants 2 of 2" 1 "$(redis-cli -p "$a" THROTTLE call k1 | head -1)"
  check "$label: b denies the third (the file's 5 would grant it)" 0 \
    "$(redis-cli -p "$b" THROTTLE call k1 | head -1)"
  check "$label: INFO store: b's version" 1 "$(store_field "$b" store_defs_version)"
  # LIMIT.RESET of one key forgets its shared state, for every node.
  check "$label: LIMIT.RESET api k1 on a" 1 "$(on "$a" LIMIT.RESET api k1)"
  check "$label: b grants k1 again" 1 "$(redis-cli -p "$b" THROTTLE call k1 | head -1)"
  check "$label: LIMIT.RESET of an untracked key" 0 "$(on "$b" LIMIT.RESET api never)"
  check "$label: LIMIT.RESET of no limit" 'NOLIMIT no limit named "nope"' \
    "$(on "$b" LIMIT.RESET nope k)"

  # A per-key override set on b, removed on a.
  check "$label: LIMIT.KEY on b" OK "$(on "$b" LIMIT.KEY api vip rate=50/1h)"
  check "$label: b's override in force at once" 50 "$(limit_of "$b" vip)"
  wait_until "$label: a has b's override" 10 limit_is "$a" vip 50
  check "$label: other keys keep the limit's definition" 2 "$(limit_of "$a" k2)"
  check "$label: LIMIT.KEYDEL on a" 1 "$(on "$a" LIMIT.KEYDEL api vip)"
  wait_until "$label: b drops the override" 10 limit_is "$b" vip 2
  check "$label: LIMIT.KEYDEL of no override" 0 "$(on "$b" LIMIT.KEYDEL api vip)"

  # LIMIT.DEL of a limit the file declares: gone everywhere.
  check "$label: LIMIT.DEL on a" 1 "$(on "$a" LIMIT.DEL other)"
  wait_until "$label: b has no limit other" 10 nolimit "$b" other
  check "$label: THROTTLE of it on b: the single node's words" \
    'NOLIMIT no limit or task type named "other"' "$(on "$b" THROTTLE other x)"
  check "$label: LIMIT.DEL again: NOLIMIT" 'NOLIMIT no limit named "other"' \
    "$(on "$b" LIMIT.DEL other)"
  # And a limit added live.
  check "$label: LIMIT.SET of a new limit on b" OK "$(on "$b" LIMIT.SET extra rate=7/1m)"

  # A node started after the changes has them before it listens (no wait).
  start_node "${label}_c" --store "$url" --store-timeout 5000 --admin-port 0 \
    --admin-port-file "$tmp/${label}_c.admin"
  local -n pc="port_${label}_c"
  c=$pc
  check "$label: c starts with api changed" "rate=2/1h,key=explicit" "$(spec "$c" api)"
  contains "$label: c starts without other" NOLIMIT "$(spec "$c" other)"
  check "$label: c starts with extra" "rate=7/1m" "$(spec "$c" extra)"
  check "$label: c shares the budget (2 of 2 since the reset)" 1 \
    "$(redis-cli -p "$c" THROTTLE call k1 | head -1)"
  check "$label: then b denies" 0 "$(redis-cli -p "$b" THROTTLE call k1 | head -1)"

  # A restarted node keeps them.
  stop "${label}_b"
  start_node "${label}_b" --store "$url" --store-timeout 5000
  b=$pb
  check "$label: b restarted: api" "rate=2/1h,key=explicit" "$(spec "$b" api)"
  contains "$label: b restarted: no other" NOLIMIT "$(spec "$b" other)"

  # CONFIG RELOAD of the file does not drop them.
  check "$label: CONFIG RELOAD on a" OK "$(on "$a" CONFIG RELOAD)"
  check "$label: after the reload, still the shared api" "rate=2/1h,key=explicit" "$(spec "$a" api)"
  contains "$label: after the reload, still no other" NOLIMIT "$(spec "$a" other)"

  # Same words as a single node; what the store cannot enforce is refused, nothing stored.
  contains "$label: a bad spec: the single node's words" "WRONGARGS bad period" \
    "$(on "$a" LIMIT.SET api 'rate=2/1x')"
  contains "$label: LIMIT.KEY of no limit" 'NOLIMIT no limit named "nope"' \
    "$(on "$a" LIMIT.KEY nope k rate=1/1s)"
  # LIMIT.RESET of every key of a limit: forgotten for every node at once, its leases too. For a
  # limit whose keys live under one tag (every limit on one Redis; on a Cluster a limit a type
  # names: api, type call's, in the queue's slot) nodes b and c learn of it from no poll: the
  # store reads the generation itself, so their very next decision is fresh.
  if [ "$label" = cluster ]; then
    # A limit no type names keeps its keys on every master: its whole reset is a generation in
    # the shared set, which a (the node that took it) applies before it answers and b and c at
    # their next poll; the keys it spread over the masters all read as fresh.
    check "$label: LIMIT.SET spread" OK "$(on "$a" LIMIT.SET spread rate=100/1h,key=explicit)"
    wait_until "$label: b has spread" 20 spec_is "$b" spread "$(spec "$a" spread)"
    wait_until "$label: c has spread" 20 spec_is "$c" spread "$(spec "$a" spread)"
    for k in o1 o2 o3 o4 o5 o6; do
      for i in $(seq 1 100); do echo "THROTTLE spread $k"; done | redis-cli -p "$b" >/dev/null
    done
    check "$label: o1 of spread spent" 0 "$(redis-cli -p "$c" THROTTLE spread o1 | head -1)"
    check "$label: o6 of spread spent" 0 "$(redis-cli -p "$a" THROTTLE spread o6 | head -1)"
    check "$label: LIMIT.RESET spread (every key, a limit no type names)" OK \
      "$(on "$a" LIMIT.RESET spread)"
    check "$label: a grants o1 at once" 1 "$(redis-cli -p "$a" THROTTLE spread o1 | head -1)"
    spread_fresh() { [ "$(redis-cli -p "$1" THROTTLE spread "$2" PEEK | head -1)" = 1 ]; }
    wait_until "$label: b grants o6 after its poll" 20 spread_fresh "$b" o6
    wait_until "$label: c grants o3 after its poll" 20 spread_fresh "$c" o3
    check "$label: one budget after it: c's o1 is the second charge" 98 \
      "$(redis-cli -p "$c" THROTTLE spread o1 | sed -n 3p)"
    redis-cli -p "$c" THROTTLE spread o2 >/dev/null
    check "$label: LIMIT.RESET spread o2 (one key, of the new generation)" 1 \
      "$(on "$b" LIMIT.RESET spread o2)"
    check "$label: o2 fresh again" 99 "$(redis-cli -p "$c" THROTTLE spread o2 | sed -n 3p)"
    check "$label: LIMIT.DEL spread" 1 "$(on "$a" LIMIT.DEL spread)"
    redis-cli -p "$b" THROTTLE call r1 >/dev/null
    redis-cli -p "$c" THROTTLE call r1 >/dev/null
    check "$label: r1 spent" 0 "$(redis-cli -p "$a" THROTTLE call r1 | head -1)"
    check "$label: LIMIT.RESET api (every key) on a" OK "$(on "$a" LIMIT.RESET api)"
    check "$label: b grants r1 again at once" 1 "$(redis-cli -p "$b" THROTTLE call r1 | head -1)"
  else
    redis-cli -p "$b" THROTTLE call r1 >/dev/null
    redis-cli -p "$c" THROTTLE call r1 >/dev/null
    redis-cli -p "$c" THROTTLE call r2 >/dev/null
    redis-cli -p "$c" THROTTLE call r2 >/dev/null
    check "$label: r1 spent" 0 "$(redis-cli -p "$a" THROTTLE call r1 | head -1)"
    check "$label: LIMIT.RESET api (every key) on a" OK "$(on "$a" LIMIT.RESET api)"
    check "$label: b grants r1 again at once" 1 "$(redis-cli -p "$b" THROTTLE call r1 | head -1)"
    check "$label: c grants r2 again at once" 1 "$(redis-cli -p "$c" THROTTLE call r2 | head -1)"
    check "$label: one budget after it: a grants r1's second" 1 \
      "$(redis-cli -p "$a" THROTTLE call r1 | head -1)"
    check "$label: then c denies r1" 0 "$(redis-cli -p "$c" THROTTLE call r1 | head -1)"
    check "$label: LIMIT.RESET of one key after it" 1 "$(on "$b" LIMIT.RESET api r1)"
    check "$label: r1 granted after the key's reset" 1 \
      "$(redis-cli -p "$c" THROTTLE call r1 | head -1)"
    lease=$(redis-cli -p "$a" LEASE.ACQUIRE slots u1 | sed -n 2p)
    contains "$label: the one slot is taken" RATELIMITED "$(on "$b" LEASE.ACQUIRE slots u1)"
    check "$label: LIMIT.RESET slots on c" OK "$(on "$c" LIMIT.RESET slots)"
    contains "$label: the slot is free again on b" ttl_ms "$(on "$b" LEASE.ACQUIRE slots u1)"
    contains "$label: the lease the reset forgot" NOLEASE "$(on "$a" LEASE.RENEW "$lease")"
    # A key's override gives its lease's ttl, on the node that renews it too.
    check "$label: LIMIT.KEY slots u9" OK "$(on "$a" LIMIT.KEY slots u9 concurrency=1,ttl=600s)"
    wait_until "$label: b has slots' override" 20 spec_is "$b" slots "$(spec "$a" slots)"
    lease=$(redis-cli -p "$a" LEASE.ACQUIRE slots u9 | sed -n 2p)
    check "$label: LEASE.RENEW on b: the override's ttl" 600000 "$(on "$b" LEASE.RENEW "$lease")"
    check "$label: LIMIT.KEYDEL slots u9" 1 "$(on "$a" LIMIT.KEYDEL slots u9)"
    check "$label: LIMIT.RESET of no limit" 'NOLIMIT no limit named "nope"' \
      "$(on "$c" LIMIT.RESET nope)"
    # A limit with a per-key override (its key holding a space and a quote) resets every key,
    # the override's and the others: each limit id reaches the store whole (the id list).
    check "$label: LIMIT.SET wide" OK "$(on "$a" LIMIT.SET wide rate=100/1h,key=explicit)"
    check "$label: LIMIT.KEY wide 'v i\"p'" OK "$(on "$a" LIMIT.KEY wide 'v i"p' rate=1/1h)"
    wait_until "$label: b has wide" 20 spec_is "$b" wide "$(spec "$a" wide)"
    wait_until "$label: c has wide" 20 spec_is "$c" wide "$(spec "$a" wide)"
    # (The override's key on a, which took the LIMIT.KEY: the others learn of it by their poll.)
    redis-cli -p "$a" THROTTLE wide o1 >/dev/null
    for i in $(seq 1 99); do echo "THROTTLE wide o1"; done | redis-cli -p "$b" >/dev/null
    redis-cli -p "$a" THROTTLE wide 'v i"p' >/dev/null
    check "$label: o1 spent" 0 "$(redis-cli -p "$c" THROTTLE wide o1 | head -1)"
    check "$label: the override's key spent" 0 "$(redis-cli -p "$a" THROTTLE wide 'v i"p' | head -1)"
    check "$label: LIMIT.RESET wide (every key, with an override)" OK "$(on "$a" LIMIT.RESET wide)"
    check "$label: o1 granted again" 1 "$(redis-cli -p "$b" THROTTLE wide o1 | head -1)"
    check "$label: the override's key granted again" 1 \
      "$(redis-cli -p "$a" THROTTLE wide 'v i"p' | head -1)"
    check "$label: LIMIT.DEL wide" 1 "$(on "$a" LIMIT.DEL wide)"
  fi
  # LIMIT.SPEND reads the quota key's state in the store, on any node, charging nothing.
  redis-cli -p "$a" THROTTLE budget u1 UNITS 30 >/dev/null
  check "$label: LIMIT.SPEND on b" "spent 30 budget 100 remaining 70" \
    "$(on "$b" LIMIT.SPEND budget u1 | cut -d' ' -f1-6)"
  check "$label: LIMIT.SPEND charged nothing" "spent 30 budget 100 remaining 70" \
    "$(on "$c" LIMIT.SPEND budget u1 | cut -d' ' -f1-6)"
  got=$(on "$b" LIMIT.SPEND budget u1)
  check "$label: LIMIT.SPEND: a day's period" 86400000 \
    "$(($(cut -d' ' -f10 <<<"$got") - $(cut -d' ' -f8 <<<"$got")))"
  check "$label: LIMIT.SPEND of a key never charged" "spent 0 budget 100 remaining 100" \
    "$(on "$a" LIMIT.SPEND budget nobody | cut -d' ' -f1-6)"
  # The admin port's spend query reads the store too (LIMIT.SPEND on a detached client), with
  # the embedded store's document and statuses.
  adm=$(cat "$tmp/${label}_c.admin")
  api_spend() { curl -s -o "$tmp/spend.json" -w '%{http_code}' --max-time 30 "http://127.0.0.1:$adm$1"; }
  check "$label: /api/limits/budget/spend on c" 200 "$(api_spend '/api/limits/budget/spend?key=u1')"
  check "$label: its document" "budget null u1 30 100 70 86400000" \
    "$(jq -r '"\(.limit) \(.tier) \(.key) \(.spent) \(.budget) \(.remaining) \(.resets_at_ms - .period_start_ms)"' "$tmp/spend.json")"
  check "$label: the same period as LIMIT.SPEND" "$(cut -d' ' -f10 <<<"$got")" \
    "$(jq -r .resets_at_ms "$tmp/spend.json")"
  check "$label: /api spend of a key never charged" "0 100" \
    "$(api_spend '/api/limits/budget/spend?key=nobody' >/dev/null; jq -r '"\(.spent) \(.remaining)"' "$tmp/spend.json")"
  check "$label: /api spend with a tier the limit lacks: 404" 404 \
    "$(api_spend '/api/limits/budget/spend?key=u1&tier=x')"
  check "$label: /api spend of a rate limit: 400" 400 "$(api_spend '/api/limits/api/spend?key=u1')"
  check "$label: /api spend without a key: 400" 400 "$(api_spend '/api/limits/budget/spend')"
  check "$label: /api spend of no limit: 404" 404 "$(api_spend '/api/limits/nope/spend?key=u1')"
  check "$label: LIMIT.SPEND of a rate limit: the single node's words" \
    'WRONGARGS limit "api" is a rate limit; LIMIT.SPEND reads quotas' "$(on "$a" LIMIT.SPEND api u1)"
  check "$label: LIMIT.SPEND with a TIER the limit lacks" 'WRONGARGS limit "budget" has no tier "x"' \
    "$(on "$a" LIMIT.SPEND budget u1 TIER x)"
  if [ "$label" != cluster ]; then
    check "$label: LIMIT.RESET budget" OK "$(on "$b" LIMIT.RESET budget)"
    check "$label: LIMIT.SPEND after it" "spent 0 budget 100 remaining 100" \
      "$(on "$c" LIMIT.SPEND budget u1 | cut -d' ' -f1-6)"
  fi
  check "$label: a refused change changed nothing" "rate=2/1h,key=explicit" "$(spec "$b" api)"
  shadow_checks
  # Back to the file's definition, by LIMIT.SET.
  check "$label: LIMIT.SET back" OK "$(on "$c" LIMIT.SET api rate=5/1h,key=explicit)"
  wait_until "$label: a has it back" 10 spec_is "$a" api "rate=5/1h,key=explicit"
  wait_until "$label: b has it back" 10 spec_is "$b" api "rate=5/1h,key=explicit"
}

# ---- one Redis -------------------------------------------------------------------------------

start_redis r
suite redis "redis://127.0.0.1:$rport_r/0"
check "redis: the set lives in one hash" "rate=7/1m" \
  "$(redis-cli -p "$rport_r" HGET 'sluice:{defs}:limits' extra)"

# Redis stopped: a LIMIT.SET answers -STOREDOWN, and once Redis is back every node agrees with
# the store, whichever way it went.
start_node down_a --store "redis://127.0.0.1:$rport_r/0" --store-timeout 300 --admin-port 0 \
  --admin-port-file "$tmp/down_a.admin"
start_node down_b --store "redis://127.0.0.1:$rport_r/0" --store-timeout 300
kill -STOP "$rpid_r"
contains "redis stopped: LIMIT.SET answers STOREDOWN" STOREDOWN \
  "$(on "$port_down_a" LIMIT.SET api rate=3/1h,key=explicit)"
adm=$(cat "$tmp/down_a.admin")
check "redis stopped: /api spend answers 503 within the store timeout" "503 store_down" \
  "$(api_spend '/api/limits/budget/spend?key=u1') $(jq -r .error "$tmp/spend.json")"
contains "and says why" "shared store is unavailable" "$(jq -r .message "$tmp/spend.json")"
kill -CONT "$rpid_r"
agree() {
  local s
  s=$(redis-cli -p "$rport_r" HGET 'sluice:{defs}:limits' api)
  [ -n "$s" ] && spec_is "$port_down_a" api "$s" && spec_is "$port_down_b" api "$s" &&
    spec_is "$port_redis_a" api "$s"
}
wait_until "redis back: every node holds the store's api" 10 agree

# ---- a Redis Cluster -------------------------------------------------------------------------

for m in m1 m2 m3; do
  start_cluster_master $m --cluster-require-full-coverage no
done
redis-cli --cluster create "127.0.0.1:$rport_m1" "127.0.0.1:$rport_m2" "127.0.0.1:$rport_m3" \
  --cluster-replicas 0 --cluster-yes >"$tmp/cluster.log" 2>&1
check "redis-cli --cluster create" 0 "$?"
wait_until "cluster_state:ok" 30 cluster_ok "$rport_m1" "$rport_m2" "$rport_m3"
suite cluster "redis-cluster://127.0.0.1:$rport_m1,127.0.0.1:$rport_m2"
# A LIMIT.SET that makes a type chain a global limit with a keyed one: both live in the queue's
# slot (every limit a type names does), so one script call decides the chain.
cat >"$tmp/chain.yaml" <<'YAML'
limits:
  perkey: {rate: 5/1h, key: explicit}
  pair: {rate: 9/1h, key: explicit}
types:
  job: {limits: [perkey, pair]}
YAML
node_conf=$tmp/chain.yaml start_node chain --store "redis-cluster://127.0.0.1:$rport_m1"
check "cluster: a LIMIT.SET making a type chain a global limit is taken" OK \
  "$(on "$port_chain" LIMIT.SET pair rate=9/1h)"
check "cluster: the chain decided in one slot" "1 1" \
  "$(redis-cli -p "$port_chain" THROTTLE job k | head -1) $(on "$port_chain" TASK.ADD job '{}' KEY k | grep -c '^[0-9]')"
check "cluster: a keyed change of it is fine" OK "$(on "$port_chain" LIMIT.SET pair rate=8/1h,key=explicit)"
check "cluster: the set lives in one slot" "rate=7/1m" \
  "$(redis-cli -c -p "$rport_m1" HGET 'sluice:{defs}:limits' extra)"

# ---- one PostgreSQL --------------------------------------------------------------------------

need_postgres
start_postgres p
suite pg "postgresql://sluice@127.0.0.1:$pgport_p/postgres"
psql=$(pg_bindir)/psql
[ -x "$psql" ] || psql=psql
check "pg: the set lives in one table" "rate=7/1m" \
  "$("$psql" "$pgconn_p" -Atc "SELECT spec FROM sluice_limit_def WHERE name = 'extra'")"
finish
