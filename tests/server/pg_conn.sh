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
# Between restart and newer, a sluice node with four connections (--store-connections 4,
# src/server/rstore_pg.h) on the same cluster, over the wire: many clients pipelining TASK.ADD,
# THROTTLE and ECHO get every reply in its place and their ADDs run in their order
# (tests/server/pg_pipeline.py), also while one of the node's backends is terminated
# (pg_terminate_backend): that connection comes back by itself, and no acknowledged task is lost.
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

# ---- A node with several connections -----------------------------------------------------------
cat >"$tmp/sluice.yaml" <<'EOF'
limits:
  api: {rate: 1000000/1s, key: explicit}
types:
  pipe: {lease: 60s}
EOF
start_node many --store "postgresql://sluice@127.0.0.1:$pgport_conn/postgres" \
  --store-connections 4 --store-timeout 5000
pipeline=$(dirname "$0")/pg_pipeline.py
check "four connections up" 4 "$(store_field "$port_many" store_connections_up)"
python3 "$pipeline" "$port_many" 16 2 30 >"$tmp/pipe1.out"
check "16 clients pipelining: every reply in its place, ADDs in order" 0 "$?"
check "no ADD refused while every connection is up" "ERRORS 0" "$(tail -1 "$tmp/pipe1.out")"
python3 "$pipeline" "$port_many" 16 8 30 >"$tmp/pipe2.out" &
ppid=$!
sleep 0.3
killed=$("$psql" "$pgconn_conn" -Atc "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
  WHERE application_name = 'sluice' AND backend_type = 'client backend' ORDER BY pid LIMIT 1")
check "one of the node's backends terminated" t "$killed"
wait "$ppid"
check "replies in place and ADDs in order across the lost connection" 0 "$?"
grep '^FAIL' "$tmp/pipe2.out"
wait_until "the lost connection is back" 10 \
  test "$(store_field "$port_many" store_connections_up)" = 4
within "the node counted the loss" 1 4 "$(store_field "$port_many" store_disconnects)"
cat "$tmp/pipe1.out" "$tmp/pipe2.out" | awk '$1 == "ACK" { print $2 "\t" $3 }' >"$tmp/acked.tsv"
nacked=$(wc -l <"$tmp/acked.tsv")
kept=$("$psql" "$pgconn_conn" -Atc "CREATE TEMP TABLE acked (id bigint, payload text);
  COPY acked FROM STDIN;
  SELECT count(*) FROM acked a JOIN sluice_task t ON t.id = a.id
   AND convert_from(t.payload, 'UTF8') = a.payload" <"$tmp/acked.tsv" | tail -1)
within "acknowledged tasks" 300 100000 "$nacked"
check "every acknowledged task is stored, with its payload" "$nacked" "$kept"
stop many
check "the node stops with 0" 0 "$stop_rc"

"$psql" "$pgconn_conn" -qc 'UPDATE sluice_schema SET version = 99'
mode newer
"$psql" "$pgconn_conn" -qc 'UPDATE sluice_schema SET version = 1'
finish
