# SPDX-License-Identifier: MIT
# Shared by the benchmark scripts that start a throwaway redis-server or Redis Cluster
# (bench/server.sh, bench/cluster.sh, bench/redis_cluster*.sh): the tool check, a free loopback
# port, the Redis (and Cluster) start-up and one cleanup that stops by PID everything a script
# started. Sourced, not run. The sourcing script sets
# `bench` (its name, for messages) and `tmp` (its scratch directory) first, and appends every
# process it starts to `pids`.

pids=()

bench_cleanup() {
  local p
  for p in "${pids[@]}"; do
    kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap bench_cleanup EXIT

# bench_need TOOL...: exits with the package to install when a tool is missing.
bench_need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || {
      echo "$bench: $tool is needed (apt-get install redis-server redis-tools)" >&2
      exit 1
    }
  done
}

# bench_need_sluice PATH: exits when the sluice binary is not built.
bench_need_sluice() {
  [ -x "$1" ] || {
    echo "$bench: no sluice binary at $1 (run make build)" >&2
    exit 1
  }
}

# bench_free_port: a loopback port nothing listens on.
bench_free_port() {
  local p
  for _ in $(seq 1 100); do
    p=$((20000 + RANDOM % 30000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  echo "$bench: no free port found" >&2
  exit 1
}

# bench_start_redis: starts a memory-only redis-server on a free loopback port, sets `rport` and
# returns once it answers PING.
bench_start_redis() {
  rport=$(bench_free_port)
  redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    --loglevel warning >"$tmp/redis.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 200); do
    redis-cli -p "$rport" PING >/dev/null 2>&1 && return
    sleep 0.05
  done
  echo "$bench: redis-server did not start (see below)" >&2
  cat "$tmp/redis.log" >&2
  exit 1
}

# bench_master_port: a loopback port whose cluster bus port (+10000) is free too.
bench_master_port() {
  local p
  for _ in $(seq 1 100); do
    p=$((20000 + RANDOM % 10000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null &&
      ! (exec 3<>"/dev/tcp/127.0.0.1/$((p + 10000))") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  echo "$bench: no free port pair found" >&2
  exit 1
}

# bench_start_cluster: a 3-master Redis Cluster (memory only, node timeout 2 s) on free loopback
# ports, every slot assigned; sets `masters` (their ports) and returns once each says
# cluster_state:ok.
bench_start_cluster() {
  local m p ok
  masters=()
  for m in 1 2 3; do
    p=$(bench_master_port)
    mkdir -p "$tmp/m$m"
    redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
      --loglevel warning --dir "$tmp/m$m" --cluster-enabled yes --cluster-config-file nodes.conf \
      --cluster-node-timeout 2000 >"$tmp/m$m.log" 2>&1 &
    pids+=($!)
    masters+=("$p")
  done
  for p in "${masters[@]}"; do
    for _ in $(seq 1 200); do redis-cli -p "$p" PING >/dev/null 2>&1 && break; sleep 0.05; done
  done
  redis-cli --cluster create "127.0.0.1:${masters[0]}" "127.0.0.1:${masters[1]}" \
    "127.0.0.1:${masters[2]}" --cluster-replicas 0 --cluster-yes >/dev/null
  for _ in $(seq 1 200); do
    ok=1
    for p in "${masters[@]}"; do
      redis-cli -p "$p" CLUSTER INFO | grep -q 'cluster_state:ok' || ok=0
    done
    [ $ok = 1 ] && break
    sleep 0.1
  done
}
