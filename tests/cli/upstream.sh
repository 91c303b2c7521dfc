#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `sluice simulate` with an upstream that answers 429 above a hidden rate (issue 14, item 2):
# the workers report each 429 with TASK.FAIL ... RETRY_AFTER, an adaptive limit configured at
# 20/1s in front of an upstream that allows 7/1s learns it, and the report shows it converging:
# few 429s in the last quarter of the run, a throughput there below the hidden rate and above
# the floor, the rate lowered from 20/1s at the first 429s and ending within bounds. The same
# scenario without `adaptive:` gets more 429s (the backoff alone does not learn the rate). A
# malformed `upstream:` is refused with its file and line.
# The --svg timeline of the adaptive run has a panel of the key's rate: its step line, read back
# in the panel's own axis units, starts at the configured rate, drops to the report's rate after
# the first 429 and ends at the report's rate at the end; its tooltip says what the report says;
# the hidden rate is a dashed line at 7; each 429 is a tick. Without adaptive limits the ticks
# stand on the depth panel and there is no rate panel. (The simulator is deterministic: no
# timing depends on the machine.)
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

# svg_value FILE PIXEL-Y: the value at PIXEL-Y on the y axis of the "adaptive rate of" panel, from
# its tick labels (each drawn 4 px below its grid line).
svg_value() {
  awk -v py="$2" '
    /adaptive rate of/ { on = 1; next }
    on && /font-size="14"/ { on = 0 }
    on && /text-anchor="end"/ {
      match($0, /y="[0-9.]+"/); y = substr($0, RSTART + 3, RLENGTH - 4) - 4
      v = $0; sub(/.*">/, "", v); sub(/<.*/, "", v)
      if (n == 0) { y0 = y; v0 = v } else { y1 = y; v1 = v }
      n++
    }
    END { if (n >= 2) printf "%g\n", v0 + (py - y0) * (v1 - v0) / (y1 - y0) }' "$1"
}

"$sluice" simulate "$tmp/adaptive.yaml" --svg "$tmp/adaptive.svg" >"$tmp/adaptive.txt" 2>&1
check "the adaptive scenario writes its timeline" 0 $?
svg=$(cat "$tmp/adaptive.svg")
case $svg in
*">adaptive rate of api</text>"*'rotate(-90)" text-anchor="middle" fill="#374151">permits per 1s</text>'*) ok ;;
*) bad "the timeline has a rate panel in permits per 1s" ;;
esac
# The rate line: the path whose tooltip names the key.
path=$(grep '<title>acme: ' "$tmp/adaptive.svg")
d=$(printf '%s\n' "$path" | sed -n 's/.* d="\([^"]*\)".*/\1/p')
first_y=$(printf '%s\n' "$d" | sed -n 's/^M[0-9.]* \([0-9.]*\).*/\1/p')
drop_y=$(printf '%s\n' "$d" | sed -n 's/^M[0-9.]* [0-9.]*H[0-9.]*V\([0-9.]*\).*/\1/p')
last_y=$(printf '%s\n' "$d" | grep -o 'V[0-9.]*' | tail -1 | cut -c2-)
adapt=$(grep '^Adaptive rate of api key "acme"' "$tmp/adaptive.txt")
want_first=$(printf '%s\n' "$adapt" | sed -n 's/.*"acme": \([0-9]*\)\/1s, .*/\1/p')
want_drop=$(printf '%s\n' "$adapt" | sed -n 's/.*"acme": [0-9]*\/1s, \([0-9]*\)\/1s at .*/\1/p')
want_end=$(printf '%s\n' "$adapt" | sed -n 's/.*at the end \([0-9]*\)\/1s\./\1/p')
check "the rate line starts at the configured rate" "20 20" "$want_first $(svg_value "$tmp/adaptive.svg" "$first_y")"
check "the rate line drops to the report's rate after the first 429" "$want_drop" \
  "$(svg_value "$tmp/adaptive.svg" "$drop_y")"
check "the rate line ends at the report's rate at the end" "$want_end" \
  "$(svg_value "$tmp/adaptive.svg" "$last_y")"
# The tooltip says the report's words: "acme: 20/1s; after each 429: 10/1s at 0.55s, ...; at the
# end 4/1s" for 'Adaptive rate of api key "acme": 20/1s, 10/1s at 0.55s, ...; at the end 4/1s.'
tip=$(printf '%s\n' "$path" | sed -n 's/.*<title>\(.*\)<\/title>.*/\1/p')
check "the rate line's tooltip matches the report" \
  "$(printf '%s\n' "$adapt" | sed 's/^Adaptive rate of api key "acme": \([0-9]*\/1s\), /acme: \1; after each 429: /; s/\.$//')" \
  "$tip"
hidden=$(grep '<title>hidden rate 7/1s</title>' "$tmp/adaptive.svg")
case $hidden in
*'stroke-dasharray="6 4" d="M'*) ok ;;
*) bad "the hidden rate is a dashed line: [$hidden]" ;;
esac
hidden_y=$(printf '%s\n' "$hidden" | sed -n 's/.* d="M[0-9.]* \([0-9.]*\)H.*/\1/p')
check "the hidden-rate line is at 7 permits per 1s" 7 "$(svg_value "$tmp/adaptive.svg" "$hidden_y")"
check "the legend has the hidden rate" 1 "$(grep -c '>hidden rate 7/1s</text>' "$tmp/adaptive.svg")"
check "the legend counts the report's 429s" 1 "$(grep -c ">upstream 429 ($n429)</text>" "$tmp/adaptive.svg")"
ticks=$(grep 'stroke="#e15759" stroke-width="1.5" d="M[0-9.]* [0-9.]*v-9M' "$tmp/adaptive.svg" |
  grep -o 'v-9' | wc -l)
check "a tick per 429 on the time axis" "$n429" "$ticks"

scenario "" >"$tmp/plain.yaml"
"$sluice" simulate "$tmp/plain.yaml" --svg "$tmp/plain.svg" >/dev/null 2>&1
check "the plain scenario writes its timeline" 0 $?
check "no rate panel without an adaptive limit" 0 "$(grep -c 'adaptive rate of' "$tmp/plain.svg")"
check "its 429s are ticks on the depth panel" 1 "$(grep -c '>upstream 429 (' "$tmp/plain.svg")"
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
