#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What a restart must not forget (docs/durability.md), end to end with redis-cli across kill -9:
#
# - CL.THROTTLE's on-the-fly parameter sets: a key that spent its burst (max_burst 2, 1 per hour)
#   is still denied after kill -9 once the key timer's commit ran, with retry_after at most one
#   slot (an hour, so that no restart, however slow the machine, lasts one);
# - lease handle generations: a handle issued before kill -9, used after the restart against a
#   new holder's lease of the same core id, is refused (NOLEASE) and the new lease is untouched.
#   (Leases are kept across restarts now, tests/server/leases.sh: this one is taken with a TTL of
#   1 ms, so it has ended by the restart whether or not it was written, and its id is issued
#   again, as that of a lease the crash lost would be.)
# Timing checks are loose: the machine may be busy. Traffic goes to 127.0.0.1 only.
#
# Usage: bash tests/server/forget.sh PATH-TO-SLUICE SOURCE-DIR
# Prints one line per failed check and "N passed, N failed"; exits non-zero on any failure.
set -u
set -f

sluice=${1:?usage: forget.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"
pid=

data="$tmp/data"
conf="$tmp/sluice.yaml"

# send_then_wait_commit CMD...: sends the commands and INFO persistence in one write (the server
# runs them in one turn, so INFO counts the commits before them), then waits for the next commit,
# which takes them along, however late it comes on a busy machine. A commit already in flight
# when they ran does not carry them: wait until a commit finished since, no key is left dirty and
# no commit is in flight.
send_then_wait_commit() {
  local c1 fd
  exec {fd}<>"/dev/tcp/127.0.0.1/$P"
  printf '%s\r\nINFO persistence\r\nQUIT\r\n' "$*" >&"$fd"
  c1=$(timeout 30 cat <&"$fd" | tr -d '\r' | awk -F: '$1 == "commits" { print $2 }')
  exec {fd}>&-
  committed_since() {
    [ "$(info commits)" -gt "$c1" ] && [ "$(info dirty_keys)" = 0 ] &&
      [ "$(info commit_in_flight)" = 0 ]
  }
  wait_until "the commit after [$*]" 20 committed_since
}

cat >"$conf" <<'EOF'
limits:
  spare:
    rate: 10/1s
  slots:
    concurrency: 1
EOF

# ---- CL.THROTTLE across kill -9 -----------------------------------------------------------------

start_single
for i in 1 2; do
  check "CL.THROTTLE $i of the burst" 0 "$(word "$(cli CL.THROTTLE ck 2 1 3600)" 1)"
done
send_then_wait_commit "CL.THROTTLE ck 2 1 3600"
check "CL.THROTTLE: the 4th is denied" 1 "$(word "$(cli CL.THROTTLE ck 2 1 3600)" 1)"
crash
start_single
out=$(cli CL.THROTTLE ck 2 1 3600)
check "CL.THROTTLE after kill -9: still denied (no fresh burst)" 1 "$(word "$out" 1)"
within "CL.THROTTLE after kill -9: retry_after at most one slot" 1 3600 "$(word "$out" 4)"
check "CL.THROTTLE after kill -9: another key has its burst" 0 \
  "$(word "$(cli CL.THROTTLE other 2 1 3600)" 1)"
stop_single

# ---- Lease handles across kill -9 -----------------------------------------------------------------

start_single
h1=$(word "$(cli LEASE.ACQUIRE slots k TTL 1)" 2)
contains "LEASE.ACQUIRE before the crash gives a handle" "slots/" "$h1"
crash
start_single
h2=$(word "$(cli LEASE.ACQUIRE slots k TTL 600000)" 2)
contains "LEASE.ACQUIRE after the restart gives a handle" "slots/" "$h2"
check "the new lease has the same core id (the collision the generation prevents)" \
  "${h1##*/}" "${h2##*/}"
check "the handles differ" 1 "$([ "$h1" != "$h2" ] && echo 1 || echo 0)"
contains "a stale RELEASE is refused" "NOLEASE" "$(cli LEASE.RELEASE "$h1")"
contains "a stale RENEW is refused" "NOLEASE" "$(cli LEASE.RENEW "$h1" TTL 1)"
contains "the new holder's lease still holds the key" "RATELIMITED" \
  "$(cli LEASE.ACQUIRE slots k TTL 600000)"
check "the new holder renews its lease" 600000 "$(cli LEASE.RENEW "$h2" TTL 600000)"
check "the new holder releases its lease" OK "$(cli LEASE.RELEASE "$h2")"
contains "then the key is free" "slots/" "$(cli LEASE.ACQUIRE slots k TTL 600000)"
stop_single

finish
