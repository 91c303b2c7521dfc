#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Tests of `sluice check FILE`: the summary of the example configuration, and the one-line error
# and exit status for broken files written to a temporary directory.
#
# Usage: bash tests/cli/check.sh SLUICE_BINARY SOURCE_DIR    (CTest runs it so)
set -u

SLUICE=${1:?usage: check.sh SLUICE_BINARY SOURCE_DIR}
SRC=${2:?usage: check.sh SLUICE_BINARY SOURCE_DIR}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

passed=0
failed=0

ok() {
  passed=$((passed + 1))
}

bad() {
  failed=$((failed + 1))
  echo "FAIL: $*" >&2
}

# run ARGS...: runs sluice, capturing stdout, stderr and the exit status.
run() {
  "$SLUICE" "$@" >"$TMP/out" 2>"$TMP/err"
  status=$?
}

# expect_status N DESCRIPTION
expect_status() {
  if [ "$status" -eq "$1" ]; then ok; else bad "$2: exit status $status, expected $1"; fi
}

# expect_file FILE EXPECTED-TEXT DESCRIPTION: the file holds exactly the text.
expect_file() {
  if [ "$(cat "$1")" == "$2" ]; then
    ok
  else
    bad "$3: got"
    sed 's/^/    /' "$1" >&2
    echo "  expected" >&2
    printf '%s\n' "$2" | sed 's/^/    /' >&2
  fi
}

# broken NAME STATUS EXPECTED-STDERR <<YAML: checks a file that must be refused.
broken() {
  local name=$1 want_status=$2 want_err=$3
  cat >"$TMP/$name.yaml"
  (cd "$TMP" && "$SLUICE" check "$name.yaml" >out 2>err)
  status=$?
  expect_status "$want_status" "check $name.yaml"
  expect_file "$TMP/err" "$want_err" "stderr of check $name.yaml"
  expect_file "$TMP/out" "" "stdout of check $name.yaml"
}

# ---- The example file ---------------------------------------------------------------------------

cd "$SRC" || exit 1
run check examples/sluice.yaml
expect_status 0 "check examples/sluice.yaml"
expect_file "$TMP/err" "" "stderr of check examples/sluice.yaml"
expect_file "$TMP/out" "engine: max_tasks 1000000, max_parked 50000, max_finished 10000, strict_types true, event_interval 10s, default_lease 30s
limit llm_provider: rate 10/1m burst 100 start_empty horizon 30m, key none, overflow wait
limit tenant_api: rate 15/1m burst 15, key input.tenant_id, overflow wait
limit workflow_tier: tiers by input.agent_count [simple <=0: rate 100/1m burst 100; standard 1..2: rate 20/1m burst 20; heavy >=3: rate 5/1m burst 5], key input.user, overflow wait
limit per_user: sliding 20/1m, key input.user, overflow wait
limit runaway_breaker: window 50/1h, key input.workflow_id, overflow reject
limit daily_budget: quota 10000/day, key input.user, units input.estimated_cost_cents, overflow reject
limit agent_spawns: quota 5/total, key input.workflow_id, overflow reject
limit agent_slots: concurrency 10 ttl 2m, key none, overflow wait
limit emails: rate 5/1m burst 10, key explicit (missing: global), overflow wait
type llm.chat: limits llm_provider, per_user, workflow_tier, daily_budget, agent_slots; priority 0, lease 2m, retry 5 attempts exponential 2s..5m
type agent.spawn: limits runaway_breaker, agent_spawns; priority 10, lease 30s, no retry
type tenant.sync: limits tenant_api; priority 0, lease 30s, retry 3 attempts fixed 30s
type email.send: limits emails; priority -5, lease 10s, retry 3 attempts exponential 1s..5m
examples/sluice.yaml: ok, 9 limits, 4 types" "stdout of check examples/sluice.yaml"

# The brief's own example line, and the minimal file.
cat >"$TMP/stripe.yaml" <<'EOF'
limits:
  stripe:
    rate: 100/1m
    key: input.tenant_id
types:
  charge:
    limits: [stripe]
    retry: {max_attempts: 2, throttle_retries: false}
EOF
run check "$TMP/stripe.yaml"
expect_status 0 "check stripe.yaml"
expect_file "$TMP/out" "engine: max_tasks 10000000, max_parked 1000000, max_finished 10000, strict_types false, event_interval 10s, default_lease 30s
limit stripe: rate 100/1m burst 100, key input.tenant_id, overflow wait
type charge: limits stripe; priority 0, lease 30s, retry 2 attempts exponential 1s..5m, retries skip the limits
$TMP/stripe.yaml: ok, 1 limit, 1 type" "stdout of check stripe.yaml"

# ---- Broken files: one line on stderr, exit status 1 ---------------------------------------------

broken burst 1 'burst.yaml:4:12: limits.stripe.burst: expected a positive integer, got "ten"' <<'EOF'
limits:
  stripe:
    rate: 100/1m
    burst: ten
EOF

broken typo 1 'typo.yaml:4:5: limits.stripe: unknown key "brust"; did you mean "burst"?' <<'EOF'
limits:
  stripe:
    rate: 100/1m
    brust: 10
EOF

broken fat 1 'fat.yaml:5:12: limits.stripe.units: units 50 exceed the burst of 10: such a task could never start; split it into tasks of at most 10 units' <<'EOF'
limits:
  stripe:
    rate: 100/1m
    burst: 10
    units: 50
EOF

broken unknown_limit 1 'unknown_limit.yaml:6:22: types.charge.limits[1]: unknown limit "budgt"; did you mean "budget"?' <<'EOF'
limits:
  stripe: {rate: 100/1m}
  budget: {quota: 100/day}
types:
  charge:
    limits: [stripe, budgt]
EOF

broken tiers 1 'tiers.yaml:7:33: limits.t.tier.tiers[1].min: tier "standard" (2 to 5) overlaps tier "simple" (at most 2): a value must choose one tier' <<'EOF'
limits:
  t:
    tier:
      field: input.agent_count
      tiers:
        - {name: simple, max: 2, rate: 100/1m}
        - {name: standard, min: 2, max: 5, rate: 20/1m}
EOF

broken syntax 1 'syntax.yaml:3:2: YAML syntax error: did not find expected key (while parsing a block mapping at line 1, column 1)' <<'EOF'
limits:
  s: {rate: 1/1s}
 t: {rate: 1/1s}
EOF

broken empty 1 'empty.yaml:1:1: the file is empty: expected a mapping with the sections engine, limits and types' </dev/null

broken dup 1 'dup.yaml:3:3: limits: the limit "s" is declared twice (first at line 2)' <<'EOF'
limits:
  s: {rate: 1/1s}
  s: {rate: 2/1s}
EOF

run check "$TMP/does-not-exist.yaml"
expect_status 1 "check of a missing file"
expect_file "$TMP/err" "$TMP/does-not-exist.yaml: cannot open: No such file or directory" \
  "stderr of check of a missing file"

# ---- Usage: exit status 2 -------------------------------------------------------------------------

run check
expect_status 2 "check without a file"
expect_file "$TMP/err" "sluice check: no file given; usage: sluice check FILE" "stderr of check"

run check a.yaml b.yaml
expect_status 2 "check with two files"
expect_file "$TMP/err" 'sluice check: unexpected argument "b.yaml": one file at a time' \
  "stderr of check with two files"

run check --frobnicate examples/sluice.yaml
expect_status 2 "check with an unknown option"
expect_file "$TMP/err" "sluice check: unknown option --frobnicate; see sluice check --help" \
  "stderr of check --frobnicate"

run check --help
expect_status 0 "check --help"
if grep -q "^Usage: sluice check FILE" "$TMP/out"; then ok; else bad "check --help prints the usage"; fi

run help check
expect_status 0 "help check"
if grep -q "^Usage: sluice check FILE" "$TMP/out"; then ok; else bad "help check prints the usage"; fi

run --help
if grep -q "^  check " "$TMP/out"; then ok; else bad "sluice --help lists check"; fi

run check -- examples/sluice.yaml
expect_status 0 "check -- FILE"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
