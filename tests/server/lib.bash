# SPDX-License-Identifier: MIT
# Shared by the server test scripts (sourced, not run; named .bash so that CMake, which registers
# every tests/server/*.sh, does not take it for a test): the pass/fail counters and assertions,
# a temporary directory removed on exit together with every server whose PID was added to
# `pids`, and small redis-cli wrappers for the server on port $P. A script ends with `finish`,
# which prints "N passed, N failed" and returns non-zero when anything failed.
# Traffic goes to 127.0.0.1 only.

passed=0
failed=0
tmp=$(mktemp -d)
pids=()
pg_pids=() # PostgreSQL postmasters (start_postgres): stopped with SIGQUIT, not SIGKILL

cleanup() {
  local p
  # $pid: the one server of start_single / crash_start, when a script uses those.
  [ -n "${pid:-}" ] && kill -KILL "$pid" 2>/dev/null
  for p in "${pids[@]}"; do
    { kill -KILL "$p" && wait "$p"; } 2>/dev/null
  done
  # SIGQUIT is PostgreSQL's immediate shutdown: the postmaster stops its children, then exits
  # (SIGKILL would leave them running without it).
  # SIGCONT first: a frozen cluster (freeze_postgres) would hold a stop signal, and wait, forever.
  for p in "${pg_pids[@]}"; do
    kill -CONT $(pgrep -P "$p") "$p" 2>/dev/null
    { kill -QUIT "$p" && wait "$p"; } 2>/dev/null
  done
  # SLUICE_TEST_KEEP=1 keeps the servers' logs and data of a failed run for a post-mortem.
  if [ "${SLUICE_TEST_KEEP:-}" = 1 ] && [ "${failed:-0}" -gt 0 ]; then
    echo "# kept $tmp (SLUICE_TEST_KEEP=1)" >&2
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT
# A write to a connection the server closed fails with EPIPE instead of killing the script.
trap '' PIPE

ok() { passed=$((passed + 1)); }
bad() {
  failed=$((failed + 1))
  echo "FAIL: $*"
}
check() { if [ "$2" == "$3" ]; then ok; else bad "$1: wanted [$2], got [$3]"; fi; }
contains() {
  case $3 in
  *"$2"*) ok ;;
  *) bad "$1: [${3:0:400}] does not contain [$2]" ;;
  esac
}
# need_tools SCRIPT TOOL...: fails the script at once (one failed check) when a tool is missing.
need_tools() {
  local script=$1 tool
  shift
  for tool in "$@"; do
    if ! command -v "$tool" >/dev/null; then
      echo "$script: $tool is missing (scripts/deps.sh installs it)"
      echo "0 passed, 1 failed"
      exit 1
    fi
  done
}
lacks() {
  case $3 in
  *"$2"*) bad "$1: [$3] contains [$2]" ;;
  *) ok ;;
  esac
}
# within NAME LO HI VALUE: LO <= VALUE <= HI.
within() {
  if [ -n "$4" ] && [ "$4" -ge "$2" ] && [ "$4" -le "$3" ]; then ok; else bad "$1: [$4] not in [$2, $3]"; fi
}
now_ms() { date +%s%3N; }
# word TEXT N: the Nth word (from 1) of TEXT.
word() { echo "$1" | awk -v n="$2" '{ print $n }'; }
# cli ARGS...: one command to the server on $P, its reply on one line.
cli() { redis-cli -p "$P" "$@" 2>&1 | tr '\n' ' ' | sed 's/ *$//'; }
# field COMMAND ID NAME: one field of a map reply (TASK.INFO, TASK.EXPLAIN).
field() { redis-cli -p "$P" "$1" "$2" | awk -v f="$3" 'NR % 2 == 1 { k = $0 } NR % 2 == 0 && k == f { print; exit }'; }
# wait_until WHAT SECONDS COMMAND...: runs COMMAND until it succeeds, at most SECONDS (a deadline,
# not a pace: it returns as soon as COMMAND does, so a busy machine only makes it wait longer).
# Counts a failure when the deadline passes. Use it instead of a sleep before a check.
wait_until() {
  local what=$1 secs=$2 deadline=$(($(date +%s%3N) + $2 * 1000))
  shift 2
  until "$@"; do
    if [ "$(date +%s%3N)" -gt "$deadline" ]; then
      bad "$what: not within $secs s"
      return 1
    fi
    sleep 0.02
  done
}
# Several commands in one write run in one loop turn, at one time: checks that must not see the
# clock move between commands send them so (each script's `raw`) and read the replies with these.
# resp_flat: RESP2 replies (as the scripts' raw helpers print them, \r removed) on stdin, one line
# per scalar: "N<tab>value", N the reply (from 1) it belongs to. Arrays are flattened; an empty
# array gives no line, nil an empty value. (Values hold no newline here.)
resp_flat() {
  awk '
    function scalar(v) {
      print n "\t" v
      while (depth > 0 && --left[depth] == 0) depth--
    }
    bulk { bulk = 0; scalar($0); next }
    {
      c = substr($0, 1, 1)
      rest = substr($0, 2)
      if (depth == 0) n++
      if (c == "*" && rest + 0 > 0) left[++depth] = rest + 0
      else if (c == "*") { while (depth > 0 && --left[depth] == 0) depth-- }
      else if (c == "$" && rest + 0 >= 0) bulk = 1
      else if (c == "$") scalar("")
      else scalar(rest)
    }'
}
# rget N: the Nth reply in $tmp/flat, its scalars joined by spaces (as cli prints it).
rget() { awk -F'\t' -v n="$1" '$1 == n { printf "%s%s", s, $2; s = " " } END { print "" }' "$tmp/flat" | sed 's/ *$//'; }
# rfield N KEY: the value of KEY in the Nth reply in $tmp/flat (a map: TASK.INFO, TASK.EXPLAIN).
rfield() { awk -F'\t' -v n="$1" -v k="$2" '$1 == n { if (++i % 2) key = $2; else if (key == k) { print $2; exit } }' "$tmp/flat"; }
# blocked_is N: the server on $P has N clients blocked (a TASK.GET waiting).
blocked_is() {
  [ "$(redis-cli -p "$P" INFO clients | tr -d '\r' | awk -F: '$1 == "blocked_clients" { print $2 }')" = "$1" ]
}

# start NAME ARGS...: starts a server with its own data directory, sets port_NAME and pid_NAME.
# (Scripts that need another set-up define their own start and stop after sourcing this file.)
start() {
  local name=$1
  shift
  rm -f "$tmp/$name.port"
  "$sluice" serve --port 0 --bind 127.0.0.1 --port-file "$tmp/$name.port" --data "$tmp/$name.data" "$@" \
    2>"$tmp/$name.log" &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 1 1500); do # 30 s or more: a loaded machine can be slow to start it
    [ -s "$tmp/$name.port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  if [ ! -s "$tmp/$name.port" ]; then
    bad "server $name did not start: $(cat "$tmp/$name.log")"
    echo "$passed passed, $failed failed"
    exit 1
  fi
  printf -v "port_$name" '%s' "$(cat "$tmp/$name.port")"
  printf -v "pid_$name" '%s' "$pid"
}

# start_admin NAME ARGS...: a server with its admin port, both ports ephemeral, config
# $tmp/sluice.yaml and its own data directory; sets P_NAME, A_NAME, PID_NAME.
start_admin() {
  local name=$1
  shift
  rm -f "$tmp/$name.port" "$tmp/$name.admin"
  "$sluice" serve --port 0 --port-file "$tmp/$name.port" --data "$tmp/$name.data" --admin-port 0 \
    --admin-port-file "$tmp/$name.admin" --config "$tmp/sluice.yaml" "$@" 2>>"$tmp/$name.log" &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 1 1500); do # 30 s or more: a loaded machine can be slow to start it
    [ -s "$tmp/$name.port" ] && [ -s "$tmp/$name.admin" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  if [ ! -s "$tmp/$name.admin" ]; then
    bad "server $name did not start: $(cat "$tmp/$name.log")"
    echo "$passed passed, $failed failed"
    exit 1
  fi
  printf -v "P_$name" '%s' "$(cat "$tmp/$name.port")"
  printf -v "A_$name" '%s' "$(cat "$tmp/$name.admin")"
  printf -v "PID_$name" '%s' "$pid"
}

# stop NAME: SIGTERM, then the exit status in $stop_rc.
stop() {
  local pidvar="pid_$1"
  kill -TERM "${!pidvar}"
  wait "${!pidvar}"
  stop_rc=$?
}

# serve_one CONF LOG TRIES ARGS...: starts the one server of a script on data directory $data
# with config CONF, its log appended to LOG; waits up to TRIES * 20 ms for its port (a deadline,
# not a pace); sets pid and P. A server that does not start fails the script.
serve_one() {
  local conf=$1 log=$2 tries=$3
  shift 3
  rm -f "$tmp/port"
  "$sluice" serve --port 0 --bind 127.0.0.1 --port-file "$tmp/port" --no-admin \
    --config "$conf" --data "$data" "$@" 2>>"$log" &
  pid=$!
  for _ in $(seq 1 "$tries"); do
    [ -s "$tmp/port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  if [ ! -s "$tmp/port" ]; then
    bad "the server did not start: $(tail -5 "$log")"
    echo "$passed passed, $failed failed"
    exit 1
  fi
  P=$(cat "$tmp/port")
}

# start_single ARGS...: (re)starts the one server of a restart test, on data directory $data with
# config $conf (both set by the script); sets P (its port) and pid. Appends to $tmp/log.
start_single() { serve_one "$conf" "$tmp/log" 1500 "$@"; }

# crash: kill -9 the server start_single (or crash_start) started.
crash() {
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null
  pid=
}

# info FIELD: one field of the server's INFO persistence.
info() { redis-cli -p "$P" INFO persistence | tr -d '\r' | awk -F: -v f="$1" '$1 == f { print $2 }'; }

# durable_now: true when nothing of the server on $P waits to be written: no limiter key (or
# kept lease) left dirty and no commit in flight, read from one INFO (which pulls the limiters'
# changed keys into the count first). Use with wait_until before a crash.
durable_now() {
  local out
  out=$(redis-cli -p "$P" INFO persistence | tr -d '\r')
  [ "$(echo "$out" | awk -F: '$1 == "dirty_keys" { print $2 }')" = 0 ] &&
    [ "$(echo "$out" | awk -F: '$1 == "dirty_tasks" { print $2 }')" = 0 ] &&
    [ "$(echo "$out" | awk -F: '$1 == "commit_in_flight" { print $2 }')" = 0 ]
}

# stop_single: SIGTERM to the server start_single started; it must exit 0.
stop_single() {
  kill -TERM "$pid"
  wait "$pid"
  check "SIGTERM exits 0" 0 "$?"
  pid=
}

# ---- The kill -9 tests (torture.sh, crash_inflight.sh) --------------------------------------
# They keep the server's configuration in $tmp/sluice.yaml, its data in $data, its log in
# $tmp/server.log, and drive it with sluice_torture ($helper), whose producers and worker log to
# $tmp/prod-*.log and $tmp/work.log.

# crash_start [serve args...]: starts the server on $data (SIGKILL it at will); sets pid and P.
crash_start() { serve_one "$tmp/sluice.yaml" "$tmp/server.log" 1500 "$@"; }

# crash_logs: the client logs written so far.
crash_logs() {
  local f
  for f in "$tmp"/prod-*.log "$tmp"/work.log; do
    [ -e "$f" ] && echo "$f"
  done
}

# crash_verify WHAT FINAL: the server on $P holds what the logs say was acknowledged.
crash_verify() {
  local what=$1 final=$2 out
  # shellcheck disable=SC2046
  out=$("$helper" verify "$P" "$final" $(crash_logs) 2>&1)
  if [ $? -eq 0 ]; then ok; else bad "$what: $out"; fi
  echo "# $what: $out"
}

# crash_data_check WHAT: `sluice data check` passes on $data.
crash_data_check() {
  local out
  out=$("$sluice" data check "$data" 2>&1)
  if [ $? -eq 0 ]; then ok; else bad "$1: data check: $out"; fi
}

finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}

# ---- Redis (the shared store's tests) -------------------------------------------------------

# start_node NAME ARGS...: one node of a several-node test (config $node_conf, else
# $tmp/sluice.yaml; log $tmp/NAME.log, appended to, so a restarted node keeps its story); sets
# port_NAME and pid_NAME and adds the pid to pids. --no-admin unless ARGS give --admin-port.
start_node() {
  local name=$1 admin=--no-admin pid
  shift
  case " $* " in *" --admin-port "*) admin= ;; esac
  rm -f "$tmp/$name.port"
  "$sluice" serve --port 0 --bind 127.0.0.1 --port-file "$tmp/$name.port" $admin \
    --config "${node_conf:-$tmp/sluice.yaml}" "$@" 2>>"$tmp/$name.log" &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 1 1500); do # 30 s or more: a loaded machine can be slow to start it
    [ -s "$tmp/$name.port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  if [ ! -s "$tmp/$name.port" ]; then
    bad "node $name did not start: $(cat "$tmp/$name.log")"
    finish
    exit 1
  fi
  printf -v "port_$name" '%s' "$(cat "$tmp/$name.port")"
  printf -v "pid_$name" '%s' "$pid"
}

# on PORT ARGS...: one command to the node on PORT, its reply on one line.
on() {
  local p=$1
  shift
  redis-cli -p "$p" "$@" 2>&1 | tr '\n' ' ' | sed 's/ *$//'
}

# store_field PORT FIELD: one field of INFO store of the node on PORT.
store_field() {
  redis-cli -p "$1" INFO store | tr -d '\r' | awk -F: -v f="$2" '$1 == f { print $2 }'
}

# start_redis NAME [redis-server args...]: starts a throwaway redis-server on a free loopback port
# (no persistence, its files in $tmp/NAME.redis), sets rport_NAME and rpid_NAME; stopped by PID
# on exit with the rest. The port is the kernel's choice: a listener bound to port 0 is closed
# and its port reused, retried when another process took it meanwhile; or, when the variable
# redis_port_cmd names a command, what that prints (a Cluster node also needs port + 10000).
start_redis() {
  local name=$1 port pid dir=$tmp/$1.redis try
  shift
  command -v redis-server >/dev/null || {
    bad "redis-server is not installed (scripts/deps.sh installs it)"
    finish
    exit 1
  }
  mkdir -p "$dir"
  for try in 1 2 3 4 5; do
    if [ -n "${redis_port_cmd:-}" ]; then
      port=$($redis_port_cmd)
    else
      port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    fi
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
      --daemonize no --logfile "$dir/log" "$@" &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 1 250); do
      redis-cli -p "$port" PING 2>/dev/null | grep -q PONG && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.02
    done
    if kill -0 "$pid" 2>/dev/null && redis-cli -p "$port" PING 2>/dev/null | grep -q PONG; then
      printf -v "rport_$name" '%s' "$port"
      printf -v "rpid_$name" '%s' "$pid"
      return 0
    fi
    kill -KILL "$pid" 2>/dev/null
  done
  bad "redis-server $name did not start: $(tail -3 "$dir/log")"
  finish
  exit 1
}

# cluster_port: a port p such that p and its Cluster bus port p + 10000 are both free (the
# kernel's ephemeral ports could put the bus port past 65535): start_cluster_master's
# redis_port_cmd.
cluster_port() {
  "${py:-python3}" - <<'EOF'
import random, socket
for _ in range(200):
    p = random.randrange(20000, 30000)
    try:
        for q in (p, p + 10000):
            s = socket.socket()
            s.bind(("127.0.0.1", q))
            s.close()
    except OSError:
        continue
    print(p)
    break
EOF
}

# start_cluster_master NAME [redis-server args...]: a cluster-enabled redis-server (start_redis on
# a cluster_port; its nodes.conf in $tmp/NAME.redis, node timeout 2 s), the args added; sets
# rport_NAME and rpid_NAME. It holds no slot yet.
start_cluster_master() {
  local name=$1
  shift
  redis_port_cmd=cluster_port start_redis "$name" --cluster-enabled yes \
    --cluster-config-file "$tmp/$name.redis/nodes.conf" --cluster-node-timeout 2000 "$@"
}

# cluster_ok PORT...: every one of these Cluster nodes says cluster_state:ok (for wait_until).
cluster_ok() {
  local p
  for p in "$@"; do
    redis-cli -p "$p" CLUSTER INFO 2>/dev/null | tr -d '\r' | grep -q '^cluster_state:ok$' || return 1
  done
}

# start_cluster NAME...: a Redis Cluster of one master per NAME (start_cluster_master, full
# coverage not required, so that a master down leaves the others serving), every slot assigned
# (redis-cli --cluster create for three masters or more, CLUSTER ADDSLOTSRANGE for one), waited
# for until each master says cluster_state:ok. Sets rport_NAME and rpid_NAME of each.
start_cluster() {
  local n addrs=() ports=()
  local v
  for n in "$@"; do
    start_cluster_master "$n" --cluster-require-full-coverage no
    v=rport_$n
    addrs+=("127.0.0.1:${!v}")
    ports+=("${!v}")
  done
  if [ "$#" -ge 3 ]; then
    redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$tmp/cluster.$1.log" 2>&1
  else
    redis-cli -p "${ports[0]}" CLUSTER ADDSLOTSRANGE 0 16383 >"$tmp/cluster.$1.log" 2>&1
  fi
  check "a Redis Cluster of $# master(s) created" 0 "$?"
  wait_until "cluster_state:ok on every master of $1's cluster" 30 cluster_ok "${ports[@]}"
}

# cluster_owner PORT KEY: the port of the master (as PORT's node sees the map) serving KEY's slot.
cluster_owner() {
  local slot
  slot=$(redis-cli -p "$1" CLUSTER KEYSLOT "$2")
  "${py:-python3}" -c "
import redis
for s, e, m, *_ in redis.Redis(port=$1).execute_command('CLUSTER', 'SLOTS'):
    if s <= $slot <= e:
        print(m[1]); break"
}

# ---- PostgreSQL (the shared store's tests) --------------------------------------------------

# pg_bindir: prints the directory of Debian's PostgreSQL server binaries (initdb, postgres,
# pg_ctl), newest version first; nothing (and status 1) when they are not installed. Debian keeps
# them off the PATH, under /usr/lib/postgresql/<version>/bin; pg_config (libpq-dev) names the
# client's directory, which holds them only on other layouts.
pg_bindir() {
  local d
  d=$(pg_config --bindir 2>/dev/null)
  if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/postgres" ]; then
    echo "$d"
    return 0
  fi
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -n -r); do
    if [ -x "$d/initdb" ] && [ -x "$d/postgres" ]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}

# pg_owner NAME: sets pg_as (runs a command as the cluster's owner) and pg_exec (execs a command
# as it, so that $! of a background start is the command itself). PostgreSQL refuses to run as
# root, so under root the cluster belongs to the unprivileged `postgres` user (Debian's package
# creates it), else to `nobody`, and the temporary directory is made traversable for it; under
# another user both are empty.
pg_owner() {
  pg_as=()
  pg_exec=()
  if [ "$(id -u)" -eq 0 ]; then
    local user=nobody
    id postgres >/dev/null 2>&1 && user=postgres
    chmod 711 "$tmp"
    chown "$user" "$tmp/$1.pg"
    pg_as=(runuser -u "$user" --)
    pg_exec=(setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups)
  fi
}

# pg_launch NAME PORT: starts the postmaster of cluster NAME (initdb done) on PORT with the
# arguments start_postgres was given, and waits until it accepts connections. Sets pgpid_NAME;
# returns 1 (the postmaster stopped again) when it did not come up within 10 s.
pg_launch() {
  local name=$1 port=$2 bin dir=$tmp/$1.pg pid
  local -n extra="pgargs_$1"
  bin=$(pg_bindir)
  pg_owner "$name"
  "${pg_exec[@]}" "$bin/postgres" -D "$dir/data" -p "$port" -c listen_addresses=127.0.0.1 \
    -c unix_socket_directories="$dir" -c fsync=off -c full_page_writes=off \
    -c max_connections=20 "${extra[@]}" >>"$dir/log" 2>&1 &
  pid=$!
  pg_pids+=("$pid")
  for _ in $(seq 1 500); do
    "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  if kill -0 "$pid" 2>/dev/null && "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; then
    printf -v "pgpid_$name" '%s' "$pid"
    return 0
  fi
  kill -QUIT "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  return 1
}

# start_postgres NAME [postgres args...]: starts a throwaway PostgreSQL cluster (initdb in $tmp/NAME.pg, trust
# authentication, superuser "sluice", no fsync: the tests lose nothing to a crash of the test
# machine that they would not lose anyway) listening on a free loopback port and on a Unix socket
# in its own directory; extra arguments go to postgres after these (-c fsync=on for a benchmark
# of durable commits). Sets pgport_NAME, pgpid_NAME and pgconn_NAME (a libpq connection string);
# stopped by PID on exit (SIGQUIT, its immediate shutdown). The cluster's owner: see pg_owner.
start_postgres() {
  local name=$1 bin dir=$tmp/$1.pg port try
  shift
  bin=$(pg_bindir) || {
    bad "PostgreSQL server binaries are not installed (scripts/deps.sh installs postgresql)"
    finish
    exit 1
  }
  declare -ga "pgargs_$name=()"
  local -n extra="pgargs_$name"
  extra=("$@")
  mkdir -p "$dir"
  pg_owner "$name"
  if ! "${pg_as[@]}" "$bin/initdb" -D "$dir/data" -U sluice --auth=trust -E UTF8 --locale=C \
    --no-sync >"$dir/initdb.log" 2>&1; then
    bad "initdb failed: $(tail -3 "$dir/initdb.log")"
    finish
    exit 1
  fi
  for try in 1 2 3 4 5; do
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    if pg_launch "$name" "$port"; then
      printf -v "pgport_$name" '%s' "$port"
      printf -v "pgconn_$name" '%s' "host=127.0.0.1 port=$port user=sluice dbname=postgres"
      return 0
    fi
  done
  bad "postgres $name did not start: $(tail -3 "$dir/log")"
  finish
  exit 1
}

# stop_postgres NAME [SIGNAL]: stops cluster NAME's postmaster by PID and waits until it is gone.
# SIGNAL: QUIT (default; immediate shutdown: backends end at once, the next start recovers from
# the WAL, as after a crash), INT (fast: rolls back what runs, checkpoints) or TERM (smart: waits
# for every client to leave). A frozen cluster (freeze_postgres) is thawed first.
stop_postgres() {
  local -n pm="pgpid_$1"
  thaw_postgres "$1"
  kill -"${2:-QUIT}" "$pm" 2>/dev/null
  wait "$pm" 2>/dev/null
  # wait returns at once when the postmaster is not this shell's child (a subshell called us).
  for _ in $(seq 1 1500); do
    kill -0 "$pm" 2>/dev/null || break
    sleep 0.02
  done
}

# restart_postgres NAME [SIGNAL]: stop_postgres, then a new postmaster on the same data directory
# and port (the clients' connection strings stay valid); sets pgpid_NAME. Fails the script when it
# does not come back.
restart_postgres() {
  local -n port="pgport_$1"
  stop_postgres "$1" "${2:-QUIT}"
  pg_launch "$1" "$port" && return 0
  bad "postgres $1 did not restart: $(tail -3 "$tmp/$1.pg/log")"
  finish
  exit 1
}

# freeze_postgres NAME / thaw_postgres NAME: SIGSTOP / SIGCONT cluster NAME's postmaster and every
# process it started (backends, background workers). Frozen, the server keeps its connections and
# the kernel still completes new TCP connections into its backlog, but nothing answers: what a
# hung or partitioned database looks like to a client. The postmaster is stopped first, so that
# it starts nothing after its children were listed.
freeze_postgres() {
  local -n pm="pgpid_$1"
  kill -STOP "$pm"
  kill -STOP $(pgrep -P "$pm") 2>/dev/null
}
thaw_postgres() {
  local -n pm="pgpid_$1"
  kill -CONT $(pgrep -P "$pm") "$pm" 2>/dev/null
}

# ---- Several nodes on one shared store (cluster.sh, pg_cluster.sh) ----------------------------

# shared_budget_checks P1 P2 P3: three nodes on one store (started with the checker's config,
# cluster_check.py --print-config) charge one budget, answer in the single node's words and keep
# a pipeline's order.
shared_budget_checks() {
  local got p out P=$1
  # One budget: a burst of 5 refilled once an hour; five grants over three nodes, then a denial
  # anywhere.
  got=""
  for p in $1 $2 $3 $1 $2 $3; do
    got="$got $(redis-cli -p "$p" CL.THROTTLE shared 4 1 3600 | head -1)"
  done
  check "burst of 5 shared by three nodes" " 0 0 0 0 0 1" "$got"
  check "THROTTLE on one node" 1 "$(redis-cli -p "$1" THROTTLE slow x | head -1)"
  check "denied on another, naming the limit" "0 slow" \
    "$(redis-cli -p "$2" THROTTLE slow x | sed -n '1p;6p' | tr '\n' ' ' | sed 's/ $//')"
  # CL.THROTTLE keeps redis-cell's reply: burst 0 + 1, one per second.
  check "CL.THROTTLE first" "0 1 0 -1 1" "$(P=$2 cli CL.THROTTLE cellkey 0 1 1)"
  contains "CL.THROTTLE second, other node" "1 1 0 1 1" "$(P=$3 cli CL.THROTTLE cellkey 0 1 1)"
  # Argument errors keep their words and never reach the store.
  contains "bad units" "WRONGARGS UNITS must be an integer" "$(cli THROTTLE api k UNITS 0)"
  contains "unknown limit" "NOLIMIT" "$(cli THROTTLE nope k)"
  contains "CL.THROTTLE bad numbers" "WRONGARGS" "$(cli CL.THROTTLE k 1 0 1)"
  # A pipeline of decisions and other commands keeps its order.
  printf 'PING\r\nTHROTTLE api order\r\nECHO x\r\nCL.THROTTLE order 9 9 1\r\nPING\r\nQUIT\r\n' >"$tmp/pipe"
  out=$(timeout 30 redis-cli -p "$P" <"$tmp/pipe" 2>&1 | tr '\n' ' ')
  check "pipelined replies in command order" "PONG 1 5 4 0 50  x 0 10 9 -1 1 PONG " "$out"
}

# shared_lease_checks P1 P2 P3: a lease taken on one node is held for all (the config's `slots`,
# concurrency 2), renewed and released on the others.
shared_lease_checks() {
  local h1 h2 P=$1
  # Leases are shared: two slots for all nodes; a handle from one node renews and releases on another.
  h1=$(redis-cli -p "$1" LEASE.ACQUIRE slots job1 | sed -n 2p)
  h2=$(redis-cli -p "$2" LEASE.ACQUIRE slots job1 TTL 60000 | sed -n 2p)
  contains "first lease" "slots/" "$h1"
  contains "second lease, other node" "slots/" "$h2"
  contains "third lease refused on a third node" "RATELIMITED limit=slots kind=concurrency key=job1" \
    "$(P=$3 cli LEASE.ACQUIRE slots job1)"
  check "renewed on another node" 5000 "$(redis-cli -p "$3" LEASE.RENEW "$h1" TTL 5000)"
  check "released on another node" OK "$(redis-cli -p "$2" LEASE.RELEASE "$h1")"
  contains "a slot again" "slots/" "$(redis-cli -p "$3" LEASE.ACQUIRE slots job1 | sed -n 2p)"
  contains "a handle of nothing" "NOLEASE" "$(P=$1 cli LEASE.RELEASE slots/99/6a6f6231)"
  contains "a malformed handle" "NOLEASE" "$(P=$1 cli LEASE.RENEW nonsense)"
  contains "THROTTLE still only peeks at a concurrency limit" "WRONGARGS" "$(cli THROTTLE slots job1)"
}

# ---- the PostgreSQL scripts' common head -----------------------------------------------------

# need_helper NAME: sets helper to the test tool NAME built next to the sluice binary ($sluice);
# fails the script (exit 1) when it is not built.
need_helper() {
  helper="$(dirname "$sluice")/$1"
  [ -x "$helper" ] || {
    bad "$helper is not built"
    finish
    exit 1
  }
}

# helper_run LABEL ARGS...: runs $helper (need_helper's) with ARGS: a pass when it exits 0, else a
# failure named LABEL with its output; prints its output's last line (its summary) either way.
# Variables assigned before the call (VAR=1 helper_run ...) reach the tool's environment.
helper_run() {
  local label=$1 out
  shift
  if out=$("$helper" "$@" 2>&1); then
    ok
  else
    bad "$label: $out"
  fi
  echo "$out" | tail -1
}

# diff_seeds NAME STEPS SEED...: the differential tests' runs: helper_run of $helper against
# start_redis NAME's redis-server and start_postgres NAME's PostgreSQL, STEPS steps for each SEED
# (the tool's arguments REDIS-PORT PG-CONNINFO SEED STEPS; a failure is named "seed SEED").
diff_seeds() {
  local name=$1 steps=$2 seed rport pgconn
  shift 2
  rport="rport_$name"
  pgconn="pgconn_$name"
  for seed in "$@"; do
    helper_run "seed $seed" "${!rport}" "${!pgconn}" "$seed" "$steps"
  done
}

# need_postgres: skips the script (exit 77) when PostgreSQL's server binaries are not installed,
# the only reason a PostgreSQL test is skipped; the checks that ran before it are counted first.
need_postgres() {
  pg_bindir >/dev/null && return 0
  echo "SKIPPED: PostgreSQL server binaries (initdb, postgres) are not installed;" \
    "scripts/deps.sh installs Debian's postgresql"
  [ $((passed + failed)) -eq 0 ] || finish
  exit 77
}

# ---- the PostgreSQL benchmarks (bench/pg_*.sh) -----------------------------------------------

# bench_postgres [OPTION...]: the benchmarks' throwaway cluster `bench`, with durable commits
# (fsync and full_page_writes on, synchronous_commit $sync: the same for every design compared)
# and the server OPTIONs given; sets bin (its binaries' directory) and conn (its connection
# string).
bench_postgres() {
  start_postgres bench -c fsync=on -c synchronous_commit="$sync" -c full_page_writes=on "$@"
  bin=$(pg_bindir)
  conn=$pgconn_bench
}

# naive_buckets MAX-AHEAD-NS: the one-row-per-bucket design the benchmarks compare against (seed
# 001's): table naive_buckets holding the hot key, and $tmp/naive.sql, pgbench's script of one
# `UPDATE ... RETURNING` transaction per decision of a GCRA with T = 1000 ns that admits while
# the bucket's TAT is at most MAX-AHEAD-NS ahead of now.
naive_buckets() {
  "$bin/psql" "$conn" -q -c "CREATE TABLE naive_buckets (key text PRIMARY KEY, tat bigint NOT NULL);
  INSERT INTO naive_buckets VALUES ('hot', 0)"
  cat >"$tmp/naive.sql" <<SQL
UPDATE naive_buckets SET tat = greatest(tat, t.n) + 1000
  FROM (SELECT (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint AS n) t
 WHERE key = 'hot' AND greatest(tat, t.n) + 1000 - t.n <= $1 RETURNING tat;
SQL
}

# ---- Parity across stores (shared_parity.sh, shared_task_parity.sh) ----------------------------

# start_parity_nodes: one node on the embedded store (memory only), one on a fresh redis-server,
# one on a fresh one-master Redis Cluster and one on a fresh PostgreSQL, all on
# $tmp/sluice.yaml and up; sets port_one, port_red, port_clu and port_pg.
start_parity_nodes() {
  start_redis parity
  start_cluster parityc
  start_postgres parity
  start_node one --data "$tmp/one" --durability none
  start_node red --store "redis://127.0.0.1:$rport_parity"
  start_node clu --store "redis-cluster://127.0.0.1:$rport_parityc"
  start_node pg --store "postgresql://sluice@127.0.0.1:$pgport_parity/postgres"
  parity_up() { [ "$(store_field "$1" store_state)" = up ]; }
  wait_until "the Redis node is up" 30 parity_up "$port_red"
  wait_until "the Redis Cluster node is up" 30 parity_up "$port_clu"
  wait_until "the PostgreSQL node is up" 30 parity_up "$port_pg"
}

# parity_seed SEED WHAT [STORE...]: plays $tmp/seq.SEED (written by the caller) with the caller's
# `play SEQ OUT PORT` on the single node `one` and on the nodes STORE... (default: red clu pg,
# the Redis, Redis Cluster and PostgreSQL nodes of start_parity_nodes; each on $port_STORE),
# then checks that they answered as the single node did. WHAT names the replies for the
# message. A run that crosses a UTC midnight is not compared: the day's windows and quotas
# restarted in it.
parity_seed() {
  local seed=$1 what=$2 day store port
  shift 2
  [ "$#" -gt 0 ] || set -- red clu pg
  day=$(date -u +%F)
  for store in one "$@"; do
    port=port_$store
    play "$tmp/seq.$seed" "$tmp/$store.$seed" "${!port}"
  done
  for store in "$@"; do
    if [ "$(date -u +%F)" != "$day" ]; then
      ok
    elif cmp -s "$tmp/one.$seed" "$tmp/$store.$seed"; then
      ok
    else
      bad "seed $seed: the $store node's $what differ from the single node's: $(diff "$tmp/one.$seed" "$tmp/$store.$seed" | head -4 | tr '\n' ' ')"
    fi
  done
}
