-- SPDX-License-Identifier: MIT
-- The counters every node shows for the whole cluster (src/server/rcounters.c, docs/cluster.md,
-- "Counters"): one node's flush of what it counted since its last one, applied at most once,
-- and the totals of every node read back in the same call. Sent with EVAL (a small script sent
-- once a second per node: no SHA to lose to a SCRIPT FLUSH).
--
-- KEYS[1]  <prefix>:{all}:counters           hash: counter name -> total (an integer string)
-- KEYS[2]  <prefix>:{all}:counters:node:<id> string: the node's last applied flush number
-- ARGV[1]  the flush's sequence number (a node's flushes are numbered 1, 2, ...; a flush whose
--          answer was lost is sent again with the same number and the same deltas)
-- ARGV[2]  how long, in ms, the node's number is kept after its last flush
-- ARGV[3..] name, delta pairs (deltas are positive decimal integers)
--
-- Returns {applied, {name, total, name, total, ...}}: applied is 1 when the deltas were added
-- now, 0 when this number had been applied already (a resent flush).
--
-- Invariant: a node's deltas are added once per sequence number: the number is written in the
-- same script as the increments, so Redis keeps both or neither (the AOF and replicas get the
-- script's effects as one transaction). HINCRBY adds exact 64-bit integers.
local seq = tonumber(ARGV[1])
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local applied = 0
if seq > last then
  for i = 3, #ARGV, 2 do
    redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
  end
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
  applied = 1
else
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return {applied, redis.call('HGETALL', KEYS[1])}
