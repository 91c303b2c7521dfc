#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# End-to-end tests of the HTTP decision API on the admin port (docs/http.md): the real
# `sluice serve` on ephemeral ports, driven by curl (bodies checked with jq) and redis-cli, to
# 127.0.0.1 only.
#
# - POST /v1/throttle: 200 with the remaining budget and RateLimit-* headers; 429 with
#   Retry-After and seed 004's error body (every field); peek charges nothing; a task type's
#   chain; the decisions are THROTTLE's (an HTTP grant is seen by RESP THROTTLE and back);
# - errors: 400 (not JSON, not an object, unknown member, wrong types, THROTTLE's WRONGARGS),
#   404 (unknown limit, path, task), 405 with Allow, 413 (by Content-Length, and chunked), 503
#   with Retry-After (BUSY: a limit at its max_keys);
# - POST /v1/tasks then GET /v1/tasks/{id}/explain; TASK.ADD's validation (400), EXISTS (409);
#   a worker blocked in TASK.GET is handed an HTTP-submitted task at once;
#   the answer waits for the commit (DEBUG FAULT SLOWSYNC) and is 503 when the commit fails
#   (DEBUG FAULT FULL), a task answered 201 survives a kill -9, and a submit still waiting when
#   the server stops is answered 503 SHUTDOWN;
# - auth: with --requirepass, 401 with WWW-Authenticate without the bearer token or with a wrong
#   one, 200 with it; Basic auth works too.
#
# Usage: bash tests/server/http.sh PATH-TO-SLUICE SOURCE-DIR
# Prints one line per failed check and "N passed, N failed"; exits non-zero on any failure.
set -u

sluice=${1:?usage: http.sh PATH-TO-SLUICE SOURCE-DIR}
. "$(dirname "$0")/lib.bash"

need_tools http.sh curl jq redis-cli

# jqok NAME FILTER: the last body passes the jq FILTER.
jqok() {
  if jq -e "$2" "$tmp/body" >/dev/null 2>&1; then ok; else bad "$1: $2 fails on $(head -c 600 "$tmp/body")"; fi
}

cat >"$tmp/sluice.yaml" <<'EOF'
limits:
  api:
    rate: 2/1h
    key: explicit
  big:
    rate: 5/1h
    key: explicit
  tenant:
    rate: 100/1h
    key: input.tenant
  quota:
    quota: {budget: 3, period: day}
    key: explicit
  one:
    rate: 10/1h
    key: explicit
    max_keys: 1
types:
  sync:
    limits: [tenant]
  chain:
    limits: [api, big]
EOF

start() { start_admin "$@"; }

# post PORT PATH BODY [CURL ARGS...]: POSTs BODY (JSON) into $tmp/body; prints the status.
post() {
  local port=$1 path=$2 body=$3
  shift 3
  curl -s -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' --max-time 60 \
    -H 'Content-Type: application/json' --data-binary "$body" "$@" "http://127.0.0.1:$port$path"
}
get() {
  local port=$1 path=$2
  shift 2
  curl -s -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' --max-time 60 "$@" \
    "http://127.0.0.1:$port$path"
}
# stop NAME: SIGTERM and wait.
stop() {
  local pidvar="PID_$1"
  kill -TERM "${!pidvar}"
  wait "${!pidvar}" 2>/dev/null
  stop_rc=$?
}
header() { grep -i "^$1:" "$tmp/headers" | head -1 | cut -d' ' -f2- | tr -d '\r'; }

start m
A=$A_m
P=$P_m

# ---- POST /v1/throttle: 200, 429 ---------------------------------------------------------------
check "throttle 1" 200 "$(post $A /v1/throttle '{"limit":"api","key":"alice"}')"
jqok "200 body" '.status == "ok" and .allowed == true and .peek == false and .name == "api" and .key == "alice" and .limit == 2 and .remaining == 1 and .retry_after_ms == 0 and (.reset_after_ms | type) == "number"'
check "RateLimit-Limit" 2 "$(header RateLimit-Limit)"
check "RateLimit-Remaining" 1 "$(header RateLimit-Remaining)"
check "Content-Type" "application/json" "$(header Content-Type)"
check "peek: 200" 200 "$(post $A /v1/throttle '{"limit":"api","key":"alice","peek":true}')"
jqok "peek body (remaining as if granted)" '.peek == true and .remaining == 0'
check "throttle 2" 200 "$(post $A /v1/throttle '{"limit":"api","key":"alice","units":1}')"
jqok "throttle 2 remaining" '.remaining == 0'
check "throttle 3: 429" 429 "$(post $A /v1/throttle '{"limit":"api","key":"alice"}')"
ra=$(header Retry-After)
within "Retry-After (s)" 1 1800 "$ra"
jqok "429 body" '.status == "failed" and .error == "Rate limit exceeded" and .error_type == "RateLimitError" and (.help | length) > 0'
jqok "429 details" '.details.limit_type == "rate" and .details.limit_name == "api" and .details.key == "alice" and .details.limit == 2 and .details.window == "3600 seconds" and .details.window_ms == 3600000 and .details.remaining == 0 and .details.peek == false'
jqok "429 retry_after_seconds" ".details.retry_after_seconds == $ra and .details.retry_after_ms > 0 and .details.retry_after_ms <= $ra * 1000"
jqok "429 message" '.details.message | test("Please wait [0-9]+s")'
check "429 RateLimit-Remaining" 0 "$(header RateLimit-Remaining)"
check "peek while denied: 429" 429 "$(post $A /v1/throttle '{"limit":"api","key":"alice","peek":true}')"
jqok "peek denied body" '.details.peek == true'
# Another key has its own budget; an HTTP grant is THROTTLE's: RESP sees it, and back.
check "bob 200" 200 "$(post $A /v1/throttle '{"limit":"api","key":"bob"}')"
check "RESP THROTTLE after HTTP" "1 2 0 0" "$(cli THROTTLE api bob | cut -d' ' -f1-4)"
check "HTTP after RESP: 429" 429 "$(post $A /v1/throttle '{"limit":"api","key":"bob"}')"
check "units 3 of 5" 200 "$(post $A /v1/throttle '{"limit":"big","key":"k","units":3}')"
jqok "units 3 remaining" '.remaining == 2 and .limit == 5'
check "units 9 of 5: 429" 429 "$(post $A /v1/throttle '{"limit":"big","key":"k","units":9}')"
jqok "never: no wait helps" '.details.retry_after_seconds == null and .details.retry_after_ms == -1'
check "never: no Retry-After" "" "$(header Retry-After)"
check "quota: 200" 200 "$(post $A /v1/throttle '{"limit":"quota","key":"q","units":3}')"
check "quota: 429" 429 "$(post $A /v1/throttle '{"limit":"quota","key":"q"}')"
jqok "quota details" '.details.limit_type == "quota" and .details.window == "1 day"'
# A task type: its chain decides as one; denied_by names the limit that said no.
check "chain 200" 200 "$(post $A /v1/throttle '{"limit":"chain","key":"c1"}')"
jqok "chain body" '.name == "chain" and .remaining == 1'
post $A /v1/throttle '{"limit":"chain","key":"c1"}' >/dev/null
check "chain 429" 429 "$(post $A /v1/throttle '{"limit":"chain","key":"c1"}')"
jqok "chain denied_by" '.details.limit_name == "api"'

# ---- Errors -------------------------------------------------------------------------------------
check "404 unknown limit" 404 "$(post $A /v1/throttle '{"limit":"nope","key":"x"}')"
jqok "404 body" '.status == "failed" and .error_type == "NotFoundError" and .code == "NOLIMIT" and (.details.message | test("nope"))'
check "400 not JSON" 400 "$(post $A /v1/throttle '{"limit":')"
jqok "400 body" '.error_type == "ValidationError" and .code == "BADREQUEST" and (.details.message | test("not JSON"))'
check "400 not an object" 400 "$(post $A /v1/throttle '[1,2]')"
check "400 empty body" 400 "$(post $A /v1/throttle '')"
check "400 unknown member" 400 "$(post $A /v1/throttle '{"limit":"api","key":"x","unit":2}')"
jqok "unknown member named" '.details.message | test("unit")'
check "400 units a string" 400 "$(post $A /v1/throttle '{"limit":"api","key":"x","units":"2"}')"
check "400 units 0 (THROTTLE's range)" 400 "$(post $A /v1/throttle '{"limit":"api","key":"x","units":0}')"
jqok "WRONGARGS from THROTTLE" '.code == "WRONGARGS" and (.details.message | test("UNITS"))'
check "400 peek not a boolean" 400 "$(post $A /v1/throttle '{"limit":"api","key":"x","peek":1}')"
check "400 no limit" 400 "$(post $A /v1/throttle '{"key":"x"}')"
check "400 duplicate member" 400 "$(post $A /v1/throttle '{"limit":"api","limit":"big","key":"x"}')"
check "400 key required" 400 "$(post $A /v1/throttle '{"limit":"api"}')"
check "one key of max_keys 1" 200 "$(post $A /v1/throttle '{"limit":"one","key":"first"}')"
check "503 BUSY past max_keys" 503 "$(post $A /v1/throttle '{"limit":"one","key":"second"}')"
jqok "503 body" '.code == "BUSY" and .error_type == "BusyError"'
check "503 Retry-After" 1 "$(header Retry-After)"
check "404 unknown path" 404 "$(post $A /v1/nothing '{}')"
check "405 GET /v1/throttle" 405 "$(get $A /v1/throttle)"
check "405 Allow" "POST" "$(header Allow)"
check "405 POST explain" 405 "$(post $A /v1/tasks/1/explain '{}')"
# 413: announced by Content-Length (refused before the body is read), and chunked.
head -c 200000 /dev/zero | tr '\0' 'a' >"$tmp/huge"
check "413 by Content-Length" 413 "$(curl -s -o "$tmp/body" -w '%{http_code}' --max-time 60 \
  --data-binary @"$tmp/huge" "http://127.0.0.1:$A/v1/throttle")"
jqok "413 body" '.code == "TOOLARGE"'
check "413 chunked" 413 "$(curl -s -o "$tmp/body" -w '%{http_code}' --max-time 60 \
  -H 'Transfer-Encoding: chunked' --data-binary @"$tmp/huge" "http://127.0.0.1:$A/v1/throttle")"
check "the server still answers" 200 "$(post $A /v1/throttle '{"limit":"api","key":"after413"}')"

# ---- POST /v1/tasks, GET /v1/tasks/{id}/explain -------------------------------------------------
check "submit 201" 201 "$(post $A /v1/tasks '{"type":"sync","payload":{"tenant":"t1","n":1}}')"
id=$(jq -r .id "$tmp/body")
jqok "submit body" ".status == \"ok\" and (.id | type) == \"number\" and .explain == \"/v1/tasks/$id/explain\""
check "Location" "/v1/tasks/$id/explain" "$(header Location)"
check "explain 200" 200 "$(get $A "/v1/tasks/$id/explain")"
jqok "explain body" ".id == $id and .state == \"queued\" and (.text | length) > 0"
check "TASK.INFO sees the payload" '{"tenant":"t1","n":1}' "$(field TASK.INFO "$id" payload)"
check "explain unknown 404" 404 "$(get $A /v1/tasks/999999/explain)"
jqok "explain 404 body" '.code == "NOTASK"'
check "explain bad id 404" 404 "$(get $A /v1/tasks/abc/explain)"
check "submit without type 400" 400 "$(post $A /v1/tasks '{"payload":{}}')"
check "submit key path missing 400" 400 "$(post $A /v1/tasks '{"type":"sync","payload":{"x":1}}')"
jqok "TASK.ADD's WRONGARGS" '.code == "WRONGARGS"'
check "submit priority, id, delay" 201 "$(post $A /v1/tasks '{"type":"sync","payload":{"tenant":"t2"},"priority":5,"id":"job-7","delay_ms":600000}')"
id2=$(jq -r .id "$tmp/body")
check "same task key: same id" 201 "$(post $A /v1/tasks '{"type":"sync","payload":{"tenant":"t2"},"id":"job-7"}')"
check "dedup id" "$id2" "$(jq -r .id "$tmp/body")"
# A task key held by a running task: EXISTS is 409.
check "submit run-1" 201 "$(post $A /v1/tasks '{"type":"sync","payload":{"tenant":"t3"},"id":"run-1","priority":100}')"
rid=$(jq -r .id "$tmp/body")
cli TASK.GET sync >/dev/null
check "EXISTS 409" 409 "$(post $A /v1/tasks '{"type":"sync","payload":{"tenant":"t3"},"id":"run-1"}')"
jqok "409 body" ".code == \"EXISTS\" and (.details.message | test(\"$rid\"))"
check "405 GET /v1/tasks" 405 "$(get $A /v1/tasks)"
# A worker blocked in TASK.GET is handed a task submitted over HTTP at once.
redis-cli -p "$P" TASK.GET wake TIMEOUT 20000 >"$tmp/wake" 2>&1 &
wake=$!
wait_until "the worker blocks" 30 blocked_is 1
check "submit for the blocked worker" 201 "$(post $A /v1/tasks '{"type":"wake","payload":{"n":42}}')"
wid=$(jq -r .id "$tmp/body")
t0=$(now_ms)
wait "$wake"
within "the blocked worker was woken (ms)" 0 5000 $(($(now_ms) - t0))
contains "the worker got the task" "$wid" "$(head -1 "$tmp/wake")"

# ---- Durability: the answer waits for the commit; a failed commit is 503 ------------------------
stop m
start d --enable-debug-commands
A=$A_d
P=$P_d
check "SLOWSYNC" OK "$(cli DEBUG FAULT SLOWSYNC 700)"
t0=$(now_ms)
check "slow commit: 201" 201 "$(post $A /v1/tasks '{"type":"sync","payload":{"tenant":"slow"}}')"
within "answered after the commit's fsync (ms)" 650 60000 $(($(now_ms) - t0))
check "SLOWSYNC off" OK "$(cli DEBUG FAULT CLEAR)"
t0=$(now_ms)
check "throttle does not wait for a commit" 200 "$(post $A /v1/throttle '{"limit":"api","key":"fast"}')"
check "FULL on" OK "$(cli DEBUG FAULT FULL on)"
check "failed commit: 503" 503 "$(post $A /v1/tasks '{"type":"sync","payload":{"tenant":"full"},"id":"full-1"}')"
jqok "503 body" '.code == "IOERR" and .error_type == "StorageError"'
check "503 Retry-After" 1 "$(header Retry-After)"
check "FULL off" OK "$(cli DEBUG FAULT FULL off)"
check "after the disk frees: 201" 201 "$(post $A /v1/tasks '{"type":"sync","payload":{"tenant":"ok"},"id":"durable-1"}')"
did=$(jq -r .id "$tmp/body")
{ kill -KILL "$PID_d" && wait "$PID_d"; } 2>/dev/null
start d
A=$A_d
P=$P_d
check "a 201 task survives kill -9" 200 "$(get $A "/v1/tasks/$did/explain")"
stop d
# A submit waiting for its commit when the server stops is answered (503 SHUTDOWN), and the
# server exits cleanly (MHD holds no suspended connection when it stops).
start d --enable-debug-commands
A=$A_d
P=$P_d
# The commit's fsync lasts 5 s: the SIGTERM below must come while the submit is still held,
# and on a busy machine seeing it held (a poll) can take a while. (The stop waits for the fsync.)
check "SLOWSYNC 5000" OK "$(cli DEBUG FAULT SLOWSYNC 5000)"
curl -s -o "$tmp/late" -w '%{http_code}' --max-time 60 --data-binary '{"type":"sync","payload":{"tenant":"late"}}' \
  "http://127.0.0.1:$A/v1/tasks" >"$tmp/late.status" &
late=$!
wait_until "the submit is held" 30 sh -c "redis-cli -p $P INFO persistence | grep -q '^held_replies:[1-9]'"
stop d
check "stopped while a submit waits: exit 0" 0 "$stop_rc"
wait "$late"
check "the waiting submit: 503" 503 "$(cat "$tmp/late.status")"
contains "SHUTDOWN" '"code":"SHUTDOWN"' "$(cat "$tmp/late")"

# ---- Auth ---------------------------------------------------------------------------------------
start auth --requirepass s3cret
A=$A_auth
check "401 without a token" 401 "$(post $A /v1/throttle '{"limit":"api","key":"z"}')"
jqok "401 body" '.error_type == "AuthenticationError" and .code == "NOAUTH"'
contains "WWW-Authenticate" "Bearer" "$(header WWW-Authenticate)"
check "401 wrong token" 401 "$(post $A /v1/throttle '{"limit":"api","key":"z"}' -H 'Authorization: Bearer nope')"
check "401 before a big body is read" 401 "$(curl -s -o "$tmp/body" -w '%{http_code}' --max-time 60 \
  --data-binary @"$tmp/huge" "http://127.0.0.1:$A/v1/tasks")"
check "200 with the bearer token" 200 "$(post $A /v1/throttle '{"limit":"api","key":"z"}' -H 'Authorization: Bearer s3cret')"
check "201 submit with the token" 201 "$(post $A /v1/tasks '{"type":"sync","payload":{"tenant":"a"}}' -H 'Authorization: Bearer s3cret')"
check "explain with Basic auth" 200 "$(get $A "/v1/tasks/$(jq -r .id "$tmp/body")/explain" -u x:s3cret)"
check "explain without: 401" 401 "$(get $A /v1/tasks/1/explain)"
stop auth

finish
