#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The reply of a LEASE.ACQUIRE or LEASE.RENEW is the promise (issue 16; docs/durability.md,
# "Leases and group slots"): under `durability: always` it leaves only once the lease's key state
# is committed, so a kill -9 right after the reply forgets nothing. Unlike leases.sh, no crash here
# waits for INFO to report nothing left to write.
#
# - kill -9 at once after an ACQUIRE's reply, ten times over: the restarted server still counts
#   the lease (the limit admits only what is left) and the old handle releases it;
# - kill -9 at once after a RENEW's reply, three times: the lease outlives the end it had before
#   the RENEW (the wall clock passes that end while the server is down);
# - a pipeline of 16 ACQUIREs shares a commit (not one per lease);
# - a full disk (the fault VFS: --enable-debug-commands, DEBUG FAULT FULL): an ACQUIRE is answered
#   -IOERR and its lease is released (its units are free at once, and after a restart); a RENEW
#   is answered -IOERR and the lease stays its holder's; a RELEASE is answered OK (it waits for no
#   commit); a denied ACQUIRE is still RATELIMITED;
# - under `durability: batch` an ACQUIRE waits for no commit (the window stays documented).
# Traffic goes to 127.0.0.1 only.
#
# Usage: bash tests/server/lease_durable.sh PATH-TO-SLUICE SOURCE-DIR
# Prints one line per failed check and "N passed, N failed"; exits non-zero on any failure.
set -u
set -f

sluice=${1:?usage: lease_durable.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"
pid=

data="$tmp/data"
conf="$tmp/sluice.yaml"

cat >"$conf" <<'YAML'
limits:
  slots:
    concurrency: 2
    key: explicit
  many:
    concurrency: 100
    key: explicit
YAML

# raw BYTES: sends BYTES (printf %b escapes) on a fresh connection, prints what comes back until
# the server closes it (after a QUIT) or 30 seconds pass (a deadline, not a pace).
raw() {
  exec 3<>"/dev/tcp/127.0.0.1/$P" || return
  printf '%b' "$1" >&3 2>/dev/null
  timeout 30 cat <&3 | tr -d '\r'
  exec 3<&- 3>&-
}

# ---- kill -9 right after an ACQUIRE's reply -----------------------------------------------------

start_single
for i in $(seq 1 10); do
  h=$(word "$(cli LEASE.ACQUIRE slots "k$i" TTL 600000)" 2)
  crash
  contains "round $i: the lease" "slots/" "$h"
  start_single
  contains "round $i: after kill -9 the lease still counts" "RATELIMITED" \
    "$(cli LEASE.ACQUIRE slots "k$i" UNITS 2 TTL 600000)"
  check "round $i: its old handle releases it" OK "$(cli LEASE.RELEASE "$h")"
  h2=$(word "$(cli LEASE.ACQUIRE slots "k$i" UNITS 2 TTL 600000)" 2)
  contains "round $i: then both units are free" "slots/" "$h2"
  check "round $i: the new holder releases" OK "$(cli LEASE.RELEASE "$h2")"
done

# ---- kill -9 right after a RENEW's reply --------------------------------------------------------

# The lease's first end lies 1.5 s after the ACQUIRE; the RENEW moves it 600 s on; the restart
# waits for the wall clock to pass the first end (a deadline on the clock, not a guess at how long
# anything takes), so only a durable RENEW keeps the lease.
past() { [ "$(now_ms)" -gt "$1" ]; }
for i in 1 2 3; do
  t0=$(now_ms)
  h=$(word "$(cli LEASE.ACQUIRE slots "r$i" UNITS 2 TTL 1500)" 2)
  check "renew $i: renewed" 600000 "$(cli LEASE.RENEW "$h" TTL 600000)"
  crash
  contains "renew $i: the lease" "slots/" "$h"
  wait_until "renew $i: the wall clock passes the lease's first end" 20 past $((t0 + 1600))
  start_single
  contains "renew $i: after kill -9 the renewed lease still counts" "RATELIMITED" \
    "$(cli LEASE.ACQUIRE slots "r$i" TTL 600000)"
  check "renew $i: its old handle releases it" OK "$(cli LEASE.RELEASE "$h")"
done

# ---- A pipeline shares its commit ---------------------------------------------------------------

# The 16 commands reach the server in one write (cat of a file; bash's printf writes line by
# line), so they run in one loop turn and their replies wait for one commit. The key timer may
# add one commit of its own meanwhile.
printf 'LEASE.ACQUIRE many p TTL 600000\r\n%.0s' $(seq 1 16) >"$tmp/pipeline"
printf 'QUIT\r\n' >>"$tmp/pipeline"
for i in 1 2 3; do
  before=$(info commits)
  exec 3<>"/dev/tcp/127.0.0.1/$P"
  cat "$tmp/pipeline" >&3
  out=$(timeout 30 cat <&3 | tr -d '\r')
  exec 3<&- 3>&-
  check "pipeline $i: 16 leases" 16 "$(echo "$out" | grep -c '^many/')"
  after=$(info commits)
  echo "# pipeline $i of 16 ACQUIREs: $((after - before)) commits"
  within "pipeline $i: the 16 ACQUIREs share a commit" 1 2 $((after - before))
done
stop_single

# ---- A full disk ----------------------------------------------------------------------------------

start_single --enable-debug-commands
hk=$(word "$(cli LEASE.ACQUIRE slots f TTL 600000)" 2)
contains "a lease before the fault" "slots/" "$hk"
check "DEBUG FAULT FULL on" OK "$(cli DEBUG FAULT FULL on)"
check "disk full: ACQUIRE is answered -IOERR" "IOERR disk full" \
  "$(cli LEASE.ACQUIRE slots f TTL 600000)"
# Had the refused lease stayed, the limit (2) would be full: the next ACQUIRE is granted, and
# refused again by the disk.
check "disk full: the refused lease was released" "IOERR disk full" \
  "$(cli LEASE.ACQUIRE slots f TTL 600000)"
check "disk full: RENEW is answered -IOERR" "IOERR disk full" "$(cli LEASE.RENEW "$hk" TTL 600000)"
# (On a limit with room: until its commit fails, a refused lease holds its unit like any other.)
out=$(raw 'LEASE.ACQUIRE many f TTL 600000\r\nPING\r\nLEASE.ACQUIRE many f TTL 600000\r\nQUIT\r\n')
check "disk full: a pipeline keeps its order, each ACQUIRE refused" \
  "-IOERR disk full +PONG -IOERR disk full +OK" "$(echo $out)"
check "DEBUG FAULT FULL off" OK "$(cli DEBUG FAULT FULL off)"
contains "space is back: one unit is free" "slots/" "$(cli LEASE.ACQUIRE slots g TTL 600000)"
contains "space is back: the other is the first lease's" "RATELIMITED" \
  "$(cli LEASE.ACQUIRE slots f UNITS 2 TTL 600000)"
check "the RENEW refused by the disk left the lease its holder's" 600000 \
  "$(cli LEASE.RENEW "$hk" TTL 600000)"
check "DEBUG FAULT FULL on again" OK "$(cli DEBUG FAULT FULL on)"
check "disk full: RELEASE waits for no commit" OK "$(cli LEASE.RELEASE "$hk")"
contains "disk full: a denied ACQUIRE is RATELIMITED, not -IOERR" "RATELIMITED" \
  "$(cli LEASE.ACQUIRE slots g UNITS 3 TTL 600000)"
check "DEBUG FAULT FULL off again" OK "$(cli DEBUG FAULT FULL off)"
wait_until "the release is written" 20 durable_now
crash
start_single --enable-debug-commands
contains "after kill -9 no refused lease came back" "slots/" \
  "$(cli LEASE.ACQUIRE slots f UNITS 2 TTL 600000)"
stop_single

# ---- durability batch ---------------------------------------------------------------------------

start_single --durability batch --batch-ms 50
out=$(raw "$(printf 'LEASE.ACQUIRE many b TTL 600000\\r\\n%.0s' $(seq 1 4))QUIT\r\n")
check "batch: the ACQUIREs are answered" 4 "$(echo "$out" | grep -c '^many/')"
check "batch: INFO durability" batch "$(info durability)"
stop_single

finish
