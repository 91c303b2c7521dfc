#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# End-to-end tests of `sluice serve`: the real server on an ephemeral port, real clients
# (redis-cli) and raw bytes over bash's /dev/tcp for the protocol abuse cases of Redis's
# tests/unit/protocol.tcl. Every command and every error code; pipelining; CL.THROTTLE as
# redis-cell documents it; CONFIG RELOAD all-or-nothing; reader limits, before and after AUTH;
# clients and output limits; the log format; SIGTERM exits 0. Traffic goes to 127.0.0.1 only.
#
# Usage: bash tests/server/run.sh PATH-TO-SLUICE SOURCE-DIR
# Prints one line per failed check and "N passed, N failed"; exits non-zero on any failure.
set -u
set -f # replies such as *0 are words, never file patterns

sluice=${1:?usage: run.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"
srcdir=${2:-.}


# tpos REPLY N: the Nth word (from 1) of a reply. THROTTLE replies
#   allowed limit remaining retry_after_ms reset_after_ms denied_by
tpos() { echo "$1" | awk -v n="$2" '{ print $n }'; }


# cli PORT ARGS...: one redis-cli command, its output lines joined by spaces.
cli() {
  local port=$1
  shift
  redis-cli -p "$port" "$@" 2>&1 | tr '\n' ' ' | sed 's/ *$//'
}

# raw PORT BYTES [SECONDS]: sends BYTES (printf %b escapes) on a fresh connection and prints
# what comes back until the server closes it or SECONDS (default 30) pass. Every use but one
# expects the close (a QUIT or a protocol error), so SECONDS is a deadline, not a pace. Afterwards
# `raw_closed` prints 1 when the server closed the connection by itself (raw runs in a
# subshell, so the flag goes through a file).
raw() {
  local port=$1 bytes=$2 secs=${3:-30} out
  echo 0 >"$tmp/raw_closed"
  exec 3<>"/dev/tcp/127.0.0.1/$port" || {
    echo "CONNECT FAILED"
    return
  }
  printf '%b' "$bytes" >&3 2>/dev/null
  out=$({
    timeout "$secs" cat <&3
    echo "rc=$?"
  } 2>/dev/null | tr '\0' '?')
  case $out in *rc=124) ;; *) echo 1 >"$tmp/raw_closed" ;; esac
  exec 3<&- 3>&-
  printf '%s' "${out%rc=*}" | tr -d '\r' | sed -e '$!b' -e '/^$/d'
}
raw_closed() { cat "$tmp/raw_closed"; }

# ---- A server with a configuration file ------------------------------------------------------

cat >"$tmp/sluice.yaml" <<'EOF'
limits:
  heavy:
    rate: 5/1m
    key: explicit
  global:
    rate: 1000/1h
  tiered:
    key: input.user
    tier:
      field: input.n
      tiers:
        - {name: a, max: 0, rate: 1/1m}
        - {name: b, min: 1, rate: 2/1m}
types:
  job:
    limits: [heavy, global]
EOF
start main --config "$tmp/sluice.yaml" --log-level debug
P=$port_main

# ---- Connection commands ----------------------------------------------------------------------

check "PING" "PONG" "$(cli $P PING)"
check "PING message" "hello" "$(cli $P PING hello)"
contains "PING arity" "WRONGARGS wrong number of arguments for 'ping' command" \
  "$(cli $P PING a b)"
check "ECHO" "x y" "$(cli $P ECHO 'x y')"
contains "unknown command" "ERR unknown command 'NOPE', with args beginning with: 'a' 'b'" \
  "$(cli $P NOPE a b)"
check "lower-case command" "PONG" "$(cli $P ping)"
check "SELECT 0" "OK" "$(cli $P SELECT 0)"
contains "SELECT 1" "ERR DB index is out of range" "$(cli $P SELECT 1)"
check "QUIT" "OK" "$(cli $P QUIT)"
contains "AUTH without a password" "ERR AUTH <password> called without any password" \
  "$(cli $P AUTH x)"
check "HELLO 3" "server sluice version 0.1.0 proto 3" "$(cli $P HELLO 3 | cut -d' ' -f1-6)"
check "HELLO 2 over RESP2" "server sluice version 0.1.0 proto 2" \
  "$(cli $P HELLO 2 | cut -d' ' -f1-6)"
contains "HELLO 4" "NOPROTO unsupported protocol version" "$(cli $P HELLO 4)"
contains "HELLO bad option" "WRONGARGS syntax error in HELLO option 'bogus'" \
  "$(cli $P HELLO 3 bogus)"
check "HELLO SETNAME + CLIENT GETNAME" "x" \
  "$(printf 'HELLO 2 SETNAME worker1\nCLIENT GETNAME\n' | redis-cli -p $P | tail -1 |
    sed 's/worker1/x/')"
check "CLIENT SETNAME" "OK" "$(cli $P CLIENT SETNAME me)"
contains "CLIENT SETNAME space" "WRONGARGS Client names cannot contain spaces" \
  "$(cli $P CLIENT SETNAME 'a b')"
check "CLIENT SETINFO" "OK" "$(cli $P CLIENT SETINFO lib-name x)"
contains "CLIENT ID" "" "$(cli $P CLIENT ID)"
contains "CLIENT LIST" "addr=127.0.0.1:" "$(cli $P CLIENT LIST)"
contains "CLIENT bad" "WRONGARGS unknown CLIENT subcommand" "$(cli $P CLIENT NOPE)"

# RESP3 replies as redis-cli -3 shows them.
out=$(raw $P 'HELLO 3\r\nTHROTTLE global x\r\nLIMIT.GET global\r\nQUIT\r\n')
check "RESP3 HELLO map" "%7" "$(echo "$out" | head -1)"
contains "RESP3 THROTTLE: an array, nil as _" "*6 :1 :1000 :999 :0 :3600 _ %6" "$(echo $out)"

# ---- INFO, COMMAND, CONFIG --------------------------------------------------------------------

out=$(redis-cli -p $P INFO)
for s in "# Server" "# Clients" "# Stats" "# Engine" "# Limits" "sluice_version:0.1.0" \
  "tcp_port:$P" "connected_clients:" "limit_heavy:kind=rate" "limits:3" "total_commands_processed:"; do
  contains "INFO has $s" "$s" "$out"
done
out=$(redis-cli -p $P INFO engine)
contains "INFO engine" "# Engine" "$out"
lacks "INFO engine only" "# Server" "$out"
check "INFO unknown section" "" "$(cli $P INFO nosuch)"
check "COMMAND COUNT" "$(redis-cli -p $P COMMAND LIST | wc -l)" "$(cli $P COMMAND COUNT)"
within "COMMAND COUNT: at least the 20 of the server" 20 1000 "$(cli $P COMMAND COUNT)"
check "COMMAND DOCS is empty" "" "$(cli $P COMMAND DOCS)"
contains "COMMAND LIST" "cl.throttle" "$(cli $P COMMAND LIST)"
check "COMMAND INFO throttle" "throttle -3 write fast 0 0 0" "$(cli $P COMMAND INFO throttle)"
contains "COMMAND INFO cl.throttle keys" "cl.throttle -5 write fast 1 1 1" \
  "$(cli $P COMMAND INFO cl.throttle nosuch)"
contains "COMMAND bad" "WRONGARGS unknown COMMAND subcommand" "$(cli $P COMMAND NOPE)"
contains "COMMAND (all)" "limit.reset" "$(cli $P COMMAND)"
check "CONFIG GET port" "port $P" "$(cli $P CONFIG GET port)"
check "CONFIG GET save" "save  appendonly no" "$(cli $P CONFIG GET save appendonly)"
check "CONFIG GET nothing" "" "$(cli $P CONFIG GET nosuch)"
contains "CONFIG SET" "WRONGARGS unknown CONFIG subcommand" "$(cli $P CONFIG SET a b)"

# ---- THROTTLE on limits and on a type's chain -------------------------------------------------

# The calls on one key in one write: the server runs them in one turn, at one time, so their
# figures (heavy refills a slot every 12 s) do not move however slow the machine is.
raw $P 'THROTTLE heavy u1\r\nTHROTTLE heavy u1 PEEK\r\nTHROTTLE heavy u1 UNITS 3\r\nTHROTTLE heavy u1 UNITS 2\r\nQUIT\r\n' 30 |
  resp_flat >"$tmp/flat"
check "THROTTLE: all five replies" "OK" "$(rget 5)"
check "THROTTLE allowed" "1 5 4 0 12000" "$(rget 1)"
out=$(rget 2)
check "THROTTLE PEEK" "1 5 3 0" "$(echo "$out" | cut -d' ' -f1-4)"
within "THROTTLE PEEK reset" 23000 24000 "$(tpos "$out" 5)"
out=$(rget 3)
check "THROTTLE UNITS" "1 5 1 0" "$(echo "$out" | cut -d' ' -f1-4)"
within "THROTTLE UNITS reset" 47000 48000 "$(tpos "$out" 5)"
out=$(rget 4)
check "THROTTLE denied" "0 5 1" "$(echo "$out" | cut -d' ' -f1-3)"
within "THROTTLE denied retry" 11000 12000 "$(tpos "$out" 4)"
check "THROTTLE denied names the limit" "heavy" "$(tpos "$out" 6)"
check "THROTTLE other key" "1 5 4" "$(cli $P THROTTLE heavy u2 | cut -d' ' -f1-3)"
check "THROTTLE key=none ignores the key" "998" "$(tpos "$(cli $P THROTTLE global anything)" 3)"
check "THROTTLE more units than the burst" "0 5 5 -1" \
  "$(cli $P THROTTLE heavy u3 UNITS 6 | cut -d' ' -f1-4)"
# The type's chain: heavy (per key, 5/min) and global; the tighter one is reported.
# Again in one write: the sixth call is denied with retry_after one slot whatever the machine.
raw $P 'THROTTLE job u9\r\nTHROTTLE job u9\r\nTHROTTLE job u9\r\nTHROTTLE job u9\r\nTHROTTLE job u9\r\nTHROTTLE global x PEEK\r\nTHROTTLE job u9\r\nTHROTTLE global x PEEK\r\nQUIT\r\n' 30 |
  resp_flat >"$tmp/flat"
check "THROTTLE type chain: all nine replies" "OK" "$(rget 9)"
check "THROTTLE type chain" "1 5 4" "$(rget 1 | cut -d' ' -f1-3)"
before=$(tpos "$(rget 6)" 3)
out=$(rget 7)
check "THROTTLE type chain denied by heavy" "0 5 0" "$(echo "$out" | cut -d' ' -f1-3)"
within "THROTTLE type chain retry" 11000 12000 "$(tpos "$out" 4)"
check "THROTTLE type chain names the limit" "heavy" "$(tpos "$out" 6)"
check "a denied chain charged nothing" "$before" "$(tpos "$(rget 8)" 3)"
contains "THROTTLE unknown" "NOLIMIT no limit or task type named \"nosuch\"" \
  "$(cli $P THROTTLE nosuch k)"
contains "THROTTLE arity" "WRONGARGS wrong number of arguments for 'throttle' command" \
  "$(cli $P THROTTLE heavy)"
contains "THROTTLE syntax" "WRONGARGS syntax error: THROTTLE limit key [UNITS n] [TIER v] [PEEK]" \
  "$(cli $P THROTTLE heavy u1 FAST)"
contains "THROTTLE bad units" "WRONGARGS UNITS must be an integer from 1" \
  "$(cli $P THROTTLE heavy u1 UNITS 0)"
contains "THROTTLE tiered" "WRONGARGS limit \"tiered\" is tiered" "$(cli $P THROTTLE tiered u)"
contains "THROTTLE empty key" "WRONGARGS limit \"heavy\" needs a key" "$(cli $P THROTTLE heavy '')"

# ---- CL.THROTTLE ------------------------------------------------------------------------------

# The replies' seconds are rounded up, so they are exact only when the calls on a key see one
# time: each group goes in one write, which the server runs in one turn at one time, however
# slow the machine is. (30 per 60 s is a slot every 2 s; 1 per 60 s one every 60 s.)
out=$(echo $(raw $P 'CL.THROTTLE user123 15 30 60 1\r\nCL.THROTTLE user123 15 30 60\r\nCL.THROTTLE user123 15 30 60 0\r\nCL.THROTTLE k2 0 1 60\r\nCL.THROTTLE k2 0 1 60\r\nQUIT\r\n' 30))
# cell_reply N: the Nth (from 1) five-integer reply of $out, without the RESP markers.
cell_reply() { echo "$out" | awk -v n="$1" '{ for (i = 6 * n - 4; i <= 6 * n; i++) printf "%s%s", substr($i, 2), (i < 6 * n ? " " : "\n") }'; }
check "CL.THROTTLE replies" "*5 *5 *5 *5 *5 +OK" "$(echo "$out" | awk '{ print $1, $7, $13, $19, $25, $31 }')"
check "CL.THROTTLE redis-cell example" "0 16 15 -1 2" "$(cell_reply 1)"
check "CL.THROTTLE default quantity" "0 16 14 -1 4" "$(cell_reply 2)"
check "CL.THROTTLE quantity 0 peeks" "0 16 14 -1 4" "$(cell_reply 3)"
check "CL.THROTTLE burst spent" "1 1 0 60 60" "$(cell_reply 5)"
check "CL.THROTTLE too big" "1 16 16 -1 0" "$(cli $P CL.THROTTLE k3 15 30 60 17)"
contains "CL.THROTTLE negative burst" "WRONGARGS CL.THROTTLE: max_burst and quantity" \
  "$(cli $P CL.THROTTLE k -1 30 60)"
contains "CL.THROTTLE not a number" "WRONGARGS CL.THROTTLE key max_burst count period" \
  "$(cli $P CL.THROTTLE k x 30 60)"
contains "CL.THROTTLE arity" "WRONGARGS wrong number of arguments for 'cl.throttle'" \
  "$(cli $P CL.THROTTLE k 1 2)"
contains "CL.THROTTLE too many" "WRONGARGS wrong number of arguments for 'cl.throttle'" \
  "$(cli $P CL.THROTTLE k 1 2 3 4 5)"
contains "CL.THROTTLE period too long" "WRONGARGS CL.THROTTLE" \
  "$(cli $P CL.THROTTLE k 1 2 999999999)"

# ---- Leases -----------------------------------------------------------------------------------

check "LIMIT.SET concurrency" "OK" "$(cli $P LIMIT.SET slots concurrency=2,key=explicit,ttl=30s)"
contains "THROTTLE on a concurrency limit" "WRONGARGS limit \"slots\" is a concurrency limit" \
  "$(cli $P THROTTLE slots db1)"
check "THROTTLE PEEK on a concurrency limit" "1 2" \
  "$(cli $P THROTTLE slots db1 PEEK | cut -d' ' -f1-2)"
out=$(cli $P LEASE.ACQUIRE slots db1)
lease=$(echo "$out" | awk '{print $2}')
check "LEASE.ACQUIRE" "lease slots/$(echo "$lease" | cut -d/ -f2)/1 ttl_ms 30000 remaining 1" "$out"
check "LEASE.ACQUIRE TTL" "ttl_ms 500 remaining 0" \
  "$(cli $P LEASE.ACQUIRE slots db1 TTL 500 | cut -d' ' -f3-6)"
contains "LEASE.ACQUIRE refused" "RATELIMITED limit=slots kind=concurrency key=db1 limit_value=2 window_ms=0 retry_after_ms=" \
  "$(cli $P LEASE.ACQUIRE slots db1)"
check "LEASE.RENEW" "1000" "$(cli $P LEASE.RENEW "$lease" TTL 1000)"
check "LEASE.RELEASE" "OK" "$(cli $P LEASE.RELEASE "$lease")"
check "LEASE.RELEASE twice" "OK" "$(cli $P LEASE.RELEASE "$lease")"
contains "LEASE.RENEW released" "NOLEASE" "$(cli $P LEASE.RENEW "$lease")"
contains "LEASE.RENEW garbage" "NOLEASE no such lease" "$(cli $P LEASE.RENEW nolease)"
contains "LEASE.ACQUIRE on a rate limit" "WRONGARGS limit \"heavy\" is a rate limit" \
  "$(cli $P LEASE.ACQUIRE heavy k)"
contains "LEASE.ACQUIRE unknown" "NOLIMIT no limit named \"nope\"" "$(cli $P LEASE.ACQUIRE nope k)"
contains "LEASE.ACQUIRE bad TTL" "WRONGARGS TTL must be an integer" \
  "$(cli $P LEASE.ACQUIRE slots k TTL -5)"
contains "LEASE.RELEASE arity" "WRONGARGS wrong number of arguments for 'lease.release'" \
  "$(cli $P LEASE.RELEASE a b)"

# ---- LIMIT.* ----------------------------------------------------------------------------------

check "LIMIT.SET" "OK" "$(cli $P LIMIT.SET api rate=10/1s,burst=20,key=input.tenant,overflow=reject)"
check "LIMIT.GET" "name api spec rate=10/1s,burst=20,key=input.tenant,overflow=reject kind rate tiers  keys 0 source runtime" \
  "$(cli $P LIMIT.GET api)"
contains "LIMIT.GET config source" "source config line" "$(cli $P LIMIT.GET heavy)"
contains "LIMIT.GET tiered" "spec tiered by input.n (2 tiers) kind rate tiers a: rate=1/1m b: rate=2/1m" \
  "$(cli $P LIMIT.GET tiered)"
contains "LIMIT.LIST" "api rate=10/1s,burst=20,key=input.tenant,overflow=reject global rate=1000/1h" \
  "$(cli $P LIMIT.LIST)"
contains "LIMIT.SET bad spec" "WRONGARGS bad period \"5x\"" "$(cli $P LIMIT.SET x rate=10/5x)"
contains "LIMIT.SET bad policy" "WRONGARGS bad value \"drop\"" \
  "$(cli $P LIMIT.SET x rate=10/1s,overflow=drop)"
contains "LIMIT.SET bad name" "WRONGARGS" "$(cli $P LIMIT.SET 'a b' rate=10/1s)"
# The four in one write: the server runs them in one turn, at one time, so no slot comes back
# between the two THROTTLEs (10/s refills one every 100 ms), and the key is still tracked when
# LIMIT.RESET asks (a key back to full, 200 ms later, may be dropped), however slow the machine.
out=$(raw $P 'THROTTLE api t1\r\nLIMIT.SET api rate=10/1s,burst=20,key=input.tenant,overflow=reject\r\nTHROTTLE api t1\r\nLIMIT.RESET api t1\r\nQUIT\r\n' 30)
out=$(echo $out)
check "THROTTLE before reset" ":19" "$(tpos "$out" 4)"
check "LIMIT.SET same spec keeps state" "+OK" "$(tpos "$out" 8)"
check "state kept" ":18" "$(tpos "$out" 12)"
check "LIMIT.RESET key" ":1" "$(tpos "$out" 16)"
check "LIMIT.RESET untracked key" "0" "$(cli $P LIMIT.RESET api never)"
check "key reset" "19" "$(tpos "$(cli $P THROTTLE api t1)" 3)"
check "LIMIT.RESET all" "OK" "$(cli $P LIMIT.RESET api)"
check "all reset" "19" "$(tpos "$(cli $P THROTTLE api t1)" 3)"
check "LIMIT.RESET tiered" "OK" "$(cli $P LIMIT.RESET tiered)"
contains "LIMIT.RESET unknown" "NOLIMIT" "$(cli $P LIMIT.RESET nope)"
contains "LIMIT.RESET arity" "WRONGARGS wrong number of arguments for 'limit.reset'" \
  "$(cli $P LIMIT.RESET a b c)"
check "LIMIT.DEL" "1" "$(cli $P LIMIT.DEL api)"
contains "LIMIT.DEL again" "NOLIMIT no limit named \"api\"" "$(cli $P LIMIT.DEL api)"
contains "LIMIT.DEL in use" "INUSE limit \"heavy\" is in a task type's chain" \
  "$(cli $P LIMIT.DEL heavy)"
contains "LIMIT.GET unknown" "NOLIMIT" "$(cli $P LIMIT.GET api)"
contains "LIMIT.LIST arity" "WRONGARGS" "$(cli $P LIMIT.LIST x)"

# ---- CONFIG RELOAD: all or nothing ------------------------------------------------------------

sed -i 's#rate: 1000/1h#rate: 2000/1h#' "$tmp/sluice.yaml"
# A key's burst spent, the reload, and the key asked again, in one write: one turn, one time, so
# no slot of heavy (every 12 s) comes back in between however slow the machine is.
raw $P 'THROTTLE job u10\r\nTHROTTLE job u10\r\nTHROTTLE job u10\r\nTHROTTLE job u10\r\nTHROTTLE job u10\r\nCONFIG RELOAD\r\nTHROTTLE job u10\r\nQUIT\r\n' 30 |
  resp_flat >"$tmp/flat"
check "the burst spent before the reload" "1 5 0" "$(rget 5 | cut -d' ' -f1-3)"
check "CONFIG RELOAD" "OK" "$(rget 6)"
check "reloaded limit" "rate=2000/1h" "$(cli $P LIMIT.GET global | awk '{print $4}')"
check "unchanged limit keeps its state" "0" "$(tpos "$(rget 7)" 1)"
cp "$tmp/sluice.yaml" "$tmp/good.yaml"
printf 'limits:\n  global:\n    rate: 3000/1s\n  broken:\n    rate: ten/1s\n' >"$tmp/sluice.yaml"
out=$(cli $P CONFIG RELOAD)
contains "CONFIG RELOAD bad file" "CONFIG $tmp/sluice.yaml:5" "$out"
check "nothing applied" "rate=2000/1h" "$(cli $P LIMIT.GET global | awk '{print $4}')"
cp "$tmp/good.yaml" "$tmp/sluice.yaml"
sed -i '/^  tiered:/,/b, min: 1/d' "$tmp/sluice.yaml"
check "CONFIG RELOAD removing a limit" "OK" "$(cli $P CONFIG RELOAD)"
contains "removed limit" "NOLIMIT" "$(cli $P LIMIT.GET tiered)"
contains "CONFIG RELOAD logged" "config $tmp/sluice.yaml loaded" "$(cat "$tmp/main.log")"

# ---- Pipelining -------------------------------------------------------------------------------

# In one write (redis-cli would send them one by one): the rounded-up seconds of CL.THROTTLE are
# exact only when the three calls see one time.
out=$(raw $P 'PING\r\nCL.THROTTLE p 1 1 60\r\nCL.THROTTLE p 1 1 60\r\nCL.THROTTLE p 1 1 60\r\nECHO done\r\nQUIT\r\n' 30 |
  resp_flat | awk -F'\t' '$1 <= 5 { printf "%s ", $2 }')
check "pipelined replies in order" "PONG 0 2 1 -1 60 0 2 0 -1 120 1 2 0 60 120 done " "$out"
out=$(raw $P '*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\nPING\r\n*1\r\n$4\r\nQUIT\r\n')
check "multibulk and inline mixed in one write" "+PONG \$2 hi +PONG +OK" "$(echo $out)"
big=$(for i in $(seq 1 2000); do printf 'PING\r\n'; done)
out=$(raw $P "${big}\nQUIT\r\n" 60)
check "2000 pipelined inline commands" "2001" "$(echo "$out" | grep -c '^+')"

# ---- Protocol abuse (Redis tests/unit/protocol.tcl) -------------------------------------------

out=$(raw $P '\r\nPING\r\nQUIT\r\n')
check "empty query" "+PONG +OK" "$(echo $out)"
# Redis skips a negative count (*-10) and goes on: so does sluice (a null array, no command, the
# connection stays).
out=$(raw $P '*-10\r\nPING\r\nQUIT\r\n')
check "negative multibulk length skipped" "+PONG +OK" "$(echo $out)"
out=$(raw $P '*-1\r\nPING\r\nQUIT\r\n')
check "nil multibulk skipped" "+PONG +OK" "$(echo $out)"
out=$(raw $P '*20000000\r\nPING\r\n')
check "out of range multibulk length" "-ERR Protocol error: invalid multibulk length" "$out"
check "closed after the protocol error" "1" "$(raw_closed)"
out=$(raw $P '*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n')
check "wrong multibulk payload header" "-ERR Protocol error: expected '\$', got 'f'" "$out"
out=$(raw $P '*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$-10\r\n')
check "negative bulk length" "-ERR Protocol error: invalid bulk length" "$out"
out=$(raw $P '*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$2000000000\r\n')
check "out of range bulk length" "-ERR Protocol error: invalid bulk length" "$out"
out=$(raw $P '*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$blabla\r\n')
check "non-number bulk length" "-ERR Protocol error: invalid bulk length" "$out"
out=$(raw $P '*1\r\nfoo\r\n')
check "multibulk not followed by bulk" "-ERR Protocol error: expected '\$', got 'f'" "$out"
out=$(raw $P '*2\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n')
check "unbalanced array" "-ERR Protocol error: expected '\$', got '*'" "$out"
out=$(raw $P '*abc\r\n')
check "non-number multibulk length" "-ERR Protocol error: invalid multibulk length" "$out"
out=$(raw $P '*3\r\n$4\r\nPING\r\n' 1)
check "incomplete command: no reply, still open" "|0" "$out|$(raw_closed)"
out=$(raw $P '*2\r\n$4\r\nECHO\r\n$3\r\na\0b\r\nQUIT\r\n')
check "NUL bytes in a bulk" "\$3 a?b +OK" "$(echo $out)"
# Protocol desync: a NUL then an endless line; the inline limit ends it.
for seq in '\0' '*\0' '$\0'; do
  out=$(raw $P "${seq}$(head -c 70000 /dev/zero | tr '\0' A)" 60)
  contains "desync $seq" "-ERR Protocol error" "$out"
  check "desync $seq closed" "1" "$(raw_closed)"
done
out=$(raw $P '*1\r\n$4\r\nPING\r\n*x\r\n*1\r\n$4\r\nPING\r\n')
check "replies before the error, none after" "+PONG -ERR Protocol error: invalid multibulk length" \
  "$(echo $out)"
check "server alive after abuse" "PONG" "$(cli $P PING)"
contains "protocol errors counted" "protocol_errors:" "$(cli $P INFO stats)"

# ---- The log ----------------------------------------------------------------------------------

bad_lines=$(grep -cvE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z (DEBUG|INFO|WARN|ERROR) ' \
  "$tmp/main.log")
check "every log line has a timestamp and a level" "0" "$bad_lines"
contains "listening logged" "INFO listening on 127.0.0.1:$P" "$(cat "$tmp/main.log")"
contains "protocol errors logged at debug" "DEBUG client" "$(cat "$tmp/main.log")"

stop main
check "SIGTERM exits 0" "0" "$stop_rc"
contains "stop logged" "INFO stopped" "$(cat "$tmp/main.log")"

# ---- Limits on what a client may send and be sent ---------------------------------------------

start small --max-bulk-len 1k --max-args 8 --max-inline-len 256 --max-query-len 2k \
  --max-key-len 16 --max-output 4k --max-clients 3
S=$port_small
out=$(raw $S "*2\r\n\$4\r\nECHO\r\n\$2000\r\n")
check "bulk over --max-bulk-len" "-ERR Protocol error: invalid bulk length" "$out"
out=$(raw $S "*9\r\n")
check "args over --max-args" "-ERR Protocol error: invalid multibulk length" "$out"
out=$(raw $S "PING $(head -c 300 /dev/zero | tr '\0' a)\r\n")
check "inline over --max-inline-len" "-ERR Protocol error: too big inline request" "$out"
check "8 args are fine" "WRONGARGS wrong number of arguments for 'ping' command" \
  "$(cli $S PING 1 2 3 4 5 6 7)"
contains "key over --max-key-len" "WRONGARGS key of 17 bytes is longer than the maximum of 16" \
  "$(cli $S CL.THROTTLE 12345678901234567 1 1 1)"
check "key at --max-key-len" "0 2 1 -1 1" "$(cli $S CL.THROTTLE 1234567890123456 1 1 1)"
# A client that does not read its replies: once the kernel's socket buffers are full, replies
# queue in the server, and past --max-output the client is cut. 20000 COMMAND replies are
# some 40 MB, more than any socket buffer holds.
cmds=$(head -c 20000 /dev/zero | sed 's/\x0/COMMAND\r\n/g')
out=$(raw $S "$cmds" 60)
check "output over --max-output closes" "1" "$(raw_closed)"
contains "output overflow logged" "WARN client" "$(cat "$tmp/small.log")"
# --max-clients 3: three held connections, the fourth is told and closed. No wait is needed
# before the fourth: connections are accepted in the order they were made (the listen queue is
# first in, first out), so the three are the server's before the fourth, however slow it is.
exec 4<>/dev/tcp/127.0.0.1/$S 5<>/dev/tcp/127.0.0.1/$S 6<>/dev/tcp/127.0.0.1/$S
out=$(raw $S 'PING\r\n')
check "max clients" "-ERR max number of clients reached" "$out"
exec 4<&- 5<&- 6<&-
# The server frees the slots when it reads the closes: wait for that, however long it takes.
pong() { [ "$(cli $S PING)" = PONG ]; }
wait_until "the closed connections are noticed" 20 pong
check "room again" "PONG" "$(cli $S PING)"
stop small
check "small: SIGTERM exits 0" "0" "$stop_rc"

# ---- Passwords and the limits before AUTH -----------------------------------------------------

printf 'secret\n' >"$tmp/pass"
start auth --requirepass-file "$tmp/pass"
A=$port_auth
contains "NOAUTH" "NOAUTH Authentication required." "$(cli $A PING)"
contains "NOAUTH for THROTTLE" "NOAUTH" "$(cli $A CL.THROTTLE k 1 1 1)"
contains "WRONGPASS" "WRONGPASS invalid username-password pair" "$(cli $A AUTH nope)"
contains "WRONGPASS user" "WRONGPASS" "$(cli $A AUTH admin secret)"
check "AUTH" "OK PONG" "$(printf 'AUTH secret\nPING\n' | redis-cli -p $A | tr '\n' ' ' | sed 's/ $//')"
check "AUTH default user" "OK PONG" \
  "$(printf 'AUTH default secret\nPING\n' | redis-cli -p $A | tr '\n' ' ' | sed 's/ $//')"
check "redis-cli -a" "PONG" "$(redis-cli --no-auth-warning -a secret -p $A PING)"
contains "HELLO before AUTH" "NOAUTH HELLO must be called" "$(cli $A HELLO 3)"
check "HELLO AUTH" "proto 3" "$(cli $A HELLO 3 AUTH default secret | cut -d' ' -f5-6)"
contains "HELLO bad AUTH" "WRONGPASS" "$(cli $A HELLO 3 AUTH default nope)"
check "QUIT before AUTH" "OK" "$(cli $A QUIT)"
# Before AUTH: at most 10 arguments of 16 KiB each, whatever the limits after.
out=$(raw $A '*11\r\n')
check "pre-AUTH: 11 arguments refused" "-ERR Protocol error: invalid multibulk length" "$out"
out=$(raw $A '*2\r\n$4\r\nAUTH\r\n$16385\r\n')
check "pre-AUTH: 16 KiB + 1 refused" "-ERR Protocol error: invalid bulk length" "$out"
out=$(raw $A "AUTH $(head -c 17000 /dev/zero | tr '\0' a)\r\n")
check "pre-AUTH: long inline refused" "-ERR Protocol error: too big inline request" "$out"
out=$(raw $A '*2\r\n$4\r\nAUTH\r\n$6\r\nsecret\r\n*11\r\n$4\r\nPING\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n$1\r\n4\r\n$1\r\n5\r\n$1\r\n6\r\n$1\r\n7\r\n$1\r\n8\r\n$1\r\n9\r\n$1\r\nX\r\nQUIT\r\n')
check "after AUTH: 11 arguments fine" "+OK -WRONGARGS wrong number of arguments for 'ping' command +OK" \
  "$(echo $out)"
contains "auth failures counted" "auth_failures:" "$(redis-cli --no-auth-warning -a secret -p $A INFO stats)"
contains "auth failure logged" "WARN client" "$(cat "$tmp/auth.log")"
stop auth
check "auth: SIGTERM exits 0" "0" "$stop_rc"

# ---- Graceful stop with clients connected -----------------------------------------------------

start drain
D=$port_drain
exec 7<>/dev/tcp/127.0.0.1/$D
printf 'PING\r\n' >&7
kill -TERM "$pid_drain"
out=$(timeout 30 cat <&7 | tr -d '\r') # returns at the close: a deadline
exec 7<&-
check "in-flight reply answered before closing" "+PONG" "$out"
wait "$pid_drain"
check "drain: exits 0" "0" "$?"
contains "drain logged" "INFO shutting down" "$(cat "$tmp/drain.log")"

# ---- Start-up errors --------------------------------------------------------------------------

"$sluice" serve --port 70000 >/dev/null 2>"$tmp/err"
check "bad port: usage" "2" "$?"
"$sluice" serve --bogus >/dev/null 2>"$tmp/err"
check "unknown option: usage" "2" "$?"
"$sluice" serve --port 0 --config "$tmp/nope.yaml" >/dev/null 2>"$tmp/err"
check "missing config: fails" "1" "$?"
"$sluice" serve --port 0 --bind not-an-address --durability none >/dev/null 2>"$tmp/err"
check "bad bind: fails" "1" "$?"
contains "bad bind: says why" "bad bind address" "$(cat "$tmp/err")"
"$sluice" serve --help >"$tmp/out" 2>&1
check "help: exit 0" "0" "$?"
contains "help lists flags" "--max-output" "$(cat "$tmp/out")"

finish
