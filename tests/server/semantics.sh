#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# End-to-end checks of the dispatch semantics of issue 13 against the real `sluice serve`,
# driven by redis-cli and raw writes: LEASE.RELEASE wakes a task parked on the limit at once;
# max_parked refuses only what would park; the ack of a task never delivered says so;
# THROTTLE on a tiered type; CONFIG RELOAD and LIMIT.SET overrides; missing_key: skip.
# Commands whose timing matters go in one write (one loop turn, one time); waits are deadlines.
#
# Usage: bash tests/server/semantics.sh PATH-TO-SLUICE SOURCE-DIR
set -u
set -f

sluice=${1:?usage: semantics.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"

# raw BYTES: sends BYTES (printf %b escapes) on a fresh connection and prints what comes back
# until the server closes it (after a QUIT; 30 s at most, a deadline).
raw() {
  exec 3<>"/dev/tcp/127.0.0.1/$P" || return
  printf '%b' "$1" >&3 2>/dev/null
  timeout 30 cat <&3 | tr -d '\r'
  exec 3<&- 3>&-
}

cat >"$tmp/sluice.yaml" <<'EOF'
limits:
  slots:
    concurrency: 1
types:
  one:
    limits: [slots]
EOF
start main --config "$tmp/sluice.yaml"
P=$port_main

# ---- 1. LEASE.RELEASE wakes the task parked on the limit --------------------------------------

# A caller holds the only slot for a minute; a task submitted now parks (all in one turn).
raw 'LEASE.ACQUIRE slots x TTL 60000\r\nTASK.ADD one {}\r\nTASK.GET one TIMEOUT 0\r\nQUIT\r\n' |
  resp_flat >"$tmp/flat"
lease=$(rfield 1 lease)
id=$(rget 2)
check "task parked behind the outside lease" "" "$(rget 3)"
check "TASK.INFO parked" "parked" "$(field TASK.INFO "$id" state)"
# Released: the very next TASK.GET (same write) gets it, well before the lease's minute.
raw "LEASE.RELEASE $lease\r\nTASK.GET one TIMEOUT 10000\r\nQUIT\r\n" | resp_flat >"$tmp/flat"
check "LEASE.RELEASE" "OK" "$(rget 1)"
check "released lease wakes the parked task" "$id" "$(word "$(rget 2)" 1)"

# ---- 3. max_parked refuses only what would park -----------------------------------------------

cat >"$tmp/cap.yaml" <<'EOF'
engine:
  max_parked: 1
limits:
  per_user:
    rate: 1/1h
    key: explicit
types:
  r:
    limits: [per_user]
EOF
start cap --config "$tmp/cap.yaml"
P=$port_cap
raw 'TASK.ADD r {} KEY a\r\nTASK.ADD r {} KEY a\r\nTASK.GET r COUNT 5 TIMEOUT 0\r\nTASK.ADD r {} KEY a\r\nTASK.ADD r {} KEY b\r\nTASK.GET r COUNT 5 TIMEOUT 0\r\nQUIT\r\n' |
  resp_flat >"$tmp/flat"
check "max_parked: first task runs" "1" "$(word "$(rget 3)" 1)"
contains "max_parked: a task that would park is refused" "BUSY" "$(rget 4)"
check "max_parked: another key is accepted" "3" "$(rget 5)"
check "max_parked: and runs at once" "3" "$(word "$(rget 6)" 1)"
contains "max_parked: one parked" "tasks_parked:1" "$(cli INFO)"

# ---- 4. Errors that say what happened ----------------------------------------------------------

P=$port_main
id=$(cli TASK.ADD one '{}') # parks behind the running task: never delivered
contains "ACK of an attempt never delivered" "was never delivered" "$(cli TASK.ACK "$id" ATTEMPT 1)"

# THROTTLE on the example config's main type: its tiered limit takes TIER.
start ex --config "$2/examples/sluice.yaml"
P=$port_ex
contains "THROTTLE tiered without TIER names it" "pass TIER v" "$(cli THROTTLE llm.chat u1 PEEK)"
check "THROTTLE the main type with TIER" "1" "$(word "$(cli THROTTLE llm.chat u1 TIER 2 PEEK)" 1)"
check "THROTTLE a tiered limit: the heavy tier" "1 5" "$(cli THROTTLE workflow_tier u1 TIER 7 | cut -d' ' -f1-2)"
contains "THROTTLE numeric tier needs a number" "TIER takes an integer" "$(cli THROTTLE workflow_tier u1 TIER x)"

# CONFIG RELOAD: the file wins over LIMIT.SET for the limits it declares, and says so.
P=$port_cap
check "LIMIT.SET a declared limit" "OK" "$(cli LIMIT.SET per_user rate=5/1h,key=explicit)"
check "CONFIG RELOAD names the replaced override" "OK the file replaced LIMIT.SET changes of: per_user" "$(cli CONFIG RELOAD)"
check "CONFIG RELOAD again: nothing replaced" "OK" "$(cli CONFIG RELOAD)"

# ---- 8. missing_key: skip -----------------------------------------------------------------------

cat >"$tmp/skip.yaml" <<'EOF'
limits:
  per_user:
    rate: 1/1h
    key: input.user
    missing_key: skip
types:
  s:
    limits: [per_user]
EOF
start skip --config "$tmp/skip.yaml"
P=$port_skip
# Two tasks of u1 (one runs, one parks) and two without a user (both run), in one turn.
# (Inline commands: a JSON payload goes in single quotes.)
raw "TASK.ADD s '{\"user\":\"u1\"}'\r\nTASK.ADD s '{\"user\":\"u1\"}'\r\nTASK.ADD s {}\r\nTASK.ADD s '{\"user\":\"\"}'\r\nTASK.GET s COUNT 10 TIMEOUT 0\r\nTASK.INFO 2\r\nQUIT\r\n" |
  resp_flat >"$tmp/flat"
check "missing_key skip: the keyless tasks run beside u1's first" "1 3 4" "$(rget 5 | awk '{ for (i = 1; i <= NF; i += 5) printf "%s%s", (i > 1 ? " " : ""), $i }')"
check "missing_key skip: u1's second parks" "parked" "$(rfield 6 state)"
check "missing_key skip: THROTTLE with an empty key is allowed" "1" "$(word "$(cli THROTTLE per_user '')" 1)"
contains "missing_key skip: LIMIT.GET shows it" "missing_key=skip" "$(cli LIMIT.GET per_user)"
finish
