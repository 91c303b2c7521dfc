#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Shadow (dry-run) limits over the wire, with redis-cli and curl:
#
# - LIMIT.SET name ...,mode=shadow and LIMIT.SET name mode=enforce switch a limit live, keeping
#   its key state (a key spent while enforced is still spent in shadow, and again when enforced);
#   THROTTLE, LEASE.ACQUIRE and tasks pass a shadow limit's would-be denials, counted in INFO,
#   /metrics (decision="shadow_denied"), TASK.EXPLAIN and the SHADOW_DENIED events;
# - the mode survives a restart as LIMIT.SET overrides do, for a tiered limit of the file too;
# - the configuration's top-level `enabled: false` (CONFIG RELOAD) lets every limit through,
#   CL.THROTTLE included, still counting; `enabled: true` enforces again with the state counted.
# Rates are one an hour, so no slot comes back during the test however slow the machine.
# Traffic goes to 127.0.0.1 only.
#
# Usage: bash tests/server/shadow.sh PATH-TO-SLUICE SOURCE-DIR
# Prints one line per failed check and "N passed, N failed"; exits non-zero on any failure.
set -u
set -f

sluice=${1:?usage: shadow.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"
pid=


need_tools shadow.sh curl jq redis-cli

data="$tmp/data"
conf="$tmp/sluice.yaml"
write_conf() {
  cat >"$conf" <<EOF
enabled: $1
engine: {event_interval: 100ms}
limits:
  api: {rate: 1/1h, burst: 1, key: explicit}
  slots: {concurrency: 1, key: explicit}
  tiered:
    key: explicit
    tier:
      field: input.n
      tiers: [{name: one, rate: 1/1h, burst: 1}]
types:
  job: {limits: [api]}
EOF
}

# The server with its admin port; sets P, A and pid.
start_both() {
  rm -f "$tmp/port" "$tmp/admin"
  "$sluice" serve --port 0 --bind 127.0.0.1 --port-file "$tmp/port" --admin-port 0 \
    --admin-port-file "$tmp/admin" --config "$conf" --data "$data" 2>>"$tmp/log" &
  pid=$!
  for _ in $(seq 1 500); do
    [ -s "$tmp/port" ] && [ -s "$tmp/admin" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  if [ ! -s "$tmp/admin" ]; then
    bad "the server did not start: $(tail -5 "$tmp/log")"
    finish
    exit 1
  fi
  P=$(cat "$tmp/port")
  A=$(cat "$tmp/admin")
}
metric() { curl -s --max-time 60 "http://127.0.0.1:$A/metrics" | grep -F "$1" | grep -v '^#' | awk '{ print $2 }'; }
info_field() { redis-cli -p "$P" INFO "$1" | tr -d '\r' | awk -F: -v f="$2" '$1 == f { print substr($0, length(f) + 2) }'; }
# limit_info NAME FIELD: one field of INFO's limit_NAME line.
limit_info() { info_field limits "limit_$1" | tr ',' '\n' | awk -F= -v f="$2" '$1 == f { print $2 }'; }

write_conf true
start_both

# ---- THROTTLE through a live mode switch --------------------------------------------------------

check "first call is allowed" "1 1 0 0 3600000" "$(cli THROTTLE api k | cut -d' ' -f1-5)"
check "the second is denied" "0 api" "$(cli THROTTLE api k | awk '{ print $1, $6 }')"
check "switch to shadow" "OK" "$(cli LIMIT.SET api 'rate=1/1h,burst=1,key=explicit,mode=shadow')"
contains "LIMIT.GET shows the mode" "mode=shadow" "$(cli LIMIT.GET api)"
check "a shadow limit lets the spent key through" "1" "$(cli THROTTLE api k | cut -d' ' -f1)"
check "peeks too" "1" "$(cli THROTTLE api k PEEK | cut -d' ' -f1)"
check "INFO: mode" "shadow" "$(limit_info api mode)"
check "INFO: denied while enforced" "1" "$(limit_info api denied)"
check "INFO: shadow_denied" "1" "$(limit_info api shadow_denied)"
check "INFO: throttle_shadow_denied (the peek's answer too)" "2" "$(info_field stats throttle_shadow_denied)"
check "metrics: shadow_denied" "1" \
  "$(metric 'sluice_limit_decisions_total{limit="api",kind="rate",decision="shadow_denied"}')"
check "metrics: the limit is shadow" "1" "$(metric 'sluice_limit_shadow{limit="api",kind="rate"}')"
stats=$(curl -s --max-time 60 "http://127.0.0.1:$A/api/stats")
check "/api/stats: mode and would-be denials" "shadow 1" \
  "$(echo "$stats" | jq -r '.limits[] | select(.name == "api") | "\(.mode) \(.shadow_denied_total)"')"
check "a fresh key is charged in shadow" "1 1 0 0 3600000" "$(cli THROTTLE api fresh | cut -d' ' -f1-5)"
check "and spent after" "1" "$(cli THROTTLE api fresh | cut -d' ' -f1)"
check "INFO: allowed" "2" "$(limit_info api allowed)"
check "INFO: shadow_denied after" "2" "$(limit_info api shadow_denied)"
check "mode=enforce alone switches back" "OK" "$(cli LIMIT.SET api mode=enforce)"
contains "spec without the mode" "rate=1/1h,burst=1,key=explicit" "$(cli LIMIT.GET api)"
lacks "spec without the mode" "mode=shadow" "$(cli LIMIT.GET api)"
check "the state counted in shadow is enforced" "0 api" "$(cli THROTTLE api fresh | awk '{ print $1, $6 }')"
check "the key spent before is still spent" "0 api" "$(cli THROTTLE api k | awk '{ print $1, $6 }')"
check "INFO: mode back" "enforce" "$(limit_info api mode)"
contains "mode= of an unknown limit" "NOLIMIT" "$(cli LIMIT.SET nope mode=shadow)"
contains "a bad mode" "mode=enforce or mode=shadow" "$(cli LIMIT.SET api 'rate=1/1h,mode=dry')"

# ---- Leases of a shadow concurrency limit -------------------------------------------------------

h1=$(cli LEASE.ACQUIRE slots k | awk '{ print $2 }')
contains "the cap is enforced" "RATELIMITED" "$(cli LEASE.ACQUIRE slots k)"
check "slots in shadow" "OK" "$(cli LIMIT.SET slots mode=shadow)"
h2=$(cli LEASE.ACQUIRE slots k | awk '{ print $2 }')
check "a shadow pass holds no lease" "0" "${h2##*/}"
check "its release is harmless" "OK" "$(cli LEASE.RELEASE "$h2")"
check "the real lease is still held" "OK" "$(cli LEASE.RELEASE "$h1")"

# ---- Tasks --------------------------------------------------------------------------------------

check "api in shadow again" "OK" "$(cli LIMIT.SET api mode=shadow)"
ids=()
for i in 1 2 3; do ids+=("$(cli TASK.ADD job '{}' KEY t)"); done
got=$(redis-cli -p "$P" TASK.GET job COUNT 10 | awk 'NR % 5 == 1' | tr '\n' ' ' | sed 's/ *$//')
check "every task runs at once" "${ids[*]}" "$got"
for id in "${ids[@]}"; do cli TASK.ACK "$id" >/dev/null; done
check "two of them were would-be denials" "4" "$(limit_info api shadow_denied)"
contains "TASK.EXPLAIN says so" 'Shadow limit "api"' "$(field TASK.EXPLAIN "${ids[2]}" text)"
sd=$(info_field stats throttle_shadow_denied)
out=$(redis-cli -p "$P" --no-raw THROTTLE job k | tr '\n' ' ')
contains "THROTTLE of the type passes its shadow chain" "1) (integer) 1 " "$out"
contains "with no limit named" "6) (nil)" "$out"
check "and is counted" "$((sd + 1))" "$(info_field stats throttle_shadow_denied)"
# The first event is told at once, the second in the summary at the end of its interval.
two_events() { [ "$(metric 'sluice_events_total{event="shadow_denied"}')" = 2 ]; }
wait_until "two SHADOW_DENIED events" 30 two_events
ok

# ---- A tiered limit of the file, and a restart --------------------------------------------------

check "a tiered limit switches with mode= alone" "OK" "$(cli LIMIT.SET tiered mode=shadow)"
contains "its LIST line" "tiered by input.n (1 tiers), mode=shadow" "$(cli LIMIT.LIST)"
kill -TERM "$pid"
wait "$pid"
check "SIGTERM exits 0" 0 "$?"
pid=
start_both
contains "the mode survives a restart" "mode=shadow" "$(cli LIMIT.GET api)"
contains "a tiered one's too" "mode=shadow" "$(cli LIMIT.GET tiered)"
check "INFO after the restart" "shadow" "$(limit_info tiered mode)"

# ---- The global switch --------------------------------------------------------------------------

check "api enforced" "OK" "$(cli LIMIT.SET api mode=enforce)"
check "spend k2" "1" "$(cli THROTTLE api k2 | cut -d' ' -f1)"
check "k2 denied" "0" "$(cli THROTTLE api k2 | cut -d' ' -f1)"
check "CL.THROTTLE spends its key" "0" "$(cli CL.THROTTLE c 0 1 3600 | cut -d' ' -f1)"
check "CL.THROTTLE denies" "1" "$(cli CL.THROTTLE c 0 1 3600 | cut -d' ' -f1)"
write_conf false
contains "reload with enabled: false" "OK" "$(cli CONFIG RELOAD)"
check "INFO limits_enabled" "0" "$(info_field limits limits_enabled)"
check "metrics: limits off" "0" "$(metric 'sluice_limits_enabled ')"
check "every limit lets through" "1" "$(cli THROTTLE api k2 | cut -d' ' -f1)"
check "INFO: effective mode" "shadow" "$(limit_info api mode)"
check "CL.THROTTLE too" "0" "$(cli CL.THROTTLE c 0 1 3600 | cut -d' ' -f1)"
write_conf true
contains "reload with enabled: true" "OK" "$(cli CONFIG RELOAD)"
check "INFO limits_enabled on" "1" "$(info_field limits limits_enabled)"
check "enforced again, state kept" "0" "$(cli THROTTLE api k2 | cut -d' ' -f1)"
check "CL.THROTTLE enforced again" "1" "$(cli CL.THROTTLE c 0 1 3600 | cut -d' ' -f1)"

kill -TERM "$pid"
wait "$pid"
check "SIGTERM exits 0" 0 "$?"
pid=
finish
