#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The PostgreSQL series function (src/store/pg/003_pgrecur.sql) against the Redis store script's
# recur ops: sluice_recur_diff (tests/tools/recur_diff.c, built next to the sluice binary) runs
# one random sequence of RECUR.ADD, DEL, INFO, LIST and FIRE requests (current and stale
# versions and next times, with and without an occurrence, points passed over), one to four per
# call, at injected times moving forward and sometimes back, with claims of the occurrences in
# between, through a throwaway redis-server (start_redis) and a throwaway PostgreSQL
# (start_postgres), and compares every field of every answer and the state of every occurrence:
# SLUICE_RECUR_STEPS steps (default 1000) for each of SLUICE_RECUR_SEEDS (default "1 2"; a
# failure prints its seed and step so it replays).
#
# Skipped (exit 77) only when PostgreSQL's server binaries are not installed.
#
# Usage: bash tests/server/pg_recurq.sh PATH-TO-SLUICE SOURCE-DIR
set -u

sluice=${1:?usage: pg_recurq.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"
need_helper sluice_recur_diff
need_postgres
need_tools pg_recurq.sh redis-server
start_postgres recur
start_redis recur
diff_seeds recur "${SLUICE_RECUR_STEPS:-1000}" ${SLUICE_RECUR_SEEDS:-1 2}
finish
