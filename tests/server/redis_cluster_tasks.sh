#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The task queue shared on a Redis Cluster (issue 10, docs/cluster.md "On Redis Cluster"), over
# the wire: the very script of the standalone Redis store's node test (tests/server/
# redis_tasks.sh: ADD on A, GET on B, ACK on C; a blocked GET woken by another node's ADD, the
# wake published on one master and heard through another; kill -9 of a node holding a delivery
# and the ATTEMPT fence; many clients on every node with the checker; group slots; the caps on a
# one-master Cluster of their own; the queue's master stopped and restarted), run against three
# nodes on a 3-master Cluster. The queue and every limit a type names live in the slot of {all}.
#
# Usage: bash tests/server/redis_cluster_tasks.sh PATH-TO-SLUICE SOURCE-DIR
set -u
SLUICE_TEST_STORE=redis-cluster exec bash "$(dirname "$0")/redis_tasks.sh" "$@"
