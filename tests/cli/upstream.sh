#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `sluice simulate` with an upstream that answers 429 above a hidden rate (issue 14, item 2):
# the workers report each 429 with TASK.FAIL ... RETRY_AFTER, an adaptive limit configured at
# 20/1s in front of an upstream that allows 7/1s learns it, and the report shows it converging:
# few 429s in the last quarter of the run, a throughput there below the hidden rate and above
# the floor, the rate lowered from 20/1s at the first 429s and ending within bounds. The same
# scenario without `adaptive:` gets more 429s (the backoff alone does not learn the rate). A
# malformed `upstream:` is refused with its file and line.
#
# Usage: bash tests/cli/upstream.sh PATH-TO-SLUICE SOURCE-DIR
# Prints one line per failed check and "N passed, N failed"; exits non-zero on any failure.
set -u

sluice=${1:?usage: upstream.sh PATH-TO-SLUICE SOURCE-DIR}
passed=0
failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { passed=$((passed + 1)); }
bad() {
  failed=$((failed + 1))
  echo "FAIL: $*"
}
check() { if [ "$2" == "$3" ]; then ok; else bad "$1: wanted [$2], got [$3]"; fi; }
# within_f NAME LO HI VALUE: LO <= VALUE <= HI, decimals allowed.
within_f() {
  if [ -n "$4" ] && awk -v lo="$2" -v hi="$3" -v v="$4" 'BEGIN { exit !(v >= lo && v <= hi) }'; then
    ok
  else
    bad "$1: [$4] not in [$2, $3]"
  fi
}

scenario() { # scenario ADAPTIVE-LINE
  cat <<EOF
limits:
  api:
    rate: 20/1s
    burst: 1
    key: input.tenant
$1
types:
  call: {limits: [api]}
scenario:
  title: an upstream that allows 7 calls a second behind a limit of 20
  upstream: {rate: 7/1s, retry_after: 200ms}
  arrivals:
    - type: call
      count: 1200
      payload: {tenant: acme}
  workers:
    - count: 10
      service: 50ms
EOF
}

scenario "    adaptive: {decrease: 0.5, recover: 10%/10s, floor: 2/1s}" >"$tmp/adaptive.yaml"
out=$("$sluice" simulate "$tmp/adaptive.yaml" 2>&1)
check "the adaptive scenario runs" 0 $?
line=$(printf '%s\n' "$out" | grep '^Upstream (hidden rate 7/1s)')
n429=$(printf '%s\n' "$line" | sed -n 's/.*: \([0-9]*\) calls answered 429.*/\1/p')
within_f "the limit was too high at first: some 429s" 1 40 "$n429"
late=$(printf '%s\n' "$out" | grep '^Last quarter of the run')
late429=$(printf '%s\n' "$late" | sed -n 's/.*: \([0-9]*\) answered 429.*/\1/p')
within_f "converged: at most 3 429s in the last quarter" 0 3 "$late429"
rate=$(printf '%s\n' "$late" | sed -n 's/.* \([0-9.]*\) tasks done per second.*/\1/p')
within_f "the last quarter's throughput is below the hidden rate, above the floor" 3.5 7.2 "$rate"
adapt=$(printf '%s\n' "$out" | grep '^Adaptive rate of api key "acme"')
case $adapt in
*"20/1s, 10/1s at "*) ok ;;
*) bad "the first 429 halves the rate: [$adapt]" ;;
esac
end=$(printf '%s\n' "$adapt" | sed -n 's/.*at the end \([0-9]*\)\/1s\./\1/p')
within_f "the rate at the end is within the sawtooth around the hidden rate" 2 8 "$end"

scenario "" >"$tmp/plain.yaml"
out=$("$sluice" simulate "$tmp/plain.yaml" 2>&1)
check "the plain scenario runs" 0 $?
plain429=$(printf '%s\n' "$out" | grep '^Upstream' | sed -n 's/.*: \([0-9]*\) calls answered 429.*/\1/p')
if [ -n "$plain429" ] && [ "$plain429" -gt $((2 * n429)) ]; then ok; else
  bad "without adaptive: more 429s than twice the adaptive run's ($plain429 vs $n429)"
fi
case $out in
*"Adaptive rate of"*) bad "a limit that is not adaptive lists no adaptive rate" ;;
*) ok ;;
esac

printf 'limits: {}\ntypes: {call: {}}\nscenario:\n  upstream: {retry_after: 1s}\n  arrivals: [{type: call, count: 1}]\n' >"$tmp/bad.yaml"
out=$("$sluice" simulate "$tmp/bad.yaml" 2>&1)
check "a malformed upstream: exit 1" 1 $?
case $out in
*"bad.yaml:4:"*"scenario.upstream"*"hidden rate"*) ok ;;
*) bad "the error names the file, line and setting: [$out]" ;;
esac

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
