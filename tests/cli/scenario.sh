#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Shell-level tests of `sluice simulate SCENARIO.yaml`: every example in examples/ is run with the
# real binary and checked against the numbers its seed promises; --svg must write a well-formed
# SVG; malformed scenario files must fail with FILE:LINE:COLUMN and exit status 1.
#
# Usage: bash tests/cli/scenario.sh PATH-TO-SLUICE SOURCE-DIR
# Prints one line per failed check and "N passed, N failed" at the end; exits non-zero on any
# failure.
set -u

sluice=${1:?usage: scenario.sh PATH-TO-SLUICE SOURCE-DIR}
srcdir=${2:-.}
examples=$srcdir/examples
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

# contains NAME TEXT WORDS: TEXT holds WORDS.
contains() {
  case $2 in
  *"$3"*) ok ;;
  *) bad "$1: [$3] not found in output" ;;
  esac
}

# run ARGS...: runs sluice, leaving stdout in $out, stderr in $err and the status in $rc.
run() {
  "$sluice" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  out=$(cat "$tmp/out")
  err=$(cat "$tmp/err")
}

# csv_granted KEY: the granted_s column of the csv in $out for the tasks on KEY, in order.
csv_granted() { printf '%s\n' "$out" | awk -F, -v k="$1" 'NR > 1 && $5 == k { print $3 }'; }

# max_in_window SECONDS: the most grants (times on stdin, in seconds) in any half-open interval
# of that length: computed here, independently of the binary's own figure.
max_in_window() {
  sort -g | awk -v w="$1" '
    { t[n++] = $1 }
    END {
      best = 0; j = 0
      for (i = 0; i < n; i++) {
        while (j < n && t[j] < t[i] + w) j++
        if (j - i > best) best = j - i
      }
      print best
    }'
}

# ---- Seed 003: 20 tasks on 15 per minute, burst 15 --------------------------------------------

run simulate "$examples/seed003-burst.yaml" --format csv
check "seed003: status" 0 "$rc"
check "seed003: csv header" "index,arrival_s,granted_s,type,key,outcome" \
  "$(printf '%s\n' "$out" | head -n 1)"
want=$(printf '0\n%.0s' $(seq 15); printf '4\n8\n12\n16\n20')
check "seed003: acme grants: 15 at 0 s, then every 4 s" "$want" "$(csv_granted acme)"
check "seed003: globex is not held up by acme" "10 10 10 10 10" "$(csv_granted globex | xargs)"
check "seed003: all done" 25 "$(printf '%s\n' "$out" | grep -c ',done$')"

run simulate "$examples/seed003-burst.yaml"
check "seed003 text: status" 0 "$rc"
contains "seed003 text: max grants" "$out" "max grants   tenant_api: 20 in any 1m"
contains "seed003 text: parked peak" "$out" "parked peak  5"
contains "seed003 text: per-task lines" "$out" "task  type"

# ---- Seed 002: 12 per 5 s is 144 per minute ---------------------------------------------------

run simulate "$examples/seed002-rate.yaml" --format csv
check "seed002: status" 0 "$rc"
check "seed002: 144 granted in the first minute" 144 \
  "$(printf '%s\n' "$out" | awk -F, 'NR > 1 && $3 != "" && $3 < 60' | wc -l | tr -d ' ')"
check "seed002: never more than 12 in any 5 s" 12 \
  "$(printf '%s\n' "$out" | awk -F, 'NR > 1 && $3 != "" { print $3 }' | max_in_window 5)"
check "seed002: 144 in any minute" 144 \
  "$(printf '%s\n' "$out" | awk -F, 'NR > 1 && $3 != "" { print $3 }' | max_in_window 60)"
check "seed002: all 400 done" 400 "$(printf '%s\n' "$out" | grep -c ',done$')"

run simulate "$examples/seed002-rate.yaml"
contains "seed002 text: the seed's number" "$out" "12 in any 5s, 144 in any 1m"
contains "seed002 text: per-key summary instead of 400 task lines" "$out" "per-task lines left out"
check "seed002 text: no task lines" 0 "$(printf '%s\n' "$out" | grep -c ' done$')"
run simulate "$examples/seed002-rate.yaml" --tasks
check "seed002 --tasks: 400 task lines" 400 "$(printf '%s\n' "$out" | grep -c ' done$')"

# ---- Seed 001: a weight-50 step is not starved ------------------------------------------------

run simulate "$examples/seed001-weights.yaml" --format csv
check "seed001: status" 0 "$rc"
# Task 100 is the bulk charge (it arrives at 1 s, before the stream of single charges).
check "seed001: the bulk charge starts at 30 s" "100,1,30" \
  "$(printf '%s\n' "$out" | awk -F, '$1 == 100 { print $1 "," $2 "," $3 }')"
check "seed001: no later charge overtakes it" 0 \
  "$(printf '%s\n' "$out" | awk -F, 'NR > 1 && $1 > 100 && $3 < 30' | wc -l | tr -d ' ')"
check "seed001: 100 single charges spend the burst at 0 s" 100 \
  "$(printf '%s\n' "$out" | awk -F, 'NR > 1 && $3 == "0"' | wc -l | tr -d ' ')"
run simulate "$examples/seed001-weights.yaml"
contains "seed001 text: units counted" "$out" "stripe: 199 units in any 1m"

# ---- Seed 004: tiers and a circuit breaker ----------------------------------------------------

run simulate "$examples/seed004-tiers.yaml" --format csv
check "seed004: status" 0 "$rc"
heavy=$(printf '%s\n' "$out" | awk -F, 'NR > 1 && $5 ~ /^heavy-/ && $3 != "" { print $3 }')
check "seed004: every heavy workflow ran" 30 "$(printf '%s\n' "$heavy" | wc -l | tr -d ' ')"
check "seed004: heavy tier never more than 5 in any minute" 5 \
  "$(printf '%s\n' "$heavy" | max_in_window 60)"
standard=$(printf '%s\n' "$out" | awk -F, 'NR > 1 && $5 ~ /^standard-/ && $3 != "" { print $3 }')
check "seed004: standard tier never more than 20 in any minute" 20 \
  "$(printf '%s\n' "$standard" | max_in_window 60)"
check "seed004: the breaker rejects the runaway loop past 50" 30 \
  "$(printf '%s\n' "$out" | grep -c ',loop-42,rejected:runaway_breaker$')"
check "seed004: the loop's first 50 run" 50 \
  "$(printf '%s\n' "$out" | grep -c ',loop-42,done$')"
check "seed004: nothing else rejected" 30 "$(printf '%s\n' "$out" | grep -c ',rejected:')"

run simulate "$examples/seed004-tiers.yaml"
contains "seed004 text: heavy" "$out" "workflow_tier/heavy: 5 in any 1m"
contains "seed004 text: standard" "$out" "workflow_tier/standard: 20 in any 1m"
contains "seed004 text: breaker" "$out" "50 in any 1h, 30 rejected"
contains "seed004 text: summary" "$out" "560 submitted: 530 done, 0 failed, 30 rejected"
first=$out
run simulate "$examples/seed004-tiers.yaml"
check "seed004: the same output every run (seeded)" "$first" "$out"

# ---- Seed 000: global and keyed buckets -------------------------------------------------------

run simulate "$examples/seed000-keyed.yaml" --format csv
check "seed000: status" 0 "$rc"
check "seed000: anthropic's own bucket: all 60 at 0 s" 60 \
  "$(csv_granted anthropic | grep -cx 0)"
check "seed000: openai spends its burst of 100 at 0 s" 100 "$(csv_granted openai | grep -cx 0)"
check "seed000: then one every 0.6 s: the last at 90 s" 90 "$(csv_granted openai | tail -n 1)"
llm=$(printf '%s\n' "$out" | awk -F, 'NR > 1 && $4 == "call-llm" { print $3 }')
check "seed000: 10 llm calls as they arrive, every 2 s" "0 2 4 6 8 10 12 14 16 18" \
  "$(printf '%s\n' "$llm" | head -n 10 | xargs)"
check "seed000: then paced: 30 calls by 120 s" 120 "$(printf '%s\n' "$llm" | tail -n 1)"

# ---- Seed 004: fair share between users -------------------------------------------------------

run simulate "$examples/seed004-fairness.yaml" --format csv
check "fairness: status" 0 "$rc"
bob=$(printf '%s\n' "$out" | awk -F, 'NR > 1 && $5 == "bob" { print $3 - $2 }')
check "fairness: bob's 11 tasks start as they arrive" "0 0 0 0 0 0 0 0 0 0 0" "$(printf '%s\n' "$bob" | xargs)"
check "fairness: all 2011 done" 2011 "$(printf '%s\n' "$out" | grep -c ',done$')"
sed 's/fairness: keys /fairness: fifo /; s/^    fair_key:/    #fair_key:/' \
  "$examples/seed004-fairness.yaml" >"$tmp/fifo.yaml"
run simulate "$tmp/fifo.yaml" --format csv
check "fifo: status" 0 "$rc"
check "fifo: bob's first task waits behind alice's 2000" 99 \
  "$(printf '%s\n' "$out" | awk -F, 'NR > 1 && $5 == "bob" { print int($3 - $2); exit }')"
run simulate "$examples/seed004-fairness.yaml"
contains "fairness text: the type's fairness" "$out" "workflow: per_user; fair between keys of per_user"

# ---- Seed 001: charge_redelivery, every execution pays ------------------------------------------

# Workers slower than the lease: each task is lost and delivered again every second. With
# charge_redelivery each of the 14 deliveries is charged; without, the 2 first ones only.
cat >"$tmp/redeliver.yaml" <<'YAML'
limits:
  api: {rate: 100/1m, burst: 100}
types:
  job:
    limits: [api]
    lease: 1s
    charge_redelivery: true
scenario:
  duration: 10s
  arrivals:
    - {type: job, count: 2}
  workers:
    - {count: 2, service: 1500ms}
YAML
run simulate "$tmp/redeliver.yaml"
check "charge_redelivery: status" 0 "$rc"
contains "charge_redelivery: every delivery charged" "$out" "max grants   api: 14 in any 1m"
contains "charge_redelivery: the type says so" "$out" "job: api; redeliveries pay again"
sed 's/charge_redelivery: true/charge_redelivery: false/' "$tmp/redeliver.yaml" >"$tmp/redeem.yaml"
run simulate "$tmp/redeem.yaml"
contains "exactly-once: the first deliveries only" "$out" "max grants   api: 2 in any 1m"

# ---- The simulator counts what the engine charged, nothing else --------------------------------

# A units value of 0, a missing team (seats has no missing_key: global) and a tier value no tier
# matches are refused by the engine: no key of theirs may appear in the report. A missing org
# under missing_key: global is charged on the global key.
cat >"$tmp/agree.yaml" <<'YAML'
limits:
  tokens: {rate: 100/1m, key: input.user, units: input.tokens}
  calls: {rate: 10/1m, key: input.org, missing_key: global}
  seats: {rate: 10/1m, key: input.team}
  size:
    tier:
      field: input.agents
      tiers:
        - {name: small, max: 2, rate: 20/1m}
        - {name: big, min: 5, rate: 5/1m}
types:
  job: {limits: [tokens, calls, seats, size]}
scenario:
  arrivals:
    - {type: job, count: 3, payload: {user: ann, org: acme, team: red, tokens: 5, agents: 1}}
    - {type: job, count: 2, at: 1s, payload: {user: bob, org: acme, team: red, tokens: 0, agents: 1}}
    - {type: job, count: 2, at: 2s, payload: {user: cy, team: blue, tokens: 7, agents: 6}}
    - {type: job, count: 1, at: 3s, payload: {user: fay, org: acme, tokens: 1, agents: 1}}
    - {type: job, count: 1, at: 3s, payload: {user: gus, org: acme, team: red, tokens: 1, agents: 3}}
YAML
run simulate "$tmp/agree.yaml"
check "agree: status" 0 "$rc"
contains "agree: refusals counted" "$out" "9 submitted: 5 done, 0 failed, 0 rejected, 4 refused"
contains "agree: units from the input" "$out" "tokens: 15 units in any 1m"
check "agree: no key of a refused task (bob, fay, gus)" 0 \
  "$(printf '%s\n' "$out" | grep -c -E '^tokens +- +(bob|fay|gus) ')"
check "agree: no global seats key (no missing_key: global)" 0 \
  "$(printf '%s\n' "$out" | grep -c -E '^seats +- +\(global\) ')"
check "agree: no untiered size row" 0 "$(printf '%s\n' "$out" | grep -c -E '^size +- ')"
check "agree: missing_key: global charges the global key" 1 \
  "$(printf '%s\n' "$out" | grep -c -E '^calls +- +\(global\) +2 ')"
run simulate "$tmp/agree.yaml" --format csv
check "agree: a refused task lists no keys" 4 "$(printf '%s\n' "$out" | grep -c ',job,,refused$')"

# A key built from two fields (seed 004's per-user, per-workflow breaker): ann's etl runs are
# paced on their own key, ann's ml run and bob's etl run are not held up, and a task missing a
# field skips the limit (missing_key: skip).
cat >"$tmp/tpl.yaml" <<'YAML'
limits:
  wf: {rate: 1/10s, key: "{input.user}:{input.workflow_tag}", missing_key: skip}
types:
  job: {limits: [wf]}
scenario:
  arrivals:
    - {type: job, count: 3, payload: {user: ann, workflow_tag: etl}}
    - {type: job, count: 1, payload: {user: ann, workflow_tag: ml}}
    - {type: job, count: 1, payload: {user: bob, workflow_tag: etl}}
    - {type: job, count: 2, payload: {user: cy}}
YAML
run simulate "$tmp/tpl.yaml" --format csv
check "template: status" 0 "$rc"
check "template: ann:etl paced" "0 10 20" "$(csv_granted ann:etl | xargs)"
check "template: ann:ml" "0" "$(csv_granted ann:ml | xargs)"
check "template: bob:etl" "0" "$(csv_granted bob:etl | xargs)"
check "template: a missing field skips the limit" "0 0" "$(csv_granted '' | xargs)"
printf 'limits:\n  wf: {rate: 1/10s, key: "{input.user}:{input.tag"}\n' >"$tmp/tplbad.yaml"
run simulate "$tmp/tplbad.yaml"
contains "template: unclosed brace" "$err" "tplbad.yaml:2:40: limits.wf.key: key template"

# ---- --svg ------------------------------------------------------------------------------------

for f in "$examples"/seed*.yaml; do
  name=$(basename "$f" .yaml)
  run simulate "$f" --svg "$tmp/$name.svg"
  check "$name --svg: status" 0 "$rc"
  if [ ! -s "$tmp/$name.svg" ]; then
    bad "$name --svg: no file written"
    continue
  fi
  if command -v xmllint >/dev/null 2>&1; then
    if xmllint --noout "$tmp/$name.svg" 2>"$tmp/xmlerr"; then ok; else
      bad "$name --svg: not well-formed: $(head -n 3 "$tmp/xmlerr")"
    fi
  fi
  contains "$name --svg: an svg document" "$(head -c 300 "$tmp/$name.svg")" \
    '<svg xmlns="http://www.w3.org/2000/svg"'
  contains "$name --svg: ends" "$(tail -c 10 "$tmp/$name.svg")" "</svg>"
  check "$name --svg: self-contained (no links, no scripts)" 0 \
    "$(grep -c -e '<script' -e 'href=' -e '@import' -e 'url(http' "$tmp/$name.svg")"
done
run simulate "$examples/seed003-burst.yaml" --svg "$tmp/s.svg"
contains "svg: the key's line is in the legend" "$(cat "$tmp/s.svg")" ">acme</text>"
contains "svg: the limit's envelope" "$(cat "$tmp/s.svg")" "limit: burst 15 + t/4s"
contains "svg: the parked panel" "$(cat "$tmp/s.svg")" "parked peak 5"
run simulate "$examples/seed003-burst.yaml" --svg "$tmp/no/such/dir/s.svg"
check "svg: an unwritable file fails" 1 "$rc"

# ---- Malformed files: FILE:LINE:COLUMN, exit status 1 -----------------------------------------

# expect_error NAME LINE:COL WORDS YAML: the scenario YAML fails at LINE:COL with WORDS.
expect_error() {
  local name=$1 where=$2 words=$3
  printf '%s\n' "$4" >"$tmp/bad.yaml"
  run simulate "$tmp/bad.yaml"
  check "$name: status" 1 "$rc"
  check "$name: stdout" "" "$out"
  check "$name: one line" 1 "$(printf '%s\n' "$err" | wc -l | tr -d ' ')"
  contains "$name: position" "$err" "$tmp/bad.yaml:$where: "
  contains "$name: message" "$err" "$words"
}

config='limits:
  api: {rate: 10/1m, key: explicit}
types:
  job: {limits: [api]}'

expect_error "no scenario section" 1:1 "expected a scenario: section" "$config"
expect_error "a bad count" 8:14 'scenario.arrivals[0].count: expected a positive integer, got "many"' "$config
scenario:
  arrivals:
    - type: job
      count: many"
expect_error "an unknown key" 8:7 'unknown key "cuont"; did you mean "count"?' "$config
scenario:
  arrivals:
    - type: job
      cuont: 3"
expect_error "a bad template" 9:12 "unknown placeholder" "$config
scenario:
  arrivals:
    - type: job
      count: 3
      key: \"t-{j}\""
expect_error "an undeclared type" 7:13 'type "jobs" is not declared in types:' "$config
scenario:
  arrivals:
    - type: jobs
      count: 3"
expect_error "at and from together" 9:7 "not both" "$config
scenario:
  arrivals:
    - type: job
      count: 3
      at: 0s
      from: 0s
      until: 1m"
expect_error "a bad service range" 10:16 "runs backwards" "$config
scenario:
  arrivals:
    - type: job
      count: 3
  workers:
    - service: 2s..1s"
expect_error "a failure rate above 1" 10:21 "expected a number from 0 to 1" "$config
scenario:
  arrivals:
    - type: job
      count: 3
  workers:
    - failure_rate: 1.5"
expect_error "bad JSON payload" 9:16 "invalid JSON payload" "$config
scenario:
  arrivals:
    - type: job
      count: 3
      payload: '{\"a\": }'"
expect_error "recurring without a duration" 7:3 "give the scenario a duration" "$config
scenario:
  arrivals: []
  recurring:
    - {name: r, type: job, every: 1m}"
expect_error "YAML syntax" 7:5 "YAML syntax error" "$config
scenario:
  arrivals: [
    - type: job"
expect_error "a config error" 2:22 'limits.api: unknown key "brust"' 'limits:
  api: {rate: 10/1m, brust: 3}
scenario:
  arrivals: []'

# ---- Command line -----------------------------------------------------------------------------

run simulate "$examples/seed003-burst.yaml" --limit rate=1/s
check "file and --limit: usage error" 2 "$rc"
run simulate "$examples/seed003-burst.yaml" --format xml
check "bad --format: usage error" 2 "$rc"
run simulate "$tmp/does-not-exist.yaml"
check "a missing file: status" 1 "$rc"
contains "a missing file: message" "$err" "cannot open"
run simulate --help
contains "--help names the scenario mode" "$out" "SCENARIO.yaml"
run simulate --svg "$tmp/o.svg" "$examples/seed003-burst.yaml"
check "--svg before the file" 0 "$rc"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
