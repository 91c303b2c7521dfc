#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The PostgreSQL task queue (src/store/pg/002_tasks.sql) against the Redis store script's task
# ops: sluice_tasks_diff (tests/tools/tasks_diff.c, built next to the sluice binary) runs one
# random sequence of adds, claims, acks, fails, touches, cancels and infos, with chains over
# rate, concurrency, fixed and sliding window links, at injected times, through a throwaway
# redis-server (start_redis) and a throwaway PostgreSQL (start_postgres), and compares every
# field of every answer: SLUICE_TASKS_STEPS steps (default 2000: over 6000 requests) for
# each of two seeds (SLUICE_TASKS_SEEDS, default "1 2"; a failure prints its seed and step so it
# replays); seed 5 with a third of the links in shadow mode. Then the race: SLUICE_TASKS_PROCS processes (default 4) claim, ack, fail, touch and
# let leases lapse on one PostgreSQL at once, with THROTTLE on the same rows: no task delivered
# twice at one attempt, no call failed (a deadlock is an error), every task done. Seed 3 runs in
# the plain mood (mostly linkless tasks: schema 3's set-based runs), and a database at version 2
# with tasks in it is migrated and its tasks claimed and acknowledged.
#
# Skipped (exit 77) only when PostgreSQL's server binaries are not installed.
#
# Usage: bash tests/server/pg_taskq.sh PATH-TO-SLUICE SOURCE-DIR
set -u

sluice=${1:?usage: pg_taskq.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"
need_helper sluice_tasks_diff
need_postgres
need_tools pg_taskq.sh redis-server
start_postgres tasks
start_redis tasks
diff_seeds tasks "${SLUICE_TASKS_STEPS:-2000}" ${SLUICE_TASKS_SEEDS:-1 2}
# The plain mood: mostly tasks without links, in calls of up to eight requests (003's set-based
# runs of adds, claims and acks, and the per-request path between them).
SLUICE_TASKS_PLAIN=1 helper_run "plain seed 3" "$rport_tasks" "$pgconn_tasks" 3 "${SLUICE_TASKS_STEPS:-2000}"
# Shadow links: a third of the links in shadow mode (their denials let tasks through uncharged).
SLUICE_TASKS_SHADOW=1 helper_run "shadow seed 5" "$rport_tasks" "$pgconn_tasks" 5 "${SLUICE_TASKS_SHADOW_STEPS:-1000}"
# Capped: small max_tasks and max_parked on both stores (BUSY refusals, RATELIMITED failures).
SLUICE_TASKS_CAPS=${SLUICE_TASKS_CAP_VALUES:-"30 4"} helper_run "capped seed 4" "$rport_tasks" "$pgconn_tasks" 4 "${SLUICE_TASKS_CAP_STEPS:-1000}"
helper_run race --race "$pgconn_tasks" "${SLUICE_TASKS_PROCS:-4}" 400
psql=$(pg_bindir)/psql
# The version this build writes (src/store/pg_schema.h).
schema=$(awk '$1 == "#define" && $2 == "PGS_VERSION" { print $3 }' "${2:?}/src/store/pg_schema.h")
[ -x "$psql" ] || psql=psql
check "schema version" "$schema" "$("$psql" "$pgconn_tasks" -Atc 'SELECT version FROM sluice_schema')"
# A database at version 2 (001 and 002 applied, a task queued and one running) migrates to the
# newest version and keeps its tasks: the queued one is claimed, the running one acknowledged.
src=$(cd "$(dirname "$0")/../.." && pwd)
"$psql" "$pgconn_tasks" -qc 'CREATE DATABASE v2'
v2=${pgconn_tasks/dbname=postgres/dbname=v2}
{
  echo 'BEGIN; CREATE TABLE sluice_schema (version integer NOT NULL);'
  cat "$src/src/store/pg/001_limits.sql" "$src/src/store/pg/002_tasks.sql"
  echo 'INSERT INTO sluice_schema VALUES (2); COMMIT;'
} | "$psql" "$v2" -q -v ON_ERROR_STOP=1 >/dev/null 2>&1
add="A 77 7031 00 0 0 0 60000000000 3 0 0 0 1 0 1 0"
v2call() { "$psql" "$v2" -Atc "SELECT string_agg(convert_from(val, 'UTF8'), '|' ORDER BY req) FROM sluice_tasks_call($1, ARRAY[$2])"; }
v2call 1000000000 "'$add', '$add', 'C 1 1 77'" >/dev/null
"$helper" --migrate "$v2"
check "version 2 migrated to $schema" "$schema" "$("$psql" "$v2" -Atc 'SELECT version FROM sluice_schema')"
check "after the migration: the queued task claimed, the running one acknowledged" \
  "OK 2000000000 1 0 0 0|2 1 62000000000|w|p1|OK 2000000000 4 1" \
  "$(v2call 2000000000 "'C 1 1 77', 'K 1 1 -1 0 -1 00 0'")"
# The caps' counts (007) start from the migrated queue and follow it: one task left, none parked.
check "the task counts after the migration" "1|0" \
  "$("$psql" "$v2" -Atc 'SELECT sum(u), sum(p) FROM sluice_task_count')"
finish
