#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The differential test of the PostgreSQL limits function (src/store/pg/001_limits.sql) against
# the C core: sluice_limits_diff (tests/tools/limits_diff.c, built next to the sluice binary, the
# same driver as redis_limits.sh) drives random batches through both, on a throwaway PostgreSQL
# cluster (start_postgres), and compares every answer. At least SLUICE_DIFF_OPS (default 10000)
# link decisions per limit kind, for each of two seeds (SLUICE_DIFF_SEEDS, default "1 2"; a
# failure prints its seed so it replays). Also checks the schema's versioning: a second
# migration is a no-op, and a database on a newer version is refused with a clear message.
#
# Skipped (exit 77) only when PostgreSQL's server binaries are not installed.
#
# Usage: bash tests/server/pg_limits.sh PATH-TO-SLUICE SOURCE-DIR
set -u

sluice=${1:?usage: pg_limits.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"
need_helper sluice_limits_diff
need_postgres
start_postgres diff
for seed in ${SLUICE_DIFF_SEEDS:-1 2}; do
  if out=$("$helper" "$pgconn_diff" "$seed" "${SLUICE_DIFF_OPS:-10000}" 2>&1); then
    ok
  else
    bad "seed $seed: $out"
  fi
  echo "$out" | tail -1
done
psql=$(pg_bindir)/psql
[ -x "$psql" ] || psql=psql
check "schema version" 3 "$("$psql" "$pgconn_diff" -Atc 'SELECT version FROM sluice_schema')"
# A newer schema than this build knows: refused, with the versions in the message.
"$psql" "$pgconn_diff" -qc 'UPDATE sluice_schema SET version = 99'
out=$("$helper" "$pgconn_diff" 1 1 2>&1)
check "newer schema refused (exit status)" 2 "$?"
contains "newer schema refused (message)" "schema is version 99, newer than this sluice knows (3)" "$out"
finish
