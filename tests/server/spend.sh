#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Seed 004's spend queries and spawn detail, and seed 003's recurring pace warning, end to end:
# the real `sluice serve` on ephemeral ports, driven by redis-cli and curl, to 127.0.0.1 only.
#
# - LIMIT.SPEND and /api/limits/NAME/spend?key=K give a user's daily spend (spent, budget,
#   remaining, reset) and change nothing; their errors (no limit, not a quota, no key, a tiered
#   quota without its tier);
# - a spawn refused by a total quota reports the workflow's current count and the attempted
#   addition (TASK.INFO current/attempted, its fail_message, /api/tasks/ID);
# - RECUR.ADD of a series faster than its type's limit logs one warning.
#
# Usage: bash tests/server/spend.sh PATH-TO-SLUICE SOURCE-DIR
# Prints one line per failed check and "N passed, N failed"; exits non-zero on any failure.
set -u
set -f

sluice=${1:?usage: spend.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"

need_tools spend.sh curl jq redis-cli

cat >"$tmp/sluice.yaml" <<'EOF'
limits:
  daily:
    quota: {budget: 100, period: day}
    key: input.user
    units: input.cost
    overflow: reject
  agent_spawns: {quota: 5/total, key: input.workflow_id, overflow: reject}
  slow: {rate: 1/1m}
  tiered:
    key: input.user
    tier:
      field: input.plan
      tiers:
        - {name: free, equals: free, quota: {budget: 10, period: month}}
        - {name: pro, equals: pro, quota: {budget: 1000, period: month}}
types:
  chat:
    limits: [daily]
  spawn:
    limits: [agent_spawns]
  tick:
    limits: [slow]
EOF

if ! "$sluice" check "$tmp/sluice.yaml" >"$tmp/check.out" 2>&1; then
  bad "the configuration does not check: $(cat "$tmp/check.out")"
  finish
  exit 1
fi

rm -f "$tmp/port" "$tmp/admin"
"$sluice" serve --port 0 --bind 127.0.0.1 --port-file "$tmp/port" --data "$tmp/data" \
  --admin-port 0 --admin-port-file "$tmp/admin" --config "$tmp/sluice.yaml" 2>"$tmp/log" &
pids+=("$!")
for _ in $(seq 1 300); do
  [ -s "$tmp/port" ] && [ -s "$tmp/admin" ] && break
  sleep 0.02
done
if [ ! -s "$tmp/admin" ]; then
  bad "the server did not start: $(cat "$tmp/log")"
  finish
  exit 1
fi
P=$(cat "$tmp/port")
A=$(cat "$tmp/admin")

get() {
  curl -s -o "$tmp/body" -w '%{http_code}' --max-time 60 "http://127.0.0.1:$A$1"
}
jqok() {
  if jq -e "$2" "$tmp/body" >/dev/null 2>&1; then ok; else bad "$1: $2 fails on $(head -c 400 "$tmp/body")"; fi
}
spend() { redis-cli -p "$P" LIMIT.SPEND "$@" | tr '\n' ' ' | sed 's/ *$//'; }

# ---- LIMIT.SPEND and the API ------------------------------------------------------------------
before=$(now_ms)
r=$(spend daily ann)
check "a fresh key" "spent 0 budget 100 remaining 100" "$(word "$r" 1) $(word "$r" 2) $(word "$r" 3) $(word "$r" 4) $(word "$r" 5) $(word "$r" 6)"
resets=$(word "$r" 10)
within "resets at the next UTC midnight" "$before" $((before + 86400000)) "$resets"
check "resets at a midnight" 0 $((resets % 86400000))

cli TASK.ADD chat '{"user":"ann","cost":30}' >/dev/null
check "a 30-unit chat runs" 1 "$(redis-cli -p "$P" TASK.GET chat | head -1 | grep -c .)"
r=$(spend daily ann)
check "spent after one chat" "30 70" "$(word "$r" 2) $(word "$r" 6)"
check "a read changes nothing" "$r" "$(spend daily ann)"
check "another user spent nothing" 0 "$(word "$(spend daily bob)" 2)"

check "the API" 200 "$(get '/api/limits/daily/spend?key=ann')"
jqok "spend document" '.limit == "daily" and .key == "ann" and .tier == null and .spent == 30 and .budget == 100 and .remaining == 70 and (.resets_at_ms | type) == "number" and .resets_at_ms > .period_start_ms' 
check "the API agrees with LIMIT.SPEND" "$resets" "$(jq -r .resets_at_ms "$tmp/body")"
check "API: no key" 400 "$(get '/api/limits/daily/spend')"
check "API: not a quota" 400 "$(get '/api/limits/slow/spend?key=x')"
check "API: no such limit" 404 "$(get '/api/limits/nope/spend?key=x')"
check "API: no such document" 404 "$(get '/api/limits/daily/other')"
check "API: tiered without tier" 400 "$(get '/api/limits/tiered/spend?key=x')"
check "API: tiered with tier" 200 "$(get '/api/limits/tiered/spend?key=x&tier=pro')"
jqok "tier budget" '.tier == "pro" and .budget == 1000 and .spent == 0'
check "API: unknown tier" 404 "$(get '/api/limits/tiered/spend?key=x&tier=gold')"
check "LIMIT.SPEND with TIER" "1000" "$(word "$(spend tiered x TIER pro)" 4)"
contains "LIMIT.SPEND tiered without TIER" "WRONGARGS" "$(spend tiered x)"
contains "LIMIT.SPEND not a quota" "WRONGARGS" "$(spend slow x)"
contains "LIMIT.SPEND no limit" "NOLIMIT" "$(spend nope x)"
contains "LIMIT.SPEND arity" "WRONGARGS" "$(spend daily)"

# ---- A refused spawn reports the figures ------------------------------------------------------
cli TASK.ADD spawn '{"workflow_id":"wf1"}' UNITS 4 >/dev/null
check "4 agents spawn" 1 "$(redis-cli -p "$P" TASK.GET spawn | head -1 | grep -c .)"
id=$(cli TASK.ADD spawn '{"workflow_id":"wf1"}' UNITS 2)
check "2 more are refused" "" "$(redis-cli -p "$P" TASK.GET spawn)"
check "refused" "failed ratelimited" "$(field TASK.INFO "$id" state) $(field TASK.INFO "$id" fail_reason)"
check "current and attempted" "4 2 5" "$(field TASK.INFO "$id" current) $(field TASK.INFO "$id" attempted) $(field TASK.INFO "$id" limit_value)"
contains "fail_message" '4 of 5 spent, 2 more asked' "$(field TASK.INFO "$id" fail_message)"
check "API task" 200 "$(get "/api/tasks/$id")"
jqok "API failure figures" '.failure.current == 4 and .failure.attempted == 2 and .failure.limit_value == 5'
check "spawn spend" "4 1" "$(word "$(spend agent_spawns wf1)" 2) $(word "$(spend agent_spawns wf1)" 6)"

# ---- Recurring pace warning -------------------------------------------------------------------
check "RECUR.ADD fast" "OK" "$(cli RECUR.ADD fast tick '{}' EVERY 1000)"
check "RECUR.ADD paced" "OK" "$(cli RECUR.ADD paced tick '{}' EVERY 60000)"
check "one warning, for the fast series" 1 "$(grep -c 'recurring series fast (type tick) is scheduled every 1.000 s but limit slow lets one occurrence through every 60.000 s' "$tmp/log")"
check "none for the paced one" 0 "$(grep -c 'recurring series paced' "$tmp/log")"

finish
