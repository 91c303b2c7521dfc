#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Shell-level tests of `sluice simulate` and the top-level command line: the real binary, its
# real output and exit statuses.
#
# Usage: bash tests/cli/simulate.sh PATH-TO-SLUICE SOURCE-DIR
# Prints one line per failed check and "N passed, N failed" at the end; exits non-zero on any
# failure.
set -u

sluice=${1:?usage: simulate.sh PATH-TO-SLUICE SOURCE-DIR}
srcdir=${2:-.}
passed=0
failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { passed=$((passed + 1)); }
bad() {
  failed=$((failed + 1))
  echo "FAIL: $*"
}

# check NAME WANT GOT: compares two strings.
check() {
  if [ "$2" == "$3" ]; then ok; else bad "$1: wanted [$2], got [$3]"; fi
}

# run ARGS...: runs sluice, leaving stdout in $out, stderr in $err and the status in $rc.
run() {
  "$sluice" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  out=$(cat "$tmp/out")
  err=$(cat "$tmp/err")
}

# granted_column: the granted_s column of the csv in $out, one line per request.
granted_column() { printf '%s\n' "$out" | tail -n +2 | cut -d, -f3; }

# expect_usage_error NAME WORDS ARGS...: status 2, nothing on stdout, exactly one line on
# stderr containing WORDS.
expect_usage_error() {
  local name=$1 words=$2
  shift 2
  run "$@"
  check "$name: status" 2 "$rc"
  check "$name: stdout" "" "$out"
  check "$name: stderr lines" 1 "$(printf '%s\n' "$err" | wc -l)"
  case $err in
  *"$words"*) ok ;;
  *) bad "$name: stderr [$err] does not mention [$words]" ;;
  esac
}

# ---- Seed 003: 20 tasks at once on 15 per minute ------------------------------------------

# Burst 15: 15 at once, then one every 4 s.
run simulate --limit rate=15/1m,burst=15 --arrivals 20 --format csv
check "burst 15: status" 0 "$rc"
check "burst 15: header" "index,arrival_s,granted_s" "$(printf '%s\n' "$out" | head -n 1)"
check "burst 15: rows" 21 "$(printf '%s\n' "$out" | wc -l)"
want=$(printf '0\n%.0s' {1..15}; printf '4\n8\n12\n16\n20')
check "burst 15: granted" "$want" "$(granted_column)"
check "burst 15: arrivals" "$(printf '0\n%.0s' {1..19}; printf 0)" \
  "$(printf '%s\n' "$out" | tail -n +2 | cut -d, -f2)"
check "burst 15: index" "$(seq 0 19)" "$(printf '%s\n' "$out" | tail -n +2 | cut -d, -f1)"

# The default burst is the limit itself: same schedule.
run simulate --limit rate=15/1m --arrivals 20 --format csv
check "default burst: granted" "$want" "$(granted_column)"

# Burst 1: strictly one every 4 s.
run simulate --limit rate=15/1m,burst=1 --arrivals 20 --format csv
check "burst 1: granted" "$(seq 0 4 76)" "$(granted_column)"

# start_empty: the first at once, then the steady pace from the start.
run simulate --limit rate=15/1m,start_empty --arrivals 20 --format csv
check "start_empty: granted" "$(seq 0 4 76)" "$(granted_column)"

# Text output: the table and the summary.
run simulate --limit rate=15/1m,burst=15 --arrivals 20
check "text: status" 0 "$rc"
check "text: limit line" "limit     rate=15/1m,burst=15" "$(printf '%s\n' "$out" | head -n 1)"
check "text: last row" "   19          0         20      20" \
  "$(printf '%s\n' "$out" | grep -E '^ +19 ')"
check "text: summary" "granted    20 of 20 (0 rejected)
max        20 in any 1m
mean rate  20 per 1m" "$(printf '%s\n' "$out" | tail -n 3)"

# ---- Seed 002: 12 per 5 s is 144 per minute -------------------------------------------------

run simulate --limit window=12/5s --arrivals 1000 --format csv
check "window: status" 0 "$rc"
check "window: rows" 1001 "$(printf '%s\n' "$out" | wc -l)"
check "window: first minute" 144 "$(granted_column | awk '$1 < 60' | wc -l)"
check "window: second minute" 144 "$(granted_column | awk '$1 >= 60 && $1 < 120' | wc -l)"
check "window: per window" "12" "$(granted_column | sort -n | uniq -c | awk '{print $1}' |
  sort -n | tail -n 1)"
check "window: last grant" 415 "$(granted_column | tail -n 1)"
run simulate --limit window=12/5s --arrivals 1000
check "window: max in any period" "max        12 in any 5s" "$(printf '%s\n' "$out" | grep '^max')"

# A sliding window never lets more than 12 through in any 5 s either.
run simulate --limit sliding=12/5s --arrivals 100@0..20s
check "sliding: max" "max        12 in any 5s" "$(printf '%s\n' "$out" | grep '^max')"

# ---- Seed 000: 10 per minute ----------------------------------------------------------------

run simulate --limit rate=10/1m --arrivals 12 --format csv
check "10/min: granted" "$(printf '0\n%.0s' {1..10}; printf '6\n12')" "$(granted_column)"

# ---- Other kinds and options ----------------------------------------------------------------

# Arrival groups, spread and sorted.
run simulate --limit rate=1/1s,burst=100 --arrivals 1@3s,4@0..2s --format csv
check "arrivals: spread" "0 0.5 1 1.5 3" "$(printf '%s\n' "$out" | tail -n +2 | cut -d, -f2 |
  tr '\n' ' ' | sed 's/ $//')"

# Units: 3 units of 6 per second, two at once then one every half second.
run simulate --limit rate=6/1s --arrivals 4 --units 3 --format csv
check "units: granted" "$(printf '0\n0\n0.5\n1')" "$(granted_column)"

# More units than the burst: rejected, granted_s empty, status still 0.
run simulate --limit rate=2/1s --arrivals 2 --units 3 --format csv
check "rejected: status" 0 "$rc"
check "rejected: csv" "$(printf 'index,arrival_s,granted_s\n0,0,\n1,0,')" "$out"
run simulate --limit rate=2/1s --arrivals 2 --units 3
check "rejected: summary" "granted    0 of 2 (2 rejected)" "$(printf '%s\n' "$out" | grep '^granted')"

# Concurrency: 2 held at once for 3 s each.
run simulate --limit concurrency=2 --arrivals 5 --hold 3s --format csv
check "concurrency: granted" "$(printf '0\n0\n3\n3\n6')" "$(granted_column)"
# A TTL shorter than the hold ends the lease first.
run simulate --limit concurrency=2,ttl=2s --arrivals 5 --hold 3s --format csv
check "concurrency ttl: granted" "$(printf '0\n0\n2\n2\n4')" "$(granted_column)"

# Quotas: a day's budget, then the next day; a total budget rejects the rest.
run simulate --limit quota=3/day --arrivals 5 --format csv
check "quota day: granted" "$(printf '0\n0\n0\n86400\n86400')" "$(granted_column)"
run simulate --limit quota=3/total --arrivals 5 --format csv
check "quota total: granted" "$(printf '0\n0\n0\n\n')" "$(granted_column)"

# ---- Help and version ------------------------------------------------------------------------

run simulate --help
check "simulate --help: status" 0 "$rc"
for opt in --limit --arrivals --units --hold --format --help rate= window= sliding= \
  concurrency= quota= burst= start_empty horizon= ttl= max_keys= keys_overflow= max_key_len= \
  'N@T1..T2' 'Exit status'; do
  case $out in
  *"$opt"*) ok ;;
  *) bad "simulate --help does not mention $opt" ;;
  esac
done
run help simulate
check "help simulate" 0 "$rc"
run --help
check "--help: status" 0 "$rc"
for word in simulate --help --version; do
  case $out in
  *"$word"*) ok ;;
  *) bad "--help does not mention $word" ;;
  esac
done
run --version
check "--version: status" 0 "$rc"
case $out in
"sluice "[0-9]*) ok ;;
*) bad "--version printed [$out]" ;;
esac

# ---- Usage errors: status 2 and one line on stderr naming the bad part ----------------------

expect_usage_error "bad period" 'bad period "5x" in "rate=10/5x"' \
  simulate --limit rate=10/5x --arrivals 1
expect_usage_error "missing period" 'missing period in "rate=10"' \
  simulate --limit rate=10 --arrivals 1
expect_usage_error "unknown kind" 'unknown limit kind "foo"' simulate --limit foo=1/1s --arrivals 1
expect_usage_error "unknown option" 'unknown option "bogus"' \
  simulate --limit rate=1/1s,bogus=1 --arrivals 1
expect_usage_error "option of another kind" 'option "burst" does not apply to a window limit' \
  simulate --limit window=1/1s,burst=2 --arrivals 1
expect_usage_error "out of bounds" 'limit must be at least 1' simulate --limit rate=0/1s --arrivals 1
expect_usage_error "newline in spec" 'bad period "1s\x0ax"' simulate --limit $'rate=1/1s\nx' \
  --arrivals 1
expect_usage_error "bad arrivals" 'bad time "5x" in "20@5x"' \
  simulate --limit rate=1/1s --arrivals 1,20@5x
expect_usage_error "backwards range" 'time range "60s..0" in "5@60s..0" runs backwards' \
  simulate --limit rate=1/1s --arrivals 5@60s..0
expect_usage_error "missing --limit" "--limit is required" simulate --arrivals 1
expect_usage_error "missing --arrivals" "--arrivals is required" simulate --limit rate=1/1s
expect_usage_error "bad --units" 'bad --units "0"' \
  simulate --limit rate=1/1s --arrivals 1 --units 0
expect_usage_error "bad --format" 'bad --format "json"' \
  simulate --limit rate=1/1s --arrivals 1 --format json
expect_usage_error "bad --hold" 'bad --hold "3"' \
  simulate --limit concurrency=1 --arrivals 1 --hold 3
expect_usage_error "--hold on a rate" "--hold applies to concurrency limits only" \
  simulate --limit rate=1/1s --arrivals 1 --hold 3s
expect_usage_error "unknown simulate option" "unknown option --bogus" simulate --bogus
expect_usage_error "missing value" "option --limit needs a value" simulate --limit
expect_usage_error "scenario file and --limit" "not both" \
  simulate "$srcdir/examples/seed003-burst.yaml" --limit rate=1/1s
expect_usage_error "unknown command" 'unknown command "bogus"' bogus
expect_usage_error "unknown global option" "unknown option --bogus" --bogus
run
check "no command: status" 2 "$rc"

# A simulation that cannot finish: status 1, one line.
run simulate --limit rate=1/366d --arrivals 200
check "too long: status" 1 "$rc"
check "too long: stderr lines" 1 "$(printf '%s\n' "$err" | wc -l)"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
