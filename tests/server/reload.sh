#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# CONFIG RELOAD off the event loop, over the wire (src/server/reload.h):
#
# - while a reload is in flight, other clients are served, by the old configuration: the
#   configuration file is replaced by a named pipe, so the reload's worker waits in open() until
#   the test writes the new file into it: every check in between runs while the reload is
#   certainly in flight, however fast or slow the machine (the order is asserted, not a time);
# - the client that sent CONFIG RELOAD gets its reply when the new file is in force, and the
#   commands it pipelined behind it run after that, under the new file;
# - a second CONFIG RELOAD while one is in flight is refused with -BUSY at once;
# - a file of 100,000 limits, every one changed, is reloaded likewise;
# - a refused file (YAML error, a bad value, a missing file) changes nothing and says why;
# - a client that leaves while its reload is in flight does not stop the reload;
# - the reply comes once the reload's changes are written: a kill -9 right after it restarts with
#   the file's limits, neither the LIMIT.SET definition it replaced nor the replaced limit's
#   stored key state coming back.
# Rates are one an hour, so no slot comes back during the test however slow the machine.
# Traffic goes to 127.0.0.1 only.
#
# Usage: bash tests/server/reload.sh PATH-TO-SLUICE SOURCE-DIR
# Prints one line per failed check and "N passed, N failed"; exits non-zero on any failure.
set -u
set -f

sluice=${1:?usage: reload.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"
pid=

need_tools reload.sh redis-cli mkfifo

data="$tmp/data"
conf="$tmp/sluice.yaml"
# small RATE: the small file, limit `a` at RATE per hour (burst 1), one type using it.
small() { printf 'limits:\n  a: {rate: %s/1h, burst: 1, key: explicit}\ntypes:\n  t: {limits: [a]}\n' "$1"; }
# big N RATE: N limits l0..l{N-1} at RATE per hour, and `a` as in small.
big() {
  small "$2" | sed -n '1,2p'
  awk -v n="$1" -v r="$2" 'BEGIN { for (i = 0; i < n; i++) printf "  l%d: {rate: %d/1h}\n", i, r }'
  printf 'types:\n  t: {limits: [a]}\n'
}
# hold: replaces the file by a named pipe, so the next reload waits until feed writes it.
hold() { rm -f "$conf" && mkfifo "$conf"; }
# feed FILE: writes FILE into the pipe (in the background: open() waits for the reader), then
# makes it a plain file again once read.
feed() { { cat "$1" >"$conf" && rm -f "$conf" && cp "$1" "$conf"; } & }
# send TEXT: writes RESP commands on the test's own connection (fd 3), without reading.
send() { printf '%b' "$1" >&3; }
# answered: 0 when a reply is waiting on fd 3 (the connection held while the reload runs).
answered() { read -r -t 0.2 -u 3 line; }

small 1 >"$conf"
serve_one "$conf" "$tmp/log" 500 --log-level info

# ---- In flight: others served by the old file, the sender waits, a second one is BUSY ---------

check "throttle under the old file" "1" "$(word "$(cli THROTTLE a k1)" 1)"
check "the old file's budget spent" "0" "$(word "$(cli THROTTLE a k1)" 1)"
hold
exec 3<>"/dev/tcp/127.0.0.1/$P"
# The reload, and behind it in the same write a THROTTLE that must run under the new file.
send 'CONFIG RELOAD\r\nTHROTTLE a k1\r\n'
# While it waits in open(): other clients are answered, by the old file.
check "PING during the reload" "PONG" "$(cli PING)"
check "PING during the reload, again" "PONG" "$(cli PING)"
check "old file in force during the reload" "0" "$(word "$(cli THROTTLE a k1)" 1)"
contains "old definition during the reload" "rate=1/1h" "$(cli LIMIT.GET a)"
contains "a second reload is refused" "BUSY a CONFIG RELOAD is in progress" "$(cli CONFIG RELOAD)"
check "the reloading client has no reply yet" "1" "$(answered && echo 0 || echo 1)"
small 2 >"$tmp/new.yaml"
feed "$tmp/new.yaml"
read -r -t 30 -u 3 line
check "the reload's reply, once in force" "+OK" "${line%$'\r'}"
read -r -t 30 -u 3 line
check "the command pipelined behind it ran under the new file" "*6" "${line%$'\r'}"
read -r -t 30 -u 3 line
check "... and was granted (the changed limit restarted)" ":1" "${line%$'\r'}"
exec 3>&-
contains "new definition after the reply" "rate=2/1h" "$(cli LIMIT.GET a)"
wait_until "the pipe is a file again" 10 test -f "$conf"
# A limit LIMIT.SET changed since: the file wins, and the reply says so.
check "LIMIT.SET over the file" "OK" "$(cli LIMIT.SET a rate=7/1h,burst=1,key=explicit)"
check "the file replaces it" "OK the file replaced LIMIT.SET changes of: a" "$(cli CONFIG RELOAD)"
contains "the file's definition again" "rate=2/1h" "$(cli LIMIT.GET a)"

# ---- A big file: 100,000 limits, every one changed -------------------------------------------

big 100000 1 >"$conf"
check "CONFIG RELOAD of 100,000 limits" "OK" "$(cli CONFIG RELOAD)"
contains "a big file's limit" "rate=1/1h" "$(cli LIMIT.GET l99999)"
big 100000 3 >"$tmp/big3.yaml"
hold
exec 3<>"/dev/tcp/127.0.0.1/$P"
send 'CONFIG RELOAD\r\n'
for i in 1 2 3; do
  check "PING $i while 100,000 limits reload" "PONG" "$(cli PING)"
done
contains "the old big file while in flight" "rate=1/1h" "$(cli LIMIT.GET l99999)"
feed "$tmp/big3.yaml"
read -r -t 120 -u 3 line
check "the big reload's reply" "+OK" "${line%$'\r'}"
exec 3>&-
contains "every limit changed" "rate=3/1h" "$(cli LIMIT.GET l99999)"
contains "the first one too" "rate=3/1h" "$(cli LIMIT.GET l0)"
wait_until "the pipe is a file again" 10 test -f "$conf"
# Back to the small file: 100,000 limits removed.
small 2 >"$conf"
check "CONFIG RELOAD removing 100,000 limits" "OK" "$(cli CONFIG RELOAD)"
contains "a removed limit" "NOLIMIT" "$(cli LIMIT.GET l5)"
contains "logged" "100001 limits (100001 changed, 0 removed)" "$(cat "$tmp/log")"
contains "logged" "1 limits (1 changed, 100000 removed)" "$(cat "$tmp/log")"

# ---- Refused files change nothing ------------------------------------------------------------

printf 'limits:\n  a: {rate: 5/1h\n' >"$conf"
contains "a YAML error" "CONFIG $conf:" "$(cli CONFIG RELOAD)"
printf 'limits:\n  a: {rate: 5/1h, burst: 1, key: explicit}\n  b: {rate: ten/1s}\n' >"$conf"
contains "a bad value names its line" "CONFIG $conf:3:" "$(cli CONFIG RELOAD)"
rm -f "$conf"
contains "a missing file" "cannot open" "$(cli CONFIG RELOAD)"
contains "nothing changed" "rate=2/1h" "$(cli LIMIT.GET a)"
contains "refusals logged" "CONFIG RELOAD refused" "$(cat "$tmp/log")"

# ---- The sender leaves: the reload still happens ----------------------------------------------

hold
exec 3<>"/dev/tcp/127.0.0.1/$P"
send 'CONFIG RELOAD\r\n'
check "PING before the sender leaves" "PONG" "$(cli PING)"
exec 3>&-
small 4 >"$tmp/four.yaml"
feed "$tmp/four.yaml"
wait_until "the reload without its sender" 30 eval '[[ "$(cli LIMIT.GET a)" == *rate=4/1h* ]]'
wait_until "the pipe is a file again" 10 test -f "$conf"
check "PING after" "PONG" "$(cli PING)"

# ---- kill -9 right after the reply: the new limits, nothing of the replaced ones --------------

check "LIMIT.SET over the file again" "OK" "$(cli LIMIT.SET a rate=7/1h,burst=1,key=explicit)"
check "k9 granted under LIMIT.SET's limit" "1" "$(word "$(cli THROTTLE a k9)" 1)"
check "k9 spent" "0" "$(word "$(cli THROTTLE a k9)" 1)"
wait_until "k9's state and the LIMIT.SET row written" 10 durable_now
# A big file, so that its commit takes a while: the reply must wait for it.
big 50000 5 >"$conf"
exec 3<>"/dev/tcp/127.0.0.1/$P"
send 'CONFIG RELOAD\r\n'
read -r -t 120 -u 3 line
crash # at once: no process started between the reply and the kill
exec 3>&-
check "the reload replacing it" "+OK the file replaced LIMIT.SET changes of: a" "${line%$'\r'}"
serve_one "$conf" "$tmp/log" 500 --log-level info
contains "after kill -9: the file's definition, not LIMIT.SET's" "rate=5/1h" "$(cli LIMIT.GET a)"
contains "after kill -9: the file's other limits" "rate=5/1h" "$(cli LIMIT.GET l49999)"
check "after kill -9: the replaced limit's key state is gone" "1" "$(word "$(cli THROTTLE a k9)" 1)"

kill -TERM "$pid"
wait "$pid"
check "graceful stop" "0" "$?"
pid=
finish
