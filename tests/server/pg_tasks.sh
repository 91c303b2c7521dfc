#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The task queue shared on PostgreSQL (issue 11, docs/cluster.md), over the wire: the very
# script of the Redis store's node test (tests/server/redis_tasks.sh: ADD on A, GET on B, ACK on
# C; a blocked GET woken by another node's ADD, here through LISTEN/NOTIFY; kill -9 of a node
# holding a delivery and the ATTEMPT fence; many clients on every node with the checker; the
# store stopped and restarted), run against three nodes on one PostgreSQL.
#
# Skipped (exit 77) only when PostgreSQL's server binaries are not installed.
#
# Usage: bash tests/server/pg_tasks.sh PATH-TO-SLUICE SOURCE-DIR
set -u
SLUICE_TEST_STORE=postgresql exec bash "$(dirname "$0")/redis_tasks.sh" "$@"
