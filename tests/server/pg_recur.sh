#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Recurring series shared on PostgreSQL (issue 11, docs/cluster.md), over the wire: the very
# script of the Redis store's series test (tests/server/redis_recur.sh: RECUR.ADD on one node
# read on another, its occurrences taken on a third; three nodes racing every point, exactly one
# task per point; MAX, END, RECUR.DEL cancelling what did not start; a node killed; every node
# down and the missed points counted; argument errors; the store frozen), run against three nodes
# on one PostgreSQL (src/store/pg/003_pgrecur.sql).
#
# Skipped (exit 77) only when PostgreSQL's server binaries are not installed.
#
# Usage: bash tests/server/pg_recur.sh PATH-TO-SLUICE SOURCE-DIR
set -u
SLUICE_TEST_STORE=postgresql exec bash "$(dirname "$0")/redis_recur.sh" "$@"
