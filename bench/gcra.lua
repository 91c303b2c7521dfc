-- SPDX-License-Identifier: MIT
-- GCRA rate limiting as one Redis Lua script: the usual way to get an atomic rate-limit decision
-- from Redis, and the baseline bench/server.sh compares `THROTTLE` with.
--
-- KEYS[1]  the bucket (one key per rate-limited subject)
-- ARGV[1]  permits per period        ARGV[2]  period in milliseconds
-- ARGV[3]  burst (units back to back) ARGV[4]  units asked
-- Returns {allowed 0|1, remaining, retry_after_ms, reset_after_ms}.
--
-- The key holds the theoretical arrival time (TAT) in microseconds and expires when it carries no
-- information (TAT in the past), so memory follows the active keys. Time is Redis's own clock
-- (TIME), so every client shares one clock.
local count = tonumber(ARGV[1])
local period_us = tonumber(ARGV[2]) * 1000
local burst = tonumber(ARGV[3])
local units = tonumber(ARGV[4])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = period_us / count
local tolerance = burst * interval

local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then
  tat = now
end
local new_tat = tat + units * interval

if new_tat - now > tolerance then
  local remaining = math.floor((tolerance - (tat - now)) / interval)
  return {0, remaining, math.ceil((new_tat - now - tolerance) / 1000), math.ceil((tat - now) / 1000)}
end

local ttl_ms = math.ceil((new_tat - now) / 1000)
redis.call('SET', KEYS[1], new_tat, 'PX', ttl_ms)
return {1, math.floor((tolerance - (new_tat - now)) / interval), 0, ttl_ms}
