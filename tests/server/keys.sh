#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# End-to-end checks of issue 13 items 6 and 7 against the real `sluice serve`, with redis-cli and
# curl: a limit keyed by a template of two input fields, and per-key overrides of a named limit
# (from the file, and live with LIMIT.KEY / LIMIT.KEYDEL) as THROTTLE, LEASE.*, LIMIT.GET, INFO
# and the admin API see them. What survives a restart is in restart.sh.
#
# Usage: bash tests/server/keys.sh PATH-TO-SLUICE SOURCE-DIR
set -u
set -f

sluice=${1:?usage: keys.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"

cat >"$tmp/sluice.yaml" <<'EOF2'
limits:
  wf:
    rate: 1/1h
    key: "{input.user}:{input.tag}"
  api:
    rate: 1/1h
    key: explicit
    overrides:
      vip: {rate: 3/1h}
  slots:
    concurrency: 1
    key: explicit
types:
  job:
    limits: [wf]
EOF2
start main --config "$tmp/sluice.yaml" --admin-port 0 --admin-port-file "$tmp/main.admin"
P=$port_main
A=$(cat "$tmp/main.admin" 2>/dev/null)

# ---- Key templates -----------------------------------------------------------------------------

id1=$(cli TASK.ADD job '{"user":"ann","tag":"etl"}')
id2=$(cli TASK.ADD job '{"tag":"etl","user":"ann"}')
id3=$(cli TASK.ADD job '{"user":"ann","tag":"ml"}')
got=$(cli TASK.GET job COUNT 10 TIMEOUT 0 | awk '{ for (i = 1; i <= NF; i += 5) printf "%s ", $i }')
check "template: ann:etl once, ann:ml beside it" "$id1 $id3 " "$got"
check "template: the second ann:etl parks" "parked" "$(field TASK.INFO "$id2" state)"
contains "template: a missing field is refused, named" "tag" "$(cli TASK.ADD job '{"user":"ann"}')"
contains "template: LIMIT.GET shows it" "key={input.user}:{input.tag}" "$(cli LIMIT.GET wf)"
contains "template: LIMIT.SET refuses a bad one" "never closed" \
  "$(cli LIMIT.SET wf2 'rate=1/1s,key={input.user')"

# ---- Overrides from the file -------------------------------------------------------------------

for i in 1 2 3; do
  check "file override: vip $i of 3" 1 "$(word "$(cli THROTTLE api vip)" 1)"
done
check "file override: vip's 4th is denied" 0 "$(word "$(cli THROTTLE api vip)" 1)"
check "file override: another key has 1" 1 "$(word "$(cli THROTTLE api bob)" 1)"
check "file override: and no more" 0 "$(word "$(cli THROTTLE api bob)" 1)"
check "LIMIT.GET spec" "rate=1/1h,key=explicit,override.vip=rate=3/1h" "$(field LIMIT.GET api spec)"
contains "INFO counts the keys of every core" "limit_api:kind=rate,tiers=0,keys=2," "$(cli INFO limits)"
contains "INFO counts overrides (2)" ",overrides=1" "$(cli INFO limits)"

# ---- Live: LIMIT.KEY and LIMIT.KEYDEL ----------------------------------------------------------

check "LIMIT.KEY gives bob his own limit" "OK" "$(cli LIMIT.KEY api bob rate=2/1h)"
check "bob starts afresh on it" 1 "$(word "$(cli THROTTLE api bob)" 1)"
check "vip's state did not move" 0 "$(word "$(cli THROTTLE api vip)" 1)"
check "spec lists both, by key" "rate=1/1h,key=explicit,override.bob=rate=2/1h,override.vip=rate=3/1h" \
  "$(field LIMIT.GET api spec)"
contains "LIMIT.KEY: another kind is refused" "a rate limit's override is a rate limit too" \
  "$(cli LIMIT.KEY api bob window=2/1h)"
contains "LIMIT.KEY: a limit without keys is refused" "keyed limit" \
  "$(cli LIMIT.SET g rate=1/1s; cli LIMIT.KEY g k rate=2/1s)"
contains "LIMIT.KEY: unknown limit" "NOLIMIT" "$(cli LIMIT.KEY nope k rate=2/1s)"
contains "LIMIT.KEY: bad spec" "WRONGARGS missing period" "$(cli LIMIT.KEY api k rate=oops)"
check "LIMIT.KEYDEL" 1 "$(cli LIMIT.KEYDEL api bob)"
check "LIMIT.KEYDEL of a key without one" 0 "$(cli LIMIT.KEYDEL api bob)"
check "bob is back on the limit's own, afresh" 1 "$(word "$(cli THROTTLE api bob)" 1)"
check "LIMIT.RESET of vip resets its own core" 1 "$(cli LIMIT.RESET api vip)"
check "vip has its 3 again" 1 "$(word "$(cli THROTTLE api vip)" 1)"

# ---- Leases on an overridden key ---------------------------------------------------------------

check "LIMIT.KEY on a concurrency limit" "OK" "$(cli LIMIT.KEY slots vip concurrency=2)"
h1=$(word "$(cli LEASE.ACQUIRE slots vip)" 2)
h2=$(word "$(cli LEASE.ACQUIRE slots vip)" 2)
case $h1 in slots/=vip/*) ok ;; *) bad "lease handle names the key's core: [$h1]" ;; esac
contains "a third is denied, against the key's own limit" "RATELIMITED limit=slots kind=concurrency key=vip limit_value=2" "$(cli LEASE.ACQUIRE slots vip)"
check "other keys keep 1" 0 "$(cli LEASE.ACQUIRE slots x | grep -c RATELIMITED)"
contains "and not 2" "RATELIMITED" "$(cli LEASE.ACQUIRE slots x)"
check "LEASE.RENEW on the key's core" 1 "$([ "$(cli LEASE.RENEW "$h1")" -gt 0 ] && echo 1)"
check "LEASE.RELEASE on the key's core" "OK" "$(cli LEASE.RELEASE "$h2")"
check "its slot is free" 0 "$(cli LEASE.ACQUIRE slots vip | grep -c RATELIMITED)"

# ---- The admin API -----------------------------------------------------------------------------

if [ -n "$A" ] && command -v curl >/dev/null && command -v jq >/dev/null; then
  body=$(curl -s --max-time 60 "http://127.0.0.1:$A/api/limits/api")
  check "API: overrides" '[{"key":"vip","spec":"rate=3/1h"}]' "$(echo "$body" | jq -c .overrides)"
  check "API: no overrides field without any" "null" \
    "$(curl -s --max-time 60 "http://127.0.0.1:$A/api/limits/wf" | jq -c .overrides)"
fi
finish
