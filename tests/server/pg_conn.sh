#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The PostgreSQL store's connection (src/store/pg_conn.c) against a real PostgreSQL: the checks
# of sluice_pg_conn_check (tests/tools/pg_conn_check.c, built next to the sluice binary), one mode
# at a time, on a throwaway cluster (start_postgres) that this script freezes and restarts under
# it:
#   timeout  (no server) a listener that never answers and a closed port: never UP, retried;
#   basic    UP with the schema migrated, 1000 pipelined calls in order, a failing call among
#            good ones, NOTIFY, refusals, pgconn_free in every state;
#   stall    the postmaster and all its processes SIGSTOPped (freeze_postgres) while UP: calls
#            time out, attempts fail at their deadline; SIGCONT: UP again by itself;
#   restart  the postmaster stopped (immediate shutdown) with calls in flight and started again
#            on the same port: every call answered, none a success, UP again, LISTENing again;
#   newer    a database whose schema is newer than this build's: REFUSED with the message.
#
# Skipped (exit 77) only when PostgreSQL's server binaries are not installed (after the timeout
# mode, which needs none).
#
# Usage: bash tests/server/pg_conn.sh PATH-TO-SLUICE SOURCE-DIR
set -u

sluice=${1:?usage: pg_conn.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"
need_helper sluice_pg_conn_check

# mode MODE: runs one mode to its end; its lines go to the log, its failures count here.
mode() {
  local out
  out=$("$helper" "${pgconn_conn:-}" "$1" 2>&1)
  check "mode $1 (exit status)" 0 "$?"
  echo "$out" | sed "s/^/  [$1] /"
}

# background MODE: starts a mode that talks with this script through its output file ($tmp/MODE.out)
# and SIGUSR1; sets hpid.
background() {
  "$helper" "$pgconn_conn" "$1" >"$tmp/$1.out" 2>&1 &
  hpid=$!
  pids+=("$hpid")
}
# said WORD: the background mode $bg printed WORD, or ended.
said() { grep -qx "$1" "$tmp/$bg.out" || ! kill -0 "$hpid" 2>/dev/null; }
# ended MODE: waits for the background mode and counts its result.
ended() {
  wait "$hpid"
  check "mode $1 (exit status)" 0 "$?"
  sed "s/^/  [$1] /" "$tmp/$1.out"
}

mode timeout

need_postgres
start_postgres conn
psql=$(pg_bindir)/psql
[ -x "$psql" ] || psql=psql

mode basic

bg=stall
background stall
wait_until "stall: READY" 30 said READY
freeze_postgres conn
kill -USR1 "$hpid"
wait_until "stall: STALLED" 60 said STALLED
thaw_postgres conn
ended stall

bg=restart
background restart
wait_until "restart: READY" 30 said READY
restart_postgres conn
ended restart

"$psql" "$pgconn_conn" -qc 'UPDATE sluice_schema SET version = 99'
mode newer
"$psql" "$pgconn_conn" -qc 'UPDATE sluice_schema SET version = 1'
finish
