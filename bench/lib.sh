# SPDX-License-Identifier: MIT
# Shared by the benchmark scripts that start a throwaway redis-server (bench/server.sh,
# bench/cluster.sh): the tool check, a free loopback port, the Redis start-up and one cleanup
# that stops by PID everything a script started. Sourced, not run. The sourcing script sets
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
