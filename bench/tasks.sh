#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Task benchmark: sluice's TASK.ADD and TASK.GET+TASK.ACK against beanstalkd's put and
# reserve+delete (Debian's beanstalkd), side by side, with the same load generator
# (bench_taskload: CLIENTS connections, one thread each, JSON payloads of SIZE bytes,
# request/response and pipelined), at matched durability:
#   fsync  beanstalkd -b DIR -f 0 (fsync after every write)  vs  sluice --durability always
#   none   beanstalkd without a binlog                       vs  sluice --durability none
# Each round starts every server afresh, with an empty data directory, for every configuration
# and pipeline depth, and runs the two phases: put (each client puts JOBS jobs) and consume
# (each client reserves and deletes until the queue is empty); bench_taskload checks that every
# job put is consumed exactly once and fails the run otherwise. Configurations are interleaved
# within a round, so background noise hits every target alike. Prints the median jobs per second
# of each phase and the ratios sluice/beanstalkd. Servers listen on loopback ports only and are
# stopped by PID.
#
# Until `sluice serve` has --durability (and --data), sluice runs without them and its rows are
# labelled "sluice (durability not yet available)": it then keeps tasks in memory only, so the
# fsync ratio is not a like-for-like comparison.
#
# Usage: bench/tasks.sh [-r ROUNDS] [-c CLIENTS] [-n JOBS] [-f FSYNC_JOBS] [-P "DEPTHS"]
#                       [-s SIZE] [-o RAWFILE] [-b OTHER_BUILD] [BUILD]
#   -r  rounds (5)                -c  clients, one connection each (50)
#   -n  jobs per client at durability none (1000)
#   -f  jobs per client at fsync durability (100: beanstalkd does one fsync per put and delete)
#   -o  also write every bench_taskload line there, prefixed with its round and configuration
#   -s  payload bytes (64; 1024 for the large-payload figures, up to 65000)
#   -P  pipeline depths ("1 16")  BUILD: the build directory with sluice and bench_taskload
#                                        (default build/)
#   -b  also measure the sluice of OTHER_BUILD (with its own bench_taskload), interleaved in the
#       same rounds, in rows of its own: a before/after comparison in one run
# Data directories go under $TMPDIR (default /tmp): it must be a real disk, not tmpfs, for the
# fsync figures to mean anything.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
rounds=5
clients=50
jobs_none=1000
jobs_fsync=100
depths="1 16"
size=64
rawfile=/dev/null
other=
while getopts "r:c:n:f:P:s:o:b:h" opt; do
  case $opt in
    r) rounds=$OPTARG ;;
    c) clients=$OPTARG ;;
    n) jobs_none=$OPTARG ;;
    f) jobs_fsync=$OPTARG ;;
    P) depths=$OPTARG ;;
    s) size=$OPTARG ;;
    o) rawfile=$OPTARG ;;
    b) other=$OPTARG ;;
    h)
      sed -n '/^# Usage:/,/^# fsync figures/p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      sed -n '/^# Usage:/,/^# fsync figures/p' "$0" | sed 's/^# \{0,1\}//' >&2
      exit 2
      ;;
  esac
done
shift $((OPTIND - 1))
build=${1:-$here/../build}
sluice=$build/sluice
load=$build/bench_taskload
tmp=$(mktemp -d)
pids=()

cleanup() {
  local pid
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

for bin in "$sluice" "$load" ${other:+"$other/sluice" "$other/bench_taskload"}; do
  [ -x "$bin" ] || {
    echo "bench/tasks.sh: no $bin (build first: cmake --build $build)" >&2
    exit 1
  }
done
if ! command -v beanstalkd >/dev/null; then
  # Installing must not start Debian's service: RUNLEVEL=1 keeps invoke-rc.d from starting it.
  # The benchmark runs its own beanstalkd processes on loopback ports.
  echo "bench/tasks.sh: installing beanstalkd" >&2
  RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive apt-get install -y beanstalkd >/dev/null
fi
if [ "$(stat -f -c %T "$tmp")" = tmpfs ]; then
  echo "bench/tasks.sh: warning: $tmp is on tmpfs, where fsync costs nothing" >&2
fi

# What this sluice binary supports.
help=$("$sluice" serve --help 2>&1 || true)
has_durability=0
has_data=0
grep -q -- '--durability' <<<"$help" && has_durability=1
grep -q -- '--data' <<<"$help" && has_data=1

# A free loopback port for beanstalkd (sluice picks its own with --port 0), below the ephemeral
# range, where the load generator's own connections would make bind() fail.
ephemeral_low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
free_port() {
  local p
  for _ in $(seq 1 100); do
    p=$((10000 + RANDOM % (ephemeral_low - 10000)))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  echo "bench/tasks.sh: no free port found" >&2
  exit 1
}

# launch CONFIG DIR: starts one server on DIR; sets $pid and $port; 0 once it listens, 1 if it
# exited first (a port taken between free_port and bind, say).
launch() {
  local config=$1 dir=$2 args
  case $config in
    beanstalkd-*)
      port=$(free_port)
      args=(-l 127.0.0.1 -p "$port")
      [ "$config" = beanstalkd-fsync ] && args+=(-b "$dir" -f 0)
      beanstalkd "${args[@]}" 2>"$dir.log" &
      pid=$!
      ;;
    sluice-* | other-*)
      args=(serve --bind 127.0.0.1 --port 0 --port-file "$dir.port" --no-admin --log-level warn)
      [ "$has_data" = 1 ] && args+=(--data "$dir")
      [ "$has_durability" = 1 ] && args+=(--durability "${config#*-}")
      rm -f "$dir.port"
      bin=$sluice
      [ "${config%%-*}" = other ] && bin=$other/sluice
      "$bin" "${args[@]}" 2>"$dir.log" &
      pid=$!
      ;;
  esac
  pids+=("$pid")
  for _ in $(seq 1 200); do
    if [ "${config%%-*}" != beanstalkd ]; then
      [ -s "$dir.port" ] && port=$(cat "$dir.port") && return 0
    elif (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# start_server CONFIG DIR: one server of CONFIG with an empty data directory DIR (5 tries).
start_server() {
  local config=$1 dir=$2
  for _ in 1 2 3 4 5; do
    rm -rf "$dir"
    mkdir -p "$dir"
    launch "$config" "$dir" && return
    stop_server
  done
  echo "bench/tasks.sh: $config did not start:" >&2
  cat "$dir.log" >&2
  exit 1
}

stop_server() {
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  local keep=() p
  for p in "${pids[@]}"; do [ "$p" != "$pid" ] && keep+=("$p"); done
  pids=("${keep[@]+"${keep[@]}"}")
}

# measure CONFIG DEPTH: one fresh server, both phases; appends jobs/s to $tmp/r.CONFIG.DEPTH.PHASE.
measure() {
  local config=$1 depth=$2 proto=resp jobs=$jobs_none out load=$load
  [ "${config%%-*}" = beanstalkd ] && proto=beanstalk
  [ "${config%%-*}" = other ] && load=$other/bench_taskload
  case $config in *-fsync | *-always) jobs=$jobs_fsync ;; esac
  start_server "$config" "$tmp/data.$config"
  if ! out=$("$load" --proto "$proto" --port "$port" -c "$clients" -n "$jobs" -P "$depth" -s "$size"); then
    echo "bench/tasks.sh: bench_taskload failed on $config -P $depth:" >&2
    echo "$out" >&2
    exit 1
  fi
  stop_server
  while read -r line; do echo "round=$round config=$config $line"; done <<<"$out" >>"$rawfile"
  for phase in put consume; do
    grep "phase=$phase " <<<"$out" | sed 's/.*ops_per_sec=\([0-9.]*\).*/\1/' \
      >>"$tmp/r.$config.$depth.$phase"
  done
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

configs=(beanstalkd-fsync sluice-always beanstalkd-none sluice-none)
[ -n "$other" ] && configs=(beanstalkd-fsync other-always sluice-always beanstalkd-none other-none sluice-none)
sluice_label_always="sluice --durability always"
sluice_label_none="sluice --durability none"
if [ "$has_durability" = 0 ]; then
  sluice_label_always="sluice (durability not yet available)"
  sluice_label_none="sluice (durability not yet available)"
fi
declare -A label=([beanstalkd-fsync]="beanstalkd -b DIR -f 0" [beanstalkd-none]="beanstalkd (no binlog)"
  [sluice-always]="$sluice_label_always" [sluice-none]="$sluice_label_none"
  [other-always]="-b BUILD: sluice --durability always" [other-none]="-b BUILD: sluice --durability none")

echo "sluice $("$sluice" --version | cut -d' ' -f2), $(beanstalkd -v), $(nproc) CPUs;" \
  "-c $clients, $size-byte payloads, $rounds rounds of fresh servers, medians of jobs/s"
start=$(date +%s)
: >"$rawfile"
for round in $(seq 1 "$rounds"); do
  for config in "${configs[@]}"; do
    for depth in $depths; do
      measure "$config" "$depth"
    done
  done
  printf '.' >&2
done
printf ' %ss\n' $(($(date +%s) - start)) >&2

for config in "${configs[@]}"; do
  for depth in $depths; do
    for phase in put consume; do
      median <"$tmp/r.$config.$depth.$phase" >"$tmp/m.$config.$depth.$phase"
    done
  done
done
m() { cat "$tmp/m.$1.$2.$3"; }
ratio() { awk -v a="$(m "$1" "$3" "$4")" -v b="$(m "$2" "$3" "$4")" 'BEGIN { printf "%.2f", a / b }'; }

columns() {
  printf '%-40s' "$1"
  for depth in $depths; do printf ' %12s %15s' "put -P$depth" "res+del -P$depth"; done
  printf '\n'
}
row() {
  printf '%-40s' "${label[$1]}"
  for depth in $depths; do printf ' %12.0f %15.0f' "$(m "$1" "$depth" put)" "$(m "$1" "$depth" consume)"; done
  printf '\n'
}
ratio_row() {
  printf '%-40s' "ratio sluice/beanstalkd"
  for depth in $depths; do printf ' %12s %15s' "$(ratio "$1" "$2" "$depth" put)" "$(ratio "$1" "$2" "$depth" consume)"; done
  printf '   (goal >= %s)\n' "$3"
}

echo
columns "fsync per write ($jobs_fsync jobs per client)"
row beanstalkd-fsync
[ -n "$other" ] && row other-always && ratio_row other-always beanstalkd-fsync 10
row sluice-always
ratio_row sluice-always beanstalkd-fsync 10
echo
columns "no durability ($jobs_none jobs per client)"
row beanstalkd-none
[ -n "$other" ] && row other-none && ratio_row other-none beanstalkd-none '1 at -P1, 4 at -P16'
row sluice-none
ratio_row sluice-none beanstalkd-none '1 at -P1, 4 at -P16'
if [ "$has_durability" = 0 ]; then
  echo
  echo "note: this sluice has no --durability: both sluice rows keep tasks in memory only," \
    "so the fsync ratio compares sluice in memory with beanstalkd fsyncing every write."
fi
